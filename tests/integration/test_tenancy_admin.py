"""Topic and group administration, rack awareness, topic-id ownership and share groups in a VC.

Two virtual clusters bound by client id (`team-a-app`, `team-b-app`) on the 3-rack cluster, driven
with confluent-kafka, Kafka's own Java tools and a raw protocol client. Every change made through a
VC is also checked on the physical cluster, under the physical name the state topic records.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kio.schema.errors import ErrorCode

from proxy.protocol.apis import request_type
from proxy.tenancy.model import TenancyImage
from proxy.tenancy.names import DESCRIBED_INTERNAL, INTERNAL_TOPICS
from tests.integration.rawclient import RawClient
from tests.integration.test_fail_closed import build
from tests.integration.test_tenancy import consume, create, produce
from vcproxy_tools.process import ProxyProcess

from .polling import once_known, until
from .ports import free_port_block
from .tenants import by_client_id, replayed, tenancy_config
from .test_fail_closed import metadata_barrier
from .tool_jvm import run_tool

TENANTS = ("team-a", "team-b")
GROUP_CONFIG, TOPIC_CONFIG = 32, 2
UNKNOWN_TOPIC_ID = int(ErrorCode.unknown_topic_id)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition)


@pytest.fixture(scope="module")
def admin_proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("tenancy-admin")
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        by_client_id(TENANTS),
    )
    for tenant in TENANTS:  # --command-config files for the Java tools
        (workdir / f"{tenant}.properties").write_text(f"client.id={tenant}-app\n")
    process = ProxyProcess(config, workdir, name="tenancy-admin").start(timeout=120)
    yield process
    process.stop()


# -- helpers ---------------------------------------------------------------------------------------


def conf(proxy: ProxyProcess, tenant: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": proxy.bootstrap, "client.id": f"{tenant}-app", **extra}


def admin(proxy: ProxyProcess, tenant: str) -> AdminClient:
    return AdminClient(conf(proxy, tenant))


def tool(proxy: ProxyProcess, tenant: str, name: str, *args: str, check: bool = True, **kw: Any):
    """A Kafka Java tool as a VC client; admin tools take the client id from --command-config."""
    props = ["--command-config", str(proxy.workdir / f"{tenant}.properties")]
    bootstrap = ["--bootstrap-server", proxy.bootstrap]
    if name == "kafka-transactions":  # options before the subcommand
        argv = [*props, *bootstrap, *args]
    elif name.startswith("kafka-console"):
        argv = [*bootstrap, "--command-property", f"client.id={tenant}-app", *args]
    else:
        argv = [*bootstrap, *props, *args]
    result = run_tool(name, argv, timeout=kw.pop("timeout", 120), **kw)
    if check:
        assert result.returncode == 0, (
            f"{name} {args}: exit {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"
        )
    return result


def physical_admin(kafka_cluster) -> AdminClient:
    """An admin client on the physical cluster; keep it referenced until its futures are done."""
    return AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})


def state(kafka_cluster, proxy: ProxyProcess) -> TenancyImage:
    return replayed(kafka_cluster, proxy)


def physical_topic(kafka_cluster, proxy: ProxyProcess, tenant: str, link: str) -> str:
    return state(kafka_cluster, proxy).vcs[tenant].links[link]


def physical_topics(kafka_cluster) -> set[str]:
    return set(physical_admin(kafka_cluster).list_topics(timeout=10).topics)


def physical_configs(kafka_cluster, resource_type: int, name: str) -> dict[str, tuple[str | None, int]]:
    """name -> (value, source) as a broker reports them (asked directly, not through the proxy)."""
    broker = kafka_cluster.brokers[0]
    with RawClient(f"{broker.host}:{broker.port}") as client:
        request = build(request_type(32, 4), resources=[{"resource_type": resource_type, "resource_name": name}])
        _, response = client.request(32, 4, 1, request)
    [result] = response.results
    assert int(result.error_code) == 0, result
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def topic_lines(output: str) -> dict[str, int]:
    """`kafka-topics --describe` output -> topic -> number of partition lines."""
    counts: dict[str, int] = {}
    for line in output.splitlines():
        if match := re.match(r"\s+Topic: (\S+)\s+Partition: \d+", line):
            counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return counts


# -- KIP-36 racks and KIP-392 follower fetching ---------------------------------------------------------


def test_replicas_span_racks_and_a_rack_aware_consumer_reads_from_its_rack(kafka_cluster, admin_proxy):
    create(admin(admin_proxy, "team-a"), "racky", partitions=3)
    physical = physical_topic(kafka_cluster, admin_proxy, "team-a", "racky")
    rack_of = {b.node_id: b.rack for b in kafka_cluster.brokers}
    assert sorted(rack_of.values()) == ["r1", "r2", "r3"]
    direct = physical_admin(kafka_cluster)  # must outlive its futures
    described = once_known(lambda: direct.describe_topics(TopicCollection([physical]))[physical].result(30))
    for partition in described.partitions:
        assert len({rack_of[r.id] for r in partition.replicas}) == 3, partition

    per_partition = 100
    producer_conf = conf(admin_proxy, "team-a")
    produce_to_partitions(producer_conf, "racky", 3, per_partition)
    leaders = {
        p: meta.leader
        for p, meta in admin(admin_proxy, "team-a").list_topics("racky", timeout=10).topics["racky"].partitions.items()
    }
    local = next(node for node, rack in rack_of.items() if rack == "r2")
    remote = [p for p, leader in leaders.items() if leader != local]
    assert remote, f"every partition is led from r2 ({leaders}): nothing to fetch from a follower"

    lines: list[str] = []
    seen = consume_with_log(
        conf(admin_proxy, "team-a", **{"client.rack": "r2", "debug": "fetch"}), "racky", 3 * per_partition, lines
    )
    assert sorted(seen) == sorted(f"{p}-{i}" for p in range(3) for i in range(per_partition))
    for p in remote:
        migrated = f"Topic racky [{p}]: migrating from broker {leaders[p]} to {local} (leader is {leaders[p]})"
        assert any(migrated in line and "preferred replica" in line for line in lines), (p, migrated)
        # Every record of the partition came from the r2 follower, none from the leader.
        enqueued = [
            (int(m.group(1)), int(m.group(2)))
            for line in lines
            if (m := re.search(rf"/(\d+)\]: .*Enqueue (\d+) message\(s\) .* on racky \[{p}\] fetch queue", line))
        ]
        assert enqueued and {node for node, _ in enqueued} == {local}, (p, enqueued)
        assert sum(n for _, n in enqueued) == per_partition, (p, enqueued)


def produce_to_partitions(config: dict[str, Any], topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({**config, "acks": "all", "enable.idempotence": True})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p)
        producer.poll(0)
    assert producer.flush(60) == 0


def consume_with_log(config: dict[str, Any], topic: str, count: int, lines: list[str]) -> list[str]:
    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(f"librdkafka.{uuid.uuid4().hex[:6]}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(Collect())
    consumer = Consumer(
        {**config, "group.id": f"rack-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}, logger=logger
    )
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + 90
    while len(seen) < count and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=1):
            if msg.error():
                raise KafkaException(msg.error())
            seen.append(msg.value().decode())
    consumer.close()
    return seen


# -- configs ------------------------------------------------------------------------------------------


def test_topic_configs_are_the_vcs_topics(kafka_cluster, admin_proxy):
    for tenant in TENANTS:
        create(admin(admin_proxy, tenant), "configured", partitions=1)
    tool(
        admin_proxy,
        "team-a",
        "kafka-configs",
        *("--alter", "--entity-type", "topics", "--entity-name", "configured", "--add-config", "retention.ms=7200000"),
    )
    described = tool(
        admin_proxy, "team-a", "kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", "configured"
    ).stdout
    assert "Dynamic configs for topic configured are:" in described and "retention.ms=7200000" in described, described
    a_physical = physical_topic(kafka_cluster, admin_proxy, "team-a", "configured")
    b_physical = physical_topic(kafka_cluster, admin_proxy, "team-b", "configured")
    assert physical_configs(kafka_cluster, TOPIC_CONFIG, a_physical)["retention.ms"][0] == "7200000"
    assert physical_configs(kafka_cluster, TOPIC_CONFIG, b_physical)["retention.ms"][0] != "7200000"
    b_view = tool(
        admin_proxy, "team-b", "kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", "configured"
    ).stdout
    assert "retention.ms" not in b_view, b_view


def test_group_configs_are_the_vcs_groups(kafka_cluster, admin_proxy):
    tool(
        admin_proxy,
        "team-a",
        "kafka-configs",
        *("--alter", "--entity-type", "groups", "--entity-name", "tuned"),
        *("--add-config", "consumer.session.timeout.ms=50000"),
    )
    described = tool(
        admin_proxy, "team-a", "kafka-configs", "--describe", "--entity-type", "groups", "--entity-name", "tuned"
    ).stdout
    assert "Dynamic configs for group tuned are:" in described and "consumer.session.timeout.ms=50000" in described
    image = state(kafka_cluster, admin_proxy)
    a_group, b_group = (image.vcs[t].physical_id("tuned") for t in TENANTS)
    assert physical_configs(kafka_cluster, GROUP_CONFIG, a_group)["consumer.session.timeout.ms"][0] == "50000"
    assert physical_configs(kafka_cluster, GROUP_CONFIG, b_group)["consumer.session.timeout.ms"][0] != "50000"
    b_view = tool(
        admin_proxy, "team-b", "kafka-configs", "--describe", "--entity-type", "groups", "--entity-name", "tuned"
    ).stdout
    assert "consumer.session.timeout.ms" not in b_view, b_view


def test_broker_configs_are_refused_and_never_read(kafka_cluster, admin_proxy):
    before = physical_configs(kafka_cluster, 4, "1")
    secrets = [before[name][0] for name in ("advertised.listeners", "log.dirs", "listeners")]
    for args in (
        ("--describe", "--entity-type", "brokers", "--entity-name", "1"),
        ("--describe", "--entity-type", "brokers", "--entity-name", "1", "--all"),
        ("--describe", "--entity-type", "brokers", "--entity-default"),
        ("--describe", "--entity-type", "broker-loggers", "--entity-name", "1"),
        ("--alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config", "log.cleaner.threads=2"),
        ("--alter", "--entity-type", "brokers", "--entity-default", "--add-config", "message.max.bytes=1234567"),
    ):
        result = tool(admin_proxy, "team-a", "kafka-configs", *args, check=False)
        assert result.returncode != 0, (args, result.stdout)
        assert "ClusterAuthorizationException" in result.stderr, (args, result.stderr[-2000:])
        leaked = [s for s in secrets if s and (s in result.stdout or s in result.stderr)]
        assert not leaked, (args, leaked)
    broker = kafka_cluster.brokers[0]  # the one physical_configs asks
    metadata_barrier(f"{broker.host}:{broker.port}")  # a change that did reach the controller is on it now
    after = physical_configs(kafka_cluster, 4, "1")
    assert after == before
    assert "message.max.bytes" not in {n for n, (_, source) in physical_configs(kafka_cluster, 4, "").items()}


# -- topics: partitions, records, producers, deletion, listing ------------------------------------------------


def test_create_partitions(kafka_cluster, admin_proxy):
    for tenant in TENANTS:
        create(admin(admin_proxy, tenant), "grow", partitions=3)
    tool(admin_proxy, "team-a", "kafka-topics", "--alter", "--topic", "grow", "--partitions", "6")
    described = tool(admin_proxy, "team-a", "kafka-topics", "--describe", "--topic", "grow").stdout
    assert "PartitionCount: 6" in described and topic_lines(described) == {"grow": 6}, described
    image = state(kafka_cluster, admin_proxy)
    physical = {t: image.vcs[t].links["grow"] for t in TENANTS}
    metadata = physical_admin(kafka_cluster).list_topics(timeout=10).topics
    assert len(metadata[physical["team-a"]].partitions) == 6
    assert len(metadata[physical["team-b"]].partitions) == 3


def test_delete_records(kafka_cluster, admin_proxy):
    a = admin(admin_proxy, "team-a")
    create(a, "trim", partitions=1)
    produce(conf(admin_proxy, "team-a"), "trim", [str(i) for i in range(50)])
    deleted = a.delete_records([TopicPartition("trim", 0, 20)])
    [(_, future)] = deleted.items()
    assert future.result(30).low_watermark == 20
    earliest = a.list_offsets({TopicPartition("trim", 0): OffsetSpec.earliest()})
    assert [f.result(30).offset for f in earliest.values()] == [20]
    physical = physical_topic(kafka_cluster, admin_proxy, "team-a", "trim")
    direct = physical_admin(kafka_cluster)
    earliest = direct.list_offsets({TopicPartition(physical, 0): OffsetSpec.earliest()})
    assert [f.result(30).offset for f in earliest.values()] == [20]
    seen = consume(conf(admin_proxy, "team-a"), "trim", f"trim-{uuid.uuid4().hex[:6]}", 30)
    assert sorted(int(v) for v in seen) == list(range(20, 50))


def test_offset_delete(kafka_cluster, admin_proxy):
    group = "od-group"
    for tenant in TENANTS:
        create(admin(admin_proxy, tenant), "od-topic", partitions=1)
        produce(conf(admin_proxy, tenant), "od-topic", ["x"] * 5)
        consume(conf(admin_proxy, tenant), "od-topic", group, 5)  # commits 5
    out = tool(
        admin_proxy, "team-a", "kafka-consumer-groups", "--delete-offsets", "--group", group, "--topic", "od-topic"
    ).stdout
    assert "Request succeeded for deleting offsets from group od-group." in out, out
    assert re.search(r"od-topic\s+0\s+Successful", out), out

    def committed(client: AdminClient, group_id: str) -> dict[tuple[str, int], int]:
        [(_, future)] = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)]).items()
        return {(tp.topic, tp.partition): tp.offset for tp in future.result(30).topic_partitions}

    assert committed(admin(admin_proxy, "team-a"), group) == {}
    assert committed(admin(admin_proxy, "team-b"), group) == {("od-topic", 0): 5}
    image = state(kafka_cluster, admin_proxy)
    direct = physical_admin(kafka_cluster)
    assert committed(direct, image.vcs["team-a"].physical_id(group)) == {}
    b_physical = image.vcs["team-b"].links["od-topic"]
    assert committed(direct, image.vcs["team-b"].physical_id(group)) == {(b_physical, 0): 5}


def test_describe_topic_partitions_pages_through_the_vcs_topics_only(kafka_cluster, admin_proxy):
    names = [f"page-{i}" for i in range(5)]
    a = admin(admin_proxy, "team-a")
    for future in a.create_topics([NewTopic(n, 3, 3) for n in names], operation_timeout=30).values():
        future.result(60)
    create(admin(admin_proxy, "team-b"), "b-page", partitions=2)
    until(
        lambda: all(
            t.error is None and len(t.partitions) == 3 and all(p.leader >= 0 for p in t.partitions.values())
            for n, t in a.list_topics(timeout=10).topics.items()
            if n in names
        ),
        "leaders of the new topics",
    )
    listed = set(a.list_topics(timeout=10).topics)
    # The VC's own topics, and Kafka's internal ones as a broker shows them (DESCRIBED_INTERNAL). An internal
    # topic may appear between two listings: the brokers create __share_group_state when a share group first
    # needs it, whenever an earlier module's share consumer got there (v9 of issue 24: it appeared between this
    # test's Metadata and its DescribeTopicPartitions, and the cursor named it).
    a_topics = listed - DESCRIBED_INTERNAL
    assert set(names) <= a_topics and "b-page" not in a_topics

    def own(seen: set[str]) -> set[str]:
        assert seen & INTERNAL_TOPICS <= DESCRIBED_INTERNAL, seen
        return seen - DESCRIBED_INTERNAL

    # Java: TopicCommand --describe uses DescribeTopicPartitions in 4.x; two partitions per response.
    out = tool(admin_proxy, "team-a", "kafka-topics", "--describe", "--partition-size-limit-per-response", "2").stdout
    counts = topic_lines(out)
    assert own(set(counts)) == a_topics, counts
    assert all(counts[n] == 3 for n in names), counts

    # Raw: follow the cursor page by page; every name on the wire is a link name of team-a.
    pages, partitions = 0, set()
    cursor = None
    with RawClient(admin_proxy.bootstrap) as client:
        while True:
            request = build(request_type(75, 0), topics=[], response_partition_limit=2, cursor=cursor)
            client.send_raw(RawClient.encode(75, 0, pages + 1, request, client_id="team-a-app"))
            raw = client.read_frame()
            _, response = RawClient.decode(75, 0, raw)
            pages += 1
            assert pages < 100
            for topic in response.topics:
                assert int(topic.error_code) == 0 and topic.name in a_topics | DESCRIBED_INTERNAL, topic
                partitions |= {(topic.name, int(p.partition_index)) for p in topic.partitions}
            assert b"b-page" not in raw
            if response.next_cursor is None:
                break
            assert response.next_cursor.topic_name in a_topics | DESCRIBED_INTERNAL, response.next_cursor
            cursor = {
                "topic_name": response.next_cursor.topic_name,
                "partition_index": int(response.next_cursor.partition_index),
            }
    assert {(n, p) for n in names for p in range(3)} <= partitions
    assert own({t for t, _ in partitions}) == a_topics
    assert pages >= len(partitions) // 2

    b_out = tool(admin_proxy, "team-b", "kafka-topics", "--describe").stdout
    assert not set(topic_lines(b_out)) & set(names), b_out


def test_describe_producers(kafka_cluster, admin_proxy):
    create(admin(admin_proxy, "team-a"), "producers", partitions=1)
    produce(conf(admin_proxy, "team-a"), "producers", [str(i) for i in range(10)])  # idempotent: a producer id
    args = ("describe-producers", "--topic", "producers", "--partition", "0")
    out = tool(admin_proxy, "team-a", "kafka-transactions", *args).stdout
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert out.startswith("ProducerId") and len(rows) == 1, out
    assert int(rows[0][0]) >= 0 and rows[0][3] == "9", out  # LastSequence of 10 records


def test_delete_topic_removes_the_link_and_keeps_the_physical_topic(kafka_cluster, admin_proxy):
    """KIP-1134 (tenancy.delete_physical_topics: false, the default): the VC's link goes, the topic stays."""
    for tenant in TENANTS:
        create(admin(admin_proxy, tenant), "doomed", partitions=1)
        produce(conf(admin_proxy, tenant), "doomed", [f"{tenant}-{i}" for i in range(5)])
    image = state(kafka_cluster, admin_proxy)
    a_physical, b_physical = (image.vcs[t].links["doomed"] for t in TENANTS)
    assert a_physical in image.topic_ids

    tool(admin_proxy, "team-a", "kafka-topics", "--delete", "--topic", "doomed")
    until(lambda: "doomed" not in state(kafka_cluster, admin_proxy).vcs["team-a"].links, "the link to go")
    assert a_physical in physical_topics(kafka_cluster)  # kept, for an operator to delete
    assert image.vcs["team-b"].links["doomed"] == b_physical and b_physical in physical_topics(kafka_cluster)
    assert "doomed" not in admin(admin_proxy, "team-a").list_topics(timeout=10).topics
    seen = consume(conf(admin_proxy, "team-b"), "doomed", f"after-{uuid.uuid4().hex[:6]}", 5)
    assert sorted(seen) == [f"team-b-{i}" for i in range(5)]


