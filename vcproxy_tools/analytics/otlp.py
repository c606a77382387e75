"""One line of OTLP JSON (the protobuf JSON mapping) to flat span records, with validation.

A line is either a whole ``TracesData`` (``{"resourceSpans": [...]}``, what OTLP file exporters write) or a single
``ResourceSpans`` (``{"resource": ..., "scopeSpans": [...]}``). Anything else, or a span that breaks the span
contract (ids not hex, missing times, mistyped ``vcproxy.*`` attributes), makes the whole line bad: `BadLine` says
why, and the job counts and reports it rather than guessing. Attributes the job does not use are never inspected,
so an exotic value there cannot spoil a line.

Pure Python on purpose: Spark executors run it per partition, and the unit tests run it without Spark.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from proxy.protocol.apikey import ApiKey

PHYSICAL_VC = "(physical)"  # the VC of kafka-cluster's members (the physical cluster)
PRODUCE_KEY = int(ApiKey.PRODUCE)  # plain ints: Spark columns compare with them
FETCH_KEYS = (
    int(ApiKey.FETCH),
    int(ApiKey.SHARE_FETCH),
)  # Fetch, ShareFetch: the APIs whose topic bytes count as fetched
EXCERPT_CHARS = 160

_DECIMAL = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(2**63), 2**63 - 1)  # every integer column is a Spark long: a larger value would fail the job
_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
STATUS_ERROR = 2


class BadLine(ValueError):
    """The line is unusable; the message is the reason shown to the user."""


class SpanRecord(NamedTuple):
    """One span, flattened. Request spans are the ones with an ``api_key``."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    status_code: int
    start_ns: int
    end_ns: int
    latency_ms: float
    virtual_cluster: str
    virtual_cluster_id: str | None
    principal: str | None
    client_id: str | None
    client_instance_id: str | None
    client_address: str | None
    api_name: str | None
    api_key: int | None
    api_version: int | None
    correlation_id: int | None
    topics: list[str]
    topic_bytes: list[int]  # aligned with topics
    bytes_in: int
    bytes_out: int
    error_codes: list[int]
    is_error: bool
    throttle_ms: int
    upstream_node_id: int | None

    @property
    def is_request(self) -> bool:
        return self.api_key is not None


# Spark SQL type of each SpanRecord field, in field order (aggregate.py builds its schema from this).
COLUMN_TYPES: dict[str, str] = {
    "trace_id": "string",
    "span_id": "string",
    "parent_span_id": "string",
    "name": "string",
    "status_code": "long",
    "start_ns": "long",
    "end_ns": "long",
    "latency_ms": "double",
    "virtual_cluster": "string",
    "virtual_cluster_id": "string",
    "principal": "string",
    "client_id": "string",
    "client_instance_id": "string",
    "client_address": "string",
    "api_name": "string",
    "api_key": "long",
    "api_version": "long",
    "correlation_id": "long",
    "topics": "array<string>",
    "topic_bytes": "array<long>",
    "bytes_in": "long",
    "bytes_out": "long",
    "error_codes": "array<long>",
    "is_error": "boolean",
    "throttle_ms": "long",
    "upstream_node_id": "long",
}
assert tuple(COLUMN_TYPES) == SpanRecord._fields


# What the job's single pass over a partition yields: a row per span, per bad line and per partition (its line
# counts, from which bad lines get their line numbers), all in one schema: the META columns, then SpanRecord's.
META_COLUMNS: dict[str, str] = {
    "_rec": "string",  # "span", "bad" or "part"
    "_file": "string",
    "_part": "long",
    "_line": "long",  # bad: index of the line in the partition; part: lines in the partition
    "_reason": "string",  # bad
    "_text": "string",  # bad: the start of the line
    "_blank": "long",  # part: blank lines (not bad, just skipped)
    "_spans": "long",  # part: valid spans
    "_requests": "long",  # part: of which request spans
    "_bad": "long",  # part: bad lines
}
_NO_META = (None,) * (len(META_COLUMNS) - 1)
_NO_COUNTS = (None,) * 4
_NO_SPAN = (None,) * len(SpanRecord._fields)


