"""Equivalence scenarios: the same client operations, run directly against Kafka and through a virtual
cluster of the proxy, each returning a plain dict that the other side's must equal (test_equivalence.py).

A scenario takes a `Side` (client settings and the prefix of every name it creates) and returns only
values a client sees. Where the two sides may rightly differ (cluster ids, endpoints, placement of two
different physical topics, broker-generated ids) the value goes through one of the named rules below
before it is returned; nothing else is left out or rewritten.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    AcknowledgeType,
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
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
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)

DEADLINE = 90.0  # seconds for any one condition: generous, for a loaded 2-core machine
# Record timestamps (CreateTime) both sides write: fixed for the run, in the past so that the broker's
# message.timestamp.*.max.ms accept them.
BASE_TS = (int(time.time()) - 600) * 1000


@dataclass(frozen=True)
class Side:
    label: str  # "direct" or "vc"
    conf: dict[str, Any]  # confluent-kafka settings of a client with every right (a super user / the VC's admin)
    prefix: str  # every topic, group and transactional id this side creates starts with it
    broker_ports: dict[int, int]  # node id -> the port this side's clients are told for it
    # The raw wire, for answers confluent-kafka cannot be trusted to show: (bootstrap, user, password) of a
    # principal without rights on the cluster (no ACL on the broker, an ordinary member in the VC).
    unprivileged: tuple[str, str, str]

    def name(self, base: str) -> str:
        return f"{self.prefix}{base}"


# -- normalisation rules ---------------------------------------------------------------------------------
# Each is applied by name where a scenario builds its result; a value a rule does not recognise is kept
# as it is, so it shows up as a difference.


def rule_name(side: Side, name: str | None) -> str | None:
    """NAME: each side creates its names under its own prefix (so that neither can be served the other's
    topic by mistake): the prefix becomes `~`. A name without the prefix stays whole."""
    if isinstance(name, str) and name.startswith(side.prefix):
        return "~" + name[len(side.prefix) :]
    return name


def rule_names_in_text(side: Side, text: str | None) -> str | None:
    """NAME, in error messages: the prefix becomes `~` wherever it appears."""
    return text.replace(side.prefix, "~") if isinstance(text, str) else text


def rule_cluster_id(cluster_id: str | None) -> str | None:
    """CLUSTER_ID: a VC has its own cluster id (KIP-78, 22 characters of URL-safe base64), Kafka its own."""
    if isinstance(cluster_id, str) and len(cluster_id) == 22:
        return "<cluster id>"
    return cluster_id


def rule_endpoint(side: Side, node: Any) -> dict[str, Any]:
    """ENDPOINT: a broker is reached at Kafka's port directly and at the proxy's port for it through the
    proxy; id and rack are kept, the address only checked to be this side's own for that node."""
    own = node.host == "127.0.0.1" and side.broker_ports.get(node.id) == node.port
    return {
        "id": node.id,
        "rack": getattr(node, "rack", None),
        "address": "<own>" if own else f"{node.host}:{node.port}",
    }


def rule_broker(side: Side, node_id: int | None) -> str | int | None:
    """BROKER: which broker leads a partition or coordinates a group depends on the physical topic and
    group id, which differ between the sides (and a KRaft broker names a random live broker as the
    controller): only that it is one of the cluster's brokers is compared."""
    return "<a broker>" if node_id in side.broker_ports else node_id


def rule_replicas(side: Side, ids: Iterable[int]) -> list[Any]:
    """PLACEMENT: the controller places each new physical topic's replicas on its own; with replication
    factor 3 on 3 brokers the set is every broker, in an order that may differ."""
    return sorted(ids)


def rule_topic_id(topic_id: Any) -> str:
    """TOPIC_ID: the two sides' topics are different physical topics: their ids are random and differ;
    that a topic has one (not the zero UUID) is compared."""
    text = str(topic_id)
    return "<zero>" if text in ("AAAAAAAAAAAAAAAAAAAAAA", "00000000-0000-0000-0000-000000000000") else "<uuid>"


def rule_member_id(member_id: str | None) -> str:
    """MEMBER_ID: the group coordinator makes member ids up (client id + UUID, or a UUID for KIP-848)."""
    return "<member id>" if member_id else "<none>"


def rule_refusal_message(message: str | None) -> str:
    """REFUSAL_MESSAGE: Kafka's authorization refusals quote its own request object (processor, connection
    id with ports: `Request Request(processor=3, connectionId=...) needs DESCRIBE permission.`), which no
    proxy could reproduce: the error code is compared, of the message only that there is one."""
    return "<message>" if message else "<none>"


