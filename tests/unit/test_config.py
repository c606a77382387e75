from pathlib import Path

import pytest

from proxy.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_minimal_config_defaults():
    config = parse_config({"upstream": {"bootstrap_servers": ["k:9092"]}})
    assert config.listeners.bootstrap_port == 9192
    assert config.listeners.effective_broker_port_base == 9193
    assert config.listeners.effective_advertised_host == "127.0.0.1"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"upstream": {"bootstrap_servers": ["k:9092"]}, "listner": {}}, "f.yaml: listner: unknown key"),
        ({"upstream": {"bootstrap_servers": ["k:9092"], "tlss": True}}, "f.yaml: upstream.tlss: unknown key"),
        ({"upstream": {"bootstrap_servers": ["k"]}}, "f.yaml: upstream.bootstrap_servers: Value error, 'k' is not"),
        ({"upstream": {"bootstrap_servers": []}}, "f.yaml: upstream.bootstrap_servers:"),
        ({}, "f.yaml: upstream: Field required"),
        (
            {"upstream": {"bootstrap_servers": ["k:1"]}, "listeners": {"bootstrap_port": 70000}},
            "f.yaml: listeners.bootstrap_port: Input should be less than or equal to 65535",
        ),
        ({"upstream": {"bootstrap_servers": ["k:1"]}, "listeners": {"host": "0.0.0.0"}}, "advertised_host must be set"),
        ([1, 2], "f.yaml: the top level must be a mapping"),
    ],
)
def test_bad_config_names_file_key_and_reason(data, expected):
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    assert expected in str(info.value)


def test_load_config_reports_unreadable_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("listeners: [unclosed")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize("name", ["demo.yaml", "example.yaml"])
def test_shipped_configs_are_valid(name):
    load_config(ROOT / "config" / name)


def test_cli_exits_2_with_message_on_bad_config(tmp_path, capsys):
    from vcproxy_tools.cli import main

    bad = tmp_path / "c.yaml"
    bad.write_text("upstream: {bootstrap_servers: ['k:1']}\nlisteners: {bogus: 1}\n")
    assert main(["serve", "--config", str(bad)]) == 2
    assert f"{bad}: listeners.bogus: unknown key" in capsys.readouterr().err


@pytest.fixture
def tls_listener(tmp_path):
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("bootstrap.kafka.example.com", "*.kafka.example.com")
    pem = tmp_path / "server.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    return {"security_protocol": "SSL", "tls": {"certfile": str(pem)}}


def test_sni_config(tls_listener):
    sni = {"broker_host_pattern": "broker-$(nodeId).kafka.example.com", "bootstrap_host": "bootstrap.kafka.example.com"}
    config = parse_config({"upstream": {"bootstrap_servers": ["k:1"]}, "listeners": {**tls_listener, "sni": sni}})
    assert config.listeners.sni is not None and config.listeners.sni.advertised_port is None


@pytest.mark.parametrize(
    ("listeners", "expected"),
    [
        ({"sni": {"broker_host_pattern": "b-$(nodeId).x"}}, "sni needs a TLS security_protocol"),
        ({"sni": {"broker_host_pattern": "broker.example.com"}}, "must hold $(nodeId) exactly once"),
        ({"sni": {"broker_host_pattern": "$(nodeId)-$(nodeId).x"}}, "must hold $(nodeId) exactly once"),
        ({"sni": {"broker_host_pattern": "b_$(nodeId).x"}}, "does not make DNS names"),
        ({"sni": {"broker_host_pattern": "b-$(nodeId).x", "bootstrap_host": "a..b"}}, "is not a DNS name"),
        ({"sni": {"broker_host_pattern": "b-$(nodeId).x", "advertised_port": 0}}, "greater than or equal to 1"),
        ({"sni": {"broker_host_pattern": "b-$(nodeId).x", "bogus": 1}}, "listeners.sni.bogus: unknown key"),
    ],
)
def test_bad_sni_config(tls_listener, listeners, expected):
    if "needs a TLS" not in expected:
        listeners = {**tls_listener, **listeners}
    with pytest.raises(ConfigError) as info:
        parse_config({"upstream": {"bootstrap_servers": ["k:1"]}, "listeners": listeners}, "f.yaml")
    assert expected in str(info.value)
    assert "f.yaml: listeners" in str(info.value)


