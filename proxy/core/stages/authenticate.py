"""The authentication gate: SASL is answered at the proxy, and nothing but ApiVersions and SASL passes
before login (what a broker does too). The SASL exchange itself is an `Authenticator` (proxy/auth)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from ...protocol import codec
from ...protocol.apis import response_type
from ...protocol.headers import API_VERSIONS_KEY, RequestHeader
from ..admission import SLOW_DOWN
from ..exchange import Action, Exchange, PasswordCheck, RequestDecision, answer, close
from .context import ConnectionState

log = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36


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


# Whether a principal (with this client id) may log in at all: False refuses it at login, so that the
# client reports an authentication error instead of retrying forever (everyone is somewhere).
MayLogIn = Callable[[str | None, str | None], bool]


class AuthenticationStage:
    def __init__(self, ctx: ConnectionState, authenticator: Authenticator | None, may_log_in: MayLogIn | None):
        self.ctx = ctx
        self.authenticator = authenticator
        self.may_log_in = may_log_in

    @property
    def complete(self) -> bool:
        return self.authenticator is None or self.authenticator.complete

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        auth = self.authenticator
        if auth is None or ex.api_key == API_VERSIONS_KEY:
            return None
        if ex.api_key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            return self._sasl(ex, auth)
        if not auth.complete:
            # What a broker does too: anything but ApiVersions/SASL before login ends the connection.
            assert ex.info is not None
            return close(f"{ex.info.name} before authentication")
        return None

    def _sasl(self, ex: Exchange, auth: Authenticator) -> RequestDecision:
        info, header = ex.info, ex.header
        assert info is not None
        if header is None:  # a version the proxy cannot parse
            return close(f"SASL API {info.name} v{ex.version_seen_by_client} cannot be parsed")
        assert isinstance(ex.frame, memoryview)
        reply = auth.on_sasl_request(ex.api_key, ex.api_version, ex.frame, header)
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
