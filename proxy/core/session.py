"""One client connection's protocol logic, sans-I/O.

The Trio shell feeds it each request frame and each upstream response frame and does what it
says. Requests are forwarded as the same bytes (a memoryview into the receive buffer) unless a
rule says otherwise; responses are matched to their request by order and correlation id (Kafka
answers in order per connection) and rewritten where the rules require.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ..protocol import codec, kip1313
from ..protocol.apis import ApiInfo, api_info, known_apis, response_type
from ..protocol.codec import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, UNSUPPORTED_VERSION, CodecError
from ..protocol.headers import (
    API_VERSIONS_KEY,
    RequestHeader,
    parse_request_header,
    peek_request,
    response_body_offset,
    response_correlation_id,
)
from ..protocol.primitives import INT16, MALFORMED, TruncatedError, read_int16, read_uvarint
from ..rules import EndpointRule, api_rules
from ..tenancy import guard as state_guard
from . import apiversions
from .admission import SLOW_DOWN
from .endpoints import BrokerEndpoint, EndpointRewriter, ListenerLayout, rules_for

log = logging.getLogger(__name__)

PRODUCE_KEY = 0
TELEMETRY_KEYS = (kip1313.GET_TELEMETRY_SUBSCRIPTIONS_KEY, kip1313.PUSH_TELEMETRY_KEY)
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36


@dataclass(slots=True)
class PasswordCheck:
    """Work too slow for the event loop (a PLAIN key derivation): the shell runs `run` in a worker thread,
    then `finish` with its result on the loop, which gives the reply."""

    run: Callable[[], bool]
    finish: Callable[[bool], SaslReply]


@dataclass(slots=True)
class SaslReply:
    body: bytes  # the response body (header added by the session)
    close: bool = False  # failed authentication: close the connection once this is sent
    check: PasswordCheck | None = None  # the reply is not known yet: run this first
    slow: bool = False  # a failure from an address whose failure budget is spent: answer it slowly


class Authenticator(Protocol):
    """SASL terminated at the proxy (implemented in proxy/auth). Sans-I/O, one per connection."""

    principal: str | None  # e.g. "User:alice" once authenticated

    @property
    def complete(self) -> bool: ...

    def on_sasl_request(self, api_key: int, version: int, frame: memoryview, header: RequestHeader) -> SaslReply: ...


class ProtocolViolation(Exception):
    """The client or the broker broke the protocol: close this one connection."""


class Action(enum.Enum):
    FORWARD = "forward"  # send the frame upstream; a response will follow unless expects_response is False
    LOCAL = "local"  # answer with `reply` in the response stream, in request order
    CLOSE = "close"  # close the connection (what a broker does with a request it cannot parse)
    CHECK = "check"  # run `check.run` off the event loop, then `resume(result)` gives the real decision


@dataclass(slots=True)
class Pending:
    """What the proxy remembers about a request until its response passes."""

    api_key: int
    api_version: int
    correlation_id: int
    response_header_version: int
    endpoint_rule: EndpointRule | None = None
    reply: bytes | None = None  # set for LOCAL answers
    close_after: bool = False  # close the connection once the reply is written
    delay_factor: int = 1  # failed logins: times the failed-authentication delay before the reply
    exchange: Any = None  # the tenant engine's state for this request (virtual-cluster principals)
    writes: list[Any] = field(default_factory=list)  # state records to write durably before replying
    client_version: int = -1  # the client's version when the proxy sent the one before (KIP-1313)

    @property
    def version_seen_by_client(self) -> int:
        return self.client_version if self.client_version >= 0 else self.api_version


@dataclass(slots=True)
class RequestDecision:
    action: Action
    pending: Pending | None = None  # None: no response will come (acks=0 Produce) or CLOSE
    reason: str = ""
    pieces: list[bytes | memoryview] | None = None  # rewritten request to forward (None: the frame as is)
    frame: bytes | memoryview | None = None  # the request in the version sent upstream, if the proxy changed it
    check: PasswordCheck | None = None  # CHECK: the slow work
    resume: Callable[[bool], RequestDecision] | None = None  # CHECK: the decision once the work is done


@dataclass(slots=True)
class ResponseResult:
    pieces: list[bytes | memoryview]  # the frame to send, size prefix first
    brokers: list[BrokerEndpoint] = field(default_factory=list)  # upstream endpoints seen
    full_broker_list: bool = False  # True for Metadata: `brokers` is the whole cluster
    writes: list[Any] = field(default_factory=list)  # state records to write durably before replying


class Tenancy(Protocol):
    """What a session needs of the virtual-cluster layer (proxy/state/service.py provides it)."""

    image: Any  # proxy.tenancy.model.TenancyImage
    policy: Any  # proxy.tenancy.engine.Policy
    refuse_unbound: bool


class ProxySession:
    def __init__(
        self,
        layout: ListenerLayout,
        authenticator: Authenticator | None = None,
        tenancy: Tenancy | None = None,
        principal: str | None = None,
        header_v3: bool = True,
        upstream_versions: apiversions.UpstreamVersions | None = None,
    ):
        self.rewriter = EndpointRewriter(layout)
        self.upstream_versions = upstream_versions  # the broker's ApiVersions answers, for clients not logged in
        self._too_new_reply: bytes | None = None  # the body for ApiVersions versions above ours, built once
        self.header_v3 = header_v3  # KIP-1313 versions advertised and translated
        self.authenticator = authenticator
        self.tenancy = tenancy
        self._principal = principal  # for listeners without SASL (PLAINTEXT: User:ANONYMOUS, mTLS: mapped)
        self.vc: Any = None  # the principal's virtual cluster, resolved at its first request
        self.engine: Any = None
        self._resolved = False
        # Until the client asks ApiVersions, versions are bounded by what the proxy can parse.
        self.supported = apiversions.tenant_versions() if tenancy is not None else apiversions.proxy_versions()
        self.versions = dict(self.supported)
        self.in_flight: deque[Pending] = deque()
        # KIP-1313: the first request's client id stands for the connection (v3 requests may omit it).
        self.client_id: str | None = None
        self._first_request = True
        self.header_instance_id: bytes | None = None  # set by the first request with header v3
        self._v3_keys: set[int] | None = None  # APIs whose header-v3 version ApiVersions offered
        # The client instance: the client's own id from request header v3, else the one its KIP-714
        # telemetry requests carry (or the broker assigned), else one the proxy gives the connection.
        self.client_instance_id = str(uuid.uuid4())
        self.client_instance_id_source = "proxy"

    @property
    def principal(self) -> str | None:
        if self.authenticator is not None and self.authenticator.complete:
            return self.authenticator.principal
        return self._principal

    def _resolve_tenant(self, frame: memoryview, info: ApiInfo, version: int) -> RequestDecision | None:
        """Bind the connection to its principal's VC (KIP-1134: by principal, else by client id)."""
        self._resolved = True
        if self.tenancy is None:
            return None
        client_id = self._header(frame, info, version).client_id
        self.vc = self.tenancy.image.vc_for(self.principal, client_id)
        if self.vc is None:
            if self.tenancy.refuse_unbound:
                why = f"{self.principal} (client id {client_id!r}) is bound to no virtual cluster"
                return RequestDecision(Action.CLOSE, reason=why)
            return None
        from ..tenancy.engine import TenantEngine

        self.engine = TenantEngine(self.vc, self.tenancy.image, self.tenancy.policy, self)
        log.info(
            "%s (client id %r) is in virtual cluster %s (cluster id %s)",
            self.principal,
            client_id,
            self.vc.name,
            self.vc.cluster_id,
        )
        return None

    # -- requests -------------------------------------------------------------------------------

    def on_request(self, frame: memoryview) -> RequestDecision:
        try:
            api_key, version, correlation_id = peek_request(frame)
        except ValueError as exc:
            raise ProtocolViolation(str(exc)) from exc
        info = api_info(api_key)
        rule = api_rules().get(api_key)
        if info is None or rule is None:
            return RequestDecision(Action.CLOSE, reason=f"unknown API key {api_key}")
        if not (self.header_v3 and kip1313.uses_header_v3(info, version)):
            if info.min_version <= version <= info.max_version:
                if self._first_request:
                    self._first_request = False
                    self.client_id = self._header(frame, info, version).client_id
                if self.header_instance_id is not None and self._offers_header_v3(info):
                    why = f"{info.name} v{version} without the ClientInstanceId this connection started with"
                    return self._refuse(info, version, correlation_id, INVALID_REQUEST, why)
            decision = self._dispatch(frame, info, version, correlation_id)
            if api_key in TELEMETRY_KEYS and version == 0 and decision.pending is not None:
                self._learn_from_telemetry(frame)
            return decision
        # KIP-1313 request header v3: check the instance id, then send the version before with header v1/v2.
        try:
            header = kip1313.parse_header_v3(frame)
        except MALFORMED as exc:
            raise ProtocolViolation(f"malformed {info.name} v{version} request (header v3): {exc}") from exc
        if self._first_request:
            self._first_request = False
            self.client_id = header.client_id
        wire_version = info.max_version
        problem = self._check_instance_id(header.instance_id)
        if problem is not None:
            decision = self._refuse(info, wire_version, correlation_id, INVALID_REQUEST, f"{info.name}: {problem}")
            return self._for_client_version(decision, info, version, None)
        client_id = header.client_id if header.client_id is not None else self.client_id
        try:
            frame = kip1313.downgrade(frame, info, header, client_id)
        except MALFORMED as exc:  # a body the proxy converts (OffsetDelete v1) that does not parse
            raise ProtocolViolation(f"malformed {info.name} v{version} request: {exc}") from exc
        return self._for_client_version(self._dispatch(frame, info, wire_version, correlation_id), info, version, frame)

    def _offers_header_v3(self, info: ApiInfo) -> bool:
        """Whether this connection was offered a header-v3 version of the API (the KIP's rule that
        later requests carry the id can only hold there; SaslHandshake never has one)."""
        if self._v3_keys is not None:
            return info.key in self._v3_keys
        return kip1313.header_v3_version(info) is not None

    def _check_instance_id(self, instance_id: bytes) -> str | None:
        if instance_id == kip1313.ZERO:
            return "request header v3 with a zero ClientInstanceId"
        if self.header_instance_id is None:
            self.header_instance_id = instance_id
            self.client_instance_id = str(uuid.UUID(bytes=instance_id))
            self.client_instance_id_source = "header"
            return None
        if instance_id != self.header_instance_id:
            theirs = uuid.UUID(bytes=instance_id)
            return f"ClientInstanceId {theirs} differs from this connection's {self.client_instance_id}"
        return None

    def _for_client_version(
        self, decision: RequestDecision, info: ApiInfo, version: int, frame: bytes | memoryview | None
    ) -> RequestDecision:
        """A decision about the translated request, made to answer in the client's (header v3) version."""
        decision.frame = frame
        if decision.action is Action.FORWARD and decision.pieces is None:
            assert frame is not None
            decision.pieces = [frame]
        pending = decision.pending
        if pending is not None:
            pending.client_version = version
            if pending.reply is not None and info.key in kip1313.CONVERTED_RESPONSES:
                pending.reply = kip1313.upgrade_response(info.key, pending.reply)
        return decision

    def _learn_from_telemetry(self, frame: memoryview | bytes) -> None:
        """KIP-714 v0 requests carry the client instance id in their body (zero on the very first)."""
        if self.client_instance_id_source == "header":
            return
        try:
            offset = parse_request_header(frame, 2).body_offset
        except MALFORMED:
            return
        self._learn_instance_id(bytes(frame[offset : offset + 16]))

    def _learn_instance_id(self, raw: bytes) -> None:
        if len(raw) == 16 and raw != kip1313.ZERO and self.client_instance_id_source != "header":
            self.client_instance_id = str(uuid.UUID(bytes=raw))
            self.client_instance_id_source = "telemetry"

    def _header(self, frame: memoryview | bytes, info: ApiInfo, version: int) -> RequestHeader:
        try:
            return parse_request_header(frame, info.request_header_version(version))
        except MALFORMED as exc:
            raise ProtocolViolation(f"malformed {info.name} request header: {exc}") from exc

    def _dispatch(self, frame: memoryview, info: ApiInfo, version: int, correlation_id: int) -> RequestDecision:
        api_key = info.key
        rule = api_rules()[api_key]
        if api_key == API_VERSIONS_KEY:
            return self._api_versions_request(info, version, correlation_id)
        if self.authenticator is not None:
            if api_key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
                return self._sasl(info, version, correlation_id, frame)
            if not self.authenticator.complete:
                # What a broker does too: anything but ApiVersions/SASL before login ends the connection.
                return RequestDecision(Action.CLOSE, reason=f"{rule.name} before authentication")
        if rule.physical == "reject":
            return self._refuse(info, version, correlation_id, CLUSTER_AUTHORIZATION_FAILED, f"{rule.name} is internal")
        low, high = self.versions.get(api_key, (0, -1))
        if not low <= version <= high:
            return self._refuse(info, version, correlation_id, UNSUPPORTED_VERSION, f"{rule.name} v{version}")
        if not self._resolved and (refusal := self._resolve_tenant(frame, info, version)) is not None:
            return refusal
        if self.engine is not None:
            return self._tenant_request(info, version, correlation_id, frame)
        # The state topic, guarded from principals in no VC (proxy/tenancy/guard.py).
        guarded = state_guard.guard_request(self, frame, info, version, correlation_id) if self.tenancy else None
        if guarded is not None:
            return guarded
        rule = rules_for(api_key, version)
        if rule is not None and rule.mode == "keep":
            rule = None
        pending = Pending(api_key, version, correlation_id, info.response_header_version(version), rule)
        if api_key == PRODUCE_KEY and _produce_acks(frame, info, version) == 0:
            return RequestDecision(Action.FORWARD, None)
        self.in_flight.append(pending)
        return RequestDecision(Action.FORWARD, pending)

    def _tenant_request(self, info: ApiInfo, version: int, correlation_id: int, frame: memoryview) -> RequestDecision:
        from ..tenancy.engine import tenant_rules
        from ..tenancy.model import TenancyError

        trule = tenant_rules().get(info.key)
        if trule is None or trule.action == "deny":
            error = trule.error if trule is not None else CLUSTER_AUTHORIZATION_FAILED
            return self._refuse(info, version, correlation_id, error, f"{info.name} in virtual cluster {self.vc.name}")
        header = self._header(frame, info, version)
        try:
            exchange, out = self.engine.request(info.key, version, frame, header.body_offset)
        except (CodecError, TenancyError, KeyError, *MALFORMED) as exc:
            return RequestDecision(Action.CLOSE, reason=f"cannot translate {info.name} v{version}: {exc}")
        endpoint_rule = rules_for(info.key, version)
        if endpoint_rule is not None and endpoint_rule.mode == "keep":
            endpoint_rule = None
        pending = Pending(
            info.key, version, correlation_id, info.response_header_version(version), endpoint_rule, exchange=exchange
        )
        if not isinstance(out, list):  # answered by the proxy (already in the client's terms)
            try:
                body = codec.encode(out)
            except CodecError as exc:  # e.g. a message quoting the client's 32,767-byte name: too long to send
                return RequestDecision(Action.CLOSE, reason=f"cannot answer {info.name} v{version}: {exc}")
            decision = self._local(pending, body)
            pending.writes = list(exchange.writes)
            return decision
        if info.key == PRODUCE_KEY and _produce_acks(frame, info, version) == 0:
            return RequestDecision(Action.FORWARD, None, pieces=out)
        self.in_flight.append(pending)
        return RequestDecision(Action.FORWARD, pending, pieces=out)

    def _tenant_response(self, pending: Pending, frame: memoryview) -> ResponseResult:
        offset = response_body_offset(frame, pending.response_header_version)
        rule = pending.endpoint_rule
        seen: list[BrokerEndpoint] = []
        if rule is not None and rule.mode == "splice":
            pieces, seen = self.rewriter.rewrite_body(rule, pending.api_key, pending.api_version, frame, offset)
            if len(pieces) > 1:  # rare (leader changes): join so the tenant pass sees one frame
                frame = memoryview(b"".join(bytes(p) for p in pieces))
            rule = None
        exchange = pending.exchange
        post = (lambda body: self.rewriter.rewrite_entity(rule, body, seen)) if rule is not None else None
        pieces = (self.engine or exchange).response(exchange, frame, offset, post)  # no engine: a guard's listing
        return ResponseResult(pieces, seen, full_broker_list=pending.api_key == 3, writes=list(exchange.writes))

    def _sasl(self, info: ApiInfo, version: int, correlation_id: int, frame: memoryview) -> RequestDecision:
        assert self.authenticator is not None
        if not info.min_version <= version <= info.max_version:
            return RequestDecision(Action.CLOSE, reason=f"SASL API {info.name} v{version} cannot be parsed")
        try:
            header = parse_request_header(frame, info.request_header_version(version))
        except (TruncatedError, ValueError) as exc:
            raise ProtocolViolation(f"malformed {info.name} request: {exc}") from exc
        reply = self.authenticator.on_sasl_request(info.key, version, frame, header)
        check = reply.check
        if check is not None:
            return RequestDecision(
                Action.CHECK,
                check=check,
                resume=lambda ok: self._sasl_reply(info, version, correlation_id, header, check.finish(ok)),
            )
        return self._sasl_reply(info, version, correlation_id, header, reply)

    def _sasl_reply(
        self, info: ApiInfo, version: int, correlation_id: int, header: RequestHeader, reply: SaslReply
    ) -> RequestDecision:
        assert self.authenticator is not None
        if (
            self.authenticator.complete
            and self.tenancy is not None
            and self.tenancy.refuse_unbound
            and self.tenancy.image.vc_for(self.authenticator.principal, header.client_id) is None
        ):
            # Refused at login, so the client reports an authentication error instead of retrying forever.
            reply = SaslReply(
                codec.encode(
                    codec._empty(
                        response_type(info.key, version),
                        error_code=ErrorCode.sasl_authentication_failed,
                        error_message="Authentication failed: this listener serves virtual clusters only",
                    )
                ),
                close=True,
            )
            log.info("refusing %s: bound to no virtual cluster", self.authenticator.principal)
        decision = self._local(
            Pending(info.key, version, correlation_id, info.response_header_version(version)), reply.body
        )
        assert decision.pending is not None
        decision.pending.close_after = reply.close
        decision.pending.delay_factor = SLOW_DOWN if reply.slow else 1
        return decision

    def _api_versions_request(self, info: ApiInfo, version: int, correlation_id: int) -> RequestDecision:
        if not info.min_version <= version <= info.max_version:
            # Too new for us (or negative): answer as a broker would (v0 body), so the client retries lower.
            # Like a broker, name only ApiVersions' own range: enough to retry, nothing more before login.
            if self._too_new_reply is None:
                advertised = kip1313.advertised(self.supported, known_apis()) if self.header_v3 else self.supported
                table = {API_VERSIONS_KEY: advertised[API_VERSIONS_KEY]}
                self._too_new_reply = apiversions.unsupported_version_body(table)
            return self._local(Pending(API_VERSIONS_KEY, version, correlation_id, 0), self._too_new_reply)
        pending = Pending(API_VERSIONS_KEY, version, correlation_id, 0)
        if self.authenticator is not None and not self.authenticator.complete and self.upstream_versions is not None:
            # Before login the broker's answer comes from the cache: no broker connection for a stranger.
            cached = self.upstream_versions.get(version)
            if cached is not None:
                response, built = cached
                key = (id(self.supported), self.header_v3)  # what the answer depends on besides the broker's
                if key not in built:
                    built[key] = (self._api_versions_body(pending, response), self.versions, self._v3_keys)
                body, self.versions, self._v3_keys = built[key]  # shared, never mutated
                return self._local(pending, body)
        self.in_flight.append(pending)
        return RequestDecision(Action.FORWARD, pending)

    def _refuse(self, info: ApiInfo, version: int, correlation_id: int, error: int, why: str) -> RequestDecision:
        if not info.min_version <= version <= info.max_version:
            return RequestDecision(Action.CLOSE, reason=f"{why}: version {version} cannot be parsed")
        body = codec.error_response_body(info.key, version, error)
        if body is None:
            return RequestDecision(Action.CLOSE, reason=f"{why}: refused (no error field to answer with)")
        log.info("refusing request: %s (error %d)", why, error)
        return self._local(Pending(info.key, version, correlation_id, info.response_header_version(version)), body)

    def _local(self, pending: Pending, body: bytes) -> RequestDecision:
        pending.reply = codec.response_frame(pending.correlation_id, pending.response_header_version, body)
        self.in_flight.append(pending)
        return RequestDecision(Action.LOCAL, pending)

    # -- responses ------------------------------------------------------------------------------

    def next_local_reply(self) -> Pending | None:
        """If the oldest outstanding request was answered locally, it (dequeued); its `reply` is the frame."""
        if self.in_flight and self.in_flight[0].reply is not None:
            return self.in_flight.popleft()
        return None

    def on_response(self, frame: memoryview) -> ResponseResult:
        if not self.in_flight:
            raise ProtocolViolation("response from the broker with no request outstanding")
        pending = self.in_flight.popleft()
        if pending.reply is not None:
            raise ProtocolViolation("internal: local reply not sent before an upstream response")
        if len(frame) < 8 or response_correlation_id(frame) != pending.correlation_id:
            raise ProtocolViolation(
                f"broker answered correlation id {response_correlation_id(frame) if len(frame) >= 8 else None}, "
                f"expected {pending.correlation_id}"
            )
        if pending.api_key == kip1313.GET_TELEMETRY_SUBSCRIPTIONS_KEY and pending.api_version == 0:
            self._learn_instance_id(_telemetry_assigned_id(frame))  # the broker's, if the client sent zero
        result = self._response(pending, frame)
        if pending.client_version >= 0 and pending.api_key in kip1313.CONVERTED_RESPONSES:
            try:
                result.pieces = [kip1313.upgrade_response(pending.api_key, b"".join(map(bytes, result.pieces)))]
            except MALFORMED as exc:
                raise ProtocolViolation(f"cannot convert response to api {pending.api_key}: {exc}") from exc
        return result

    def _response(self, pending: Pending, frame: memoryview) -> ResponseResult:
        try:
            if pending.api_key == API_VERSIONS_KEY:
                return ResponseResult(self._api_versions_response(pending, frame))
            if pending.exchange is not None:
                return self._tenant_response(pending, frame)
            rule = pending.endpoint_rule
            if rule is None:
                return ResponseResult([frame])
            offset = response_body_offset(frame, pending.response_header_version)
            pieces, seen = self.rewriter.rewrite_body(rule, pending.api_key, pending.api_version, frame, offset)
        except (CodecError, KeyError, *MALFORMED) as exc:
            raise ProtocolViolation(
                f"cannot rewrite response to api {pending.api_key} v{pending.api_version}: {exc}"
            ) from exc
        return ResponseResult(pieces, seen, full_broker_list=rule.api == "Metadata")

    def _api_versions_response(self, pending: Pending, frame: memoryview) -> list[bytes | memoryview]:
        body_offset = response_body_offset(frame, 0)
        response = apiversions.decode_response(pending.api_version, frame[body_offset:])
        if self.upstream_versions is not None:
            self.upstream_versions.put(pending.api_version, response)
        return [codec.response_frame(pending.correlation_id, 0, self._api_versions_body(pending, response))]

    def _api_versions_body(self, pending: Pending, response: Any) -> bytes:
        """The broker's ApiVersions answer cut down to what this proxy and session can handle."""
        upstream = apiversions.table_of(response)
        self.versions = apiversions.intersect(upstream, self.supported)
        advertised = kip1313.advertised(self.versions, known_apis(), upstream) if self.header_v3 else self.versions
        self._v3_keys = {k for k, (_, high) in advertised.items() if high > self.versions[k][1]}
        if int(response.error_code) == UNSUPPORTED_VERSION:
            pending.api_version = 0
        return codec.encode(apiversions.with_table(response, advertised))


def _telemetry_assigned_id(frame: memoryview | bytes) -> bytes:
    """GetTelemetrySubscriptions v0 response: header v1, throttle, error, then ClientInstanceId."""
    try:
        offset = response_body_offset(frame, 1) + 6
    except MALFORMED:
        return b""
    return bytes(frame[offset : offset + 16])


def _produce_acks(frame: memoryview, info: ApiInfo, version: int) -> int:
    """Produce requests open with transactional_id then acks (v3+)."""
    from ..protocol.headers import parse_request_header

    try:
        header = parse_request_header(frame, info.request_header_version(version))
        offset = header.body_offset
        if info.first_flexible is not None and version >= info.first_flexible:
            length, offset = read_uvarint(frame, offset)
            offset += max(length - 1, 0)
        else:
            length, offset = read_int16(frame, offset)
            offset += max(length, 0)
        return INT16.unpack_from(frame, offset)[0]
    except MALFORMED as exc:
        raise ProtocolViolation(f"malformed Produce request: {exc}") from exc
