"""vcproxy_tools.analytics.otlp: one OTLP JSON line to span records, and the reasons a line is bad (no Spark here)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vcproxy_tools.analytics.otlp import (
    COLUMN_TYPES,
    META_COLUMNS,
    PHYSICAL_VC,
    BadLine,
    SpanRecord,
    any_value,
    parse_line,
    scan_lines,
)

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"
START = 1_714_557_600_000_000_000


def kv(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "value": value}


def s(v: str) -> dict[str, Any]:
    return {"stringValue": v}


def i(v: int | str) -> dict[str, Any]:
    return {"intValue": v}


def arr(*values: dict[str, Any]) -> dict[str, Any]:
    return {"arrayValue": {"values": list(values)}}


def request_span(**over: Any) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": SPAN,
        "name": "Produce",
        "kind": 2,
        "startTimeUnixNano": str(START),
        "endTimeUnixNano": str(START + 12_500_000),
        "status": {},
        "attributes": [
            kv("vcproxy.virtual_cluster", s("team-a")),
            kv("vcproxy.virtual_cluster.id", s("vc-a")),
            kv("vcproxy.principal", s("User:alice")),
            kv("vcproxy.client_id", s("orders")),
            kv("vcproxy.client_instance_id", s("5f0b9a4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b")),
            kv("client.address", s("10.0.0.7")),
            kv("vcproxy.api.name", s("Produce")),
            kv("vcproxy.api.key", i("0")),
            kv("vcproxy.api.version", i(11)),  # a plain number: accepted too
            kv("vcproxy.correlation_id", i("42")),
            kv("vcproxy.topics", arr(s("orders"), s("payments"))),
            kv("vcproxy.topic_bytes", arr(i("700"), i(300))),
            kv("vcproxy.bytes_in", i("1100")),
            kv("vcproxy.bytes_out", i("60")),
            kv("vcproxy.error_codes", {"arrayValue": {}}),  # an empty array: `values` omitted
            kv("vcproxy.throttle_ms", i("5")),
            kv("vcproxy.upstream.node_id", i("2")),
            kv("vcproxy.local", {"boolValue": False}),
        ],
    }
    span.update(over)
    return span


def resource_spans(*spans: dict[str, Any]) -> dict[str, Any]:
    return {
        "resource": {"attributes": [kv("service.name", s("vcproxy"))]},
        "scopeSpans": [{"scope": {"name": "vcproxy"}, "spans": list(spans)}],
    }


def line(obj: Any) -> str:
    return json.dumps(obj)


def with_attrs(span: dict[str, Any], **attrs: dict[str, Any] | None) -> dict[str, Any]:
    """The span with attributes replaced (None removes one); keys use _ for ."""
    named = {k.replace("__", "."): v for k, v in attrs.items()}
    kept = [a for a in span["attributes"] if a["key"] not in named]
    return {**span, "attributes": kept + [kv(k, v) for k, v in named.items() if v is not None]}


def bad_reason(text: str) -> str:
    with pytest.raises(BadLine) as exc:
        parse_line(text)
    return str(exc.value)


# ---------------------------------------------------------------- both line shapes


def test_traces_data_line() -> None:
    [rec] = parse_line(line({"resourceSpans": [resource_spans(request_span())]}))
    assert rec == SpanRecord(
        trace_id=TRACE,
        span_id=SPAN,
        parent_span_id=None,
        name="Produce",
        status_code=0,
        start_ns=START,
        end_ns=START + 12_500_000,
        latency_ms=12.5,
        virtual_cluster="team-a",
        virtual_cluster_id="vc-a",
        principal="User:alice",
        client_id="orders",
        client_instance_id="5f0b9a4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
        client_address="10.0.0.7",
        api_name="Produce",
        api_key=0,
        api_version=11,
        correlation_id=42,
        topics=["orders", "payments"],
        topic_bytes=[700, 300],
        bytes_in=1100,
        bytes_out=60,
        error_codes=[],
        is_error=False,
        throttle_ms=5,
        upstream_node_id=2,
    )
    assert rec.is_request


def test_resource_spans_line_and_several_resources_and_scopes() -> None:
    one = parse_line(line(resource_spans(request_span(), request_span(spanId="00000000000000ab"))))
    assert [r.span_id for r in one] == [SPAN, "00000000000000ab"]
    rs = resource_spans(request_span())
    rs["scopeSpans"].append({"scope": {"name": "other"}, "spans": [request_span(spanId="00000000000000cd")]})
    many = parse_line(line({"resourceSpans": [rs, resource_spans(request_span(spanId="00000000000000ef"))]}))
    assert [r.span_id for r in many] == [SPAN, "00000000000000cd", "00000000000000ef"]


def test_empty_containers_and_blank_lines_have_no_spans() -> None:
    assert parse_line("") == [] and parse_line("   \n") == []
    assert parse_line('{"resourceSpans": []}') == []
    assert parse_line('{"resource": {}, "scopeSpans": [{"scope": {}}]}') == []
    assert parse_line("\ufeff" + line(resource_spans(request_span())))  # a BOM at the start of a file


# ---------------------------------------------------------------- values


def test_int_values_as_strings_or_numbers() -> None:
    [rec] = parse_line(line(resource_spans(request_span(startTimeUnixNano=START, endTimeUnixNano=str(START + 1)))))
    assert (rec.start_ns, rec.end_ns, rec.latency_ms) == (START, START + 1, 1e-6)
    span = with_attrs(request_span(), vcproxy__bytes_in=i(7), vcproxy__bytes_out=i("-0"), vcproxy__api__key=i(1.0))
    [rec] = parse_line(line(resource_spans(span)))
    assert (rec.bytes_in, rec.bytes_out, rec.api_key) == (7, 0, 1)


def test_any_value_kinds() -> None:
    assert any_value(s("x"), "v") == "x"
    assert any_value(i("-12"), "v") == -12
    assert any_value({"boolValue": True}, "v") is True
    assert any_value({"doubleValue": 1.5}, "v") == 1.5
    assert any_value({"doubleValue": "Infinity"}, "v") == float("inf")
    assert any_value(arr(s("a"), i("1")), "v") == ["a", 1]
    assert any_value({"arrayValue": {}}, "v") == []
    assert any_value({"kvlistValue": {"values": [kv("k", s("v"))]}}, "v") == {"k": "v"}
    assert any_value({"bytesValue": "AQI="}, "v") == "AQI="
    assert any_value({}, "v") is None
    for bad in ({"intValue": "1.5"}, {"intValue": True}, {"boolValue": "yes"}, {"stringValue": 3}, {"what": 1}, []):
        with pytest.raises(BadLine):
            any_value(bad, "v")


def test_error_codes_and_status() -> None:
    span = with_attrs(request_span(), vcproxy__error_codes=arr(i("6"), i(0), i("87")))
    [rec] = parse_line(line(resource_spans(span)))
    assert (rec.error_codes, rec.is_error) == ([6, 87], True)  # 0 is not an error
    [rec] = parse_line(line(resource_spans(request_span(status={"code": 2}))))
    assert (rec.status_code, rec.error_codes, rec.is_error) == (2, [], True)  # a proxy-side failure
    [rec] = parse_line(line(resource_spans(request_span(status={"code": "STATUS_CODE_OK"}))))
    assert (rec.status_code, rec.is_error) == (1, False)


def test_missing_attributes() -> None:
    span = {k: v for k, v in request_span().items() if k not in ("attributes", "status", "kind")}
    [rec] = parse_line(line(resource_spans(span)))
    assert rec.virtual_cluster == PHYSICAL_VC  # no VC: the physical cluster
    assert (rec.principal, rec.client_id, rec.client_instance_id, rec.api_key, rec.api_name) == (None,) * 5
    assert not rec.is_request
    assert (rec.topics, rec.topic_bytes, rec.error_codes, rec.bytes_in, rec.throttle_ms) == ([], [], [], 0, 0)


def test_empty_virtual_cluster_is_physical() -> None:
    [rec] = parse_line(line(resource_spans(with_attrs(request_span(), vcproxy__virtual_cluster=s("")))))
    assert rec.virtual_cluster == PHYSICAL_VC


def test_non_request_spans_have_no_api() -> None:
    conn = {**request_span(name="connection"), "attributes": [kv("vcproxy.principal", s("User:alice"))]}
    [rec] = parse_line(line(resource_spans(conn)))
    assert rec.name == "connection" and rec.api_key is None and rec.api_name is None and not rec.is_request


def test_api_name_falls_back_to_span_name() -> None:
    [rec] = parse_line(line(resource_spans(with_attrs(request_span(name="Fetch"), vcproxy__api__name=None))))
    assert rec.api_name == "Fetch"


def test_topic_bytes_absent_splits_record_bytes_evenly() -> None:
    produce = with_attrs(request_span(), vcproxy__topic_bytes=None, vcproxy__bytes_in=i("1001"))
    [rec] = parse_line(line(resource_spans(produce)))
    assert rec.topic_bytes == [501, 500] and sum(rec.topic_bytes) == 1001  # Produce: request bytes
    fetch = with_attrs(
        request_span(name="Fetch"),
        vcproxy__api__key=i("1"),
        vcproxy__topic_bytes=None,
        vcproxy__topics=arr(s("a"), s("b"), s("c")),
        vcproxy__bytes_out=i("10"),
    )
    [rec] = parse_line(line(resource_spans(fetch)))
    assert rec.topic_bytes == [4, 3, 3]  # Fetch: response bytes
    explicit = with_attrs(produce, vcproxy__record_bytes=i("90"))
    assert parse_line(line(resource_spans(explicit)))[0].topic_bytes == [45, 45]
    other = with_attrs(produce, vcproxy__api__key=i("8"))  # OffsetCommit: no record bytes
    assert parse_line(line(resource_spans(other)))[0].topic_bytes == [0, 0]


def test_hex_ids_are_normalised_to_lower_case() -> None:
    [rec] = parse_line(line(resource_spans(request_span(traceId=TRACE.upper(), parentSpanId="ABCDEF0123456789"))))
    assert rec.trace_id == TRACE and rec.parent_span_id == "abcdef0123456789"
    [rec] = parse_line(line(resource_spans(request_span(parentSpanId=""))))  # root span
    assert rec.parent_span_id is None


# ---------------------------------------------------------------- bad lines, with their reasons


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"resourceSpans": [', "not valid JSON"),
        ("not json at all", "not valid JSON"),
        ("[1, 2]", "expected a JSON object (TracesData or ResourceSpans), got a list"),
        ('"a string"', "got a string"),
        ('{"hello": 1}', "neither a TracesData (resourceSpans) nor a ResourceSpans (scopeSpans); keys: hello"),
        ('{"resourceSpans": {}}', "resourceSpans: must be a list, got an object"),
        ('{"resourceSpans": [3]}', "resourceSpans[0]: ResourceSpans must be an object"),
        ('{"scopeSpans": [{"spans": {}}]}', "scopeSpans[0].spans: must be a list"),
        ('{"scopeSpans": [{"spans": [1]}]}', "scopeSpans[0].spans[0]: Span must be an object"),
        ('{"resource": [], "scopeSpans": []}', "resource: must be an object"),
    ],
)
def test_wrong_structure(text: str, reason: str) -> None:
    assert reason in bad_reason(text)


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({"traceId": "xyz"}, "traceId: expected 32 hex digits, got 'xyz'"),
        ({"traceId": None}, "traceId: expected 32 hex digits, got missing"),
        ({"traceId": "W47/95gDgQPSabYzgT/GDA=="}, "expected 32 hex digits"),  # base64, not the OTLP/JSON hex
        ({"spanId": TRACE}, "spanId: expected 16 hex digits"),
        ({"spanId": "0" * 16}, "all-zero id is invalid"),
        ({"parentSpanId": "12"}, "parentSpanId: expected 16 hex digits"),
        ({"startTimeUnixNano": None}, "startTimeUnixNano is missing"),
        ({"endTimeUnixNano": "soon"}, "endTimeUnixNano: expected an integer"),
        ({"endTimeUnixNano": str(START - 1)}, "is before startTimeUnixNano"),
        ({"startTimeUnixNano": "0"}, "must be positive"),
        ({"status": {"code": 9}}, "unknown status code 9"),
        ({"status": "ERROR"}, "status: must be an object"),
        ({"attributes": {}}, "attributes: must be a list of KeyValue"),
        ({"attributes": [{"value": s("x")}]}, "needs a string 'key'"),
        ({"name": 5}, "name: must be a string"),
    ],
)
def test_span_contract_violations(over: dict[str, Any], reason: str) -> None:
    span = {k: v for k, v in request_span(**over).items() if v is not None}
    got = bad_reason(line({"resourceSpans": [resource_spans(request_span(), span)]}))
    assert got.startswith("resourceSpans[0].scopeSpans[0].spans[1]"), got
    assert reason in got


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        ({"vcproxy__api__key": s("Produce")}, "attribute vcproxy.api.key: expected an integer"),
        ({"vcproxy__bytes_in": {"boolValue": True}}, "attribute vcproxy.bytes_in: expected an integer, got a boolean"),
        ({"vcproxy__bytes_out": i("-3")}, "vcproxy.bytes_out is negative"),
        ({"vcproxy__topics": s("orders")}, "attribute vcproxy.topics must be an array"),
        ({"vcproxy__topics": arr(i("1"))}, "attribute vcproxy.topics[0] must be a string"),
        ({"vcproxy__topic_bytes": arr(i("1"))}, "vcproxy.topic_bytes has 1 values for 2 topics"),
        ({"vcproxy__topic_bytes": arr(i("1"), i("-1"))}, "vcproxy.topic_bytes has a negative value"),
        ({"vcproxy__error_codes": arr(s("NOT_LEADER"))}, "attribute vcproxy.error_codes[0]: expected an integer"),
        ({"vcproxy__principal": arr(s("a"))}, "attribute vcproxy.principal must be a string, got a list"),
        ({"vcproxy__correlation_id": i(str(2**64))}, "does not fit in 64 bits"),
        ({"vcproxy__throttle_ms": {"intValue": None}}, "expected an integer, got null"),
    ],
)
def test_mistyped_vcproxy_attributes(attrs: dict[str, Any], reason: str) -> None:
    assert reason in bad_reason(line(resource_spans(with_attrs(request_span(), **attrs))))


def test_unused_attributes_are_not_inspected() -> None:
    span = with_attrs(request_span(), some__other=i("not a number"), http__weird={"fancyValue": 1})
    assert len(parse_line(line(resource_spans(span)))) == 1


def test_scalar_strings_accept_numbers() -> None:
    [rec] = parse_line(line(resource_spans(with_attrs(request_span(), vcproxy__client_id=i("7")))))
    assert rec.client_id == "7"


# ---------------------------------------------------------------- a partition, as the Spark job sees it


def test_scan_lines_rows() -> None:
    good = line(resource_spans(request_span(), request_span(name="connection", attributes=[])))
    rows = list(scan_lines(3, [good, "", "{oops", good], file="traces.jsonl.1"))
    width = len(META_COLUMNS) + len(COLUMN_TYPES)
    assert all(len(r) == width for r in rows)
    kinds = [r[0] for r in rows]
    assert kinds == ["span", "span", "bad", "span", "span", "part"]
    meta = dict(zip(META_COLUMNS, rows[2][: len(META_COLUMNS)], strict=True))
    assert meta["_file"] == "traces.jsonl.1" and meta["_part"] == 3 and meta["_line"] == 2
    assert meta["_reason"].startswith("not valid JSON") and meta["_text"] == "{oops"
    part = dict(zip(META_COLUMNS, rows[-1][: len(META_COLUMNS)], strict=True))
    assert (part["_line"], part["_blank"], part["_spans"], part["_requests"], part["_bad"]) == (4, 1, 4, 2, 1)
    span = dict(zip(COLUMN_TYPES, rows[0][len(META_COLUMNS) :], strict=True))
    assert span["virtual_cluster"] == "team-a" and span["topic_bytes"] == [700, 300]
