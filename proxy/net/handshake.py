"""TLS on the client listeners: the server context, SNI routing inside the handshake, and the client
certificate's principal."""

from __future__ import annotations

import contextvars
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from ..auth import ANONYMOUS
from ..auth.tls import (
    USER_PREFIX,
    NativeTlsContext,
    PrincipalMapper,
    distinguished_name,
    native_context,
    server_context,
)
from ..config import ListenerTlsConfig, ProxyConfig
from ..core.endpoints import SniRouting, UnknownServerName
from .native_tls import HandshakeRefused
from .native_tls import handshake as native_handshake

if TYPE_CHECKING:
    from ..observability.tracing import ConnectionTelemetry

log = logging.getLogger(__name__)

# The TLS server name of the handshake the current task is doing: the SNI callback runs inside
# do_handshake(), in the task of the connection it is for.
_handshake: contextvars.ContextVar[_ServerName] = contextvars.ContextVar("handshake")


@dataclass
class _ServerName:
    name: str | None = None  # what the client asked for
    refused: str | None = None  # why no broker answers to it


ListenerContext = ssl.SSLContext | NativeTlsContext


def listener_context(config: ProxyConfig, sni: SniRouting | None) -> ListenerContext | None:
    """The client listeners' TLS context (None: plaintext), routing by server name with SNI: the compiled one
    (native_tls.py) unless the config asks for OpenSSL's or it cannot serve these settings."""
    tls = config.listeners.tls
    if tls is None:
        return None
    if tls.engine != "openssl":
        try:
            return native_context(tls, sni.route if sni is not None else None)
        except ValueError as exc:
            if tls.engine == "native":
                raise
            _say_openssl(str(exc))
    context = server_context(tls.certfile, tls.keyfile, tls.cafile, tls.client_auth)
    if sni is not None:
        context.sni_callback = _sni_callback(sni)
    return context


_said: set[str] = set()


def _say_openssl(why: str) -> None:
    if why not in _said:  # once per reason, not at each reload
        _said.add(why)
        log.warning("TLS listeners on OpenSSL (Python's ssl), every request on the Python path: %s", why)


def principal_mapper(config: ProxyConfig) -> PrincipalMapper:
    tls = config.listeners.tls
    return PrincipalMapper("DEFAULT" if tls is None else tls.principal_mapping_rules)


async def secure(
    client: trio.SocketStream,
    context: ListenerContext | None,
    tls: ListenerTlsConfig | None,
    mapper: PrincipalMapper,
    name: str,
    telemetry: ConnectionTelemetry | None = None,
) -> tuple[trio.abc.Stream, str | None, str | None] | None:
    """TLS listeners: the handshake (bounded), the client certificate's principal and the server name
    the client asked for (SNI). None: closed."""
    if context is None or tls is None:
        return client, None, None
    stream: trio.abc.Stream = client
    der: bytes | None = None
    server_name = _ServerName()
    _handshake.set(server_name)
    try:
        with trio.fail_after(tls.handshake_timeout_seconds):
            if isinstance(context, NativeTlsContext):
                native_stream, server_name.name = await native_handshake(client, context)
                stream, der = native_stream, native_stream.session.peer_certificate
            else:
                stream = ssl_stream = trio.SSLStream(client, context, server_side=True)
                await ssl_stream.do_handshake()
                der = ssl_stream.getpeercert(binary_form=True)
    except trio.TooSlowError:
        log.info("%s: closing: TLS handshake timed out", name)
    except (trio.BrokenResourceError, OSError, HandshakeRefused) as exc:  # ssl.SSLError (bad certificate...): the cause
        why = server_name.refused or exc.__cause__ or exc
        log.info("%s: closing: TLS handshake failed: %s", name, why)
        if telemetry is not None:
            telemetry.tls_handshake(None, str(why))
    else:
        if not der:
            if telemetry is not None:
                telemetry.tls_handshake(ANONYMOUS)
            return stream, ANONYMOUS, server_name.name
        try:
            subject = distinguished_name(der)
            principal = USER_PREFIX + mapper.name_for(subject)
        except Exception as exc:  # no matching rule, or a subject that cannot be read: this client only
            log.warning("%s: closing: client certificate refused: %s", name, exc)
            if telemetry is not None:
                telemetry.tls_handshake(None, f"client certificate refused: {exc}")
        else:
            log.info("%s: TLS client certificate %r -> principal %s", name, subject, principal)
            if telemetry is not None:
                telemetry.tls_handshake(principal)
            return stream, principal, server_name.name
    await trio.aclose_forcefully(stream)
    return None


def _sni_callback(routing: SniRouting) -> Callable[[object, str | None, ssl.SSLContext], int | None]:
    """Records the server name for the handshaking task and fails the handshake for a name that is
    neither the bootstrap nor a broker: the client never reaches a wrong broker."""

    def callback(_ssl_object: object, server_name: str | None, _context: ssl.SSLContext) -> int | None:
        box = _handshake.get(None)
        if box is None:
            return None
        box.name = server_name
        try:
            routing.route(server_name)
        except UnknownServerName as exc:
            box.refused = str(exc)
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        return None

    return callback
