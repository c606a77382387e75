"""The OTLP JSON Lines exporter: the protobuf JSON mapping, rotation by size, flushing."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from proxy.observability.jsonl import JsonLinesSpanExporter, SpanEncoder
from proxy.observability.tracing import Tracing

ATTRIBUTES: dict[str, Any] = {
    "vcproxy.virtual_cluster": "team-a",
    "vcproxy.principal": 'User:ålice "quoted" \\ back\nslash',
    "vcproxy.api.key": 0,
    "vcproxy.correlation_id": 2**31 - 1,
    "vcproxy.bytes_in": 2**40,
    "vcproxy.topics": ["orders", "payments"],
    "vcproxy.topic_bytes": [100, 2**33],
    "vcproxy.error_codes": [],
    "vcproxy.local": False,
    "ratio": 0.25,
}


class Collect(SpanProcessor):
    """A span processor that keeps what it is given (the fast path calls on_end only)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    def on_end(self, span: Any) -> None:
        self.spans.append(span)


def make_spans() -> list[Any]:
    """A request span from the fast path and connection/authenticate spans from the SDK tracer."""
    tracing = Tracing(instance_id="instance-1")
    collect = Collect()
    tracing.processors.append(collect)  # type: ignore[arg-type]
    tracing.provider.add_span_processor(collect)
    now = time.time_ns()
    tracing.emit("Produce", tracing.sample(), now, now + 1500, dict(ATTRIBUTES), "UNKNOWN_TOPIC_OR_PARTITION")
    connection = tracing.tracer.start_span("connection", kind=SpanKind.SERVER, attributes={"client.port": 5})
    connection.add_event("upstream connected", {"vcproxy.upstream.node_id": -1})
    auth = tracing.tracer.start_span("authenticate", context=set_span_in_context(connection))
    auth.set_status(Status(StatusCode.ERROR, "refused"))
    auth.end()
    connection.end()
    return collect.spans


def to_protobuf_json(line: dict[str, Any]) -> dict[str, Any]:
    """OTLP JSON differs from protobuf's canonical JSON only in ids: hex instead of base64."""

    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId", "parentSpanId") else fix(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    return fix(line)


def test_a_batch_is_one_otlp_json_line_that_protobuf_accepts():
    spans = make_spans()
    text = SpanEncoder().request(spans)
    assert "\n" not in text
    line = json.loads(text)
    request = json_format.ParseDict(to_protobuf_json(line), ExportTraceServiceRequest())

    (resource_spans,) = request.resource_spans
    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert resource["service.name"] == "vcproxy" and resource["service.instance.id"] == "instance-1"
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "vcproxy"
    by_name = {s.name: s for s in scope_spans.spans}
    assert set(by_name) == {"Produce", "connection", "authenticate"}

    produce = by_name["Produce"]
    original = spans[0]
    assert produce.trace_id == original.context.trace_id.to_bytes(16, "big")
    assert produce.span_id == original.context.span_id.to_bytes(8, "big")
    assert produce.kind == 2  # SPAN_KIND_SERVER
    assert produce.end_time_unix_nano - produce.start_time_unix_nano == 1500
    assert produce.status.code == 2 and produce.status.message == "UNKNOWN_TOPIC_OR_PARTITION"
    attrs = {a.key: a.value for a in produce.attributes}
    assert attrs["vcproxy.principal"].string_value == ATTRIBUTES["vcproxy.principal"]
    assert attrs["vcproxy.bytes_in"].int_value == 2**40
    assert [v.string_value for v in attrs["vcproxy.topics"].array_value.values] == ["orders", "payments"]
    assert [v.int_value for v in attrs["vcproxy.topic_bytes"].array_value.values] == [100, 2**33]
    assert list(attrs["vcproxy.error_codes"].array_value.values) == []
    assert attrs["vcproxy.local"].HasField("bool_value") and not attrs["vcproxy.local"].bool_value
    assert attrs["ratio"].double_value == 0.25

    auth, connection = by_name["authenticate"], by_name["connection"]
    assert auth.parent_span_id == connection.span_id and auth.trace_id == connection.trace_id
    assert auth.status.code == 2 and auth.kind == 1  # SPAN_KIND_INTERNAL
    assert connection.events[0].name == "upstream connected"
    assert connection.events[0].attributes[0].value.int_value == -1


