"""The proxy server: a bootstrap listener, one listener per upstream broker (or one SNI port), and discovery."""

from __future__ import annotations

import contextvars
import dataclasses
import errno
import logging
import signal
import ssl
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from ..auth import ANONYMOUS
from ..auth.credentials import CredentialStore
from ..auth.guard import LoginGuard
from ..auth.sasl import Preauthenticated, SaslServer
from ..auth.tls import USER_PREFIX, PrincipalMapper, distinguished_name, server_context
from ..config import ProxyConfig
from ..core import apiversions
from ..core.admission import ConnectionLimiter
from ..core.endpoints import BrokerEndpoint, ListenerLayout, SniRouting, UnknownServerName
from ..core.session import Authenticator, ProxySession
from ..tenancy.engine import Policy
from ..tenancy.model import TenancyImage
from ..tenancy.settings import VcSettings
from . import upstream as up
from .connection import ClientConnection, ConnectionLimits
from .listings import UpstreamListings
from .reloader import Reloader

if TYPE_CHECKING:
    from ..observability.tracing import ConnectionTelemetry, Telemetry
    from ..reload import Decision
    from ..state.service import TenancyService

log = logging.getLogger(__name__)

# The TLS server name of the handshake the current task is doing: the SNI callback runs inside
# do_handshake(), in the task of the connection it is for.
_handshake: contextvars.ContextVar[_ServerName] = contextvars.ContextVar("handshake")


