"""OpenTelemetry spans and the per-connection recorder the Trio shell calls.

One SERVER span per proxied request, named after the Kafka API, from the request frame read to the
response written (or the local answer written, or the request forwarded for acks=0 Produce); one
"connection" span per client connection and an "authenticate" span under it. docs/observability.md
lists every attribute; a Spark job reads them, so names and types here are a contract.

Cost. Requests arrive at tens of thousands per second, and the SDK's `Tracer.start_span` costs tens
of microseconds (locks, attribute validation, context objects). Request spans therefore skip it:
the sampling decision is the `TraceIdRatioBased` sampler's rule applied to a fresh trace id when the
request is read (one `getrandbits`); an unsampled request computes no attribute at all; a sampled
one is built at the end as an SDK `ReadableSpan` (plain, already valid attribute types) and handed
to the same `BatchSpanProcessor`s the tracer uses. Connection and authentication spans (a few per
connection) go through the ordinary tracer and are always recorded. With tracing and metrics off
the connection holds no recorder at all.
"""

from __future__ import annotations

import functools
import logging
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import trio

from .. import __version__
from ..catalogue import catalogue
from ..core.exchange import Action, Exchange, RequestDecision
from ..protocol.apikey import ApiKey
from ..protocol.apis import request_type, response_type
from ..protocol.headers import peek_request, response_body_offset
from ..protocol.primitives import read_nullable_string
from ..rules import api_rules
from .local_answers import error_label
from .metrics import PHYSICAL_VC, Metrics
from .scan import Facts, TopicKey, scan, top_error

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import Span

    from ..config import ProxyConfig
    from ..core.stages.context import ConnectionState

log = logging.getLogger(__name__)

SERVICE_NAME = "vcproxy"
SHUTDOWN_TIMEOUT = 10.0
MAX_LEARNED_TOPIC_IDS = 100_000


class _Kinds(NamedTuple):
    """The catalogue's answers telemetry asks per request, as sets of keys (proxy/catalogue.py)."""

    sasl: frozenset[int]
    unbound: frozenset[int]  # what a connection asks before it is bound to a VC
    spliced: frozenset[int]  # bodies handled by splice (never decoded): errors read from the broker's frame
    records_in_response: frozenset[int]


@functools.cache
def _kinds() -> _Kinds:
    specs = catalogue().values()
    sasl = frozenset(s.key for s in specs if s.sasl)
    return _Kinds(
        sasl,
        frozenset(s.key for s in specs if s.answered_by in ("versions", "authenticate")),
        frozenset(s.key for s in specs if s.spliced),
        frozenset(s.key for s in specs if s.records_in_response),
    )


_ID_LIMIT = (1 << 64) - 1


def _api_names() -> dict[int, str]:
    return {key: rule.name for key, rule in api_rules().items()}


def otlp_traces_url(endpoint: str) -> str:
    """A collector's base URL gets OTLP/HTTP's traces path; a URL with a path is used as is."""
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    return endpoint.rstrip("/") + "/v1/traces" if parts.path in ("", "/") else endpoint


