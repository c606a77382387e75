"""TLS in the compiled parts (native/src/tls.rs, rustls), on the client listeners and to the brokers, so that the
forwarder can serve a TLS connection's plain requests as it serves a plaintext one's: the session is one the Python
path and the forwarder use in turn.

The Trio side is a `trio.abc.Stream` over the socket that moves the session's bytes (`NativeTlsStream`), the
listeners' handshake (`handshake`), which stops after the ClientHello for the SNI routing to accept or refuse the
server name before a certificate is chosen, and the proxy's own to a broker (`client_handshake`). Where the compiled
parts are not there (or `engine: openssl`), Python's `ssl` serves instead (handshake.py, upstream.py); both offer TLS
1.2 and 1.3 with the same certificates, keys and CAs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from ..auth.tls import NativeTlsClientContext, NativeTlsContext
from ..errors import MalformedInput

RECEIVE_BYTES = 64 * 1024
# A TLS alert record, fatal, unrecognized_name (RFC 6066): what OpenSSL's SNI callback sends for a name it refuses.
UNRECOGNIZED_NAME = bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70])


class HandshakeRefused(MalformedInput):
    """A handshake failed or was refused (the reason is the message)."""


class NativeTlsStream(trio.abc.Stream):
    """A TLS connection (a client's, or the proxy's to a broker): its socket's bytes through its session, which the
    forwarder then uses itself (`session`, `transport_stream`). Sends are not concurrent (the pumps send in turn, as
    with trio.SSLStream, which refuses concurrent sends); a reply the session makes while reading goes with the next
    send."""

    def __init__(self, transport: trio.SocketStream, session: Any, error: type[Exception]):
        self.transport_stream = transport
        self.session = session
        self._error = error  # vcproxy_native.TlsError

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.send_pieces((data,))

    async def send_pieces(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        """All of `pieces`, in order, in one send (frames.py's writer: its frames' pieces)."""
        try:
            sealed = self.session.encrypt(pieces)
        except self._error as exc:
            raise trio.BrokenResourceError(f"TLS: {exc}") from exc
        await self.transport_stream.send_all(sealed)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        most = RECEIVE_BYTES if max_bytes is None else max_bytes
        while True:
            plain = self.session.read(most)
            if plain or self.session.peer_closed:
                return plain
            data = await self.transport_stream.receive_some(RECEIVE_BYTES)
            if not data:
                return b""  # the end of the stream, with or without close_notify (Kafka's clients send none)
            try:
                self.session.feed(data)
            except self._error as exc:
                raise trio.BrokenResourceError(f"TLS: {exc}") from exc

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


async def handshake(transport: trio.SocketStream, context: NativeTlsContext) -> tuple[NativeTlsStream, str | None]:
    """The server side of the handshake (the caller bounds its time): the stream and the server name asked for.
    Raises HandshakeRefused (after sending the session's alert) or a Trio error of the socket."""
    module = context.module
    session = module.TlsSession()
    server_name: str | None = None
    while True:
        await _send_pending(transport, session)
        if not session.hello and not session.handshaking:
            return NativeTlsStream(transport, session, module.TlsError), server_name
        data = await _receive(transport, "client")
        try:
            session.feed(data)
        except module.TlsError as exc:
            raise await _refused(transport, session.outgoing(), str(exc)) from None
        if session.hello:
            server_name = session.server_name
            if context.route is not None:
                try:
                    context.route(server_name)
                except Exception as exc:  # UnknownServerName: no broker answers to that name
                    raise await _refused(transport, UNRECOGNIZED_NAME, str(exc)) from None
            try:
                session.accept(context.config)
            except module.TlsError as exc:
                raise await _refused(transport, session.outgoing(), str(exc)) from None


async def client_handshake(transport: trio.SocketStream, context: NativeTlsClientContext, host: str) -> NativeTlsStream:
    """The proxy's handshake with a broker at `host` (the caller bounds its time). Raises HandshakeRefused (the
    broker's certificate refused, or its alert) or a Trio error of the socket."""
    module = context.module
    try:
        session = module.TlsSession.client(context.config, host)
    except ValueError as exc:
        raise HandshakeRefused(str(exc)) from None
    while True:
        await _send_pending(transport, session)
        if not session.handshaking:
            return NativeTlsStream(transport, session, module.TlsError)
        data = await _receive(transport, "broker")
        try:
            session.feed(data)
        except module.TlsError as exc:
            why = str(exc)
            if why.startswith("invalid peer certificate"):  # in the words OpenSSL's engine logs, for those who grep
                why = f"certificate verify failed: {why}"
            raise await _refused(transport, session.outgoing(), why) from None


async def _send_pending(transport: trio.SocketStream, session: Any) -> None:
    """The handshake messages the session has to send now."""
    sealed = session.outgoing()
    if sealed:
        await transport.send_all(sealed)


async def _receive(transport: trio.SocketStream, peer: str) -> bytes:
    """The peer's next bytes of the handshake; its end of stream refuses it."""
    data = await transport.receive_some(RECEIVE_BYTES)
    if not data:
        raise HandshakeRefused(f"the {peer} closed the connection during the TLS handshake")
    return data


async def _refused(transport: trio.SocketStream, alert: bytes, why: str) -> HandshakeRefused:
    """The refusal, once its alert is sent (if the peer takes it within a second: it may be gone)."""
    if alert:
        with trio.move_on_after(1):
            await transport.send_all(alert)
    return HandshakeRefused(why)