def scan_lines(part: int, lines: Iterable[str], file: str) -> Iterator[tuple[Any, ...]]:
    """Parse one partition of one input file (Spark's mapPartitionsWithIndex); bad lines are kept, not raised."""
    total = blank = spans = requests = bad = 0
    for i, line in enumerate(lines):
        total += 1
        if not line.strip():
            blank += 1
            continue
        try:
            records = parse_line(line)
        except BadLine as exc:
            bad += 1
            yield ("bad", file, part, i, str(exc), excerpt(line), *_NO_COUNTS, *_NO_SPAN)
            continue
        for record in records:
            spans += 1
            requests += record.api_key is not None
            yield ("span", *_NO_META, *record)
    yield ("part", file, part, total, None, None, blank, spans, requests, bad, *_NO_SPAN)


def excerpt(line: str) -> str:
    """The start of a bad line, for the bad_lines table."""
    line = line.strip()
    return line if len(line) <= EXCERPT_CHARS else line[:EXCERPT_CHARS] + "…"


def parse_line(line: str) -> list[SpanRecord]:
    """All spans of one JSON line ([] for a blank line or one without spans); raises BadLine."""
    text = line.strip().lstrip("\ufeff")  # a BOM survives at the start of files written by some tools
    if not text:
        return []
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadLine(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise BadLine("not valid JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise BadLine(f"expected a JSON object (TracesData or ResourceSpans), got {_json_type(obj)}")
    records: list[SpanRecord] = []
    if "resourceSpans" in obj:
        for i, rs in enumerate(_list(obj, "resourceSpans", "")):
            _resource_spans(rs, f"resourceSpans[{i}]", records)
    elif "scopeSpans" in obj or "resource" in obj:
        _resource_spans(obj, "", records)
    else:
        keys = ", ".join(sorted(obj)[:5]) or "none"
        raise BadLine(f"neither a TracesData (resourceSpans) nor a ResourceSpans (scopeSpans); keys: {keys}")
    return records


def _resource_spans(rs: Any, where: str, out: list[SpanRecord]) -> None:
    if not isinstance(rs, dict):
        raise BadLine(f"{where or 'line'}: ResourceSpans must be an object, got {_json_type(rs)}")
    resource = rs.get("resource", {})
    if not isinstance(resource, dict):
        raise BadLine(f"{_at(where, 'resource')}: must be an object, got {_json_type(resource)}")
    for i, ss in enumerate(_list(rs, "scopeSpans", where)):
        ss_where = _at(where, f"scopeSpans[{i}]")
        if not isinstance(ss, dict):
            raise BadLine(f"{ss_where}: ScopeSpans must be an object, got {_json_type(ss)}")
        for j, span in enumerate(_list(ss, "spans", ss_where)):
            out.append(parse_span(span, _at(ss_where, f"spans[{j}]")))


def parse_span(span: Any, where: str = "span") -> SpanRecord:
    """One OTLP Span object; raises BadLine (prefixed with `where`) when it breaks the span contract."""
    if not isinstance(span, dict):
        raise BadLine(f"{where}: Span must be an object, got {_json_type(span)}")
    trace_id = _hex_id(span.get("traceId"), 32, f"{where}.traceId")
    span_id = _hex_id(span.get("spanId"), 16, f"{where}.spanId")
    parent = span.get("parentSpanId") or None
    parent_span_id = _hex_id(parent, 16, f"{where}.parentSpanId") if parent is not None else None
    name = span.get("name", "")
    if not isinstance(name, str):
        raise BadLine(f"{where}.name: must be a string, got {_json_type(name)}")
    start_ns = _time(span, "startTimeUnixNano", where)
    end_ns = _time(span, "endTimeUnixNano", where)
    if end_ns < start_ns:
        raise BadLine(f"{where}: endTimeUnixNano {end_ns} is before startTimeUnixNano {start_ns}")
    status_code = _status(span.get("status"), where)
    attrs = attribute_map(span.get("attributes", []), f"{where}.attributes")
    a = _Attrs(attrs, where)

    api_key = a.integer("vcproxy.api.key")
    topics = a.array("vcproxy.topics", str)
    topic_bytes = a.array("vcproxy.topic_bytes", int) if "vcproxy.topic_bytes" in attrs else None
    bytes_in = a.integer("vcproxy.bytes_in") or 0
    bytes_out = a.integer("vcproxy.bytes_out") or 0
    if topic_bytes is None:
        topic_bytes = _split_evenly(_record_bytes(a, api_key, bytes_in, bytes_out), len(topics))
    elif len(topic_bytes) != len(topics):
        raise BadLine(f"{where}: vcproxy.topic_bytes has {len(topic_bytes)} values for {len(topics)} topics")
    for key, value in (("vcproxy.bytes_in", bytes_in), ("vcproxy.bytes_out", bytes_out)):
        if value < 0:
            raise BadLine(f"{where}: attribute {key} is negative ({value})")
    if any(b < 0 for b in topic_bytes):
        raise BadLine(f"{where}: attribute vcproxy.topic_bytes has a negative value")
    error_codes = [c for c in a.array("vcproxy.error_codes", int) if c != 0]
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=name,
        status_code=status_code,
        start_ns=start_ns,
        end_ns=end_ns,
        latency_ms=(end_ns - start_ns) / 1e6,
        virtual_cluster=a.text("vcproxy.virtual_cluster") or PHYSICAL_VC,
        virtual_cluster_id=a.text("vcproxy.virtual_cluster.id"),
        principal=a.text("vcproxy.principal"),
        client_id=a.text("vcproxy.client_id"),
        client_instance_id=a.text("vcproxy.client_instance_id"),
        client_address=a.text("client.address"),
        api_name=(a.text("vcproxy.api.name") or name or None) if api_key is not None else None,
        api_key=api_key,
        api_version=a.integer("vcproxy.api.version"),
        correlation_id=a.integer("vcproxy.correlation_id"),
        topics=topics,
        topic_bytes=topic_bytes,
        bytes_in=bytes_in,
        bytes_out=bytes_out,
        error_codes=error_codes,
        # A proxy-side failure (e.g. the upstream broker went away) has no Kafka error code but is still an error.
        is_error=bool(error_codes) or status_code == STATUS_ERROR,
        throttle_ms=a.integer("vcproxy.throttle_ms") or 0,
        upstream_node_id=a.integer("vcproxy.upstream.node_id"),
    )


def _record_bytes(a: _Attrs, api_key: int | None, bytes_in: int, bytes_out: int) -> int:
    # Without vcproxy.topic_bytes the span's record bytes are split over its topics: an explicit
    # vcproxy.record_bytes if the exporter sent one, else the request (Produce) or response (Fetch) size.
    explicit = a.integer("vcproxy.record_bytes")
    if explicit is not None:
        return explicit
    if api_key == PRODUCE_KEY:
        return bytes_in
    if api_key in FETCH_KEYS:
        return bytes_out
    return 0


def _split_evenly(total: int, parts: int) -> list[int]:
    # Integer shares that add up to the total exactly (the first topics take the remainder).
    if parts == 0:
        return []
    share, rest = divmod(total, parts)
    return [share + (1 if i < rest else 0) for i in range(parts)]


def attribute_map(attrs: Any, where: str) -> dict[str, Any]:
    """KeyValue list -> {key: raw AnyValue}; the values are converted only when asked for."""
    if not isinstance(attrs, list):
        raise BadLine(f"{where}: must be a list of KeyValue, got {_json_type(attrs)}")
    out: dict[str, Any] = {}
    for i, kv in enumerate(attrs):
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise BadLine(f"{where}[{i}]: a KeyValue needs a string 'key'")
        out[kv["key"]] = kv.get("value", {})
    return out


def any_value(value: Any, where: str) -> Any:
    """An OTLP AnyValue as Python: str, int, bool, float, list, dict, or None for an empty AnyValue."""
    if not isinstance(value, dict):
        raise BadLine(f"{where}: AnyValue must be an object, got {_json_type(value)}")
    if not value:
        return None
    if "stringValue" in value:
        s = value["stringValue"]
        if not isinstance(s, str):
            raise BadLine(f"{where}: stringValue must be a string, got {_json_type(s)}")
        return s
    if "intValue" in value:  # int64 is a decimal string in the JSON mapping; a plain number is accepted too
        return _to_int(value["intValue"], f"{where}.intValue")
    if "boolValue" in value:
        b = value["boolValue"]
        if not isinstance(b, bool):
            raise BadLine(f"{where}: boolValue must be true or false, got {_json_type(b)}")
        return b
    if "doubleValue" in value:
        return _to_float(value["doubleValue"], f"{where}.doubleValue")
    if "arrayValue" in value:
        arr = value["arrayValue"]
        if not isinstance(arr, dict):
            raise BadLine(f"{where}: arrayValue must be an object, got {_json_type(arr)}")
        values = arr.get("values", [])  # an empty array is `{}`: repeated fields are omitted when empty
        if not isinstance(values, list):
            raise BadLine(f"{where}: arrayValue.values must be a list, got {_json_type(values)}")
        return [any_value(v, f"{where}[{i}]") for i, v in enumerate(values)]
    if "kvlistValue" in value:
        kvs = value["kvlistValue"]
        if not isinstance(kvs, dict):
            raise BadLine(f"{where}: kvlistValue must be an object")
        raw = attribute_map(kvs.get("values", []), f"{where}.kvlistValue")
        return {k: any_value(v, f"{where}.{k}") for k, v in raw.items()}
    if "bytesValue" in value:
        return value["bytesValue"]  # base64 text; the job never needs the bytes
    raise BadLine(f"{where}: unknown AnyValue {sorted(value)[0]!r}")


class _Attrs:
    """Typed access to a span's attributes; a value of the wrong type is a BadLine naming the key."""

    def __init__(self, raw: Mapping[str, Any], where: str) -> None:
        self.raw = raw
        self.where = where

    def _get(self, key: str) -> Any:
        return any_value(self.raw[key], f"{self.where} attribute {key}") if key in self.raw else None

    def text(self, key: str) -> str | None:
        v = self._get(key)
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, bool | int | float):
            return str(v)
        raise BadLine(f"{self.where}: attribute {key} must be a string, got {_json_type(v)}")

    def integer(self, key: str) -> int | None:
        v = self._get(key)
        return None if v is None else _to_int(v, f"{self.where}: attribute {key}")

    def array(self, key: str, elem: type) -> list[Any]:
        v = self._get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            raise BadLine(f"{self.where}: attribute {key} must be an array, got {_json_type(v)}")
        if elem is int:
            return [_to_int(x, f"{self.where}: attribute {key}[{i}]") for i, x in enumerate(v)]
        for i, x in enumerate(v):
            if not isinstance(x, elem):
                raise BadLine(f"{self.where}: attribute {key}[{i}] must be a string, got {_json_type(x)}")
        return v