def test_delete_groups(kafka_cluster, admin_proxy):
    group = "dg"
    for tenant in TENANTS:
        create(admin(admin_proxy, tenant), "dg-topic", partitions=1)
        produce(conf(admin_proxy, tenant), "dg-topic", ["x"])
        consume(conf(admin_proxy, tenant), "dg-topic", group, 1)
    out = tool(admin_proxy, "team-a", "kafka-consumer-groups", "--delete", "--group", group).stdout
    assert "Deletion of requested consumer groups ('dg') was successful." in out, out
    listed = {t: tool(admin_proxy, t, "kafka-consumer-groups", "--list").stdout.split() for t in TENANTS}
    assert group not in listed["team-a"] and group in listed["team-b"], listed
    image = state(kafka_cluster, admin_proxy)
    direct = physical_admin(kafka_cluster)
    physical_groups = {g.group_id for g in direct.list_consumer_groups().result(30).valid}
    assert image.vcs["team-a"].physical_id(group) not in physical_groups
    assert image.vcs["team-b"].physical_id(group) in physical_groups


def test_a_topic_the_vc_does_not_have_is_unknown_never_the_other_vcs(kafka_cluster, admin_proxy):
    create(admin(admin_proxy, "team-b"), "b-only", partitions=1)
    b_physical = physical_topic(kafka_cluster, admin_proxy, "team-b", "b-only")
    a = admin(admin_proxy, "team-a")
    for name in ("b-only", b_physical):  # the other VC's link name, and its physical name
        topic = a.list_topics(name, timeout=10).topics[name]
        assert topic.error is not None and topic.error.code() == UNKNOWN_TOPIC_OR_PARTITION and not topic.partitions
        with pytest.raises(KafkaException) as described:
            a.describe_topics(TopicCollection([name]))[name].result(30)
        assert described.value.args[0].code() == UNKNOWN_TOPIC_OR_PARTITION
        configs = tool(
            admin_proxy, "team-a", "kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", name
        ).stdout
        assert "doesn't exist" in configs, configs
        topics = tool(admin_proxy, "team-a", "kafka-topics", "--describe", "--topic", name, check=False)
        assert topics.returncode != 0 and f"Topic '{name}' does not exist" in topics.stdout + topics.stderr
    assert "b-only" not in tool(admin_proxy, "team-a", "kafka-topics", "--list").stdout.split()


