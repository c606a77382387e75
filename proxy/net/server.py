"""The proxy server: a bootstrap listener, one listener per upstream broker, and discovery."""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, field

import trio

from ..config import ProxyConfig
from ..core.endpoints import BrokerEndpoint, ListenerLayout
from ..core.session import ProxySession
from . import upstream as up
from .connection import ClientConnection

log = logging.getLogger(__name__)


@dataclass
class BrokerRegistry:
    """Upstream brokers by node id, as last seen in metadata."""

    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)

    def update(self, seen: list[BrokerEndpoint]) -> list[int]:
        """Record endpoints; returns node ids that are new."""
        new = []
        for endpoint in seen:
            if endpoint.node_id not in self.brokers:
                new.append(endpoint.node_id)
            self.brokers[endpoint.node_id] = endpoint
        return new


class ProxyServer:
    def __init__(self, config: ProxyConfig):
        self.config = config
        lc = config.listeners
        self.layout = ListenerLayout(lc.effective_advertised_host, lc.bootstrap_port, lc.effective_broker_port_base)
        self.registry = BrokerRegistry()
        self.bootstrap_addresses = [up.split_host_port(s) for s in config.upstream.bootstrap_servers]
        self.connections: set[ClientConnection] = set()
        self.listening_nodes: dict[int, int] = {}  # node id -> port
        self.cluster_id: str | None = None
        self.ready = trio.Event()  # first discovery done and broker listeners bound
        self._listener_nursery: trio.Nursery | None = None
        self._handler_nursery: trio.Nursery | None = None
        self._listener_scope = trio.CancelScope()
        self._connection_id = 0

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until `drain()` has finished; started() once the bootstrap port is bound."""
        async with trio.open_nursery() as handlers:
            self._handler_nursery = handlers
            with self._listener_scope:
                async with trio.open_nursery() as listeners:
                    self._listener_nursery = listeners
                    await listeners.start(self._serve_port, self.config.listeners.bootstrap_port, None)
                    listeners.start_soon(self._discovery_loop)
                    task_status.started()
            # Listeners are gone (drain): connections finish in the handler nursery.

    async def drain(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded by drain_timeout), then return."""
        log.info("draining: %d connection(s)", len(self.connections))
        self._listener_scope.cancel()
        for connection in list(self.connections):
            connection.stop_reading()
        with trio.move_on_after(self.config.limits.drain_timeout_seconds):
            while self.connections:
                await trio.sleep(0.05)
        if self._handler_nursery is not None:
            self._handler_nursery.cancel_scope.cancel()

    # -- discovery ------------------------------------------------------------------------------

    async def _discovery_loop(self) -> None:
        delay = 0.5
        while True:
            try:
                view = await self._discover_once()
            except (OSError, trio.TooSlowError, Exception) as exc:  # keep serving; retry with backoff
                log.warning("upstream discovery failed: %s", exc)
                await trio.sleep(delay)
                delay = min(delay * 2, self.config.upstream.metadata_refresh_seconds)
                continue
            delay = 0.5
            if self.cluster_id != view.cluster_id:
                log.info("upstream cluster id %s, brokers %s", view.cluster_id, sorted(b.node_id for b in view.brokers))
                self.cluster_id = view.cluster_id
            await self.on_brokers(view.brokers, True)
            if not self.ready.is_set():
                ports = {n: p for n, p in sorted(self.listening_nodes.items())}
                log.info(
                    "proxy ready: bootstrap %s:%d, broker ports %s",
                    self.layout.advertised_host,
                    self.layout.bootstrap_port,
                    ports,
                )
                self.ready.set()
            await trio.sleep(self.config.upstream.metadata_refresh_seconds)

    async def _discover_once(self) -> up.ClusterView:
        addresses = [(b.host, b.port) for b in self.registry.brokers.values()] + self.bootstrap_addresses
        timeout = self.config.upstream.connect_timeout_seconds
        stream = await up.connect_any(addresses, timeout)
        async with stream:
            with trio.fail_after(timeout):
                return await up.describe_cluster(stream)

    async def on_brokers(self, seen: list[BrokerEndpoint], full_list: bool) -> None:
        """Called with endpoints seen in metadata; binds a listener for every new broker."""
        for node_id in self.registry.update(seen):
            if node_id in self.listening_nodes or self._listener_nursery is None:
                continue
            port = self.layout.broker_port(node_id)
            try:
                await self._listener_nursery.start(self._serve_port, port, node_id)
            except OSError as exc:
                log.error("cannot listen for broker %d on port %d: %s", node_id, port, exc)

    # -- listeners and connections --------------------------------------------------------------

    async def _serve_port(self, port: int, node_id: int | None, *, task_status: trio.TaskStatus[None]) -> None:
        listeners = await trio.open_tcp_listeners(port, host=self.config.listeners.host)
        if node_id is not None:
            self.listening_nodes[node_id] = port
        what = "bootstrap" if node_id is None else f"broker {node_id}"
        log.info("listening on %s:%d (%s)", self.config.listeners.host, port, what)
        task_status.started()
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener, node_id)

    async def _accept_loop(self, listener: trio.SocketListener, node_id: int | None) -> None:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS):
                        log.error("accept failed (%s); retrying", exc)
                        await trio.sleep(0.1)
                        continue
                    raise
                assert self._handler_nursery is not None
                self._handler_nursery.start_soon(self._handle, stream, node_id)

    def _upstream_for(self, node_id: int | None) -> list[tuple[str, int]]:
        if node_id is None:
            known = [(b.host, b.port) for b in self.registry.brokers.values()]
            return self.bootstrap_addresses + [a for a in known if a not in self.bootstrap_addresses]
        broker = self.registry.brokers.get(node_id)
        return [] if broker is None else [(broker.host, broker.port)]

    async def _handle(self, client: trio.SocketStream, node_id: int | None) -> None:
        self._connection_id += 1
        peer = _peer(client)
        name = f"conn-{self._connection_id} {peer} -> {'bootstrap' if node_id is None else f'broker {node_id}'}"
        targets = self._upstream_for(node_id)
        try:
            if not targets:
                raise OSError(f"broker {node_id} is not in the upstream metadata")
            upstream = await up.connect_any(targets, self.config.upstream.connect_timeout_seconds)
        except OSError as exc:
            log.warning("%s: upstream unavailable: %s", name, exc)
            await trio.aclose_forcefully(client)
            return
        limits = self.config.limits
        connection = ClientConnection(
            client,
            upstream,
            ProxySession(self.layout),
            max_frame_bytes=limits.max_frame_bytes,
            buffer_size=limits.receive_buffer_bytes,
            on_brokers=self.on_brokers,
            name=name,
        )
        self.connections.add(connection)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


async def serve(config: ProxyConfig) -> None:
    """Run until SIGINT/SIGTERM, then drain."""
    import signal

    server = ProxyServer(config)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                await server.drain()
                nursery.cancel_scope.cancel()
                break