def _to_int(value: Any, where: str) -> int:
    if isinstance(value, bool):  # bool is an int subclass; true is not a byte count
        raise BadLine(f"{where}: expected an integer, got a boolean")
    if isinstance(value, int):
        n = value
    elif (isinstance(value, str) and _DECIMAL.fullmatch(value.strip())) or (
        isinstance(value, float) and value.is_integer()
    ):
        n = int(value)
    else:
        raise BadLine(f"{where}: expected an integer, got {_short(value)}")
    if not _INT64[0] <= n <= _INT64[1]:
        raise BadLine(f"{where}: {n} does not fit in 64 bits")
    return n


def _to_float(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if value in ("NaN", "Infinity", "-Infinity"):  # the JSON mapping's spelling of non-finite doubles
        return float(value.replace("Infinity", "inf"))
    if isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            pass
        else:
            if math.isfinite(f):
                return f
    raise BadLine(f"{where}: expected a number, got {_short(value)}")


def _hex_id(value: Any, digits: int, where: str) -> str:
    if not isinstance(value, str) or len(value) != digits or not all(c in "0123456789abcdefABCDEF" for c in value):
        shown = "missing" if value is None else _short(value)
        raise BadLine(f"{where}: expected {digits} hex digits, got {shown}")
    if value.strip("0") == "":
        raise BadLine(f"{where}: an all-zero id is invalid")
    return value.lower()


def _time(span: dict[str, Any], key: str, where: str) -> int:
    if key not in span:
        raise BadLine(f"{where}: {key} is missing")
    t = _to_int(span[key], f"{where}.{key}")
    if t <= 0:
        raise BadLine(f"{where}.{key}: must be positive, got {t}")
    return t


def _status(status: Any, where: str) -> int:
    if status is None:
        return 0
    if not isinstance(status, dict):
        raise BadLine(f"{where}.status: must be an object, got {_json_type(status)}")
    code = status.get("code", 0)
    if isinstance(code, str) and code in _STATUS_CODES:
        return _STATUS_CODES[code]
    code = _to_int(code, f"{where}.status.code")
    if code not in (0, 1, 2):
        raise BadLine(f"{where}.status.code: unknown status code {code}")
    return code


def _list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key, [])  # repeated fields are omitted when empty
    if not isinstance(value, list):
        raise BadLine(f"{_at(where, key)}: must be a list, got {_json_type(value)}")
    return value


def _at(where: str, child: str) -> str:
    return f"{where}.{child}" if where else child


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:40] + "…"
