"""The quota stage: client quotas in virtual clusters (KIP-1134), enforced the way a broker does.

Per connection the limits that apply (proxy/quotas/model.py) are resolved once and again only when the
quota book changes, so a request of a client without quotas costs an attribute check. With quotas:

* produce bytes (the Produce request's size) and the request count are measured when the request
  passes; fetch bytes (the size of Fetch responses, and of share consumers' ShareFetch and
  ShareAcknowledge responses: KIP-932 consumers are consumers) are taken out of the meters before the
  request goes (what they hold, a tenth of a window at least, a window at most; a Fetch's max_bytes is
  lowered to that, so its answer carries no more: proxy/quotas/fetch_bound.py) and settled with the answer's
  size when it passes; controller mutations (partitions created or topics deleted, from the response, and
  the topics Metadata auto-creation and Streams topologies create: `TenantCall.mutations`) when the answer
  passes; against the client's limit and its VC's cap;
* over a limit, the connection is muted for Kafka's throttle time (KIP-219): the next request from it
  is held back until the mute ends (`Exchange.delay`, honoured by the shell; the shell reads nothing
  more from the connection meanwhile, so pipelined requests wait too), and every response that leaves
  during the mute says how much of it is left in `throttle_time_ms` (the max with the broker's, at most
  `MAX_TOLD`), so clients back off by themselves too. A Fetch answer that leaves the consumer's buckets
  short of the next Fetch's least mutes the connection until they hold it, as a broker mutes a channel
  after a throttled answer. The mute lasts until the debt is paid, however large: the meters are the
  entity's, so its other connections, new ones included, wait for the same debt.

DescribeClientQuotas and AlterClientQuotas from a principal in a VC are answered here, scoped to the VC
(proxy/management/quota_plane.py); so are a cluster operator's that name the `virtual-cluster` entity type. Everything
else about quotas (a kafka-cluster member's own) goes to the broker as before.

Who is a cluster operator (holds the right on `kafka-cluster`: may name the `virtual-cluster` entity
type, and alone may write what bounds a whole VC: its cap, the VC default, the global levels) is the
`cluster_operator(principal)` callable, `QuotaStage(..., cluster_operator=...)` (passed down from
`ProxySession(..., cluster_operator=...)`); by default the trust model's answer: ALTER_VIRTUAL_CLUSTER on
kafka-cluster (`Rights.cluster_operator`, the super-admins and those they granted it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from ...management import quota_plane as rpc
from ...protocol import codec
from ...protocol.apikey import ApiKey
from ...protocol.apis import request_type, response_type
from ...protocol.codec import CodecError
from ...protocol.primitives import MALFORMED
from ...quotas import fetch_bound
from ...quotas.fleet import Key
from ...quotas.meter import MAX_TOLD, WINDOW
from ...quotas.model import FETCH, MUTATION, ON_ALLOWANCE, PRODUCE, REQUEST, Limit, Resolved
from ...quotas.throttle import set_throttle
from ...tenancy import limits
from ..exchange import Exchange, RequestDecision, ResponseMessage, answer, close
from .context import ConnectionState

_NO_LIMITS = Resolved({}, {})
# The most an allowance holds, in seconds of the quota, and how often it is renewed while the forwarder has the
# connection: the meters then hear what it spent (their rates, the fleet's reports), and it is topped up.
ALLOWANCE_TERM = 1.0
ALLOWANCE_LEAST = 0.1  # the least allowance worth a hand-over, in seconds of the quota
# What a Fetch may take out of its meters before it goes, in seconds of the quota: what they hold, at least a tenth of
# a window (waiting for it when they hold less) and at most one window (Kafka's bound on a throttled fetch).
FETCH_LEAST, FETCH_MOST = ALLOWANCE_LEAST, WINDOW
_NONE: frozenset[str] = frozenset()
log = logging.getLogger(__name__)


ClusterOperator = Callable[[str | None], bool]  # principal -> holds the right on kafka-cluster


def super_admin_check(super_admins: frozenset[str]) -> ClusterOperator:
    """The config's super admins only (tests that need no image)."""
    return lambda principal: principal is not None and principal in super_admins


def rights_check(image: Callable[[], Any], super_admins: frozenset[str]) -> ClusterOperator:
    """The default `cluster_operator`: ALTER_VIRTUAL_CLUSTER on kafka-cluster, over the current image."""
    from ...tenancy.rights import Rights

    return lambda principal: Rights(image(), super_admins).cluster_operator(principal)


def may_manage_quotas(
    image: Any, principal: str | None, vc: Any, super_admins: frozenset[str], cluster_operator: ClusterOperator
) -> bool:
    """Whether `principal` may describe and alter client quotas in `vc` (None: only the `virtual-cluster`
    entity type, for cluster operators): cluster operators and whoever may alter the VC (its admins)."""
    from ...tenancy.rights import Rights

    if cluster_operator(principal):
        return True
    return vc is not None and Rights(image, super_admins).vc_admin(principal, vc.name)


