"""Request spans and metrics from real sessions (sans-I/O), driven the way proxy/net/connection.py does."""

from __future__ import annotations

import datetime
import os
import time
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from opentelemetry.sdk.trace import SpanProcessor

from proxy.auth.credentials import CredentialStore, make_entry
from proxy.auth.sasl import SaslServer
from proxy.core import apiversions
from proxy.core.forward_table import entries_for
from proxy.core.session import Action, ProxySession
from proxy.observability import tracing as tracing_module
from proxy.observability.metrics import Metrics
from proxy.observability.scan import Facts, compile_scanner, scan
from proxy.observability.tracing import ConnectionTelemetry, Telemetry, Tracing
from proxy.protocol import codec, native
from proxy.protocol.apis import request_type, response_type

from .test_tenant_rewrite import LAYOUT, TOPIC_ID, make_image, sample, tenant_session
from .wire import request_frame, response_frame

PHYSICAL_ID = "PHYSICAL-cluster-id-00"
PEER = ("10.1.2.3", 40123)


def sketches() -> Any:
    """The forwarder's table, for the sketch its span records keep of an answer with record batches."""
    module = native.module()
    if module is None:
        if os.environ.get("CI") == "true":  # CI builds it: missing there is a failure, not a skip
            raise AssertionError("vcproxy_native is not built")
        pytest.skip("vcproxy_native is not built (make .venv/.installed-test builds it)")
    return module.ForwardTable(entries_for(tuple(sorted(apiversions.proxy_versions().items()))))


class Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[Any] = []

    def on_end(self, span: Any) -> None:
        self.spans.append(span)

    def named(self, name: str) -> list[Any]:
        return [s for s in self.spans if s.name == name]


def recorder(
    session: ProxySession, *, tracing: bool = True, metrics: bool = True, ratio: float = 1.0, node_id: int | None = 1
) -> tuple[ConnectionTelemetry, Collect]:
    collect = Collect()
    tr = None
    if tracing:
        tr = Tracing(sample_ratio=ratio)
        tr.processors.append(collect)  # type: ignore[arg-type]
        tr.provider.add_span_processor(collect)
    telemetry = Telemetry(tr, Metrics() if metrics else None, lambda: PHYSICAL_ID)
    connection = telemetry.connection(PEER, node_id)
    connection.state = session.ctx
    return connection, collect


def exchange(
    session: ProxySession,
    connection: ConnectionTelemetry,
    key: int,
    version: int,
    request: Any,
    response: Any | None,
    cid: int = 1,
    client_id: str = "team-a-app",
) -> tuple[Any, list[bytes | memoryview]]:
    """One request and its answer through session and recorder, as the two pumps do it."""
    frame = memoryview(request_frame(key, version, cid, request, client_id=client_id))
    started = time.time_ns()
    decision = session.on_request(frame)
    if decision.action is Action.CHECK:  # a password check: the shell runs it in a worker thread
        assert decision.check is not None and decision.resume is not None
        decision = decision.resume(decision.check.run())
    trace = connection.on_request(frame, decision, started)
    if decision.action is Action.LOCAL:
        local = session.next_local_reply()
        assert local is not None and local.reply is not None
        connection.on_reply(local, [local.reply], None)
        return decision, [local.reply]
    assert decision.action is Action.FORWARD, decision.reason
    if decision.pending is None:  # acks=0
        if trace is not None:
            connection.on_forwarded(trace)
        return decision, []
    upstream = memoryview(bytearray(response_frame(key, version, cid, response)))
    result = session.on_response(upstream)
    connection.on_reply(result.exchange, result.pieces, upstream)
    return decision, result.pieces


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes)


def produce_request(name: str | None, sizes: list[int], acks: int = -1, version: int = 9) -> Any:
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    assert version == 9
    partitions = tuple(codec._empty(PartitionProduceData, index=i, records=b"r" * size) for i, size in enumerate(sizes))
    return codec._empty(
        ProduceRequest, acks=acks, topic_data=(codec._empty(TopicProduceData, name=name, partition_data=partitions),)
    )


