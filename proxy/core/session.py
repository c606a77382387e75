"""One client connection's protocol logic, sans-I/O: a chain of stages around each exchange.

The Trio shell (proxy/net/connection.py) feeds the session each request frame and each upstream
response frame and does what it says. Each request is parsed once into an `Exchange` and passed along
the stages in order:

    KIP-1313 -> authentication gate -> versions/ApiVersions -> VC binding -> authorization
             -> management RPCs -> tenancy -> broker endpoints

Each stage may pass it on, answer it, close the connection, forward it at once, or ask for slow work
first (password checks). A forward may carry the proxy's own requests to send first (`before`: a relayed
login's SaslHandshake); they queue in `in_flight` like any other, and their answers stop here. A
forwarded request is sent as the same bytes (a memoryview into the receive buffer) unless a stage
rewrote it. Responses are matched to their request by order and correlation id
(Kafka answers in order per connection) and pass back through the stages the request passed, in
reverse order. Each message is decoded at most once: a request's body on the exchange (`Exchange.received`,
on first use), encoded once here if a stage edited it (`edit_request`); a response's in `ResponseMessage`,
whose stages' splice edits are made in one pass over the frame (or, once it is decoded anyway, on the
entity) and encoded once (tests/unit/test_decode_count.py counts them).
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from ..catalogue import ApiSpec, catalogue
from ..errors import ProtocolViolation
from ..protocol import codec, kip1313
from ..protocol.apikey import ApiKey, retired_reason
from ..protocol.apis import ApiInfo, known_apis
from ..protocol.codec import CodecError
from ..protocol.framing import with_body
from ..protocol.headers import parse_request_header, response_correlation_id
from ..protocol.primitives import INT16, MALFORMED, read_int16, read_uvarint
from . import apiversions
from .endpoints import EndpointRewriter, ListenerLayout
from .exchange import (
    Action,
    Exchange,
    PasswordCheck,
    Pending,
    RequestDecision,
    ResponseMessage,
    ResponseResult,
    close,
)
from .stages.authenticate import (
    AuthenticationStage,
    Authenticator,
    SaslReply,
)
from .stages.authorize import AuthorizationStage
from .stages.binding import BindingStage, Tenancy
from .stages.context import ConnectionState
from .stages.endpoints import EndpointStage
from .stages.identify import IdentifyStage
from .stages.management import Caller, ManagementStage
from .stages.quotas import QuotaStage
from .stages.tenancy import TenancyStage
from .stages.users import UsersStage
from .stages.versions import VersionStage

__all__ = [
    "Action",
    "Authenticator",
    "Exchange",
    "PasswordCheck",
    "Pending",
    "ProtocolViolation",
    "ProxySession",
    "RequestDecision",
    "ResponseResult",
    "SaslReply",
    "Tenancy",
]

log = logging.getLogger(__name__)


class ProxySession:
    def __init__(
        self,
        layout: ListenerLayout,
        authenticator: Authenticator | None = None,
        tenancy: Tenancy | None = None,
        principal: str | None = None,
        header_v3: bool = True,
        upstream_versions: apiversions.UpstreamVersions | None = None,
        super_admins: Iterable[str] = (),
        host: str = "*",
        allow_if_no_acl: Callable[[str], bool] = lambda vc: True,
        cluster_operator: Callable[[str | None], bool] | None = None,
        broker: Hashable | None = None,
        listings: Any = None,
        upstream_user: str | None = None,
        relays_unknown: bool = False,
    ):
        self.authenticator = authenticator
        self.tenancy = tenancy
        self.header_v3 = header_v3
        if authenticator is not None and authenticator.complete:  # mTLS: known from the handshake
            principal = authenticator.principal
        self.ctx = ctx = ConnectionState(principal=principal, authenticator=authenticator)
        ctx.broker = broker  # the upstream broker's node id; a bootstrap connection's is set once it is connected
        ctx.image = tenancy.image if tenancy is not None else None
        # Until the client asks ApiVersions, versions are bounded by what the proxy can parse.
        ctx.supported = apiversions.tenant_versions() if tenancy is not None else apiversions.proxy_versions()
        ctx.versions = dict(ctx.supported)
        self.in_flight: deque[Exchange] = deque()

        self.identify = IdentifyStage(ctx, header_v3)
        self.auth = AuthenticationStage(
            ctx,
            authenticator,
            self._may_log_in if tenancy is not None else None,
            self._may_relay if tenancy is not None else None,
        )
        self.binding: BindingStage | None = None
        self.quota: QuotaStage | None = None  # a VC connection's (the forwarder asks it whether anything is metered)
        self.stages: list[Any] = [self.identify, self.auth]
        authorize: AuthorizationStage | None = None
        if tenancy is not None:
            caller = Caller(ctx, frozenset(super_admins), lambda: tenancy.image, host)
            authorize = AuthorizationStage(ctx, caller, lambda: tenancy.image, allow_if_no_acl, host)
        self.versions = VersionStage(
            ctx, self.auth, header_v3, upstream_versions, authorize.advertised if authorize is not None else None
        )
        self.stages.append(self.versions)
        if tenancy is not None:
            assert authorize is not None
            tenant = TenancyStage(ctx, tenancy)
            self.binding = BindingStage(ctx, tenancy, tenant.engine_for, frozenset(super_admins))
            # `listings`: the broker's groups and transactional ids, for Describe/DeleteVirtualClusters.
            manage = ManagementStage(authorize.caller, lambda: tenancy.image, listings)
            # Quotas and their RPCs; `cluster_operator` (principal -> holds the right on kafka-cluster) decides
            # who writes VC caps, the VC default and the global levels (default: the super admins).
            quota = self.quota = QuotaStage(ctx, frozenset(super_admins), lambda: tenancy.image, cluster_operator)
            # The proxy's users (SCRAM credential RPCs).
            users = UsersStage(ctx, authorize.caller, upstream_user, relays_unknown)
            self.stages += [self.binding, authorize, users, quota, manage, tenant]
        self.endpoints = EndpointStage(EndpointRewriter(layout))
        self.stages.append(self.endpoints)
        # The stages with a response side, by position: answers pass back only through those a request passed.
        self._responders = [(i, s) for i, s in enumerate(self.stages) if hasattr(s, "on_response")]

    # -- what the shell and telemetry read --------------------------------------------------------

    @property
    def principal(self) -> str | None:
        return self.ctx.principal

    @property
    def vc(self) -> Any:
        return self.ctx.vc

    @property
    def engine(self) -> Any:
        return self.ctx.engine

    @property
    def client_id(self) -> str | None:
        return self.ctx.client_id

    @property
    def client_instance_id(self) -> str:
        return self.ctx.client_instance_id

    @property
    def client_instance_id_source(self) -> str:
        return self.ctx.client_instance_id_source

    @property
    def broker(self) -> Hashable | None:
        return self.ctx.broker

    def upstream_broker(self, broker: Hashable) -> None:
        """The shell says which broker the connection reached (a bootstrap connection learns it on connecting)."""
        self.ctx.broker = broker

    def stale_binding(self) -> str | None:
        """Why this connection's VC binding no longer holds (checked by the shell when the image changes)."""
        return self.binding.stale() if self.binding is not None else None

    def _may_log_in(self, principal: str | None, client_id: str | None) -> bool:
        """Everyone is somewhere: a principal in no VC (nor in kafka-cluster) is refused at login."""
        assert self.binding is not None
        return self.binding.rights().placement(principal, client_id) is not None

    def _may_relay(self, principal: str) -> bool:
        """A name the proxy places (a VC's member, a super-admin, a holder of rights) is never relayed. The
        `User:` of a principal the proxy names is taken in any case: only the name after it is compared."""
        assert self.binding is not None
        rights = self.binding.rights()
        if rights.claims(principal):
            return False
        kind, _, name = principal.partition(":")
        if kind != "User":
            return True
        if name in rights.image.named_user_names():  # bound, an admin, or in a cluster ACL
            return False
        supers = (p.partition(":") for p in rights.super_admins)
        return not any(kind.lower() == "user" and named == name for kind, _, named in supers)

    def forwarded_answer(
        self, api_key: int, version: int, frame: bytes, note: tuple[int, int] | None = None
    ) -> ResponseResult:
        """An answer the forwarder passed back (KIP-951 leader hints in a tagged field; a VC's answer with a
        message, a topic id it may not pass or a fetch session that changed, `note` being the session and epoch
        its request named): taken through the stages' response sides like any other. Its charge may mute the
        connection (a consumer's byte rate): `muted` then says the forwarder must give it back now, so the next request
        waits for the mute, as it would have on the Python path."""
        if self.in_flight:
            raise ProtocolViolation("internal: the forwarder passed back an answer while the session has requests")
        if len(frame) < 8:
            raise ProtocolViolation("broker answered correlation id None")
        self.adopt([(response_correlation_id(frame), api_key, version, note)])
        result = self.on_response(memoryview(frame))
        result.muted = self.quota is not None and self.quota.metered() is None
        return result

    def adopt(self, outstanding: Iterable[tuple[int, int, int, tuple[int, int] | None]]) -> list[Exchange]:
        """Requests the forwarder sent whose answers it did not read, as (correlation id, api key, version, a Fetch's
        session and epoch): they are plain (every stage passed them on unchanged), so they are taken as if they had
        passed every stage, and their answers go back through the stages' response sides like any other."""
        adopted = []
        for correlation_id, api_key, version, note in outstanding:
            known = _VERSIONS.get((api_key << 16) | (version & 0xFFFF)) or _version(api_key, version)
            if known is None:
                raise ProtocolViolation(f"internal: the forwarder sent api {api_key}, which the session does not know")
            ex = Exchange(
                api_key, version, correlation_id, known.response_header_version, info=known.info, spec=known.spec
            )
            self.endpoints.on_request(ex)  # keeps the answer's endpoint rule
            if (engine := self.ctx.engine) is not None and not self.ctx.relayed:
                ex.vc = self.ctx.vc
                ex.tenant = engine.forwarded(api_key, version)  # the answer's names and messages, translated
                if note is not None and note[0] != 0:  # a session the VC owns (the forwarder served no other)
                    ex.tenant.state["fetch_session"] = note
            ex.depth = len(self.stages) - 1
            self.in_flight.append(ex)
            adopted.append(ex)
        return adopted

    # -- requests ---------------------------------------------------------------------------------

    def on_request(self, frame: memoryview) -> RequestDecision:
        ex = self._parse(frame)
        if isinstance(ex, RequestDecision):
            return ex
        decision: RequestDecision | None = None
        depth = 0
        for depth, stage in enumerate(self.stages):  # noqa: B007 (depth is used after the loop)
            decision = stage.on_request(ex)
            if decision is not None:
                break
        ex.depth = depth
        return self._settle(ex, decision, frame)

    def _parse(self, frame: memoryview) -> Exchange | RequestDecision:
        """The one parse of a request: its header (of the version the proxy can read)."""
        if len(frame) < 12:
            raise ProtocolViolation("request shorter than its fixed header")
        api_key, version, correlation_id = _FIXED.unpack_from(frame, 4)
        known = _VERSIONS.get((api_key << 16) | (version & 0xFFFF)) or _version(api_key, version)
        if known is None:
            return close(retired_reason(api_key) or f"unknown API key {api_key}")
        info = known.info
        if self.header_v3 and known.header_v3:
            rhv = known.max_response_header_version
            ex = Exchange(api_key, version, correlation_id, rhv, info=info, spec=known.spec, frame=frame)
            ex.client_version, ex.api_version = version, info.max_version  # parsed by the KIP-1313 stage
        else:
            rhv = known.response_header_version
            ex = Exchange(api_key, version, correlation_id, rhv, info=info, spec=known.spec, frame=frame)
            if known.request_header_version >= 0:
                try:
                    ex.header = parse_request_header(frame, known.request_header_version)
                except MALFORMED as exc:
                    raise ProtocolViolation(f"malformed {info.name} request header: {exc}") from exc
        return ex

    def _settle(self, ex: Exchange, decision: RequestDecision | None, received: memoryview) -> RequestDecision:
        if decision is None:  # through every stage: forward
            decision = RequestDecision(Action.FORWARD, ex)
        decision.delay = max(decision.delay, ex.delay)  # a stage that passed it on may still hold it back
        action = decision.action
        if action is Action.CHECK:
            resume = decision.resume
            assert resume is not None
            decision.resume = lambda ok: self._settle(ex, resume(ok), received)
            return decision
        if action is Action.CLOSE:
            return decision
        if ex.quota_taken is not None and action is not Action.FORWARD and self.quota is not None:
            self.quota.unused(ex)  # a Fetch a later stage answered or refused: nothing came of its charge
        if action is Action.LOCAL:
            self.identify.on_local(ex)
            self.in_flight.append(ex)
            return decision
        if ex.frame is not received:  # KIP-1313: the proxy sends the version before
            decision.frame = ex.frame
        if ex.edited is not None:  # a stage changed the decoded request: encoded once, here
            assert ex.pieces is None and ex.header is not None and ex.frame is not None and ex.info is not None
            try:
                ex.pieces = with_body(ex.frame, ex.header.body_offset, codec.encode(ex.edited))
            except CodecError as exc:  # e.g. a name made too long to send
                return close(f"cannot forward {ex.info.name} v{ex.api_version}: {exc}")
        if decision.pieces is None and ex.pieces is not None:
            decision.pieces = ex.pieces
        if ex.api_key == ApiKey.PRODUCE and _produce_acks(ex) == 0:
            decision.pending = None  # no answer will come
            return decision
        decision.pending = ex
        if decision.before:  # the proxy's own requests go first (a relayed login's SaslHandshake)
            self.in_flight.extend(decision.before)
        self.in_flight.append(ex)
        return decision

    # -- responses --------------------------------------------------------------------------------

    def next_local_reply(self) -> Exchange | None:
        """If the oldest outstanding request was answered locally, it (dequeued); its `reply` is the frame."""
        if self.in_flight and self.in_flight[0].reply is not None:
            return self.in_flight.popleft()
        return None

    def on_response(self, frame: memoryview) -> ResponseResult:
        if not self.in_flight:
            raise ProtocolViolation("response from the broker with no request outstanding")
        ex = self.in_flight.popleft()
        if ex.reply is not None:
            raise ProtocolViolation("internal: local reply not sent before an upstream response")
        if len(frame) < 8 or response_correlation_id(frame) != ex.correlation_id:
            raise ProtocolViolation(
                f"broker answered correlation id {response_correlation_id(frame) if len(frame) >= 8 else None}, "
                f"expected {ex.correlation_id}"
            )
        if ex.internal is not None:  # the proxy's own request: its answer stops here
            return ResponseResult([], close=ex.internal(frame))
        try:
            msg = ResponseMessage(ex, frame)
            for depth, stage in reversed(self._responders):
                if depth <= ex.depth:
                    stage.on_response(ex, msg)
            pieces = msg.materialize()
        except (CodecError, KeyError, *MALFORMED) as exc:
            raise ProtocolViolation(f"cannot rewrite response to api {ex.api_key} v{ex.api_version}: {exc}") from exc
        return ResponseResult(pieces, msg.brokers, msg.full_broker_list, msg.writes, ex)


