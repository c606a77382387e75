"""KIP-1313 request header v3: the rules the proxy enforces and the translation to the version before."""

import datetime
import uuid

import pytest
from kio.schema.api_versions.v4.request import ApiVersionsRequest
from kio.schema.api_versions.v4.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from kio.schema.get_telemetry_subscriptions.v0.response import GetTelemetrySubscriptionsResponse
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_groups.v5.response import ListGroupsResponse
from kio.schema.metadata.v13.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_delete.v0.response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from kio.schema.produce.v13.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.push_telemetry.v0.request import PushTelemetryRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.static.primitive import i8, i16, i32

from proxy.core.session import Action, ProtocolViolation, ProxySession
from proxy.protocol import codec, kip1313
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import response_body_offset
from proxy.protocol.primitives import read_int16, read_int32, read_uvarint

from .test_session import LAYOUT, joined
from .wire import request_frame, response_frame

APP = uuid.UUID("6f1c1a52-52f8-4c8e-9a57-0d2b6c3f5e11").bytes
OTHER = uuid.UUID("0b6c1f0e-aaaa-4bbb-8ccc-1234567890ab").bytes
T0 = datetime.timedelta(0)
RECORDS = bytes(range(256)) * 8


def v3_frame(api_key: int, version: int, correlation_id: int, body, client_id: str | None, instance: bytes) -> bytes:
    raw = body if isinstance(body, bytes) else codec.encode(body)
    return frame(kip1313.encode_header_v3(api_key, version, correlation_id, client_id, instance) + raw)


def top(key: int) -> int:
    info = api_info(key)
    assert info is not None
    return info.max_version


def negotiated(s: ProxySession, instance: bytes = APP, client_id: str | None = "app") -> ProxySession:
    """ApiVersions v4 with header v2 (its v5 is newer Kafka's, not KIP-1313's), as clients start; the
    broker has the proxy's newest versions; then the first header-v3 request sets the instance id."""
    req = request_frame(18, 4, 1, ApiVersionsRequest(client_software_name="t", client_software_version="1"), client_id)
    assert s.on_request(memoryview(bytearray(req))).action is Action.FORWARD
    table = {k: (0, top(k)) for k in (0, 3, 8, 16, 17, 18, 28, 36, 42, 47, 71, 72)}
    upstream = ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=tuple(
            ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi)) for k, (lo, hi) in table.items()
        ),
        throttle_time=T0,
    )
    out = joined(s.on_response(memoryview(bytearray(response_frame(18, 4, 1, upstream)))).pieces)
    body, _ = codec.decode(ApiVersionsResponse, out, response_body_offset(out, 0))
    advertised = {int(k.api_key): int(k.max_version) for k in body.api_keys}
    # SaslHandshake, next versions newer Kafka uses, SaslAuthenticate (clients take the advertised max)
    plain = {17} | kip1313.TAKEN_BY_NEWER_KAFKA | kip1313.CLIENTS_USE_ADVERTISED
    assert {k: v for k, v in advertised.items() if k in plain} == {k: top(k) for k in table if k in plain}
    assert all(advertised[k] == top(k) + 1 for k in table if k not in plain)
    decision = s.on_request(memoryview(bytearray(list_groups_v3(100, instance))))
    assert decision.action is Action.FORWARD
    answer = ListGroupsResponse(throttle_time=T0, error_code=ErrorCode.none, groups=())
    s.on_response(memoryview(bytearray(response_frame(16, top(16), 100, answer))))
    return s


def list_groups_v3(correlation_id: int, instance: bytes) -> bytes:
    return v3_frame(
        16, top(16) + 1, correlation_id, ListGroupsRequest(states_filter=(), types_filter=()), None, instance
    )


def error_of(reply: bytes, api_key: int, version: int, cls) -> int:
    body, _ = codec.decode(cls, reply, response_body_offset(reply, api_info(api_key).response_header_version(version)))
    return int(body.error_code)


def test_header_v3_round_trip():
    raw = v3_frame(3, 14, 9, b"BODY", "app", APP)
    header = kip1313.parse_header_v3(raw)
    assert (header.client_id, header.instance_id, bytes(raw[header.body_offset :])) == ("app", APP, b"BODY")
    assert header.instance_uuid == uuid.UUID(bytes=APP)