def produce_response(name: str, errors: list[int]) -> Any:
    from kio.schema.produce.v9.response import PartitionProduceResponse, ProduceResponse, TopicProduceResponse

    partitions = tuple(
        codec._empty(PartitionProduceResponse, index=i, error_code=ErrorCode(e)) for i, e in enumerate(errors)
    )
    return codec._empty(
        ProduceResponse,
        throttle_time=datetime.timedelta(milliseconds=25),
        responses=(codec._empty(TopicProduceResponse, name=name, partition_responses=partitions),),
    )


def fetch_response(topics: dict[uuid.UUID, list[int]], top_error: int = 0) -> Any:
    from kio.schema.fetch.v16.response import FetchableTopicResponse, FetchResponse, PartitionData

    return codec._empty(
        FetchResponse,
        error_code=ErrorCode(top_error),
        responses=tuple(
            codec._empty(
                FetchableTopicResponse,
                topic_id=topic_id,
                partitions=tuple(
                    codec._empty(PartitionData, partition_index=i, records=b"x" * size) for i, size in enumerate(sizes)
                ),
            )
            for topic_id, sizes in topics.items()
        ),
    )


# -- tenants ----------------------------------------------------------------------------------------


def test_tenant_produce_span_carries_the_virtual_cluster_and_virtual_names():
    image, physical = make_image()
    session = tenant_session(image)
    connection, spans = recorder(session)
    request = produce_request("orders", [100, 50])
    _, pieces = exchange(session, connection, 0, 9, request, produce_response(physical["team-a"], [0, 6]), cid=42)

    (span,) = spans.named("Produce")
    a = attrs(span)
    vc = image.vcs["team-a"]
    assert a["vcproxy.virtual_cluster"] == "team-a" and a["vcproxy.virtual_cluster.id"] == vc.cluster_id
    assert a["vcproxy.principal"] == "User:team-a-user"
    assert a["vcproxy.client_id"] == "team-a-app"
    assert a["vcproxy.client_instance_id"] == session.client_instance_id
    uuid.UUID(a["vcproxy.client_instance_id"])
    assert (a["client.address"], a["client.port"]) == PEER
    assert (a["vcproxy.api.name"], a["vcproxy.api.key"], a["vcproxy.api.version"]) == ("Produce", 0, 9)
    assert a["vcproxy.correlation_id"] == 42
    assert a["vcproxy.topics"] == ["orders"] and a["vcproxy.topic_bytes"] == [150]
    assert a["vcproxy.bytes_in"] == len(request_frame(0, 9, 42, request, client_id="team-a-app"))
    assert a["vcproxy.bytes_out"] == sum(len(p) for p in pieces)
    assert a["vcproxy.error_codes"] == [6] and a["vcproxy.throttle_ms"] == 25
    assert a["vcproxy.upstream.node_id"] == 1 and a["vcproxy.local"] is False
    assert span.kind.name == "SERVER" and span.status.status_code.name == "ERROR"
    assert span.status.description == "NOT_LEADER_OR_FOLLOWER"
    assert span.end_time >= span.start_time
    assert physical["team-a"] not in repr(a)  # no physical name anywhere in a tenant's span
    resource = dict(span.resource.attributes)
    assert resource["service.name"] == "vcproxy" and uuid.UUID(resource["service.instance.id"])
    assert span.instrumentation_scope.name == "vcproxy"


def test_tenant_fetch_by_topic_id_counts_record_bytes_per_virtual_topic():
    from kio.schema.fetch.v16.request import FetchRequest

    image, _ = make_image()
    session = tenant_session(image)
    connection, spans = recorder(session)
    foreign = uuid.uuid4()  # not team-a's: the client never learns of it
    request = sample(FetchRequest, {"topic": "x", "group": "g", "txn": "t", "topic_id": TOPIC_ID})
    response = fetch_response({TOPIC_ID: [1000, 24], foreign: [7]})
    exchange(session, connection, 1, 16, request, response)
    a = attrs(spans.named("Fetch")[0])
    assert a["vcproxy.topics"] == ["orders"] and a["vcproxy.topic_bytes"] == [1024]
    assert a["vcproxy.error_codes"] == [] and a["vcproxy.throttle_ms"] == 0
    assert spans.named("Fetch")[0].status.status_code.name == "UNSET"