# -- topic ids belong to one VC ---------------------------------------------------------------------------


def test_another_vcs_topic_id_is_unknown(kafka_cluster, admin_proxy):
    for tenant in TENANTS:
        create(admin(admin_proxy, tenant), "by-id", partitions=1)
        produce(conf(admin_proxy, tenant), "by-id", [f"{tenant}-secret"])
    image = state(kafka_cluster, admin_proxy)
    a_physical, b_physical = (image.vcs[t].links["by-id"] for t in TENANTS)
    a_id, b_id = image.topic_ids[a_physical], image.topic_ids[b_physical]

    def ask(key: int, version: int, **values: Any) -> tuple[Any, bytes]:
        with RawClient(admin_proxy.bootstrap) as client:
            client.send_raw(
                RawClient.encode(key, version, 7, build(request_type(key, version), **values), "team-a-app")
            )
            raw = client.read_frame()
        return RawClient.decode(key, version, raw)[1], raw

    for topic_id, expected in ((a_id, ("by-id", 0)), (b_id, (None, UNKNOWN_TOPIC_ID))):
        metadata, raw = ask(3, 12, topics=[{"topic_id": topic_id, "name": None}])
        [topic] = metadata.topics
        assert (topic.name, int(topic.error_code)) == expected, topic
        if topic_id == b_id:
            assert not topic.partitions and b_physical.encode() not in raw

    fetch = {
        "replica_id": -1,
        "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": datetime.timedelta(0),
        "max_bytes": 1 << 20,
        "session_epoch": -1,  # no fetch session
        "topics": [
            {
                "topic_id": b_id,
                "partitions": [
                    {
                        "partition": 0,
                        "fetch_offset": 0,
                        "current_leader_epoch": -1,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
    }
    for version in (16, 17):
        response, raw = ask(1, version, **fetch)
        assert int(response.error_code) == 0
        [topic] = response.responses
        [partition] = topic.partitions
        assert int(partition.error_code) == UNKNOWN_TOPIC_ID and not partition.records, partition
        assert b"team-b-secret" not in raw and b_physical.encode() not in raw

    deleted, _ = ask(20, 6, topics=[{"name": None, "topic_id": b_id}], timeout=datetime.timedelta(seconds=30))
    [result] = deleted.responses
    assert int(result.error_code) == UNKNOWN_TOPIC_ID and result.name is None, result
    assert b_physical in physical_topics(kafka_cluster)
    assert state(kafka_cluster, admin_proxy).vcs["team-b"].links["by-id"] == b_physical
    assert "by-id" in admin(admin_proxy, "team-b").list_topics(timeout=10).topics


def test_create_topics_answers_with_the_new_topics_id(kafka_cluster, admin_proxy):
    """CreateTopics v7+ returns the topic id (KIP-516); it is the VC's own topic, so the client gets it."""
    request = build(
        request_type(19, 7),
        topics=[{"name": "with-id", "num_partitions": 1, "replication_factor": 3}],
        timeout=datetime.timedelta(seconds=30),
    )
    with RawClient(admin_proxy.bootstrap) as client:
        client.send_raw(RawClient.encode(19, 7, 1, request, client_id="team-a-app"))
        _, created = RawClient.decode(19, 7, client.read_frame())
        client.send_raw(
            RawClient.encode(3, 12, 2, build(request_type(3, 12), topics=[{"name": "with-id"}]), "team-a-app")
        )
        _, metadata = RawClient.decode(3, 12, client.read_frame())
    [result] = created.topics
    [topic] = metadata.topics
    assert (result.name, int(result.error_code)) == ("with-id", 0), result
    assert topic.topic_id not in (None, uuid.UUID(int=0))
    image = state(kafka_cluster, admin_proxy)
    assert image.topic_ids[image.vcs["team-a"].links["with-id"]] == topic.topic_id
    assert result.topic_id == topic.topic_id, f"CreateTopics v7 answered topic id {result.topic_id}"


# -- share groups (KIP-932) ----------------------------------------------------------------------------------


def test_share_groups(kafka_cluster, admin_proxy):
    groups = {"team-a": "SG", "team-b": "SG-b"}
    for tenant, group in groups.items():
        create(admin(admin_proxy, tenant), "shared", partitions=1)
        produce(conf(admin_proxy, tenant), "shared", [f"{tenant}-{i}" for i in range(20)])
        tool(
            admin_proxy,
            tenant,
            "kafka-configs",
            *("--alter", "--entity-type", "groups", "--entity-name", group),
            *("--add-config", "share.auto.offset.reset=earliest"),
        )

    def share_consume(tenant: str) -> list[str]:
        args = ("--group", groups[tenant], "--topic", "shared", "--max-messages", "20", "--timeout-ms", "60000")
        return tool(admin_proxy, tenant, "kafka-console-share-consumer", *args, timeout=150).stdout.split()

    with ThreadPoolExecutor(2) as pool:
        read = dict(zip(TENANTS, pool.map(share_consume, TENANTS), strict=True))
    for tenant in TENANTS:
        assert sorted(read[tenant]) == sorted(f"{tenant}-{i}" for i in range(20)), read[tenant]

    listed = tool(admin_proxy, "team-a", "kafka-share-groups", "--list").stdout.split()
    assert listed == ["SG"], listed
    described = tool(admin_proxy, "team-a", "kafka-share-groups", "--describe", "--group", "SG").stdout
    rows = [line.split() for line in described.splitlines() if line.startswith("SG ")]
    assert rows and all(row[:3] == ["SG", "shared", "0"] for row in rows), described
    other = tool(admin_proxy, "team-a", "kafka-share-groups", "--describe", "--group", "SG-b", check=False)
    assert "GroupIdNotFoundException" in other.stdout + other.stderr, other.stdout + other.stderr[-2000:]

    image = state(kafka_cluster, admin_proxy)
    physical_groups = tool_physical_share_groups(kafka_cluster)
    assert {image.vcs[t].physical_id(g) for t, g in groups.items()} <= physical_groups


def tool_physical_share_groups(kafka_cluster) -> set[str]:
    result = run_tool("kafka-share-groups", ["--bootstrap-server", kafka_cluster.bootstrap, "--list"], timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(result.stdout.split())
