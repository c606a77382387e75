"""The sans-I/O session against a scripted broker: requests in, responses out, bytes checked."""

import datetime
import uuid

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v16.response import (
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionData,
)
from kio.schema.find_coordinator.v4.response import Coordinator, FindCoordinatorResponse
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseBroker
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v11 import request as preq
from kio.schema.produce.v11 import response as presp
from kio.static.primitive import i16, i32, i64

from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProtocolViolation, ProxySession
from proxy.protocol import codec
from proxy.protocol.headers import response_body_offset

from .wire import request_frame, response_frame

LAYOUT = ListenerLayout("proxy.example", 9192, 9193)
RECORDS = bytes(range(256)) * 40  # opaque "record batch" bytes that must pass untouched
T0 = datetime.timedelta(0)


def joined(pieces) -> bytes:
    return b"".join(bytes(p) for p in pieces)


def roundtrip(session: ProxySession, request: bytes, response: bytes):
    decision = session.on_request(memoryview(bytearray(request)))
    assert decision.action is Action.FORWARD
    return session.on_response(memoryview(bytearray(response)))


def metadata_response():
    return MetadataResponse(
        throttle_time=T0,
        brokers=tuple(
            MetadataResponseBroker(node_id=i32(n), host=f"kafka-{n}.internal", port=i32(9092), rack=f"r{n}")
            for n in (1, 2, 3)
        ),
        cluster_id="phys-cluster",
        controller_id=i32(1),
        topics=(),
    )


def test_metadata_brokers_point_at_proxy_ports_ids_and_racks_kept():
    s = ProxySession(LAYOUT)
    req = request_frame(
        3, 12, 7, MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )
    result = roundtrip(s, req, response_frame(3, 12, 7, metadata_response()))
    out = joined(result.pieces)
    body, _ = codec.decode(MetadataResponse, out, response_body_offset(out, 1))
    assert [(b.node_id, b.host, b.port, b.rack) for b in body.brokers] == [
        (1, "proxy.example", 9194, "r1"),
        (2, "proxy.example", 9195, "r2"),
        (3, "proxy.example", 9196, "r3"),
    ]
    assert int.from_bytes(out[:4], "big") == len(out) - 4
    assert [(b.node_id, b.host) for b in result.brokers] == [
        (1, "kafka-1.internal"),
        (2, "kafka-2.internal"),
        (3, "kafka-3.internal"),
    ]
    assert result.full_broker_list


def test_find_coordinator_batched_skips_missing_coordinator():
    s = ProxySession(LAYOUT)
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    req = request_frame(10, 4, 1, FindCoordinatorRequest(key_type=i16(0), coordinator_keys=("g1", "g2")))
    resp = FindCoordinatorResponse(
        throttle_time=T0,
        coordinators=(
            Coordinator(
                key="g1", node_id=i32(2), host="kafka-2", port=i32(9092), error_code=ErrorCode.none, error_message=None
            ),
            Coordinator(
                key="g2",
                node_id=i32(-1),
                host="",
                port=i32(-1),
                error_code=ErrorCode.coordinator_not_available,
                error_message=None,
            ),
        ),
    )
    out = joined(roundtrip(s, req, response_frame(10, 4, 1, resp)).pieces)
    body, _ = codec.decode(FindCoordinatorResponse, out, response_body_offset(out, 1))
    assert [(c.node_id, c.host, c.port) for c in body.coordinators] == [(2, "proxy.example", 9195), (-1, "", -1)]


def fetch_response(endpoints=()):
    partition = PartitionData(
        partition_index=i32(0),
        error_code=ErrorCode.none,
        high_watermark=i64(10),
        aborted_transactions=None,
        records=RECORDS,
        current_leader=LeaderIdAndEpoch(leader_id=i32(2), leader_epoch=i32(5)),
    )
    return FetchResponse(
        throttle_time=T0,
        error_code=ErrorCode.none,
        session_id=i32(9),
        responses=(FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=(partition,) * 3),),
        node_endpoints=endpoints,
    )


