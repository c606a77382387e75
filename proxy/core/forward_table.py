"""Which requests of a passthrough connection the forwarder may serve (sans-I/O; proxy/net/forwarder.py serves them).

A request is *plain* when every stage of the session would forward it as the client sent it and leave its
answer as the broker sent it: what the forwarder does without asking Python. That is decided here per API
version, from the same facts the stages decide from, so the two paths give one reading:

- the connection is passthrough (no tenancy), logged in, not relayed to the broker's own login, and did not
  start with KIP-1313's header v3 (whose requests the identify stage converts);
- the version is one the session negotiated and can parse (never the header-v3 version after the newest);
- no stage answers or converts the API itself: ApiVersions, the SASL APIs, the virtual-clusters RPCs, the
  client-telemetry APIs, the APIs the proxy refuses or keeps to itself (rewrite_rules.yaml);
- its answer carries no broker endpoint in a regular field (Metadata, FindCoordinator, DescribeCluster...).
  Where the endpoints are a tagged field (Produce v10+, Fetch v16+: KIP-951 leader hints) the forwarder skips the
  answer to its tagged section with the walker's plan, as the endpoint stage does, and gives an answer that
  has one back to the stage's own rewrite.

A virtual cluster's connection has entries of its own (`tenant_entries_for`): Produce and Fetch by topic id or by
name (its names renamed), a consumer's ListOffsets, a group member's Heartbeat, OffsetCommit and LeaveGroup (its
group renamed), a transactional producer's AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit (its
transactional id too) and a share consumer's ShareFetch and ShareAcknowledge (KIP-932), served on a grant of the
ids, names, groups and fetch sessions the session let through (proxy/core/grants.py). Not while the connection is
muted by a quota, nor an API a quota that applies to it meters (with a request-rate limit, none), but a byte rate: its
Produce requests (a producer's) or Fetch requests (a consumer's, and a share consumer's) are served within a byte
allowance the quota stage takes from its meters as it hands the connection over (`QuotaStage.reserve`).

tests/unit/test_forward_table.py runs the session on a request of every entry and checks it forwards the frame
unchanged and leaves an untagged answer as it came.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..catalogue import catalogue
from ..protocol import plans, walker
from ..protocol.apikey import ApiKey
from ..protocol.apis import known_apis, response_type
from ..quotas.model import FETCH, MUTATION, ON_ALLOWANCE, PRODUCE
from ..rules import api_rules
from . import forward_plans
from .endpoints import rules_for
from .grants import tenant_plans

if TYPE_CHECKING:
    from .session import ProxySession

# (api_key, version, acks: a Produce, request header v2, response header v1, plan of the answer's regular
# fields when its tagged section may hold endpoints or None, a tenant's plans or None, where the answer's error
# codes are or None, plan of the answer's regular fields when it carries records or None, what a quota meters of it
# (`METERED_*`: served only within the phase's allowance for it): what vcproxy_native.ForwardTable reads.
Entry = tuple[int, int, bool, bool, bool, Any, Any, Any, Any, int]

# What a quota meters of an API the forwarder serves (native/src/forward.rs reads the same numbers): nothing, the
# request's size (Produce: a producer's byte rate, charged as the request is read), the answer's (Fetch: a consumer's,
# charged as the answer comes back).
METERED_NO, METERED_REQUEST, METERED_ANSWER = 0, 1, 2


def forward_entries(session: ProxySession) -> tuple[Entry, ...]:
    """The plain API versions of this connection now; empty when the forwarder may serve none of its requests."""
    ctx = session.ctx
    if ctx.relayed or ctx.header_instance_id is not None:
        return ()
    authenticator = session.authenticator
    if authenticator is not None and not authenticator.complete:
        return ()
    versions = tuple(sorted(ctx.versions.items()))
    if session.tenancy is None:
        return entries_for(versions)
    # A VC's connection: bound, with a grant of the state as it is now, and not muted; the APIs no quota that applies
    # to it meters, and those a byte rate or a request rate meters, within an allowance (proxy/net/allowances.py).
    quota = session.quota
    metered = quota.metered() if quota is not None else None
    if ctx.engine is None or ctx.grant is None or not ctx.grant.valid() or metered is None:
        return ()
    return tenant_entries_for(versions, metered)


@functools.lru_cache(maxsize=64)
def entries_for(versions: tuple[tuple[int, tuple[int, int]], ...]) -> tuple[Entry, ...]:
    """The plain entries for one negotiated version table (connections of one client share it)."""
    out: list[Entry] = []
    for key, (low, high) in versions:
        for version in range(low, high + 1):
            entry = _entry(key, version)
            if entry is not None:
                out.append(entry)
    return tuple(out)


@functools.lru_cache(maxsize=64)
def tenant_entries_for(
    versions: tuple[tuple[int, tuple[int, int]], ...], metered: frozenset[str] = frozenset()
) -> tuple[Entry, ...]:
    """A VC connection's entries for one negotiated version table: those of `tenant_plans`, but for the APIs a quota
    key in `metered` measures with no allowance for it (controller mutations: the quota stage's, in Python)."""
    out: list[Entry] = []
    for key, (low, high) in versions:
        if _metered(key, metered - ON_ALLOWANCE):
            continue
        # A byte rate: what it meters is served within an allowance taken from its meters (`QuotaStage.reserve`).
        spec = catalogue()[key]
        if PRODUCE in metered and spec.produce_bytes:
            metering = METERED_REQUEST
        elif FETCH in metered and spec.fetch_bytes:
            metering = METERED_ANSWER
        else:
            metering = METERED_NO
        for version in range(low, high + 1):
            entry, tenant = _entry(key, version), tenant_plans(key, version)
            if entry is not None and tenant is not None:
                # An answer whose names are renamed back changes size with each: it goes on once it is whole, renamed
                # (a Fetch by name), not as it comes.
                records = None if renames(tenant[2]) else entry[8]
                out.append((*entry[:6], tenant, entry[7], records, metering))
    return tuple(out)


def renames(node: Any) -> bool:
    """Whether a plan (grants.py) renames a name anywhere."""
    if node[0] == "rename":
        return True
    if node[0] == "pstruct":
        return any(renames(step) for step in node[2])
    if node[0] == "parray":
        return renames(node[2])
    return False


METERING = frozenset({PRODUCE, FETCH, MUTATION})  # the keys `_metered` knows the APIs of


def _metered(key: int, metered: frozenset[str]) -> bool:
    """Whether one of the quota keys measures this API (proxy/core/stages/quotas.py: what it charges, and when)."""
    if not metered:
        return False
    if metered - METERING:
        return True  # a key this does not know: it may meter anything
    spec = catalogue()[key]
    return (
        (PRODUCE in metered and spec.produce_bytes)
        or (FETCH in metered and spec.fetch_bytes)
        or (MUTATION in metered and spec.mutation_items is not None)
    )


def _entry(key: int, version: int) -> Entry | None:
    """The API version's entry, as checked in (forward_plans_gen.py): no schema is loaded to read it."""
    return forward_plans.ENTRIES.get((key, version))


def derive_entry(key: int, version: int) -> Entry | None:
    """What `_entry` reads, from the schemas and the rules (forward_plans_gen.py; a unit test compares the two)."""
    info, spec = known_apis().get(key), catalogue().get(key)
    if info is None or spec is None or not info.min_version <= version <= info.max_version:
        return None
    if spec.answered_by is not None or spec.sasl or spec.telemetry:
        return None  # a stage answers or converts it: ApiVersions, SASL, the proxy's own RPCs, client telemetry
    rule = api_rules().get(key)
    if rule is None or rule.physical in ("reject", "refuse"):
        return None
    tags = None
    streamed = spec.records_in_response  # a large answer goes on as it arrives, its record batches spliced through
    endpoints = rules_for(key, version)
    if endpoints is not None and endpoints.mode != "keep":
        cls = response_type(key, version)
        if endpoints.mode != "splice":
            return None  # endpoints in a regular field the stage decodes: every answer is rewritten
        if endpoints.path in walker.regular_names(cls):
            # A list of endpoints as the answer's last regular field (KIP-932's node_endpoints: leaders' endpoints,
            # after a NOT_LEADER_OR_FOLLOWER only): the answer goes as it came while the list is empty, else the
            # endpoint stage rewrites it. Judged whole: what a stream sent on could not be taken back.
            if endpoints.kind != "list" or plans.regular_fields(cls)[-1].name != endpoints.path:
                return None
            if not cls.__flexible__:  # type: ignore[attr-defined]
                return None
            tags, streamed = plans.but_last_empty(cls), False
        else:
            _, _, steps = plans.skip_entity(cls)
            tags = ("struct", False, steps)  # the regular fields: the tagged section follows them
    records = None
    if streamed:
        _, _, steps = plans.skip_entity(response_type(key, version))
        records = ("struct", False, steps)
    return (
        key,
        version,
        key == ApiKey.PRODUCE,
        info.request_header_version(version) == 2,
        info.response_header_version(version) == 1,
        tags,
        None,
        _errors(key, version),
        records,
        METERED_NO,
    )


def _errors(key: int, version: int) -> Any:
    """Where the answer's error codes are, as the metrics count them (proxy/observability/tracing.py): with records in
    the answer (Fetch), the top-level one only, at a fixed offset (None: it has none); else every one at any depth.
    None when there is no such walk: with metrics on, the forwarder then leaves the API to Python."""
    cls = response_type(key, version)
    if catalogue()[key].records_in_response:
        return ("top", plans.top_error_offset(cls))
    try:
        return plans.errors_entity(cls)
    except ValueError:
        return None
