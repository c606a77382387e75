"""SASL terminated at the proxy: a sans-I/O server for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

One ``SaslServer`` per client connection plugs into ``ProxySession`` as its ``Authenticator``. It
answers SaslHandshake v1 and SaslAuthenticate v0-2 the way a Kafka broker does:

* handshake with an enabled mechanism -> no error and the enabled list; otherwise
  UNSUPPORTED_SASL_MECHANISM with the enabled list, and the connection closes;
* SaslHandshake v0 (raw, unframed SASL tokens afterwards) is refused with UNSUPPORTED_VERSION and
  the connection closes; every current client uses v1;
* a failed login -> SASL_AUTHENTICATION_FAILED with a message that does not say whether the user
  exists, and the connection closes;
* SASL requests out of order -> ILLEGAL_SASL_STATE and the connection closes.

Sessions never expire (session lifetime 0), so clients do not re-authenticate (KIP-368).
Passwords and SASL tokens are never logged; user names are, quoted.

With ``relay`` (``listeners.unknown_principals: relay``), a user name the proxy does not know is not
refused: the first SaslAuthenticate's user name is peeked (PLAIN's authcid, SCRAM's client-first
``n=``), and the server answers ``SaslReply(relay=mechanism)``: the session sends that request and
the rest of the exchange to the broker unchanged, and the broker's answers decide
(``relay_answered``). OAUTHBEARER, which only the broker can check, is always relayed. The name the
proxy itself logs in with upstream is never relayed: nobody logs in as the proxy.

A PLAIN password check runs a key derivation, milliseconds of CPU: the server hands it to the shell
as a ``PasswordCheck`` to run off the event loop, then finishes the login with the result. Failed
logins count against the client address, failed PLAIN checks also against the user, in a
``LoginGuard`` shared by the proxy (docs/security.md): beyond the budget, PLAIN passwords not
verified before fail without a derivation, and every failure from that address is answered slowly.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import enum
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from scramp import ScramMechanism
from scramp.utils import ScramException

from ..core.admission import LoginGuard
from ..core.exchange import PasswordCheck, ProtocolViolation
from ..core.stages.authenticate import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, SaslReply
from ..protocol import codec
from ..protocol.apis import request_type, response_type
from ..protocol.headers import RequestHeader
from . import SASL_MECHANISMS, SCRAM_MECHANISMS
from .credentials import DEFAULT_ITERATIONS, CredentialStore, ScramCredential

log = logging.getLogger(__name__)

USER_PREFIX = "User:"  # Kafka's principal type for users (KafkaPrincipal.USER_TYPE)
OAUTHBEARER = "OAUTHBEARER"  # only relayed: the broker checks the token
UNKNOWN_PRINCIPAL = "User:<unknown>"  # a relayed OAUTHBEARER login whose token's subject cannot be read


class _State(enum.Enum):
    HANDSHAKE = "expecting SaslHandshake"
    AUTHENTICATE = "expecting SaslAuthenticate"
    COMPLETE = "authenticated"
    FAILED = "failed"
    RELAY = "relaying the exchange to the broker"


class SaslServer:
    """The SASL exchange of one client connection (implements ``proxy.core.session.Authenticator``)."""

    def __init__(
        self,
        store: CredentialStore,
        mechanisms: Sequence[str] = SASL_MECHANISMS,
        name: str = "",
        *,
        guard: LoginGuard | None = None,
        address: str = "",
        clock: Callable[[], float] = time.monotonic,
        relay: bool = False,
        upstream_user: str | None = None,
    ):
        unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
        if unknown or not mechanisms:
            raise ValueError(f"unsupported SASL mechanisms {unknown or 'none'}")
        self.store = store
        self.guard = guard
        self.address = address  # the client's address, the key of the per-address failure budget
        self.clock = clock
        self.mechanisms = tuple(mechanisms)
        self.name = name  # connection name for log lines
        self.principal: str | None = None
        self.mechanism: str | None = None
        self._state = _State.HANDSHAKE
        self._scram: Any = None  # scramp.ScramServer while a SCRAM exchange is under way
        self._scram_user: str | None = None
        self._scram_credential: Any = None  # the entry a SCRAM exchange under way is checked against
        self._unknown_user = False
        self.credential: ScramCredential | None = None  # what the login was checked against (stale_login)
        self._user: str | None = None
        self.relay = relay  # users not in the store are relayed to the broker instead of refused
        self.upstream_user = upstream_user  # the proxy's own upstream login: never relayed
        self.relayed = False  # this exchange went (or goes) to the broker
        self._relayed_user: str | None = None
        self._relay_rounds = 0

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def offered(self) -> tuple[str, ...]:
        """The mechanisms SaslHandshake names: the proxy's, and OAUTHBEARER when unknown users are relayed."""
        return (*self.mechanisms, OAUTHBEARER) if self.relay else self.mechanisms

    def on_sasl_request(self, api_key: int, version: int, frame: memoryview, header: RequestHeader) -> SaslReply:
        request = _decode(api_key, version, frame, header)
        if api_key == SASL_HANDSHAKE_KEY:
            return self._handshake(version, request.mechanism)
        return self._authenticate(version, bytes(request.auth_bytes))

    # -- SaslHandshake --------------------------------------------------------------------------

    def _handshake(self, version: int, mechanism: str) -> SaslReply:
        offered = self.offered
        if self._state is _State.COMPLETE:
            return SaslReply(_handshake_body(version, ErrorCode.illegal_sasl_state, offered))
        if self._state is not _State.HANDSHAKE:
            self._fail(f"SaslHandshake while {self._state.value}")
            return SaslReply(_handshake_body(version, ErrorCode.illegal_sasl_state, offered), close=True)
        if version < 1:
            # v0 sends the SASL tokens unframed after the handshake; the proxy only speaks framed SASL.
            self._fail("SaslHandshake v0 is not supported (clients must use v1 with SaslAuthenticate)")
            return SaslReply(_handshake_body(version, ErrorCode.unsupported_version, offered), close=True)
        if mechanism not in offered:
            self._fail(f"mechanism {mechanism!r} is not enabled (enabled: {', '.join(offered)})")
            body = _handshake_body(version, ErrorCode.unsupported_sasl_mechanism, offered)
            return SaslReply(body, close=True)
        self.mechanism = mechanism
        self._state = _State.AUTHENTICATE
        if mechanism == OAUTHBEARER:  # only the broker can check a token: relayed from the handshake on
            self.relayed = True
        return SaslReply(_handshake_body(version, ErrorCode.none, offered))

    # -- SaslAuthenticate -----------------------------------------------------------------------

    def _authenticate(self, version: int, token: bytes) -> SaslReply:
        if self._state is _State.COMPLETE:
            message = "SaslAuthenticate request received after successful authentication"
            return SaslReply(_authenticate_body(version, ErrorCode.illegal_sasl_state, message))
        if self._state is not _State.AUTHENTICATE:
            message = f"Unexpected SaslAuthenticate request while {self._state.value}"
            self._fail(message)
            return SaslReply(_authenticate_body(version, ErrorCode.illegal_sasl_state, message), close=True)
        if self.relay and self._scram is None:  # the first round: whose login is it?
            relayed = self._relay_or_not(version, token)
            if relayed is not None:
                return relayed
        if self.mechanism == "PLAIN":
            return self._plain(version, token)
        return self._scram_step(version, token)

    # -- relaying unknown users to the broker ---------------------------------------------------

    def _relay_or_not(self, version: int, token: bytes) -> SaslReply | None:
        """None: the proxy's own user (or a malformed PLAIN token, refused by `_plain` as ever): terminate
        here. Else the reply: relay, or a refusal."""
        mechanism = self.mechanism
        assert mechanism is not None
        if mechanism == OAUTHBEARER:
            subject = oauth_subject(token)  # unverified: enough to refuse, never to trust
            if subject is not None and subject == self.upstream_user:
                detail = "a token for the proxy's own upstream user is never relayed"
                return self._denied(version, subject, _invalid_credentials(mechanism), detail=detail)
            return self._start_relay(subject)
        username, problem = peek_user(mechanism, token)
        if username is None:
            if mechanism == "PLAIN":
                return None
            return self._denied(version, None, _invalid_credentials(mechanism), detail=problem)
        if username in self.store.users:
            return None
        if self.upstream_user is not None and username == self.upstream_user:
            detail = "the proxy's own upstream user is never relayed"
            return self._denied(version, username, _invalid_credentials(mechanism), detail=detail)
        return self._start_relay(username)

    @property
    def relayed_principal(self) -> str | None:
        """`User:<name>` of the login being relayed (the name as the client sent it, not yet checked)."""
        return None if self._relayed_user is None else f"User:{self._relayed_user}"

    def _start_relay(self, username: str | None) -> SaslReply:
        self.relayed = True
        self._state = _State.RELAY
        self._relayed_user = username
        who = "unknown user" if username is None else f"user {username!r}"
        log.info("%s: relaying the %s login of %s to the broker", self.name, self.mechanism, who)
        return SaslReply(b"", relay=self.mechanism)

    def relay_answered(self, error: int, message: str | None, token: bytes) -> tuple[bool, bool]:
        """The broker's SaslAuthenticate answer to a relayed request (it goes to the client unchanged):
        whether to close the connection once it is sent, and whether to send it slowly (spent budget)."""
        if self._state is _State.COMPLETE:  # KIP-368 re-authentication: the broker closes after a failure too
            if error:
                log.warning(
                    "%s: re-authentication of %s refused by the broker: %s", self.name, self.principal, _err(error)
                )
            return bool(error), False
        if self._state is not _State.RELAY:
            return True, False
        if not self.relayed:
            raise ProtocolViolation("internal: a relayed answer on a login the proxy terminates")
        if error:
            self._state = _State.FAILED
            slow = False
            if self.guard is not None:
                now = self.clock()
                slow = self.guard.by_address.exhausted(self.address, now)
                self.guard.by_address.record(self.address, now)
            user = self._relayed_user
            log.warning(
                "%s: authentication failed for %s with %s: refused by the broker: %s%s",
                self.name,
                "unknown user" if user is None else f"user {user!r}",
                self.mechanism,
                _err(error),
                f": {message}" if message else "",
            )
            return True, slow
        self._relay_rounds += 1
        if not _relay_finished(self.mechanism, self._relay_rounds, token):
            return False, False
        self._state = _State.COMPLETE
        user = self._relayed_user
        self.principal = UNKNOWN_PRINCIPAL if user is None else USER_PREFIX + user
        log.info(
            "%s: authenticated %s with %s (relayed: the broker authenticated it)",
            self.name,
            self.principal,
            self.mechanism,
        )
        return False, False

    def _plain(self, version: int, token: bytes) -> SaslReply:
        # RFC 4616: [authzid] NUL authcid NUL passwd
        parts = token.split(b"\0")
        if len(parts) != 3:
            return self._denied(version, None, f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return self._denied(version, None, "Invalid SASL/PLAIN response: not UTF-8")
        if not username:
            return self._denied(version, None, "Authentication failed: username not specified")
        if not password:
            return self._denied(version, username, "Authentication failed: password not specified")
        if authzid and authzid != username:
            message = "Authentication failed: Client requested an authorization id that is different from username"
            return self._denied(version, username, message)
        # Taken once: the check and the session's later staleness test are about this very entry.
        credential = self.store.plain_credential(username)
        if self.store.verified_before(username, password):
            return self._succeeded(version, username, b"", credential)
        if self.guard is not None and (spent := self.guard.spent(self.address, username, self.clock())):
            return self._denied(version, username, _TOO_MANY, detail=f"budget of {spent} spent", count=False)

        def finish(ok: bool) -> SaslReply:
            if not ok:
                if self.guard is not None:
                    self.guard.by_user.record(username, self.clock())
                return self._denied(version, username, _invalid_credentials("PLAIN"))
            self.store.remember_verified(username, password, credential)
            return self._succeeded(version, username, b"", credential)

        return SaslReply(b"", check=PasswordCheck(lambda: self.store.check_plain(credential, password), finish))

    def _scram_step(self, version: int, token: bytes) -> SaslReply:
        assert self.mechanism in SCRAM_MECHANISMS
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            return self._denied(version, self._scram_user, "Invalid SCRAM message: not UTF-8")
        if self._scram is None:
            return self._scram_first(version, message)
        try:
            self._scram.set_client_final(message)
            final = self._scram.get_server_final()
        except ScramException as exc:
            detail = "unknown user" if self._unknown_user else str(exc)
            return self._denied(version, self._scram_user, _invalid_credentials(self.mechanism), detail=detail)
        if self._unknown_user:  # unreachable unless a proof matched random keys; never log such a user in
            return self._denied(version, self._scram_user, _invalid_credentials(self.mechanism), detail="unknown user")
        return self._succeeded(version, self._scram_user or "", final.encode("utf-8"), self._scram_credential)

    def _scram_first(self, version: int, message: str) -> SaslReply:
        assert self.mechanism is not None
        mechanism = self.mechanism
        if any(attr.strip().lower().startswith("tokenauth=true") for attr in message.split(",")[2:]):
            message = "Authentication failed: delegation tokens are not supported by the proxy"
            return self._denied(version, None, message)

        def lookup(username: str) -> tuple[bytes, bytes, bytes, int]:
            self._scram_user = username
            credential = self.store.scram_credential(mechanism, username)
            if credential is None:
                # Carry on with made-up keys, so an unknown user fails at the same step as a wrong password
                # (the proof cannot match); only the log says "unknown user".
                self._unknown_user = True
                return _decoy(mechanism, username)
            self._scram_credential = credential
            return credential.scram_auth_info()

        try:
            self._scram = ScramMechanism(mechanism).make_server(lookup)
            self._scram.set_client_first(message)
            first = self._scram.get_server_first()
        except ScramException as exc:
            return self._denied(version, self._scram_user, _invalid_credentials(mechanism), detail=str(exc))
        return SaslReply(_authenticate_body(version, ErrorCode.none, None, first.encode("utf-8")))

    # -- outcomes -------------------------------------------------------------------------------

    def _succeeded(self, version: int, username: str, token: bytes, credential: ScramCredential | None) -> SaslReply:
        self._state = _State.COMPLETE
        self._scram = None
        self.principal = USER_PREFIX + username
        self._user, self.credential = username, credential
        log.info("%s: authenticated %s with %s", self.name, self.principal, self.mechanism)
        return SaslReply(_authenticate_body(version, ErrorCode.none, None, token))

    def stale_login(self) -> str | None:
        """Why this connection's login no longer holds: the credential it was checked against was changed or
        deleted since (users at runtime, proxy/auth/users.py). Sessions never expire, so the proxy closes
        such connections rather than wait for a KIP-368 re-authentication that never comes."""
        if self._state is not _State.COMPLETE or self.relayed or self.credential is None or self._user is None:
            return None
        if self.store.current(self._user, self.credential):
            return None
        return f"the {self.mechanism} credential {self.principal} logged in with was changed or deleted: reconnect"

    def _denied(
        self, version: int, username: str | None, message: str, detail: str = "", count: bool = True
    ) -> SaslReply:
        self._state = _State.FAILED
        self._scram = None
        slow = False
        if self.guard is not None:
            now = self.clock()
            slow = self.guard.by_address.exhausted(self.address, now)
            if count:
                self.guard.by_address.record(self.address, now)
        who = "unknown user" if username is None else f"user {username!r}"
        # The client gets Kafka's generic message; the log keeps the reason (scramp's, if any) for operators.
        log.log(
            logging.WARNING if count else logging.INFO,
            "%s: authentication failed for %s with %s: %s%s",
            self.name,
            who,
            self.mechanism,
            message,
            f" ({detail})" if detail else "",
        )
        body = _authenticate_body(version, ErrorCode.sasl_authentication_failed, message)
        return SaslReply(body, close=True, slow=slow)

    def _fail(self, why: str) -> None:
        self._state = _State.FAILED
        log.warning("%s: SASL refused: %s", self.name, why)


def peek_user(mechanism: str, token: bytes) -> tuple[str | None, str]:
    """The user name a first SaslAuthenticate token logs in as, or None and why it cannot be read.
    PLAIN: ``[authzid] NUL authcid NUL passwd``; SCRAM client-first: ``gs2-header,n=name,r=nonce...``
    with ``=2C`` and ``=3D`` standing for ``,`` and ``=`` (RFC 5802)."""
    if mechanism == "PLAIN":
        parts = token.split(b"\0")
        if len(parts) != 3:
            return None, f"expected 3 tokens, got {len(parts)}"
        try:
            name = parts[1].decode("utf-8")
        except UnicodeDecodeError:
            return None, "not UTF-8"
        return (name, "") if name else (None, "username not specified")
    try:
        message = token.decode("utf-8")
    except UnicodeDecodeError:
        return None, "client-first message is not UTF-8"
    attrs = message.split(",")
    if len(attrs) < 4 or not (attrs[0] in ("n", "y") or attrs[0].startswith("p=")):
        return None, "malformed client-first message"
    if attrs[1] and not attrs[1].startswith("a="):
        return None, "malformed client-first message (authzid)"
    if not attrs[2].startswith("n=") or not attrs[3].startswith("r="):
        return None, "malformed client-first message (no user name or nonce)"
    raw = attrs[2][2:]
    name, rest = "", raw
    while rest:
        head, sep, rest = rest.partition("=")
        name += head
        if sep:
            code, rest = rest[:2], rest[2:]
            if code == "2C":
                name += ","
            elif code == "3D":
                name += "="
            else:
                return None, "malformed client-first message (bad escape in the user name)"
    if not name:
        return None, "malformed client-first message (empty user name)"
    return name, ""


def oauth_subject(token: bytes) -> str | None:
    """The `sub` claim of an OAUTHBEARER initial response's JWT, read WITHOUT checking its signature (the
    broker checks the token): for log lines only. None if it cannot be read."""
    try:
        for attr in token.split(b"\x01"):
            if attr.lower().startswith(b"auth=bearer "):
                payload = attr[12:].strip().split(b".")[1]
                claims = json.loads(base64.urlsafe_b64decode(payload + b"=" * (-len(payload) % 4)))
                sub = claims.get("sub") if isinstance(claims, dict) else None
                return sub if isinstance(sub, str) and sub else None
    except (IndexError, ValueError, binascii.Error):
        return None
    return None


def _relay_finished(mechanism: str | None, rounds: int, token: bytes) -> bool:
    """Whether the broker's successful answer ends the exchange: PLAIN's only round; SCRAM's server-final
    (``v=...``, round 2); OAUTHBEARER's empty success (a non-empty answer is the broker's error challenge)."""
    if mechanism == "PLAIN":
        return True
    if mechanism == OAUTHBEARER:
        return not token
    return rounds >= 2 and token.startswith(b"v=")


def _err(error: int) -> str:
    try:
        return ErrorCode(error).name.upper()
    except ValueError:
        return f"error {error}"


class Preauthenticated:
    """The ``Authenticator`` of a TLS listener: the principal is known from the handshake (client
    certificate or ``User:ANONYMOUS``), so SASL requests get ILLEGAL_SASL_STATE as from a broker's SSL
    listener, without closing the connection."""

    def __init__(self, principal: str):
        self.principal: str | None = principal

    @property
    def complete(self) -> bool:
        return True

    def on_sasl_request(self, api_key: int, version: int, frame: memoryview, header: RequestHeader) -> SaslReply:
        _decode(api_key, version, frame, header)
        if api_key == SASL_HANDSHAKE_KEY:
            return SaslReply(_handshake_body(version, ErrorCode.illegal_sasl_state, ()))
        message = "SASL is not enabled on this listener"
        return SaslReply(_authenticate_body(version, ErrorCode.illegal_sasl_state, message))

    def relay_answered(self, error: int, message: str | None, token: bytes) -> tuple[bool, bool]:
        raise ProtocolViolation("internal: nothing is relayed on a listener without SASL")


_DECOY_KEY = secrets.token_bytes(32)  # per process: decoy salts are stable for a name, unguessable across names


def _decoy(mechanism: str, username: str) -> tuple[bytes, bytes, bytes, int]:
    salt = hmac.new(_DECOY_KEY, f"{mechanism}\0{username}".encode(), "sha256").digest()
    size = 64 if mechanism == "SCRAM-SHA-512" else 32
    return salt, secrets.token_bytes(size), secrets.token_bytes(size), DEFAULT_ITERATIONS


_TOO_MANY = "Authentication failed: too many failed authentications, try again later"


def _invalid_credentials(mechanism: str | None) -> str:
    # Kafka's wording; the same for an unknown user and a wrong password.
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def _decode(api_key: int, version: int, frame: memoryview, header: RequestHeader) -> Any:
    if api_key not in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
        raise ProtocolViolation(f"API {api_key} is not a SASL API")
    try:
        request, _ = codec.decode(request_type(api_key, version), frame, header.body_offset)
    except codec.CodecError as exc:
        raise ProtocolViolation(f"malformed SASL request: {exc}") from exc
    return request


def _handshake_body(version: int, error: ErrorCode, mechanisms: Sequence[str]) -> bytes:
    cls = response_type(SASL_HANDSHAKE_KEY, version)
    return codec.encode(cls(error_code=error, mechanisms=tuple(mechanisms)))


def _authenticate_body(version: int, error: ErrorCode, message: str | None, token: bytes = b"") -> bytes:
    cls = response_type(SASL_AUTHENTICATE_KEY, version)
    fields: dict[str, Any] = {"error_code": error, "error_message": message, "auth_bytes": token}
    if version >= 1:
        fields["session_lifetime"] = datetime.timedelta(0)  # no expiry: clients never re-authenticate
    return codec.encode(cls(**fields))