def fetch_request_bytes(version: int = 16) -> bytes:
    # The request body is irrelevant to the response path; the header selects the rule.
    return request_frame(1, version, 42, b"\x00" * 8)


def test_fetch_without_endpoints_is_forwarded_byte_identical():
    s = ProxySession(LAYOUT)
    original = response_frame(1, 16, 42, fetch_response())
    result = roundtrip(s, fetch_request_bytes(), original)
    assert joined(result.pieces) == original
    assert len(result.pieces) == 1  # the same buffer, not a copy


def test_fetch_node_endpoints_spliced_records_untouched():
    s = ProxySession(LAYOUT)
    eps = (NodeEndpoint(node_id=i32(2), host="kafka-2.internal", port=i32(9092), rack="r2"),)
    original = response_frame(1, 16, 42, fetch_response(eps))
    result = roundtrip(s, fetch_request_bytes(), original)
    out = joined(result.pieces)
    body, end = codec.decode(FetchResponse, out, response_body_offset(out, 1))
    assert end == len(out) and int.from_bytes(out[:4], "big") == len(out) - 4
    assert [(e.node_id, e.host, e.port, e.rack) for e in body.node_endpoints] == [(2, "proxy.example", 9195, "r2")]
    assert all(p.records == RECORDS for t in body.responses for p in t.partitions)
    # The records travel as a slice of the original buffer, not a copy.
    assert any(isinstance(p, memoryview) and len(p) > len(RECORDS) for p in result.pieces)


def test_produce_leader_hints_spliced_and_an_answer_without_them_forwarded_as_is():
    """Produce v10+ answers carry broker endpoints (KIP-951) in a tagged field, usually absent: the proxy looks
    at the tagged section's count only, and rewrites the endpoints when they are there."""
    request = preq.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=datetime.timedelta(seconds=1),
        topic_data=(
            preq.TopicProduceData(name="t", partition_data=(preq.PartitionProduceData(index=i32(0), records=RECORDS),)),
        ),
    )
    partition = presp.PartitionProduceResponse(
        index=i32(0), error_code=ErrorCode.not_leader_or_follower, base_offset=i64(-1), record_errors=()
    )

    def answer(correlation_id, endpoints):
        body = presp.ProduceResponse(
            responses=(presp.TopicProduceResponse(name="t", partition_responses=(partition,)),),
            throttle_time=T0,
            node_endpoints=endpoints,
        )
        return response_frame(0, 11, correlation_id, body)

    s = ProxySession(LAYOUT)
    plain = answer(42, ())
    result = roundtrip(s, request_frame(0, 11, 42, request), plain)
    assert joined(result.pieces) == plain and len(result.pieces) == 1
    hinted = answer(43, (presp.NodeEndpoint(node_id=i32(2), host="kafka-2.internal", port=i32(9092), rack="r2"),))
    out = joined(roundtrip(s, request_frame(0, 11, 43, request), hinted).pieces)
    body, end = codec.decode(presp.ProduceResponse, out, response_body_offset(out, 1))
    assert end == len(out)
    assert [(e.node_id, e.host, e.port, e.rack) for e in body.node_endpoints] == [(2, "proxy.example", 9195, "r2")]


def test_produce_acks_zero_expects_no_response():
    s = ProxySession(LAYOUT)
    body = ProduceRequest(
        transactional_id=None,
        acks=i16(0),
        timeout=datetime.timedelta(seconds=1),
        topic_data=(TopicProduceData(name="t", partition_data=(PartitionProduceData(index=i32(0), records=RECORDS),)),),
    )
    decision = s.on_request(memoryview(request_frame(0, 9, 3, body)))
    assert decision.action is Action.FORWARD and decision.pending is None and not s.in_flight
    body_acks = ProduceRequest(
        transactional_id="tx", acks=i16(-1), timeout=datetime.timedelta(seconds=1), topic_data=()
    )
    decision = s.on_request(memoryview(request_frame(0, 9, 4, body_acks)))
    assert decision.pending is not None and len(s.in_flight) == 1


