"""KIP-1313 through the real proxy to stock Kafka 4.2 (which predates it): a raw client speaking
request header v3, good and bad sequences, the translated requests' effects on the cluster, and the
instance ids in the exported spans."""

from __future__ import annotations

import datetime
import io
import time
import types
import typing
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i64

from proxy.core import apiversions
from proxy.protocol import codec, kip1313
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, response_body_offset
from vcproxy_tools.process import ProxyProcess

from ..jsonl import complete_records
from .ports import free_port_block
from .rawclient import RawClient
from .tenants import tenancy_config

VC_CLIENT = "kip-app"
APP = uuid.UUID("5b0f3c2e-7d1a-4e55-9a3b-1c2d3e4f5a6b")
OTHER = uuid.UUID("a1a1a1a1-b2b2-4c3c-8d4d-e5e5e5e5e5e5")
TOPIC = "kip1313-topic"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kip1313")


@pytest.fixture(scope="module")
def kip_proxy(kafka_cluster, workdir) -> Iterator[ProxyProcess]:
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        [{"name": "kip", "client_ids": [VC_CLIENT]}],
        listeners={"request_header_v3": True},
        tracing={"enabled": True, "jsonl_dir": str(workdir / "traces")},
    )
    process = ProxyProcess(config, workdir, name="kip1313").start(timeout=120)
    yield process
    process.stop()


def top(key: int) -> int:
    info = api_info(key)
    assert info is not None
    return info.max_version


def entity(key: int, **values: Any) -> Any:
    return request_type(key, top(key))(**values)


class V3Client(RawClient):
    """Sends every request at the KIP-1313 version (the proxy's newest + 1) with request header v3."""

    def __init__(self, bootstrap: str, instance: uuid.UUID, client_id: str | None = VC_CLIENT):
        super().__init__(bootstrap, timeout=30)
        self.instance, self.client_id, self.correlation = instance.bytes, client_id, 0

    def ask(self, key: int, body: Any, *, instance: bytes | None = None, client_id: str | None = None) -> bytes:
        """The raw response; the client id goes on the first request only, as KIP-1313 clients may do."""
        self.correlation += 1
        first_client_id = self.client_id if self.correlation == 1 else client_id
        head = kip1313.encode_header_v3(
            key, top(key) + 1, self.correlation, first_client_id, self.instance if instance is None else instance
        )
        self.send_raw(frame(head + codec.encode(body)))
        response = self.read_frame()
        assert int.from_bytes(response[4:8], "big") == self.correlation
        return response

    def ask_old(self, key: int, body: Any) -> bytes:
        """The same request at the proxy's newest version, with header v1/v2 (no ClientInstanceId)."""
        self.correlation += 1
        info = api_info(key)
        assert info is not None
        head = encode_request_header(
            key, top(key), self.correlation, self.client_id, info.request_header_version(top(key))
        )
        self.send_raw(frame(head + codec.encode(body)))
        return self.read_frame()

    def hello(self) -> Any:
        """ApiVersions first, with header v2 (its next version is newer Kafka's, not KIP-1313's) and
        the client id, which the proxy then supplies for the header-v3 requests that omit it."""
        return decoded(18, self.ask_old(18, api_versions_body()))


def decoded(key: int, response: bytes) -> Any:
    info = api_info(key)
    assert info is not None
    body, _ = codec.decode(
        response_type(key, top(key)), response, response_body_offset(response, info.response_header_version(top(key)))
    )
    return body


def api_versions_body() -> Any:
    return entity(18, client_software_name="kip1313-test", client_software_version="1")


def broker_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    with RawClient(bootstrap.split(",")[0]) as direct:
        _, body = direct.request(18, 3, 1, request_type(18, 3)(client_software_name="t", client_software_version="1"))
    return apiversions.table_of(body)


def record_batch(values: list[bytes]) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    records = tuple(
        Record(attributes=i8(0), timestamp=now, offset=i64(n), key=None, value=v, headers=())
        for n, v in enumerate(values)
    )
    batch = NewRecordBatch(
        producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1), records=records, attributes=i16(0)
    )
    buffer = io.BytesIO()
    write_new_batch(buffer, batch)
    return buffer.getvalue()