def test_ids_are_lowercase_hex_and_int64_are_decimal_strings():
    line = json.loads(SpanEncoder().request(make_spans()))
    for span in line["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
        assert span["traceId"] == span["traceId"].lower() and int(span["traceId"], 16)
        assert isinstance(span["startTimeUnixNano"], str) and int(span["startTimeUnixNano"]) > 0
        assert isinstance(span["kind"], int)
        for attribute in span.get("attributes", []):
            value = attribute["value"]
            if "intValue" in value:
                assert isinstance(value["intValue"], str)
    produce = next(s for s in line["resourceSpans"][0]["scopeSpans"][0]["spans"] if s["name"] == "Produce")
    assert "parentSpanId" not in produce
    attrs = {a["key"]: a["value"] for a in produce["attributes"]}
    assert attrs["vcproxy.correlation_id"] == {"intValue": str(2**31 - 1)}
    assert attrs["vcproxy.topic_bytes"] == {"arrayValue": {"values": [{"intValue": "100"}, {"intValue": str(2**33)}]}}
    assert attrs["vcproxy.local"] == {"boolValue": False}


def test_repeated_values_are_encoded_once_and_stay_correct():
    encoder = SpanEncoder()
    spans = make_spans()
    first, second = encoder.request(spans), encoder.request(spans)
    assert first == second == SpanEncoder().request(spans)


def read_lines(directory: Path) -> list[tuple[str, dict[str, Any]]]:
    out = []

    def age(path: Path) -> int:  # traces.jsonl.2 is older than .1, which is older than traces.jsonl
        return -int(path.suffix[1:]) if path.suffix[1:].isdigit() else 0

    for path in sorted(directory.glob("traces.jsonl*"), key=age):
        for text in path.read_text().splitlines():
            out.append((path.name, json.loads(text)))
    return out


def test_files_rotate_by_size_and_keep_n(tmp_path):
    spans = make_spans()
    line_size = len(SpanEncoder().request(spans).encode()) + 1
    exporter = JsonLinesSpanExporter(tmp_path, max_bytes=3 * line_size, keep=3)
    for _ in range(20):
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["traces.jsonl", "traces.jsonl.1", "traces.jsonl.2"]
    for name in names:
        size = (tmp_path / name).stat().st_size
        assert 0 < size <= 3 * line_size
        assert all(json.loads(text)["resourceSpans"] for text in (tmp_path / name).read_text().splitlines())
    # 20 lines written, 3 per file: the newest 2 + 3 + 3 remain, the oldest were dropped.
    assert len(read_lines(tmp_path)) == 8
    assert exporter.lines_written == 20


def test_keep_one_file_truncates_on_rotation(tmp_path):
    spans = make_spans()
    line_size = len(SpanEncoder().request(spans).encode()) + 1
    exporter = JsonLinesSpanExporter(tmp_path, max_bytes=2 * line_size, keep=1)
    for _ in range(5):
        exporter.export(spans)
    exporter.shutdown()
    assert [p.name for p in tmp_path.iterdir()] == ["traces.jsonl"]
    assert len((tmp_path / "traces.jsonl").read_text().splitlines()) == 1


def test_lines_reach_the_file_at_once_and_shutdown_closes(tmp_path):
    exporter = JsonLinesSpanExporter(tmp_path / "nested" / "dir")
    exporter.export(make_spans())
    # Flushed after each batch: another reader sees the complete line before any shutdown.
    assert len((tmp_path / "nested" / "dir" / "traces.jsonl").read_text().splitlines()) == 1
    exporter.shutdown()
    exporter.shutdown()  # idempotent
    assert exporter.export(make_spans()) is SpanExportResult.FAILURE


def test_appends_to_an_existing_file(tmp_path):
    for _ in range(2):
        exporter = JsonLinesSpanExporter(tmp_path)
        exporter.export(make_spans())
        exporter.shutdown()
    assert len((tmp_path / "traces.jsonl").read_text().splitlines()) == 2


def test_tracing_shutdown_drains_the_batch_processor_into_the_file(tmp_path):
    tracing = Tracing(jsonl_dir=tmp_path, schedule_delay_millis=60_000)  # nothing leaves before shutdown
    now = time.time_ns()
    for i in range(1000):
        tracing.emit("Metadata", tracing.sample(), now, now + i, {"vcproxy.correlation_id": i}, None)
    tracing.shutdown()
    lines = read_lines(tmp_path)
    ids = [
        int(attr["value"]["intValue"])
        for _, line in lines
        for span in line["resourceSpans"][0]["scopeSpans"][0]["spans"]
        for attr in span["attributes"]
    ]
    assert sorted(ids) == list(range(1000))


@pytest.mark.parametrize("ratio", [0.0, 0.5, 1.0])
def test_sampling_is_trace_id_ratio_based(ratio):
    tracing = Tracing(sample_ratio=ratio)
    ids = [tracing.sample() for _ in range(4000)]
    sampled = [i for i in ids if i]
    assert abs(len(sampled) / len(ids) - ratio) < 0.05
    # The SDK's TraceIdRatioBased sampler agrees on every id.
    from opentelemetry.sdk.trace.sampling import Decision

    for trace_id in sampled[:50]:
        result = tracing.sampler.should_sample(None, trace_id, "Produce")
        assert result.decision is Decision.RECORD_AND_SAMPLE