@dataclass
class _ServerName:
    name: str | None = None  # what the client asked for
    refused: str | None = None  # why no broker answers to it


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
        sni = None
        if lc.sni is not None:
            port = lc.sni.advertised_port or lc.bootstrap_port
            sni = SniRouting(lc.sni.broker_host_pattern, lc.sni.bootstrap_host, port)
        self.layout = ListenerLayout(
            lc.effective_advertised_host, lc.bootstrap_port, lc.effective_broker_port_base, sni
        )
        self.registry = BrokerRegistry()
        self.bootstrap_addresses = [up.split_host_port(s) for s in config.upstream.bootstrap_servers]
        self.upstream_security = up.UpstreamSecurity.from_config(config.upstream)
        self.relay_security = dataclasses.replace(self.upstream_security, sasl=None)
        # Client-side security: TLS context, certificate principal rules, SASL credentials (reconfigure()
        # replaces them for what comes next).
        self.tls_context = self._listener_context(config)
        self.principal_mapper = PrincipalMapper("DEFAULT" if lc.tls is None else lc.tls.principal_mapping_rules)
        self.credentials = CredentialStore.from_mapping(config.credentials.as_mapping())
        self.connections: set[ClientConnection] = set()
        self.listening_nodes: dict[int, int] = {}  # node id -> port
        self.cluster_id: str | None = None
        self.tenancy: TenancyService | None = None  # virtual clusters, when tenancy.enabled
        self.vc_settings: VcSettings | None = None  # each VC's settings: the state topic's, then the config's
        self.ready = trio.Event()  # first discovery done and broker listeners bound
        self.discovered_at: float | None = None  # trio.current_time() of the last successful discovery
        self.discovery_error: str | None = None  # why the last discovery failed, if it did
        self.draining = False
        self.telemetry: Telemetry | None = None  # spans and metrics (proxy/observability), when enabled
        self._listener_nursery: trio.Nursery | None = None
        self._handler_nursery: trio.Nursery | None = None
        self._listener_scope = trio.CancelScope()
        self._connection_id = 0
        limits = config.limits
        self.connection_limits = ConnectionLimits.from_config(limits)
        self.admission = ConnectionLimiter(
            limits.max_connections, limits.max_connections_per_ip, limits.max_connection_creation_rate
        )
        self.login_guard = LoginGuard.create(
            limits.max_failed_authentications, limits.failed_authentication_window_seconds
        )
        self._refusals_logged: dict[str, float] = {}  # client address -> when a refusal was last logged
        # Each broker's ApiVersions answers, for clients that have not logged in (no broker connection for them).
        self.upstream_versions: dict[int | None, apiversions.UpstreamVersions] = {}
        # Principal -> holds the right on kafka-cluster (writes VC caps, the VC default, global quota levels):
        # None is the config's super admins (proxy/core/stages/quotas.py); the rights module sets it here.
        self.cluster_operator: Callable[[str | None], bool] | None = None
        self._bootstrap_upstreams = 0  # bootstrap upstream connections to unadvertised addresses (_broker_key)
        # The management plane's questions to the brokers (a VC's groups and transactional ids), asked with
        # the proxy's own upstream login.
        self.listings = UpstreamListings(
            lambda: list(self.registry.brokers.values()),
            self.upstream_security,
            config.upstream.connect_timeout_seconds,
        )

    def _listener_context(self, config: ProxyConfig) -> ssl.SSLContext | None:
        tls = config.listeners.tls
        if tls is None:
            return None
        context = server_context(tls.certfile, tls.keyfile, tls.cafile, tls.client_auth)
        if self.layout.sni is not None:
            context.sni_callback = _sni_callback(self.layout.sni)
        return context

    def reconfigure(self, decision: Decision) -> None:
        """Apply a reloaded config that proxy/reload.py accepted (only reloadable keys differ). Everything is
        built before anything is swapped, so a failure leaves the running config whole; open connections
        keep the context and login they have, new handshakes, upstream connections and logins get the new."""
        config = decision.config
        assert config is not None
        lc = config.listeners
        tls_context = self._listener_context(config)
        mapper = PrincipalMapper("DEFAULT" if lc.tls is None else lc.tls.principal_mapping_rules)
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
            if self.config.metrics.enabled:  # before the replay: /readyz says why the proxy is not ready
                await handlers.start(self._serve_http)
            if self.config.tenancy.enabled:  # replayed before any port is bound: no tenant sees a stale view
                from ..state.service import TenancyService

                self.tenancy = TenancyService.from_config(self.config)
                # The users are the state topic's from now on (the config's are seeds): read at each login.
                service = self.tenancy
                self.credentials = CredentialStore(source=lambda: service.image.users.users)
                self.vc_settings = VcSettings(self.config.tenancy, lambda: service.image)
                await handlers.start(self.tenancy.run)
                service.image.limits = self.config.tenancy.state_limits.build()  # the replayed image's, for good
                handlers.start_soon(self._follow_bindings, self.tenancy)
                handlers.start_soon(self._sweep_orphans, self.tenancy)
            with self._listener_scope:
                async with trio.open_nursery() as listeners:
                    self._listener_nursery = listeners
                    await listeners.start(self._serve_port, self.config.listeners.bootstrap_port, None)
                    listeners.start_soon(self._discovery_loop)
                    task_status.started()
            # Listeners are gone (drain): connections finish in the handler nursery.

    async def _follow_bindings(self, tenancy: TenancyService) -> None:
        """Close the connections whose VC binding a followed change undid (VC deleted, principal moved or
        unbound, or newly bound while on the physical cluster): the client reconnects under its new binding."""
        seen = tenancy.image.version
        while True:
            seen = await tenancy.wait_for_change(seen)
            for connection in list(self.connections):
                why = connection.session.stale_binding()
                if why is not None:
                    connection.close_now(why)

    async def _sweep_orphans(self, tenancy: TenancyService) -> None:
        """Orphaned physical topics (proxy/tenancy/orphans.py decides): forget those gone or linked again,
        delete those past their VC's orphan_grace_seconds, with the state topic's upstream login. Every
        replica sweeps; a topic another deleted first is gone, and its records are tombstones either way."""
        import time

        from ..state.store import StateStoreError
        from ..tenancy import orphans

        store = tenancy.store
        while True:
            await trio.sleep(self.config.tenancy.state_check_interval_seconds)
            if not tenancy.image.orphans:
                continue
            try:
                existing = await trio.to_thread.run_sync(store.topic_names, 10, abandon_on_cancel=True)
                plan = orphans.sweep(tenancy.image, existing, time.time())
                if plan.delete:
                    results = await trio.to_thread.run_sync(
                        store.delete_topics, plan.delete, 30, abandon_on_cancel=True
                    )
                    for physical, error in results.items():
                        orphan = tenancy.image.orphans.get(physical)
                        left = f"left by virtual cluster {orphan.vc}" if orphan is not None else "orphaned"
                        if error is None or "UNKNOWN_TOPIC" in error.upper():
                            log.warning("deleted physical topic %s, %s past its grace period", physical, left)
                            plan.forget.append(physical)
                        else:
                            log.warning("could not delete physical topic %s (%s): %s", physical, left, error)
                records = [r for physical in plan.forget for r in orphans.forget_records(tenancy.image, physical)]
                if records:
                    await tenancy.write(records)
            except (StateStoreError, trio.TooSlowError, OSError) as exc:
                log.warning("orphaned topics: sweep failed, retrying later: %s", exc)

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
                self.discovery_error = str(exc) or type(exc).__name__
                if self.telemetry is not None:
                    self.telemetry.upstream_attempt(None, False)
                await trio.sleep(delay)
                delay = min(delay * 2, self.config.upstream.metadata_refresh_seconds)
                continue
            delay = 0.5
            self.discovered_at, self.discovery_error = trio.current_time(), None
            if self.telemetry is not None:
                self.telemetry.upstream_attempt(None, True)
            if self.cluster_id != view.cluster_id:
                log.info("upstream cluster id %s, brokers %s", view.cluster_id, sorted(b.node_id for b in view.brokers))
                self.cluster_id = view.cluster_id
            await self.on_brokers(view.brokers, True)
            if not self.ready.is_set():
                # Build the version tables before saying ready: the first build costs seconds of schema
                # loading, which must not land on a client's first request.
                if self.config.tenancy.enabled:
                    apiversions.tenant_versions()
                else:
                    apiversions.proxy_versions()
                if self.layout.sni is not None:
                    log.info(
                        "proxy ready: SNI on port %d, brokers %s",
                        self.layout.bootstrap_port,
                        {n: self.layout.sni.host(n) for n in sorted(self.registry.brokers)},
                    )
                else:
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
        stream = await up.connect_any(addresses, timeout, self.upstream_security)
        async with stream:
            with trio.fail_after(timeout):
                return await up.describe_cluster(stream)

    async def on_brokers(self, seen: list[BrokerEndpoint], full_list: bool) -> None:
        """Called with endpoints seen in metadata; binds a listener for every new broker."""
        for node_id in self.registry.update(seen):
            if self.layout.sni is not None:  # one port for all: the server name picks the broker
                continue
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
        if self.layout.sni is not None:
            what = f"SNI: bootstrap and every broker as {self.layout.sni.broker_host_pattern}"
        log.info("listening on %s:%d (%s)", self.config.listeners.host, port, what)
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
                address = _peer_address(stream)
                ip = address[0] if address is not None else "?"
                refusal = self.admission.admit(ip)
                if refusal is not None:
                    self._log_refusal(ip, refusal)
                    await trio.aclose_forcefully(stream)
                    continue
                assert self._handler_nursery is not None
                self._handler_nursery.start_soon(self._handle_admitted, stream, node_id, ip)

    def _log_refusal(self, ip: str, why: str) -> None:
        """One line per client address and second at most: a flood must not become a flood of log lines."""
        now = trio.current_time()
        if now - self._refusals_logged.get(ip, -1.0) >= 1.0:
            if len(self._refusals_logged) > 10_000:
                self._refusals_logged.clear()
            self._refusals_logged[ip] = now
            log.warning("refusing a connection from %s: %s", ip, why)

    async def _handle_admitted(self, client: trio.SocketStream, node_id: int | None, ip: str) -> None:
        try:
            await self._handle(client, node_id)
        finally:
            self.admission.release(ip)

    def _upstream_for(self, node_id: int | None) -> list[tuple[str, int]]:
        if node_id is None:
            known = [(b.host, b.port) for b in self.registry.brokers.values()]
            return self.bootstrap_addresses + [a for a in known if a not in self.bootstrap_addresses]
        broker = self.registry.brokers.get(node_id)
        return [] if broker is None else [(broker.host, broker.port)]

    def _broker_key(self, node_id: int | None, address: tuple[str, int]) -> Hashable:
        """Which broker an upstream connection reached, as fetch sessions are owned (their ids are unique per
        broker only): a broker port's node id; for the bootstrap, the node advertising the address it reached,
        else (a bootstrap address no broker advertises: a name, a load balancer) a key of this upstream
        connection alone, so that what it opens is usable on it only and never collides with another broker's."""
        if node_id is not None:
            return node_id
        for broker in self.registry.brokers.values():
            if (broker.host, broker.port) == address:
                return broker.node_id
        self._bootstrap_upstreams += 1
        return ("bootstrap", address, self._bootstrap_upstreams)

    async def _handle(self, client: trio.SocketStream, node_id: int | None) -> None:
        self._connection_id += 1
        peer = _peer(client)
        name = f"conn-{self._connection_id} {peer} -> {'bootstrap' if node_id is None else f'broker {node_id}'}"
        telemetry = self.telemetry.connection(_peer_address(client), node_id) if self.telemetry is not None else None
        secured = await self._secure(client, name, telemetry)
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
        session = self._new_session(name, tls_principal, node_id, _peer_address(client))

        async def connect_upstream(login: bool) -> trio.abc.Stream:
            targets = self._upstream_for(node_id)
            if not targets:
                raise OSError(f"broker {node_id} is not in the upstream metadata")
            # Without the proxy's login for a relayed one (TLS stays as configured): the client logs in itself.
            security = self.upstream_security if login else self.relay_security
            stream, address = await up.connect_first(targets, timeout, security)
            session.upstream_broker(self._broker_key(node_id, address))
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
        )
        self.connections.add(connection)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)

    async def _secure(
        self, client: trio.SocketStream, name: str, telemetry: ConnectionTelemetry | None = None
    ) -> tuple[trio.abc.Stream, str | None, str | None] | None:
        """TLS listeners: the handshake (bounded), the client certificate's principal and the server name
        the client asked for (SNI). None: closed."""
        tls = self.config.listeners.tls
        if self.tls_context is None or tls is None:
            return client, None, None
        stream = trio.SSLStream(client, self.tls_context, server_side=True)
        server_name = _ServerName()
        _handshake.set(server_name)
        try:
            with trio.fail_after(tls.handshake_timeout_seconds):
                await stream.do_handshake()
        except trio.TooSlowError:
            log.info("%s: closing: TLS handshake timed out", name)
        except (trio.BrokenResourceError, OSError) as exc:  # the ssl.SSLError (bad certificate...) is the cause
            why = server_name.refused or exc.__cause__ or exc
            log.info("%s: closing: TLS handshake failed: %s", name, why)
            if telemetry is not None:
                telemetry.tls_handshake(None, str(why))
        else:
            der = stream.getpeercert(binary_form=True)
            if not der:
                if telemetry is not None:
                    telemetry.tls_handshake(ANONYMOUS)
                return stream, ANONYMOUS, server_name.name
            try:
                subject = distinguished_name(der)
                principal = USER_PREFIX + self.principal_mapper.name_for(subject)
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

    def _new_session(
        self, name: str, tls_principal: str | None, node_id: int | None = None, peer: tuple[str, int] | None = None
    ) -> ProxySession:
        """The one place sessions are made. The principal comes from SASL (SASL_PLAINTEXT, SASL_SSL), from
        the TLS handshake (SSL: mapped certificate subject or User:ANONYMOUS), or is User:ANONYMOUS."""
        lc = self.config.listeners
        authenticator: Authenticator | None = None
        principal: str | None = ANONYMOUS
        if lc.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            authenticator = SaslServer(
                self.credentials,
                lc.sasl_mechanisms,
                name=name,
                guard=self.login_guard,
                address=peer[0] if peer is not None else "?",
                clock=trio.current_time,
                relay=lc.unknown_principals == "relay",
                upstream_user=self.config.upstream.sasl_username,
            )
            principal = None  # known once the client has logged in
        elif lc.security_protocol == "SSL":
            principal = tls_principal or ANONYMOUS
            authenticator = Preauthenticated(principal)
        tenancy = None
        settings = self.vc_settings
        if self.tenancy is not None and settings is not None:
            tenancy = SessionTenancy(
                self.tenancy.image,
                Policy(
                    auto_create_topics=self.config.tenancy.auto_create_topics,
                    delete_physical_topic=settings.delete_physical_topics,
                    topic_policy=settings.topic_policy,
                ),
            )
        versions = self.upstream_versions.get(node_id)
        if versions is None:
            ttl = self.config.upstream.metadata_refresh_seconds
            versions = self.upstream_versions[node_id] = apiversions.UpstreamVersions(ttl, trio.current_time)
        return ProxySession(
            self.layout,
            authenticator,
            tenancy=tenancy,
            principal=principal,
            header_v3=lc.request_header_v3,
            upstream_versions=versions,
            super_admins=self.config.tenancy.super_admins,
            host=peer[0] if peer is not None else "*",
            allow_if_no_acl=settings.allow_if_no_acl if settings is not None else self.config.tenancy.allow_if_no_acl,
            cluster_operator=self.cluster_operator,
            broker=node_id,  # None for the bootstrap: set when its upstream is connected
            listings=self.listings if self.tenancy is not None else None,
            upstream_user=self.config.upstream.sasl_username,
            relays_unknown=lc.unknown_principals == "relay",
        )


@dataclass
class SessionTenancy:
    """What a session needs of the tenancy layer (see proxy.core.session.Tenancy)."""

    image: TenancyImage
    policy: Policy


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


def _peer_address(stream: trio.SocketStream) -> tuple[str, int] | None:
    try:
        host, port = stream.socket.getpeername()[:2]
        return str(host), int(port)
    except OSError:
        return None


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


async def serve(config: ProxyConfig, config_path: str | Path | None = None, log_level: str | None = None) -> None:
    """Run until SIGINT/SIGTERM, then drain; with `config_path`, reload it when it (or a file it names)
    changes, and on SIGHUP (`log_level`: the command line's, which a reload does not override)."""
    server = ProxyServer(config)
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