def test_a_kip1313_client_works_against_a_broker_without_it(kafka_cluster, kip_proxy):
    broker = broker_versions(kafka_cluster.bootstrap)
    with V3Client(kip_proxy.bootstrap, APP) as client:
        versions = client.hello()
        assert int(versions.error_code) == 0
        advertised = apiversions.table_of(versions)
        # Header v3 (one past the proxy's newest) wherever the broker has the proxy's newest; never SaslHandshake.
        for key, (_, high) in advertised.items():
            has_newest = key in broker and broker[key][1] >= top(key)
            v3 = api_info(key) is not None and kip1313.header_v3_version(api_info(key)) is not None
            expected = top(key) + 1 if has_newest and v3 else min(top(key), broker[key][1])
            assert high == expected, (key, high, expected)
        assert {0, 1, 3, 11, 15, 16, 19} <= {k for k, (_, h) in advertised.items() if h == top(k) + 1}

        created = decoded(
            19,
            client.ask(
                19,
                entity(
                    19,
                    topics=(_creatable(TOPIC),),
                    timeout=datetime.timedelta(seconds=30),
                    validate_only=False,
                ),
            ),
        )
        assert [(t.name, int(t.error_code)) for t in created.topics] == [(TOPIC, 0)]
        topic_id, leader = _wait_for_leader(client, TOPIC)
        coordinator = _find_coordinator(client, "kip-group")

    value = f"through header v3 {uuid.uuid4()}".encode()
    with V3Client(leader, APP) as client:  # the same instance, another connection (to the leader)
        assert int(client.hello().error_code) == 0
        # The leader may learn that it leads a moment after the metadata said so: retriable errors are retried.
        produced = _retrying(
            lambda: decoded(0, client.ask(0, _produce_body(topic_id, record_batch([value])))),
            lambda r: [int(p.error_code) for t in r.responses for p in t.partition_responses],
        )
        assert [int(p.error_code) for t in produced.responses for p in t.partition_responses] == [0]
        fetched = _retrying(
            lambda: decoded(1, client.ask(1, _fetch_body(topic_id))),
            lambda r: [int(r.error_code)] + [int(p.error_code) for t in r.responses for p in t.partitions],
        )
        records = b"".join(p.records or b"" for t in fetched.responses for p in t.partitions)
        assert value in records
    with V3Client(coordinator, APP) as client:
        assert int(client.hello().error_code) == 0
        # The broker saw the connection's client id on requests whose header left it null.
        _join_and_check_client_id(client)
    # ... and the physical topic exists under the VC's prefix only.
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    assert [t for t in admin.list_topics(timeout=20).topics if t.endswith("." + TOPIC)]