# -- timing: how long a scenario took is a result too ------------------------------------------------------
# The two sides run at the same time (test_equivalence.py), so each pays the same machine load and its
# own cold start; what is compared is the wall time of each side's client work, scenario call to return.
# A VC side slower than both bounds below is a difference to explain. The tell that taught it:
# librdkafka's 0118 test took 312 s through a VC and 10 s directly (30x, +302 s) while the VC answered
# its Metadata requests with an error and the client retried. Noise on a loaded 2-core machine stays far
# below both: the scenarios' waits poll a condition every 0.1-0.5 s (their 90 s deadlines only bound a
# failure), so the proxy's extra hop costs well under 2x (figures in docs/compatibility.md), and the
# largest single delay a scenario can meet by bad luck is a group member missing its heartbeats and the
# 6 s session timeout running out once or twice on one side.
SLOWDOWN_FACTOR = 4.0  # the VC side fails above this multiple of the direct side's time ...
SLOWDOWN_SLACK = 15.0  # ... and above the direct side's time plus this many seconds: short scenarios
# (a second or two) reach 4x from one missed heartbeat; a seconds-long wait is noise, a minute is a tell.


def timing_verdict(direct_s: float, vc_s: float) -> str | None:
    """None when the VC side's time is within the bounds, else the difference as a message with both times."""
    if vc_s > direct_s * SLOWDOWN_FACTOR and vc_s > direct_s + SLOWDOWN_SLACK:
        return (
            f"timing: the VC side took {vc_s:.1f} s, the direct side {direct_s:.1f} s "
            f"({vc_s / max(direct_s, 1e-3):.1f}x, +{vc_s - direct_s:.1f} s; the bound is "
            f"{SLOWDOWN_FACTOR:g}x and +{SLOWDOWN_SLACK:g} s)"
        )
    return None


def timed(scenario: Callable[..., dict[str, Any]], side: Side, *args: Any) -> tuple[dict[str, Any], float]:
    """The scenario's result on `side` and its wall time in seconds."""
    started = time.monotonic()
    result = scenario(side, *args)
    return result, time.monotonic() - started


# -- helpers -------------------------------------------------------------------------------------------


def admin(side: Side) -> AdminClient:
    return AdminClient(side.conf)


def wait_for(what: str, check: Callable[[], Any], timeout: float = DEADLINE, interval: float = 0.1) -> Any:
    """Polls `check` until it returns something truthy; fails with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def create_topics(side: Side, names: Iterable[str], partitions: int, **config: str) -> None:
    """Creates the topics and waits until every partition has a leader (metadata reaches every broker)."""
    client = admin(side)
    names = list(names)
    futures = client.create_topics([NewTopic(n, partitions, 3, config=config) for n in names], operation_timeout=60)
    for f in futures.values():
        f.result(DEADLINE)

    def ready() -> bool:
        topics = client.list_topics(timeout=20).topics
        return all(
            n in topics
            and topics[n].error is None
            and len(topics[n].partitions) == partitions
            and all(p.leader >= 0 for p in topics[n].partitions.values())
            for n in names
        )

    wait_for(f"leaders of {names}", ready)


def error_of(exc: BaseException) -> dict[str, Any]:
    """A KafkaException as comparable fields (the message goes through NAME where it is compared)."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        return {"error": err.name(), "message": err.str()}
    return {"error": type(exc).__name__, "message": str(exc)}


def outcome(side: Side, fn: Callable[[], Any]) -> Any:
    """The value of fn(), or its Kafka error (message through NAME) if it raises one."""
    try:
        return fn()
    except KafkaException as exc:
        found = error_of(exc)
        found["message"] = rule_names_in_text(side, found["message"])
        return found


