"""The quota stage through the sans-I/O session (fake clock): mutes, throttle fields set without decoding
records, and DescribeClientQuotas/AlterClientQuotas answered in a VC's terms."""

from __future__ import annotations

import dataclasses
import datetime
import uuid

import pytest
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, OpData
from kio.schema.alter_client_quotas.v1.request import EntityData as AlterEntity
from kio.schema.alter_client_quotas.v1.request import EntryData as AlterEntry
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.describe_client_quotas.v1.response import DescribeClientQuotasResponse
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v16.response import FetchableTopicResponse, FetchResponse, LeaderIdAndEpoch, PartitionData
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from kio.static.primitive import i8, i16, i32, i64

from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession
from proxy.protocol import codec
from proxy.protocol.apis import request_type
from proxy.protocol.headers import response_body_offset
from proxy.quotas.meter import Meters
from proxy.quotas.model import FETCH, PRODUCE, entity
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import (
    TenancyImage,
    admin_record,
    link_record,
    principal_record,
    quota_record,
    topic_record,
    vc_record,
)

from .wire import request_frame, response_frame

LAYOUT = ListenerLayout("proxy.example", 9192, 9193)
RECORDS = bytes(range(256)) * 40
T0 = datetime.timedelta(0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass
class _Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


ORDERS_ID = uuid.UUID("0b0b0b0b-1111-2222-3333-444444444444")


def image(clock: Clock) -> TenancyImage:
    img = TenancyImage()
    img.quotas.meters = Meters(clock=clock)
    for record in (
        vc_record("team-a"),
        vc_record("team-b"),
        principal_record("User:alice", "team-a"),
        principal_record("User:carol", "team-a"),
        principal_record("User:bob", "team-b"),
        admin_record("team-a", "User:alice", True),
        link_record("team-a", "orders", "phys.orders"),
        topic_record("phys.orders", ORDERS_ID),
    ):
        img.apply(*record)
    return img


def session(img: TenancyImage, principal: str) -> ProxySession:
    return ProxySession(LAYOUT, tenancy=_Tenancy(img), principal=principal, super_admins=["User:admin"])


def joined(pieces) -> bytes:
    return b"".join(bytes(p) for p in pieces)


def produce(correlation_id: int) -> bytes:
    body = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=1),
        topic_data=(
            TopicProduceData(name="orders", partition_data=(PartitionProduceData(index=i32(0), records=RECORDS),)),
        ),
    )
    return request_frame(0, 9, correlation_id, body)


def produce_response(correlation_id: int, throttle_ms: int = 0) -> bytes:
    partition = PartitionProduceResponse(
        index=i32(0),
        error_code=ErrorCode.none,
        base_offset=i64(0),
        log_append_time=datetime.datetime.fromtimestamp(0, datetime.UTC),
        log_start_offset=i64(0),
        record_errors=(),
        error_message=None,
    )
    body = ProduceResponse(
        responses=(TopicProduceResponse(name="phys.orders", partition_responses=(partition,)),),
        throttle_time=datetime.timedelta(milliseconds=throttle_ms),
    )
    return response_frame(0, 9, correlation_id, body)


def test_produce_over_quota_mutes_the_connection_and_says_so_in_the_response():
    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), PRODUCE, 1000.0))
    s = session(img, "User:alice")
    first = s.on_request(memoryview(bytearray(produce(1))))
    assert first.action is Action.FORWARD and first.delay == 0.0
    size = len(produce(1))
    # A new client has no credit: its first request earns size/quota seconds of mute.
    clock.now += 1.0
    result = s.on_response(memoryview(bytearray(produce_response(1))))
    out = joined(result.pieces)
    body, _ = codec.decode(ProduceResponse, out, response_body_offset(out, 1))
    expected = size / 1000.0 - 1.0
    assert abs(body.throttle_time.total_seconds() - expected) < 0.01
    assert body.responses[0].name == "orders"  # the tenancy stage's translation kept
    # The next request is held back until the mute ends.
    second = s.on_request(memoryview(bytearray(produce(2))))
    assert abs(second.delay - expected) < 1e-6
    # The broker's own throttle wins when larger.
    clock.now += 100
    s.on_request(memoryview(bytearray(produce(3))))
    result = s.on_response(memoryview(bytearray(produce_response(2, throttle_ms=60_000))))
    out = joined(result.pieces)
    body, _ = codec.decode(ProduceResponse, out, response_body_offset(out, 1))
    assert body.throttle_time == datetime.timedelta(seconds=60)


