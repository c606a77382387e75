"""The proxy server, a thin coordinator: the client listeners (listeners.py, TLS and SNI in handshake.py),
upstream discovery (discovery.py), sessions (sessions.py), the tenancy state's upkeep (upkeep.py), the HTTP
endpoints, config reload (reloader.py applies through `reconfigure`) and drain."""

from __future__ import annotations

import dataclasses
import logging
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from ..auth.credentials import CredentialStore
from ..auth.guard import LoginGuard
from ..config import ProxyConfig
from ..core import apiversions
from ..core.admission import ConnectionLimiter
from ..core.endpoints import BrokerEndpoint, UnknownServerName
from ..tenancy.fetch_sessions import FETCH_SESSIONS
from ..tenancy.placeholders import PLACEHOLDERS
from ..tenancy.regex import REGEXES
from ..tenancy.settings import VcSettings
from . import upstream as up
from .connection import ClientConnection, ConnectionLimits
from .discovery import BrokerRegistry, discovery_loop
from .forwarder import FORWARDER
from .handshake import listener_context, principal_mapper, secure
from .listeners import Listeners, listener_layout, peer, peer_address
from .listings import UpstreamListings
from .reloader import Reloader
from .sessions import new_session

if TYPE_CHECKING:
    from ..observability.tracing import Telemetry
    from ..reload import Decision
    from ..state.service import TenancyService
    from .worker_link import WorkerLink

log = logging.getLogger(__name__)


def build_tables(tenancy: bool) -> None:
    """Build what a first connection would otherwise build on the event loop, from the APIs' schemas: the ApiVersions
    table and the tenancy rules' check. Cached: a function of the code alone (the suite's fork server builds them
    once for all its proxies). The forwarder's entries are checked in (proxy/core/forward_plans.py)."""
    if tenancy:
        from ..tenancy.handlers import registry

        apiversions.tenant_versions()
        registry()
    else:
        apiversions.proxy_versions()


async def _prepare(tenancy: bool, done: trio.Event) -> None:
    """`build_tables` in a thread, beside the replay, before any port is bound."""
    await trio.to_thread.run_sync(build_tables, tenancy)
    done.set()


