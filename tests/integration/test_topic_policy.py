"""The topic side of virtual clusters against a hostile member or admin, end to end: the real proxy in
front of the real Kafka, confluent-kafka's AdminClient as the tenants.

team-a: alice (its admin) created `orders`, which the operator also links into team-b as `a-orders`;
carol is a member with READ on `orders` only. team-b: bob (its admin). `legacy` is the physical
cluster's, linked into both. The topic policy is the safe default with at most 4 partitions a topic.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from proxy.auth.credentials import make_entry
from proxy.tenancy.model import derived_topic_for
from vcproxy_tools.demo import java_client_properties
from vcproxy_tools.process import ProxyProcess, proxy_config

from .ports import free_port_block
from .tenants import assert_clean_log, login_files, replayed, scram_conf
from .test_management import vc_tool
from .test_streams_groups import APP_ID, INPUT, INTERNAL, JAVA_DIR, OUTPUT, StreamsApp, classpath  # noqa: F401

USERS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "carol": "carol-secret",
    "sam": "sam-secret",  # team-a's Kafka Streams application
    "bob": "bob-secret",
}
MAX_PARTITIONS = 4


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("topic-policy")


@pytest.fixture(scope="module")
def proxy(kafka_cluster, workdir) -> Iterator[ProxyProcess]:
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["SCRAM-SHA-512"]},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        limits={"authentication_timeout_ms": 60000},  # a loaded CI machine starts the CLI slowly
        tenancy={
            "enabled": True,
            "state_topic": f"__vcproxy_state_policy_{uuid.uuid4().hex[:6]}",
            "super_admins": ["User:admin"],
            "topic_policy": {"max_partitions_per_topic": MAX_PARTITIONS},
            "virtual_clusters": [
                {
                    "name": "team-a",
                    "principals": ["User:alice", "User:carol", "User:sam"],
                    "admins": ["User:alice"],
                },
                {"name": "team-b", "principals": ["User:bob"], "admins": ["User:bob"]},
            ],
        },
    )
    process = ProxyProcess(config, workdir, name="topic-policy").start(timeout=120)
    yield process
    process.stop()
    assert_clean_log(process)


def admin(proxy: ProxyProcess, user: str) -> AdminClient:
    return AdminClient(scram_conf(proxy, user, USERS[user]))


def outcome(future: Any) -> tuple[int, str]:
    """(Kafka error code, its message) a future of the AdminClient ends with; (0, "") if it succeeded."""
    try:
        future.result(60)
    except KafkaException as exc:
        return exc.args[0].code(), exc.args[0].str()
    return 0, ""


def error_of(future: Any) -> int:
    return outcome(future)[0]


@pytest.fixture(scope="module")
def shared(kafka_cluster, proxy, workdir) -> dict[str, str]:
    """orders (team-a's, shared with team-b as a-orders) and legacy (the physical cluster's, in both)."""
    alice = admin(proxy, "alice")
    assert error_of(alice.create_topics([NewTopic("orders", 2, 1)], operation_timeout=30)["orders"]) == 0
    legacy = f"legacy-{uuid.uuid4().hex[:6]}"
    physical_admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    physical_admin.create_topics([NewTopic(legacy, 2, 1)])[legacy].result(60)
    orders = replayed(kafka_cluster, proxy).vcs["team-a"].links["orders"]
    login = login_files(workdir, {"admin": USERS["admin"]})["admin"]
    for vc, topic, link in (("team-b", orders, "a-orders"), ("team-a", legacy, "legacy"), ("team-b", legacy, "legacy")):
        code, out = vc_tool(proxy, login, "alter", "--virtual-cluster", vc, "--add", "--topic", topic, "--link", link)
        assert code == 0, out
    acl = AclBinding(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.LITERAL,
        "User:carol",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    for future in alice.create_acls([acl]).values():
        future.result(60)
    return {"orders": orders, "legacy": legacy}


def topics_of(proxy: ProxyProcess, user: str) -> set[str]:
    return {t for t in admin(proxy, user).list_topics(timeout=30).topics if not t.startswith("__")}


def test_a_read_only_member_cannot_remove_a_shared_topic_from_her_vc(proxy, shared):
    assert "orders" in topics_of(proxy, "carol")
    carol = admin(proxy, "carol")  # (must outlive its futures)
    futures = carol.delete_topics(["orders"], operation_timeout=30)
    assert error_of(futures["orders"]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "orders" in topics_of(proxy, "alice") and "a-orders" in topics_of(proxy, "bob")


def _retention(topic: str, value: str) -> ConfigResource:
    entry = ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)
    return ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])


def test_only_the_owner_truncates_reconfigures_or_grows_a_shared_topic(kafka_cluster, proxy, shared):
    bob = admin(proxy, "bob")
    for topic in ("a-orders", "legacy"):  # team-a's topic, and the physical cluster's
        (truncate,) = bob.delete_records([TopicPartition(topic, 0, -1)]).values()  # -1: the high watermark
        assert error_of(truncate) == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic
        (reconfigure,) = bob.incremental_alter_configs([_retention(topic, "86400000")]).values()
        code, message = outcome(reconfigure)
        assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED and "only the one that owns it" in message, topic
        grow = bob.create_partitions([NewPartitions(topic, 3)], operation_timeout=30)[topic]
        assert error_of(grow) == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic
    alice = admin(proxy, "alice")
    (reconfigure,) = alice.incremental_alter_configs([_retention("legacy", "86400000")]).values()
    assert error_of(reconfigure) == KafkaError.TOPIC_AUTHORIZATION_FAILED  # linked by two VCs, created by neither
    # the owner may
    (truncate,) = alice.delete_records([TopicPartition("orders", 0, -1)]).values()
    assert error_of(truncate) == 0
    (reconfigure,) = alice.incremental_alter_configs([_retention("orders", "86400000")]).values()
    assert error_of(reconfigure) == 0
    assert error_of(alice.create_partitions([NewPartitions("orders", 3)], operation_timeout=30)["orders"]) == 0
    # and the physical topic says so: 3 partitions, a day's retention
    physical = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    described = physical.describe_configs([ConfigResource(ResourceType.TOPIC, shared["orders"])])
    (configs,) = described.values()
    assert configs.result(60)["retention.ms"].value == "86400000"
    assert len(physical.list_topics(shared["orders"], timeout=30).topics[shared["orders"]].partitions) == 3


@pytest.mark.parametrize(("key", "value"), [("segment.ms", "1"), ("flush.messages", "1")])
def test_configs_that_cost_the_whole_cluster_are_policy_violations(proxy, shared, key, value):
    alice = admin(proxy, "alice")
    name = f"costly-{key.replace('.', '-')}"
    future = alice.create_topics([NewTopic(name, 1, 1, config={key: value})], operation_timeout=30)[name]
    code, message = outcome(future)
    assert code == KafkaError.POLICY_VIOLATION and f"'{key}'" in message, message
    assert name not in topics_of(proxy, "alice")
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    (altered,) = alice.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[entry])]
    ).values()
    assert error_of(altered) == KafkaError.POLICY_VIOLATION


def test_partitions_per_topic_are_bounded(proxy, shared):
    alice = admin(proxy, "alice")
    wide = alice.create_topics([NewTopic("wide", MAX_PARTITIONS + 1, 1)], operation_timeout=30)["wide"]
    assert error_of(wide) == KafkaError.POLICY_VIOLATION
    assert error_of(alice.create_topics([NewTopic("narrow", MAX_PARTITIONS, 1)], operation_timeout=30)["narrow"]) == 0
    grow = alice.create_partitions([NewPartitions("narrow", MAX_PARTITIONS + 1)], operation_timeout=30)["narrow"]
    assert error_of(grow) == KafkaError.POLICY_VIOLATION


# -- Kafka Streams internal topics ----------------------------------------------------------------------


class SaslStreamsApp(StreamsApp):
    """tests/integration/test_streams_groups.py's word count, logged in as a SCRAM user."""

    def __init__(self, jars: str, workdir: Path, user: str, bootstrap: str):
        super().__init__(jars, workdir, user, bootstrap, login=java_client_properties(user, USERS[user]), extra=())


