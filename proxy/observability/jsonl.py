"""Spans as OTLP JSON Lines files, rotated by size, for offline analysis.

Each export batch is one line holding an OTLP `ExportTraceServiceRequest` in the protobuf JSON
mapping (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding):
``{"resourceSpans": [{"resource": ..., "scopeSpans": [{"scope": ..., "spans": [...]}]}]}``.
Trace and span ids are lowercase hex, 64-bit integers (times, int attributes) decimal strings,
enums (span kind, status code) integers, attributes ``{"key": ..., "value": AnyValue}``.

Files: ``traces.jsonl`` is written; when the next line would take it past ``max_bytes`` it becomes
``traces.jsonl.1`` (``.1`` becomes ``.2``, ...) and a new ``traces.jsonl`` starts; ``keep`` files
are kept in all (the current one included). Lines are flushed to the OS after every batch and the
file is fsynced on shutdown, so a drained proxy leaves complete lines only.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger(__name__)

FILE_NAME = "traces.jsonl"


_str = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C-accelerated: '"..."'
_CACHE_LIMIT = 4096


def _double(value: float) -> str:
    if value != value:
        return '{"doubleValue":"NaN"}'
    if value in (float("inf"), float("-inf")):
        return '{"doubleValue":"Infinity"}' if value > 0 else '{"doubleValue":"-Infinity"}'
    return f'{{"doubleValue":{value!r}}}'


def any_value(value: Any) -> str:
    """An attribute value as OTLP AnyValue JSON text."""
    kind = type(value)
    if kind is str:
        return '{"stringValue":' + _str(value) + "}"
    if kind is bool:
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if kind is int:
        return f'{{"intValue":"{value}"}}'
    if kind is list or kind is tuple:
        return '{"arrayValue":{"values":[' + ",".join([any_value(v) for v in value]) + "]}}"
    if isinstance(value, bool):  # subclasses, e.g. enums and kio's int types
        return any_value(bool(value))
    if isinstance(value, int):
        return any_value(int(value))
    if isinstance(value, float):
        return _double(float(value))
    if isinstance(value, str):
        return any_value(str(value))
    if isinstance(value, bytes):
        import base64

        return '{"bytesValue":"' + base64.b64encode(value).decode() + '"}'
    if isinstance(value, Sequence):
        return any_value(list(value))
    return any_value(str(value))


class SpanEncoder:
    """Builds the OTLP JSON text of spans directly (no intermediate dicts). Attributes whose value
    repeats from span to span (virtual cluster, principal, client id, address, API name...) are
    encoded once and cached."""

    def __init__(self) -> None:
        self._pairs: dict[tuple[str, Any], str] = {}
        self._keys: dict[str, str] = {}
        self._resources: dict[int, tuple[Any, str]] = {}

    def key_value(self, key: str, value: Any) -> str:
        kind = type(value)
        if kind is str or kind is bool:
            pair = (key, value) if kind is str else (key, "\0bool", value)
            cached = self._pairs.get(pair)  # type: ignore[arg-type]
            if cached is None:
                cached = '{"key":' + _str(key) + ',"value":' + any_value(value) + "}"
                if len(self._pairs) >= _CACHE_LIMIT:
                    self._pairs.clear()
                self._pairs[pair] = cached  # type: ignore[index]
            return cached
        prefix = self._keys.get(key)
        if prefix is None:
            prefix = self._keys[key] = '{"key":' + _str(key) + ',"value":'
        return prefix + any_value(value) + "}"

    def attributes(self, attributes: Mapping[str, Any] | None) -> str:
        out = []
        keys, pairs = self._keys, self._pairs
        for key, value in (attributes or {}).items():  # the common types inline: this runs per span
            kind = type(value)
            if kind is int:
                prefix = keys.get(key)
                if prefix is None:
                    prefix = keys[key] = '{"key":' + _str(key) + ',"value":'
                out.append(f'{prefix}{{"intValue":"{value}"}}}}')
            elif kind is str:
                cached = pairs.get((key, value))
                out.append(cached if cached is not None else self.key_value(key, value))
            else:
                out.append(self.key_value(key, value))
        return "[" + ",".join(out) + "]"

    def span(self, span: ReadableSpan) -> str:
        context = span.context
        assert context is not None
        parts = [f'{{"traceId":"{context.trace_id:032x}","spanId":"{context.span_id:016x}"']
        if span.parent is not None:
            parts.append(f',"parentSpanId":"{span.parent.span_id:016x}"')
        kind = span.kind.value + 1  # the API's SpanKind starts at INTERNAL=0; OTLP's SPAN_KIND_INTERNAL is 1
        parts.append(
            f',"name":{_str(span.name)},"kind":{kind},'
            f'"startTimeUnixNano":"{span.start_time or 0}","endTimeUnixNano":"{span.end_time or 0}"'
        )
        attributes = span.attributes
        if attributes:
            parts.append(',"attributes":' + self.attributes(attributes))
        if span.dropped_attributes:
            parts.append(f',"droppedAttributesCount":{span.dropped_attributes}')
        if span.events:
            events = []
            for event in span.events:
                item = f'{{"timeUnixNano":"{event.timestamp}","name":{_str(event.name)}'
                if event.attributes:
                    item += ',"attributes":' + self.attributes(event.attributes)
                events.append(item + "}")
            parts.append(',"events":[' + ",".join(events) + "]")
        if span.links:
            links = []
            for link in span.links:
                item = f'{{"traceId":"{link.context.trace_id:032x}","spanId":"{link.context.span_id:016x}"'
                if link.attributes:
                    item += ',"attributes":' + self.attributes(link.attributes)
                links.append(item + "}")
            parts.append(',"links":[' + ",".join(links) + "]")
        status = span.status
        # StatusCode UNSET=0, OK=1, ERROR=2: the numbers of OTLP's STATUS_CODE_*
        code = status.status_code.value
        if code:
            message = f',"message":{_str(status.description)}' if status.description else ""
            parts.append(f',"status":{{"code":{code}{message}}}}}')
        else:
            parts.append(',"status":{}}')
        return "".join(parts)

    def resource(self, resource: Any) -> str:
        cached = self._resources.get(id(resource))
        if cached is None or cached[0] is not resource:
            text = '{"attributes":' + self.attributes(resource.attributes) + "}"
            cached = self._resources[id(resource)] = (resource, text)
        return cached[1]

    def request(self, spans: Sequence[ReadableSpan]) -> str:
        """An ExportTraceServiceRequest in the OTLP JSON mapping: spans grouped by resource and scope."""
        by_resource: dict[int, tuple[Any, dict[tuple[str, str | None, str | None], list[str]]]] = {}
        for span in spans:
            resource = span.resource
            _, scopes = by_resource.setdefault(id(resource), (resource, {}))
            scope = span.instrumentation_scope
            key = (scope.name, scope.version, scope.schema_url) if scope is not None else ("", None, None)
            scopes.setdefault(key, []).append(self.span(span))
        resource_spans = []
        for resource, scopes in by_resource.values():
            scope_spans = []
            for (name, version, schema_url), encoded in scopes.items():
                scope = '{"name":' + _str(name) + (',"version":' + _str(version) if version else "") + "}"
                entry = '{"scope":' + scope + ',"spans":[' + ",".join(encoded) + "]"
                if schema_url:
                    entry += ',"schemaUrl":' + _str(schema_url)
                scope_spans.append(entry + "}")
            entry = '{"resource":' + self.resource(resource) + ',"scopeSpans":[' + ",".join(scope_spans) + "]"
            if resource.schema_url:
                entry += ',"schemaUrl":' + _str(resource.schema_url)
            resource_spans.append(entry + "}")
        return '{"resourceSpans":[' + ",".join(resource_spans) + "]}"


def encode_request(spans: Sequence[ReadableSpan]) -> str:
    return SpanEncoder().request(spans)


class JsonLinesSpanExporter(SpanExporter):
    """Writes one OTLP JSON line per export batch into DIR/traces.jsonl, rotating by size."""

    def __init__(self, directory: str | Path, max_bytes: int = 10 * 1024 * 1024, keep: int = 10):
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / FILE_NAME
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()
        self._encoder = SpanEncoder()
        self._file: IO[bytes] | None = self.path.open("ab")
        self._size = self._file.tell()
        self.lines_written = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        line = self._encoder.request(spans).encode() + b"\n"
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            try:
                if self._size and self._size + len(line) > self.max_bytes:
                    self._rotate()
                self._file.write(line)
                self._file.flush()
            except OSError as exc:
                log.warning("cannot write spans to %s: %s", self.path, exc)
                return SpanExportResult.FAILURE
            self._size += len(line)
            self.lines_written += 1
        return SpanExportResult.SUCCESS

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        self._file = None
        oldest = self.directory / f"{FILE_NAME}.{self.keep - 1}"
        if self.keep == 1:
            self.path.unlink(missing_ok=True)
        else:
            oldest.unlink(missing_ok=True)
            for i in range(self.keep - 2, 0, -1):
                older = self.directory / f"{FILE_NAME}.{i}"
                if older.exists():
                    older.rename(self.directory / f"{FILE_NAME}.{i + 1}")
            self.path.rename(self.directory / f"{FILE_NAME}.1")
        self._file = self.path.open("ab")
        self._size = 0

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._file is None:
                return
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            except OSError as exc:
                log.warning("cannot flush spans to %s: %s", self.path, exc)
            finally:
                self._file.close()
                self._file = None