def test_request_forwarded_as_the_version_before_with_the_remembered_client_id():
    s = negotiated(ProxySession(LAYOUT))
    body = MetadataRequest(
        topics=(MetadataRequestTopic(name="t", topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    # Later v3 requests may leave the client id null: the connection's first one goes upstream.
    decision = s.on_request(memoryview(bytearray(v3_frame(3, 14, 2, body, None, APP))))
    assert decision.action is Action.FORWARD
    assert joined(decision.pieces) == request_frame(3, 13, 2, body, client_id="app")
    assert decision.pending.version_seen_by_client == 14 and decision.pending.api_version == 13
    assert s.client_instance_id == str(uuid.UUID(bytes=APP)) and s.client_instance_id_source == "header"


def test_produce_downgraded_in_place_without_copying_the_records():
    s = negotiated(ProxySession(LAYOUT))
    body = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            TopicProduceData(
                topic_id=uuid.UUID(int=7),
                partition_data=(PartitionProduceData(index=i32(0), records=RECORDS),),
            ),
        ),
    )
    buffer = bytearray(v3_frame(0, 14, 3, body, "app", APP))
    decision = s.on_request(memoryview(buffer))
    (piece,) = decision.pieces
    assert isinstance(piece, memoryview) and piece.obj is buffer  # a view of the receive buffer
    assert bytes(piece) == request_frame(0, 13, 3, body, client_id="app")


def test_response_of_a_translated_request_passes_unchanged():
    s = negotiated(ProxySession(LAYOUT))
    s.on_request(memoryview(bytearray(list_groups_v3(2, APP))))
    upstream = response_frame(
        16, top(16), 2, ListGroupsResponse(throttle_time=T0, error_code=ErrorCode.none, groups=())
    )
    assert joined(s.on_response(memoryview(bytearray(upstream))).pieces) == upstream


def test_first_v3_request_with_zero_instance_id_is_invalid():
    s = ProxySession(LAYOUT)
    decision = s.on_request(memoryview(bytearray(list_groups_v3(1, bytes(16)))))
    assert decision.action is Action.LOCAL
    assert error_of(decision.pending.reply, 16, top(16), ListGroupsResponse) == ErrorCode.invalid_request
    assert s.client_instance_id_source == "proxy"


def test_later_request_with_another_instance_id_is_invalid():
    s = negotiated(ProxySession(LAYOUT))
    decision = s.on_request(memoryview(bytearray(list_groups_v3(2, OTHER))))
    assert decision.action is Action.LOCAL
    assert error_of(decision.pending.reply, 16, top(16), ListGroupsResponse) == ErrorCode.invalid_request
    decision = s.on_request(memoryview(bytearray(list_groups_v3(3, bytes(16)))))
    assert error_of(decision.pending.reply, 16, top(16), ListGroupsResponse) == ErrorCode.invalid_request
    assert s.client_instance_id == str(uuid.UUID(bytes=APP))  # unchanged


def test_request_without_header_v3_after_it_is_invalid_but_sasl_handshake_is_exempt():
    s = negotiated(ProxySession(LAYOUT))
    old = request_frame(16, top(16), 2, ListGroupsRequest(states_filter=(), types_filter=()))
    decision = s.on_request(memoryview(bytearray(old)))
    assert decision.action is Action.LOCAL
    assert error_of(decision.pending.reply, 16, top(16), ListGroupsResponse) == ErrorCode.invalid_request
    handshake = request_frame(17, 1, 3, SaslHandshakeRequest(mechanism="PLAIN"))
    assert s.on_request(memoryview(bytearray(handshake))).action is Action.FORWARD


def produce_v13() -> ProduceRequest:
    partition = PartitionProduceData(index=i32(0), records=RECORDS)
    return ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(topic_id=uuid.UUID(int=7), partition_data=(partition,)),),
    )


def test_violation_on_an_api_without_a_top_level_error_closes_the_connection():
    s = negotiated(ProxySession(LAYOUT))
    assert s.on_request(memoryview(bytearray(v3_frame(0, 14, 2, produce_v13(), None, OTHER)))).action is Action.CLOSE


def test_connections_without_header_v3_are_not_checked_and_get_a_proxy_instance_id():
    s = ProxySession(LAYOUT)
    first = s.client_instance_id
    for correlation_id in (1, 2):
        old = request_frame(16, top(16), correlation_id, ListGroupsRequest(states_filter=(), types_filter=()))
        assert s.on_request(memoryview(bytearray(old))).action is Action.FORWARD
    assert s.client_instance_id == first and s.client_instance_id_source == "proxy"
    uuid.UUID(first)
    assert ProxySession(LAYOUT).client_instance_id != first