def test_pipelined_responses_keep_order_and_local_answers_wait_their_turn():
    s = ProxySession(LAYOUT)
    meta_req = request_frame(
        3, 12, 1, MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )
    assert s.on_request(memoryview(meta_req)).action is Action.FORWARD
    # WriteTxnMarkers (27) is inter-broker: refused locally, but only after the Metadata response.
    refuse = s.on_request(memoryview(request_frame(27, 1, 2, b"\x00\x00\x00\x00")))
    assert refuse.action in (Action.LOCAL, Action.CLOSE)
    assert s.next_local_reply() is None  # Metadata is still outstanding
    s.on_response(memoryview(bytearray(response_frame(3, 12, 1, metadata_response()))))
    if refuse.action is Action.LOCAL:
        assert s.next_local_reply() is not None


def test_internal_api_refused_with_cluster_authorization_failed():
    s = ProxySession(LAYOUT)
    decision = s.on_request(memoryview(request_frame(52, 0, 11, b"\x00\x00")))  # Vote
    assert decision.action is Action.LOCAL
    reply = s.next_local_reply().reply
    assert int.from_bytes(reply[4:8], "big") == 11
    assert int.from_bytes(reply[9:11], "big") == 31  # CLUSTER_AUTHORIZATION_FAILED after header v1


def test_unknown_api_key_closes_connection():
    s = ProxySession(LAYOUT)
    assert (
        s.on_request(memoryview(request_frame(3, 12, 1, b"")[:4] + b"\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff")).action
        is Action.CLOSE
    )


def test_response_with_wrong_correlation_id_is_a_violation():
    s = ProxySession(LAYOUT)
    s.on_request(memoryview(fetch_request_bytes()))
    with pytest.raises(ProtocolViolation):
        s.on_response(memoryview(bytearray(response_frame(1, 16, 999, fetch_response()))))


def api_versions_response(keys):
    return ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=tuple(
            ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi)) for k, (lo, hi) in keys.items()
        ),
        throttle_time=T0,
    )


def test_api_versions_intersection_drops_internal_and_unknown_and_clamps():
    s = ProxySession(LAYOUT)
    upstream = {0: (0, 99), 1: (4, 17), 3: (0, 13), 18: (0, 4), 27: (0, 1), 52: (0, 2), 999: (0, 1)}
    req = request_frame(18, 3, 5, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    out = joined(roundtrip(s, req, response_frame(18, 3, 5, api_versions_response(upstream))).pieces)
    body, _ = codec.decode(ApiVersionsResponse, out, response_body_offset(out, 0))
    advertised = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}
    # KIP-1313: one more version (header v3) where the broker has exactly the proxy's newest: not for
    # Fetch (the broker lacks 18) nor Produce (the broker's 14 is a real version the proxy cannot read),
    # nor ApiVersions (newer Kafka's v5 is a real version). WriteTxnMarkers is advertised as brokers do
    # (from v1, what the proxy can parse) and refused per item; other inter-broker APIs are not.
    assert advertised == {0: (3, 13), 1: (4, 17), 3: (0, 14), 18: (0, 4), 27: (1, 1)}


def test_write_txn_markers_is_refused_in_its_own_shape():
    from kio.schema.write_txn_markers.v1.request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )
    from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
    from kio.static.primitive import i32, i64

    s = ProxySession(LAYOUT)
    marker = WritableTxnMarker(
        producer_id=i64(7),
        producer_epoch=i16(0),
        transaction_result=True,
        topics=(WritableTxnMarkerTopic(name="t", partition_indexes=(i32(0), i32(2))),),
        coordinator_epoch=i32(0),
    )
    decision = s.on_request(memoryview(bytearray(request_frame(27, 1, 9, WriteTxnMarkersRequest(markers=(marker,))))))
    assert decision.action is Action.LOCAL
    reply = memoryview(s.next_local_reply().reply)
    body, _ = codec.decode(WriteTxnMarkersResponse, reply, response_body_offset(reply, 1))
    assert [(int(p.partition_index), int(p.error_code)) for p in body.markers[0].topics[0].partitions] == [
        (0, 31),
        (2, 31),
    ]


