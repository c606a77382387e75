"""The one place sessions are made: the client's login (SASL, TLS certificate or none), its VC's policy
and settings, and the broker's ApiVersions answers, put together for a new client connection."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio

from ..auth import ANONYMOUS
from ..auth.credentials import CredentialStore
from ..auth.guard import LoginGuard
from ..auth.sasl import Preauthenticated, SaslServer
from ..config import ProxyConfig
from ..core import apiversions
from ..core.endpoints import ListenerLayout
from ..core.session import Authenticator, ProxySession
from ..tenancy.engine import Policy
from ..tenancy.model import TenancyImage
from ..tenancy.settings import VcSettings
from .listings import UpstreamListings

if TYPE_CHECKING:
    from ..state.service import TenancyService


@dataclass
class SessionTenancy:
    """What a session needs of the tenancy layer (see proxy.core.session.Tenancy)."""

    image: TenancyImage
    policy: Policy


class SessionSource(Protocol):
    """What a new session takes from the server (proxy/net/server.py's ProxyServer)."""

    config: ProxyConfig
    layout: ListenerLayout
    credentials: CredentialStore
    login_guard: LoginGuard
    tenancy: TenancyService | None
    vc_settings: VcSettings | None
    upstream_versions: dict[int | None, apiversions.UpstreamVersions]
    cluster_operator: Callable[[str | None], bool] | None
    listings: UpstreamListings


def new_session(
    server: SessionSource,
    name: str,
    tls_principal: str | None,
    node_id: int | None = None,
    peer: tuple[str, int] | None = None,
) -> ProxySession:
    """The principal comes from SASL (SASL_PLAINTEXT, SASL_SSL), from the TLS handshake (SSL: mapped
    certificate subject or User:ANONYMOUS), or is User:ANONYMOUS."""
    config = server.config
    lc = config.listeners
    authenticator: Authenticator | None = None
    principal: str | None = ANONYMOUS
    if lc.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        authenticator = SaslServer(
            server.credentials,
            lc.sasl_mechanisms,
            name=name,
            guard=server.login_guard,
            address=peer[0] if peer is not None else "?",
            clock=trio.current_time,
            relay=lc.unknown_principals == "relay",
            upstream_user=config.upstream.sasl_username,
        )
        principal = None  # known once the client has logged in
    elif lc.security_protocol == "SSL":
        principal = tls_principal or ANONYMOUS
        authenticator = Preauthenticated(principal)
    tenancy = None
    settings = server.vc_settings
    if server.tenancy is not None and settings is not None:
        tenancy = SessionTenancy(
            server.tenancy.image,
            Policy(
                auto_create_topics=config.tenancy.auto_create_topics,
                delete_physical_topic=settings.delete_physical_topics,
                topic_policy=settings.topic_policy,
            ),
        )
    versions = server.upstream_versions.get(node_id)
    if versions is None:
        ttl = config.upstream.metadata_refresh_seconds
        versions = server.upstream_versions[node_id] = apiversions.UpstreamVersions(ttl, trio.current_time)
    return ProxySession(
        server.layout,
        authenticator,
        tenancy=tenancy,
        principal=principal,
        header_v3=lc.request_header_v3,
        upstream_versions=versions,
        super_admins=config.tenancy.super_admins,
        host=peer[0] if peer is not None else "*",
        allow_if_no_acl=settings.allow_if_no_acl if settings is not None else config.tenancy.allow_if_no_acl,
        cluster_operator=server.cluster_operator,
        broker=node_id,  # None for the bootstrap: set when its upstream is connected
        listings=server.listings if server.tenancy is not None else None,
        upstream_user=config.upstream.sasl_username,
        relays_unknown=lc.unknown_principals == "relay",
    )