def _item(cls: type, name: str) -> Any:
    """The element type of an array field (nullable arrays included)."""
    hint = typing.get_type_hints(cls)[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_args(hint)[0]


def _creatable(name: str) -> Any:
    item = _item(request_type(19, top(19)), "topics")
    return item(name=name, num_partitions=i32(1), replication_factor=i16(3), assignments=(), configs=())


def _wait_for_leader(client: V3Client, name: str) -> tuple[uuid.UUID, str]:
    """The topic's id and its partition 0 leader's address (a proxy port)."""
    item = _item(request_type(3, top(3)), "topics")
    deadline = time.monotonic() + 120
    while True:
        body = entity(
            3,
            topics=(item(name=name, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        metadata = decoded(3, client.ask(3, body))
        (topic,) = metadata.topics
        if int(topic.error_code) == 0 and topic.partitions and topic.partitions[0].leader_id >= 0:
            (leader,) = [b for b in metadata.brokers if b.node_id == topic.partitions[0].leader_id]
            return topic.topic_id, f"{leader.host}:{leader.port}"
        assert time.monotonic() < deadline, f"no leader for {name}: {topic}"
        time.sleep(0.3)


def _find_coordinator(client: V3Client, group: str) -> str:
    cls = request_type(10, top(10))
    deadline = time.monotonic() + 120
    while True:
        found = decoded(10, client.ask(10, cls(key_type=i8(0), coordinator_keys=(group,))))
        (coordinator,) = found.coordinators
        if int(coordinator.error_code) == 0:
            return f"{coordinator.host}:{coordinator.port}"
        assert time.monotonic() < deadline, coordinator
        time.sleep(0.3)


RETRIABLE = {
    int(ErrorCode.leader_not_available),
    int(ErrorCode.not_leader_or_follower),
    int(ErrorCode.not_enough_replicas),
    int(ErrorCode.unknown_topic_id),
    int(ErrorCode.coordinator_load_in_progress),
    int(ErrorCode.coordinator_not_available),
    int(ErrorCode.not_coordinator),
}


def _retrying(ask: Callable[[], Any], codes: Callable[[Any], list[int]], timeout: float = 120) -> Any:
    """ask() again while its answer has only retriable errors (a new topic's leader, a coordinator
    loading), as a real client does; the answer for the caller to check."""
    deadline = time.monotonic() + timeout
    while True:
        answer = ask()
        errors = set(codes(answer)) - {0}
        if not errors or not errors <= RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.3)


def _produce_body(topic_id: uuid.UUID, records: bytes) -> Any:
    cls = request_type(0, top(0))
    topic_cls = _item(cls, "topic_data")
    part_cls = _item(topic_cls, "partition_data")
    return cls(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(topic_cls(topic_id=topic_id, partition_data=(part_cls(index=i32(0), records=records),)),),
    )


def _fetch_body(topic_id: uuid.UUID) -> Any:
    cls = request_type(1, top(1))
    topic_cls = _item(cls, "topics")
    part_cls = _item(topic_cls, "partitions")
    partition = part_cls(partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20))
    return cls(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=i32(1),
        topics=(topic_cls(topic_id=topic_id, partitions=(partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def _join_and_check_client_id(client: V3Client) -> None:
    cls = request_type(11, top(11))
    protocol_cls = _item(cls, "protocols")

    def join(member_id: str) -> Any:
        return decoded(
            11,
            client.ask(
                11,
                cls(
                    group_id="kip-group",
                    session_timeout=datetime.timedelta(seconds=30),
                    rebalance_timeout=datetime.timedelta(seconds=30),
                    member_id=member_id,
                    group_instance_id=None,
                    protocol_type="kip1313-test",
                    protocols=(protocol_cls(name="p", metadata=b"m"),),
                ),
            ),
        )

    first = _retrying(lambda: join(""), lambda r: [int(r.error_code)])
    assert int(first.error_code) == ErrorCode.member_id_required
    # On a loaded machine the coordinator may rebalance the one-member group between the join and the
    # describe (its members list is then empty for a moment): join again until the member is listed.
    deadline = time.monotonic() + 120
    while True:
        joined = _retrying(lambda: join(first.member_id), lambda r: [int(r.error_code)])
        assert int(joined.error_code) == 0
        request = entity(15, groups=("kip-group",), include_authorized_operations=False)
        (group,) = decoded(15, client.ask(15, request)).groups
        assert group.group_id == "kip-group"
        if group.members or time.monotonic() > deadline:
            break
    assert [m.client_id for m in group.members] == [VC_CLIENT]


def test_zero_instance_id_in_the_first_v3_request_is_invalid(kip_proxy):
    list_groups = entity(16, states_filter=(), types_filter=())
    with V3Client(kip_proxy.bootstrap, uuid.UUID(int=0)) as client:
        assert int(decoded(16, client.ask(16, list_groups)).error_code) == ErrorCode.invalid_request


def test_another_or_missing_instance_id_later_is_invalid_and_nothing_reaches_the_broker(kafka_cluster, kip_proxy):
    list_groups = entity(16, states_filter=(), types_filter=())
    with V3Client(kip_proxy.bootstrap, APP) as client:
        assert int(client.hello().error_code) == 0
        assert int(decoded(16, client.ask(16, list_groups)).error_code) == 0  # sets the connection's id
        assert (
            int(decoded(16, client.ask(16, list_groups, instance=OTHER.bytes)).error_code) == ErrorCode.invalid_request
        )
        assert int(decoded(16, client.ask(16, list_groups, instance=bytes(16))).error_code) == ErrorCode.invalid_request
        assert int(decoded(16, client.ask_old(16, list_groups)).error_code) == ErrorCode.invalid_request
        assert int(decoded(16, client.ask(16, list_groups)).error_code) == 0  # the connection still serves
        # CreateTopics has no top-level error code: the proxy closes the connection, the topic is not created.
        client.correlation += 1
        head = kip1313.encode_header_v3(19, top(19) + 1, client.correlation, None, OTHER.bytes)
        body = entity(
            19, topics=(_creatable("never-created"),), timeout=datetime.timedelta(seconds=5), validate_only=False
        )
        client.send_raw(frame(head + codec.encode(body)))
        assert client.is_closed()
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    assert not [t for t in admin.list_topics(timeout=20).topics if t.endswith("never-created")]


def test_spans_carry_the_instance_ids(kip_proxy, workdir):
    with V3Client(kip_proxy.bootstrap, APP) as client:
        client.hello()
        client.ask(16, entity(16, states_filter=(), types_filter=()))
    producer = Producer({"bootstrap.servers": kip_proxy.bootstrap, "client.id": VC_CLIENT})
    producer.list_topics(timeout=20)
    del producer
    served = (top(16) + 1, top(16))  # this test's ListGroups: the client's version, and the broker's

    def complete(found: list[dict[str, Any]]) -> bool:
        """This test's own spans are exported: the served header-v3 ListGroups and librdkafka's Metadata (the
        earlier tests' spans, a refused ListGroups among them, are there before: they prove nothing here)."""
        return any(
            a["vcproxy.api.name"] == "ListGroups"
            and a.get("vcproxy.client_instance_id") == str(APP)
            and (a["vcproxy.api.version"], a.get("vcproxy.api.upstream_version")) == served
            and not a.get("vcproxy.error_codes")
            for a in found
        ) and any(
            a["vcproxy.api.name"] == "Metadata" and a.get("vcproxy.client_instance_id.source") == "proxy" for a in found
        )

    spans = _spans(workdir / "traces", lambda a: a.get("vcproxy.api.name") in ("ListGroups", "Metadata"), complete)
    header = [a for a in spans if a.get("vcproxy.client_instance_id") == str(APP)]
    assert header and all(a["vcproxy.client_instance_id.source"] == "header" for a in header)
    # Served: the client's version, and the one the broker got. Refused (old header after v3): 42.
    versions = {
        (a["vcproxy.api.version"], a.get("vcproxy.api.upstream_version"), tuple(a.get("vcproxy.error_codes", ())))
        for a in header
        if a["vcproxy.api.name"] == "ListGroups"
    }
    assert (top(16) + 1, top(16), ()) in versions
    assert versions <= {(top(16) + 1, top(16), ()), (top(16) + 1, top(16), (42,)), (top(16), None, (42,))}
    assert all(a["vcproxy.client_id"] == VC_CLIENT for a in header)
    others = [a for a in spans if a.get("vcproxy.client_instance_id.source") == "proxy"]
    assert others, "librdkafka's Metadata span, with an instance id from the proxy"
    assert all(uuid.UUID(a["vcproxy.client_instance_id"]) != APP for a in others)


def _spans(directory: Path, wanted, complete, timeout: float = 120) -> list[dict[str, Any]]:
    """The `wanted` span attributes from the proxy's OTLP JSON Lines (exported in batches, a second or so
    apart) once `complete(found)` holds; what was found by the deadline otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for data in complete_records(directory):
            for rs in data.get("resourceSpans", [data] if "scopeSpans" in data else []):
                for ss in rs.get("scopeSpans", []):
                    for span in ss.get("spans", []):
                        attrs = {a["key"]: _value(a["value"]) for a in span.get("attributes", [])}
                        if wanted(attrs):
                            found.append(attrs)
        if complete(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _value(v: dict[str, Any]) -> Any:
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in v:
            return v[kind]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return v
