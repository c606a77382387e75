"""The KIP-1134 management RPCs, answered by the proxy itself (proxy/management/plane.py decides; this
stage decodes, asks, and hands the state records to the shell to write before the answer leaves).

Authorization is two-fold: the authorization stage (authorize.py) refuses a caller who holds no right
(the KIP's *_VIRTUAL_CLUSTER operations, proxy/tenancy/rights.py); the plane checks each item (which
VC, which resource) and answers per item."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from kio.static.primitive import i16

from ...management import plane
from ...management.inventory import Listing
from ...protocol import codec, management
from ...protocol.apis import request_type
from ...protocol.codec import CodecError
from ...protocol.primitives import MALFORMED
from ...tenancy.rights import Rights
from ..exchange import Action, Exchange, RequestDecision, answer, close
from .context import ConnectionState

log = logging.getLogger(__name__)

# Answered from the image as it is: they change nothing (the rest is decided again against the log).
_READS = (
    management.ListVirtualClustersRequest,
    management.DescribeVirtualClustersRequest,
    management.DescribeVirtualClusterAclsRequest,
)


class Caller:
    """Who is asking, as the plane needs to know: the principal and its rights over the current image."""

    def __init__(self, ctx: ConnectionState, super_admins: frozenset[str], image: Callable[[], Any], host: str = "*"):
        self.ctx = ctx
        self.super_admins = super_admins
        self.image = image
        self.host = host

    def rights(self) -> Rights:
        return Rights(self.image(), self.super_admins)

    def now(self) -> plane.Caller:
        return plane.Caller(self.ctx.principal, self.super_admins, self.host, self.image())


class BrokerListings(Protocol):
    """The broker's side of a VC, asked under the proxy's own upstream login (proxy/net/listings.py)."""

    async def listing(self) -> Listing: ...

    async def delete_groups(self, groups: list[str]) -> dict[str, str | None]:
        """group -> why it was not deleted (None: deleted, or already gone)."""
        ...


class ManagementStage:
    def __init__(self, caller: Caller, image: Callable[[], Any], listings: BrokerListings | None = None):
        self.caller = caller
        self.image = image
        self.listings = listings  # None: answered from the state alone (no upstream to ask)

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        if ex.api_key not in management.REQUESTS or self.caller.ctx.relayed:  # relayed: refused by the version stage
            return None
        request = _decode(ex)
        if request is None:
            return close(f"malformed {management.NAMES[ex.api_key]} request")
        listings = self.listings
        if listings is not None and plane.needs_listing(self.image(), self.caller.now(), request):
            # Describe and Delete need the VC's groups and transactional ids, which only the broker knows.
            return RequestDecision(
                Action.CHECK, ex, work=listings.listing, resume=lambda got: self._listed(ex, request, got)
            )
        return self._answer(ex, request)

    def _answer(
        self, ex: Exchange, request: Any, listing: Listing | None = None, unpurged: dict[str, str] | None = None
    ) -> RequestDecision:
        response, records = plane.handle(self.image(), self.caller.now(), request, listing, unpurged)
        ex.writes = list(records)
        if not isinstance(request, _READS):

            def decide() -> tuple[bytes, list[Any]]:  # against the log's image, one replica at a time
                again, records = plane.handle(self.image(), self.caller.now(), request, listing, unpurged)
                return codec.encode(again), list(records)

            ex.decide = decide
        return answer(ex, codec.encode(response))

    def _listed(self, ex: Exchange, request: Any, listing: Listing) -> RequestDecision:
        """A forced Delete deletes the VCs' groups before the VCs (then answers); everything else answers."""
        response, _ = plane.handle(self.image(), self.caller.now(), request, listing)
        purge = plane.groups_to_purge(self.image(), request, response, listing)
        if not purge:
            return self._answer(ex, request, listing)
        listings = self.listings
        assert listings is not None
        groups = [g for names in purge.values() for g in names]

        def deleted(failed: dict[str, str | None]) -> RequestDecision:
            unpurged = {}
            for vc, names in purge.items():
                why = [f"{g.partition('.')[2]}: {failed[g]}" for g in names if failed.get(g)]
                if why:
                    unpurged[vc] = f"could not delete the groups of {vc!r} (the others were deleted): {'; '.join(why)}"
            log.info(
                "forced delete of virtual cluster(s) %s: %d group(s) deleted",
                sorted(purge),
                len(groups) - len([g for g in groups if failed.get(g)]),
            )
            return self._answer(ex, request, listing, unpurged)

        return RequestDecision(Action.CHECK, ex, work=lambda: listings.delete_groups(groups), resume=deleted)


def _decode(ex: Exchange) -> Any:
    assert ex.header is not None and ex.frame is not None
    try:
        request, _ = codec.decode(request_type(ex.api_key, ex.api_version), ex.frame, ex.header.body_offset)
    except (CodecError, *MALFORMED):
        return None
    return request


def refuse_all(ex: Exchange, error: int, message: str) -> RequestDecision:
    request = _decode(ex)
    if request is None:
        return close(f"malformed {management.NAMES[ex.api_key]} request")
    return answer(ex, codec.encode(refusal(request, error, message)))


def refusal(request: Any, error: int, message: str) -> Any:
    """The response refusing every item of `request` with `error`."""
    m, code = management, i16(error)
    if isinstance(request, m.CreateVirtualClustersRequest):
        items = tuple(
            m.CreatableVirtualClustersResult(name=vc.name, error_code=code, error_message=message)
            for vc in request.virtual_clusters
        )
        return m.CreateVirtualClustersResponse(virtual_clusters=items)
    if isinstance(request, m.AlterVirtualClustersRequest):
        results = tuple(
            m.AlterableVirtualClusterResult(
                name=vc.name,
                resources=tuple(
                    m.VirtualClusterResourceResult(
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                        resource_operation=r.resource_operation,
                        physical_topic_name=r.physical_topic_name,
                        error_code=code,
                        error_message=message,
                    )
                    for r in vc.resources
                ),
            )
            for vc in request.virtual_clusters
        )
        return m.AlterVirtualClustersResponse(virtual_clusters=results)
    if isinstance(request, m.DeleteVirtualClustersRequest):
        deleted = tuple(
            m.DeletableVirtualClusterResult(name=vc.name, error_code=code, error_message=message)
            for vc in request.virtual_clusters
        )
        return m.DeleteVirtualClustersResponse(responses=deleted)
    if isinstance(request, m.ListVirtualClustersRequest):
        return m.ListVirtualClustersResponse(error_code=code)
    if isinstance(request, m.DescribeVirtualClusterAclsRequest):
        return m.DescribeVirtualClusterAclsResponse(error_code=code, error_message=message)
    if isinstance(request, m.CreateVirtualClusterAclsRequest):
        created = tuple(
            m.VirtualClusterAclCreationResult(error_code=code, error_message=message) for _ in request.creations
        )
        return m.CreateVirtualClusterAclsResponse(results=created)
    if isinstance(request, m.DeleteVirtualClusterAclsRequest):
        filtered = tuple(
            m.DeleteVirtualClusterAclsFilterResult(error_code=code, error_message=message) for _ in request.filters
        )
        return m.DeleteVirtualClusterAclsResponse(filter_results=filtered)
    described = tuple(
        m.DescribedVirtualCluster(name=vc.name, error_code=code, error_message=message)
        for vc in request.virtual_clusters
    )
    return m.DescribeVirtualClustersResponse(virtual_clusters=described)
