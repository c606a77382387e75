"""Names Kafka refuses are refused through a VC as directly (issue 56): one row per check of docs/tenancy.md.

Each row sends the same hand-built request (tests/integration/rawclient.py) to the broker directly and through a
VC of a real proxy (alice in team-a), and asserts the same error codes, and the same top-level message where
Kafka gives one. The group ids the proxy renames (`<vc-uuid>.<id>`) are the point: an empty one must not
become a legal one on its way (proxy/tenancy/name_rules.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from proxy.protocol import entities
from proxy.protocol.apis import request_type
from vcproxy_tools.process import ProxyProcess

from .hardening_attacks import coordinator, login
from .ports import free_port_block
from .rawclient import RawClient
from .tenants import sasl_tenants_config
from .test_availability import warm_up

USERS = {"alice": "alice-secret"}
TOPIC = f"names-{uuid.uuid4().hex[:6]}"  # exists on both sides: the group check comes after the topic's
SECONDS = datetime.timedelta(seconds=30)


def make(cls: type, values: dict[str, Any]) -> Any:
    """A request entity from plain values: dicts and lists of dicts become the version's nested entities."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            value = make(entities.item_type(cls, key), value)
        elif isinstance(value, list):
            value = tuple(make(entities.item_type(cls, key), v) if isinstance(v, dict) else v for v in value)
        out[key] = value
    return entities.build(cls, **out)


def outcome(entity: Any) -> list[tuple[int, str]]:
    """Every error code of an answer with its message, at any depth (sorted: item order is the broker's)."""
    found: list[tuple[int, str]] = []

    def walk(node: Any) -> None:
        for name in sorted(entities.field_names(type(node))):
            if name.endswith("error_code"):  # also AddPartitionsToTxn's partition_error_code
                found.append((int(getattr(node, name)), getattr(node, "error_message", None) or ""))
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
                for item in value:
                    walk(item)
            elif dataclasses.is_dataclass(value):
                walk(value)

    walk(entity)
    return sorted(found)