def test_tenant_topics_of_other_requests_come_from_the_translation():
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic

    image, physical = make_image()
    session = tenant_session(image)
    connection, spans = recorder(session)
    request = codec._empty(
        MetadataRequest,
        topics=tuple(codec._empty(MetadataRequestTopic, name=n, topic_id=uuid.UUID(int=0)) for n in ("orders", "nope")),
    )
    decision = session.on_request(memoryview(request_frame(3, 12, 1, request)))
    sent_names = list(decision.pending.exchange.tx.topics)  # the physical names the broker will answer with
    session.in_flight.clear()
    response = codec._empty(
        MetadataResponse,
        topics=tuple(
            codec._empty(MetadataResponseTopic, name=n, error_code=ErrorCode(0 if i == 0 else 3))
            for i, n in enumerate(sent_names)
        ),
    )
    exchange(session, connection, 3, 12, request, response, cid=1)
    a = attrs(spans.named("Metadata")[0])
    assert a["vcproxy.topics"] == ["orders", "nope"] and "vcproxy.topic_bytes" not in a
    assert a["vcproxy.error_codes"] == [3]
    assert physical["team-a"] not in repr(a)


def test_requests_before_binding_are_recorded_in_the_vc_the_connection_binds_to():
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse

    image, physical = make_image()
    session = tenant_session(image)
    connection, spans = recorder(session)
    table = tuple(ApiVersion(api_key=k, min_version=0, max_version=20) for k in (0, 3, 18))
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    exchange(session, connection, 18, 3, request, codec._empty(ApiVersionsResponse, api_keys=table), cid=1)
    assert spans.named("ApiVersions") == [] and connection.metrics is not None and not connection.metrics.requests
    exchange(session, connection, 0, 9, produce_request("orders", [1]), produce_response(physical["team-a"], [0]), 2)
    (versions,) = spans.named("ApiVersions")
    cluster_id = image.vcs["team-a"].cluster_id
    assert attrs(versions)["vcproxy.virtual_cluster"] == "team-a"
    assert attrs(versions)["vcproxy.virtual_cluster.id"] == cluster_id
    assert attrs(versions)["vcproxy.correlation_id"] == 1
    assert connection.metrics.requests[("ApiVersions", "team-a", cluster_id)] == 1


def test_answers_by_the_proxy_are_local_with_their_error_code():
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest

    image, _ = make_image()
    session = tenant_session(image)
    connection, spans = recorder(session)
    exchange(session, connection, 29, 3, codec._empty(DescribeAclsRequest), None)
    (span,) = spans.named("DescribeAcls")
    a = attrs(span)
    assert a["vcproxy.local"] is True and a["vcproxy.error_codes"] == [31]
    assert span.status.description == "CLUSTER_AUTHORIZATION_FAILED"
    assert a["vcproxy.bytes_out"] > 0


def test_local_answers_are_counted_and_logged_by_api_vc_and_error(caplog):
    """Issue 18: a client looping on a local answer is visible from the proxy alone."""
    import logging

    from kio.schema.describe_acls.v3.request import DescribeAclsRequest

    from proxy.observability.local_answers import log_local_answer

    image, _ = make_image()
    session = tenant_session(image)
    connection, _ = recorder(session, tracing=False)
    metrics = connection.telemetry.metrics
    for cid in (1, 2, 3):
        exchange(session, connection, 29, 3, codec._empty(DescribeAclsRequest), None, cid=cid)
    assert metrics.local_answers == {("DescribeAcls", "team-a", "31"): 3}
    rendered = metrics.render().decode()
    assert 'vcproxy_local_answers_total{api="DescribeAcls",error_code="31",vc="team-a"} 3.0' in rendered
    # Forwarded requests are not local answers.
    image_physical = make_image()[1]
    produced = produce_response(image_physical["team-a"], [0, 0])
    exchange(session, connection, 0, 9, produce_request("orders", [10, 10]), produced, cid=4)
    assert sum(metrics.local_answers.values()) == 3

    frame = memoryview(request_frame(29, 3, 9, codec._empty(DescribeAclsRequest), client_id="team-a-app"))
    assert session.on_request(frame).action is Action.LOCAL
    local = session.next_local_reply()
    with caplog.at_level(logging.DEBUG, logger="proxy.local_answers"):
        log_local_answer(local, "10.1.2.3:40123")
    (line,) = [r.getMessage() for r in caplog.records if r.name == "proxy.local_answers"]
    assert line == "10.1.2.3:40123: answered DescribeAcls v3 itself with error 31 (vc team-a)"
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="proxy.local_answers"):
        log_local_answer(local, "10.1.2.3:40123")
    assert not caplog.records  # DEBUG only


