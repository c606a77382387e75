"""One request and its response as they pass the stages of a session (sans-I/O).

The session parses each request frame once into an `Exchange`; the stages (proxy/core/stages/) read
and annotate it on the way in and see it again, with the answer, on the way out. It lives until the
answer has left, so telemetry reads what it needs from it instead of from the session.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..auth.replies import PasswordCheck
from ..catalogue import ApiSpec, catalogue
from ..protocol import codec, splice
from ..protocol.apis import ApiInfo, request_type, response_type
from ..protocol.framing import join, with_body
from ..protocol.headers import RequestHeader, response_body_offset
from ..rules import EndpointRule


class Action(enum.Enum):
    FORWARD = "forward"  # send the request upstream; a response follows unless `pending` is None (acks=0)
    LOCAL = "local"  # answer with the exchange's `reply`, in request order
    CLOSE = "close"  # close the connection (what a broker does with a request it cannot parse)
    CHECK = "check"  # run `check.run` off the event loop (or await `work`), then `resume(result)` decides


@dataclass(slots=True, eq=False)
class Exchange:
    """One request until its response leaves."""

    api_key: int
    api_version: int  # the version sent upstream (KIP-1313: the version before the client's)
    correlation_id: int
    response_header_version: int
    info: ApiInfo | None = None
    spec: ApiSpec | None = None  # what the proxy knows about the API (proxy/catalogue.py); set when made
    frame: bytes | memoryview | None = None  # the request as it goes upstream
    header: RequestHeader | None = None  # the header of `frame`, parsed once
    client_version: int = -1  # the client's version when it differs (KIP-1313 header v3), else -1
    principal: str | None = None
    vc: Any = None  # the connection's virtual cluster when the request passed the binding stage
    pieces: list[bytes | memoryview] | None = None  # a rewritten request to forward instead of `frame`
    endpoint_rule: EndpointRule | None = None
    access: Any = None  # the authorization stage's Access (proxy/acl/access.py) when the VC has ACLs to check
    tenant: Any = None  # the tenancy stage's state (a TenantCall, or a state-topic listing filter)
    reply: bytes | None = None  # a local answer (the whole frame)
    close_after: bool = False  # close the connection once the reply is written
    delay_factor: int = 1  # failed logins: times the failed-authentication delay before the reply
    delay: float = 0.0  # seconds a stage holds the request back before it is acted on (quotas)
    quota_taken: Any = None  # a Fetch's charge before it went (the quota stage's): (its limits, the bytes taken)
    writes: list[Any] = field(default_factory=list)  # state records to write durably before replying
    # A state change the proxy decides itself (a local answer): the decision again, run by the shell against
    # the log's current image, one replica at a time -> (response body, records); `reply` and `writes` are
    # what this replica's image alone says (used when there is no state topic). docs/security.md.
    decide: Callable[[], tuple[bytes, list[Any]]] | None = None
    audit: list[Any] = field(default_factory=list)  # the local decision's audit lines, logged if `writes` stand
    depth: int = 0  # how many stages saw the request: their response sides see the answer
    trace: Any = None  # telemetry's record of the request
    # The proxy's own request on the client's connection (the relayed login's SaslHandshake): its answer is
    # given to this instead of the stages and never reaches the client; it returns a reason to close, or None.
    internal: Callable[[memoryview], str | None] | None = None
    received_body: Any = None  # the request's body as received, once decoded (`received()`)
    edited: Any = None  # the request's body as a stage changed it (`edit_request`), encoded once when forwarded

    def __post_init__(self) -> None:
        if self.spec is None:  # made outside the session's parse (the relayed login's own request)
            self.spec = catalogue().get(self.api_key)

    def received(self) -> Any:
        """The request's body as the client sent it (in the version sent upstream): decoded, and
        validated, once, on first use, and shared by every stage that reads it."""
        if self.received_body is None:
            assert self.header is not None and self.frame is not None
            cls = request_type(self.api_key, self.api_version)
            self.received_body, _ = codec.decode(cls, self.frame, self.header.body_offset)
        return self.received_body

    def request(self) -> Any:
        """The request's body as the stages before left it."""
        return self.edited if self.edited is not None else self.received()

    def edit_request(self, body: Any) -> None:
        """Forward `body` instead: encoded once, when the request leaves the stages (the session)."""
        self.edited = body

    @property
    def version_seen_by_client(self) -> int:
        return self.client_version if self.client_version >= 0 else self.api_version

    @property
    def exchange(self) -> Any:  # the tenancy state, under the name the shell and tests know
        return self.tenant