class Tracing:
    """The tracer provider, its exporters, and the request-span fast path."""

    def __init__(
        self,
        *,
        sample_ratio: float = 1.0,
        otlp_endpoint: str | None = None,
        jsonl_dir: str | Path | None = None,
        jsonl_max_bytes: int = 10 * 1024 * 1024,
        jsonl_keep: int = 10,
        instance_id: str | None = None,
        schedule_delay_millis: float = 1000,
    ):
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, TraceIdRatioBased
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        from ..identity import INSTANCE_ID

        self.instance_id = instance_id or str(INSTANCE_ID)  # also in the client id of its own connections
        self.resource = Resource.create(
            {"service.name": SERVICE_NAME, "service.instance.id": self.instance_id, "service.version": __version__}
        )
        self.scope = InstrumentationScope(SERVICE_NAME, __version__)
        self.sampler = TraceIdRatioBased(sample_ratio)
        self._bound = self.sampler.bound  # TraceIdRatioBased: sampled iff (trace_id & 2**64-1) < bound
        self.exporters: list[SpanExporter] = []
        if jsonl_dir is not None:
            from .jsonl import JsonLinesSpanExporter

            self.exporters.append(JsonLinesSpanExporter(jsonl_dir, jsonl_max_bytes, jsonl_keep))
        if otlp_endpoint is not None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            self.exporters.append(OTLPSpanExporter(endpoint=otlp_traces_url(otlp_endpoint), timeout=5))
        self.processors = [
            BatchSpanProcessor(
                exporter,
                max_queue_size=16384,
                schedule_delay_millis=schedule_delay_millis,
                max_export_batch_size=512,
            )
            for exporter in self.exporters
        ]
        # The tracer (connection and authentication spans) records everything: request spans are
        # sampled on the fast path below, with `self.sampler`'s rule.
        self.provider = TracerProvider(resource=self.resource, sampler=ALWAYS_ON, shutdown_on_exit=False)
        for processor in self.processors:
            self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(SERVICE_NAME, __version__)
        self._ReadableSpan = ReadableSpan
        self._SpanContext = SpanContext
        self._sampled = TraceFlags(TraceFlags.SAMPLED)
        self._server = SpanKind.SERVER
        self._unset = Status(StatusCode.UNSET)
        self._Status = Status
        self._error = StatusCode.ERROR

    @property
    def bound(self) -> int:
        """A request is sampled when the low 64 bits of its trace id, drawn at random, are under this."""
        return self._bound

    def sample(self, drawn: int | None = None) -> int:
        """A trace id if this request is sampled, else 0 (the TraceIdRatioBased rule on the id). `drawn`: the id's low
        64 bits, drawn before (by the forwarder, or as the connection was offered to it), so that no request is drawn
        twice."""
        if drawn is None:
            trace_id = random.getrandbits(128)
            return trace_id if (trace_id & _ID_LIMIT) < self._bound and trace_id else 0
        return ((random.getrandbits(64) << 64) | drawn or 1 << 64) if drawn < self._bound else 0

    def emit(
        self, name: str, trace_id: int, start: int, end: int, attributes: dict[str, Any], error: str | None
    ) -> None:
        """Hand a finished SERVER span to the processors (no SDK span object, no validation)."""
        context = self._SpanContext(trace_id, random.getrandbits(64) or 1, False, self._sampled)
        span: ReadableSpan = self._ReadableSpan(
            name,
            context=context,
            resource=self.resource,
            attributes=attributes,
            kind=self._server,
            status=self._unset if error is None else self._Status(self._error, error),
            start_time=start,
            end_time=end,
            instrumentation_scope=self.scope,
        )
        for processor in self.processors:
            processor.on_end(span)

    def shutdown(self) -> None:
        """Export what is queued, then close the exporters (the JSON Lines file is fsynced)."""
        self.provider.shutdown()


class Served(NamedTuple):
    """What the recorder reads of a request's exchange, for one the forwarder served: it went as the client sent it."""

    api_version: int
    response_header_version: int
    exchange: None = None
    close_after: bool = False


class RequestTrace:
    """What is remembered about one request between its frame and its answer."""

    __slots__ = (
        "api_key",
        "api_version",
        "bytes_in",
        "correlation_id",
        "delay",
        "pending",
        "request_topics",
        "started",
        "trace_id",
    )

    def __init__(
        self,
        started: int,
        trace_id: int,
        bytes_in: int,
        api_key: int,
        api_version: int,
        correlation_id: int,
        pending: Exchange | Served | None,
    ):
        self.started = started
        self.trace_id = trace_id  # 0: not sampled (metrics only)
        self.bytes_in = bytes_in
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.pending = pending
        self.request_topics: dict[TopicKey, int] | None = None
        self.delay = 0.0  # seconds the request was held back (a quota's mute, KIP-219)