_ACL_FIELDS = ("restype", "name", "resource_pattern_type", "principal", "host", "operation", "permission_type")


def _acl(
    rtype: Any, name: str, op: Any, permission: Any = AclPermissionType.ALLOW, principal: str = "User:sam"
) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, principal, "*", op, permission)


def test_a_streams_application_without_create_gets_no_internal_topics(
    kafka_cluster,
    proxy,
    shared,
    classpath,  # noqa: F811 (the fixture, imported above)
    workdir,
):
    alice = admin(proxy, "alice")
    for topic in (INPUT, OUTPUT):
        assert error_of(alice.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)[topic]) == 0
    denials = [
        _acl(ResourceType.TOPIC, "*", AclOperation.CREATE, AclPermissionType.DENY),
        _acl(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE, AclPermissionType.DENY),
    ]
    grants = [
        _acl(ResourceType.TOPIC, "*", AclOperation.ALL),
        _acl(ResourceType.GROUP, "*", AclOperation.ALL),
        _acl(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE),
    ]
    for future in alice.create_acls(grants + denials).values():
        future.result(60)
    app = SaslStreamsApp(classpath, workdir, "sam", proxy.bootstrap)
    try:
        deadline = time.monotonic() + 180
        refused = "internal topic 'wordcount-counts-changelog' refused: Unauthorized to CREATE on topics"
        while refused not in proxy.log_path.read_text(errors="replace"):
            assert app.proc.poll() is None, app.text()[-4000:]
            assert time.monotonic() < deadline, f"no refusal in the proxy's log:\n{proxy.log_tail()}"
            time.sleep(0.5)
        # The join never reached the broker: no internal topic, no link, while the member waits.
        team_a = replayed(kafka_cluster, proxy).vcs["team-a"]
        physical_admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
        derived = {derived_topic_for(team_a.id, name) for name in INTERNAL}
        physical = set(physical_admin.list_topics(timeout=30).topics)
        # (Other VCs of the session's cluster may run the same application: only team-a's names count.)
        mine = {t for t in physical if t.endswith(INTERNAL) and t.partition(".")[0] in _team_a_heads(team_a)}
        assert not derived & physical and not mine
        assert not set(INTERNAL) & set(team_a.links)
        # The application keeps running (Kafka's MISSING_INTERNAL_TOPICS status is not fatal) and, once
        # alice lifts the denials, rejoins and gets its internal topics, without a restart.
        filters = [AclBindingFilter(*(getattr(d, f) for f in _ACL_FIELDS)) for d in denials]
        for future in alice.delete_acls(filters).values():
            future.result(60)
        while not derived <= set(physical_admin.list_topics(timeout=30).topics):
            assert app.proc.poll() is None, app.text()[-4000:]
            assert time.monotonic() < deadline + 120, f"the internal topics never came:\n{app.text()[-4000:]}"
            time.sleep(1)
        assert set(INTERNAL) <= set(replayed(kafka_cluster, proxy).vcs["team-a"].links)
    finally:
        app.stop()
    assert "STATE ERROR" not in app.text(), app.text()[-4000:]


def _team_a_heads(vc) -> set[str]:
    """The UUID heads of every physical name team-a could give its internal topics (a few generations)."""
    from proxy.tenancy.model import created_topic_for

    return {created_topic_for(vc.id, name, g).partition(".")[0] for name in INTERNAL for g in range(8)}
