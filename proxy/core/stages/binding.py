"""VC binding (KIP-1134): a connection belongs to its principal's virtual cluster, else to its client
id's, from its first request after login. Bindings change at runtime (the management RPCs): when the
connection's binding is no longer what the image says, the connection is closed and the client comes
back under its new binding."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ..exchange import Exchange, RequestDecision, close
from .context import ConnectionState

log = logging.getLogger(__name__)


class Tenancy(Protocol):
    """What a session needs of the virtual-cluster layer (proxy/net/server.py's SessionTenancy)."""

    image: Any  # proxy.tenancy.model.TenancyImage
    policy: Any  # proxy.tenancy.engine.Policy
    refuse_unbound: bool


class BindingStage:
    def __init__(self, ctx: ConnectionState, tenancy: Tenancy, make_engine: Any):
        self.ctx = ctx
        self.tenancy = tenancy
        self.make_engine = make_engine  # vc -> the tenancy stage's engine for it
        self.resolved = False
        self._client_id: str | None = None  # the client id the binding was made with
        self._checked_version = -1  # the image version the binding was last checked against

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        ctx = self.ctx
        image = self.tenancy.image
        if not self.resolved:
            refusal = self._resolve(ex)
            if refusal is not None:
                return refusal
        elif image.version != self._checked_version:
            self._checked_version = image.version
            why = self.stale()
            if why is not None:
                return close(why)
        ex.vc = ctx.vc
        return None

    def stale(self) -> str | None:
        """Why the binding no longer holds (the VC was deleted, the principal moved), or None."""
        ctx = self.ctx
        if not self.resolved:
            return None
        now = self.tenancy.image.vc_for(ctx.principal, self._client_id)
        if now is ctx.vc:
            return None
        was = ctx.vc.name if ctx.vc is not None else "the physical cluster"
        return f"{ctx.principal} is no longer bound to {was}: reconnect"

    def _resolve(self, ex: Exchange) -> RequestDecision | None:
        ctx = self.ctx
        image = self.tenancy.image
        self.resolved = True
        self._checked_version = image.version
        self._client_id = ex.header.client_id if ex.header is not None else ctx.client_id
        ctx.vc = image.vc_for(ctx.principal, self._client_id)
        if ctx.vc is None:
            if self.tenancy.refuse_unbound:
                return close(f"{ctx.principal} (client id {self._client_id!r}) is bound to no virtual cluster")
            return None
        ctx.engine = self.make_engine(ctx.vc)
        log.info(
            "%s (client id %r) is in virtual cluster %s (cluster id %s)",
            ctx.principal,
            self._client_id,
            ctx.vc.name,
            ctx.vc.cluster_id,
        )
        return None