BAD_TOPICS = ("", ".", "..", "a b", "x" * 250)
TOPIC_RESOURCE, GROUP_RESOURCE = 2, 32
PARTITIONS = [dict(name=TOPIC, partitions=[dict(partition_index=0, committed_offset=1)])]
# (row, api key, version, request values): the rows of docs/tenancy.md's table of name checks.
ROWS = [
    ("JoinGroup v9", 11, 9, dict(group_id="", session_timeout=SECONDS, rebalance_timeout=SECONDS, member_id="m",
                                 protocol_type="consumer", protocols=[dict(name="range", metadata=b"")])),
    ("JoinGroup v0", 11, 0, dict(group_id="", session_timeout=SECONDS, member_id="", protocol_type="consumer",
                                 protocols=[dict(name="range", metadata=b"")])),
    ("SyncGroup", 14, 5, dict(group_id="", generation_id=1, member_id="m", protocol_type="consumer",
                              protocol_name="range")),
    ("Heartbeat", 12, 4, dict(group_id="", generation_id=1, member_id="m")),
    ("LeaveGroup v5", 13, 5, dict(group_id="", members=[dict(member_id="m")])),
    ("LeaveGroup v0", 13, 0, dict(group_id="", member_id="m")),
    ("OffsetDelete", 47, 0, dict(group_id="", topics=[dict(name=TOPIC, partitions=[dict(partition_index=0)])])),
    ("TxnOffsetCommit", 28, 3, dict(transactional_id="tx", group_id="", producer_id=1, producer_epoch=0,
                                    generation_id=-1, member_id="", topics=PARTITIONS)),
    ("TxnOffsetCommit, unknown topic", 28, 0, dict(transactional_id="tx", group_id="", producer_id=1,
                                                   producer_epoch=0, topics=[dict(PARTITIONS[0], name="gone")])),
    ("ConsumerGroupHeartbeat", 68, 1, dict(group_id="", member_id="m", member_epoch=0, rebalance_timeout=SECONDS,
                                           subscribed_topic_names=[TOPIC], topic_partitions=[])),
    ("ShareGroupHeartbeat", 76, 1, dict(group_id="", member_id="m", member_epoch=0, subscribed_topic_names=[TOPIC])),
    ("StreamsGroupHeartbeat", 88, 0, dict(group_id="", member_id="m", member_epoch=0, rebalance_timeout_ms=30000)),
    ("ConsumerGroupDescribe", 69, 1, dict(group_ids=[""])),
    ("ShareGroupDescribe", 77, 1, dict(group_ids=[""])),
    ("StreamsGroupDescribe", 89, 0, dict(group_ids=[""])),
    ("AlterShareGroupOffsets", 91, 0, dict(group_id="", topics=[dict(topic_name=TOPIC, partitions=[
        dict(partition_index=0, start_offset=0)])])),
    ("DeleteShareGroupOffsets", 92, 0, dict(group_id="", topics=[dict(topic_name=TOPIC)])),
    # Transactional ids: the empty one is sent as itself, and the broker refuses it.
    ("InitProducerId", 22, 5, dict(transactional_id="", transaction_timeout=SECONDS, producer_id=-1,
                                   producer_epoch=-1)),
    ("EndTxn", 26, 4, dict(transactional_id="", producer_id=1, producer_epoch=0, committed=True)),
    ("DescribeTransactions", 65, 0, dict(transactional_ids=[""])),
    ("AddOffsetsToTxn", 25, 4, dict(transactional_id="", producer_id=1, producer_epoch=0, group_id="g")),
    ("AddPartitionsToTxn", 24, 5, dict(transactions=[dict(transactional_id="", producer_id=1, producer_epoch=0,
                                                          topics=[dict(name=TOPIC, partitions=[0])])])),
    # Topic names Topic.validate refuses (the VC's placeholder for them may be legal: `UUID.`, `UUID..`).
    ("Metadata", 3, 12, dict(topics=[dict(name=n) for n in BAD_TOPICS], allow_auto_topic_creation=False)),
    ("Metadata, auto-creation asked", 3, 12, dict(topics=[dict(name=n) for n in BAD_TOPICS],
                                                  allow_auto_topic_creation=True)),
    ("CreateTopics", 19, 7, dict(validate_only=True, timeout=SECONDS, topics=[
        dict(name=n, num_partitions=1, replication_factor=1) for n in BAD_TOPICS[:-1]])),  # (a VC's limit: 212)
    ("DescribeProducers", 61, 0, dict(topics=[dict(name=n, partition_indexes=[0, 1]) for n in BAD_TOPICS])),
    ("DescribeTopicPartitions", 75, 0, dict(topics=[dict(name=n) for n in BAD_TOPICS[1:]],
                                            response_partition_limit=10)),
    ("DescribeTopicPartitions, empty name", 75, 0, dict(topics=[dict(name=n) for n in (TOPIC, "", ".")],
                                                        response_partition_limit=10)),
    ("DescribeConfigs", 32, 4, dict(resources=[dict(resource_type=TOPIC_RESOURCE, resource_name=n)
                                               for n in BAD_TOPICS])),
    ("DescribeConfigs, group", 32, 4, dict(resources=[dict(resource_type=GROUP_RESOURCE, resource_name="")])),
    ("AlterConfigs", 33, 2, dict(validate_only=True, resources=[
        dict(resource_type=TOPIC_RESOURCE, resource_name=n, configs=[dict(name="retention.ms", value="1000")])
        for n in BAD_TOPICS])),
    ("AlterConfigs, group", 33, 2, dict(validate_only=True, resources=[
        dict(resource_type=GROUP_RESOURCE, resource_name="", configs=[])])),
    ("IncrementalAlterConfigs", 44, 1, dict(validate_only=True, resources=[
        dict(resource_type=TOPIC_RESOURCE, resource_name=n,
             configs=[dict(name="retention.ms", config_operation=0, value="1000")]) for n in BAD_TOPICS])),
    ("IncrementalAlterConfigs, group", 44, 1, dict(resources=[
        dict(resource_type=GROUP_RESOURCE, resource_name="",
             configs=[dict(name="consumer.session.timeout.ms", config_operation=0, value="45000")])])),
]  # fmt: skip


def broker(kafka_cluster: Any) -> str:
    """One broker of the cluster (its bootstrap may list several), for a raw connection straight to Kafka."""
    return kafka_cluster.bootstrap.split(",")[0]


@pytest.fixture(scope="module")
def proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    config = sasl_tenants_config(kafka_cluster, free_port_block(), USERS)
    process = ProxyProcess(config, tmp_path_factory.mktemp("name-rules"), name="name-rules").start(timeout=120)
    warm_up(process.bootstrap)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def topic(kafka_cluster, proxy) -> str:
    """TOPIC on both sides (CreateTopics v7, one partition), known to every broker before the rows run."""
    for side in (RawClient(broker(kafka_cluster), timeout=60), login(proxy.bootstrap, "alice", USERS["alice"])):
        with side:
            body = make(request_type(19, 7), dict(topics=[dict(name=TOPIC, num_partitions=1, replication_factor=1)],
                                                  timeout=SECONDS))  # fmt: skip
            _, created = side.request(19, 7, 7, body)
            assert int(created.topics[0].error_code) == 0, created
            ask = make(request_type(3, 12), dict(topics=[dict(name=TOPIC)], allow_auto_topic_creation=False))
            deadline = time.monotonic() + 90
            while int(side.request(3, 12, 8, ask)[1].topics[0].error_code) != 0:
                assert time.monotonic() < deadline, f"{TOPIC} never appeared"
                time.sleep(0.2)
    return TOPIC