def read_all(conf: dict[str, Any], topic: str, ends: dict[int, int], **extra: Any) -> list[dict[str, Any]]:
    """Every record of `topic` from the beginning until each partition's position reaches `ends[p]`,
    with the fields a client sees, without a group (assign)."""
    consumer = Consumer({**conf, "group.id": f"reader-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False, **extra})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + DEADLINE
    try:
        while True:
            positions = {tp.partition: tp.offset for tp in consumer.position([TopicPartition(topic, p) for p in ends])}
            if all(positions[p] >= end for p, end in ends.items()):
                break
            assert time.monotonic() < deadline, f"{topic}: read {len(out)} records, positions {positions}, ends {ends}"
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                ts_type, ts = msg.timestamp()
                out.append(
                    {
                        "partition": msg.partition(),
                        "offset": msg.offset(),
                        "key": msg.key(),
                        "value": msg.value(),
                        "headers": msg.headers(),
                        "timestamp": [ts_type, ts],
                        "leader_epoch": msg.leader_epoch(),
                    }
                )
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


# -- 1. produce and consume: every compression, idempotence on and off ---------------------------------

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def _records(codec: str, idempotent: bool) -> list[dict[str, Any]]:
    tag = f"{codec}-{'idem' if idempotent else 'plain'}"
    records = []
    for i in range(30):
        record: dict[str, Any] = {
            "key": f"key-{i % 7}".encode(),
            "value": (f"{tag}-{i}:" + "abcdefgh" * (i * 13 % 200)).encode(),  # compressible, sizes vary
            "timestamp": BASE_TS + i * 1000,
            "headers": [("n", str(i).encode()), ("dup", b"1"), ("dup", b"2")] if i % 3 else None,
        }
        records.append(record)
    # Keys the default partitioner spreads at random (none, empty) go to a partition chosen here.
    records.append({"key": None, "value": f"{tag}-nokey".encode(), "timestamp": BASE_TS, "partition": 0})
    records.append({"key": b"", "value": b"", "timestamp": BASE_TS + 1, "headers": [("null", None)], "partition": 2})
    return records


def produce_consume(side: Side) -> dict[str, Any]:
    topics = {c: side.name(f"codec-{c}") for c in COMPRESSIONS}
    create_topics(side, topics.values(), partitions=3)
    result: dict[str, Any] = {}
    for codec, topic in topics.items():
        delivered: list[Any] = []
        for idempotent in (True, False):
            producer = Producer(
                {
                    **side.conf,
                    "compression.type": codec,
                    "enable.idempotence": idempotent,
                    "acks": "all",
                    "linger.ms": 50,
                    "batch.num.messages": 8,  # several batches per partition
                }
            )
            errors: list[str] = []

            def on_delivery(
                err: KafkaError | None, msg: Any, idem: bool = idempotent, errors: list = errors, out: list = delivered
            ) -> None:
                if err is not None:
                    errors.append(str(err))
                else:
                    out.append([idem, msg.partition(), msg.offset(), msg.value()])

            for r in _records(codec, idempotent):
                kw = {k: r[k] for k in ("headers", "partition") if r.get(k) is not None}
                producer.produce(topic, r["value"], r["key"], timestamp=r["timestamp"], on_delivery=on_delivery, **kw)
                producer.poll(0)
            assert producer.flush(DEADLINE) == 0 and not errors, errors
        ends: dict[int, int] = {p: 0 for p in range(3)}
        for _, partition, offset, _ in delivered:
            ends[partition] = max(ends[partition], offset + 1)
        result[codec] = {
            "delivered": sorted(delivered, key=lambda d: (d[1], d[2])),
            "read": read_all(side.conf, topic, ends),
        }
    return result


# -- 2. consumer groups through a rebalance -------------------------------------------------------------

GROUP_VARIANTS: dict[str, dict[str, Any]] = {
    "range": {"partition.assignment.strategy": "range"},
    "roundrobin": {"partition.assignment.strategy": "roundrobin"},
    "cooperative-sticky": {"partition.assignment.strategy": "cooperative-sticky"},
    "kip848": {"group.protocol": "consumer"},
}
GROUP_PARTITIONS = 4


def _produce_to_partitions(side: Side, topic: str, per_partition: Callable[[int], int], tag: str) -> None:
    producer = Producer({**side.conf, "acks": "all"})
    for p in range(GROUP_PARTITIONS):
        for i in range(per_partition(p)):
            producer.produce(topic, f"{tag}-{p}-{i}".encode(), partition=p, timestamp=BASE_TS + i)
    assert producer.flush(DEADLINE) == 0


def _describe_group(side: Side, group: str) -> Any:
    client = admin(side)
    return client.describe_consumer_groups([group], request_timeout=30)[group].result(DEADLINE)


def _group_view(side: Side, description: Any, exact: bool) -> dict[str, Any]:
    """describe_consumer_groups' fields; the assignment as partition lists (`exact`: range and roundrobin
    give the same lists whoever joins first) or as partition counts (sticky and KIP-848: which partitions
    a member keeps depends on the order of events)."""
    members = []
    for m in description.members:
        partitions = sorted(tp.partition for tp in m.assignment.topic_partitions)
        members.append(
            {
                "topics": sorted({rule_name(side, tp.topic) for tp in m.assignment.topic_partitions}),
                "client_id": m.client_id,
                "host": m.host,
                "member_id": rule_member_id(m.member_id),
                "group_instance_id": m.group_instance_id,
                "assignment": partitions if exact else len(partitions),
            }
        )
    return {
        "group_id": rule_name(side, description.group_id),
        "simple": description.is_simple_consumer_group,
        "state": str(description.state),
        "type": str(getattr(description, "type", None)),
        "assignor": description.partition_assignor,
        "coordinator": rule_broker(side, description.coordinator.id),
        "members": sorted(members, key=lambda m: m["client_id"]),
    }


def _poll_until(members: list[tuple[Consumer, dict[int, int]]], what: str, done: Callable[[], bool]) -> None:
    """Polls every member (recording in its dict the next offset it read per partition) until `done`."""
    deadline = time.monotonic() + DEADLINE
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for consumer, seen in members:
            for msg in consumer.consume(100, timeout=0.1):
                if msg.error():
                    raise KafkaException(msg.error())
                seen[msg.partition()] = max(seen.get(msg.partition(), 0), msg.offset() + 1)


def consumer_group(side: Side, variant: str) -> dict[str, Any]:
    exact = variant in ("range", "roundrobin")
    topic, group = side.name(f"grp-{variant}"), side.name(f"group-{variant}")
    create_topics(side, [topic], partitions=GROUP_PARTITIONS)
    _produce_to_partitions(side, topic, lambda p: p + 1, "first")

    def member(client_id: str) -> Consumer:
        conf = {
            **side.conf,
            "group.id": group,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **GROUP_VARIANTS[variant],
        }
        if variant != "kip848":  # classic: the broker's minimum session, heartbeats to match
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        consumer = Consumer(conf)
        consumer.subscribe([topic])
        return consumer

    steps: dict[str, Any] = {}
    seen_a: dict[int, int] = {}
    a = member("eq-member-a")
    try:
        _poll_until(
            [(a, seen_a)],
            "member a to read every partition",
            lambda: sum(seen_a.values()) == sum(p + 1 for p in range(GROUP_PARTITIONS)),
        )
        a.commit(asynchronous=False)
        steps["alone"] = _settled(side, group, a_only=True, exact=exact)

        b = member("eq-member-b")
        seen_b: dict[int, int] = {}
        try:
            _poll_until(
                [(a, seen_a), (b, seen_b)],
                "a and b to share the partitions",
                lambda: len(a.assignment()) == len(b.assignment()) == GROUP_PARTITIONS // 2,
            )
            steps["two"] = _settled(side, group, a_only=False, exact=exact)
            _produce_to_partitions(side, topic, lambda p: 1, "second")  # one more per partition, read by its owner

            _poll_until(
                [(a, seen_a), (b, seen_b)],
                "the second round to be read",
                lambda: all(max(seen_a.get(p, 0), seen_b.get(p, 0)) == p + 2 for p in range(GROUP_PARTITIONS)),
            )
            steps["partitions_read_by_each"] = sorted([len(a.assignment()), len(b.assignment())])
            a.commit(asynchronous=False)
            b.commit(asynchronous=False)
        finally:
            b.close()  # leaves the group: a gets every partition back
        _poll_until([(a, seen_a)], "a to get every partition back", lambda: len(a.assignment()) == GROUP_PARTITIONS)
        steps["after_leave"] = _settled(side, group, a_only=True, exact=exact)
    finally:
        a.close()
    described = wait_for(
        "the group to be empty",
        lambda: (d := _describe_group(side, group)) and not d.members and d,
    )
    steps["closed"] = {"state": str(described.state), "members": len(described.members)}
    client = admin(side)
    committed = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(DEADLINE)
    steps["committed"] = {
        "group_id": rule_name(side, committed.group_id),
        "offsets": sorted(
            [rule_name(side, tp.topic), tp.partition, tp.offset, tp.metadata, tp.leader_epoch]
            for tp in committed.topic_partitions
        ),
    }
    return steps


def _settled(side: Side, group: str, a_only: bool, exact: bool) -> dict[str, Any]:
    """The group's description once the coordinator shows it stable with every member assigned."""
    members = 1 if a_only else 2

    def stable() -> Any:
        d = _describe_group(side, group)
        state_ok = str(d.state).endswith("STABLE")
        assigned = sum(len(m.assignment.topic_partitions) for m in d.members) == GROUP_PARTITIONS
        return d if state_ok and len(d.members) == members and assigned else None

    description = wait_for(f"group {group} stable with {members} member(s)", stable)
    view = _group_view(side, description, exact)
    return view


# -- 3. transactions with aborts ----------------------------------------------------------------------


def transactions(side: Side) -> dict[str, Any]:
    topic = side.name("txn")
    create_topics(side, [topic], partitions=2)
    producer = Producer({**side.conf, "transactional.id": side.name("tx"), "acks": "all", "linger.ms": 5})
    producer.init_transactions(DEADLINE)
    plan = [
        ("commit", [(0, "a1"), (1, "a2"), (0, "a3")]),
        ("abort", [(0, "b1"), (1, "b2")]),
        ("commit", [(1, "c1")]),
        ("abort", [(1, "d1"), (1, "d2"), (0, "d3")]),
        ("commit", [(0, "e1"), (1, "e2")]),
    ]
    for end, records in plan:
        producer.begin_transaction()
        for partition, value in records:
            producer.produce(topic, value.encode(), b"k", partition=partition, timestamp=BASE_TS)
        producer.flush(DEADLINE)
        if end == "commit":
            producer.commit_transaction(DEADLINE)
        else:
            producer.abort_transaction(DEADLINE)
    client = admin(side)

    def offsets(spec: OffsetSpec, level: IsolationLevel) -> dict[int, int]:
        asked = {TopicPartition(topic, p): spec for p in range(2)}
        answers = client.list_offsets(asked, isolation_level=level, request_timeout=30)
        return {tp.partition: f.result(DEADLINE).offset for tp, f in answers.items()}

    def settled() -> dict[str, dict[int, int]] | None:
        # EndTxn returns before the coordinator has written the markers: until it has, the last stable
        # offset (read_committed's end) is behind the high watermark.
        latest = {
            "committed": offsets(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED),
            "uncommitted": offsets(OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED),
        }
        return latest if latest["committed"] == latest["uncommitted"] else None

    latest = wait_for("the transaction markers", settled)

    def values(level: str) -> list[Any]:
        read = read_all(side.conf, topic, latest["uncommitted"], **{"isolation.level": level})
        return [[r["partition"], r["offset"], r["value"]] for r in read]

    return {
        "latest": latest,
        "read_committed": values("read_committed"),
        "read_uncommitted": values("read_uncommitted"),
    }


# -- 4. share groups (KIP-932) ----------------------------------------------------------------------------


def share_group(side: Side) -> dict[str, Any]:
    """One share consumer in explicit mode: offset 1 is released once (so delivered again), offset 3
    rejected, the rest accepted."""
    topic, group = side.name("share"), side.name("share-group")
    create_topics(side, [topic], partitions=1)
    producer = Producer({**side.conf, "acks": "all"})
    for i in range(6):
        producer.produce(topic, f"s{i}".encode(), partition=0, timestamp=BASE_TS + i)
    assert producer.flush(DEADLINE) == 0
    client = admin(side)
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    client.incremental_alter_configs([resource])[resource].result(DEADLINE)
    consumer = ShareConsumer({**side.conf, "group.id": group, "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    deliveries: list[list[Any]] = []
    released: set[int] = set()
    finished: set[int] = set()
    deadline = time.monotonic() + DEADLINE
    try:
        while len(finished) < 6:
            assert time.monotonic() < deadline, f"share group: deliveries so far {deliveries}"
            batch = consumer.poll(0.5)
            for msg in batch:
                if msg.error():
                    raise KafkaException(msg.error())
                offset = msg.offset()
                if offset == 1 and offset not in released:
                    ack = AcknowledgeType.RELEASE
                    released.add(offset)
                elif offset == 3:
                    ack = AcknowledgeType.REJECT
                else:
                    ack = AcknowledgeType.ACCEPT
                if ack != AcknowledgeType.RELEASE:
                    finished.add(offset)
                consumer.acknowledge(msg, ack)
                deliveries.append([offset, msg.value(), msg.delivery_count(), str(ack)])
            if len(batch):
                consumer.commit_sync()
    finally:
        consumer.close()
    # DELIVERY_ORDER: a share group promises no order between a released record's redelivery and the
    # records after it: deliveries are compared sorted by (offset, delivery count).
    return {"deliveries": sorted(deliveries, key=lambda d: (d[0], d[2]))}


# -- 5. admin calls ------------------------------------------------------------------------------------------


def _config_entries(entries: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {
            "value": e.value,
            "source": str(e.source),
            "default": e.is_default,
            "read_only": e.is_read_only,
            "sensitive": e.is_sensitive,
            "synonyms": [[s.name, s.value, str(s.source)] for s in e.synonyms.values()],
        }
        for name, e in sorted(entries.items())
    }


def admin_calls(side: Side) -> dict[str, Any]:
    client = admin(side)
    topic = side.name("admin")
    out: dict[str, Any] = {}

    def create(topics: list[NewTopic], validate_only: bool = False) -> dict[str, Any]:
        futures = client.create_topics(topics, operation_timeout=60, validate_only=validate_only)
        return {rule_name(side, n): outcome(side, lambda f=f: f.result(DEADLINE)) for n, f in futures.items()}

    out["create"] = create([NewTopic(topic, 3, 3, config={"retention.ms": "3600000"})])
    wait_for(
        "the admin topic's leaders",
        lambda: all(p.leader >= 0 for p in client.list_topics(topic, timeout=20).topics[topic].partitions.values()),
    )
    out["create_again"] = create([NewTopic(topic, 3, 3)])
    out["create_invalid_name"] = create([NewTopic(side.name("bad name!"), 1, 3)])
    out["create_zero_partitions"] = create([NewTopic(side.name("zero"), 0, 3)])
    out["create_rf_too_big"] = create([NewTopic(side.name("rf4"), 1, 4)])
    out["create_validate_only"] = create([NewTopic(side.name("validated"), 2, 3)], validate_only=True)

    def described() -> Any:
        # The topic is new: a broker whose metadata has not caught up yet answers UNKNOWN_TOPIC_OR_PART (seen
        # on direct Kafka in a loaded run), which is that broker's moment, not an answer to compare.
        try:
            return client.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(
                DEADLINE
            )
        except KafkaException as exc:
            if (
                exc.args
                and isinstance(exc.args[0], KafkaError)
                and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            ):
                return None
            raise

    def describe_topic() -> dict[str, Any]:
        d = wait_for("the new topic described", described)
        return {
            "name": rule_name(side, d.name),
            "topic_id": rule_topic_id(d.topic_id),
            "internal": d.is_internal,
            "partitions": [
                {
                    "id": p.id,
                    "leader": rule_broker(side, p.leader.id),
                    "leader_in_replicas": p.leader.id in [r.id for r in p.replicas],
                    "replicas": rule_replicas(side, (r.id for r in p.replicas)),
                    "isr": rule_replicas(side, (r.id for r in p.isr)),
                    "replica_endpoints": sorted((rule_endpoint(side, r) for r in p.replicas), key=lambda e: e["id"]),
                }
                for p in d.partitions
            ],
            "authorized_operations": sorted(str(op) for op in d.authorized_operations or []),
        }

    out["describe_topics"] = describe_topic()
    out["describe_unknown_topic"] = outcome(
        side,
        lambda: client.describe_topics(TopicCollection([side.name("nowhere")]))[side.name("nowhere")].result(DEADLINE),
    )

    resource = ConfigResource(ResourceType.TOPIC, topic)

    def configs() -> dict[str, Any]:
        got = client.describe_configs([resource])[resource].result(DEADLINE)
        return _config_entries(got)

    # Every broker learns the new topic's configs from the metadata log on its own time.
    out["describe_configs"] = wait_for(
        "the topic's configs", lambda: (c := configs())["retention.ms"]["value"] == "3600000" and c
    )
    incremental = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    out["incremental_alter_configs"] = outcome(
        side, lambda: client.incremental_alter_configs([incremental])[incremental].result(DEADLINE)
    )
    changed = ("retention.ms", "cleanup.policy", "segment.ms", "max.message.bytes")

    def configs_once(key: str, value: str) -> dict[str, Any]:
        # A change reaches each broker's metadata on its own time: wait until the one that answers shows it
        # (each request's changes are one metadata batch, so the others show with it).
        def shown() -> dict[str, Any] | None:
            now = configs()
            return now if now[key]["value"] == value else None

        got = wait_for(f"{key}={value}", shown)
        return {k: v for k, v in got.items() if k in changed}

    out["after_incremental"] = configs_once("retention.ms", "7200000")
    # Legacy AlterConfigs replaces the topic's whole set of overrides: retention.ms and cleanup.policy go.
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "7200000"})
    out["alter_configs"] = outcome(side, lambda: client.alter_configs([legacy])[legacy].result(DEADLINE))
    out["after_alter"] = configs_once("segment.ms", "7200000")
    bad = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    out["alter_unknown_config"] = outcome(side, lambda: client.incremental_alter_configs([bad])[bad].result(DEADLINE))

    def partitions(n: int) -> Any:
        return outcome(
            side,
            lambda: client.create_partitions([NewPartitions(topic, n)], operation_timeout=60)[topic].result(DEADLINE),
        )

    out["create_partitions"] = partitions(5)
    out["create_partitions_fewer"] = partitions(2)
    out["create_partitions_unknown"] = outcome(
        side,
        lambda: client.create_partitions([NewPartitions(side.name("nowhere"), 4)])[side.name("nowhere")].result(
            DEADLINE
        ),
    )
    wait_for(
        "5 partitions with leaders",
        lambda: (
            len(ps := client.list_topics(topic, timeout=20).topics[topic].partitions) == 5
            and all(p.leader >= 0 for p in ps.values())
        ),
    )

    producer = Producer({**side.conf, "acks": "all"})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=0, timestamp=BASE_TS + i * 1000)
    assert producer.flush(DEADLINE) == 0

    def list_offsets(spec: OffsetSpec) -> Any:
        futures = client.list_offsets({TopicPartition(topic, 0): spec, TopicPartition(topic, 4): spec})
        return {
            tp.partition: outcome(side, lambda f=f: [(r := f.result(DEADLINE)).offset, r.timestamp, r.leader_epoch])
            for tp, f in sorted(futures.items(), key=lambda kv: kv[0].partition)
        }

    out["list_offsets"] = {
        "earliest": list_offsets(OffsetSpec.earliest()),
        "latest": list_offsets(OffsetSpec.latest()),
        "max_timestamp": list_offsets(OffsetSpec.max_timestamp()),
        "for_timestamp": list_offsets(OffsetSpec.for_timestamp(BASE_TS + 4500)),
        "after_last": list_offsets(OffsetSpec.for_timestamp(BASE_TS + 10**7)),
    }
    deleted = client.delete_records([TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 5)])
    out["delete_records"] = {
        tp.partition: outcome(side, lambda f=f: f.result(DEADLINE).low_watermark) for tp, f in deleted.items()
    }
    out["earliest_after_delete"] = list_offsets(OffsetSpec.earliest())

    # Groups: one with committed offsets and no members (a simple consumer's commit), listed, described,
    # deleted, described again.
    group = side.name("admin-group")
    committer = Consumer({**side.conf, "group.id": group, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, 0, 7, "meta")], asynchronous=False)
    committer.close()
    listed = client.list_consumer_groups(request_timeout=30).result(DEADLINE)
    out["list_groups"] = sorted(
        [rule_name(side, g.group_id), g.is_simple_consumer_group, str(g.state), str(getattr(g, "type", None))]
        for g in listed.valid
        if g.group_id == group
    )
    out["list_groups_errors"] = [str(e) for e in listed.errors]
    d = _describe_group(side, group)
    out["describe_group"] = _group_view(side, d, exact=True)
    offsets = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(DEADLINE)
    out["group_offsets"] = sorted(
        [rule_name(side, tp.topic), tp.partition, tp.offset, tp.metadata] for tp in offsets.topic_partitions
    )
    out["delete_group"] = outcome(side, lambda: client.delete_consumer_groups([group])[group].result(DEADLINE))
    out["delete_group_again"] = outcome(side, lambda: client.delete_consumer_groups([group])[group].result(DEADLINE))
    gone = _describe_group(side, group)
    out["describe_deleted_group"] = {"state": str(gone.state), "members": len(gone.members)}

    cluster = client.describe_cluster(include_authorized_operations=True, request_timeout=30).result(DEADLINE)
    out["describe_cluster"] = {
        "cluster_id": rule_cluster_id(cluster.cluster_id),
        "controller": rule_broker(side, cluster.controller.id if cluster.controller else None),
        "nodes": sorted((rule_endpoint(side, n) for n in cluster.nodes), key=lambda e: e["id"]),
        "authorized_operations": sorted(str(op) for op in cluster.authorized_operations or []),
    }
    metadata = client.list_topics(timeout=20)
    out["metadata"] = {
        "cluster_id": rule_cluster_id(metadata.cluster_id),
        "brokers": sorted(
            (rule_endpoint(side, b) for b in metadata.brokers.values()),
            key=lambda e: e["id"],
        ),
        "our_topics": sorted(rule_name(side, t) for t in metadata.topics if t.startswith(side.prefix + "admin")),
    }
    out["acls"] = _risky(side, "acls")
    out["scram"] = _risky(side, "scram")
    out["refusals"] = refusals(side)
    return out


