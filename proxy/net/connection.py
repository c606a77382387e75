"""One client connection: two pumps around a sans-I/O ProxySession.

The request pump reads client frames and forwards them upstream (or queues a local answer);
the response pump writes answers back in request order, reading the upstream only when the
oldest outstanding request went upstream. Either side failing ends the whole connection, so a
client whose broker disappears is disconnected cleanly and re-bootstraps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import trio

from ..core.endpoints import BrokerEndpoint
from ..core.session import Action, ProtocolViolation, ProxySession
from ..protocol.framing import FrameError
from .frames import FrameReader

if TYPE_CHECKING:
    from ..observability.tracing import ConnectionTelemetry

log = logging.getLogger(__name__)

BrokersSeen = Callable[[list[BrokerEndpoint], bool], Awaitable[None]]
StateWriter = Callable[[list[Any]], Awaitable[None]]

# Errors that end one connection and nothing else.
CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError, FrameError, ProtocolViolation)


class ClientConnection:
    def __init__(
        self,
        client: trio.SocketStream,
        upstream: trio.SocketStream,
        session: ProxySession,
        *,
        max_frame_bytes: int,
        buffer_size: int,
        on_brokers: BrokersSeen,
        name: str,
        write_state: StateWriter | None = None,
        tap_dir: Path | None = None,
        telemetry: ConnectionTelemetry | None = None,
    ):
        self.client = client
        self.upstream = upstream
        self.session = session
        self.client_reader = FrameReader(client, max_frame_bytes, buffer_size)
        self.upstream_reader = FrameReader(upstream, max_frame_bytes, buffer_size)
        self.on_brokers = on_brokers
        self.write_state = write_state
        self.name = name
        # Debugging aid (and the leak oracle's input): every byte sent to the client, one file per
        # connection, renamed at close after the virtual cluster the connection was bound to.
        self._tap_dir = tap_dir
        self._tap: IO[bytes] | None = None
        if tap_dir is not None:
            tap_dir.mkdir(parents=True, exist_ok=True)
            self._tap_path = tap_dir / f"{name.split()[0]}.open"
            self._tap = self._tap_path.open("wb")
        self._work = trio.Event()  # set when a request is queued, so the response pump looks again
        self._requests_done = False
        self._request_scope: trio.CancelScope | None = None
        self.requests = 0
        self.telemetry = telemetry  # spans and metrics; None when both are off (no cost)
        self.close_reason = "client closed the connection"
        if telemetry is not None:
            telemetry.session = session

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._request_pump, nursery.cancel_scope)
                nursery.start_soon(self._response_pump, nursery.cancel_scope)
        except* CONNECTION_ERRORS as group:
            for exc in group.exceptions:
                level = logging.INFO if isinstance(exc, FrameError | ProtocolViolation) else logging.DEBUG
                log.log(level, "%s: closing: %s: %s", self.name, type(exc).__name__, exc)
                self.close_reason = f"{type(exc).__name__}: {exc}"
        except* Exception as group:
            # A bug must cost one connection, never the server: log it loudly and close.
            for exc in group.exceptions:
                log.error("%s: closing after an internal error", self.name, exc_info=exc)
                self.close_reason = f"internal error: {type(exc).__name__}"
        finally:
            if self.telemetry is not None:
                self.telemetry.on_close(self.close_reason)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.client)
                await trio.aclose_forcefully(self.upstream)
            if self._tap is not None:
                self._tap.close()
                vc = getattr(self.session.vc, "name", None) or "physical"
                self._tap_path.rename(self._tap_path.with_suffix(f".{vc}.bin"))

    def stop_reading(self) -> None:
        """Graceful drain: take no new requests, let the outstanding ones complete."""
        self.close_reason = "proxy draining"
        if self._request_scope is not None:
            self._request_scope.cancel()

    def _wake(self) -> None:
        self._work.set()
        self._work = trio.Event()

    async def _send(self, data: bytes | memoryview) -> None:
        if self._tap is not None:
            self._tap.write(data)
        await self.client.send_all(data)

    async def _persist(self, records: list[Any]) -> None:
        """State changes (new links, learned topic ids) are durable before the client hears of them."""
        if records:
            if self.write_state is None:
                raise RuntimeError("state changes without a state store")
            await self.write_state(records)

    async def _request_pump(self, connection_scope: trio.CancelScope) -> None:
        with trio.CancelScope() as self._request_scope:
            while True:
                frame = await self.client_reader.next_frame()
                if frame is None:
                    break
                telemetry = self.telemetry
                started = time.time_ns() if telemetry is not None else 0
                decision = self.session.on_request(frame)
                trace = telemetry.on_request(frame, decision, started) if telemetry is not None else None
                self.requests += 1
                if decision.action is Action.FORWARD:
                    if decision.pieces is None:
                        await self.upstream.send_all(frame)
                    else:
                        for piece in decision.pieces:
                            await self.upstream.send_all(piece)
                    if trace is not None and telemetry is not None and decision.pending is None:
                        telemetry.on_forwarded(trace)  # acks=0: done once forwarded
                elif decision.action is Action.CLOSE:
                    log.info("%s: closing: %s", self.name, decision.reason)
                    self.close_reason = decision.reason
                    connection_scope.cancel()
                    return
                self._wake()
        # Client finished sending (EOF or drain): the response pump ends once everything is answered.
        self._requests_done = True
        self._wake()

    async def _response_pump(self, connection_scope: trio.CancelScope) -> None:
        session = self.session
        while True:
            local = session.next_local_reply()
            if local is not None:
                assert local.reply is not None
                await self._persist(local.writes)
                await self._send(local.reply)
                if self.telemetry is not None:
                    self.telemetry.on_reply([local.reply], None)
                if local.close_after:
                    log.info("%s: closing after %s", self.name, "failed authentication")
                    self.close_reason = "failed authentication"
                    connection_scope.cancel()
                    return
                continue
            if not session.in_flight:
                if self._requests_done:
                    connection_scope.cancel()
                    return
                await self._work.wait()
                continue
            frame = await self.upstream_reader.next_frame()
            if frame is None:
                self.close_reason = "upstream broker closed the connection"
                raise trio.BrokenResourceError(self.close_reason)
            result = session.on_response(frame)
            if result.brokers:
                await self.on_brokers(result.brokers, result.full_broker_list)
            await self._persist(result.writes)
            for piece in result.pieces:
                await self._send(piece)
            if self.telemetry is not None:
                self.telemetry.on_reply(result.pieces, frame)
