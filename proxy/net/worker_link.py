"""A worker's end of its parent (proxy/net/workers.py; the messages are proxy/core/handoff.py's): client
sockets handed over on one Unix socket (SCM_RIGHTS), the control channel on another. When the parent is
gone (its end of either channel closes, as the kernel does when it dies, even by SIGKILL), the worker drains
and exits as on SIGTERM."""

from __future__ import annotations

import array
import logging
import math
import os
import signal
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from ..core import handoff
from ..tenancy.fetch_sessions import FETCH_SESSIONS
from ..tenancy.regex import REGEXES

if TYPE_CHECKING:
    from ..auth.guard import LoginGuard
    from ..quotas.fleet import FleetUsage
    from ..tenancy.model import TenancyImage

log = logging.getLogger(__name__)

# What the worker does with a handed-over client: stream, broker node id or None, address, `done` to call
# once the connection has ended.
Serve = Callable[[trio.SocketStream, int | None, str, Callable[[], None]], None]


def parse_worker_arg(value: str) -> tuple[int, int, int, int]:
    """`--worker INDEX/COUNT:HANDOFF_FD:CONTROL_FD`, as the parent writes it."""
    place, handoff_fd, control_fd = value.split(":")
    index, count = place.split("/")
    return int(index), int(count), int(handoff_fd), int(control_fd)


class WorkerLink:
    def __init__(self, index: int, count: int, handoff_fd: int, control_fd: int):
        self.index, self.count = index, count
        self._handoff = trio.socket.from_stdlib_socket(socket.socket(fileno=handoff_fd))
        self._control = trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=control_fd)))
        # To the parent: never bounded by dropping (a lost "closed" would hold an admission slot for
        # good); the parent reads its workers without pause, and what goes out is bounded by what the
        # parent admitted.
        self._out, self._out_rx = trio.open_memory_channel[bytes](math.inf)
        self.answers: dict[str, Callable[[], Any]] = {}  # what the parent may ask: "metrics", "ready"
        self.fleet: FleetUsage | None = None  # quota sharing through the parent (when not through the topic)
        self.guard: LoginGuard | None = None  # the failed-login budgets, shared with the other workers
        self._image: Callable[[], TenancyImage] | None = None

    def send(self, message: dict[str, Any]) -> None:
        self._out.send_nowait(handoff.encode(message))

    async def serve(
        self, serve: Serve, ready: trio.Event, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Take connections from the parent; `up` once `ready` (the state replayed and the upstream
        discovered, with the version tables built): the parent binds no port before every worker is."""
        FETCH_SESSIONS.tell = lambda told: self.send({"session": told})
        REGEXES.tell = lambda told: self.send({"regex": told})
        REGEXES.share = 1 / self.count
        if self.guard is not None:
            self.guard.share(lambda told: self.send({"login": told}), self.count)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write)
            nursery.start_soon(self._read_control)
            task_status.started()
            await ready.wait()
            self.send({"up": True})
            await self._receive_clients(serve)

    async def _receive_clients(self, serve: Serve) -> None:
        while True:
            data, ancdata, flags, _ = await self._handoff.recvmsg(handoff.MAX_HEADER + 1, socket.CMSG_SPACE(16))
            fds = _fds(ancdata)
            if not data and not fds:
                self._parent_gone("the parent closed the handoff channel")
                return
            header = handoff.read_handoff(data)
            if isinstance(header, str) or len(fds) != 1 or flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
                for fd in fds:
                    os.close(fd)
                log.error("dropping a handoff from the parent: %s", header if isinstance(header, str) else "bad fds")
                continue
            number, node_id, ip = header
            try:
                sock = socket.socket(fileno=fds[0])
            except OSError as exc:
                os.close(fds[0])
                log.error("a handed-over connection is not a socket: %s", exc)
                self.send({"closed": number})
                continue
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
            serve(stream, node_id, ip, lambda n=number: self.send({"closed": n}))

    async def _read_control(self) -> None:
        lines = handoff.Lines()
        while True:
            chunk = await self._control.receive_some(65536)
            if not chunk:
                self._parent_gone("the parent closed the control channel")
                return
            messages, dropped = lines.feed(chunk)
            for why in dropped:
                log.error("dropping a control line from the parent: %s", why)
            for message in messages:
                self._on(message)

    def _on(self, message: dict[str, Any]) -> None:
        ask = message.get("ask")
        if isinstance(ask, str) and ask in self.answers:
            self.send({"id": message.get("id"), ask: self.answers[ask]()})
        elif "session" in message:
            FETCH_SESSIONS.learn(message["session"])
        elif "regex" in message:
            REGEXES.learn(message["regex"])
        elif "login" in message and self.guard is not None:
            self.guard.learn(message["login"], trio.current_time())  # the SASL servers' clock
        elif "quota" in message and self.fleet is not None and self._image is not None:
            value = message["quota"]
            meters = self._image().quotas.meters
            now = meters.clock()
            for key, amount in self.fleet.receive(value.encode() if isinstance(value, str) else None, now):
                meters.absorb(key, amount, now)

    async def _write(self) -> None:
        async for data in self._out_rx:
            await self._control.send_all(data)

    def _parent_gone(self, why: str) -> None:
        log.warning("%s: draining", why)
        os.kill(os.getpid(), signal.SIGTERM)

    async def share_quotas(self, image: Callable[[], TenancyImage], interval: float, stale_after: float) -> None:
        """Quotas across this instance's workers through the parent, when not shared through the usage topic
        (`tenancy.quota_sharing.enabled: false`): proxy/quotas/fleet.py with the parent relaying every report
        to every worker. Until the first quota is defined nothing is sent."""
        from ..quotas.fleet import FleetUsage

        while not image().quotas.values:
            await trio.sleep(interval)
        fleet = FleetUsage(replica=f"worker-{self.index}", replicas=self.count, stale_after=stale_after)
        self.fleet, self._image = fleet, image
        meters = image().quotas.meters
        meters.fleet = fleet
        fleet.start(meters.clock())
        while True:
            await trio.sleep(interval)
            meters = image().quotas.meters  # a replay replaces the image and its meters
            meters.fleet = fleet
            for value in fleet.report(meters.clock()):
                self.send({"quota": value.decode()})


def _fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)