# -- the physical cluster ---------------------------------------------------------------------------


def physical_session() -> ProxySession:
    return ProxySession(LAYOUT, principal="User:ANONYMOUS")


def test_physical_principals_get_physical_names_and_no_virtual_cluster():
    session = physical_session()
    connection, spans = recorder(session, node_id=None)
    exchange(session, connection, 0, 9, produce_request("orders", [10]), produce_response("orders", [0]))
    a = attrs(spans.named("Produce")[0])
    assert "vcproxy.virtual_cluster" not in a
    assert a["vcproxy.virtual_cluster.id"] == PHYSICAL_ID
    assert a["vcproxy.principal"] == "User:ANONYMOUS"
    assert a["vcproxy.topics"] == ["orders"] and a["vcproxy.topic_bytes"] == [10]
    assert a["vcproxy.upstream.node_id"] == -1  # the bootstrap listener
    assert a["vcproxy.error_codes"] == []


def test_physical_topic_ids_are_named_from_metadata_responses():
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic

    topic_id = uuid.uuid4()
    session = physical_session()
    connection, spans = recorder(session)
    topic = codec._empty(MetadataResponseTopic, name="t1", topic_id=topic_id)
    exchange(
        session,
        connection,
        3,
        12,
        codec._empty(MetadataRequest, topics=None),
        codec._empty(MetadataResponse, topics=(topic,)),
    )
    fetch = codec._empty(load_request_schema(1, 16))
    exchange(session, connection, 1, 16, fetch, fetch_response({topic_id: [5]}), 2)
    exchange(session, connection, 1, 16, fetch, fetch_response({uuid.uuid4(): [5]}), 3)
    named, unknown = spans.named("Fetch")
    assert attrs(named)["vcproxy.topics"] == ["t1"] and attrs(named)["vcproxy.topic_bytes"] == [5]
    assert "vcproxy.topics" not in attrs(unknown)  # an id no Metadata named: omitted, not guessed


def test_acks_0_produce_ends_when_forwarded():
    session = physical_session()
    connection, spans = recorder(session)
    decision, _ = exchange(session, connection, 0, 9, produce_request("orders", [10], acks=0), None)
    assert decision.pending is None
    a = attrs(spans.named("Produce")[0])
    assert a["vcproxy.bytes_out"] == 0 and a["vcproxy.local"] is False
    assert "vcproxy.error_codes" not in a and not session.in_flight


# -- sampling and cost ------------------------------------------------------------------------------


def test_unsampled_requests_compute_no_attributes(monkeypatch):
    def boom(*args: Any) -> None:
        raise AssertionError("scanned an unsampled request")

    monkeypatch.setattr(tracing_module, "scan", boom)
    session = physical_session()
    connection, spans = recorder(session, metrics=False, ratio=0.0)
    for cid in range(1, 20):
        exchange(session, connection, 0, 9, produce_request("orders", [10]), produce_response("orders", [6]), cid)
    assert spans.named("Produce") == [] and not session.in_flight


def test_sample_ratio_applies_per_request():
    session = physical_session()
    connection, spans = recorder(session, metrics=False, ratio=0.5)
    for cid in range(1, 401):
        exchange(session, connection, 0, 9, produce_request("orders", [10]), produce_response("orders", [0]), cid)
    assert 120 < len(spans.named("Produce")) < 280
    assert len({s.context.trace_id for s in spans.named("Produce")}) == len(spans.named("Produce"))


