"""Kafka-style ssl.principal.mapping.rules and the RFC 2253 subject of client certificates."""

from __future__ import annotations

import ssl

import pytest
import trustme

from proxy.auth import ANONYMOUS
from proxy.auth.tls import (
    PrincipalMapper,
    PrincipalMappingError,
    client_context,
    distinguished_name,
    parse_rules,
    server_context,
)

DN = "CN=Alice,OU=Eng,O=Acme,C=US"
KAFKA_DOCS_RULES = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?)$/$1/L,DEFAULT"


@pytest.mark.parametrize(
    ("rules", "dn", "expected"),
    [
        ("DEFAULT", DN, DN),
        ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1/L,DEFAULT", DN, "alice"),
        ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$1@$3/U", DN, "ALICE@ACME"),
        ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),C=(.*?)$/$2-$1/", DN, "Eng-Alice"),
        # The example from Kafka's docs: the second rule only matches two-RDN names.
        (KAFKA_DOCS_RULES, "CN=Bob,OU=Ops", "bob"),
        (KAFKA_DOCS_RULES, "CN=svc,OU=ServiceUsers,O=A", "svc"),
        (KAFKA_DOCS_RULES, "CN=Dan,OU=Ops,O=Acme", "dan"),  # (.*?)$ still reaches the end: OU=Ops,O=Acme
        # The first rule does not match (no OU), so DEFAULT applies.
        ("RULE:^CN=(.*?),OU=(.*?)$/$1/L, DEFAULT", "CN=Carol,O=Acme", "CN=Carol,O=Acme"),
        # Whole-DN match: a pattern that matches only a prefix is not a match.
        ("RULE:CN=([^,]*)/$1/,DEFAULT", DN, DN),
        # Escaped '/' in the pattern and a literal '$' in the replacement.
        (r"RULE:^CN=(.*?)\/x,O=.*$/\$$1/", "CN=a/x,O=b", "$a"),
        # Named groups, and rules given as a YAML list.
        (["RULE:^CN=(?P<who>[^,]*),.*$/${who}/L", "DEFAULT"], DN, "alice"),
        # Group 12 does not exist: $12 is group 1 then '2' (Java's rule).
        ("RULE:^CN=(.*?),.*$/$12/", DN, "Alice2"),
    ],
)
def test_mapping_rules(rules, dn, expected):
    assert PrincipalMapper(rules).name_for(dn) == expected


def test_no_matching_rule_is_refused():
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=Eng$/$1/L")
    with pytest.raises(PrincipalMappingError, match="no principal mapping rule matches"):
        mapper.name_for("CN=mallory,OU=Sales")


def test_rule_mapping_to_empty_name_is_refused():
    with pytest.raises(PrincipalMappingError, match="empty name"):
        PrincipalMapper("RULE:^CN=(.*?),.*$/$1/").name_for("CN=,O=x")


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("", "no rules"),
        ("RULE:^CN=(.*)$/$1", "missing '/'"),
        ("RULE:^CN=(.*$/$1/", "bad regular expression"),
        ("RULE:^CN=(.*)$/$2/", "no group 2"),
        ("DEFAULT RULE:x/y/", "expected ','"),
        ("NOPE", "expected RULE:pattern/replacement/"),
        ("RULE:^CN=(.*)$/$1/X", "expected ','"),
    ],
)
def test_bad_rules_are_reported(rules, message):
    with pytest.raises(PrincipalMappingError, match=message):
        parse_rules(rules)


def _der(cert: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


def test_subject_is_rendered_like_java_x500principal():
    ca = trustme.CA()
    cert = ca.issue_cert("client", common_name="alice", organization_unit_name="eng", organization_name="Acme, Inc.")
    # Most specific RDN first, special characters escaped (RFC 2253).
    assert distinguished_name(_der(cert)) == r"CN=alice,OU=eng,O=Acme\, Inc."
    mapper = PrincipalMapper(r"RULE:^CN=(.*?),OU=(.*?),O=.*$/$1/U")
    assert mapper.principal_for(_der(cert)) == "User:ALICE"
    assert mapper.principal_for(None) == ANONYMOUS


def test_contexts_build_from_trustme_files(tmp_path):
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file = tmp_path / "ca.pem", tmp_path / "server.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    context = server_context(str(cert_file), None, str(ca_file), "required")
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert server_context(str(cert_file), None, str(ca_file), "requested").verify_mode == ssl.CERT_OPTIONAL
    assert server_context(str(cert_file)).verify_mode == ssl.CERT_NONE
    with pytest.raises(ValueError, match="needs a cafile"):
        server_context(str(cert_file), None, None, "required")
    client = client_context(str(ca_file), check_hostname=False)
    assert client.verify_mode == ssl.CERT_REQUIRED and not client.check_hostname


def test_tls_config_paths_are_relative_to_the_config_file(tmp_path):
    import yaml

    from proxy.config import ConfigError, load_config

    ca = trustme.CA()
    (tmp_path / "certs").mkdir()
    ca.cert_pem.write_to_path(str(tmp_path / "certs" / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "certs" / "proxy.pem"))
    tls = {"certfile": "certs/proxy.pem", "cafile": "certs/ca.pem", "client_auth": "required"}
    path = tmp_path / "proxy.yaml"

    def write(listeners: dict, upstream: dict | None = None) -> None:
        upstream = {"bootstrap_servers": ["k:9093"], **(upstream or {})}
        path.write_text(yaml.safe_dump({"listeners": listeners, "upstream": upstream}))

    write({"security_protocol": "SSL", "tls": {**tls, "principal_mapping_rules": ["RULE:^CN=(.*)$/$1/", "DEFAULT"]}})
    config = load_config(path)
    assert config.listeners.tls.certfile == str(tmp_path / "certs" / "proxy.pem")
    write({}, {"security_protocol": "SSL", "tls": {"cafile": "certs/ca.pem", "check_hostname": False}})
    assert load_config(path).upstream.tls.cafile == str(tmp_path / "certs" / "ca.pem")

    def ssl_with(**changes: object) -> dict:
        return {"security_protocol": "SSL", "tls": {**tls, **changes}}

    bad = [
        (ssl_with(cafile=None), "listeners.tls: Value error, client_auth required needs cafile"),
        (ssl_with(certfile="certs/ca.pem"), "listeners.tls: Value error, cannot load"),  # a CA, no key
        (ssl_with(keyfile="missing.pem"), "listeners.tls.keyfile: Value error, file not found"),
        (ssl_with(principal_mapping_rules="RULE:x"), "listeners.tls.principal_mapping_rules: Value error"),
        ({"security_protocol": "SSL"}, "listeners: Value error, security_protocol SSL needs tls"),
        ({"tls": tls}, "listeners: Value error, tls is set but security_protocol PLAINTEXT"),
    ]
    for listeners, message in bad:
        write(listeners)
        with pytest.raises(ConfigError, match=f"{path}: {message}"):
            load_config(path)