# -- calls that have crashed a client: in a child process, so that a crash is a result ------------------------


def _risky(side: Side, call: str) -> dict[str, Any]:
    """Runs `call` (acls, scram) in a child interpreter: a client that aborts its process (confluent-kafka
    2.16 does, on some refusals) is a result, `{"exit": -6}`, instead of a dead pytest."""
    payload = json.dumps({"conf": side.conf, "prefix": side.prefix, "call": call})
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.equivalence"],
        input=payload,
        capture_output=True,
        text=True,
        timeout=DEADLINE * 2,
    )
    if done.returncode != 0:
        # CRASH: a child killed by a signal printed whatever its threads got to: only how it ended is compared.
        return {"exit": done.returncode}
    return json.loads(done.stdout.splitlines()[-1])


def _acls(client: AdminClient, prefix: str) -> dict[str, Any]:
    """Create, describe and delete ACL bindings on this side's names, as an admin of the cluster."""
    principal = f"User:{prefix}reader"  # this run's and side's own: no other run's bindings match
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    bindings = [
        AclBinding(ResourceType.TOPIC, prefix + "acl-topic", literal, principal, "*", AclOperation.READ, allow),
        AclBinding(ResourceType.GROUP, prefix + "acl-", prefixed, principal, "*", AclOperation.READ, allow),
        AclBinding(ResourceType.TOPIC, prefix + "acl-topic", literal, principal, "*", AclOperation.WRITE, deny),
    ]

    def show(b: Any) -> list[str]:
        strip = lambda text: text.replace(prefix, "~")  # NAME  # noqa: E731
        return [str(b.restype), strip(b.name), str(b.resource_pattern_type), strip(b.principal), b.host,
                str(b.operation), str(b.permission_type)]  # fmt: skip

    def described(acl_filter: AclBindingFilter) -> list[list[str]]:
        return sorted(show(b) for b in client.describe_acls(acl_filter, request_timeout=30).result(DEADLINE))

    any_op, any_permission = AclOperation.ANY, AclPermissionType.ANY
    by_principal = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, any_op,
                                    any_permission)  # fmt: skip
    out: dict[str, Any] = {}
    created = client.create_acls(bindings, request_timeout=30)
    out["create"] = [str(f.result(DEADLINE)) for f in created.values()]

    # A broker's authorizer learns ACL changes from the metadata log on its own time: the broker that
    # answers DescribeAcls may not show a change yet.
    def shown(acl_filter: AclBindingFilter, count: int) -> list[list[str]]:
        def check() -> tuple[list[list[str]]] | None:
            found = described(acl_filter)
            return (found,) if len(found) == count else None

        return wait_for(f"{count} ACL(s)", check)[0]

    out["describe"] = shown(by_principal, 3)
    matching = AclBindingFilter(ResourceType.GROUP, prefix + "acl-group", ResourcePatternType.MATCH, None, None,
                                any_op, any_permission)  # fmt: skip
    out["describe_match"] = shown(matching, 1)
    deleted = client.delete_acls([by_principal], request_timeout=30)
    out["delete"] = [sorted(show(b) for b in f.result(DEADLINE)) for f in deleted.values()]
    out["after_delete"] = shown(by_principal, 0)
    return out