def test_another_vcs_client_and_a_client_without_quota_are_untouched():
    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), PRODUCE, 1.0))
    for principal in ("User:bob", "User:carol"):
        s = session(img, principal)
        for i in range(5):
            assert s.on_request(memoryview(bytearray(produce(i)))).delay == 0.0
        stage = next(st for st in s.stages if type(st).__name__ == "QuotaStage")
        assert stage.mute_until == 0.0


def fetch_response(correlation_id: int) -> bytes:
    partition = PartitionData(
        partition_index=i32(0),
        error_code=ErrorCode.none,
        high_watermark=i64(10),
        aborted_transactions=None,
        records=RECORDS,
        current_leader=LeaderIdAndEpoch(leader_id=i32(2), leader_epoch=i32(5)),
    )
    body = FetchResponse(
        throttle_time=T0,
        error_code=ErrorCode.none,
        session_id=i32(9),
        # the VC's topic: one it no longer has is answered without its records (proxy/tenancy/fetch_deleted.py)
        responses=(FetchableTopicResponse(topic_id=ORDERS_ID, partitions=(partition,)),),
        node_endpoints=(),
    )
    return response_frame(1, 16, correlation_id, body)


def fetch_request(correlation_id: int) -> bytes:
    return request_frame(1, 16, correlation_id, codec._empty(request_type(1, 16)))


def test_fetch_over_quota_throttle_set_in_place_records_not_copied():
    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", client_id=None), FETCH, 2000.0))
    s = session(img, "User:alice")
    # A new consumer has no credit: its Fetch waits for the least it may carry (a tenth of a second of the quota).
    assert s.on_request(memoryview(bytearray(fetch_request(1)))).delay == pytest.approx(0.1)
    original = fetch_response(1)
    result = s.on_response(memoryview(bytearray(original)))
    out = joined(result.pieces)
    body, end = codec.decode(FetchResponse, out, response_body_offset(out, 1))
    assert end == len(out) == len(original)
    # Past what it was bounded to (the first record batch comes whole, KIP-74): muted until the debt is paid and the
    # next Fetch's least is there, and told so.
    told = (len(original) + 200) / 2000.0
    assert abs(body.throttle_time.total_seconds() - told) < 0.002
    assert body.responses[0].partitions[0].records == RECORDS
    assert any(isinstance(p, memoryview) and len(p) > len(RECORDS) for p in result.pieces)  # a slice, not a copy
    decision = s.on_request(memoryview(bytearray(fetch_request(2))))
    assert abs(decision.delay - told) < 1e-6


def share_fetch_response(correlation_id: int) -> bytes:
    from kio.schema.share_fetch.v1 import response as sf

    partition = sf.PartitionData(
        partition_index=i32(0),
        error_code=ErrorCode.none,
        error_message=None,
        acknowledge_error_code=ErrorCode.none,
        acknowledge_error_message=None,
        current_leader=sf.LeaderIdAndEpoch(leader_id=i32(2), leader_epoch=i32(5)),
        records=RECORDS,
        acquired_records=(sf.AcquiredRecords(first_offset=i64(0), last_offset=i64(9), delivery_count=i16(1)),),
    )
    body = sf.ShareFetchResponse(
        throttle_time=T0,
        error_code=ErrorCode.none,
        error_message=None,
        acquisition_lock_timeout=datetime.timedelta(seconds=30),
        responses=(sf.ShareFetchableTopicResponse(topic_id=uuid.uuid4(), partitions=(partition,)),),
        node_endpoints=(),
    )
    return response_frame(78, 1, correlation_id, body)


