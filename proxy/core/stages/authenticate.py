"""The authentication gate: SASL is answered at the proxy, and nothing but ApiVersions and SASL passes
before login (what a broker does too). The SASL exchange itself is an `Authenticator` (proxy/auth).

A login the authenticator relays (a principal the proxy does not know, `listeners.unknown_principals:
relay`) makes the connection a relayed one (`ConnectionState.relayed`): the request goes to the broker
on an upstream connection opened without the proxy's own login, after the proxy's own SaslHandshake for
the client's mechanism (an internal exchange: its answer is checked here and never reaches the client);
from then on every SASL request passes unchanged, and the broker's SaslAuthenticate answers, passed back
unchanged, decide the login (and KIP-368 re-authentications)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Protocol

from kio.schema.errors import ErrorCode

from ...auth.guard import SLOW_DOWN
from ...auth.replies import SaslReply
from ...errors import ProtocolViolation
from ...identity import CLIENT_ID
from ...protocol import codec
from ...protocol.apikey import ApiKey
from ...protocol.apis import api_info, request_type, response_type
from ...protocol.framing import frame as framed
from ...protocol.headers import RequestHeader, encode_request_header, response_body_offset
from ...protocol.primitives import MALFORMED
from ..exchange import (
    Action,
    Exchange,
    RequestDecision,
    ResponseMessage,
    answer,
    close,
    forward,
)
from .context import ConnectionState

log = logging.getLogger(__name__)

RELAY_HANDSHAKE_VERSION = 1
_internal_correlation = itertools.count(0x7F000000)  # the proxy's own requests on relayed connections


class Authenticator(Protocol):
    """SASL terminated at the proxy (implemented in proxy/auth). Sans-I/O, one per connection."""

    principal: str | None  # e.g. "User:alice" once authenticated

    @property
    def complete(self) -> bool: ...

    def on_sasl_request(self, api_key: int, version: int, frame: memoryview, header: RequestHeader) -> SaslReply: ...

    def relay_answered(self, error: int, message: str | None, token: bytes) -> tuple[bool, bool]:
        """The broker's answer to a relayed SaslAuthenticate: (close after sending it, send it slowly)."""
        ...


# Whether a principal (with this client id) may log in at all: False refuses it at login, so that the
# client reports an authentication error instead of retrying forever (everyone is somewhere).
MayLogIn = Callable[[str | None, str | None], bool]


# Whether a login may be relayed to the broker under this principal: not when the proxy places or empowers
# that name itself (a VC's member, a super-admin, a holder of rights): the broker would judge it instead.
MayRelay = Callable[[str], bool]