def test_sni_and_broker_port_base_conflict(tls_listener):
    listeners = {**tls_listener, "broker_port_base": 9300, "sni": {"broker_host_pattern": "b-$(nodeId).x"}}
    with pytest.raises(ConfigError, match="broker_port_base is not used with sni"):
        parse_config({"upstream": {"bootstrap_servers": ["k:1"]}, "listeners": listeners}, "f.yaml")


def test_users_file(tmp_path):
    import yaml

    from proxy.auth.credentials import make_entry

    users = {"alice": make_entry("alice-secret", 4096, ["SCRAM-SHA-256"])}
    (tmp_path / "users.yaml").write_text(yaml.safe_dump(users))
    base = {"upstream": {"bootstrap_servers": ["k:1"]}, "listeners": {"security_protocol": "SASL_PLAINTEXT"}}
    config = parse_config({**base, "credentials": {"users_file": "users.yaml"}}, "f.yaml", tmp_path)
    assert list(config.credentials.as_mapping()) == ["alice"]
    # A copy of a config's credentials section is accepted as it is.
    (tmp_path / "section.yaml").write_text(yaml.safe_dump({"users": users}))
    config = parse_config({**base, "credentials": {"users_file": "section.yaml"}}, "f.yaml", tmp_path)
    assert list(config.credentials.as_mapping()) == ["alice"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("alice: {SCRAM-SHA-256: {salt: x}}", "users_file {path}: alice.SCRAM-SHA-256.iterations: Field required"),
        ("alice: {SCRAM-SHA-999: {}}", "users_file {path}: alice.SCRAM-SHA-999: unknown key"),
        ("[unclosed", "cannot read users_file {path}"),
        ("- a list", "users_file {path}: (top level)"),
    ],
)
def test_bad_users_file_names_the_file_and_key(tmp_path, content, expected):
    path = tmp_path / "users.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        parse_config({"upstream": {"bootstrap_servers": ["k:1"]}, "credentials": {"users_file": str(path)}}, "f.yaml")
    assert f"f.yaml: credentials: Value error, {expected.format(path=path)}" in str(info.value)


def test_users_and_users_file_are_exclusive(tmp_path):
    from proxy.auth.credentials import make_entry

    path = tmp_path / "users.yaml"
    path.write_text("{}")
    credentials = {"users_file": str(path), "users": {"bob": make_entry("b", 4096, ["SCRAM-SHA-256"])}}
    with pytest.raises(ConfigError, match="set users or users_file, not both"):
        parse_config({"upstream": {"bootstrap_servers": ["k:1"]}, "credentials": credentials}, "f.yaml")


def test_delete_physical_topics_is_off_by_default_and_set_per_vc():
    """KIP-1134: deleting in a VC removes the link; the physical topic goes only where the operator says."""
    tenancy = {
        "enabled": True,
        "virtual_clusters": [{"name": "keep"}, {"name": "purge", "delete_physical_topics": True}],
    }
    config = parse_config({"upstream": {"bootstrap_servers": ["k:9092"]}, "tenancy": tenancy})
    assert config.tenancy.delete_physical_topics is False
    assert [config.tenancy.delete_physical_topics_for(vc) for vc in ("keep", "purge", "other")] == [False, True, False]
    tenancy = {
        **tenancy,
        "delete_physical_topics": True,
        "virtual_clusters": [{"name": "keep", "delete_physical_topics": False}],
    }
    config = parse_config({"upstream": {"bootstrap_servers": ["k:9092"]}, "tenancy": tenancy})
    assert [config.tenancy.delete_physical_topics_for(vc) for vc in ("keep", "other")] == [False, True]


def test_the_old_delete_key_is_refused_with_its_new_name():
    data = {"upstream": {"bootstrap_servers": ["k:9092"]}, "tenancy": {"delete_physical_topic_with_last_link": True}}
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    assert "renamed delete_physical_topics" in str(info.value)
