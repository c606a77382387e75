"""Upstream discovery: which brokers the cluster has (asked at start and every metadata_refresh_seconds),
and which broker an upstream connection reached."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import trio

from ..config import ProxyConfig
from ..core.endpoints import BrokerEndpoint, ListenerLayout
from . import upstream as up

if TYPE_CHECKING:
    from ..observability.tracing import Telemetry

log = logging.getLogger(__name__)


@dataclass
class BrokerRegistry:
    """Upstream brokers by node id, as last seen in metadata."""

    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    _bootstrap_upstreams: int = 0  # bootstrap upstream connections to unadvertised addresses (broker_key)

    def update(self, seen: list[BrokerEndpoint]) -> list[int]:
        """Record endpoints; returns node ids that are new."""
        new = []
        for endpoint in seen:
            if endpoint.node_id not in self.brokers:
                new.append(endpoint.node_id)
            self.brokers[endpoint.node_id] = endpoint
        return new

    def broker_key(self, node_id: int | None, address: tuple[str, int]) -> Hashable:
        """Which broker an upstream connection reached, as fetch sessions are owned (their ids are unique per
        broker only): a broker port's node id; for the bootstrap, the node advertising the address it reached,
        else (a bootstrap address no broker advertises: a name, a load balancer) a key of this upstream
        connection alone, so that what it opens is usable on it only and never collides with another broker's."""
        if node_id is not None:
            return node_id
        for broker in self.brokers.values():
            if (broker.host, broker.port) == address:
                return broker.node_id
        self._bootstrap_upstreams += 1
        return ("bootstrap", address, self._bootstrap_upstreams)


class Discovering(Protocol):
    """What discovery reads and sets of the server (proxy/net/server.py's ProxyServer)."""

    config: ProxyConfig
    layout: ListenerLayout
    registry: BrokerRegistry
    bootstrap_addresses: list[tuple[str, int]]
    upstream_security: up.UpstreamSecurity
    telemetry: Telemetry | None
    cluster_id: str | None
    discovered_at: float | None
    discovery_error: str | None
    ready: trio.Event
    listening_nodes: dict[int, int]

    async def on_brokers(self, seen: list[BrokerEndpoint], full_list: bool) -> None: ...


async def discovery_loop(server: Discovering, *, announce: bool = True) -> None:
    """Ask the cluster for its brokers until cancelled, backing off on failure; the first success makes
    the server ready and, with `announce`, logs "proxy ready" (a worker's parent does that)."""
    delay = 0.5
    while True:
        try:
            view = await discover_once(server)
        except (OSError, trio.TooSlowError, Exception) as exc:  # keep serving; retry with backoff
            log.warning("upstream discovery failed: %s", exc)
            server.discovery_error = str(exc) or type(exc).__name__
            if server.telemetry is not None:
                server.telemetry.upstream_attempt(None, False)
            await trio.sleep(delay)
            delay = min(delay * 2, server.config.upstream.metadata_refresh_seconds)
            continue
        delay = 0.5
        server.discovered_at, server.discovery_error = trio.current_time(), None
        if server.telemetry is not None:
            server.telemetry.upstream_attempt(None, True)
        if server.cluster_id != view.cluster_id:
            log.info("upstream cluster id %s, brokers %s", view.cluster_id, sorted(b.node_id for b in view.brokers))
            server.cluster_id = view.cluster_id
        await server.on_brokers(view.brokers, True)
        if not server.ready.is_set():
            if announce:
                _log_ready(server)
            server.ready.set()
        await trio.sleep(server.config.upstream.metadata_refresh_seconds)


async def discover_once(server: Discovering) -> up.ClusterView:
    addresses = [(b.host, b.port) for b in server.registry.brokers.values()] + server.bootstrap_addresses
    timeout = server.config.upstream.connect_timeout_seconds
    stream = await up.connect_any(addresses, timeout, server.upstream_security)
    async with stream:
        with trio.fail_after(timeout):
            return await up.describe_cluster(stream)


def _log_ready(server: Discovering) -> None:
    layout = server.layout
    if layout.sni is not None:
        log.info(
            "proxy ready: SNI on port %d, brokers %s",
            layout.bootstrap_port,
            {n: layout.sni.host(n) for n in sorted(server.registry.brokers)},
        )
    else:
        ports = {n: p for n, p in sorted(server.listening_nodes.items())}
        log.info("proxy ready: bootstrap %s:%d, broker ports %s", layout.advertised_host, layout.bootstrap_port, ports)