class AuthenticationStage:
    def __init__(
        self,
        ctx: ConnectionState,
        authenticator: Authenticator | None,
        may_log_in: MayLogIn | None,
        may_relay: MayRelay | None = None,
    ):
        self.ctx = ctx
        self.authenticator = authenticator
        self.may_log_in = may_log_in
        self.may_relay = may_relay

    @property
    def complete(self) -> bool:
        return self.authenticator is None or self.authenticator.complete

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        auth = self.authenticator
        if auth is None or ex.api_key == ApiKey.API_VERSIONS:
            return None
        if ex.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            if self.ctx.relayed:  # the broker's exchange now (and its re-authentications): unchanged
                return self._relayed_sasl(ex, auth)
            return self._sasl(ex, auth)
        if not auth.complete:
            # What a broker does too: anything but ApiVersions/SASL before login ends the connection.
            assert ex.info is not None
            return close(f"{ex.info.name} before authentication")
        return None

    def _relayed_sasl(self, ex: Exchange, auth: Authenticator) -> RequestDecision:
        """A SASL request of a relayed connection goes to the broker unchanged, once the authenticator has
        read what it must (a re-authentication's first message, a second OAUTHBEARER token): else refused."""
        check = getattr(auth, "on_relayed_request", None)
        if check is None:
            return forward(ex)
        info, header = ex.info, ex.header
        assert info is not None
        if header is None:  # a version the proxy cannot parse: it cannot read the login either
            return close(f"SASL API {info.name} v{ex.version_seen_by_client} cannot be parsed")
        assert isinstance(ex.frame, memoryview)
        reply = check(ex.api_key, ex.api_version, ex.frame, header, self.may_relay)
        if reply is None:
            return forward(ex)
        decision = answer(ex, reply.body)
        ex.close_after = True
        return decision

    def _sasl(self, ex: Exchange, auth: Authenticator) -> RequestDecision:
        info, header = ex.info, ex.header
        assert info is not None
        if header is None:  # a version the proxy cannot parse
            return close(f"SASL API {info.name} v{ex.version_seen_by_client} cannot be parsed")
        assert isinstance(ex.frame, memoryview)
        reply = auth.on_sasl_request(ex.api_key, ex.api_version, ex.frame, header)
        if reply.relay is not None:
            # Every principal the broker could make of the login (a token's claims), not only the proxy's reading.
            principals = getattr(auth, "relayed_principals", ())
            claimed = [p for p in principals if self.may_relay is not None and not self.may_relay(p)]
            if claimed:
                principal = claimed[0]
                log.info("refusing to relay the login of %s: the proxy places it, so it logs in here", principal)
                message = (
                    "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                    f"{reply.relay}"
                )  # what an unknown user or a wrong password gets: nothing told
                body = codec.encode(
                    codec._empty(
                        response_type(ex.api_key, ex.api_version),
                        error_code=ErrorCode.sasl_authentication_failed,
                        error_message=message,
                    )
                )
                self.ctx.relayed = False
                decision = answer(ex, body)
                ex.close_after = True
                return decision
            return self._relay(ex, reply.relay)
        check = reply.check
        if check is not None:
            return RequestDecision(Action.CHECK, check=check, resume=lambda ok: self._reply(ex, check.finish(ok)))
        return self._reply(ex, reply)

    def _reply(self, ex: Exchange, reply: SaslReply) -> RequestDecision:
        auth = self.authenticator
        assert auth is not None and ex.header is not None
        if auth.complete:
            self.ctx.principal = auth.principal
            if self.may_log_in is not None and not self.may_log_in(auth.principal, ex.header.client_id):
                reply = SaslReply(
                    codec.encode(
                        codec._empty(
                            response_type(ex.api_key, ex.api_version),
                            error_code=ErrorCode.sasl_authentication_failed,
                            error_message="Authentication failed: the principal is in no virtual cluster",
                        )
                    ),
                    close=True,
                )
                log.info("refusing %s: in no virtual cluster (nor in kafka-cluster)", auth.principal)
        decision = answer(ex, reply.body)
        ex.close_after = reply.close
        ex.delay_factor = SLOW_DOWN if reply.slow else 1
        return decision

    # -- relayed logins ---------------------------------------------------------------------------

    def _relay(self, ex: Exchange, mechanism: str) -> RequestDecision:
        """The first relayed request: the proxy's SaslHandshake goes first, on a connection of its own."""
        self.ctx.relayed = True
        correlation_id = next(_internal_correlation) & 0x7FFFFFFF
        info = api_info(ApiKey.SASL_HANDSHAKE)
        assert info is not None
        header = encode_request_header(
            ApiKey.SASL_HANDSHAKE,
            RELAY_HANDSHAKE_VERSION,
            correlation_id,
            CLIENT_ID,
            info.request_header_version(RELAY_HANDSHAKE_VERSION),
        )
        body = codec.encode(request_type(ApiKey.SASL_HANDSHAKE, RELAY_HANDSHAKE_VERSION)(mechanism=mechanism))
        handshake = Exchange(
            ApiKey.SASL_HANDSHAKE,
            RELAY_HANDSHAKE_VERSION,
            correlation_id,
            info.response_header_version(RELAY_HANDSHAKE_VERSION),
            info=info,
            frame=framed(header + body),
            internal=lambda frame: _handshake_refusal(frame, mechanism),
        )
        return RequestDecision(Action.FORWARD, ex, before=[handshake], relay=True)

    def on_response(self, ex: Exchange, msg: ResponseMessage) -> None:
        if ex.api_key != ApiKey.SASL_AUTHENTICATE or not self.ctx.relayed:
            return
        auth = self.authenticator
        assert auth is not None
        try:  # read, not decoded into the message: the answer goes back byte for byte
            response, _ = codec.decode(response_type(ex.api_key, ex.api_version), msg.frame, msg.body_offset)
        except (codec.CodecError, *MALFORMED) as exc:
            raise ProtocolViolation(f"malformed SaslAuthenticate response from the broker: {exc}") from exc
        close_after, slow = auth.relay_answered(
            int(response.error_code), response.error_message, bytes(response.auth_bytes)
        )
        if auth.complete:
            self.ctx.principal = auth.principal
        if close_after:
            ex.close_after = True
            ex.delay_factor = SLOW_DOWN if slow else 1


def _handshake_refusal(frame: memoryview, mechanism: str) -> str | None:
    """The broker's answer to the proxy's SaslHandshake for a relayed login: None if it takes the mechanism."""
    try:
        offset = response_body_offset(frame, 0)
        response, _ = codec.decode(response_type(ApiKey.SASL_HANDSHAKE, RELAY_HANDSHAKE_VERSION), frame, offset)
    except (codec.CodecError, *MALFORMED) as exc:
        return f"relayed login: malformed SaslHandshake response from the broker: {exc}"
    error = int(response.error_code)
    if error == 0:
        return None
    offered = ", ".join(response.mechanisms) or "none"
    try:
        name = ErrorCode(error).name.upper()
    except ValueError:
        name = f"error {error}"
    return f"relayed login: the broker refused SASL mechanism {mechanism}: {name} (it offers {offered})"
