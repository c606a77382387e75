"""The forwarder's Trio side: a connection's plain requests served by one native thread.

Per request, a connection's Python path costs its pumps, the session's stages and two passes of Trio's run
loop; on a machine where the broker and the clients run between two requests, each of those meets cold
caches (docs/performance.md). The forwarder (native/src/forward.rs) moves the requests that no stage changes, and
their answers, between the two sockets itself. A connection goes to it when nothing is outstanding
(`ClientConnection`), and comes back when a request the forwarder does not serve is next: the forwarder stops reading
there and returns the bytes it read and did not serve, which the Python path then reads first, with the
requests it sent whose answers have not come: the session takes them as its own (`ProxySession.adopt`), so
Python's pumps answer them first, in order. Which requests are plain is the session's decision
(proxy/core/forward_table.py; for a virtual cluster's connection, on the grant it made: proxy/core/grants.py).

Only where each socket is plain TCP or TLS in the compiled parts (native_tls.py: the forwarder reads and writes
through the connection's session), and with no tap. With tracing on, the forwarder draws each
request's trace id as the sampler would, and keeps a record of each sampled one it serves (copies of the request and
its answer) from which Python makes the span, in batches and when the phase ends. With metrics on, the forwarder
counts what it serves in a native tally that /metrics folds in (proxy/observability/metrics.py), and an API whose
answer's error codes it cannot find stays Python's. The fetch sessions its Fetches named are taken from the grant
every `SESSIONS_EVERY` and when the phase ends, and marked used in the ownership table (proxy/core/grants.py), which
tells the other workers once a `SESSIONS_EVERY`.
`VCPROXY_PURE=1` turns it off with the rest of the compiled parts, and so does `VCPROXY_FORWARDER=0` alone.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from ..core.forward_table import forward_entries
from ..core.session import ProxySession
from ..protocol import native
from ..tenancy.fetch_sessions import FETCH_SESSIONS
from .allowances import Allowances
from .native_tls import NativeTlsStream

log = logging.getLogger(__name__)

# An answer the forwarder hands to Python to rewrite (KIP-951 leader hints; a VC's answer with a message, an id it may
# not pass, a fetch session that changed): (api key, version, the answer, a Fetch's session and epoch or None).
Asked = tuple[int, int, bytes, tuple[int, int] | None]
Rewrite = Callable[[int, int, bytes, tuple[int, int] | None], Awaitable[bytes]]

# How long after the first span record of a batch the others that come are taken with it (the exporters batch spans
# once a second: a span written a little later costs nothing, a wake-up per sampled request would).
SPANS_BATCH = 0.25
# How often the fetch sessions served phases used are marked used (proxy/tenancy/fetch_sessions.py): a VC replacing its
# whole share of the table within this long could evict a session in use.
SESSIONS_EVERY = 1.0


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str  # yield, client-closed, broker-closed, client-failed, frame, protocol, detached, idle
    reason: str
    requests: int  # forwarded
    responses: int  # answers written
    # On a hand-back (kind "yield"): the client's bytes read and not served, the broker's read and not written,
    # and the requests sent whose answers were not written, as (correlation id, api key, version, a Fetch's session
    # and epoch or None, the request's size, ns since it was read, and for one a span samples: its draw and a copy).
    leftover: bytes = b""
    broker_leftover: bytes = b""
    in_flight: tuple[tuple[int, int, int, tuple[int, int] | None, int, int, tuple[int, bytes] | None], ...] = ()
    drawn: int | None = None  # tracing: the sampling draw of the first request not served, if it had one


@dataclass(frozen=True, slots=True)
class ForwarderLimits:
    max_in_flight: int
    max_frame_bytes: int
    buffer_bytes: int
    idle_timeout: float


class Forwarder:
    """One per process, made on first use (a worker process makes its own, after it starts)."""

    def __init__(self, module: Any, pipe_bytes: int | None = None):
        self._module = module
        self._pipe_bytes = pipe_bytes  # a large answer's pipe (splice): None, the kernel's default; tests ask for less
        self._native: Any = None
        self._pid = 0
        # Per entries tuple (forward_entries' caches give one object per table: hashing its plans would cost tens of
        # µs at each hand-over), with the tuple itself, so that its id is not another's while it is here.
        self._tables: dict[int, tuple[tuple[Any, ...], Any]] = {}
        self._waiters: dict[int, trio.Event] = {}  # phase id -> set when it has ended
        self._rewriters: dict[int, trio.MemorySendChannel[Asked]] = {}  # phase id -> its answers to rewrite
        self._span_takers: dict[int, Callable[[], None]] = {}  # phase id -> takes its span records (tracing)
        self._spans_waiting: set[int] = set()  # phases the forwarder said have records, not taken since
        self._spans_due = trio.Event()
        self._sessions_takers: dict[int, Callable[[], None]] = {}  # phase id -> marks its fetch sessions used
        self._sessions_due = trio.Event()  # set while some phase has a taker
        self._token: Any = None  # the Trio run whose task reads the ends

    @property
    def module(self) -> Any:
        """vcproxy_native: its `Tally` is what the forwarder counts in (metrics on)."""
        return self._module

    def _forwarder(self) -> Any:
        # Its thread is this process' own: a child forked after it started makes its own.
        if self._native is None or self._pid != os.getpid():
            self._native, self._pid = self._module.Forwarder(self._pipe_bytes), os.getpid()
            self._waiters.clear()
            self._rewriters.clear()
            self._span_takers.clear()
        token = trio.lowlevel.current_trio_token()
        if self._token is not token:  # one reader of the ends per Trio run (a test suite runs many)
            self._token = token
            self._waiters.clear()
            self._rewriters.clear()
            self._span_takers.clear()
            self._spans_waiting.clear()
            self._spans_due = trio.Event()
            self._sessions_takers.clear()
            self._sessions_due = trio.Event()
            trio.lowlevel.spawn_system_task(self._read_ends, self._native, name="forwarder ends")
            trio.lowlevel.spawn_system_task(self._take_spans, name="forwarder spans")
            trio.lowlevel.spawn_system_task(self._take_sessions, name="forwarder fetch sessions")
        return self._native

    async def _read_ends(self, forwarder: Any) -> None:
        """Wakes each phase's waiter when the forwarder says it ended, gives each phase the answers it asks Python to
        rewrite, and notes those it says have span records waiting (`_take_spans` takes them): one descriptor for
        every connection, nothing for a connection with none."""
        while True:
            await trio.lowlevel.wait_readable(forwarder.notify_fd())
            for phase_id in forwarder.finished():  # first: it reads the eventfd, so what comes after wakes it again
                waiter = self._waiters.pop(phase_id, None)
                if waiter is not None:
                    waiter.set()
            for phase_id, *asked in forwarder.rewrites():
                rewriter = self._rewriters.get(phase_id)
                if rewriter is not None:
                    rewriter.send_nowait(tuple(asked))  # unbounded: one answer a phase at a time (it waits for it)
            ready = forwarder.spans_ready()
            if ready:
                self._spans_waiting.update(ready)
                self._spans_due.set()

    async def _take_spans(self) -> None:
        """Takes the span records of the phases that have some, `SPANS_BATCH` after the first of them said so: one
        wake-up for every connection's, whatever their number, and none while no sampled request is served."""
        while True:
            await self._spans_due.wait()
            await trio.sleep(SPANS_BATCH)
            self._spans_due = trio.Event()
            waiting, self._spans_waiting = self._spans_waiting, set()
            for phase_id in waiting:
                taker = self._span_takers.get(phase_id)
                if taker is not None:
                    try:
                        taker()
                    except Exception:  # telemetry never costs a connection, nor this task the others' spans
                        log.exception("forwarder: cannot make the spans of a phase")

    async def _take_sessions(self) -> None:
        """Every `SESSIONS_EVERY` while any phase may use fetch sessions: one wake-up for every connection's."""
        while True:
            await self._sessions_due.wait()
            await trio.sleep(SESSIONS_EVERY)
            if not self._sessions_takers:
                self._sessions_due = trio.Event()
            for take in list(self._sessions_takers.values()):
                try:
                    take()
                except Exception:  # one connection's bookkeeping never costs the others theirs
                    log.exception("forwarder: cannot mark a phase's fetch sessions used")
            FETCH_SESSIONS.tell_uses()  # with workers: every connection's in one message per VC and broker

    def table_for(self, session: ProxySession) -> Any | None:
        """The compiled table of the session's plain requests, or None when there are none."""
        entries = forward_entries(session)
        if not entries:
            return None
        known = self._tables.get(id(entries))
        if known is not None and known[0] is entries:
            return known[1]
        if len(self._tables) >= 64:  # a handful of distinct clients in practice; bounded all the same
            self._tables.clear()
        table = self._module.ForwardTable(entries)
        self._tables[id(entries)] = (entries, table)
        return table

    async def serve(
        self,
        client: trio.SocketStream | NativeTlsStream,
        broker: trio.SocketStream | NativeTlsStream,
        table: Any,
        hook: Rewrite,
        limits: ForwarderLimits,
        started: Callable[[Any], None],
        initial: bytes = b"",
        grant: Any = None,
        tally: Any = None,
        allowances: Allowances | None = None,
        sampling: tuple[int, int | None] | None = None,
        spans: Callable[[list[Any], int], None] | None = None,
        sessions_used: Callable[[], None] | None = None,
    ) -> Outcome:
        """Until the forwarder hands the connection back or it ends; `started` gets the phase (hold(): a drain). An
        answer the forwarder passes back is rewritten by `hook`, in this task: the forwarder's thread serves the other
        connections meanwhile, and this one waits for it.
        Cancelled (the connection is closed from outside), it takes the connection back first. With a `tally`
        (metrics on), each request served is counted in it. What a quota meters is served only within `allowances`
        (proxy/net/allowances.py), renewed while the phase lasts. With `sampling` (tracing: the sampler's bound, and
        the draw made for the first request), a request drawn under the bound is served and its record handed to
        `spans` (with the wall clock's ns at the forwarder's epoch) when the forwarder says records wait and at the
        end, or, with no `spans` or no room for it, handed back with its draw. `sessions_used` is called every
        `SESSIONS_EVERY` and at the end (the grant's fetch sessions served)."""
        native = self._forwarder()
        tls = client.session if isinstance(client, NativeTlsStream) else None  # its bytes go through its session
        socket = client.transport_stream.socket if isinstance(client, NativeTlsStream) else client.socket
        broker_tls = broker.session if isinstance(broker, NativeTlsStream) else None
        broker_socket = broker.transport_stream.socket if isinstance(broker, NativeTlsStream) else broker.socket
        phase = native.attach(
            socket.fileno(),
            broker_socket.fileno(),
            table,
            limits.max_in_flight,
            limits.max_frame_bytes,
            limits.buffer_bytes,
            initial,
            grant,
            tally,
            allowances.request if allowances is not None else None,
            allowances.answer if allowances is not None else None,
            allowances.count if allowances is not None else None,
            (*sampling, spans is not None) if sampling is not None else None,
            tls,
            broker_tls,
        )
        ended = self._waiters[phase.id] = trio.Event()  # before any checkpoint: the reader runs only at one
        asking, asked = trio.open_memory_channel[Asked](math.inf)
        self._rewriters[phase.id] = asking
        started(phase)
        idle = False
        tick = allowances.tick() if allowances is not None else None
        next_tick = trio.current_time() + tick[0] if tick is not None else math.inf

        def take_spans() -> None:
            if spans is not None and (records := phase.take_spans()):
                spans(records, time.time_ns() - native.now_ns())

        if spans is not None:
            self._span_takers[phase.id] = take_spans
        if sessions_used is not None:
            self._sessions_takers[phase.id] = sessions_used
            self._sessions_due.set()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_rewrite_each, phase, hook, asked, ended)
                while not ended.is_set():
                    # connections.max.idle.ms, as the watchdog keeps it: idle with nothing outstanding.
                    now = trio.current_time()
                    with trio.move_on_at(min(now + max(limits.idle_timeout - phase.idle(), 1.0), next_tick)):
                        await ended.wait()
                    if tick is not None and not ended.is_set() and trio.current_time() >= next_tick:
                        next_tick = trio.current_time() + tick[1]()
                    if not ended.is_set() and phase.in_flight() == 0 and phase.idle() >= limits.idle_timeout:
                        idle = True
                        phase.detach()
                        break
                asking.close()  # the rewrite under way (if any) finishes; none starts
        finally:
            self._rewriters.pop(phase.id, None)
            if not ended.is_set():
                phase.detach()  # the forwarder ignores it for a phase already over
                with trio.CancelScope(shield=True):  # the sockets stay open until it has let them go
                    await ended.wait()
        self._span_takers.pop(phase.id, None)
        take_spans()
        if self._sessions_takers.pop(phase.id, None) is not None:
            assert sessions_used is not None
            sessions_used()
        outcome = phase.outcome()
        assert outcome is not None
        kind, reason, requests, responses, leftover, broker_leftover, in_flight, drawn = outcome
        if idle:
            kind, reason = "idle", f"idle for {limits.idle_timeout:g} s (connections_max_idle_ms)"
        return Outcome(kind, reason, requests, responses, leftover, broker_leftover, tuple(in_flight), drawn)


async def _rewrite_each(phase: Any, hook: Rewrite, asked: trio.MemoryReceiveChannel[Asked], ended: trio.Event) -> None:
    """Each answer the phase asks Python to rewrite, through `hook`, given back to the forwarder. The phase waits for
    it, so the rewrite runs whole once begun (its writes are made durable): a connection closing meanwhile waits too."""
    async for api_key, version, frame, note in asked:
        if ended.is_set():
            continue  # over (the connection failed or closed): nothing waits for it
        try:
            with trio.CancelScope(shield=True):
                answer = await hook(api_key, version, frame, note)
        except Exception as exc:  # the session's reason ends the connection, as on the Python path
            phase.rewrite_failed(f"{type(exc).__qualname__}: {exc}")
        else:
            phase.rewritten(answer)


def _load() -> Forwarder | None:
    module = native.forwarding()
    return Forwarder(module) if module is not None else None


FORWARDER = _load()