def share_request(api_key: int, correlation_id: int) -> bytes:
    body = codec._empty(request_type(api_key, 1), group_id="sg", member_id="m", share_session_epoch=i32(0))
    return request_frame(api_key, 1, correlation_id, body)


def share_acknowledge_response(correlation_id: int) -> bytes:
    from kio.schema.share_acknowledge.v1 import response as sa

    body = sa.ShareAcknowledgeResponse(
        throttle_time=T0, error_code=ErrorCode.none, error_message=None, responses=(), node_endpoints=()
    )
    return response_frame(79, 1, correlation_id, body)


def test_share_consumers_are_held_to_the_consumer_byte_rate_like_fetch():
    """KIP-932 share consumers read with ShareFetch (78) and ack with ShareAcknowledge (79): their response
    bytes are consumer bytes, throttled as Fetch's are (throttle_time_ms in place, KIP-219 mute)."""
    from kio.schema.share_acknowledge.v1.response import ShareAcknowledgeResponse
    from kio.schema.share_fetch.v1.response import ShareFetchResponse

    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), FETCH, 2000.0))
    s = session(img, "User:alice")
    assert s.on_request(memoryview(bytearray(share_request(78, 1)))).delay == pytest.approx(0.1)  # no credit yet
    original = share_fetch_response(1)
    result = s.on_response(memoryview(bytearray(original)))
    out = joined(result.pieces)
    body, end = codec.decode(ShareFetchResponse, out, response_body_offset(out, 1))
    assert end == len(out) == len(original)
    first = (len(original) + 200) / 2000.0  # its bytes, then the next request's least (a tenth of a second)
    assert abs(body.throttle_time.total_seconds() - first) < 0.002
    assert body.responses[0].partitions[0].records == RECORDS
    assert any(isinstance(p, memoryview) and len(p) > len(RECORDS) for p in result.pieces)  # a slice, not a copy
    # The next request, an acknowledgement, waits for the mute; its answer counts and says the mute.
    decision = s.on_request(memoryview(bytearray(share_request(79, 2))))
    assert abs(decision.delay - first) < 1e-6
    acked = share_acknowledge_response(2)
    out = joined(s.on_response(memoryview(bytearray(acked))).pieces)
    body, _ = codec.decode(ShareAcknowledgeResponse, out, response_body_offset(out, 1))
    assert abs(body.throttle_time.total_seconds() - (len(original) + len(acked) + 200) / 2000.0) < 0.002
    # The meter is the user's consumer_byte_rate meter, the same one Fetch responses fill.
    (meter,) = [m for key, m in img.quotas.meters.items() if key[0] == FETCH]
    assert meter.rate.values[-1] == len(original) + len(acked)


def test_share_fetches_count_against_the_request_rate():
    from proxy.quotas.model import REQUEST

    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", client_id=None), REQUEST, 2.0))
    s = session(img, "User:alice")
    delays = [s.on_request(memoryview(bytearray(share_request(78 + i % 2, i)))).delay for i in range(4)]
    # A new client has no credit: each request is half a second more of mute (2 requests/s).
    assert delays == [0.0, 0.5, 1.0, 1.5]


def test_per_request_cost_without_quotas_is_a_version_check():
    clock = Clock()
    img = image(clock)
    s = session(img, "User:alice")
    original = fetch_response(1)
    s.on_request(memoryview(bytearray(fetch_request(1))))
    result = s.on_response(memoryview(bytearray(original)))
    out = joined(result.pieces)
    body, _ = codec.decode(FetchResponse, out, response_body_offset(out, 1))
    assert body.throttle_time == T0 and len(img.quotas.meters) == 0


# -- DescribeClientQuotas / AlterClientQuotas --------------------------------------------------------------