class QuotaStage:
    def __init__(
        self,
        ctx: ConnectionState,
        super_admins: frozenset[str],
        image: Callable[[], Any],
        cluster_operator: ClusterOperator | None = None,
    ):
        self.ctx = ctx
        self.super_admins = super_admins
        self.cluster_operator = cluster_operator or rights_check(image, super_admins)
        self.image = image
        self.mute_until = 0.0  # the connection is muted until then (the meters' clock)
        self._limits = _NO_LIMITS
        self._keys: frozenset[str] = _NONE  # the keys of `_limits` (`metered`)
        self._resolved_for: tuple[int, Any] | None = None  # (book version, vc) the limits were resolved for
        self._reserved: dict[str, list[tuple[Key, float]]] = {}  # per quota key: the limits an allowance came out of

    # -- requests ---------------------------------------------------------------------------------

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        if self.ctx.relayed:  # the broker applies its own quotas
            return None
        limits = self._current()
        if limits.applies:
            self._on_request(ex, limits)
        if ex.spec is not None and ex.spec.answered_by == "quotas":
            return self._quota_rpc(ex)
        return None

    def metered(self) -> frozenset[str] | None:
        """The quota keys that apply to the connection now (PRODUCE, FETCH, REQUEST, MUTATION): the forwarder may serve
        an API that none of them meters, or one they meter within an allowance (`allowances`). None when the connection
        is muted: the forwarder serves none of its requests then."""
        if self.mute_until != 0.0 and self.mute_until > self.image().quotas.meters.clock():
            return None
        limits = self._current()
        return self._keys if limits.applies else _NONE

    def allowances(self) -> frozenset[str]:
        """The quota keys whose APIs the forwarder serves for this connection only within an allowance (`reserve`):
        a producer's byte rate (Produce), a consumer's (Fetch) and a request rate (every request) that apply to it."""
        metered = self.metered()
        return metered & ON_ALLOWANCE if metered is not None else _NONE

    def reserve(self, key: str, want: int, take: bool = True) -> int:
        """What quota key `key` meters (Produce's bytes, Fetch answers', requests) the forwarder may serve for this
        connection: taken now out of the buckets of the limits that meter them, a term's worth of the smallest quota
        at most, and not less than `want` (a Produce at hand) nor `ALLOWANCE_LEAST`'s worth; 0 when they hold less (a
        client near its quota then stays with the session, rather than the connection going back and forth for each
        request). Kept up while the connection is on the forwarder (`renew`) and settled once it comes back
        (`settle`). `take=False`: what it would be, nothing taken."""
        pairs = self._pairs(key)
        if not pairs:
            return 0
        meters = self.image().quotas.meters
        smallest = min(quota for _, quota in pairs)
        least = max(float(want), smallest * ALLOWANCE_LEAST)
        assert not take or key not in self._reserved, "an allowance not settled"
        amount = int(meters.reserve(pairs, least, max(least, smallest * ALLOWANCE_TERM), meters.clock(), take))
        if amount and take:
            self._reserved[key] = pairs
        return amount

    def renew(self, key: str, spent: int, left: int) -> int:
        """Once a term while the forwarder has the connection: `spent` bytes of the allowance counted as used now (the
        rates, the fleet's reports), and the bytes to add to it from the meters so it holds a term's worth again (what
        they hold, at most); -1 when they are in debt (another connection of the client's, or another replica's,
        used more meanwhile): what is left must come back (`settle`), and the next request goes to the session."""
        pairs = self._reserved.get(key)
        if pairs is None:
            return 0
        meters = self.image().quotas.meters
        now = meters.clock()
        if spent and (wait := meters.settle(pairs, float(spent), 0.0, now)) > 0:
            self.mute_until = max(self.mute_until, now + wait)  # as charging what was spent would have
        if meters.held(pairs, now) < 0:
            return -1
        most = min(quota for _, quota in pairs) * ALLOWANCE_TERM - left
        return int(meters.reserve(pairs, 0.0, most, now)) if most >= 1 else 0

    def settle(self, key: str, spent: int, left: int, over: bool = True) -> None:
        """Of the allowance: `spent` bytes counted as used now, and `left` given back to the meters it came from
        (negative: answers charged whole took that much more than was lent); `over`: the connection is back from the
        forwarder, and the allowance with it. A debt then (a Fetch answer larger than what was left, or others' use)
        mutes the connection, as charging it would have."""
        pairs = self._reserved.get(key)
        if over:
            self._reserved.pop(key, None)
        if pairs is None:
            return
        meters = self.image().quotas.meters
        now = meters.clock()
        wait = meters.settle(pairs, float(spent), float(left), now)
        if wait > 0:
            self.mute_until = max(self.mute_until, now + wait)

    def _pairs(self, key: str) -> list[tuple[Key, float]]:
        """(meter key, quota) of the client's limit and its VC's cap for quota key `key`, those that apply."""
        limits = self._current()
        metered = (limits.limits.get(key), limits.caps.get(key))
        return [(limit.meter, limit.quota) for limit in metered if limit is not None]

    def _current(self) -> Resolved:
        vc = self.ctx.vc
        if vc is None:
            return _NO_LIMITS
        book = self.image().quotas
        if self._resolved_for is None or self._resolved_for[0] != book.version or self._resolved_for[1] is not vc:
            self._resolved_for = (book.version, vc)
            self._limits = limits = book.resolve(vc.name, self.ctx.principal, self.ctx.client_id)
            self._keys = frozenset(limits.limits) | frozenset(limits.caps)
        return self._limits

    def _on_request(self, ex: Exchange, limits: Resolved) -> None:
        meters = self.image().quotas.meters
        now = meters.clock()
        produce = ex.spec is not None and ex.spec.produce_bytes and ex.frame is not None
        # KIP-219: muted, the request goes on when the mute ends; and while the entity's buckets that meter it are in
        # debt (its other connections', a new one's included, or other replicas' use), until they are out of it.
        charged = self._pairs(REQUEST) + (self._pairs(PRODUCE) if produce else [])
        wait = max(self.mute_until - now, meters.until(charged, 0.0, now) if charged else 0.0)
        if wait > 0:
            ex.delay = max(ex.delay, wait)
        # Charged now, not when the mute ends: a meter is shared by connections, and one charged in the
        # future would age the others' windows early. The throttle counts from now and includes this
        # request, so the mute it sets (now + throttle) covers the earlier one's too.
        throttle = self._measure(limits, REQUEST, 1.0, now)
        if produce:
            assert ex.frame is not None
            throttle = max(throttle, self._measure(limits, PRODUCE, float(len(ex.frame)), now))
        if ex.spec is not None and ex.spec.fetch_bytes and (FETCH in limits.limits or FETCH in limits.caps):
            # Waits for its own charge: what it may carry is bounded when it goes, not found out once it has come.
            fetch_wait = self._precharge(ex, now)
            ex.delay = max(ex.delay, fetch_wait)
            throttle = max(throttle, fetch_wait)
        if throttle > 0:
            self.mute_until = max(self.mute_until, now + throttle)

    def _precharge(self, ex: Exchange, now: float) -> float:
        """A consumer's request charged before it goes, what it may carry back bounded by what its meters hold
        (`Meters.precharge`; a Fetch's max_bytes lowered to that); the seconds it must wait for it. Its answer settles
        the charge (`on_response`)."""
        pairs = self._pairs(FETCH)
        smallest = min(quota for _, quota in pairs)
        most = smallest * FETCH_MOST
        asked = None
        if ex.api_key == ApiKey.FETCH and ex.header is not None and ex.frame is not None:
            asked = fetch_bound.asked(ex.frame, ex.header.body_offset, ex.api_version)
            if asked is not None:
                most = max(1.0, min(most, float(asked)))
        meters = self.image().quotas.meters
        taken, wait = meters.precharge(pairs, most, min(most, smallest * FETCH_LEAST), now)
        ex.quota_taken = (pairs, taken)
        if asked is not None and taken < asked:
            assert ex.header is not None and ex.frame is not None
            ex.frame = fetch_bound.lowered(ex.frame, ex.header.body_offset, ex.api_version, int(taken))
            ex.pieces = [ex.frame]  # the stages after this one read and rewrite the lowered request
        return wait

    def _measure(self, limits: Resolved, key: str, amount: float, now: float) -> float:
        """Record `amount` against the client's limit and the VC's cap for `key`; the throttle it earns."""
        throttle = 0.0
        for limit in (limits.limits.get(key), limits.caps.get(key)):
            if limit is not None:
                throttle = max(throttle, _charge(self.image().quotas.meters, limit, amount, now))
        return throttle

    def unused(self, ex: Exchange) -> None:
        """What `_precharge` took for a request that does not go to the broker (a later stage answered it) goes back."""
        pairs, taken = ex.quota_taken
        ex.quota_taken = None
        meters = self.image().quotas.meters
        meters.settle(pairs, 0.0, taken, meters.clock())

    # -- responses --------------------------------------------------------------------------------

    def on_response(self, ex: Exchange, msg: ResponseMessage) -> None:
        limits = self._limits if self.ctx.vc is not None else _NO_LIMITS
        if not limits.applies and self.mute_until == 0.0:
            return
        now = self.image().quotas.meters.clock()
        throttle = 0.0
        api = ex.spec
        assert api is not None
        if ex.quota_taken is not None:  # charged before it went (`_precharge`): settled with what came
            pairs, taken = ex.quota_taken
            size = float(sum(map(len, msg.pieces)))
            meters = self.image().quotas.meters
            throttle = meters.settle(pairs, size, taken - size, now)
            # Muted until the buckets hold the next Fetch's least, as a broker mutes a channel after a throttled answer:
            # the client is told, and what it pipelined waits.
            throttle = max(throttle, meters.until(pairs, min(quota for _, quota in pairs) * FETCH_LEAST, now))
        elif api.fetch_bytes and (FETCH in limits.limits or FETCH in limits.caps):
            throttle = self._measure(limits, FETCH, float(sum(map(len, msg.pieces))), now)
        elif (api.mutation_items is not None or getattr(ex.tenant, "mutations", 0)) and (
            MUTATION in limits.limits or MUTATION in limits.caps
        ):
            # Topics the broker creates on the VC's behalf (Metadata auto-creation, Streams internal
            # topics) count like CreateTopics: the tenancy handlers say how many partitions.
            count = _mutations(api.mutation_items, msg.entity()) if api.mutation_items is not None else 0
            count += getattr(ex.tenant, "mutations", 0)
            throttle = self._measure(limits, MUTATION, float(count), now)
        if throttle > 0:
            self.mute_until = max(self.mute_until, now + throttle)
        left = self.mute_until - now
        if left > 0:
            set_throttle(msg, ex.api_key, ex.api_version, math.ceil(min(left, MAX_TOLD) * 1000))

    # -- DescribeClientQuotas / AlterClientQuotas -------------------------------------------------

    def _quota_rpc(self, ex: Exchange) -> RequestDecision | None:
        assert ex.header is not None and ex.frame is not None
        try:
            request, _ = codec.decode(request_type(ex.api_key, ex.api_version), ex.frame, ex.header.body_offset)
        except (CodecError, *MALFORMED):
            return close(
                f"malformed {'Describe' if ex.api_key == ApiKey.DESCRIBE_CLIENT_QUOTAS else 'Alter'}ClientQuotas"
            )
        ctx = self.ctx
        if ctx.vc is None and not rpc.names_virtual_clusters(request):
            return None  # the physical cluster's quotas: the broker's business
        image = self.image()
        caller = rpc.Caller(
            vc=ctx.vc.name if ctx.vc is not None else None,
            cluster_operator=self.cluster_operator(ctx.principal),
            may_manage=may_manage_quotas(image, ctx.principal, ctx.vc, self.super_admins, self.cluster_operator),
        )
        response_cls = response_type(ex.api_key, ex.api_version)
        if not rpc.authorized(caller, request):
            name = ex.info.name if ex.info is not None else str(ex.api_key)
            where = f"virtual cluster {caller.vc}" if caller.vc is not None else "the physical cluster"
            log.info("refusing request: %s in %s (error %d)", name, where, ErrorCode.cluster_authorization_failed)
        if ex.api_key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
            response = rpc.describe(image.quotas, caller, request, response_cls)
        else:
            room = limits.room(image, None)  # the state's count, once
            response, records = rpc.alter(
                image.quotas, caller, request, response_cls, lambda vc: replace(room, limits=limits.of(image, vc))
            )
            ex.writes = list(records)
            ex.decide = lambda: self._decide(request, response_cls)
        return answer(ex, codec.encode(response))

    def _decide(self, request: Any, response_cls: type) -> tuple[bytes, list[Any]]:
        """AlterClientQuotas again, against the log's image (one replica at a time): rights as they are now."""
        ctx, image = self.ctx, self.image()
        caller = rpc.Caller(
            vc=ctx.vc.name if ctx.vc is not None else None,
            cluster_operator=self.cluster_operator(ctx.principal),
            may_manage=may_manage_quotas(image, ctx.principal, ctx.vc, self.super_admins, self.cluster_operator),
        )
        response, records = rpc.alter(image.quotas, caller, request, response_cls)
        return codec.encode(response), list(records)


def _charge(meters: Any, limit: Limit, amount: float, now: float) -> float:
    return meters.charge(limit.meter, amount, limit.quota, now)


def _mutations(array: str, response: Any) -> int:
    """Partitions created (CreateTopics v5+ says how many; else one per topic), topics deleted, or topics
    given partitions (the API's `mutation_items` array), counting only the items the broker accepted."""
    count = 0
    for item in getattr(response, array):
        if int(item.error_code) == 0:
            count += max(int(getattr(item, "num_partitions", 1)), 1)
    return count