def test_requests_above_advertised_version_refused_locally():
    s = ProxySession(LAYOUT)
    req = request_frame(18, 3, 5, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    roundtrip(s, req, response_frame(18, 3, 5, api_versions_response({18: (0, 4), 60: (0, 1)})))
    from kio.schema.describe_cluster.v2.request import DescribeClusterRequest

    decision = s.on_request(
        memoryview(
            request_frame(
                60,
                2,
                6,
                DescribeClusterRequest(include_cluster_authorized_operations=False, include_fenced_brokers=False),
            )
        )
    )
    assert decision.action is Action.LOCAL  # nothing forwarded
    reply = s.next_local_reply().reply
    assert int.from_bytes(reply[4:8], "big") == 6
    assert int.from_bytes(reply[13:15], "big") == 35  # after header v1 and throttle_time


def test_api_versions_too_new_answered_locally_with_v0_error():
    s = ProxySession(LAYOUT)
    decision = s.on_request(
        memoryview(request_frame(18, 3, 8, b"\x00")[:6] + b"\x00\x63" + b"\x00\x00\x00\x08" + b"\xff\xff\x00")
    )
    assert decision.action is Action.LOCAL
    reply = s.next_local_reply().reply
    assert int.from_bytes(reply[4:8], "big") == 8
    assert int.from_bytes(reply[8:10], "big") == 35  # UNSUPPORTED_VERSION, v0 body after header v0


def test_describe_cluster_brokers_rewritten_by_broker_id_with_racks():
    from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
    from kio.schema.describe_cluster.v1.response import DescribeClusterBroker, DescribeClusterResponse

    s = ProxySession(LAYOUT)
    req = request_frame(60, 1, 3, DescribeClusterRequest(include_cluster_authorized_operations=True))
    resp = DescribeClusterResponse(
        throttle_time=T0,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id="c",
        controller_id=i32(2),
        cluster_authorized_operations=i32(-2147483648),
        brokers=tuple(
            DescribeClusterBroker(broker_id=i32(n), host=f"k{n}", port=i32(9092), rack=f"r{n}") for n in (1, 2)
        ),
    )
    out = joined(roundtrip(s, req, response_frame(60, 1, 3, resp)).pieces)
    body, _ = codec.decode(DescribeClusterResponse, out, response_body_offset(out, 1))
    assert [(b.broker_id, b.host, b.port, b.rack) for b in body.brokers] == [
        (1, "proxy.example", 9194, "r1"),
        (2, "proxy.example", 9195, "r2"),
    ]
    assert body.controller_id == 2


class _HoldBack:
    """A stage that passes every request on but holds it back first, as the quota stage will."""

    def on_request(self, ex):
        ex.delay = 0.25
        return None


def test_a_stage_can_delay_a_request_it_passes_on():
    s = ProxySession(LAYOUT)
    s.stages.append(_HoldBack())
    req = request_frame(
        3, 12, 7, MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )
    decision = s.on_request(memoryview(bytearray(req)))
    assert decision.action is Action.FORWARD and decision.delay == 0.25
    # The answer still comes back through every stage (the broker addresses are rewritten).
    result = s.on_response(memoryview(bytearray(response_frame(3, 12, 7, metadata_response()))))
    out = joined(result.pieces)
    body, _ = codec.decode(MetadataResponse, out, response_body_offset(out, 1))
    assert {b.port for b in body.brokers} == {9194, 9195, 9196}
    # Without the stage, no delay.
    assert ProxySession(LAYOUT).on_request(memoryview(bytearray(req))).delay == 0.0