def test_offset_delete_v1_is_flexible_both_ways():
    s = negotiated(ProxySession(LAYOUT))
    v1_body = (
        b"\x03g1"  # group id, compact
        b"\x02\x02t"  # one topic "t"
        b"\x03\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00"  # partitions 0 and 2, each with empty tags
        b"\x00"  # topic tags
        b"\x00"  # body tags
    )
    decision = s.on_request(memoryview(bytearray(v3_frame(47, 1, 4, v1_body, None, APP))))
    v0 = OffsetDeleteRequest(
        group_id="g1",
        topics=(
            OffsetDeleteRequestTopic(
                name="t",
                partitions=(
                    OffsetDeleteRequestPartition(partition_index=i32(0)),
                    OffsetDeleteRequestPartition(partition_index=i32(2)),
                ),
            ),
        ),
    )
    assert joined(decision.pieces) == request_frame(47, 0, 4, v0, client_id="app")
    upstream = OffsetDeleteResponse(
        error_code=ErrorCode.none,
        throttle_time=T0,
        topics=(
            OffsetDeleteResponseTopic(
                name="t",
                partitions=(
                    OffsetDeleteResponsePartition(partition_index=i32(0), error_code=ErrorCode.none),
                    OffsetDeleteResponsePartition(
                        partition_index=i32(2), error_code=ErrorCode.group_subscribed_to_topic
                    ),
                ),
            ),
        ),
    )
    out = joined(s.on_response(memoryview(bytearray(response_frame(47, 0, 4, upstream)))).pieces)
    assert int.from_bytes(out[:4], "big") == len(out) - 4 and out[4:8] == (4).to_bytes(4, "big")
    offset = 9  # response header v1: correlation id, empty tags
    assert out[8] == 0
    error, offset = read_int16(out, offset)
    throttle, offset = read_int32(out, offset)
    topics, offset = read_uvarint(out, offset)
    name_len, offset = read_uvarint(out, offset)
    name = out[offset : offset + name_len - 1]
    offset += name_len - 1
    partitions, offset = read_uvarint(out, offset)
    rows = []
    for _ in range(partitions - 1):
        index, offset = read_int32(out, offset)
        perror, offset = read_int16(out, offset)
        rows.append((index, perror))
        offset += 1  # tags
    assert (error, throttle, topics - 1, name) == (0, 0, 1, b"t")
    assert rows == [(0, 0), (2, int(ErrorCode.group_subscribed_to_topic))]
    assert out[offset:] == b"\x00\x00"  # topic tags, body tags


def test_offset_delete_v1_refusal_is_answered_in_v1():
    s = negotiated(ProxySession(LAYOUT))
    decision = s.on_request(memoryview(bytearray(v3_frame(47, 1, 4, b"\x03g1\x01\x00", None, OTHER))))
    reply = decision.pending.reply
    assert reply[8] == 0 and read_int16(reply, 9)[0] == ErrorCode.invalid_request  # header v1, then the error


def telemetry_response(instance: uuid.UUID | None) -> GetTelemetrySubscriptionsResponse:
    return GetTelemetrySubscriptionsResponse(
        throttle_time=T0,
        error_code=ErrorCode.none,
        client_instance_id=instance,
        subscription_id=i32(5),
        accepted_compression_types=(i8(0),),
        push_interval=datetime.timedelta(seconds=30),
        telemetry_max_bytes=i32(1024),
        delta_temporality=True,
        requested_metrics=("org.apache.kafka.",),
    )


def test_telemetry_v1_gets_the_header_instance_id_in_its_v0_body():
    s = negotiated(ProxySession(LAYOUT))
    decision = s.on_request(memoryview(bytearray(v3_frame(71, 1, 5, b"\x00", None, APP))))
    v0 = GetTelemetrySubscriptionsRequest(client_instance_id=uuid.UUID(bytes=APP))
    assert joined(decision.pieces) == request_frame(71, 0, 5, v0, client_id="app")
    upstream = response_frame(71, 0, 5, telemetry_response(uuid.UUID(int=0)))
    out = joined(s.on_response(memoryview(bytearray(upstream))).pieces)
    assert out[4:] == upstream[4:15] + upstream[31:]  # header and throttle/error, then no ClientInstanceId
    assert int.from_bytes(out[:4], "big") == len(out) - 4
    push_v1 = b"\x00\x00\x00\x05" + b"\x00" + b"\x00" + b"\x04abc" + b"\x00"
    decision = s.on_request(memoryview(bytearray(v3_frame(72, 1, 6, push_v1, None, APP))))
    assert joined(decision.pieces) == request_frame(72, 0, 6, APP + push_v1, client_id="app")


def test_instance_id_learnt_from_kip714_telemetry():
    s = ProxySession(LAYOUT)
    assigned = uuid.UUID("11111111-2222-4333-8444-555555555555")
    s.on_request(
        memoryview(bytearray(request_frame(71, 0, 1, GetTelemetrySubscriptionsRequest(client_instance_id=None))))
    )
    assert s.client_instance_id_source == "proxy"
    s.on_response(memoryview(bytearray(response_frame(71, 0, 1, telemetry_response(assigned)))))
    assert (s.client_instance_id, s.client_instance_id_source) == (str(assigned), "telemetry")
    own = uuid.UUID("99999999-2222-4333-8444-555555555555")
    push = PushTelemetryRequest(
        client_instance_id=own, subscription_id=i32(5), terminating=False, compression_type=i8(0), metrics=b""
    )
    s.on_request(memoryview(bytearray(request_frame(72, 0, 2, push))))
    assert s.client_instance_id == str(own)


