"""DescribeClientQuotas and AlterClientQuotas answered by the proxy, sans-I/O: a request entity and the
caller in; the response entity (and, for alters, the state records to write) out.

Inside a VC a caller names entities as on a cluster of its own (`user`, `client-id`, their defaults):
they are the VC's `/config/virtual-clusters/<vc>/...` levels. A super admin may add the
`virtual-cluster` entity type to reach any VC: `virtual-cluster=<vc>` alone is the VC's cap, the
default name (null) the VC default, and `virtual-cluster=kafka-cluster` with users or clients the global
levels, which apply in every VC.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i32Timedelta

from . import model
from .model import CLIENT_ID, PHYSICAL, USER, VIRTUAL_CLUSTER, Entity, QuotaBook, QuotaError

NONE = 0
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
RESOURCE_NOT_FOUND = 91
MAX_ENTITIES = 1000  # per VC (and for the global levels): each is a state record on every replica

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_TENANT_TYPES = {USER, CLIENT_ID}
_KNOWN_TYPES = {USER, CLIENT_ID, VIRTUAL_CLUSTER, "ip"}

Record = tuple[str, dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Caller:
    vc: str | None  # the caller's VC, None for a principal in none
    super_admin: bool
    may_manage: bool  # may describe and alter its VC's quotas (see the quota stage's `may_manage_quotas`)


def names_virtual_clusters(request: Any) -> bool:
    """Whether the request uses the `virtual-cluster` entity type (then the proxy answers it)."""
    if hasattr(request, "components"):
        return any(c.entity_type == VIRTUAL_CLUSTER for c in request.components)
    return any(e.entity_type == VIRTUAL_CLUSTER for entry in request.entries for e in entry.entity)


def authorized(caller: Caller, request: Any) -> bool:
    """Whether the caller may make this request at all (AlterClientQuotas: every entry is checked too)."""
    return caller.may_manage and (caller.super_admin or not names_virtual_clusters(request))


def _types(response_cls: type) -> Any:
    return inspect.getmodule(response_cls)


def _no_throttle() -> i32Timedelta:
    return i32Timedelta.parse(timedelta(0))


# -- describe ----------------------------------------------------------------------------------------------


def describe(book: QuotaBook, caller: Caller, request: Any, response_cls: type) -> Any:
    m = _types(response_cls)

    def fail(code: int, message: str) -> Any:
        return response_cls(
            throttle_time=_no_throttle(), error_code=ErrorCode(code), error_message=message, entries=None
        )

    if not authorized(caller, request):  # as a broker refuses it: the error alone
        return response_cls(
            throttle_time=_no_throttle(), error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED), error_message=None,
            entries=None,
        )  # fmt: skip
    explicit = names_virtual_clusters(request)
    seen: set[str] = set()
    for c in request.components:
        if c.entity_type in seen:
            return fail(INVALID_REQUEST, f"duplicate filter component entity type {c.entity_type}")
        seen.add(c.entity_type)
        if c.entity_type not in _KNOWN_TYPES:
            return fail(INVALID_REQUEST, f"custom entity type {c.entity_type!r} not supported")
        if int(c.match_type) not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return fail(INVALID_REQUEST, f"unknown match type {int(c.match_type)}")
        if int(c.match_type) == MATCH_DEFAULT and c.match is not None:
            return fail(INVALID_REQUEST, "a default match takes no name")
    entries = []
    for view, values in _view(book, caller, explicit):
        if _matches(view, request.components, request.strict):
            entries.append(
                m.EntryData(
                    entity=tuple(m.EntityData(entity_type=t, entity_name=n) for t, n in view),
                    values=tuple(m.ValueData(key=k, value=f64(v)) for k, v in sorted(values.items())),
                )
            )
    return response_cls(
        throttle_time=_no_throttle(), error_code=ErrorCode(NONE), error_message=None, entries=tuple(entries)
    )


def _view(book: QuotaBook, caller: Caller, explicit: bool) -> list[tuple[Entity, dict[str, float]]]:
    """The entities the caller sees, in its terms: a tenant its own VC's without the VC component; a
    super admin naming virtual clusters every entity, global ones under `kafka-cluster`."""
    out = []
    for ent, values in sorted(book.values.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]]):
        parts = dict(ent)
        if explicit:
            if VIRTUAL_CLUSTER not in parts:
                ent = tuple(sorted((*ent, (VIRTUAL_CLUSTER, PHYSICAL))))
            out.append((ent, values))
        elif VIRTUAL_CLUSTER in parts and parts[VIRTUAL_CLUSTER] == caller.vc and len(parts) > 1:
            out.append((tuple((t, n) for t, n in ent if t != VIRTUAL_CLUSTER), values))
    return out


def _matches(view: Entity, components: Any, strict: bool) -> bool:
    parts = dict(view)
    for c in components:
        if c.entity_type not in parts:
            return False
        name, match_type = parts[c.entity_type], int(c.match_type)
        if match_type == MATCH_EXACT and name != c.match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
    return not strict or len(parts) == len(components)


# -- alter -------------------------------------------------------------------------------------------------


def alter(book: QuotaBook, caller: Caller, request: Any, response_cls: type) -> tuple[Any, list[Record]]:
    m = _types(response_cls)
    results, records = [], []
    counts: dict[str | None, int] = {}  # entities per VC (None: global), with this request's new ones
    for ent in book.values:
        scope = dict(ent).get(VIRTUAL_CLUSTER)
        counts[scope] = counts.get(scope, 0) + 1
    for entry in request.entries:
        code, message, ent, entry_records = _alter_entry(caller, entry)
        if ent is not None and ent not in book.values and any(v is not None for _, v in entry_records):
            scope = dict(ent).get(VIRTUAL_CLUSTER)
            if counts.get(scope, 0) >= MAX_ENTITIES:  # each is a record every replica keeps: bounded
                code, message, entry_records = POLICY_VIOLATION, f"at most {MAX_ENTITIES} quota entities here", []
            counts[scope] = counts.get(scope, 0) + 1
        records.extend(entry_records)
        results.append(
            m.EntryData(
                error_code=ErrorCode(code),
                error_message=message,
                entity=tuple(m.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity),
            )
        )
    response = response_cls(throttle_time=_no_throttle(), entries=tuple(results))
    return response, [] if request.validate_only else records


def _alter_entry(caller: Caller, entry: Any) -> tuple[int, str | None, Entity | None, list[Record]]:
    components = [(e.entity_type, e.entity_name) for e in entry.entity]
    explicit = any(t == VIRTUAL_CLUSTER for t, _ in components)
    if not caller.may_manage or (explicit and not caller.super_admin):
        return CLUSTER_AUTHORIZATION_FAILED, "not authorized to alter client quotas here", None, []
    try:
        ent = _stored_entity(caller, components, explicit)
        keys = [op.key for op in entry.ops]
        if len(set(keys)) != len(keys):
            raise QuotaError("a key may appear once per entity")
        records = [model.record(ent, op.key, None if op.remove else float(op.value)) for op in entry.ops]
    except QuotaError as exc:
        return INVALID_REQUEST, str(exc), None, []
    return NONE, None, ent, records


def _stored_entity(caller: Caller, components: list[tuple[str, str | None]], explicit: bool) -> Entity:
    types = [t for t, _ in components]
    if len(set(types)) != len(types):
        raise QuotaError("an entity type may appear once per entity")
    for t in types:
        if t == "ip":
            raise QuotaError("ip quotas are not served by the proxy")
        if t not in _TENANT_TYPES and t != VIRTUAL_CLUSTER:
            raise QuotaError(f"custom entity type {t!r} not supported")
    if not explicit:
        if caller.vc is None:
            raise QuotaError("quotas of the physical cluster go in a request without virtual-cluster entities")
        components = [*components, (VIRTUAL_CLUSTER, caller.vc)]
    parts = dict(components)
    if parts.get(VIRTUAL_CLUSTER) == PHYSICAL and len(parts) > 1:  # the global levels
        del parts[VIRTUAL_CLUSTER]
    ent = tuple(sorted(parts.items()))
    model.check_entity(ent)
    return ent


# -- DescribeUserScramCredentials ---------------------------------------------------------------------------


def describe_scram(request: Any, response_cls: type) -> Any:
    """A VC admin's view of SCRAM credentials: none (they are the proxy's, not the VC's). `kafka-configs
    --describe --entity-type users` asks this beside the quotas and would fail on a refusal; a user
    without credentials is RESOURCE_NOT_FOUND, as Kafka answers."""
    m = _types(response_cls)
    results = tuple(
        m.DescribeUserScramCredentialsResult(
            user=u.name,
            error_code=ErrorCode(RESOURCE_NOT_FOUND),
            error_message="Attempt to describe a user credential that does not exist",
            credential_infos=(),
        )
        for u in request.users or ()
    )
    return response_cls(throttle_time=_no_throttle(), error_code=ErrorCode(NONE), error_message=None, results=results)