def test_a_request_drawn_before_is_sampled_by_that_draw_alone():
    """The forwarder (or the offer to it) drew a request's trace id's low 64 bits: the span the session makes for it
    has them, and a draw the sampler's rule does not keep gives no span, whatever a new draw would have said."""
    session = physical_session()
    connection, spans = recorder(session, metrics=False, ratio=0.25)
    bound = connection.tracing.bound
    assert bound == 2**62
    for cid, drawn in enumerate([0, 5, bound - 1, bound, 2**64 - 1], start=1):
        connection.drawn = drawn
        exchange(session, connection, 0, 9, produce_request("orders", [10]), produce_response("orders", [0]), cid)
        assert connection.drawn is None  # one request's only
    assert [s.context.trace_id & (2**64 - 1) for s in spans.named("Produce")] == [0, 5, bound - 1]
    assert all(s.context.trace_id >> 64 for s in spans.named("Produce"))


def _forwarded_span(
    session: ProxySession,
    connection: ConnectionTelemetry,
    spans: Collect,
    key: int,
    version: int,
    request: Any,
    response: Any | None,
    cid: int,
    client_id: str,
) -> tuple[dict[str, Any], Any]:
    """The span of one sampled request the forwarder served, made from its record: the client's frame, the broker's
    answer and, where the session's answer differs (names renamed back), what the client got."""
    frame = request_frame(key, version, cid, request, client_id=client_id)
    upstream = response_frame(key, version, cid, response) if response is not None else None
    sent, size, elided = None, 0, False
    if upstream is not None:  # what the client gets: the session's answer (its stages run as the forwarder's would)
        decision = session.on_request(memoryview(frame))
        assert decision.action is Action.FORWARD
        out = b"".join(bytes(p) for p in session.on_response(memoryview(bytearray(upstream))).pieces)
        sent, size = (out if out != upstream else None), len(out)
        table = sketches()
        sketch = table.sketch(key, version, upstream)  # an answer with record batches: kept as its sketch
        if sketch is not None:
            sent = table.sketch(key, version, sent) if sent is not None else None
            upstream, elided = sketch, True
    connection.forwarded_spans([(2**62, key, version, cid, 10, 20, frame, upstream, sent, size, elided)], 1_000)
    span = [s for s in spans.spans if s.name not in ("connection", "authenticate")][-1]
    return attrs(span), span


@pytest.mark.parametrize(
    "case",
    ["physical produce", "physical acks=0 produce", "tenant produce by name", "tenant fetch by id", "physical fetch"],
)
def test_a_span_the_forwarder_recorded_says_what_the_python_paths_says(case):
    """The same request and answer, served by the Python path or by the forwarder (its record; a sketch of a Fetch
    answer): the same attributes and status (the trace id is the forwarder's draw's, the times its)."""
    from kio.schema.fetch.v16.request import FetchRequest

    image, physical = make_image()
    client_id = "team-a-app"
    if case == "physical produce":
        make = physical_session
        key, version, request = 0, 9, produce_request("orders", [100, 50])
        response = produce_response("orders", [0, 6])
    elif case == "physical acks=0 produce":
        make = physical_session
        key, version, request, response = 0, 9, produce_request("orders", [10], acks=0), None
    elif case == "physical fetch":
        make = physical_session
        key, version = 1, 16
        request = sample(FetchRequest, {"topic": "x", "group": "g", "txn": "t", "topic_id": TOPIC_ID})
        response = fetch_response({TOPIC_ID: [1000, 24], uuid.uuid4(): [7]}, top_error=0)
    elif case == "tenant produce by name":
        make = lambda: tenant_session(image)  # noqa: E731
        key, version, request = 0, 9, produce_request("orders", [100, 50])
        response = produce_response(physical["team-a"], [0, 6])
    else:
        make = lambda: tenant_session(image)  # noqa: E731
        key, version = 1, 16
        request = sample(FetchRequest, {"topic": "x", "group": "g", "txn": "t", "topic_id": TOPIC_ID})
        response = fetch_response({TOPIC_ID: [1000, 24]})
    python = make()
    connection, spans = recorder(python, metrics=False)
    for warm in range(1, 3):  # bound (a tenant's first requests) and the client id read, as on a real connection
        exchange(python, connection, key, version, request, response, cid=warm, client_id=client_id)
    exchange(python, connection, key, version, request, response, cid=7, client_id=client_id)
    expected = [s for s in spans.spans if s.name not in ("connection", "authenticate")][-1]
    forwarded = make()
    connection, spans = recorder(forwarded, metrics=False)
    for warm in range(1, 3):
        exchange(forwarded, connection, key, version, request, response, cid=warm, client_id=client_id)
    got, span = _forwarded_span(forwarded, connection, spans, key, version, request, response, 7, client_id)
    want = attrs(expected)
    for one in (want, got):  # each connection's own
        one.pop("vcproxy.client_instance_id")
    assert got == want
    assert (span.name, span.status.status_code, span.status.description) == (
        expected.name, expected.status.status_code, expected.status.description
    )  # fmt: skip
    assert span.context.trace_id & (2**64 - 1) == 2**62
    assert (span.start_time, span.end_time) == (1_010, 1_020)