@dataclass(frozen=True, slots=True)
class _Version:
    """What the parse needs of one version of an API, made once per process rather than per request."""

    info: ApiInfo
    spec: ApiSpec
    response_header_version: int
    request_header_version: int  # -1: a version the proxy cannot parse (its header is not read)
    header_v3: bool  # KIP-1313: the version after the newest, which the proxy reads as header v3
    max_response_header_version: int  # of the newest version (what a header-v3 request is answered with)


# (api_key << 16 | version as uint16) -> its _Version: only versions a client may send, so a hostile one's
# other numbers cost the slow path, never memory.
_VERSIONS: dict[int, _Version] = {}
_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id: at fixed offsets in every header version


def _version(api_key: int, version: int) -> _Version | None:
    info = known_apis().get(api_key)
    spec = catalogue().get(api_key)
    if info is None or spec is None:
        return None
    readable = info.min_version <= version <= info.max_version
    known = _Version(
        info,
        spec,
        info.response_header_version(version),
        info.request_header_version(version) if readable else -1,
        kip1313.uses_header_v3(info, version),
        info.response_header_version(info.max_version),
    )
    if readable or known.header_v3:
        _VERSIONS[(api_key << 16) | (version & 0xFFFF)] = known
    return known


def _produce_acks(ex: Exchange) -> int:
    """Produce requests open with transactional_id then acks (v3+)."""
    info, header, frame = ex.info, ex.header, ex.frame
    assert info is not None and header is not None and frame is not None
    try:
        offset = header.body_offset
        if info.first_flexible is not None and ex.api_version >= info.first_flexible:
            length, offset = read_uvarint(frame, offset)
            offset += max(length - 1, 0)
        else:
            length, offset = read_int16(frame, offset)
            offset += max(length, 0)
        return INT16.unpack_from(frame, offset)[0]
    except MALFORMED as exc:
        raise ProtocolViolation(f"malformed Produce request: {exc}") from exc