@pytest.mark.parametrize(("row", "key", "version", "values"), ROWS, ids=[r[0] for r in ROWS])
def test_a_name_kafka_refuses_is_refused_through_a_vc_as_directly(kafka_cluster, proxy, topic, row, key, version,
                                                                  values):  # fmt: skip
    body = make(request_type(key, version), values)
    with RawClient(broker(kafka_cluster), timeout=60) as direct:
        _, expected = direct.request(key, version, 11, body)
    with login(proxy.bootstrap, "alice", USERS["alice"]) as vc:
        _, got = vc.request(key, version, 11, body)
    assert outcome(got) == outcome(expected), (got, expected)
    assert any(code for code, _ in outcome(expected)), expected  # the row is one Kafka refuses


@pytest.mark.parametrize("key", [9, 15], ids=["OffsetFetch", "DescribeGroups"])
def test_the_empty_group_id_is_the_vcs_own_where_kafka_accepts_it(kafka_cluster, proxy, key):
    """OffsetFetch and DescribeGroups answer about the empty group directly; through a VC they do too (the VC's own
    empty group, renamed), each from its coordinator."""
    version = {9: 9, 15: 5}[key]
    values = dict(groups=[dict(group_id="", topics=None)]) if key == 9 else dict(groups=[""])
    body = make(request_type(key, version), values)
    direct = RawClient(broker(kafka_cluster), timeout=60)
    with direct:  # the empty group's coordinator, found as a client finds it
        _, found = direct.request(10, 6, 12, make(request_type(10, 6), dict(key_type=0, coordinator_keys=[""])))
    (entry,) = found.coordinators
    answers = []
    through = coordinator(proxy.bootstrap, "alice", USERS["alice"], "")  # the proxy's port for the VC's coordinator
    for client in (RawClient(f"{entry.host}:{entry.port}", timeout=60), login(through, "alice", USERS["alice"])):
        with client:
            _, got = client.request(key, version, 13, body)
        answers.append(outcome(got))
    assert answers[0] == answers[1] and all(code == 0 for code, _ in answers[0]), answers


@pytest.mark.parametrize("software", ["bad name", "", "-dash", "dot."])
def test_a_client_software_name_kafka_refuses_is_refused_before_login_as_by_the_broker(kafka_cluster, proxy, software):
    """KIP-511: ApiVersions v3 with a name or version Kafka refuses: INVALID_REQUEST and no versions, also from the
    proxy's cached answer to a client not logged in yet."""
    valid = ApiVersionsRequest(client_software_name="raw", client_software_version="1.0")
    with RawClient(proxy.bootstrap, timeout=60) as client:
        _, agreed = client.request(18, 3, 1, valid)  # fills the proxy's cache of the broker's answer, if empty
        assert int(agreed.error_code) == 0 and agreed.api_keys
    for body in (dataclasses.replace(valid, client_software_name=software),
                 dataclasses.replace(valid, client_software_version=software)):  # fmt: skip
        answers = []
        for bootstrap in (broker(kafka_cluster), proxy.bootstrap):
            with RawClient(bootstrap, timeout=60) as client:
                _, got = client.request(18, 3, 2, body)
            answers.append((int(got.error_code), len(got.api_keys)))
        assert answers[0] == answers[1] == (ErrorCode.invalid_request, 0), answers


def test_a_refused_group_id_is_refused_on_a_connection_the_forwarder_serves(kafka_cluster, proxy, topic):
    """A connection whose OffsetCommit and Heartbeat for a group went through (and may be served by the forwarder
    since: proxy/core/grants.py) still has its Heartbeat for the empty group refused: a grant is of names that
    passed, per API, and the empty id never passes."""
    group = f"names-{uuid.uuid4().hex[:6]}"
    commit = make(request_type(8, 9), dict(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                           topics=PARTITIONS))  # fmt: skip
    beat = make(request_type(12, 4), dict(group_id=group, generation_id=1, member_id="m"))
    with login(coordinator(proxy.bootstrap, "alice", USERS["alice"], group), "alice", USERS["alice"]) as vc:
        _, committed = vc.request(8, 9, 1, commit)
        assert outcome(committed) == [(0, "")], committed
        for cid in (2, 3):  # the second may be the forwarder's
            _, known = vc.request(12, 4, cid, beat)
            assert int(known.error_code) == ErrorCode.unknown_member_id, known
        for cid in (4, 5):
            _, refused = vc.request(12, 4, cid, dataclasses.replace(beat, group_id=""))
            assert int(refused.error_code) == ErrorCode.invalid_group_id, refused