# -- metrics ----------------------------------------------------------------------------------------


def test_metrics_count_by_vc_and_the_connection_moves_to_its_vc():
    image, physical = make_image()
    session = tenant_session(image)
    connection, _ = recorder(session, tracing=False)
    metrics = connection.metrics
    assert metrics is not None
    assert dict(metrics.connections) == {("broker-1", "kafka-cluster"): 1}
    request = produce_request("orders", [100])
    for cid in (1, 2):
        exchange(session, connection, 0, 9, request, produce_response(physical["team-a"], [3]), cid)
    cluster_id = image.vcs["team-a"].cluster_id
    assert dict(metrics.connections) == {("broker-1", "team-a"): 1}
    assert metrics.requests[("Produce", "team-a", cluster_id)] == 2
    assert metrics.errors[("Produce", "team-a", cluster_id, "3")] == 2
    assert metrics.bytes_in[("team-a", cluster_id)] == 2 * len(request_frame(0, 9, 1, request, client_id="team-a-app"))
    connection.on_close("done")
    assert dict(metrics.connections) == {}
    text = metrics.render().decode()
    assert f'vcproxy_requests_total{{api="Produce",cluster_id="{cluster_id}",vc="team-a"}} 2.0' in text
    assert 'error_code="3",vc="team-a"} 2.0' in text
    assert 'vcproxy_request_duration_seconds_count{api="Produce",vc="team-a"} 2.0' in text
    assert 'vcproxy_connections_accepted_total{listener="broker-1"} 1.0' in text


def fetch_response_with_errors(top: int, partition: int) -> Any:
    from kio.schema.fetch.v16.response import FetchableTopicResponse, FetchResponse, PartitionData

    part = codec._empty(PartitionData, partition_index=0, error_code=ErrorCode(partition), records=b"x")
    topic = codec._empty(FetchableTopicResponse, topic_id=TOPIC_ID, partitions=(part,))
    return codec._empty(FetchResponse, error_code=ErrorCode(top), responses=(topic,))


@pytest.mark.parametrize("ratio", [0.0, 1.0])
def test_fetch_metrics_count_the_top_level_error_and_spans_all_of_them(ratio):
    session = physical_session()
    connection, spans = recorder(session, ratio=ratio)
    fetch = codec._empty(load_request_schema(1, 16))
    exchange(session, connection, 1, 16, fetch, fetch_response_with_errors(0, 1), cid=1)
    exchange(session, connection, 1, 16, fetch, fetch_response_with_errors(70, 0), cid=2)
    assert connection.metrics is not None
    assert dict(connection.metrics.errors) == {("Fetch", "kafka-cluster", PHYSICAL_ID, "70"): 1}
    assert [attrs(s)["vcproxy.error_codes"] for s in spans.named("Fetch")] == ([[1], [70]] if ratio else [])


def test_metrics_without_tracing_record_no_spans():
    session = physical_session()
    connection, _ = recorder(session, tracing=False)
    exchange(session, connection, 0, 9, produce_request("orders", [10]), produce_response("orders", [0]))
    assert connection.metrics is not None
    assert connection.metrics.requests[("Produce", "kafka-cluster", PHYSICAL_ID)] == 1
    assert connection.span is None


# -- connection and authentication ------------------------------------------------------------------

STORE = CredentialStore.from_mapping({"alice": make_entry("alice-secret", 4096)})


def sasl_login(session: ProxySession, connection: ConnectionTelemetry, password: str) -> None:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    exchange(session, connection, 17, 1, SaslHandshakeRequest(mechanism="PLAIN"), None, cid=1)
    token = b"\0alice\0" + password.encode()
    exchange(session, connection, 36, 2, SaslAuthenticateRequest(auth_bytes=token), None, cid=2)