class ProxyServer:
    def __init__(self, config: ProxyConfig, link: WorkerLink | None = None):
        self.config = config
        # A worker of `serve --workers N` (proxy/net/workers.py): its parent listens, admits and serves
        # the HTTP endpoints; connections arrive through the link.
        self.link = link
        self.layout = listener_layout(config)
        self.registry = BrokerRegistry()
        self.bootstrap_addresses = [up.split_host_port(s) for s in config.upstream.bootstrap_servers]
        self.upstream_security = up.UpstreamSecurity.from_config(config.upstream)
        self.relay_security = dataclasses.replace(self.upstream_security, sasl=None)
        # Client-side security: TLS context, certificate principal rules, SASL credentials (reconfigure()
        # replaces them for what comes next).
        self.tls_context = listener_context(config, self.layout.sni)
        self.principal_mapper = principal_mapper(config)
        self.credentials = CredentialStore.from_mapping(config.credentials.as_mapping())
        self.connections: set[ClientConnection] = set()
        self.cluster_id: str | None = None
        self.tenancy: TenancyService | None = None  # virtual clusters, when tenancy.enabled
        self.vc_settings: VcSettings | None = None  # each VC's settings: the state topic's, then the config's
        self.ready = trio.Event()  # first discovery done and broker listeners bound
        self.discovered_at: float | None = None  # trio.current_time() of the last successful discovery
        self.discovery_error: str | None = None  # why the last discovery failed, if it did
        self.draining = False
        self.telemetry: Telemetry | None = None  # spans and metrics (proxy/observability), when enabled
        self._handler_nursery: trio.Nursery | None = None
        self._connection_id = 0
        limits = config.limits
        self.connection_limits = ConnectionLimits.from_config(limits)
        # The process' tables every tenant fills: bounded per VC and in all.
        FETCH_SESSIONS.bound(limits.max_fetch_sessions, limits.max_fetch_sessions_per_vc)
        PLACEHOLDERS.bound(limits.max_placeholders, limits.max_placeholders_per_vc)
        REGEXES.bound(limits.max_regexes, limits.max_regexes_per_vc)
        self.admission = ConnectionLimiter(
            limits.max_connections, limits.max_connections_per_ip, limits.max_connection_creation_rate
        )
        self.login_guard = LoginGuard.from_config(limits)
        # Each broker's ApiVersions answers, for clients that have not logged in (no broker connection for them).
        self.upstream_versions: dict[int | None, apiversions.UpstreamVersions] = {}
        # Principal -> holds the right on kafka-cluster (writes VC caps, the VC default, global quota levels):
        # None is the config's super admins (proxy/core/stages/quotas.py); the rights module sets it here.
        self.cluster_operator: Callable[[str | None], bool] | None = None
        # The management plane's questions to the brokers (a VC's groups and transactional ids), asked with
        # the proxy's own upstream login.
        self.listings = UpstreamListings(
            lambda: list(self.registry.brokers.values()),
            self.upstream_security,
            config.upstream.connect_timeout_seconds,
        )
        self.listeners = Listeners(config.listeners.host, self.layout, self.admission, self._admit)
        self.listening_nodes = self.listeners.nodes  # node id -> port

    def reconfigure(self, decision: Decision) -> None:
        """Apply a reloaded config that proxy/reload.py accepted (only reloadable keys differ). Everything is
        built before anything is swapped, so a failure leaves the running config whole; open connections
        keep the context and login they have, new handshakes, upstream connections and logins get the new."""
        config = decision.config
        assert config is not None
        tls_context = listener_context(config, self.layout.sni)
        mapper = principal_mapper(config)
        security = up.UpstreamSecurity.from_config(config.upstream)
        users = None if self.tenancy is not None else CredentialStore.from_mapping(config.credentials.as_mapping())
        self.config = config
        self.tls_context, self.principal_mapper = tls_context, mapper
        self.upstream_security = self.listings.security = security
        self.relay_security = dataclasses.replace(security, sasl=None)
        if users is not None:
            self.credentials.replace(users.users)
            # As with users at runtime: a login whose credential was changed or removed does not outlive it.
            for connection in list(self.connections):
                check = getattr(connection.session.authenticator, "stale_login", None)
                why = check() if check is not None else None
                if why is not None:
                    connection.close_now(why)
        elif self.tenancy is not None and decision.users and self._handler_nursery is not None:
            # With tenancy the users are the state topic's: the file's changed entries are seeds, written once.
            self._handler_nursery.start_soon(self.tenancy.reseed_users, config.credentials.as_mapping())

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until `drain()` has finished; started() once the bootstrap port is bound."""
        from ..observability.tracing import Telemetry

        self.telemetry = Telemetry.from_config(self.config, lambda: self.cluster_id)
        try:
            await self._run(task_status)
        finally:
            if self.telemetry is not None:  # after every connection has closed: their spans are queued
                await self.telemetry.aclose()

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as handlers:
            self._handler_nursery = handlers
            prepared = trio.Event()
            handlers.start_soon(_prepare, self.config.tenancy.enabled, prepared)
            if self.config.metrics.enabled and self.link is None:  # before the replay: /readyz says why
                await handlers.start(self._serve_http)
            if self.config.tenancy.enabled:  # replayed before any port is bound: no tenant sees a stale view
                from ..state.service import TenancyService
                from . import upkeep

                self.tenancy = TenancyService.from_config(self.config)
                # The users are the state topic's from now on (the config's are seeds): read at each login.
                service = self.tenancy
                self.credentials = CredentialStore(source=lambda: service.image.users.users)
                self.vc_settings = VcSettings(self.config.tenancy, lambda: service.image)
                await handlers.start(self.tenancy.run)
                service.image.limits = self.config.tenancy.state_limits.build()  # the replayed image's, for good
                shared = self.config.tenancy.quota_sharing
                if shared.enabled:  # replicas hold each quota together (a worker is one of them)
                    from ..state.quota_sharing import QuotaSharing
                    from ..state.service import client_config

                    if self.link is not None:  # while the topic is down, a worker's share is the instance's / N
                        shared = shared.model_copy(update={"replicas": shared.replicas * self.link.count})
                    sharing = QuotaSharing(
                        lambda: service.image,
                        service.wait_for_change,
                        service.store.topic,
                        service.store.replication_factor,
                        client_config(self.config),
                        shared,
                    )
                    handlers.start_soon(sharing.run)
                elif self.link is not None:  # no topic: the workers share through their parent
                    handlers.start_soon(
                        self.link.share_quotas,
                        lambda: service.image,
                        shared.report_interval_ms / 1000,
                        shared.stale_after_ms / 1000,
                    )
                handlers.start_soon(upkeep.follow_bindings, service, lambda: self.connections)
                handlers.start_soon(
                    upkeep.sweep_orphans, service, lambda: self.config.tenancy.state_check_interval_seconds
                )
            await prepared.wait()  # before any port is bound
            if self.link is not None:
                from ..observability.http import server_readiness

                handlers.start_soon(partial(discovery_loop, self, announce=False))
                metrics = self.telemetry.metrics if self.telemetry is not None else None
                if metrics is not None:  # vcproxy_ready{worker=...}: this worker's own readiness
                    metrics.readiness = lambda: server_readiness(self)
                self.link.guard = self.login_guard  # failed logins count for the instance
                self.link.answers["ready"] = lambda: list(server_readiness(self))
                self.link.answers["metrics"] = lambda: metrics.render().decode() if metrics is not None else ""
                await handlers.start(self.link.serve, self._serve_handed, self.ready)
                task_status.started()
                return
            with self.listeners.scope:
                async with trio.open_nursery() as listeners:
                    self.listeners.nursery = listeners
                    await listeners.start(self.listeners.serve_port, self.config.listeners.bootstrap_port, None)
                    listeners.start_soon(discovery_loop, self)
                    task_status.started()
            # Listeners are gone (drain): connections finish in the handler nursery.

    async def _serve_http(self, *, task_status: trio.TaskStatus[None]) -> None:
        """/metrics, /healthz and /readyz (proxy/observability/http.py)."""
        from ..observability.http import HttpServer, server_readiness

        metrics = self.telemetry.metrics if self.telemetry is not None else None
        http = HttpServer(self.config.metrics.host, self.config.metrics.port, lambda: server_readiness(self), metrics)
        if metrics is not None:
            metrics.readiness = http.readiness
        await http.run(task_status=task_status)

    async def drain(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded by drain_timeout), then return."""
        log.info("draining: %d connection(s)", len(self.connections))
        self.draining = True
        self.listeners.scope.cancel()
        for connection in list(self.connections):
            connection.stop_reading()
        with trio.move_on_after(self.config.limits.drain_timeout_seconds):
            while self.connections:
                await trio.sleep(0.05)
        if self._handler_nursery is not None:
            self._handler_nursery.cancel_scope.cancel()

    async def on_brokers(self, seen: list[BrokerEndpoint], full_list: bool) -> None:
        """Called with endpoints seen in metadata; binds a listener for every new broker."""
        await self.listeners.add_brokers(self.registry.update(seen))

    # -- connections ----------------------------------------------------------------------------

    def _admit(self, client: trio.SocketStream, node_id: int | None, ip: str) -> None:
        self._serve_handed(client, node_id, ip, lambda: self.admission.release(ip))

    def _serve_handed(self, client: trio.SocketStream, node_id: int | None, ip: str, done: Callable[[], None]) -> None:
        """Serve a connection admitted by this process's listeners or, in a worker, by its parent; `done`
        releases the admission once the connection has ended."""
        assert self._handler_nursery is not None
        self._handler_nursery.start_soon(self._handle_then, client, node_id, done)

    async def _handle_then(self, client: trio.SocketStream, node_id: int | None, done: Callable[[], None]) -> None:
        try:
            await self._handle(client, node_id)
        finally:
            done()

    def _upstream_for(self, node_id: int | None) -> list[tuple[str, int]]:
        if node_id is None:
            known = [(b.host, b.port) for b in self.registry.brokers.values()]
            return self.bootstrap_addresses + [a for a in known if a not in self.bootstrap_addresses]
        broker = self.registry.brokers.get(node_id)
        return [] if broker is None else [(broker.host, broker.port)]

    async def _handle(self, client: trio.SocketStream, node_id: int | None) -> None:
        self._connection_id += 1
        name = f"conn-{self._connection_id} {peer(client)} -> {'bootstrap' if node_id is None else f'broker {node_id}'}"
        telemetry = self.telemetry.connection(peer_address(client), node_id) if self.telemetry is not None else None
        tls = self.config.listeners.tls
        secured = await secure(client, self.tls_context, tls, self.principal_mapper, name, telemetry)
        if secured is None:
            if telemetry is not None:
                telemetry.on_close("TLS handshake failed")
            return
        downstream, tls_principal, server_name = secured
        if self.layout.sni is not None:
            try:
                node_id = self.layout.sni.route(server_name)
            except UnknownServerName as exc:
                log.info("%s: closing: %s", name, exc)
                if telemetry is not None:
                    telemetry.on_close(str(exc))
                await trio.aclose_forcefully(downstream)
                return
            if node_id is not None:
                name = f"{name.rpartition(' -> ')[0]} -> broker {node_id} ({server_name})"
                if telemetry is not None:
                    telemetry.routed(node_id)
        timeout = self.config.upstream.connect_timeout_seconds
        session = new_session(self, name, tls_principal, node_id, peer_address(client))

        async def connect_upstream(login: bool) -> trio.abc.Stream:
            targets = self._upstream_for(node_id)
            if not targets:
                raise OSError(f"broker {node_id} is not in the upstream metadata")
            # Without the proxy's login for a relayed one (TLS stays as configured): the client logs in itself.
            security = self.upstream_security if login else self.relay_security
            stream, address = await up.connect_first(targets, timeout, security)
            session.upstream_broker(self.registry.broker_key(node_id, address))
            return stream

        connection = ClientConnection(
            downstream,  # a TLS stream on SSL listeners; FrameReader handles both
            connect_upstream,
            session,
            limits=self.connection_limits,
            on_brokers=self.on_brokers,
            name=name,
            write_state=self.tenancy.write if self.tenancy is not None else None,
            decide_state=self.tenancy.decide if self.tenancy is not None else None,
            tap_dir=Path(self.config.debug.tap_dir) if self.config.debug.tap_dir else None,
            telemetry=telemetry,
            forwarder=FORWARDER,
        )
        self.connections.add(connection)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)


async def serve(
    config: ProxyConfig,
    config_path: str | Path | None = None,
    log_level: str | None = None,
    link: WorkerLink | None = None,
) -> None:
    """Run until SIGINT/SIGTERM, then drain; with `config_path`, reload it when it (or a file it names)
    changes, and on SIGHUP (`log_level`: the command line's, which a reload does not override). With
    `link`, as a worker of `serve --workers N` (proxy/net/workers.py)."""
    server = ProxyServer(config, link)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.run)  # not start(): a signal must work while tenancy replays
            if config_path is not None:
                nursery.start_soon(Reloader(server, config_path, keep_log_level=log_level is not None).run)
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                await server.drain()
                nursery.cancel_scope.cancel()
                break