def alter_request(*entries, validate_only=False) -> AlterClientQuotasRequest:
    return AlterClientQuotasRequest(
        entries=tuple(
            AlterEntry(
                entity=tuple(AlterEntity(entity_type=t, entity_name=n) for t, n in ent),
                ops=tuple(OpData(key=k, value=float(v or 0), remove=v is None) for k, v in ops),
            )
            for ent, ops in entries
        ),
        validate_only=validate_only,
    )


def describe_request(*components, strict=False) -> DescribeClientQuotasRequest:
    return DescribeClientQuotasRequest(
        components=tuple(ComponentData(entity_type=t, match_type=i8(m), match=n) for t, m, n in components),
        strict=strict,
    )


def call(s: ProxySession, api_key: int, body, response_cls, correlation_id: int = 5):
    decision = s.on_request(memoryview(bytearray(request_frame(api_key, 1, correlation_id, body))))
    if decision.action is not Action.LOCAL:
        return decision, None
    reply = s.next_local_reply()
    assert reply is not None and reply.reply is not None
    response, _ = codec.decode(response_cls, reply.reply, response_body_offset(reply.reply, 1))
    return reply, response


def test_vc_admin_alters_and_describes_in_the_vcs_terms():
    img = image(Clock())
    s = session(img, "User:alice")
    request = alter_request(
        ((("user", "carol"),), [(PRODUCE, 1048576)]),
        ((("client-id", None),), [(FETCH, 2e6)]),
        ((("ip", "1.2.3.4"),), [(PRODUCE, 1)]),
        ((("user", "carol"),), [("request_percentage", 10)]),
    )
    reply, response = call(s, 49, request, AlterClientQuotasResponse)
    assert [int(e.error_code) for e in response.entries] == [0, 0, 42, 42]
    assert response.entries[0].entity[0].entity_name == "carol"
    assert [key for key, _ in reply.writes] == [
        '["quota","user=carol","virtual-cluster=team-a","producer_byte_rate"]',
        '["quota","client-id","virtual-cluster=team-a","consumer_byte_rate"]',
    ]
    for record in reply.writes:  # what the shell writes and every replica applies
        img.apply(*record)
    assert img.quotas.resolve("team-a", "User:carol", "x").limits[PRODUCE].quota == 1048576
    _, described = call(s, 48, describe_request(("user", 0, "carol"), strict=True), DescribeClientQuotasResponse)
    assert int(described.error_code) == 0
    assert [[(e.entity_type, e.entity_name) for e in x.entity] for x in described.entries] == [[("user", "carol")]]
    assert [(v.key, v.value) for v in described.entries[0].values] == [(PRODUCE, 1048576.0)]
    _, everything = call(s, 48, describe_request(), DescribeClientQuotasResponse)
    assert len(everything.entries) == 2
    # Another VC's admin sees none of it; validate_only writes nothing; removing works.
    img.apply(*admin_record("team-b", "User:bob", True))
    _, other = call(session(img, "User:bob"), 48, describe_request(), DescribeClientQuotasResponse)
    assert int(other.error_code) == 0 and other.entries == ()
    reply, response = call(
        s, 49, alter_request(((("user", "carol"),), [(PRODUCE, None)]), validate_only=True), AlterClientQuotasResponse
    )
    assert int(response.entries[0].error_code) == 0 and reply.writes == []
    reply, _ = call(s, 49, alter_request(((("user", "carol"),), [(PRODUCE, None)])), AlterClientQuotasResponse)
    assert reply.writes == [('["quota","user=carol","virtual-cluster=team-a","producer_byte_rate"]', None)]


def test_members_who_are_not_admins_are_refused_in_the_apis_shape():
    img = image(Clock())
    s = session(img, "User:carol")
    reply, response = call(s, 49, alter_request(((("user", "carol"),), [(PRODUCE, 1)])), AlterClientQuotasResponse)
    assert [int(e.error_code) for e in response.entries] == [31] and reply.writes == []
    _, described = call(s, 48, describe_request(), DescribeClientQuotasResponse)
    assert int(described.error_code) == 31
    # A VC admin may not use the virtual-cluster entity type: super admins only.
    _, response = call(
        session(img, "User:alice"),
        49,
        alter_request(((("virtual-cluster", "team-a"),), [(PRODUCE, 1)])),
        AlterClientQuotasResponse,
    )
    assert int(response.entries[0].error_code) == 31


