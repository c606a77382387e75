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

Every first SaslAuthenticate is read by Kafka's own rules (``sasl_messages``): a message the proxy and
the broker could read as two identities is refused, whoever it names.

With ``relay`` (``listeners.unknown_principals: relay``), a user name the proxy does not know is not
refused: the first SaslAuthenticate's user name is read (PLAIN's authcid, SCRAM's client-first
``n=``), and the server answers ``SaslReply(relay=mechanism)``: the session sends that request and
the rest of the exchange to the broker, and the broker's answers decide (``relay_answered``).
OAUTHBEARER, which only the broker can check, is always relayed. Never relayed: the name the proxy
itself logs in with upstream, and the proxy's own users (nor, through the session's ``may_relay``,
any name the proxy places or empowers); for a token, under any of its claims. Later SASL requests of a
relayed connection pass through ``on_relayed_request``: a KIP-368 re-authentication's first message is
read the same way and must name the same user, and an OAUTHBEARER exchange takes no second token.

A PLAIN password check runs a key derivation, milliseconds of CPU: the server hands it to the shell
as a ``PasswordCheck`` to run off the event loop, then finishes the login with the result. Failed
logins count against the client address, the user and both together, in a
``LoginGuard`` shared by the proxy (docs/security.md): beyond a budget the login is paced or answered
slowly, never refused while its check can be queued. Failed logins are logged once per address, user and
mechanism per interval, with how many failures and checks the line stands for.
"""

from __future__ import annotations

import datetime
import enum
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from scramp import ScramMechanism
from scramp.utils import ScramException

from ..errors import ProtocolViolation
from ..protocol import codec
from ..protocol.apikey import ApiKey
from ..protocol.apis import request_type, response_type
from ..protocol.headers import RequestHeader
from ..quoting import bare, shown
from . import SASL_MECHANISMS, SCRAM_MECHANISMS
from .credentials import DEFAULT_ITERATIONS, CredentialStore, ScramCredential
from .guard import LoginGuard, Verdict, pair_key
from .replies import PasswordCheck, SaslReply
from .sasl_messages import PRINCIPAL_CLAIM, Login, Refused, read_login, read_plain, read_scram_first

log = logging.getLogger(__name__)

USER_PREFIX = "User:"  # Kafka's principal type for users (KafkaPrincipal.USER_TYPE)
OAUTHBEARER = "OAUTHBEARER"  # only relayed: the broker checks the token
OAUTH_ERROR_ACK = b"\x01"  # the client's answer to the broker's OAUTHBEARER error challenge (RFC 7628)


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
        principal_claim: str = PRINCIPAL_CLAIM,
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
        self._relayed_names: tuple[str, ...] = ()
        self._relay_rounds = 0
        self.principal_claim = principal_claim  # the token claim the broker names OAUTHBEARER logins by
        self._reauth: str | None = None  # a relayed connection's re-authentication: its handshake's mechanism

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def offered(self) -> tuple[str, ...]:
        """The mechanisms SaslHandshake names: the proxy's, and OAUTHBEARER when unknown users are relayed."""
        return (*self.mechanisms, OAUTHBEARER) if self.relay else self.mechanisms

    def on_sasl_request(self, api_key: int, version: int, frame: memoryview, header: RequestHeader) -> SaslReply:
        request = _decode(api_key, version, frame, header)
        if api_key == ApiKey.SASL_HANDSHAKE:
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
            self._fail(f"mechanism {shown(mechanism)} is not enabled (enabled: {', '.join(offered)})")
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
        """None: the proxy's own user (or a malformed PLAIN token, refused by `_plain` with Kafka's words):
        terminate here. Else the reply: relay, or a refusal."""
        mechanism = self.mechanism
        assert mechanism is not None
        try:
            login = read_login(mechanism, token, self.principal_claim)
        except Refused as exc:
            if mechanism == "PLAIN":
                return None
            return self._denied(version, None, _invalid_credentials(mechanism), detail=str(exc))
        if mechanism != OAUTHBEARER and login.name in self.store.users:
            return None
        why = self._never_relayed(login)
        if why is not None:
            return self._denied(version, login.name, _invalid_credentials(mechanism), detail=why)
        return self._start_relay(login)

    def _never_relayed(self, login: Login) -> str | None:
        """Why this login may not go to the broker: it names the proxy's upstream user or one of the proxy's
        own users (a token: in any claim, since the broker may be configured to read another)."""
        for name in login.every_name:
            if self.upstream_user is not None and name == self.upstream_user:
                return "the proxy's own upstream user is never relayed"
            if name in self.store.users:
                return f"{shown(name)} is a user of the proxy: it logs in at the proxy, never relayed"
        return None

    @property
    def relayed_principal(self) -> str | None:
        """`User:<name>` of the login being relayed (the name as the client sent it, not yet checked)."""
        return None if self._relayed_user is None else USER_PREFIX + self._relayed_user

    @property
    def relayed_principals(self) -> tuple[str, ...]:
        """Every principal the broker could make of the login being relayed (a token's other claims too)."""
        return tuple(USER_PREFIX + name for name in self._relayed_names)

    def _start_relay(self, login: Login) -> SaslReply:
        self.relayed = True
        self._state = _State.RELAY
        self._relayed_user, self._relayed_names = login.name, login.every_name
        log.info("%s: relaying the %s login of user %s to the broker", self.name, self.mechanism, shown(login.name))
        return SaslReply(b"", relay=self.mechanism)

    def on_relayed_request(
        self,
        api_key: int,
        version: int,
        frame: memoryview,
        header: RequestHeader,
        may_relay: Callable[[str], bool] | None = None,
    ) -> SaslReply | None:
        """A SASL request on a relayed connection: None to send it to the broker, or the refusal to answer
        (the connection then closes). The broker keeps a re-authentication's principal unchanged; the proxy
        reads the first message itself anyway, so it never depends on the two readings agreeing."""
        request = _decode(api_key, version, frame, header)
        if api_key == ApiKey.SASL_HANDSHAKE:
            if self._state is _State.COMPLETE:
                self._reauth = request.mechanism
            return None
        token = bytes(request.auth_bytes)
        if self._state is _State.COMPLETE and self._reauth is not None:
            mechanism, self._reauth = self._reauth, None
            why = self._reauth_refusal(mechanism, token, may_relay)
        elif self.mechanism == OAUTHBEARER and token != OAUTH_ERROR_ACK:
            # Kafka's OAUTHBEARER server reads any later message as a new client-first: a second token
            # would log in as whoever it names, after the proxy read the first one.
            why = "an OAUTHBEARER exchange takes one token (then only \\x01 after the broker's error)"
        else:
            return None
        if why is None:
            return None
        self._state = _State.FAILED
        log.warning(
            "%s: authentication failed for user %s with %s: %s",
            self.name,
            shown(self._relayed_user),
            self.mechanism,
            why,
        )
        body = _authenticate_body(version, ErrorCode.sasl_authentication_failed, _invalid_credentials(self.mechanism))
        return SaslReply(body, close=True)

    def _reauth_refusal(self, mechanism: str, token: bytes, may_relay: Callable[[str], bool] | None) -> str | None:
        if mechanism != self.mechanism:
            return f"re-authentication with {mechanism} after logging in with {self.mechanism}"
        try:
            login = read_login(mechanism, token, self.principal_claim)
        except Refused as exc:
            return f"re-authentication: {exc}"
        if login.name != self._relayed_user:
            return f"re-authentication as another user ({shown(login.name)})"
        why = self._never_relayed(login)
        if why is None and may_relay is not None:
            claimed = [name for name in login.every_name if not may_relay(USER_PREFIX + name)]
            if claimed:
                why = f"the proxy places or empowers {shown(USER_PREFIX + claimed[0])} now: it is no longer relayed"
        return why

    def relay_answered(self, error: int, message: str | None, token: bytes) -> tuple[bool, bool]:
        """The broker's SaslAuthenticate answer to a relayed request (it goes to the client unchanged):
        whether to close the connection once it is sent, and whether to send it slowly (spent budget)."""
        if self._state is _State.COMPLETE:  # KIP-368 re-authentication: the broker closes after a failure too
            if error:
                log.warning(
                    "%s: re-authentication of %s refused by the broker: %s",
                    self.name,
                    bare(self.principal),
                    _err(error),
                )
            return bool(error), False
        if self._state is not _State.RELAY:
            return True, False
        if not self.relayed:
            raise ProtocolViolation("internal: a relayed answer on a login the proxy terminates")
        if error:
            self._state = _State.FAILED
            user = self._relayed_user
            slow, summary = self._count_failure(user, True)
            if summary is not None:
                log.warning(
                    "%s: authentication failed for %s with %s: refused by the broker: %s%s%s",
                    self.name,
                    "unknown user" if user is None else f"user {shown(user)}",
                    self.mechanism,
                    _err(error),
                    f": {message}" if message else "",
                    summary,
                )
            return True, slow
        self._relay_rounds += 1
        if not _relay_finished(self.mechanism, self._relay_rounds, token):
            return False, False
        self._state = _State.COMPLETE
        self.principal = self.relayed_principal
        log.info(
            "%s: authenticated %s with %s (relayed: the broker authenticated it)",
            self.name,
            bare(self.principal),
            self.mechanism,
        )
        return False, False

    def _plain(self, version: int, token: bytes) -> SaslReply:
        try:
            _authzid, username, password = read_plain(token)  # RFC 4616, as Kafka reads it (or refused)
        except Refused as exc:
            return self._denied(version, None, _PLAIN_REFUSALS.get(str(exc), f"Invalid SASL/PLAIN response: {exc}"))
        # Taken once: the check and the session's later staleness test are about this very entry.
        credential = self.store.plain_credential(username)
        if self.store.verified_before(username, password):
            return self._succeeded(version, username, b"", credential)
        verdict = self._pace(username)
        if verdict.refuse:
            return self._queued_too_far(version, username, verdict)

        def finish(ok: bool) -> SaslReply:
            if self.guard is not None:
                self.guard.log.checked(self._log_key(username))
            if not ok:
                return self._denied(version, username, _invalid_credentials("PLAIN"))
            self.store.remember_verified(username, password, credential)
            return self._succeeded(version, username, b"", credential)

        check = PasswordCheck(
            lambda: self.store.check_plain(credential, password), finish, key=self.address, wait=verdict.wait
        )
        return SaslReply(b"", check=check)

    def _pace(self, username: str) -> Verdict:
        """When the check of a login of `username` may run (proxy/auth/guard.py: a spent budget paces it)."""
        return Verdict() if self.guard is None else self.guard.before_check(self.address, username, self.clock())

    def _queued_too_far(self, version: int, username: str, verdict: Verdict) -> SaslReply:
        assert self.guard is not None
        detail = f"budget of {verdict.spent} spent, its checks queued {self.guard.horizon:g} s ahead"
        return self._denied(version, username, _TOO_MANY, detail=detail, count=False)

    def _scram_step(self, version: int, token: bytes) -> SaslReply:
        assert self.mechanism in SCRAM_MECHANISMS
        if self._scram is None:
            return self._scram_first(version, token)
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            return self._denied(version, self._scram_user, "Invalid SCRAM message: not UTF-8")
        try:
            self._scram.set_client_final(message)
            final = self._scram.get_server_final()
        except ScramException as exc:
            detail = "unknown user" if self._unknown_user else str(exc)
            return self._denied(version, self._scram_user, _invalid_credentials(self.mechanism), detail=detail)
        if self._unknown_user:  # unreachable unless a proof matched random keys; never log such a user in
            return self._denied(version, self._scram_user, _invalid_credentials(self.mechanism), detail="unknown user")
        return self._succeeded(version, self._scram_user or "", final.encode("utf-8"), self._scram_credential)

    def _scram_first(self, version: int, token: bytes) -> SaslReply:
        assert self.mechanism is not None
        mechanism = self.mechanism
        try:
            first = read_scram_first(token)  # as Kafka reads it, or refused
        except Refused as exc:
            if "delegation tokens" in str(exc):
                return self._denied(version, None, f"Authentication failed: {exc}")
            return self._denied(version, None, _invalid_credentials(mechanism), detail=str(exc))
        message = token.decode("utf-8")  # ASCII: the reading above took it

        def lookup(username: str) -> tuple[bytes, bytes, bytes, int]:
            if username != first.username:  # scramp read another name than Kafka would: never go on
                raise ScramException("the user name reads two ways")
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
            server_first = self._scram.get_server_first()
        except ScramException as exc:
            return self._denied(version, self._scram_user, _invalid_credentials(mechanism), detail=str(exc))
        reply = SaslReply(_authenticate_body(version, ErrorCode.none, None, server_first.encode("utf-8")))
        # A proof costs two HMACs, checked on the loop; a spent budget paces the exchange all the same, so
        # guessing over SCRAM is no faster than over PLAIN.
        verdict = self._pace(first.username)
        if verdict.refuse:
            return self._queued_too_far(version, first.username, verdict)
        if verdict.wait > 0:
            check = PasswordCheck(lambda: True, lambda _ok: reply, key=self.address, wait=verdict.wait, cpu=False)
            return SaslReply(b"", check=check)
        return reply

    # -- outcomes -------------------------------------------------------------------------------

    def _succeeded(self, version: int, username: str, token: bytes, credential: ScramCredential | None) -> SaslReply:
        self._state = _State.COMPLETE
        self._scram = None
        self.principal = USER_PREFIX + username
        self._user, self.credential = username, credential
        log.info("%s: authenticated %s with %s", self.name, bare(self.principal), self.mechanism)
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
        slow, summary = self._count_failure(username, count)
        if summary is not None:
            who = "unknown user" if username is None else f"user {shown(username)}"
            # The client gets Kafka's generic message; the log keeps the reason (scramp's, if any) for operators.
            log.log(
                logging.WARNING if count else logging.INFO,
                "%s: authentication failed for %s with %s: %s%s%s",
                self.name,
                who,
                self.mechanism,
                message,
                f" ({detail})" if detail else "",
                summary,
            )
        body = _authenticate_body(version, ErrorCode.sasl_authentication_failed, message)
        return SaslReply(body, close=True, slow=slow)

    def _count_failure(self, username: str | None, count: bool) -> tuple[bool, str | None]:
        """Count a failed login in the guard's budgets (unless `count` is False: refused without a check);
        whether to answer it slowly, and the log line's summary (None: this key was logged lately)."""
        if self.guard is None:
            return False, ""
        now = self.clock()
        if count:
            slow = self.guard.failed(self.address, username, now)
        else:
            slow = self.guard.spent(self.address, username, now) is not None
        summary = self.guard.log.failed(self._log_key(username), now)
        return slow, None if summary is None else f" [{summary} for this address, user and mechanism]"

    def _log_key(self, username: str | None) -> str:
        """Failed logins are logged once per address, user and mechanism per interval."""
        return f"{pair_key(self.address, username or '')}\0{self.mechanism}"

    def _fail(self, why: str) -> None:
        self._state = _State.FAILED
        log.warning("%s: SASL refused: %s", self.name, why)


