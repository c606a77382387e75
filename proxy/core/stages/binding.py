"""VC binding (KIP-1134 and the trust model, proxy/tenancy/rights.py): from its first request after login a
connection is in its principal's virtual cluster, in `kafka-cluster` (the physical cluster), or is
closed: nobody is bound nowhere. Bindings change at runtime (the management RPCs): when the
connection's place is no longer what the image says, the connection is closed and the client comes
back under its new binding (or is refused)."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ...quoting import bare, shown
from ...tenancy.model import KAFKA_CLUSTER
from ...tenancy.rights import Rights
from ..exchange import Exchange, RequestDecision, close
from .context import ConnectionState

log = logging.getLogger(__name__)


class Tenancy(Protocol):
    """What a session needs of the virtual-cluster layer (proxy/net/sessions.py's SessionTenancy)."""

    image: Any  # proxy.tenancy.model.TenancyImage
    policy: Any  # proxy.tenancy.engine.Policy


class BindingStage:
    def __init__(self, ctx: ConnectionState, tenancy: Tenancy, make_engine: Any, super_admins: frozenset[str]):
        self.ctx = ctx
        self.tenancy = tenancy
        self.make_engine = make_engine  # vc -> the tenancy stage's engine for it
        self.super_admins = super_admins
        self.resolved = False
        self._client_id: str | None = None  # the client id the binding was made with
        self._checked_version = -1  # the image version the binding was last checked against

    def rights(self) -> Rights:
        return Rights(self.tenancy.image, self.super_admins)

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        ctx = self.ctx
        if ctx.relayed:
            return None  # the broker authenticated it and judges it: nothing of the proxy's applies
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
        if ctx.relayed:
            return None
        why = self._stale_login()  # also before the first request: an idle login is closed too
        if why is not None or not self.resolved:
            return why
        now = self.rights().placement(ctx.principal, self._client_id)
        if now == ctx.place and (now == KAFKA_CLUSTER or self.tenancy.image.vcs.get(now or "") is ctx.vc):
            return None
        return f"{ctx.principal} is no longer in {ctx.place}: reconnect"

    def _stale_login(self) -> str | None:
        """A login whose credential was changed or deleted since (proxy/auth/sasl.py `stale_login`)."""
        check = getattr(self.ctx.authenticator, "stale_login", None)
        return check() if check is not None else None

    def _resolve(self, ex: Exchange) -> RequestDecision | None:
        ctx = self.ctx
        image = self.tenancy.image
        self.resolved = True
        self._checked_version = image.version
        self._client_id = ex.header.client_id if ex.header is not None else ctx.client_id
        why = self._stale_login()  # changed between the password check and this first request
        if why is not None:
            return close(why)
        place = self.rights().placement(ctx.principal, self._client_id)
        if place is None:
            return close(
                f"{bare(ctx.principal)} (client id {shown(self._client_id)}) is in no virtual cluster: refused"
            )
        ctx.place = place
        if place == KAFKA_CLUSTER:
            log.info(
                "%s (client id %s) is in kafka-cluster (the physical cluster)",
                bare(ctx.principal),
                shown(self._client_id),
            )
            return None
        ctx.vc = image.vcs[place]
        ctx.engine = self.make_engine(ctx.vc)
        log.info(
            "%s (client id %s) is in virtual cluster %s (cluster id %s)",
            bare(ctx.principal),
            shown(self._client_id),
            ctx.vc.name,
            ctx.vc.cluster_id,
        )
        return None