Pending = Exchange


@dataclass(slots=True)
class RequestDecision:
    action: Action
    pending: Exchange | None = None  # None: no response will come (acks=0 Produce) or CLOSE
    reason: str = ""
    pieces: list[bytes | memoryview] | None = None  # the request to forward (None: the frame as received)
    frame: bytes | memoryview | None = None  # the request in the version sent upstream, if the proxy changed it
    check: PasswordCheck | None = None  # CHECK: the slow work
    resume: Callable[[Any], RequestDecision] | None = None  # CHECK: the decision once the work is done
    work: Callable[[], Awaitable[Any]] | None = None  # CHECK: I/O on the loop instead (the broker's listings)
    delay: float = 0.0  # seconds to hold the request before acting on it (quotas)
    # FORWARD: the proxy's own requests (`Exchange.internal`, each with its `frame`) to send before this one,
    # on an upstream connection opened without the proxy's login (`relay`: the broker judges the client).
    before: list[Exchange] | None = None
    relay: bool = False


@dataclass(slots=True)
class ResponseResult:
    pieces: list[bytes | memoryview]  # the frame to send, size prefix first
    brokers: list[Any] = field(default_factory=list)  # upstream endpoints seen (BrokerEndpoint)
    full_broker_list: bool = False  # True for Metadata: `brokers` is the whole cluster
    writes: list[Any] = field(default_factory=list)  # state records to write durably before replying
    exchange: Exchange | None = None  # the request answered
    close: str | None = None  # close the connection (an internal exchange failed): nothing is sent
    muted: bool = False  # an answer the forwarder passed back left the connection muted (a quota): it must hand it back