def test_super_admin_sets_caps_with_the_virtual_cluster_entity_type_and_the_rest_goes_upstream():
    img = image(Clock())
    s = session(img, "User:admin")
    reply, response = call(
        s,
        49,
        alter_request(
            ((("virtual-cluster", "team-a"),), [(PRODUCE, 5e6)]),
            ((("virtual-cluster", None),), [(PRODUCE, 1e6)]),
            ((("virtual-cluster", "team-b"), ("user", "bob")), [(FETCH, 3e6)]),
            ((("virtual-cluster", "kafka-cluster"), ("client-id", None)), [(FETCH, 7e6)]),
            ((("virtual-cluster", "kafka-cluster"),), [(FETCH, 7e6)]),
        ),
        AlterClientQuotasResponse,
    )
    assert [int(e.error_code) for e in response.entries] == [0, 0, 0, 0, 42]
    for record in reply.writes:
        img.apply(*record)
    assert img.quotas.resolve("team-a", "User:alice", None).caps[PRODUCE].quota == 5e6
    assert img.quotas.resolve("team-b", "User:bob", None).caps[PRODUCE].quota == 1e6
    assert img.quotas.resolve("team-b", "User:bob", "x").limits[FETCH].quota == 3e6
    assert img.quotas.resolve("team-a", "User:alice", "x").limits[FETCH].quota == 7e6  # the global level
    _, described = call(
        s, 48, describe_request(("virtual-cluster", 0, "team-a"), strict=True), DescribeClientQuotasResponse
    )
    assert [(v.key, v.value) for v in described.entries[0].values] == [(PRODUCE, 5e6)]
    _, everything = call(s, 48, describe_request(("virtual-cluster", 2, None)), DescribeClientQuotasResponse)
    names = [tuple((e.entity_type, e.entity_name) for e in x.entity) for x in everything.entries]
    assert (("client-id", None), ("virtual-cluster", "kafka-cluster")) in names and len(names) == 4
    # Without the virtual-cluster entity type an unbound admin's quota requests are the broker's.
    decision, _ = call(s, 48, describe_request(("user", 0, "x")), DescribeClientQuotasResponse)
    assert decision.action is Action.FORWARD


def test_malformed_quota_request_closes_the_connection():
    img = image(Clock())
    s = session(img, "User:alice")
    frame = bytearray(request_frame(49, 1, 5, alter_request(((("user", "carol"),), [(PRODUCE, 1)]))))
    frame[-3] = 0x7F  # a length past the end
    assert s.on_request(memoryview(frame)).action is Action.CLOSE


def test_a_vc_cap_bounds_the_vcs_clients_together():
    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a"), PRODUCE, 10_000.0))
    alice, carol, bob = session(img, "User:alice"), session(img, "User:carol"), session(img, "User:bob")
    size = len(produce(1))
    assert alice.on_request(memoryview(bytearray(produce(1)))).delay == 0.0
    # carol's first request waits for the cap's debt alice's made: a new connection is no way around it.
    assert abs(carol.on_request(memoryview(bytearray(produce(1)))).delay - size / 10_000) < 1e-6
    # Every request was charged to team-a's cap: each connection waits for all the bytes charged before.
    assert abs(alice.on_request(memoryview(bytearray(produce(2)))).delay - 2 * size / 10_000) < 1e-6
    assert abs(carol.on_request(memoryview(bytearray(produce(2)))).delay - 3 * size / 10_000) < 1e-6
    assert bob.on_request(memoryview(bytearray(produce(1)))).delay == 0.0  # team-b has no cap