class Telemetry:
    """Tracing and metrics of one proxy process; `connection()` makes each connection's recorder."""

    def __init__(
        self, tracing: Tracing | None, metrics: Metrics | None, cluster_id: Callable[[], str | None] = lambda: None
    ):
        self.tracing = tracing
        self.metrics = metrics
        self.cluster_id = cluster_id  # the physical cluster id, once discovered
        self.api_names = _api_names()
        if metrics is not None:
            metrics.api_names = self.api_names  # the forwarder's tallies count by API key
        self.topic_names: dict[uuid.UUID, str] = {}  # physical topic ids learned from Metadata responses

    @classmethod
    def from_config(cls, config: ProxyConfig, cluster_id: Callable[[], str | None]) -> Telemetry | None:
        tc, mc = config.tracing, config.metrics
        if not tc.enabled and not mc.enabled:
            return None
        tracing = None
        if tc.enabled:
            tracing = Tracing(
                sample_ratio=tc.sample_ratio,
                otlp_endpoint=tc.otlp_endpoint,
                jsonl_dir=tc.jsonl_dir,
                jsonl_max_bytes=tc.jsonl_max_bytes,
                jsonl_keep=tc.jsonl_keep,
            )
            log.info(
                "tracing: sample ratio %s, exporters %s, service.instance.id %s",
                tc.sample_ratio,
                [type(e).__name__ for e in tracing.exporters],
                tracing.instance_id,
            )
        return cls(tracing, Metrics() if mc.enabled else None, cluster_id)

    def connection(self, peer: tuple[str, int] | None, node_id: int | None) -> ConnectionTelemetry:
        return ConnectionTelemetry(self, peer, node_id)

    def upstream_attempt(self, node_id: int | None, ok: bool) -> None:
        if self.metrics is not None:
            self.metrics.upstream_attempt(-1 if node_id is None else node_id, ok)

    def learn_topic_ids(self, pairs: list[tuple[str, uuid.UUID]]) -> None:
        if len(self.topic_names) > MAX_LEARNED_TOPIC_IDS:
            self.topic_names.clear()
        for name, topic_id in pairs:
            self.topic_names[topic_id] = name

    async def aclose(self) -> None:
        """Flush and close the exporters (bounded, even when cancelled: called while shutting down)."""
        if self.tracing is None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(SHUTDOWN_TIMEOUT) as scope:
            await trio.to_thread.run_sync(self.tracing.shutdown, abandon_on_cancel=True)
        if scope.cancelled_caught:
            log.warning("tracing: exporters did not finish within %.0f s; some spans may be lost", SHUTDOWN_TIMEOUT)


