"""The client listeners: a bootstrap port, one port per upstream broker (or one SNI port for all), each
accepting within the admission limits and handing admitted connections on."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable

import trio

from ..config import ProxyConfig
from ..core.admission import ConnectionLimiter
from ..core.endpoints import ListenerLayout, SniRouting

log = logging.getLogger(__name__)

# Hands an admitted connection on (to the connection handler's nursery): stream, broker node id or None, address.
Admit = Callable[[trio.SocketStream, int | None, str], None]


def listener_layout(config: ProxyConfig) -> ListenerLayout:
    """Which ports the listeners bind and what they advertise: the config's `listeners`."""
    lc = config.listeners
    sni = None
    if lc.sni is not None:
        port = lc.sni.advertised_port or lc.bootstrap_port
        sni = SniRouting(lc.sni.broker_host_pattern, lc.sni.bootstrap_host, port)
    return ListenerLayout(lc.effective_advertised_host, lc.bootstrap_port, lc.effective_broker_port_base, sni)


class Listeners:
    def __init__(self, host: str, layout: ListenerLayout, admission: ConnectionLimiter, admit: Admit):
        self.host = host
        self.layout = layout
        self.admission = admission
        self.admit = admit
        self.nodes: dict[int, int] = {}  # node id -> port
        self.nursery: trio.Nursery | None = None  # where broker ports are added (set while serving)
        self.scope = trio.CancelScope()  # cancelled on drain: no listener accepts any more
        self._refusals_logged: dict[str, float] = {}  # client address -> when a refusal was last logged

    async def add_brokers(self, node_ids: list[int]) -> None:
        """Binds a listener for every new broker (none with SNI: the server name picks the broker)."""
        for node_id in node_ids:
            if self.layout.sni is not None:
                continue
            if node_id in self.nodes or self.nursery is None:
                continue
            port = self.layout.broker_port(node_id)
            try:
                await self.nursery.start(self.serve_port, port, node_id)
            except OSError as exc:
                log.error("cannot listen for broker %d on port %d: %s", node_id, port, exc)

    async def serve_port(self, port: int, node_id: int | None, *, task_status: trio.TaskStatus[None]) -> None:
        listeners = await trio.open_tcp_listeners(port, host=self.host)
        if node_id is not None:
            self.nodes[node_id] = port
        what = "bootstrap" if node_id is None else f"broker {node_id}"
        if self.layout.sni is not None:
            what = f"SNI: bootstrap and every broker as {self.layout.sni.broker_host_pattern}"
        log.info("listening on %s:%d (%s)", self.host, port, what)
        task_status.started()
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener, node_id)

    async def _accept_loop(self, listener: trio.SocketListener, node_id: int | None) -> None:
        async with listener:
            delay = 0.0
            while True:
                if delay > 0:  # max.connection.creation.rate: like the broker, stop accepting for a while
                    await trio.sleep(delay)
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS):
                        log.error("accept failed (%s); retrying", exc)
                        await trio.sleep(0.1)
                        continue
                    raise
                delay = self.admission.accept_delay(trio.current_time())
                address = peer_address(stream)
                ip = address[0] if address is not None else "?"
                refusal = self.admission.admit(ip)
                if refusal is not None:
                    self._log_refusal(ip, refusal)
                    await trio.aclose_forcefully(stream)
                    continue
                self.admit(stream, node_id, ip)

    def _log_refusal(self, ip: str, why: str) -> None:
        """One line per client address and second at most: a flood must not become a flood of log lines."""
        now = trio.current_time()
        if now - self._refusals_logged.get(ip, -1.0) >= 1.0:
            if len(self._refusals_logged) > 10_000:
                self._refusals_logged.clear()
            self._refusals_logged[ip] = now
            log.warning("refusing a connection from %s: %s", ip, why)


def peer_address(stream: trio.SocketStream) -> tuple[str, int] | None:
    try:
        host, port = stream.socket.getpeername()[:2]
        return str(host), int(port)
    except OSError:
        return None


def peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"