def test_controller_mutations_counted_from_the_brokers_answer():
    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse

    from proxy.quotas.model import MUTATION

    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), MUTATION, 2.0))
    s = session(img, "User:alice")
    topics = tuple(
        CreatableTopic(name=n, num_partitions=i32(6), replication_factor=i16(1), assignments=(), configs=())
        for n in ("t1", "t2")
    )
    request = CreateTopicsRequest(topics=topics, timeout=datetime.timedelta(seconds=5), validate_only=False)
    decision = s.on_request(memoryview(bytearray(request_frame(19, 7, 1, request))))
    assert decision.action is Action.FORWARD
    physical = [t.name for t in codec.decode(CreateTopicsRequest, joined(decision.pieces), 14 + 1 + 1)[0].topics]
    results = tuple(
        CreatableTopicResult(
            name=name, topic_id=uuid.uuid4(), error_code=ErrorCode(code), error_message=None,
            topic_config_error_code=ErrorCode.none, num_partitions=i32(6), replication_factor=i16(1), configs=(),
        )
        for name, code in zip(physical, (0, 36), strict=True)
    )  # fmt: skip
    response = CreateTopicsResponse(throttle_time=T0, topics=results)
    result = s.on_response(memoryview(bytearray(response_frame(19, 7, 1, response))))
    out = joined(result.pieces)
    body, _ = codec.decode(CreateTopicsResponse, out, response_body_offset(out, 1))
    # 6 partitions created (the second topic failed) against 2/s, a new client: 3 s of mute.
    assert abs(body.throttle_time.total_seconds() - 3.0) < 0.002
    assert [t.name for t in body.topics] == ["t1", "t2"]


def test_metrics_show_quota_use_and_throttle_per_entity():
    from proxy.observability.metrics import Metrics

    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user=None), PRODUCE, 1000.0))
    s = session(img, "User:carol")
    s.on_request(memoryview(bytearray(produce(1))))
    metrics = Metrics()
    metrics.quotas = img.quotas
    text = metrics.render().decode()
    labels = 'client_id="",quota="producer_byte_rate",scope="client",user="carol",vc="team-a"'
    assert f"vcproxy_quota_throttle_seconds_total{{{labels}}}" in text
    assert f"vcproxy_quota_usage_ratio{{{labels}}}" in text


def test_quota_entities_per_vc_are_bounded():
    from proxy.tenancy.model import setting_record

    img = image(Clock())
    img.apply(*setting_record("team-a", "max_quota_entities", 2))  # an operator's limit for the VC
    s = session(img, "User:alice")
    entries = [((("user", f"u{i}"),), [(PRODUCE, 1)]) for i in range(3)]
    reply, response = call(s, 49, alter_request(*entries), AlterClientQuotasResponse)
    assert [int(e.error_code) for e in response.entries] == [0, 0, 44] and len(reply.writes) == 2
    for record in reply.writes:
        img.apply(*record)
    # Changing or removing an existing entity is always possible.
    reply, response = call(s, 49, alter_request(((("user", "u0"),), [(PRODUCE, None)])), AlterClientQuotasResponse)
    assert int(response.entries[0].error_code) == 0 and len(reply.writes) == 1


def test_the_span_carries_the_throttle_and_the_mute():
    import time

    from .test_request_trace import attrs, recorder

    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), PRODUCE, 1000.0))
    s = session(img, "User:alice")
    connection, collect = recorder(s)
    for cid in (1, 2):
        frame = memoryview(bytearray(produce(cid)))
        decision = s.on_request(frame)
        connection.on_request(frame, decision, time.time_ns())
        upstream = memoryview(bytearray(produce_response(cid)))
        result = s.on_response(upstream)
        connection.on_reply(result.exchange, result.pieces, upstream)
    first, second = (attrs(span) for span in collect.named("Produce"))
    size = len(produce(1))
    # The throttle the client was sent (the broker said 0), and the mute that held the next request back.
    assert abs(first["vcproxy.throttle_ms"] - size) <= 1 and "vcproxy.quota.delay_ms" not in first
    assert abs(second["vcproxy.quota.delay_ms"] - size) <= 1