@pytest.mark.parametrize("password", ["alice-secret", "wrong"])
def test_authenticate_span_under_the_connection_span(password):
    session = ProxySession(LAYOUT, SaslServer(STORE, name="t"), principal=None)
    connection, spans = recorder(session)
    sasl_login(session, connection, password)
    ok = password == "alice-secret"
    if ok:
        exchange(session, connection, 0, 9, produce_request("orders", [1]), produce_response("orders", [0]), 3)
    connection.on_close("client closed the connection")

    (conn,) = spans.named("connection")
    (auth,) = spans.named("authenticate")
    assert auth.parent.span_id == conn.context.span_id and auth.context.trace_id == conn.context.trace_id
    a = attrs(auth)
    assert a["vcproxy.auth.mechanism"] == "PLAIN" and a["vcproxy.auth.success"] is ok
    assert a.get("vcproxy.principal") == ("User:alice" if ok else None)
    assert auth.start_time <= auth.end_time
    c = attrs(conn)
    assert (c["client.address"], c["client.port"]) == PEER and c["vcproxy.listener"] == "broker-1"
    assert c["vcproxy.close_reason"] == "client closed the connection"
    assert c["vcproxy.client_instance_id"] == session.client_instance_id
    assert c["vcproxy.upstream.node_id"] == 1
    assert connection.metrics is not None
    assert dict(connection.metrics.auth_failures) == ({} if ok else {"PLAIN": 1})
    if ok:
        assert c["vcproxy.principal"] == "User:alice"
        assert attrs(spans.named("Produce")[0])["vcproxy.principal"] == "User:alice"
    sasl_spans = spans.named("SaslHandshake") + spans.named("SaslAuthenticate")
    assert len(sasl_spans) == 2 and all("vcproxy.principal" not in attrs(s) for s in sasl_spans[:1])


def test_tls_handshake_results_and_upstream_events():
    session = physical_session()
    connection, spans = recorder(session)
    connection.tls_handshake(None, "certificate verify failed")
    connection.upstream(False, "connection refused")
    connection.on_close("upstream unavailable")
    (auth,) = spans.named("authenticate")
    assert attrs(auth)["vcproxy.auth.mechanism"] == "TLS" and attrs(auth)["vcproxy.auth.success"] is False
    (conn,) = spans.named("connection")
    assert [e.name for e in conn.events] == ["upstream unavailable"]
    assert connection.metrics is not None
    assert connection.metrics.auth_failures["TLS"] == 1 and connection.metrics.upstream_connected["1"] == 0


# -- the scanner ------------------------------------------------------------------------------------


def all_schemas() -> list[type]:
    return [
        loader(key, version)
        for key, name in api_key_map.items()
        for version in schema_name_map[name]
        for loader in (load_request_schema, load_response_schema)
    ]


def test_the_scanner_walks_every_request_and_response_schema_to_its_end():
    values = {"topic": "orders", "group": "g", "txn": "t", "topic_id": TOPIC_ID}
    for cls in all_schemas():
        body = codec.encode(sample(cls, values))
        facts = Facts()
        assert compile_scanner(cls)(memoryview(body), 0, facts) == len(body), cls


def test_the_scanner_finds_nested_errors_topics_and_record_bytes():
    body = codec.encode(fetch_response({TOPIC_ID: [300, 0, 5]}, top_error=0))
    facts = scan(response_type(1, 16), memoryview(body), 0)
    assert facts.topics == {TOPIC_ID: 305} and facts.error_codes == []
    body = codec.encode(produce_response("a", [0, 6, 6, 3]))
    facts = scan(load_response_schema(0, 9), body, 0)
    assert facts.error_codes == [6, 6, 3] and facts.throttle_ms == 25 and facts.topics == {"a": 0}
    body = codec.encode(produce_request("b", [7, 8]))
    assert scan(request_type(0, 9), body, 0).topics == {"b": 15}