class ConnectionTelemetry:
    """The recorder of one client connection. ClientConnection calls `on_request` after the session
    decided, `on_forwarded` after an acks=0 Produce went upstream, `on_reply` after each answer was
    written and `on_close` at the end. A request's record travels with its exchange; who the client
    is comes from the connection's state (`state`), which the stages keep."""

    def __init__(self, telemetry: Telemetry, peer: tuple[str, int] | None, node_id: int | None):
        self.telemetry = telemetry
        self.tracing = telemetry.tracing
        self.metrics = telemetry.metrics
        self.address, self.port = peer if peer is not None else ("", 0)
        self.node_id = -1 if node_id is None else node_id
        self.listener = "bootstrap" if node_id is None else f"broker-{node_id}"
        self.state: ConnectionState | None = None
        self.client_id: str | None = None
        self.requests = 0
        self._unbound: list[tuple[RequestTrace, Facts | None, int, int, bool]] = []
        self._vc_label = PHYSICAL_VC
        self._upstream_open = False
        self._tls_principal: str | None = None
        self._auth_started: int | None = None
        self._auth_done = False
        self._closed = False
        # The sampling draw of the next request the session takes (it was offered to the forwarder, or handed back by
        # it): used for that request instead of a new one.
        self.drawn: int | None = None
        self.span: Span | None = None
        if self.metrics is not None:
            self.metrics.connection_moved(self.listener, None, PHYSICAL_VC)
        if self.tracing is not None:
            from opentelemetry.trace import SpanKind

            attributes: dict[str, Any] = {
                "client.address": self.address,
                "client.port": self.port,
                "vcproxy.listener": self.listener,
                "vcproxy.upstream.node_id": self.node_id,
            }
            self.span = self.tracing.tracer.start_span("connection", kind=SpanKind.SERVER, attributes=attributes)

    # -- connection setup ------------------------------------------------------------------------

    def routed(self, node_id: int) -> None:
        """SNI: the TLS server name said which broker this connection (accepted as a bootstrap one) is for."""
        listener = f"broker-{node_id}"
        if self.metrics is not None:
            self.metrics.connection_routed(self.listener, listener, self._vc_label)
        self.node_id, self.listener = node_id, listener
        if self.span is not None:
            self.span.set_attributes({"vcproxy.listener": listener, "vcproxy.upstream.node_id": node_id})

    def tls_handshake(self, principal: str | None, error: str | None = None) -> None:
        """The TLS handshake finished: the client certificate's principal, or why it failed."""
        now = time.time_ns()
        if error is not None and self.metrics is not None:
            self.metrics.auth_failed("TLS")
        if principal is not None:
            self._tls_principal = principal
        self._auth_span("TLS", principal, error is None, self._span_start(), now, error)

    def upstream(self, ok: bool, error: str | None = None) -> None:
        self.telemetry.upstream_attempt(None if self.node_id < 0 else self.node_id, ok)
        if ok and self.metrics is not None:
            self.metrics.upstream_open(self.node_id, 1)
        self._upstream_open = ok
        if self.span is not None:
            event: dict[str, Any] = {"vcproxy.upstream.node_id": self.node_id}
            if error is not None:
                event["exception.message"] = error
            self.span.add_event("upstream connected" if ok else "upstream unavailable", event)

    def _span_start(self) -> int:
        return getattr(self.span, "start_time", None) or time.time_ns()

    # -- requests --------------------------------------------------------------------------------

    def on_request(self, frame: memoryview, decision: RequestDecision, started: int) -> RequestTrace | None:
        drawn, self.drawn = self.drawn, None  # this request's, if it was drawn before
        pending = decision.pending
        if pending is None:
            if decision.action is not Action.FORWARD:
                return None  # the connection closes; the connection span says why
            api_key, version, correlation_id = peek_request(frame)  # acks=0 Produce: no response will come
        else:
            api_key, version, correlation_id = pending.api_key, pending.api_version, pending.correlation_id
        wire_frame, wire_version = frame, version
        if decision.frame is not None:  # KIP-1313 header v3: the proxy sent the version before
            wire_frame, version = decision.frame, pending.version_seen_by_client if pending is not None else version
        if not self.requests:
            self._read_client_id(frame)
        self.requests += 1
        trace_id = self.tracing.sample(drawn) if self.tracing is not None else 0
        if not trace_id and self.metrics is None and api_key not in _kinds().sasl:
            return None
        trace = RequestTrace(started, trace_id, len(frame), api_key, version, correlation_id, pending)
        trace.delay = decision.delay
        if trace_id:
            trace.request_topics = self._request_topics(wire_frame, api_key, wire_version)
        if pending is not None:
            pending.trace = trace
        return trace

    def forwarded_tally(self, module: Any) -> Any:
        """The native tally the forwarder counts this connection's requests in while it has the connection (metrics
        on, tracing off: proxy/net/connection.py), for the connection's labels now; None when metrics are off."""
        metrics = self.metrics
        if metrics is None:
            return None
        if self._unbound:
            self._record_unbound()
        vc_name, cluster_id = self._labels()
        if vc_name != self._vc_label:
            metrics.connection_moved(self.listener, self._vc_label, vc_name)
            self._vc_label = vc_name
        return metrics.tally(module, vc_name, cluster_id)

    def draw(self) -> int | None:
        """The sampling draw of the request the connection is offered to the forwarder at (kept until the session
        takes that request, if the forwarder does not); None with tracing off."""
        if self.tracing is None:
            return None
        if self.drawn is None:
            self.drawn = random.getrandbits(64)
        return self.drawn

    def forwarded(self, requests: int, drawn: int | None) -> None:
        """The forwarder served `requests` (none sampled: no span) and handed back, or not, a request it drew for."""
        self.requests += requests
        self.drawn = drawn

    def adopted(self, ex: Exchange, bytes_in: int, age_ns: int, sampled: tuple[int, bytes] | None = None) -> None:
        """A request the forwarder sent `age_ns` ago whose answer comes through the pumps: recorded when it is
        answered, like any other; with the span the forwarder's draw sampled (`sampled`: the draw, and a copy of the
        request, which the forwarder read)."""
        if self.metrics is None and sampled is None:
            return
        trace_id = self.tracing.sample(sampled[0]) if sampled is not None and self.tracing is not None else 0
        started = time.time_ns() - age_ns
        ex.trace = RequestTrace(started, trace_id, bytes_in, ex.api_key, ex.api_version, ex.correlation_id, ex)
        if trace_id and sampled is not None:
            ex.trace.request_topics = self._request_topics(memoryview(sampled[1]), ex.api_key, ex.api_version)

    def forwarded_spans(self, records: list[Any], epoch_ns: int) -> None:
        """Spans of the sampled requests the forwarder served (`Phase.take_spans`: each one's draw, API, correlation
        id, times since the forwarder's epoch, which is `epoch_ns` on the wall clock, copies of the request and of its
        answer as the broker and as the client had it, or sketches of an answer with record batches, and the size of
        the client's), made as the Python path makes them from the same bytes; the forwarder's tally counted them (no
        metrics here)."""
        tracing = self.tracing
        if tracing is None:
            return
        from ..protocol.apis import api_info

        for draw, key, version, correlation, start, end, request, upstream, sent, size, elided in records:
            trace_id = tracing.sample(draw)
            info = api_info(key)
            if not trace_id or info is None:
                continue
            try:
                served = Served(version, info.response_header_version(version))
                trace = RequestTrace(epoch_ns + start, trace_id, len(request), key, version, correlation, served)
                trace.request_topics = self._request_topics(memoryview(request), key, version)
                if upstream is None:  # an acks=0 Produce: over once it went on
                    self._record(trace, None, 0, epoch_ns + end, False, count=False)
                    continue
                pieces: list[bytes | memoryview] = [sent if sent is not None else upstream]
                facts = self._scan_response(trace, pieces, memoryview(upstream), elided)
                self._record(trace, facts, size, epoch_ns + end, False, count=False)
            except Exception as exc:  # telemetry never costs a connection
                log.debug("cannot make the span of api %d v%d: %s", key, version, exc)

    def _request_topics(self, frame: memoryview, api_key: int, version: int) -> dict[TopicKey, int] | None:
        """A sampled request's topics, where they are read from the request (`on_request`)."""
        if api_key in _kinds().records_in_response:
            return None
        state = self.state
        if api_key == ApiKey.PRODUCE or state is None or state.engine is None:
            return self._scan_request(frame, api_key, version)
        return None

    def _labels(self) -> tuple[str, str]:
        """(vc, cluster_id) of the connection's virtual cluster as it is now; the physical cluster's for none."""
        state = self.state
        vc = state.vc if state is not None else None
        if vc is not None:
            return vc.name, vc.cluster_id
        return PHYSICAL_VC, self.telemetry.cluster_id() or ""

    def on_forwarded(self, trace: RequestTrace) -> None:
        self._finish(trace, None, None)

    def on_reply(self, ex: Exchange, pieces: list[bytes | memoryview], upstream_frame: memoryview | None) -> None:
        trace = ex.trace
        if trace is not None:
            self._finish(trace, pieces, upstream_frame)

    def _read_client_id(self, frame: memoryview) -> None:
        if self.state is not None:  # the session parsed it (any header version; KIP-1313 clients may omit it later)
            self.client_id = self.state.client_id
            return
        try:  # at offset 12 in request header v1, v2 and v3 alike
            self.client_id = read_nullable_string(frame, 12)[0]
        except ValueError:
            self.client_id = None

    def _scan_request(self, frame: memoryview, api_key: int, version: int) -> dict[TopicKey, int] | None:
        from ..protocol.apis import api_info
        from ..protocol.headers import parse_request_header

        try:
            info = api_info(api_key)
            assert info is not None
            offset = parse_request_header(frame, info.request_header_version(version)).body_offset
            return scan(request_type(api_key, version), frame, offset).topics
        except Exception as exc:  # telemetry never costs a connection
            log.debug("cannot scan api %d v%d request: %s", api_key, version, exc)
            return None

    def _scan_response(
        self,
        trace: RequestTrace,
        pieces: list[bytes | memoryview],
        upstream_frame: memoryview | None,
        elided: bool = False,
    ) -> Facts | None:
        """The response's facts. Fetch and ShareFetch bodies are walked only for a sampled span (they
        are the large ones); metrics take their top-level error code, read at a fixed offset."""
        pending = trace.pending
        assert pending is not None
        try:
            records = trace.api_key in _kinds().records_in_response
            # What the client got: its error codes are the ones counted (a spliced answer's too: the authorization
            # stage sets TOPIC_AUTHORIZATION_FAILED where the broker said its placeholder was unknown).
            if len(pieces) == 1:
                sent: bytes | memoryview = pieces[0]
            elif records:
                sent = _head(pieces, _HEAD)  # only its top-level error is read: no copy of the records
            else:
                sent = b"".join(pieces)  # a small body, spliced or re-encoded
            offset = response_body_offset(sent, pending.response_header_version)
            cls = response_type(trace.api_key, pending.api_version)
            if not records:
                return scan(cls, sent, offset)
            top = top_error(cls, sent, offset)
            if not trace.trace_id:
                return top
            # A span's topics and record bytes: read from the broker's frame where it was spliced (_topics maps its
            # physical names back), never from a copy of the records.
            if upstream_frame is not None and trace.api_key in _kinds().spliced:
                buf: bytes | memoryview = upstream_frame
            else:
                buf = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            facts = scan(cls, buf, response_body_offset(buf, pending.response_header_version), elided)
            facts.top_error = top.top_error
            return self._sent_throttle(trace, facts, pieces, buf)
        except Exception as exc:
            log.debug("cannot scan api %d v%d response: %s", trace.api_key, pending.api_version, exc)
            return None

    @staticmethod
    def _sent_throttle(trace: RequestTrace, facts: Facts, pieces: list[bytes | memoryview], scanned: Any) -> Facts:
        """A spliced body was scanned as the broker sent it: the throttle time is the one the client got
        (a quota's, proxy/quotas/throttle.py), read from what was sent (sampled spans only)."""
        changed = not (len(pieces) == 1 and pieces[0] is scanned)
        if trace.trace_id and trace.api_key in _kinds().spliced and changed and facts.throttle_ms is not None:
            from ..quotas.throttle import read_throttle

            pending = trace.pending
            assert pending is not None
            sent = read_throttle(pieces, trace.api_key, pending.api_version, pending.response_header_version)
            if sent is not None:
                facts.throttle_ms = sent
        return facts

    def _finish(
        self, trace: RequestTrace, pieces: list[bytes | memoryview] | None, upstream_frame: memoryview | None
    ) -> None:
        ended = time.time_ns()
        bytes_out = sum(map(len, pieces)) if pieces is not None else 0
        api_key = trace.api_key
        facts = self._scan_response(trace, pieces, upstream_frame) if pieces is not None else None
        state = self.state
        local = pieces is not None and upstream_frame is None
        if api_key in _kinds().sasl and state is not None:
            self._sasl_progress(trace, state, ended)
        if state is not None and state.image is not None and state.engine is None and api_key in _kinds().unbound:
            # Before its first other request a tenant's connection is bound to no VC yet: recorded at binding.
            self._unbound.append((trace, facts, bytes_out, ended, local))
            return
        if self._unbound:
            self._record_unbound()
        self._record(trace, facts, bytes_out, ended, local)

    def _record_unbound(self) -> None:
        unbound, self._unbound = self._unbound, []
        for args in unbound:
            self._record(*args)

    def _record(
        self, trace: RequestTrace, facts: Facts | None, bytes_out: int, ended: int, local: bool, count: bool = True
    ) -> None:
        """Metrics (unless `count` is false: the forwarder counted it) and the span of a finished request, with the
        connection's virtual cluster as it is now."""
        api_key = trace.api_key
        state = self.state
        vc = state.vc if state is not None else None
        vc_name, cluster_id = self._labels()
        if facts is not None and facts.named_ids and vc is None:
            self.telemetry.learn_topic_ids(facts.named_ids)
        errors = list(dict.fromkeys(facts.error_codes)) if facts is not None else []
        api_name = self.telemetry.api_names.get(api_key) or str(api_key)
        metrics = self.metrics if count else None
        if metrics is not None:
            if vc_name != self._vc_label:
                metrics.connection_moved(self.listener, self._vc_label, vc_name)
                self._vc_label = vc_name
            counted = counted_errors(facts)
            seconds = (ended - trace.started) / 1e9
            metrics.request(api_name, vc_name, cluster_id, seconds, trace.bytes_in, bytes_out, counted)
            if local:
                metrics.local_answer(api_name, vc_name, error_label(errors))
        if not trace.trace_id or self.tracing is None:
            return
        attributes: dict[str, Any] = {}
        if vc is not None:
            attributes["vcproxy.virtual_cluster"] = vc_name
        if cluster_id:
            attributes["vcproxy.virtual_cluster.id"] = cluster_id
        principal = state.principal if state is not None else None
        if principal is not None:
            attributes["vcproxy.principal"] = principal
        if self.client_id is not None:
            attributes["vcproxy.client_id"] = self.client_id
        if state is not None:
            attributes["vcproxy.client_instance_id"] = state.client_instance_id
            attributes["vcproxy.client_instance_id.source"] = state.client_instance_id_source
        attributes["client.address"] = self.address
        attributes["client.port"] = self.port
        attributes["vcproxy.api.name"] = api_name
        attributes["vcproxy.api.key"] = api_key
        attributes["vcproxy.api.version"] = trace.api_version
        if trace.pending is not None and trace.pending.api_version != trace.api_version:
            attributes["vcproxy.api.upstream_version"] = trace.pending.api_version
        attributes["vcproxy.correlation_id"] = trace.correlation_id
        topics, topic_bytes = self._topics(trace, facts, vc)
        if topics:
            attributes["vcproxy.topics"] = topics
            if topic_bytes is not None:
                attributes["vcproxy.topic_bytes"] = topic_bytes
        attributes["vcproxy.bytes_in"] = trace.bytes_in
        attributes["vcproxy.bytes_out"] = bytes_out
        if facts is not None:
            attributes["vcproxy.error_codes"] = errors
            if facts.throttle_ms is not None:  # the broker's or the proxy's quota throttle, whichever is larger
                attributes["vcproxy.throttle_ms"] = facts.throttle_ms
        if trace.delay > 0:  # held back by a quota's mute before it went on
            attributes["vcproxy.quota.delay_ms"] = round(trace.delay * 1000)
        attributes["vcproxy.upstream.node_id"] = self.node_id
        attributes["vcproxy.local"] = local
        self.tracing.emit(api_name, trace.trace_id, trace.started, ended, attributes, _error_names(errors))

    def _topics(self, trace: RequestTrace, facts: Facts | None, vc: Any) -> tuple[list[str], list[int] | None]:
        """Virtual topic names the request touched (physical ones for the physical cluster), with
        record bytes per topic for Produce requests and Fetch/ShareFetch responses."""
        api_key = trace.api_key
        exchange = trace.pending.exchange if trace.pending is not None else None
        from_upstream = False
        if api_key == ApiKey.PRODUCE:
            found = trace.request_topics  # the client's frame: the client's names
        elif api_key in _kinds().records_in_response:
            found, from_upstream = (facts.topics if facts is not None else None), True
        elif exchange is not None:
            return list(dict.fromkeys(exchange.tx.topics.values())), None
        else:
            found = trace.request_topics
        if not found:
            return [], None
        with_bytes = api_key == ApiKey.PRODUCE or api_key in _kinds().records_in_response
        names: dict[str, int] = {}
        for key, size in found.items():
            name = self._topic_name(key, vc, exchange, from_upstream)
            if name is not None:
                names[name] = names.get(name, 0) + size
        return list(names), (list(names.values()) if with_bytes else None)

    def _topic_name(self, key: TopicKey, vc: Any, exchange: Any, from_upstream: bool) -> str | None:
        if vc is None:  # the physical cluster: names as they are; ids if a Metadata response named them
            return key if isinstance(key, str) else self.telemetry.topic_names.get(key)
        image = self.state.image if self.state is not None else None
        if isinstance(key, uuid.UUID):
            physical = image.physical_for_id(key) if image is not None else None
            if physical is None:
                return None
        elif from_upstream:
            physical = key
        else:
            return key  # a tenant's own request: already the virtual name
        link = exchange.tx.virtual_topic(physical) if exchange is not None else vc.link_for(physical)
        return None if link is None or link == "<hidden>" else link

    # -- authentication --------------------------------------------------------------------------

    def _sasl_progress(self, trace: RequestTrace, state: ConnectionState, now: int) -> None:
        from ..auth.sasl import SaslServer

        auth = state.authenticator
        if not isinstance(auth, SaslServer) or self._auth_done:
            return
        if self._auth_started is None:
            self._auth_started = trace.started
        pending = trace.pending
        failed = pending is not None and pending.close_after
        if failed or (trace.api_key == ApiKey.SASL_AUTHENTICATE and auth.complete):
            self._auth_done = True
            mechanism = auth.mechanism or "none"
            if failed and self.metrics is not None:
                self.metrics.auth_failed(mechanism)
            principal = auth.principal if not failed else None
            self._auth_span(mechanism, principal, not failed, self._auth_started, now, "refused" if failed else None)

    def _auth_span(
        self, mechanism: str, principal: str | None, ok: bool, start: int, end: int, error: str | None
    ) -> None:
        if self.tracing is None:
            return
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        attributes: dict[str, Any] = {"vcproxy.auth.mechanism": mechanism, "vcproxy.auth.success": ok}
        if principal is not None:
            attributes["vcproxy.principal"] = principal
        context = set_span_in_context(self.span) if self.span is not None else None
        span = self.tracing.tracer.start_span(
            "authenticate", context=context, kind=SpanKind.INTERNAL, attributes=attributes, start_time=start
        )
        if not ok:
            span.set_status(Status(StatusCode.ERROR, error or "authentication failed"))
        span.end(end_time=end)

    # -- close -----------------------------------------------------------------------------------

    def on_close(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        state = self.state
        if self._unbound:
            self._record_unbound()
        if self._auth_started is not None and not self._auth_done and state is not None:
            self._auth_done = True
            mechanism = getattr(state.authenticator, "mechanism", None) or "none"
            self._auth_span(mechanism, None, False, self._auth_started, time.time_ns(), f"closed: {reason}")
        if self.metrics is not None:
            self.metrics.connection_moved(self.listener, self._vc_label, None)
            if self._upstream_open:
                self.metrics.upstream_open(self.node_id, -1)
        if self.span is None:
            return
        span = self.span
        vc = state.vc if state is not None else None
        principal = state.principal if state is not None else self._tls_principal
        attributes: dict[str, Any] = {"vcproxy.close_reason": reason, "vcproxy.requests": self.requests}
        if principal is not None:
            attributes["vcproxy.principal"] = principal
        if vc is not None:
            attributes["vcproxy.virtual_cluster"] = vc.name
            attributes["vcproxy.virtual_cluster.id"] = vc.cluster_id
        elif (cluster_id := self.telemetry.cluster_id()) is not None:
            attributes["vcproxy.virtual_cluster.id"] = cluster_id
        if self.client_id is not None:
            attributes["vcproxy.client_id"] = self.client_id
        if state is not None:
            attributes["vcproxy.client_instance_id"] = state.client_instance_id
            attributes["vcproxy.client_instance_id.source"] = state.client_instance_id_source
        span.set_attributes(attributes)
        span.end()
        self.span = None


_HEAD = 512  # bytes of a Fetch answer that hold its header and top-level error code


def _head(pieces: list[bytes | memoryview], n: int) -> bytes:
    """The first `n` bytes of an answer written in pieces."""
    out = bytearray()
    for piece in pieces:
        out += piece[: n - len(out)]
        if len(out) >= n:
            break
    return bytes(out)


def counted_errors(facts: Facts | None) -> list[int]:
    """The error codes vcproxy_request_errors counts for an answer: each distinct non-zero one, or for a Fetch and a
    ShareFetch the top-level one alone (the forwarder's tally reads the same: proxy/core/forward_table.py)."""
    if facts is None:
        return []
    if facts.top_error is not None:
        return [facts.top_error] if facts.top_error else []
    return list(dict.fromkeys(facts.error_codes))


def _error_names(errors: list[int]) -> str | None:
    if not errors:
        return None
    from kio.schema.errors import ErrorCode

    names = []
    for code in errors:
        try:
            names.append(ErrorCode(code).name.upper())
        except ValueError:
            names.append(str(code))
    return ", ".join(names)
