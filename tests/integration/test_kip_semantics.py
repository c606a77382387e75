"""KIP-1134's delete and describe semantics against the real Kafka through a real proxy (SASL, a super-admin):

* deleting a topic in a VC removes the link and keeps the physical topic (the default); the name can be
  created again, as a new physical topic; a VC whose seed entry opts in deletes the physical topic too;
* kafka-cluster (the super-admin) cannot delete a physical topic a VC links: POLICY_VIOLATION naming the
  VC, the request's other topics deleted; once unlinked, it can;
* `virtual-clusters describe` lists the VC's own groups and transactional ids (the brokers' listings, in
  the VC's names); `delete` refuses a VC that still has them, naming them, and `delete --force` deletes
  it and its groups (their committed offsets) on the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.auth.credentials import make_entry
from vcproxy_tools.process import ProxyProcess, proxy_config

from .polling import until
from .ports import free_port_block
from .tenants import assert_clean_log, login_files, replayed, scram_conf
from .test_management import ok, vc_tool
from .test_tenancy import create
from .test_tenancy_sasl import consume, produce
from .tool_jvm import run_tool

USERS = {"admin": "admin-secret", "alice": "alice-secret", "carol": "carol-secret", "dan": "dan-secret"}
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kip-semantics")


@pytest.fixture(scope="module")
def proxy(kafka_cluster, workdir) -> Iterator[ProxyProcess]:
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["SCRAM-SHA-512"]},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        tenancy={
            "enabled": True,
            "state_topic": f"__vcproxy_state_kip_{uuid.uuid4().hex[:6]}",
            "super_admins": ["User:admin"],
            "virtual_clusters": [
                {"name": "team-a", "principals": ["User:alice"]},
                {"name": "purging", "principals": ["User:carol"], "delete_physical_topics": True},
            ],
        },
    )
    process = ProxyProcess(config, workdir, name="kip-semantics").start(timeout=120)
    yield process
    process.stop()
    assert_clean_log(process)


@pytest.fixture(scope="module")
def logins(workdir) -> dict[str, Path]:
    return login_files(workdir, USERS)


def conf(proxy: ProxyProcess, user: str, **extra: Any) -> dict[str, Any]:
    return scram_conf(proxy, user, USERS[user], **extra)


def physical_topics(kafka_cluster) -> set[str]:
    return set(AdminClient({"bootstrap.servers": kafka_cluster.bootstrap}).list_topics(timeout=10).topics)


def delete_topic(admin: AdminClient, name: str) -> None:
    admin.delete_topics([name], operation_timeout=30)[name].result(60)


def test_deleting_in_a_vc_unlinks_and_keeps_the_physical_topic(kafka_cluster, proxy):
    alice = AdminClient(conf(proxy, "alice"))
    create(alice, "kept", partitions=1)
    produce(conf(proxy, "alice"), "kept", ["one", "two"])
    first = replayed(kafka_cluster, proxy).vcs["team-a"].links["kept"]
    delete_topic(alice, "kept")
    until(lambda: "kept" not in replayed(kafka_cluster, proxy).vcs["team-a"].links, "the link to go")
    assert first in physical_topics(kafka_cluster)  # the KIP's default: the physical topic stays
    until(lambda: "kept" not in alice.list_topics(timeout=10).topics, "the topic to leave alice's view")
    # The name again: a new, empty physical topic, never the kept one.
    create(alice, "kept", partitions=1)
    second = replayed(kafka_cluster, proxy).vcs["team-a"].links["kept"]
    assert second != first and {first, second} <= physical_topics(kafka_cluster)
    produce(conf(proxy, "alice"), "kept", ["three"])
    assert consume(conf(proxy, "alice"), "kept", f"g-{uuid.uuid4().hex[:6]}", 1, timeout=30) == ["three"]


def test_a_vc_that_opts_in_deletes_the_physical_topic_with_its_last_link(kafka_cluster, proxy):
    carol = AdminClient(conf(proxy, "carol"))
    create(carol, "purged", partitions=1)
    physical = replayed(kafka_cluster, proxy).vcs["purging"].links["purged"]
    delete_topic(carol, "purged")
    until(lambda: physical not in physical_topics(kafka_cluster), "the physical topic to be deleted")
    assert "purged" not in replayed(kafka_cluster, proxy).vcs["purging"].links


def test_kafka_cluster_cannot_delete_a_linked_topic(kafka_cluster, proxy, logins):
    alice, admin = AdminClient(conf(proxy, "alice")), AdminClient(conf(proxy, "admin"))
    create(alice, "guarded", partitions=1)
    linked = replayed(kafka_cluster, proxy).vcs["team-a"].links["guarded"]
    plain = f"plain-{uuid.uuid4().hex[:6]}"
    broker = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})  # referenced until its future is done
    broker.create_topics([NewTopic(plain, 1, 1)])[plain].result(60)
    futures = admin.delete_topics([linked, plain], operation_timeout=30)
    with pytest.raises(KafkaException) as refused:
        futures[linked].result(60)
    error = refused.value.args[0]
    assert error.code() == KafkaError.POLICY_VIOLATION, error  # librdkafka's DeleteTopics v1 has no message
    futures[plain].result(60)  # the request's other topic is deleted
    until(lambda: plain not in physical_topics(kafka_cluster), "the unlinked topic to go")
    assert linked in physical_topics(kafka_cluster)
    assert "guarded" in alice.list_topics(timeout=10).topics
    # Kafka's own tool (DeleteTopics v6) shows the reason, naming the VC.
    argv = [
        "--bootstrap-server",
        proxy.bootstrap,
        "--command-config",
        str(logins["admin"]),
        "--delete",
        "--topic",
        linked,
    ]
    result = run_tool("kafka-topics", argv, timeout=120)
    assert result.returncode != 0 and "PolicyViolationException" in result.stderr, result.stderr[-2000:]
    assert "linked by virtual cluster(s) team-a" in result.stderr, result.stderr[-2000:]
    assert linked in physical_topics(kafka_cluster)
    # Unlinked (alice deletes it in her VC), the operator may delete what is left.
    delete_topic(alice, "guarded")
    until(lambda: "guarded" not in replayed(kafka_cluster, proxy).vcs["team-a"].links, "the link to go")
    until(lambda: not _refused(admin, linked), "the kept topic to be deletable")
    until(lambda: linked not in physical_topics(kafka_cluster), "the kept topic to be deleted")


def _refused(admin: AdminClient, topic: str) -> bool:
    """Delete `topic`; True while the proxy still refuses it (a replica that has not seen the unlink)."""
    try:
        delete_topic(admin, topic)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.POLICY_VIOLATION:
            return True
        raise
    return False


def test_describe_lists_own_groups_and_txns_and_delete_needs_force(kafka_cluster, proxy, logins):
    vc = f"team-d-{uuid.uuid4().hex[:4]}"
    ok(proxy, logins["admin"], "create", "--virtual-cluster", vc)
    ok(proxy, logins["admin"], "alter", "--virtual-cluster", vc, "--add", "--user", "dan")
    dan = AdminClient(conf(proxy, "dan"))
    until(lambda: _in_vc(dan), "dan to be placed in the new VC")
    create(dan, "events", partitions=1)
    produce(conf(proxy, "dan"), "events", ["e1", "e2"])
    assert consume(conf(proxy, "dan"), "events", "billing", 2, timeout=60) == ["e1", "e2"]  # offsets committed
    producer = Producer({**conf(proxy, "dan"), "transactional.id": "dan-tx"})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("events", b"in a transaction")
    producer.commit_transaction(60)

    described = ok(proxy, logins["admin"], "describe", "--virtual-cluster", vc)
    assert "billing" in described["consumer_groups"], described
    assert described["transactional_ids"] == ["dan-tx"], described

    # Emptied of what the state holds (the KIP: no users, clients, topics), it still has a group and a
    # transactional id on the broker: refused, naming them.
    delete_topic(dan, "events")
    ok(proxy, logins["admin"], "alter", "--virtual-cluster", vc, "--remove", "--user", "dan")
    code, out = vc_tool(proxy, logins["admin"], "delete", "--virtual-cluster", vc)
    [result] = out["results"]
    assert code == 1 and result["error_code"] == 44, out
    assert "billing" in result["error_message"] and "dan-tx" in result["error_message"], out
    physical_group = f"{replayed(kafka_cluster, proxy).vcs[vc].id}.billing"
    assert physical_group in _groups(kafka_cluster)

    ok(proxy, logins["admin"], "delete", "--virtual-cluster", vc, "--force")
    assert vc not in replayed(kafka_cluster, proxy).vcs
    assert physical_group not in _groups(kafka_cluster)  # its committed offsets went with it


def _in_vc(admin: AdminClient) -> bool:
    try:
        admin.list_topics(timeout=10)
    except KafkaException:
        return False
    return True


def _groups(kafka_cluster) -> set[str]:
    """The physical cluster's groups, as Kafka's own tool lists them."""
    result = run_tool("kafka-consumer-groups", ["--bootstrap-server", kafka_cluster.bootstrap, "--list"], timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(result.stdout.split())