def _scram(client: AdminClient, prefix: str) -> dict[str, Any]:
    """SCRAM credentials of a user nobody created (per user, so a refusal is per user)."""
    out: dict[str, Any] = {}
    futures = client.describe_user_scram_credentials([prefix + "nobody"], request_timeout=30)
    for user, f in futures.items():
        try:
            out[user[len(prefix) :]] = {
                "mechanisms": [str(c.mechanism) for c in f.result(DEADLINE).scram_credential_infos]
            }
        except KafkaException as exc:
            out[user[len(prefix) :]] = {"error": error_of(exc)["error"]}
    return out


def refusals(side: Side) -> dict[str, Any]:
    """What Kafka and the VC answer a principal without rights on the cluster, on the wire: confluent-kafka
    shows neither faithfully (describe_acls returns [] on an authorization error, from Kafka as from the
    proxy; describe_user_scram_credentials aborts the process)."""
    from kio.schema.describe_user_scram_credentials.v0.request import (
        DescribeUserScramCredentialsRequest,
        UserName,
    )

    from proxy.protocol import codec
    from proxy.protocol.apis import request_type

    from .rawclient import RawClient

    bootstrap, user, password = side.unprivileged
    out: dict[str, Any] = {}
    with RawClient(bootstrap, timeout=DEADLINE) as raw:
        raw.login_plain(user, password)
        acls = codec._empty(
            request_type(29, 3),
            resource_type_filter=1,  # ANY
            resource_name_filter=None,
            pattern_type_filter=1,  # ANY
            principal_filter=None,
            host_filter=None,
            operation=1,  # ANY
            permission_type=1,  # ANY
        )
        _, answer = raw.request(29, 3, 1, acls)
        out["describe_acls"] = {
            "error": int(answer.error_code),
            "message": rule_refusal_message(answer.error_message),
            "resources": list(answer.resources),
        }
        asked = (UserName(name=side.name("nobody")), UserName(name="admin"))
        _, answer = raw.request(50, 0, 2, DescribeUserScramCredentialsRequest(users=asked))
        out["describe_user_scram_credentials"] = {
            "error": int(answer.error_code),
            "message": answer.error_message,
            "results": [[r.user, int(r.error_code), r.error_message, list(r.credential_infos)] for r in answer.results],
        }
    return out


def _child() -> None:
    """The child side of `_risky`: the call's result as one JSON line on stdout."""
    job = json.loads(sys.stdin.read())
    client = AdminClient(job["conf"])
    call = {"acls": _acls, "scram": _scram}[job["call"]]
    try:
        result: Any = call(client, job["prefix"])
    except KafkaException as exc:
        result = error_of(exc)
        result["message"] = result["message"].replace(job["prefix"], "~")  # NAME
    print(json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    _child()