class ResponseMessage:
    """A broker response on its way back through the stages. Stages that need the body decoded share
    one decode (`entity()`); edits that must come last (broker endpoints) wait in `post` until the
    body is encoded once, in `materialize()`. An edit that can splice the bytes or edit the entity
    waits in `deferred`: if a stage decodes the body it becomes an entity edit (one decode, one
    encode), else it splices the bytes as soon as they are read (or at the end)."""

    __slots__ = (
        "_entity",
        "_pieces",
        "body_offset",
        "brokers",
        "deferred",
        "ex",
        "full_broker_list",
        "post",
        "received",
        "writes",
    )

    def __init__(self, ex: Exchange, frame: memoryview):
        self.ex = ex
        self.received = frame
        self._pieces: list[bytes | memoryview] = [frame]
        self.body_offset = response_body_offset(frame, ex.response_header_version)
        self._entity: Any = None
        self.post: list[Callable[[Any], Any]] = []
        # (the frame -> its splice edits, the same edit on the entity or None when it has none)
        self.deferred: list[tuple[Callable[[bytes | memoryview, int], splice.Edits], Callable[[Any], Any] | None]]
        self.deferred = []
        self.brokers: list[Any] = []
        self.full_broker_list = False
        self.writes: list[Any] = []

    @property
    def pieces(self) -> list[bytes | memoryview]:
        """The frame's pieces, size prefix first, with every deferred edit spliced in: in one pass over
        the frame as received (the stages' edits are of different fields), else one after another."""
        if self.deferred:
            edits, self.deferred = self.deferred, []
            if len(self._pieces) == 1 and self._pieces[0] is self.received:
                plan: splice.Edits = []
                for find, _ in edits:  # each stage's edits come in frame order: merged only when two have some
                    found = find(self.received, self.body_offset)
                    if found:
                        plan = sorted(plan + found) if plan else found
                if plan:
                    self._pieces = splice.apply(self.received, plan)
            else:
                for find, _ in edits:
                    frame = self._joined()
                    self._pieces = splice.apply(frame, find(frame, self.body_offset))
        return self._pieces

    @pieces.setter
    def pieces(self, pieces: list[bytes | memoryview]) -> None:
        self._pieces = pieces

    def _joined(self) -> bytes | memoryview:
        if len(self._pieces) > 1:
            self._pieces = [join(self._pieces)]
        return self._pieces[0]

    def unedited(self) -> bytes | memoryview:
        """The response before the deferred edits (as received, unless a stage replaced it)."""
        return self._joined()

    @property
    def frame(self) -> bytes | memoryview:
        """The response as one buffer (pieces joined if an edit split it)."""
        self.pieces  # noqa: B018 (deferred splices first)
        return self._joined()

    @property
    def decoded(self) -> bool:
        """A stage decoded the body (or waits to edit it): edits go to the entity, not the bytes."""
        return self._entity is not None or bool(self.post)

    def entity(self) -> Any:
        if self._entity is None:
            if self.deferred and all(edit is not None for _, edit in self.deferred):
                # Decoded anyway: the deferred edits apply to the entity, once, at the end.
                self.post.extend(edit for _, edit in self.deferred)  # type: ignore[misc]
                self.deferred = []
            self.pieces  # noqa: B018 (edits with no entity form are spliced first)
            self._entity, _ = codec.decode(
                response_type(self.ex.api_key, self.ex.api_version), self._joined(), self.body_offset
            )
        return self._entity

    def set_entity(self, entity: Any) -> None:
        self._entity = entity

    def replace(self, pieces: list[bytes | memoryview]) -> None:
        """A stage rewrote the frame without decoding it (splicing)."""
        self.pieces = pieces
        self._entity = None

    def materialize(self) -> list[bytes | memoryview]:
        """The frame to send: encoded once if any stage decoded or edits the body."""
        if self._entity is None and not self.post:
            return self.pieces
        entity = self.entity()
        for edit in self.post:
            entity = edit(entity)
        self.post = []
        self.pieces = with_body(self._joined(), self.body_offset, codec.encode(entity))
        self._entity = None
        return self.pieces


class Stage(Protocol):
    """A step of the request path. `on_request` returns None to pass the exchange on, or a decision
    that ends the request side here (answer, close, forward now, check). Stages with a response side
    also have `on_response(ex, message)`, run in reverse order for the stages the request passed."""

    def on_request(self, ex: Exchange) -> RequestDecision | None: ...


# -- decisions a stage returns --------------------------------------------------------------------------


def answer(ex: Exchange, body: bytes) -> RequestDecision:
    ex.reply = codec.response_frame(ex.correlation_id, ex.response_header_version, body)
    return RequestDecision(Action.LOCAL, ex)


def refuse(ex: Exchange, error: int, why: str) -> RequestDecision:
    """Answer with `error` in the API's own response shape, or close when it has no place for one."""
    import logging

    info = ex.info
    if info is None or not info.min_version <= ex.api_version <= info.max_version:
        return close(f"{why}: version {ex.api_version} cannot be parsed")
    try:
        body = refusal(ex, error)
    except codec.CodecError:
        return close(f"{why}: malformed request")
    if body is None:
        return close(f"{why}: refused (no error field to answer with)")
    logging.getLogger("proxy.core.session").info("refusing request: %s (error %d)", why, error)
    return answer(ex, body)


def refusal(ex: Exchange, error: int) -> bytes | None:
    """The body refusing the whole request with `error` in the API's own shape (None: it has no place)."""
    body = None
    if ex.header is not None and ex.frame is not None:
        from ..catalogue import refusal_body  # APIs with an error per item, in Kafka's shape

        body = refusal_body(ex.api_key, ex.api_version, error, ex.frame, ex.header.body_offset)
    if body is None:
        body = codec.error_response_body(ex.api_key, ex.api_version, error)
    return body


def close(why: str) -> RequestDecision:
    return RequestDecision(Action.CLOSE, reason=why)


def forward(ex: Exchange) -> RequestDecision:
    """Forward now, skipping the stages after this one."""
    return RequestDecision(Action.FORWARD, ex)