def test_telemetry_never_overrides_the_header_instance_id():
    s = negotiated(ProxySession(LAYOUT))
    s.on_request(memoryview(bytearray(v3_frame(71, 1, 5, b"\x00", None, APP))))
    s.on_response(memoryview(bytearray(response_frame(71, 0, 5, telemetry_response(uuid.UUID(bytes=OTHER))))))
    assert s.client_instance_id == str(uuid.UUID(bytes=APP))


def test_advertised_adds_the_header_v3_version_only_above_the_proxys_newest():
    known = {k: api_info(k) for k in (0, 1, 17)}
    table = {0: (3, top(0)), 1: (4, top(1) - 1), 17: (0, top(17))}
    assert kip1313.advertised(table, known) == {0: (3, top(0) + 1), 1: (4, top(1) - 1), 17: (0, top(17))}


def test_no_header_v3_version_where_the_broker_has_newer_versions_than_the_proxy():
    known = {k: api_info(k) for k in (0, 3)}
    table = {0: (3, top(0)), 3: (0, top(3))}
    upstream = {0: (3, top(0) + 1), 3: (0, top(3))}  # the broker's Produce top+1 is a real version
    assert kip1313.advertised(table, known, upstream) == {0: (3, top(0)), 3: (0, top(3) + 1)}


def test_header_v3_can_be_switched_off():
    s = ProxySession(LAYOUT, header_v3=False)
    req = request_frame(18, 4, 1, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    s.on_request(memoryview(bytearray(req)))
    upstream = ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(ApiVersion(api_key=i16(16), min_version=i16(0), max_version=i16(top(16))),),
        throttle_time=T0,
    )
    out = joined(s.on_response(memoryview(bytearray(response_frame(18, 4, 1, upstream)))).pieces)
    body, _ = codec.decode(ApiVersionsResponse, out, response_body_offset(out, 0))
    assert [(int(k.api_key), int(k.max_version)) for k in body.api_keys] == [(16, top(16))]
    # A header-v3 version is then just a version the proxy does not know: the connection closes.
    assert s.on_request(memoryview(bytearray(list_groups_v3(2, APP)))).action is Action.CLOSE


def test_next_versions_of_newer_kafka_are_not_read_as_header_v3():
    """franz-go 1.22 opens with ApiVersions v5 (newer Kafka's, header v2): the v0 fallback, not a misread."""
    s = ProxySession(LAYOUT)
    req = request_frame(18, 5, 1, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    decision = s.on_request(memoryview(bytearray(req)))
    assert decision.action is Action.LOCAL
    reply = decision.pending.reply
    body, _ = codec.decode(response_type(18, 0), reply, response_body_offset(reply, 0))
    assert int(body.error_code) == ErrorCode.unsupported_version
    assert [(int(k.api_key), int(k.max_version)) for k in body.api_keys] == [(18, top(18))]


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(lambda: v3_frame(16, top(16) + 1, 2, b"", "app", APP)[:20], id="instance id cut short"),
        pytest.param(
            lambda: frame(kip1313.encode_header_v3(16, top(16) + 1, 2, "app", APP)[:-1]), id="no tagged fields"
        ),
        pytest.param(lambda: v3_frame(47, 1, 2, b"\x05g", None, APP), id="offset delete body cut short"),
        pytest.param(lambda: v3_frame(47, 1, 2, b"\x03\xff\xfe\x01\x00", None, APP), id="offset delete bad utf-8"),
    ],
)
def test_malformed_header_v3_requests_are_protocol_violations(raw):
    s = negotiated(ProxySession(LAYOUT))
    data = raw()
    data = len(data[4:]).to_bytes(4, "big") + data[4:]  # a consistent size prefix: only the content is bad
    with pytest.raises(ProtocolViolation):
        s.on_request(memoryview(bytearray(data)))


def test_apis_without_a_header_v3_version_stay_usable_after_it():
    """SaslAuthenticate, DeleteGroups, ... have no header-v3 version here: header v2 is all a client has."""
    s = negotiated(ProxySession(LAYOUT))
    for key in (42, 36):
        body = codec._empty(request_type(key, top(key)))
        decision = s.on_request(memoryview(bytearray(request_frame(key, top(key), 7, body))))
        assert decision.action is Action.FORWARD, key
        s.in_flight.clear()


def test_api_the_broker_lacks_keeps_header_v2_after_it():
    s = negotiated(ProxySession(LAYOUT))  # the broker's table there lacks Fetch (1)
    assert not s.identify._offers_header_v3(1)
    assert s.identify._offers_header_v3(16)