def test_an_array_count_the_frame_cannot_hold_is_refused_at_once():
    """A hostile count over items the scanner only skips (a partition's replicas: int32s) must not loop billions of
    times on the Trio thread: refused before the loop, whatever the schema."""
    from kio.schema.list_partition_reassignments.v0.response import ListPartitionReassignmentsResponse

    # Compact (flexible) fields: throttle 0, error 0, no message, one topic "t" with one partition 0, whose replicas
    # count is 2^31 - 1 (uvarint of 2^31), and nothing after it.
    huge = bytes([0x80, 0x80, 0x80, 0x80, 0x08])
    body = bytes(6) + b"\x00" + b"\x02" + b"\x02t" + b"\x02" + bytes(4) + huge
    started = time.process_time()
    with pytest.raises(ValueError, match="past the end of the frame"):
        scan(ListPartitionReassignmentsResponse, memoryview(body), 0)
    assert time.process_time() - started < 1.0


# -- configuration and the HTTP endpoints -----------------------------------------------------------


def test_tracing_and_metrics_config_sections():
    from proxy.config import ConfigError, parse_config

    base = {"upstream": {"bootstrap_servers": ["127.0.0.1:9092"]}}
    config = parse_config(base)
    assert (config.tracing.enabled, config.tracing.sample_ratio, config.tracing.jsonl_keep) == (False, 1.0, 10)
    assert (config.metrics.enabled, config.metrics.host, config.metrics.port) == (False, "127.0.0.1", 9404)
    assert Telemetry.from_config(config, lambda: None) is None  # both off: connections get no recorder
    bad = {
        "tracing": ({"enabled": True}, "tracing: Value error, enabled tracing needs an exporter"),
        "tracing.sample_ratio": (
            {"sample_ratio": 1.5},
            "tracing.sample_ratio: Input should be less than or equal to 1",
        ),
        "tracing.otlp_endpoint": ({"otlp_endpoint": "collector:4318"}, "is not an http(s):// URL"),
        "tracing.jsonl_keep": ({"jsonl_keep": 0}, "tracing.jsonl_keep: Input should be greater than or equal to 1"),
    }
    for section, reason in bad.values():
        with pytest.raises(ConfigError) as err:
            parse_config({**base, "tracing": section}, "proxy.yaml")
        assert f"proxy.yaml: {reason}" in str(err.value) or reason in str(err.value)
    with pytest.raises(ConfigError, match=r"proxy.yaml: metrics.colour: unknown key"):
        parse_config({**base, "metrics": {"colour": "red"}}, "proxy.yaml")
    with pytest.raises(ConfigError, match=r"metrics.port 9192 is the bootstrap port"):
        parse_config({**base, "metrics": {"enabled": True, "port": 9192}}, "proxy.yaml")


def test_otlp_endpoint_gets_the_traces_path_only_without_one():
    from proxy.observability.tracing import otlp_traces_url

    assert otlp_traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert otlp_traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert otlp_traces_url("https://c.example/otlp/v1/traces") == "https://c.example/otlp/v1/traces"


async def test_http_endpoints():
    import trio

    from proxy.observability.http import HttpServer

    state = {"ready": (False, "upstream not reachable yet: refused")}
    metrics = Metrics()
    metrics.auth_failed("PLAIN")
    server = HttpServer("127.0.0.1", 0, lambda: state["ready"], metrics)
    metrics.readiness = server.readiness

    async def ask(port: int, request: bytes) -> bytes:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(request)
        data = b""
        while chunk := await stream.receive_some():
            data += chunk
        return data

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, server._handle, listeners)
        assert (await ask(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 200 OK\r\n")
        answer = await ask(port, b"GET /readyz HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b"\r\n\r\nupstream not reachable yet: refused\n")
        state["ready"] = (True, "ready")
        assert (await ask(port, b"GET /readyz?verbose HTTP/1.0\n\n")).endswith(b"\r\n\r\nready\n")
        answer = await ask(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert b"Content-Type: text/plain; version=" in answer
        assert b'vcproxy_auth_failures_total{mechanism="PLAIN"} 1.0' in answer and b"vcproxy_ready 1.0" in answer
        head = await ask(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
        assert head.endswith(b"\r\n\r\n") and b"Content-Length: 0" not in head
        assert (await ask(port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405 ")
        assert (await ask(port, b"GET /other HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404 ")
        assert (await ask(port, b"nonsense\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        nursery.cancel_scope.cancel()
