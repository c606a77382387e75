"""VC-scoped ACLs end to end: Kafka's own `kafka-acls` tool run by a VC admin against the real proxy in
front of the real Kafka, enforced on tenants using confluent-kafka (librdkafka) and Kafka's Java console
tools; two VCs whose ACLs never see each other.

team-a: alice (its admin), carol (a member); team-b: bob (its admin). The VCs keep the default (what no
ACL names is open), so the matrix shows both the ACLs and the default.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.auth.credentials import make_entry
from vcproxy_tools.process import ProxyProcess, proxy_config

from .ports import free_port_block
from .tenants import assert_clean_log, login_files, scram_conf
from .test_tenancy_sasl import consume, produce
from .tool_jvm import run_tool

USERS = {"admin": "admin-secret", "alice": "alice-secret", "carol": "carol-secret", "bob": "bob-secret"}
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("acls")


@pytest.fixture(scope="module")
def proxy(kafka_cluster, workdir) -> Iterator[ProxyProcess]:
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["PLAIN", "SCRAM-SHA-512"]},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        tenancy={
            "enabled": True,
            "state_topic": f"__vcproxy_state_acls_{uuid.uuid4().hex[:6]}",
            "super_admins": ["User:admin"],
            "virtual_clusters": [
                {"name": "team-a", "principals": ["User:alice", "User:carol"], "admins": ["User:alice"]},
                {"name": "team-b", "principals": ["User:bob"], "admins": ["User:bob"]},
            ],
        },
    )
    process = ProxyProcess(config, workdir, name="acls").start(timeout=120)
    yield process
    process.stop()
    assert_clean_log(process)


@pytest.fixture(scope="module")
def logins(workdir) -> dict[str, Path]:
    return login_files(workdir, USERS)


def conf(proxy: ProxyProcess, user: str, **extra: Any) -> dict[str, Any]:
    return scram_conf(proxy, user, USERS[user], **extra)


def acls(proxy: ProxyProcess, login_file: Path, *args: str) -> Any:
    return run_tool(
        "kafka-acls",
        ["--bootstrap-server", proxy.bootstrap, "--command-config", str(login_file), *args],
        timeout=TIMEOUT,
    )


def acls_ok(proxy: ProxyProcess, login_file: Path, *args: str) -> str:
    done = acls(proxy, login_file, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def produce_error(config: dict[str, Any], topic: str) -> KafkaError | None:
    """The delivery error of one message (None: delivered)."""
    producer = Producer({**config, "message.timeout.ms": 30000, "enable.idempotence": False})
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"x", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(60)
    assert len(errors) == 1, "no delivery report"
    return errors[0]


@pytest.fixture(scope="module")
def matrix(proxy, logins) -> dict[str, Any]:
    """team-a's topics, and the ACLs alice grants with kafka-acls."""
    admin = AdminClient(conf(proxy, "alice"))
    names = ["orders", "payments", "sales.eu", "sales.secret", "audit"]
    futures = admin.create_topics([NewTopic(n, 1, 1) for n in names], operation_timeout=30)
    for future in futures.values():
        future.result(60)
    a = logins["alice"]
    acls_ok(proxy, a, "--add", "--allow-principal", "User:carol", "--operation", "Read", "--topic", "orders")
    acls_ok(proxy, a, "--add", "--allow-principal", "User:carol", "--operation", "Read", "--group", "app")
    acls_ok(proxy, a, "--add", "--allow-principal", "User:alice", "--operation", "All", "--group", "ops")
    acls_ok(proxy, a, "--add", "--allow-principal", "User:alice", "--operation", "All", "--topic", "payments")
    acls_ok(
        proxy, a, "--add", "--allow-principal", "User:carol", "--operation", "Write",
        "--topic", "sales.", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    acls_ok(proxy, a, "--add", "--deny-principal", "User:carol", "--operation", "Write", "--topic", "sales.secret")
    acls_ok(
        proxy, a, "--add", "--deny-principal", "User:carol", "--deny-host", "127.0.0.1",
        "--operation", "All", "--topic", "audit",
    )  # fmt: skip
    return {"topics": names}


def test_kafka_acls_lists_the_vcs_acls_to_its_admin_only(proxy, logins, matrix):
    listed = acls_ok(proxy, logins["alice"], "--list")
    for expected in ("orders", "sales.", "PREFIXED", "User:carol", "operation=READ", "permissionType=DENY"):
        assert expected in listed, listed
    only_orders = acls_ok(proxy, logins["alice"], "--list", "--topic", "orders")
    assert "orders" in only_orders and "payments" not in only_orders
    # team-b has ACLs of its own on the same names; neither VC sees or applies the other's
    bob = AdminClient(conf(proxy, "bob"))
    bob.create_topics([NewTopic("orders", 1, 1)])["orders"].result(60)
    acls_ok(proxy, logins["bob"], "--add", "--deny-principal", "User:*", "--operation", "Read", "--topic", "orders")
    team_b = acls_ok(proxy, logins["bob"], "--list")
    assert "User:carol" not in team_b and "User:*" in team_b
    assert "User:*" not in acls_ok(proxy, logins["alice"], "--list")
    # carol (a member, not an admin) may not list them
    refused = acls(proxy, logins["carol"], "--list")
    assert "ClusterAuthorizationException" in refused.stdout + refused.stderr or refused.returncode != 0


def test_metadata_hides_topics_without_describe(proxy, matrix):
    carol = {t for t in AdminClient(conf(proxy, "carol")).list_topics(timeout=30).topics if not t.startswith("__")}
    # orders (READ implies DESCRIBE), the sales. prefix (WRITE implies DESCRIBE); payments is alice's only;
    # audit is denied from carol's host
    assert carol == {"orders", "sales.eu", "sales.secret"}
    alice = {t for t in AdminClient(conf(proxy, "alice")).list_topics(timeout=30).topics if not t.startswith("__")}
    assert set(matrix["topics"]) <= alice  # a VC admin is a super user in the VC


def test_writes_follow_the_acls(proxy, matrix):
    c = conf(proxy, "carol")
    assert produce_error(c, "sales.eu") is None  # prefixed allow
    for topic in ("orders", "sales.secret", "payments", "audit"):  # read only, deny over allow, not hers, host deny
        error = produce_error(c, topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, error)


def test_reads_need_the_topic_and_the_group(proxy, logins, matrix):
    # (team-b's deny of Read on its own `orders` for everyone does not reach team-a's `orders`)
    produce(conf(proxy, "alice"), "orders", ["o1", "o2"])
    assert consume(conf(proxy, "carol"), "orders", "app", 2) == ["o1", "o2"]
    with pytest.raises(KafkaException) as refused:
        consume(conf(proxy, "carol"), "orders", "ops", 1, timeout=30)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # Kafka's Java console consumer, as carol: the same answer through another client library
    done = run_tool(
        "kafka-console-consumer",
        [
            "--bootstrap-server", proxy.bootstrap, "--command-config", str(logins["carol"]),
            "--topic", "payments", "--group", "app", "--from-beginning", "--timeout-ms", "20000",
        ],
        timeout=TIMEOUT,
    )  # fmt: skip
    assert "TopicAuthorizationException" in done.stdout + done.stderr, done.stdout + done.stderr


def test_removing_an_acl_takes_effect_at_once(proxy, logins, matrix):
    a = logins["alice"]
    acls_ok(proxy, a, "--add", "--allow-principal", "User:carol", "--operation", "Write", "--topic", "orders")
    deadline = time.monotonic() + 10
    while produce_error(conf(proxy, "carol"), "orders") is not None:
        assert time.monotonic() < deadline, "the new ACL never applied"
    acls_ok(
        proxy, a, "--remove", "--force", "--allow-principal", "User:carol", "--operation", "Write", "--topic", "orders"
    )
    error = produce_error(conf(proxy, "carol"), "orders")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_the_super_admin_reaches_the_brokers_acls(proxy, logins):
    """admin (a super-admin: in kafka-cluster) sees the physical cluster: kafka-acls goes to the broker,
    whose StandardAuthorizer answers it (the proxy's upstream user is a broker super user); before, the
    proxy did not advertise CreateAcls/DeleteAcls and the tool failed with UnsupportedVersion."""
    done = acls(proxy, logins["admin"], "--list")
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "UnsupportedVersion" not in out and "SecurityDisabled" not in out, out


def test_the_super_admin_sets_the_brokers_client_quotas(proxy, logins):
    """`kafka-configs --entity-type clients` as admin goes to the broker (was UnsupportedVersion)."""
    client = f"acl-test-{uuid.uuid4().hex[:6]}"
    common = ["--bootstrap-server", proxy.bootstrap, "--command-config", str(logins["admin"])]
    common += ["--entity-type", "clients", "--entity-name", client]
    done = run_tool("kafka-configs", [*common, "--alter", "--add-config", "producer_byte_rate=4096"], timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    described = run_tool("kafka-configs", [*common, "--describe"], timeout=TIMEOUT)
    assert "producer_byte_rate=4096" in described.stdout, described.stdout + described.stderr
    removed = run_tool("kafka-configs", [*common, "--alter", "--delete-config", "producer_byte_rate"], timeout=TIMEOUT)
    assert removed.returncode == 0, removed.stdout + removed.stderr
