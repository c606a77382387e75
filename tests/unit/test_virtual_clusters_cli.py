"""`vcproxy virtual-clusters` without a proxy: command-config logins, the requests it builds, its output
and its exit codes (the end-to-end runs are in tests/integration/test_management.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from kio.static.primitive import i8, i16

from proxy.protocol import management as m
from vcproxy_tools import virtual_clusters as cli
from vcproxy_tools.admin_client import ConfigProblem, login_from, read_properties
from vcproxy_tools.cli import build_parser


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["virtual-clusters", *argv, "--bootstrap-server", "h:1"])


def test_properties_as_java_reads_them():
    text = (
        "# comment\n! also\nsecurity.protocol = SASL_PLAINTEXT\n"
        "sasl.mechanism:SCRAM-SHA-512\nkey value\nlong=a\\\n  b\n"
    )
    assert read_properties(text) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "key": "value",
        "long": "ab",
    }


def test_command_config_logins(tmp_path: Path):
    path = tmp_path / "admin.properties"
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
        'password="p\\"w";\nssl.truststore.type=PEM\nssl.truststore.location=/ca.pem\n'
        "ssl.endpoint.identification.algorithm=\n"
    )
    login = login_from(path)
    assert (login.protocol, login.mechanism, login.username, login.password) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "admin",
        'p"w',
    )
    assert login.tls and login.sasl and login.cafile == "/ca.pem" and not login.check_hostname
    assert login_from(None).protocol == "PLAINTEXT"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("security.protocol=SASL_SOMETHING\n", "security.protocol"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n", "sasl.mechanism"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", "sasl.jaas.config"),
        (
            'security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=x required username="a";\n',
            "sasl.jaas.config",
        ),
        ("security.protocol=SSL\nssl.truststore.type=JKS\nssl.truststore.location=/t.jks\n", "ssl.truststore.type"),
    ],
)
def test_bad_command_configs_name_file_and_key(tmp_path: Path, text: str, key: str):
    path = tmp_path / "bad.properties"
    path.write_text(text)
    with pytest.raises(ConfigProblem, match=f"{path}: {key}: "):
        login_from(path)
    with pytest.raises(ConfigProblem, match="cannot read"):
        login_from(tmp_path / "missing.properties")


def test_requests_built_per_subcommand():
    create = cli._request(parse("create", "--virtual-cluster", "a", "--validate-only"))
    assert create == m.CreateVirtualClustersRequest(
        virtual_clusters=(m.CreatableVirtualCluster(name="a"),), validate_only=True
    )
    alter = cli._request(
        parse("alter", "--virtual-cluster", "a", "--add", "--topic", "teamA.orders", "--link", "orders")
    )
    (resource,) = alter.virtual_clusters[0].resources
    # inkless' layout: a topic link's name, then its physical topic
    assert (int(resource.resource_type), resource.resource_name, resource.physical_topic_name) == (
        m.ResourceType.TOPIC,
        "orders",
        "teamA.orders",
    )
    assert int(resource.resource_operation) == m.ResourceOperation.ADD
    removed = cli._request(parse("alter", "--virtual-cluster", "a", "--remove", "--group", "g"))
    assert int(removed.virtual_clusters[0].resources[0].resource_operation) == m.ResourceOperation.REMOVE
    assert isinstance(cli._request(parse("list")), m.ListVirtualClustersRequest)


@pytest.mark.parametrize(
    "argv",
    [
        ("alter", "--virtual-cluster", "a", "--add"),  # no resource
        ("alter", "--virtual-cluster", "a", "--add", "--user", "u", "--link", "x"),  # --link without --topic
        ("alter", "--virtual-cluster", "a", "--remove", "--user", "u", "--copy-acls-from", "kafka-cluster"),
        ("alter", "--virtual-cluster", "a", "--add", "--group", "g", "--remove-old-acls-from", "b"),
        ("alter", "--virtual-cluster", "a", "--add", "--user", "u", "--copy-acls-from", "a"),  # into itself
    ],
)
def test_usage_errors_change_nothing(argv: tuple[str, ...], capsys):
    args = parse(*argv)
    assert cli._run(args) == cli.USAGE  # refused before any connection is made
    if "--remove" in argv or "--group" in argv:
        assert "go with --add --user" in capsys.readouterr().err


def test_exclusive_flags_are_usage_errors():
    with pytest.raises(SystemExit) as exit_:
        parse("alter", "--virtual-cluster", "a", "--add", "--remove", "--user", "u")
    assert exit_.value.code == 2


def _alter_response(*codes: int) -> m.AlterVirtualClustersResponse:
    results = tuple(
        m.VirtualClusterResourceResult(
            resource_type=i8(m.ResourceType.USER),
            resource_name=f"u{i}",
            resource_operation=i8(m.ResourceOperation.ADD),
            error_code=i16(code),
            error_message=None if not code else "no",
        )
        for i, code in enumerate(codes)
    )
    return m.AlterVirtualClustersResponse(
        virtual_clusters=(m.AlterableVirtualClusterResult(name="a", resources=results),)
    )


def test_output_and_exit_codes():
    args = parse("alter", "--virtual-cluster", "a", "--add", "--user", "u")
    out, codes = cli._result(args, _alter_response(0))
    assert codes == [0] and cli._text(args, out) == "Changed virtual cluster a: add USER u0."
    out, codes = cli._result(args, _alter_response(0, 92))
    assert codes == [0, 92] and "Error 92" in cli._text(args, out)
    out, codes = cli._result(args, _alter_response(31))
    assert out["results"][0]["error_code"] == 31
    described = m.DescribeVirtualClustersResponse(
        virtual_clusters=(
            m.DescribedVirtualCluster(
                name="a",
                cluster_id="cid",
                users=("User:u",),
                topic_links=(m.VirtualClusterTopicLink(link_name="o", physical_name="p.o"),),
            ),
        )
    )
    out, codes = cli._result(parse("describe", "--virtual-cluster", "a"), described)
    assert codes == [0] and out["topic_links"] == [{"link": "o", "physical": "p.o"}] and out["cluster_id"] == "cid"
    text = cli._text(parse("describe", "--virtual-cluster", "a"), out)
    assert "o -> p.o" in text and "User:u" in text
