"""The KIP-1134 management plane end to end: `vcproxy virtual-clusters` against two real proxy replicas
(one state topic) in front of the real Kafka, with real clients of two libraries as tenants.

* the KIP's lifecycle: create a VC, link a topic, bind users, clients and groups, a confluent-kafka
  producer and a Java console consumer on the happy path, then remove it all and delete the VC, each
  step checked from the tenant's side and from the physical cluster;
* migration: a topic with data and a group with committed offsets, used on the physical cluster, moved
  into a VC: the tenant's consumer resumes at the committed offset, nothing lost or repeated; the topic
  shared with a second VC under another name; a transactional id moved with its producer state;
* who may call what (super-admin, VC admin, tenant, unbound), as exit codes and per-item errors;
* changes reach the other replica within a second, and live connections are closed when unbound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest

from proxy.auth.credentials import make_entry
from proxy.protocol import codec
from proxy.protocol import management as schema
from proxy.protocol.apikey import ApiKey
from vcproxy_tools.process import ProxyProcess, proxy_config

from .hardening_attacks import login
from .polling import seconds_until, until
from .ports import free_port_block
from .tenants import assert_clean_log, login_files, replayed, scram_conf
from .test_tenancy_sasl import consume, produce
from .tool_jvm import run_tool

USERS = {
    "admin": "admin-secret",  # super-admin: in kafka-cluster
    "alice": "alice-secret",  # tenant of team-a (seed)
    "dave": "dave-secret",  # team-a's VC admin, in team-a (seed)
    "carol": "carol-secret",  # bound at runtime
    "mallory": "mallory-secret",  # bound at runtime (migration)
    "trent": "trent-secret",  # bound at runtime (transactional id migration)
    "eve": "eve-secret",  # bound to nothing, not an admin: refused at login
}
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("management")


def _replica(kafka_cluster: Any, workdir: Path, name: str, state_topic: str) -> ProxyProcess:
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["PLAIN", "SCRAM-SHA-512"]},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        tenancy={
            "enabled": True,
            "state_topic": state_topic,
            "super_admins": ["User:admin"],
            "virtual_clusters": [
                {"name": "team-a", "principals": ["User:alice", "User:dave"], "admins": ["User:dave"]}
            ],
        },
    )
    return ProxyProcess(config, workdir, name=name).start(timeout=120)


@pytest.fixture(scope="module")
def replicas(kafka_cluster, workdir) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    state_topic = f"__vcproxy_state_mgmt_{uuid.uuid4().hex[:6]}"
    first = _replica(kafka_cluster, workdir, "mgmt-1", state_topic)
    second = _replica(kafka_cluster, workdir, "mgmt-2", state_topic)
    yield first, second
    second.stop()
    first.stop()
    for process in (first, second):
        assert_clean_log(process)


@pytest.fixture(scope="module")
def logins(workdir) -> dict[str, Path]:
    return login_files(workdir, USERS)


def vc_tool(proxy: ProxyProcess, login_file: Path, *args: str) -> tuple[int, Any]:
    """`vcproxy virtual-clusters ARGS --output json` as a user would run it: (exit code, parsed output)."""
    command, *rest = args
    argv = [sys.executable, "-m", "vcproxy_tools", "virtual-clusters", command, "--bootstrap-server", proxy.bootstrap]
    argv += ["--command-config", str(login_file), "--output", "json", *rest]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL, env=os.environ
    )
    try:
        out = json.loads(done.stdout) if done.stdout.strip() else None
    except json.JSONDecodeError:
        out = done.stdout
    assert done.returncode in (0, 1, 3, 4), f"exit {done.returncode}: {done.stdout}\n{done.stderr}"
    if done.returncode == 3:  # cannot connect or log in: what the tool says
        return 3, done.stderr
    return done.returncode, out


def ok(proxy: ProxyProcess, login_file: Path, *args: str) -> Any:
    code, out = vc_tool(proxy, login_file, *args)
    assert code == 0, out
    return out


def conf(proxy: ProxyProcess, user: str, **extra: Any) -> dict[str, Any]:
    return scram_conf(proxy, user, USERS[user], **extra)


def topics_seen(proxy: ProxyProcess, user: str) -> set[str]:
    admin = AdminClient(conf(proxy, user))
    return {t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")}


def physical_topic(kafka_cluster: Any, name: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3)], operation_timeout=30)[name].result(60)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} has no leaders")


def describe(proxy: ProxyProcess, user: str, vc: str) -> Any:
    """DescribeVirtualClusters over a raw connection (no process start: for timing)."""
    with login(proxy.bootstrap, user, USERS[user]) as client:
        request = schema.DescribeVirtualClustersRequest(virtual_clusters=(schema.DescribableVirtualCluster(name=vc),))
        _, body = client.request(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS, 0, 9, request)
    return body.virtual_clusters[0]


# -- the KIP's lifecycle --------------------------------------------------------------------------------


def test_lifecycle_of_a_virtual_cluster(kafka_cluster, replicas, logins):
    proxy, _ = replicas
    admin = logins["admin"]
    physical = f"teamC.orders.{uuid.uuid4().hex[:6]}"
    physical_topic(kafka_cluster, physical)

    # Create the VC: the state topic has it, with its own cluster id.
    ok(proxy, admin, "create", "--virtual-cluster", "team-c")
    assert "team-c" in ok(proxy, admin, "list")["virtual_clusters"]
    image = replayed(kafka_cluster, proxy)
    assert "team-c" in image.vcs and image.vcs["team-c"].cluster_id

    # Link the physical topic as "orders", bind carol and a client id, assign a group.
    ok(proxy, admin, "alter", "--virtual-cluster", "team-c", "--add", "--topic", physical, "--link", "orders")
    ok(proxy, admin, "alter", "--virtual-cluster", "team-c", "--add", "--user", "carol")
    ok(proxy, admin, "alter", "--virtual-cluster", "team-c", "--add", "--client", "team-c-batch")
    ok(proxy, admin, "alter", "--virtual-cluster", "team-c", "--add", "--group", "team-c-readers")
    described = ok(proxy, admin, "describe", "--virtual-cluster", "team-c")
    assert {"link": "orders", "physical": physical} in [
        {"link": t["link"], "physical": t["physical"]} for t in described["topic_links"]
    ], described
    assert "User:carol" in described["users"] and "team-c-batch" in described["client_ids"]
    assert "team-c-readers" in described["consumer_groups"]
    image = replayed(kafka_cluster, proxy)
    assert image.principals["User:carol"] == "team-c" and image.client_ids["team-c-batch"] == "team-c"

    # The tenant's view: just its link, under its name; alice (team-a) does not see it.
    assert seconds_until(lambda: "orders" in topics_seen(proxy, "carol"), "carol to see orders", TIMEOUT) < TIMEOUT
    assert topics_seen(proxy, "carol") == {"orders"}
    assert "orders" not in topics_seen(proxy, "alice") and physical not in topics_seen(proxy, "alice")

    # Happy path with two client libraries: confluent-kafka produces, Kafka's Java console consumer reads.
    values = [f"c{i}" for i in range(20)]
    produce(conf(proxy, "carol"), "orders", values)
    consumed = run_tool(
        "kafka-console-consumer",
        [
            "--bootstrap-server", proxy.bootstrap,
            "--command-config", str(logins["carol"]),
            "--topic", "orders",
            "--group", "team-c-readers",
            "--from-beginning",
            "--max-messages", str(len(values)),
            "--timeout-ms", "60000",
        ],
        timeout=TIMEOUT,
    )  # fmt: skip
    assert sorted(consumed.stdout.split()) == sorted(values), consumed.stderr[-2000:]
    # ...and the records are in the physical topic, the committed offsets in the physical group.
    reader = Consumer({"bootstrap.servers": kafka_cluster.bootstrap, "group.id": "team-c-readers"})
    try:
        committed = reader.committed([TopicPartition(physical, p) for p in range(3)], timeout=30)
        assert sum(max(tp.offset, 0) for tp in committed) == len(values)
    finally:
        reader.close()

    # Deleting a VC that is not empty is refused, and says what is left.
    code, out = vc_tool(proxy, admin, "delete", "--virtual-cluster", "team-c")
    assert code == 1 and out["results"][0]["error_code"] == 44, out

    # Remove link and resources: the tenant loses the topic at once; the physical topic stays.
    ok(proxy, admin, "alter", "--virtual-cluster", "team-c", "--remove", "--topic", physical, "--link", "orders")
    assert "orders" not in topics_seen(proxy, "carol")
    assert physical in AdminClient({"bootstrap.servers": kafka_cluster.bootstrap}).list_topics(timeout=30).topics
    for flag, value in (("--user", "carol"), ("--client", "team-c-batch"), ("--group", "team-c-readers")):
        ok(proxy, admin, "alter", "--virtual-cluster", "team-c", "--remove", flag, value)
    ok(proxy, admin, "delete", "--virtual-cluster", "team-c")
    assert "team-c" not in ok(proxy, admin, "list")["virtual_clusters"]
    image = replayed(kafka_cluster, proxy)
    assert "team-c" not in image.vcs and "User:carol" not in image.principals


# -- migration ------------------------------------------------------------------------------------------


def test_migration_keeps_data_and_committed_offsets(kafka_cluster, replicas, logins):
    proxy, _ = replicas
    admin = logins["admin"]
    physical = f"teamM.orders.{uuid.uuid4().hex[:6]}"
    group = f"orders-app-{uuid.uuid4().hex[:6]}"
    physical_topic(kafka_cluster, physical, partitions=1)
    direct = {"bootstrap.servers": kafka_cluster.bootstrap}
    values = [f"m{i}" for i in range(20)]
    produce(direct, physical, values)
    # The application, still on the physical cluster, reads and commits the first half.
    first = read_and_commit(direct, physical, group, 10)

    ok(proxy, admin, "create", "--virtual-cluster", "team-m")
    ok(proxy, admin, "alter", "--virtual-cluster", "team-m", "--add", "--topic", physical, "--link", "orders")
    ok(proxy, admin, "alter", "--virtual-cluster", "team-m", "--add", "--group", group)
    ok(proxy, admin, "alter", "--virtual-cluster", "team-m", "--add", "--user", "mallory")

    # Moved: the same group, through the proxy, resumes where it committed: nothing lost, nothing twice.
    rest = consume(conf(proxy, "mallory"), "orders", group, len(values) - len(first))
    assert sorted(first + rest) == sorted(values), (first, rest)
    assert topics_seen(proxy, "mallory") == {"orders"}

    # Shared: the same physical topic linked into team-a too, as another name; each sees its own name only.
    ok(proxy, admin, "alter", "--virtual-cluster", "team-a", "--add", "--topic", physical, "--link", "shared-orders")
    assert "shared-orders" in topics_seen(proxy, "alice") and "orders" not in topics_seen(proxy, "alice")
    assert topics_seen(proxy, "mallory") == {"orders"}
    shared = consume(conf(proxy, "alice"), "shared-orders", f"alice-{group}", len(values))
    assert sorted(shared) == sorted(values)


def test_migration_keeps_the_transactional_producer_state(kafka_cluster, replicas, logins):
    """A transactional id used on the physical cluster, assigned to a VC: the tenant's producer with the
    same id takes over its producer state (Kafka bumps the epoch and fences the old producer)."""
    proxy, _ = replicas
    admin = logins["admin"]
    physical = f"teamT.payments.{uuid.uuid4().hex[:6]}"
    txn = f"payments-tx-{uuid.uuid4().hex[:6]}"
    physical_topic(kafka_cluster, physical, partitions=1)
    old = Producer({"bootstrap.servers": kafka_cluster.bootstrap, "transactional.id": txn})
    old.init_transactions(60)
    old.begin_transaction()
    old.produce(physical, b"before")
    old.commit_transaction(60)

    ok(proxy, admin, "create", "--virtual-cluster", "team-t")
    ok(proxy, admin, "alter", "--virtual-cluster", "team-t", "--add", "--topic", physical, "--link", "payments")
    ok(proxy, admin, "alter", "--virtual-cluster", "team-t", "--add", "--transactional-id", txn)
    ok(proxy, admin, "alter", "--virtual-cluster", "team-t", "--add", "--user", "trent")
    assert txn in ok(proxy, admin, "describe", "--virtual-cluster", "team-t")["transactional_ids"]

    new = Producer({**conf(proxy, "trent"), "transactional.id": txn})
    new.init_transactions(60)  # the same physical transactional id: the old producer is fenced now
    new.begin_transaction()
    new.produce("payments", b"after")
    new.commit_transaction(60)
    with pytest.raises(KafkaException) as fenced:
        old.begin_transaction()
        old.produce(physical, b"stale")
        old.commit_transaction(60)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), fenced.value
    # Read committed, through the VC: both transactions' records, and nothing of the fenced one.
    seen = consume(conf(proxy, "trent"), "payments", "trent-readers", 2, **{"isolation.level": "read_committed"})
    assert sorted(seen) == ["after", "before"]
    old.purge()  # the fenced record; both clients end here, not when the proxies stop
    del old, new


def read_and_commit(conf: dict[str, Any], topic: str, group: str, count: int) -> list[str]:
    """Read exactly `count` records of partition 0 as `group` and commit the offset after them."""
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[str] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(seen) < count:
            assert time.monotonic() < deadline, seen
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                seen.append(msg.value().decode())
        consumer.commit(offsets=[TopicPartition(topic, 0, count)], asynchronous=False)
    finally:
        consumer.close()
    return seen


# -- who may call what ----------------------------------------------------------------------------------


def test_authorization_matrix(replicas, logins):
    proxy, _ = replicas
    ok(proxy, logins["admin"], "create", "--virtual-cluster", "team-z")
    # A VC admin: list shows its VCs only; describe and alter its own VC; nothing else.
    assert ok(proxy, logins["dave"], "list")["virtual_clusters"] == ["team-a"]
    assert "User:alice" in ok(proxy, logins["dave"], "describe", "--virtual-cluster", "team-a")["users"]
    ok(proxy, logins["dave"], "alter", "--virtual-cluster", "team-a", "--add", "--client", "team-a-batch")
    for args in (
        ("describe", "--virtual-cluster", "team-z"),
        ("alter", "--virtual-cluster", "team-z", "--add", "--client", "z"),
        ("create", "--virtual-cluster", "team-y"),
        ("delete", "--virtual-cluster", "team-z"),
        ("alter", "--virtual-cluster", "team-a", "--add", "--group", "someone-elses-group"),
    ):
        code, out = vc_tool(proxy, logins["dave"], *args)
        # 4: refused (the tool does not even send what ApiVersions does not offer this principal).
        assert code == 4 or (code == 1 and '"error_code": 31' in json.dumps(out)), (args, out)
    # A tenant may do nothing at all; a principal in no VC cannot even log in (everyone is somewhere).
    for args in (("list",), ("describe", "--virtual-cluster", "team-a"), ("create", "--virtual-cluster", "x")):
        code, out = vc_tool(proxy, logins["alice"], *args)
        assert code == 4, ("alice", args, out)
    code, out = vc_tool(proxy, logins["eve"], "list")
    assert code == 3 and "no virtual cluster" in out, out
    with pytest.raises(AssertionError, match="no virtual cluster"):
        login(proxy.bootstrap, "eve", USERS["eve"])
    # The proxy itself refuses what the tool would not send, with the API's own error in each item.
    create = schema.CreateVirtualClustersRequest(virtual_clusters=(schema.CreatableVirtualCluster(name="sneaky"),))
    describe_a = schema.DescribeVirtualClustersRequest(
        virtual_clusters=(schema.DescribableVirtualCluster(name="team-a"),)
    )
    for user in ("dave", "alice"):
        with login(proxy.bootstrap, user, USERS[user]) as raw:
            _, created = raw.request(ApiKey.CREATE_VIRTUAL_CLUSTERS, 0, 3, create)
            assert int(created.virtual_clusters[0].error_code) == 31, user
            _, listed = raw.request(ApiKey.LIST_VIRTUAL_CLUSTERS, 0, 4, schema.ListVirtualClustersRequest())
            assert int(listed.error_code) == (0 if user == "dave" else 31), user
            _, described = raw.request(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS, 0, 5, describe_a)
            assert int(described.virtual_clusters[0].error_code) == (0 if user == "dave" else 31), user
    assert "sneaky" not in ok(proxy, logins["admin"], "list")["virtual_clusters"]
    ok(proxy, logins["admin"], "delete", "--virtual-cluster", "team-z")


# -- an admin client built from aiven/inkless' schemas ----------------------------------------------------
# Its bytes are written here field by field from inkless' KIP-1134 JSON schemas (not with vcproxy's classes).

TAGS = b"\x00"  # no tagged fields


def _i16(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def _i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def _str(text: str | None) -> bytes:  # COMPACT_(NULLABLE_)STRING
    return b"\x00" if text is None else bytes([len(text.encode()) + 1]) + text.encode()


def _array(items: list[bytes]) -> bytes:  # COMPACT_ARRAY
    return bytes([len(items) + 1]) + b"".join(items)


def _inkless(key: int, correlation_id: int, body: bytes) -> bytes:
    """A flexible request (header v2: key, version 0, correlation id, client id, no tags)."""
    payload = _i16(key) + _i16(0) + _i32(correlation_id) + _i16(3) + b"ink" + TAGS + body
    return _i32(len(payload)) + payload


def _body(frame: bytes, correlation_id: int) -> bytes:
    """The body of a flexible response (header v1: correlation id, no tags)."""
    assert int.from_bytes(frame[4:8], "big") == correlation_id and frame[8:9] == TAGS
    return frame[9:]


def test_an_inkless_admin_client_manages_a_virtual_cluster_and_old_keys_are_closed(replicas):
    proxy, _ = replicas
    with login(proxy.bootstrap, "admin", USERS["admin"]) as raw:
        # CreateVirtualClusters (501): VirtualClusters[Name], timeoutMs, validateOnly.
        raw.send_raw(_inkless(501, 11, _array([_str("team-ink") + TAGS]) + _i32(30000) + b"\x00" + TAGS))
        ok_vc = _str("team-ink") + _i16(0) + _str(None) + TAGS  # Name, ErrorCode, ErrorMessage
        assert _body(raw.read_frame(), 11) == _i32(0) + _array([ok_vc]) + TAGS
        # AlterVirtualClusters (502): VirtualClusters[Name, Resources[ResourceType, ResourceOperation,
        # ResourceName, PhysicalTopicName]], timeoutMs, validateOnly. Client id (4), add (0).
        for correlation_id, operation in ((12, 0), (14, 1)):
            change = b"\x04" + bytes([operation]) + _str("ink-app")
            raw.send_raw(
                _inkless(
                    502,
                    correlation_id,
                    _array([_str("team-ink") + _array([change + _str(None) + TAGS]) + TAGS])
                    + _i32(30000)
                    + b"\x00"
                    + TAGS,
                )
            )
            done = _i32(0) + _array([_str("team-ink") + _array([change + _i16(0) + _str(None) + TAGS]) + TAGS]) + TAGS
            assert _body(raw.read_frame(), correlation_id) == done
            if operation == 0:
                # DescribeVirtualClusters (505): VirtualClusters[Name]; the client id is there.
                raw.send_raw(_inkless(505, 13, _array([_str("team-ink") + TAGS]) + TAGS))
                body = _body(raw.read_frame(), 13)
                described, _ = codec.decode(schema.DescribeVirtualClustersResponse, body)
                assert described.virtual_clusters[0].client_ids == ("ink-app",)
        # ListVirtualClusters (504): no fields.
        raw.send_raw(_inkless(504, 15, TAGS))
        listed, _ = codec.decode(schema.ListVirtualClustersResponse, _body(raw.read_frame(), 15))
        assert "team-ink" in {v.name for v in listed.virtual_clusters}
        # DeleteVirtualClusters (503): VirtualClusters[Name], timeoutMs, validateOnly; Responses[...].
        raw.send_raw(_inkless(503, 16, _array([_str("team-ink") + TAGS]) + _i32(30000) + b"\x00" + TAGS))
        assert _body(raw.read_frame(), 16) == _i32(0) + _array([ok_vc]) + TAGS
    # The key vcproxy served AlterVirtualClusters under before: closed at once, the log says where it went.
    with login(proxy.bootstrap, "admin", USERS["admin"]) as old:
        old.send_raw(_inkless(1135, 17, _array([]) + _i32(30000) + b"\x00" + TAGS))
        assert old.is_closed()
    until(
        lambda: (
            "API key 1135 is retired: vcproxy serves AlterVirtualClusters under key 502"
            in proxy.log_path.read_text(errors="replace")
        ),
        "the reason in the proxy's log",
    )


# -- live changes ---------------------------------------------------------------------------------------


def test_changes_reach_the_other_replica_within_a_second_and_unbinding_closes_connections(replicas, logins):
    first, second = replicas
    admin = logins["admin"]
    ok(first, admin, "create", "--virtual-cluster", "team-live")
    ok(first, admin, "alter", "--virtual-cluster", "team-live", "--add", "--user", "carol")
    assert (
        seconds_until(
            lambda: "User:carol" in describe(second, "admin", "team-live").users,
            "carol in team-live on the other replica",
            TIMEOUT,
        )
        < TIMEOUT
    )

    # carol has live connections to both replicas; the replica that did not make the change closes its
    # one within a second of the change being made on the other.
    on_second = login(second.bootstrap, "carol", USERS["carol"])
    _, metadata = on_second.request(3, 12, 5, codec._empty(MetadataRequest, topics=()))
    assert metadata.cluster_id == describe(second, "admin", "team-live").cluster_id
    started = time.monotonic()
    ok(first, admin, "alter", "--virtual-cluster", "team-live", "--remove", "--user", "carol")
    changed = time.monotonic()
    assert on_second.is_closed(timeout=30)
    assert time.monotonic() - changed < 1.0 + 0.5, f"closed {time.monotonic() - started:.2f} s after the change"
    on_second.close()

    # The change applies from the next connection: carol is in no VC, so she is refused at login (she
    # does not fall through to the physical cluster).
    with pytest.raises(AssertionError, match="no virtual cluster"):
        login(second.bootstrap, "carol", USERS["carol"])
    ok(first, admin, "delete", "--virtual-cluster", "team-live")
    assert (
        seconds_until(
            lambda: int(describe(second, "admin", "team-live").error_code) == 91,
            "team-live gone on the other replica",
            TIMEOUT,
        )
        < 1.0
    )
