"""One client connection: two pumps around a sans-I/O ProxySession.

The request pump reads client frames and forwards them upstream (or queues a local answer);
the response pump writes answers back in request order, reading the upstream only when the
oldest outstanding request went upstream. Either side failing ends the whole connection, so a
client whose broker disappears is disconnected cleanly and re-bootstraps.

What one peer may cost is bounded here (docs/security.md): the broker connection is opened only
when the first request must go upstream (after login on SASL listeners), frames before login are
small, a login has a deadline, an idle connection is closed, at most `max_in_flight` requests are
read ahead of their answers, and password checks run in a worker thread.

A relayed login (a principal the proxy does not know, passed to the broker) needs a broker connection
without the proxy's own login: if the connection has one with it (opened for an ApiVersions before
login), its answers are awaited, then it is replaced. The response pump reads the broker only while a
request sent there awaits its answer.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import trio

from .. import audit
from ..core import grants
from ..core.endpoints import BrokerEndpoint
from ..core.session import Action, ProtocolViolation, ProxySession
from ..observability.local_answers import log_local_answer
from ..protocol import codec
from ..protocol.framing import FrameError
from . import allowances
from .forwarder import Forwarder, ForwarderLimits, Outcome
from .frames import FrameReader, FrameWriter
from .native_tls import NativeTlsStream
from .password_checks import PasswordChecks

if TYPE_CHECKING:
    from ..auth.replies import PasswordCheck
    from ..core.exchange import Exchange
    from ..observability.tracing import ConnectionTelemetry

log = logging.getLogger(__name__)

BrokersSeen = Callable[[list[BrokerEndpoint], bool], Awaitable[None]]
StateWriter = Callable[[list[Any]], Awaitable[None]]
# TenancyService.decide: a decision run against the log, committed and applied -> (body, records)
StateDecider = Callable[[Callable[[], tuple[bytes, list[Any]]]], Awaitable[tuple[bytes, list[Any]]]]
UpstreamConnector = Callable[[bool], Awaitable[trio.abc.Stream]]  # login: with the proxy's own SASL login

# Password checks (PLAIN key derivations) share `num_password_check_threads` worker threads per process, each
# address its fair share of them: a flood of guesses costs at most those cores and queues behind itself,
# never the event loop nor the other addresses' logins (proxy/net/password_checks.py).
PASSWORD_CHECKS = PasswordChecks()


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """limits.* of the config, as one connection needs them (seconds, not ms)."""

    max_frame_bytes: int
    buffer_size: int
    initial_buffer_size: int = 16 * 1024
    pre_auth_max_frame_bytes: int = 512 * 1024
    authentication_timeout: float = 10.0
    idle_timeout: float = 600.0
    max_in_flight: int = 100
    failed_authentication_delay: float = 0.1
    password_check_threads: int = 1
    password_checks_per_ip: int = 1

    @classmethod
    def from_config(cls, limits: Any) -> ConnectionLimits:
        return cls(
            max_frame_bytes=limits.max_frame_bytes,
            buffer_size=limits.receive_buffer_bytes,
            initial_buffer_size=min(limits.initial_buffer_bytes, limits.receive_buffer_bytes),
            pre_auth_max_frame_bytes=min(limits.sasl_server_max_receive_size, limits.max_frame_bytes),
            authentication_timeout=limits.authentication_timeout_ms / 1000,
            idle_timeout=limits.connections_max_idle_ms / 1000,
            max_in_flight=limits.max_in_flight_requests_per_connection,
            failed_authentication_delay=limits.connection_failed_authentication_delay_ms / 1000,
            password_check_threads=limits.num_password_check_threads,
            password_checks_per_ip=limits.max_password_checks_per_ip,
        )


# Errors that end one connection and nothing else.
CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError, FrameError, ProtocolViolation)


class ClientConnection:
    def __init__(
        self,
        client: trio.abc.Stream,
        connect_upstream: UpstreamConnector,
        session: ProxySession,
        *,
        limits: ConnectionLimits,
        on_brokers: BrokersSeen,
        name: str,
        write_state: StateWriter | None = None,
        decide_state: StateDecider | None = None,
        tap_dir: Path | None = None,
        telemetry: ConnectionTelemetry | None = None,
        forwarder: Forwarder | None = None,
    ):
        self.client = client
        self.connect_upstream = connect_upstream
        self.upstream: trio.abc.Stream | None = None  # opened by the first request that goes upstream
        self.upstream_reader: FrameReader | None = None
        self.upstream_writer: FrameWriter | None = None
        self._upstream_open = trio.Event()
        self._upstream_login = True  # the open upstream carries the proxy's own login (False: relayed)
        self._sent = 0  # requests sent upstream that expect an answer
        self._received = 0  # answers read from upstream
        self.session = session
        self.limits = limits
        self.client_reader = FrameReader(client, limits.max_frame_bytes, limits.buffer_size, limits.initial_buffer_size)
        self.client_writer = FrameWriter(client)
        self._logged_in = session.authenticator is None or session.authenticator.complete
        self._login_done = trio.Event()  # the watchdog's idle clock starts at the login, not at its deadline
        if self._logged_in:
            self._login_done.set()
        else:
            # Kafka's sasl.server.max.receive.size: a stranger's frames are small, and so is its buffer.
            self.client_reader.decoder.set_limits(
                limits.pre_auth_max_frame_bytes, limits.initial_buffer_size, keep_spare=False
            )
        self.on_brokers = on_brokers
        self.write_state = write_state
        self.decide_state = decide_state
        self.name = name
        # Debugging aid (and the leak oracle's input): every byte sent to the client, one file per
        # connection, renamed at close after the virtual cluster the connection was bound to.
        self._tap_dir = tap_dir
        self._tap: IO[bytes] | None = None
        if tap_dir is not None:
            tap_dir.mkdir(parents=True, exist_ok=True)
            self._tap_path = tap_dir / f"{name.split()[0]}.open"
            self._tap = self._tap_path.open("wb")
        # Frames (pieces of) read but not yet written, in order: a pump that has another frame in its reader's
        # buffer writes both with one system call. They are views into that buffer, so each pump writes them
        # before its reader receives again, and before anything that may take long (a check, a delay, a close).
        self._to_upstream: list[bytes | memoryview] = []
        self._to_client: list[bytes | memoryview] = []
        self._work = trio.Event()  # set when a request is queued, so the response pump looks again
        self._room = trio.Event()  # set when an answer left, so a request pump at max_in_flight reads on
        # Whether a task waits on each: most requests and answers find nobody waiting, and then cost no Event.
        self._work_awaited = False
        self._room_awaited = False
        self._clock = trio.lowlevel.current_clock()
        self._requests_done = False
        self._reading = False  # the response pump waits on the broker's socket (or reads it)
        # A drain stops the request pump only between requests (waiting for the next one, or for room): a request
        # read is forwarded or answered whole, so everything outstanding completes (docs/architecture.md).
        self._between_requests = False
        self._draining = False
        self._request_scope: trio.CancelScope | None = None
        self._last_active = self._clock.current_time()
        self.requests = 0
        self.telemetry = telemetry  # spans and metrics; None when both are off (no cost)
        self.close_reason = "client closed the connection"
        self._scope: trio.CancelScope | None = None
        if telemetry is not None:
            telemetry.state = session.ctx
            if telemetry.metrics is not None and session.ctx.image is not None:
                telemetry.metrics.quotas = session.ctx.image.quotas  # quota use and throttles, per entity
        # The forwarder (proxy/net/forwarder.py) serves plain requests of a plain-TCP connection with no tap (metrics
        # it counts itself; with tracing, it samples as the sampler does and keeps a record of each sampled request for
        # Python to make its span from); the Python path hands it over when nothing is outstanding.
        tracing = telemetry.tracing if telemetry is not None else None
        self._sampling = tracing.bound if tracing is not None else None
        plain = isinstance(client, trio.SocketStream | NativeTlsStream) and tap_dir is None
        self._forwarder = forwarder if plain else None
        self._forward_table: Any = None
        self._forward_want = 0  # the size of the Produce request the forwarder takes the connection at (else 0)
        # A hand-over: the request pump serves the phase while the response pump stands aside (its wait on the broker's
        # socket cancelled, through `_read_scope`), so that the pumps, the nursery and the watchdog live on across it.
        self._handing_over = False
        self._read_scope: trio.CancelScope | None = None  # the response pump's wait with nothing outstanding
        self._aside = trio.Event()  # set once the response pump stands aside for a hand-over
        self._back = trio.Event()  # set (and made anew) once the connection is back from the forwarder
        self._closing = False
        self._phase: Any = None  # the forwarder's phase while it has the connection
        self.forwarded = 0  # requests the forwarder served (of `requests`)

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                nursery.start_soon(self._request_pump, nursery.cancel_scope)
                nursery.start_soon(self._response_pump, nursery.cancel_scope)
                nursery.start_soon(self._watchdog, nursery.cancel_scope)
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
                if self.upstream is not None:
                    await trio.aclose_forcefully(self.upstream)
            if self._tap is not None:
                self._tap.close()
                vc = getattr(self.session.vc, "name", None) or "physical"
                self._tap_path.rename(self._tap_path.with_suffix(f".{vc}.bin"))

    def _may_forward(self) -> bool:
        """Whether the forwarder takes the connection at the request the request pump has buffered (not taken):
        a plain one, with nothing outstanding, nothing held for either side, and the response pump waiting on
        the broker's socket with nothing outstanding (where a cancel loses no byte: `_hand_over`)."""
        forwarder = self._forwarder
        if forwarder is None or self._draining or self._closing or not self._logged_in or self._read_scope is None:
            return False
        if self.session.in_flight or self._to_client or self._to_upstream or self._received != self._sent:
            return False
        reader = self.upstream_reader
        if (
            not isinstance(self.upstream, trio.SocketStream | NativeTlsStream)
            or reader is None
            or reader.decoder.buffered
        ):
            return False
        if not self._upstream_login:
            return False
        table = forwarder.table_for(self.session)
        if table is None:
            return False
        view = self.client_reader.decoder.peek_frame()
        if view is None:
            return False
        try:
            counting = self.telemetry is not None and self.telemetry.metrics is not None
            if table.classify(view, self.session.ctx.grant, counting) is None:
                return False
            # Under a byte rate or a request rate, what it meters goes to the forwarder only if its quota holds an
            # allowance now: else the session charges it (and mutes the connection), as it would have.
            want = allowances.want(self.session.quota, view)
            if want is None:
                return False
        finally:
            view.release()  # before the decoder may move its buffer
        self._forward_table = table
        self._forward_want = want
        return True

    def _quiet(self) -> bool:
        """With the response pump aside for the forwarder: still nothing outstanding or held (had it been woken
        before its wait was cancelled, it ran on to its next wait)."""
        reader = self.upstream_reader
        return (
            not self.session.in_flight
            and self._received == self._sent
            and not self._to_client
            and not self._to_upstream
            and reader is not None
            and not reader.decoder.buffered
            and self.client_reader.decoder.peek_frame() is not None
        )

    async def _hand_over(self, connection_scope: trio.CancelScope) -> bool:
        """The connection on the forwarder (`_may_forward`), the response pump standing aside meanwhile; False once
        the connection has ended."""
        assert self._read_scope is not None
        self._handing_over, self._aside = True, trio.Event()
        self._read_scope.cancel()
        await self._aside.wait()
        try:
            again = not self._quiet() or await self._forwarded()
        finally:
            self._scope = connection_scope
            self._handing_over = False
            self._back.set()
            self._back = trio.Event()
        if not again or self._closing:
            connection_scope.cancel()
            return False
        return True

    async def _forwarded(self) -> bool:
        """The connection on the forwarder; True when it comes back to the pumps (a request not the forwarder's)."""
        forwarder, upstream = self._forwarder, self.upstream
        assert forwarder is not None and isinstance(self.client, trio.SocketStream | NativeTlsStream)
        assert isinstance(upstream, trio.SocketStream | NativeTlsStream)
        limits = ForwarderLimits(
            self.limits.max_in_flight, self.limits.max_frame_bytes, self.limits.buffer_size, self.limits.idle_timeout
        )

        def started(phase: Any) -> None:
            self._phase = phase
            if self._draining:
                phase.hold()

        # A byte or request rate: what its requests or answers may spend there, taken from the meters now, renewed once
        # a term while they spend (what was spent counted, topped up), settled when the connection comes back.
        held = allowances.Allowances(self.session.quota, forwarder.module, self._forward_want)
        with trio.CancelScope() as self._scope:
            try:
                initial, grant = self.client_reader.decoder.take_buffered(), self.session.ctx.grant
                self.client_reader.decoder.park()
                assert self.upstream_reader is not None
                self.upstream_reader.decoder.park()
                telemetry = self.telemetry
                tally = telemetry.forwarded_tally(forwarder.module) if telemetry is not None else None
                table = self._forward_table
                sampling = spans = None
                if self._sampling is not None and telemetry is not None:
                    sampling = (self._sampling, telemetry.draw())  # the first request's draw, made here
                    telemetry.drawn, spans = None, telemetry.forwarded_spans
                used = None if grant is None else functools.partial(grants.sessions_used, self.session.ctx, grant)
                rewrite = self._rewrite_forwarded
                outcome = await forwarder.serve(
                    self.client,
                    upstream,
                    table,
                    rewrite,
                    limits,
                    started,
                    initial,
                    grant,
                    tally,
                    held,
                    sampling,
                    spans,
                    used,
                )
            finally:
                self._phase = None
                held.settle()
            return self._forward_ended(outcome)
        return False  # closed from outside (close_now)

    async def _rewrite_forwarded(self, api_key: int, version: int, frame: bytes, note: tuple[int, int] | None) -> bytes:
        """An answer the forwarder passed back (KIP-951 leader hints; a VC's answer with a message, an id it may not
        pass, a fetch session that changed), through the stages' response sides, once the listeners of the brokers it
        names are open and the state it changes is durable. On the Trio thread, where the session and the state it reads
        (the VC image, the fetch-session table, the worker link) are only ever touched; the forwarder's thread goes on
        with the other connections meanwhile (proxy/net/forwarder.py)."""
        result = self.session.forwarded_answer(api_key, version, frame, note)
        if result.muted and self._phase is not None:
            self._phase.hold()  # the next request waits for the mute, with the session
        if result.brokers:
            await self.on_brokers(result.brokers, result.full_broker_list)
        await self._persist(result.writes)
        return b"".join(result.pieces)

    def _forward_ended(self, outcome: Outcome) -> bool:
        log.debug("%s: the forwarder served %d requests (%s)", self.name, outcome.requests, outcome.kind)
        self.requests += outcome.requests
        self.forwarded += outcome.requests
        if self.telemetry is not None:
            self.telemetry.forwarded(outcome.requests, outcome.drawn)
        self._sent += outcome.responses + len(outcome.in_flight)
        self._received += outcome.responses
        self._last_active = self._clock.current_time()
        kind = outcome.kind
        if kind == "yield":
            if outcome.leftover:
                self.client_reader.decoder.receive_data(outcome.leftover)
            if outcome.broker_leftover:
                assert self.upstream_reader is not None
                self.upstream_reader.decoder.receive_data(outcome.broker_leftover)
            # Their answers come first, through the stages (and the metrics, as the Python path's own).
            adopted = self.session.adopt(item[:4] for item in outcome.in_flight)
            if self.telemetry is not None:
                for ex, (*_, size, age_ns, sampled) in zip(adopted, outcome.in_flight, strict=True):
                    self.telemetry.adopted(ex, size, age_ns, sampled)
            return True
        if kind == "client-closed":
            return False
        if kind == "idle":
            log.info("%s: closing: %s", self.name, outcome.reason)
            self.close_reason = outcome.reason
            return False
        if kind == "frame":
            raise FrameError(outcome.reason)
        if kind == "protocol":
            raise ProtocolViolation(outcome.reason)
        if kind in ("broker-closed", "client-failed"):
            self.close_reason = outcome.reason
            raise trio.BrokenResourceError(outcome.reason)
        return False  # detached: the connection is closing

    def stop_reading(self) -> None:
        """Graceful drain: take no new requests, let the outstanding ones complete."""
        self.close_reason = "proxy draining"
        self._draining = True
        if self._phase is not None:
            self._phase.hold()  # the forwarder hands the connection back with what is outstanding
        if self._request_scope is not None and self._between_requests:
            self._request_scope.cancel()

    def close_now(self, reason: str) -> None:
        """End the connection from outside (its VC binding changed): the client reconnects."""
        if self._scope is not None:
            self._close(self._scope, reason)

    def _wake(self) -> None:
        if self._work_awaited:
            self._work_awaited = False
            self._work.set()
            self._work = trio.Event()

    def _answered(self) -> None:
        self._last_active = self._clock.current_time()
        if self._room_awaited:
            self._room_awaited = False
            self._room.set()
            self._room = trio.Event()

    async def _wait_room(self) -> None:
        """Until the next answer leaves."""
        self._room_awaited = True
        await self._room.wait()

    async def _wait_work(self) -> None:
        """Until the request pump queues something (or ends)."""
        self._work_awaited = True
        await self._work.wait()

    def _close(self, scope: trio.CancelScope, reason: str) -> None:
        log.info("%s: closing: %s", self.name, reason)
        self.close_reason = reason
        self._closing = True
        scope.cancel()

    async def _watchdog(self, connection_scope: trio.CancelScope) -> None:
        """The login deadline, then connections.max.idle.ms: nothing in flight for that long closes it."""
        with trio.move_on_after(self.limits.authentication_timeout):
            await self._login_done.wait()
        if not self._logged_in:
            self._close(connection_scope, f"not authenticated within {self.limits.authentication_timeout:g} s")
            return
        while True:
            idle_until = self._last_active + self.limits.idle_timeout
            if trio.current_time() < idle_until:
                await trio.sleep_until(idle_until)
            elif self._handing_over:  # the forwarder keeps connections.max.idle.ms meanwhile
                await self._back.wait()
            elif not self.session.in_flight:
                self._close(connection_scope, f"idle for {self.limits.idle_timeout:g} s (connections_max_idle_ms)")
                return
            else:  # a request is waiting upstream (a long poll, a rebalance): not idle until it is answered
                await self._wait_room()

    async def _open_upstream(self, login: bool = True) -> trio.abc.Stream:
        """The broker connection, opened by the first request that needs it (`login`: the proxy's own)."""
        if self.upstream is not None and self._upstream_login != login:
            # A relayed login on a connection opened with the proxy's login: once everything sent on it is
            # answered, a new one without (never the proxy's identity for a principal it does not know).
            while self._received < self._sent:
                await self._wait_room()
            old, self.upstream, self.upstream_reader, self.upstream_writer = self.upstream, None, None, None
            self._upstream_open = trio.Event()
            await trio.aclose_forcefully(old)
        if self.upstream is None:
            self._upstream_login = login
            try:
                self.upstream = await self.connect_upstream(login)
            except OSError as exc:
                if self.telemetry is not None:
                    self.telemetry.upstream(False, str(exc))
                log.warning("%s: upstream unavailable: %s", self.name, exc)
                self.close_reason = f"upstream unavailable: {exc}"
                raise trio.BrokenResourceError(self.close_reason) from exc
            if self.telemetry is not None:
                self.telemetry.upstream(True)
            limits = self.limits
            self.upstream_reader = FrameReader(
                self.upstream, limits.max_frame_bytes, limits.buffer_size, limits.initial_buffer_size
            )
            self.upstream_writer = FrameWriter(self.upstream)
            self._upstream_open.set()
        return self.upstream

    def _check_login(self) -> None:
        authenticator = self.session.authenticator
        if not self._logged_in and authenticator is not None and authenticator.complete:
            self._logged_in = True
            self._login_done.set()
            self.client_reader.decoder.set_limits(self.limits.max_frame_bytes, self.limits.buffer_size)

    def _hold(self, pieces: Sequence[bytes | memoryview]) -> None:
        """An answer for the client, written with the next _flush_client."""
        if self._tap is not None:
            for piece in pieces:
                self._tap.write(piece)
        self._to_client.extend(pieces)

    async def _flush_client(self) -> None:
        """The answers held, all their pieces in one system call when the kernel has room."""
        if self._to_client:
            pieces, self._to_client = self._to_client, []
            await self.client_writer.send(pieces)

    async def _send(self, pieces: Sequence[bytes | memoryview]) -> None:
        self._hold(pieces)
        await self._flush_client()

    async def _flush_upstream(self) -> None:
        if self._to_upstream:
            pieces, self._to_upstream = self._to_upstream, []
            assert self.upstream_writer is not None
            await self.upstream_writer.send(pieces)

    async def _persist(self, records: list[Any]) -> None:
        """State changes (new links, learned topic ids) are durable before the client hears of them."""
        if records:
            if self.write_state is None:
                raise RuntimeError("state changes without a state store")
            await self.write_state(records)

    async def _request_pump(self, connection_scope: trio.CancelScope) -> None:
        session = self.session
        reader = self.client_reader
        with trio.CancelScope() as self._request_scope:
            while True:
                # Like a broker muting a channel with a response pending: read no further ahead than this.
                while len(session.in_flight) >= self.limits.max_in_flight:
                    await self._flush_upstream()
                    if self._draining:
                        break
                    self._between_requests = True
                    await self._wait_room()
                    self._between_requests = False
                if not reader.frame_ready():
                    await self._flush_upstream()  # before the reader moves the bytes the frames held point into
                if self._draining:  # it came while this pump was busy with the last request
                    break
                self._between_requests = True
                if self._forwarder is not None:
                    await reader.fill()  # a whole request, not taken: the forwarder may take it from here
                    if self._may_forward():
                        self._between_requests = False  # a drain now holds the phase (the forwarder hands back)
                        frame = decision = result = trace = out = None  # nothing holds the buffers the phase lets go
                        if not await self._hand_over(connection_scope):
                            return
                        continue
                frame = await reader.next_frame()
                self._between_requests = False
                if frame is None:
                    break
                self._last_active = self._clock.current_time()
                telemetry = self.telemetry
                started = time.time_ns() if telemetry is not None else 0
                decision = session.on_request(frame)
                if decision.action is not Action.FORWARD or decision.delay > 0:
                    await self._flush_upstream()  # what went before waits for no check, delay, answer or close
                while decision.action is Action.CHECK:  # slow work may lead to more (a listing, then deletes)
                    assert decision.resume is not None
                    if decision.work is not None:
                        result = await decision.work()
                    else:
                        assert decision.check is not None
                        result = await self._password_check(decision.check)
                    decision = decision.resume(result)
                if decision.delay > 0:  # a stage holds the request back (quotas)
                    await trio.sleep(decision.delay)
                trace = telemetry.on_request(frame, decision, started) if telemetry is not None else None
                self.requests += 1
                if decision.action is Action.FORWARD:
                    login = not session.ctx.relayed  # relayed: the broker authenticates the client itself
                    if self.upstream is None or self._upstream_login != login:
                        await self._flush_upstream()
                        await self._open_upstream(login)
                    out = self._to_upstream
                    for before in decision.before or ():
                        assert before.frame is not None
                        out.append(before.frame)
                        self._sent += 1
                    if decision.pieces is None:
                        out.append(frame)
                    else:
                        out.extend(decision.pieces)
                    if not reader.frame_ready():
                        await self._flush_upstream()
                    if decision.pending is not None:
                        self._sent += 1
                    if trace is not None and telemetry is not None and decision.pending is None:
                        telemetry.on_forwarded(trace)  # acks=0: done once forwarded
                elif decision.action is Action.CLOSE:
                    self._close(connection_scope, decision.reason)
                    return
                else:
                    self._check_login()
                    # A local answer does no I/O: without this, one client pipelining requests the proxy
                    # answers itself would hold the event loop for as long as its buffer lasts.
                    await trio.lowlevel.checkpoint()
                    if self._reading and (local := session.next_local_reply()) is not None:
                        # The oldest outstanding, and the response pump waits on the broker with nothing
                        # to write: answered here, in order (nothing the broker will answer comes before it).
                        if await self._answer_local(local, connection_scope):
                            return
                        continue
                self._wake()
        # Client finished sending (EOF or drain): what was read goes upstream; the response pump ends once
        # everything is answered.
        await self._flush_upstream()
        self._requests_done = True
        if self._reading and not session.in_flight:  # the response pump waits on the broker for nothing
            connection_scope.cancel()
        self._wake()

    async def _password_check(self, check: PasswordCheck) -> bool:
        """A login's password check: after the wait a spent failed-login budget sets (the connection waits,
        within its login deadline), in its address's turn on the check threads."""
        if check.wait > 0:
            await trio.sleep(check.wait)
        if not check.cpu:
            return check.run()
        PASSWORD_CHECKS.resize(self.limits.password_check_threads, self.limits.password_checks_per_ip)
        return await PASSWORD_CHECKS.run(check.key, check.run)

    async def _answer_local(self, local: Exchange, connection_scope: trio.CancelScope) -> bool:
        """Send a request's local answer (the oldest outstanding, dequeued); True if the connection closes."""
        assert local.reply is not None
        await self._flush_client()
        if local.decide is not None and self.decide_state is not None:
            # Decided again against the log, one replica at a time; answered once applied here.
            body, local.writes = await self.decide_state(local.decide)
            local.reply = codec.response_frame(local.correlation_id, local.response_header_version, body)
        else:
            await self._persist(local.writes)
            audit.emit(local.audit)  # the local decision stands (no state topic to decide against)
        if local.close_after and self.limits.failed_authentication_delay > 0:
            # Kafka's connection.failed.authentication.delay.ms: a guesser waits for each answer.
            await trio.sleep(self.limits.failed_authentication_delay * local.delay_factor)
        await self._send((local.reply,))
        log_local_answer(local, self.name)
        if self.telemetry is not None:
            self.telemetry.on_reply(local, [local.reply], None)
        self._answered()
        if local.close_after:
            log.info("%s: closing after failed authentication", self.name)
            self.close_reason = "failed authentication"
            connection_scope.cancel()
            return True
        return False

    async def _response_pump(self, connection_scope: trio.CancelScope) -> None:
        session = self.session
        while True:
            local = session.next_local_reply()
            if local is not None:
                if await self._answer_local(local, connection_scope):
                    return
                continue
            reader = self.upstream_reader
            if self._to_client and (reader is None or not reader.frame_ready()):
                # Before a wait, or a receive that moves the bytes the answers held use. The send may wait for
                # a client that reads slowly, and a request answered locally may arrive meanwhile (its wake
                # would be lost): look again from the top.
                await self._flush_client()
                continue
            if not session.in_flight:
                if self._requests_done:
                    connection_scope.cancel()
                    return
                if self._handing_over:  # the request pump serves the forwarder's phase: back once it has ended
                    frame = result = answered = None  # nothing holds the buffers the phase lets go
                    self._aside.set()
                    await self._back.wait()
                    continue
                if reader is None:  # no broker connection yet: the request pump opens one, then wakes this
                    await self._wait_work()
                    continue
                # Nothing outstanding: wait on the broker's socket itself, so the next answer wakes this pump
                # directly (no hand-off from the request pump). The request pump answers a local request that
                # comes meanwhile itself (it is the oldest outstanding, and this pump writes nothing while it
                # waits); whatever the broker sends now is an answer to a request already queued, or unasked:
                # on_response refuses a frame with nothing outstanding, and an end of stream closes the client's.
            elif self._received >= self._sent:  # queued, not sent yet (a relayed login's connection is opening)
                await self._wait_work()
                continue
            elif reader is None:
                await self._upstream_open.wait()
                reader = self.upstream_reader
                assert reader is not None
            self._reading = True
            try:
                if session.in_flight:
                    frame = await reader.next_frame()
                else:  # the wait a hand-over cancels (the request pump's `_may_forward` needs it)
                    with trio.CancelScope() as scope:
                        self._read_scope = scope
                        frame = await reader.next_frame()
                    if scope.cancelled_caught:
                        continue
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                if self.upstream_reader is not reader:  # closed under the wait: a relayed login's replaced it
                    continue
                raise
            finally:
                self._reading = False
                self._read_scope = None
            if frame is None:
                self.close_reason = "upstream broker closed the connection"
                raise trio.BrokenResourceError(self.close_reason)
            self._received += 1
            result = session.on_response(frame)
            answered = result.exchange
            if result.close is not None or result.brokers or result.writes or (answered and answered.close_after):
                await self._flush_client()  # the answers before go out first, whatever this one waits for
            if result.close is not None:  # the proxy's own request on this connection failed
                self._close(connection_scope, result.close)
                return
            if answered is not None and answered.close_after and self.limits.failed_authentication_delay > 0:
                await trio.sleep(self.limits.failed_authentication_delay * answered.delay_factor)  # relayed login
            if result.brokers:
                await self.on_brokers(result.brokers, result.full_broker_list)
            await self._persist(result.writes)
            self._hold(result.pieces)
            more = session.in_flight and session.in_flight[0].reply is None and self._received < self._sent
            if not (more and reader.frame_ready()) or (answered is not None and answered.close_after):
                await self._flush_client()
            if self.telemetry is not None and answered is not None:
                self.telemetry.on_reply(answered, result.pieces, frame)
            self._answered()
            if not self._logged_in:
                self._check_login()
            if answered is not None and answered.close_after:
                log.info("%s: closing after failed authentication (the broker's answer)", self.name)
                self.close_reason = "failed authentication"
                connection_scope.cancel()
                return