def peek_user(mechanism: str, token: bytes) -> tuple[str | None, str]:
    """The user name a first SaslAuthenticate token logs in as (read as Kafka reads it, see
    `sasl_messages`), or None and why the proxy refuses it."""
    try:
        return read_login(mechanism, token).name, ""
    except Refused as exc:
        return None, str(exc)


def oauth_subject(token: bytes) -> str | None:
    """The `sub` claim of an OAUTHBEARER initial response's token, read WITHOUT checking its signature (the
    broker checks the token), or None if the message or its claims read more than one way."""
    return peek_user(OAUTHBEARER, token)[0]


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
        if api_key == ApiKey.SASL_HANDSHAKE:
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


# Kafka's PlainSaslServer messages for what `read_plain` refuses (the client sees them, as from a broker).
_PLAIN_REFUSALS = {
    "username not specified": "Authentication failed: username not specified",
    "password not specified": "Authentication failed: password not specified",
    "authorization id differs from the username": (
        "Authentication failed: Client requested an authorization id that is different from username"
    ),
}

_TOO_MANY = "Authentication failed: too many failed authentications, try again later"


def _invalid_credentials(mechanism: str | None) -> str:
    # Kafka's wording; the same for an unknown user and a wrong password.
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def _decode(api_key: int, version: int, frame: memoryview, header: RequestHeader) -> Any:
    if api_key not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
        raise ProtocolViolation(f"API {api_key} is not a SASL API")
    try:
        request, _ = codec.decode(request_type(api_key, version), frame, header.body_offset)
    except codec.CodecError as exc:
        raise ProtocolViolation(f"malformed SASL request: {exc}") from exc
    return request


def _handshake_body(version: int, error: ErrorCode, mechanisms: Sequence[str]) -> bytes:
    cls = response_type(ApiKey.SASL_HANDSHAKE, version)
    return codec.encode(cls(error_code=error, mechanisms=tuple(mechanisms)))


def _authenticate_body(version: int, error: ErrorCode, message: str | None, token: bytes = b"") -> bytes:
    cls = response_type(ApiKey.SASL_AUTHENTICATE, version)
    fields: dict[str, Any] = {"error_code": error, "error_message": message, "auth_bytes": token}
    if version >= 1:
        fields["session_lifetime"] = datetime.timedelta(0)  # no expiry: clients never re-authenticate
    return codec.encode(cls(**fields))