def test_topics_auto_created_for_a_vc_count_as_controller_mutations():
    """Metadata auto-creation (and Streams internal topics: tests/unit/test_topic_policy.py) make the
    broker create topics on the VC's behalf: they are charged like CreateTopics."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponsePartition, MetadataResponseTopic

    from proxy.quotas.model import MUTATION

    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), MUTATION, 2.0))
    s = ProxySession(
        LAYOUT, tenancy=_Tenancy(img, Policy(auto_create_topics=True)), principal="User:alice", super_admins=[]
    )
    request = MetadataRequest(
        topics=(MetadataRequestTopic(name="fresh", topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    decision = s.on_request(memoryview(bytearray(request_frame(3, 12, 1, request))))
    sent, _ = codec.decode(MetadataRequest, joined(decision.pieces), 14 + 1 + 1)
    assert sent.allow_auto_topic_creation
    partitions = tuple(codec._empty(MetadataResponsePartition, partition_index=i) for i in range(6))
    topic = codec._empty(MetadataResponseTopic, name=sent.topics[0].name, partitions=partitions)
    response = codec._empty(MetadataResponse, topics=(topic,))
    result = s.on_response(memoryview(bytearray(response_frame(3, 12, 1, response))))
    out = joined(result.pieces)
    body, _ = codec.decode(MetadataResponse, out, response_body_offset(out, 1))
    assert body.topics[0].name == "fresh"
    assert abs(body.throttle_time.total_seconds() - 3.0) < 0.002  # 6 partitions against 2/s


# -- a Fetch charged before it goes (proxy/quotas/fetch_bound.py) ----------------------------------------------


def fetch_answer(correlation_id: int, size: int) -> bytes:
    """A Fetch answer carrying `size` bytes of records (none: an empty answer)."""
    partition = PartitionData(
        partition_index=i32(0),
        error_code=ErrorCode.none,
        high_watermark=i64(10),
        aborted_transactions=None,
        records=bytes(size) if size else None,
        current_leader=LeaderIdAndEpoch(leader_id=i32(-1), leader_epoch=i32(-1)),
    )
    topics = (FetchableTopicResponse(topic_id=ORDERS_ID, partitions=(partition,)),) if size else ()
    body = FetchResponse(throttle_time=T0, error_code=ErrorCode.none, session_id=i32(0), responses=topics,
                         node_endpoints=())  # fmt: skip
    return response_frame(1, 16, correlation_id, body)


def asked_max_bytes(decision) -> int:
    from proxy.quotas import fetch_bound

    sent = joined(decision.pieces) if decision.pieces is not None else bytes(decision.pending.frame)
    return fetch_bound.asked(sent, 14 + 1 + 1, 16)  # header v2: size, key, version, correlation, "t", no tags


def fetch_asking(correlation_id: int, max_bytes: int) -> bytes:
    return request_frame(1, 16, correlation_id, codec._empty(request_type(1, 16), max_bytes=i32(max_bytes)))


def test_a_fetch_is_bounded_by_what_its_quota_holds():
    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), FETCH, 2000.0))
    s = session(img, "User:alice")
    first = s.on_request(memoryview(bytearray(fetch_asking(1, 1 << 20))))
    # A new meter holds nothing: the least (a tenth of a second of the quota), waited for.
    assert first.delay == pytest.approx(0.1) and asked_max_bytes(first) == 200
    clock.now += first.delay
    s.on_response(memoryview(bytearray(fetch_answer(1, 0))))  # nothing to read: all of it goes back
    clock.now += 5.0
    # Five seconds of credit: one window's worth at most, at once.
    second = s.on_request(memoryview(bytearray(fetch_asking(2, 1 << 20))))
    assert second.delay == 0.0 and asked_max_bytes(second) == 2000
    s.on_response(memoryview(bytearray(fetch_answer(2, 1900))))
    # One that asks for less keeps what it asked for, and takes no more.
    third = s.on_request(memoryview(bytearray(fetch_asking(3, 500))))
    assert third.delay == 0.0 and asked_max_bytes(third) == 500


@pytest.mark.parametrize("connections", [1, 4])
def test_pipelined_fetches_on_many_connections_get_the_quota_and_no_more(connections):
    """The probe of issue 56 against the sans-I/O session: each connection pipelines Fetches asking for 1 MiB, its
    shell reading the next request once the one before went (after its delay); the broker answers each with what its
    max_bytes allows, 5 ms later. Together they get the quota, within one window, never 17 times it."""
    import heapq

    quota, duration = 200_000.0, 30.0
    clock = Clock()
    start = clock.now
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), FETCH, quota))
    sessions = [session(img, "User:alice") for _ in range(connections)]
    events: list[tuple[float, int, int, int, int]] = [(start + 0.001 * i, i, i, -1, 0) for i in range(connections)]
    correlations, got, seq = [0] * connections, 0.0, connections
    while events:
        t, _, i, size, correlation = heapq.heappop(events)
        clock.now = t
        if size >= 0:  # an answer
            msg = fetch_answer(correlation, size)
            result = sessions[i].on_response(memoryview(bytearray(msg)))
            got += sum(map(len, result.pieces)) if t < start + duration else 0
            continue
        if t >= start + duration:
            continue
        correlations[i] += 1
        decision = sessions[i].on_request(memoryview(bytearray(fetch_asking(correlations[i], 1 << 20))))
        sent = t + decision.delay
        answer = min(asked_max_bytes(decision), 1 << 20)
        seq += 2
        heapq.heappush(events, (sent + 0.005, seq, i, answer, correlations[i]))
        heapq.heappush(events, (sent, seq + 1, i, -1, 0))  # the next request, read once this one went
    assert 0.9 * quota * duration <= got <= quota * (duration + 1.0), got / (quota * duration)


def test_a_debt_is_waited_out_in_full_on_every_connection_and_the_throttle_told_is_capped():
    from proxy.quotas.meter import MAX_TOLD

    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), FETCH, 1000.0))
    first, fresh = session(img, "User:alice"), session(img, "User:alice")
    clock.now += first.on_request(memoryview(bytearray(fetch_asking(1, 1 << 20)))).delay
    # A record batch far larger than the 100 bytes the Fetch was bounded to (KIP-74): 50 s of the quota in debt.
    out = joined(first.on_response(memoryview(bytearray(fetch_answer(1, 50_000)))).pieces)
    body, _ = codec.decode(FetchResponse, out, response_body_offset(out, 1))
    assert body.throttle_time.total_seconds() == MAX_TOLD  # told at most 11 s, as a broker tells
    debt = (len(out) - 100) / 1000.0
    # A new connection of the same user waits for all of it (and its own least), not for 11 s.
    assert fresh.on_request(memoryview(bytearray(fetch_asking(1, 1 << 20)))).delay == pytest.approx(debt + 0.1)
    clock.now += MAX_TOLD
    assert first.on_request(memoryview(bytearray(fetch_asking(2, 1 << 20)))).delay > debt - MAX_TOLD


def test_a_fetch_answered_by_the_proxy_gives_its_charge_back():
    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), FETCH, 2000.0))
    s = session(img, "User:alice")
    decision = s.on_request(memoryview(bytearray(fetch_asking(1, 1 << 20))))
    ((key, _),) = decision.pending.quota_taken[0]
    assert img.quotas.meters.get(key).tokens == -200
    assert s.quota is not None
    s.quota.unused(decision.pending)  # as `ProxySession._settle` does when a later stage answers it
    assert img.quotas.meters.get(key).tokens == 0 and decision.pending.quota_taken is None


def test_a_fetch_too_short_to_hold_max_bytes_is_closed_not_a_crash():
    clock = Clock()
    img = image(clock)
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="alice"), FETCH, 2000.0))
    s = session(img, "User:alice")
    frame = bytearray(fetch_asking(1, 1 << 20))[: 14 + 1 + 1 + 6]  # the header, then 6 bytes of body
    frame[:4] = (len(frame) - 4).to_bytes(4, "big")
    assert s.on_request(memoryview(frame)).action is Action.CLOSE
