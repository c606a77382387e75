"""DescribeClientQuotas and AlterClientQuotas answered by the proxy, sans-I/O: a request entity and the
caller in; the response entity (and, for alters, the state records to write) out.

Inside a VC a caller names entities as on a cluster of its own (`user`, `client-id`, their defaults):
they are the VC's `/config/virtual-clusters/<vc>/...` levels. A cluster operator may add the
`virtual-cluster` entity type to reach any VC: `virtual-cluster=<vc>` alone is the VC's cap, the
default name (null) the VC default, and `virtual-cluster=kafka-cluster` with users or clients the global
levels, which apply in every VC.

Entities and values are checked as Kafka's controller checks them (ClientQuotaControlManager over
QuotaConfig's keys, same errors and messages), then against what the proxy enforces (no `ip` quotas, no
`request_percentage`; its own `request_rate`). Entities that bound more than one user or client id of
one VC (a VC's cap, the VC default, the global levels) are written only by cluster operators: the
caller's `cluster_operator`, which the quota stage computes with its injected
`cluster_operator(principal)` callable (proxy/core/stages/quotas.py).
"""

from __future__ import annotations

import inspect
import ipaddress
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i32Timedelta

from ..quotas import model
from ..quotas.model import (
    CLIENT_ID,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PHYSICAL,
    USER,
    VIRTUAL_CLUSTER,
    Entity,
    QuotaBook,
    QuotaError,
)
from ..tenancy import limits

MAX_ENTITIES = 1000  # per VC (and for the global levels) without a room: each is a state record on every replica

IP = "ip"
_KAFKA_TYPES = (USER, CLIENT_ID, IP)  # ClientQuotaEntity's
_KNOWN_TYPES = {*_KAFKA_TYPES, VIRTUAL_CLUSTER}

# Kafka's quota keys and their config types (QuotaConfig.userAndClientQuotaConfigs() for users and client
# ids, ipConfigs() for ip): what the controller accepts for each kind of entity.
KAFKA_KEYS: dict[str, dict[str, str]] = {
    "client": {
        model.PRODUCE: "LONG",
        model.FETCH: "LONG",
        "request_percentage": "DOUBLE",
        model.MUTATION: "DOUBLE",
    },
    IP: {"connection_creation_rate": "INT"},
}
PROXY_KEYS = {model.REQUEST: "DOUBLE"}  # the proxy's own, on user, client and VC entities
# Keys Kafka accepts that the proxy cannot enforce (it sees no broker thread time, opens no connections).
NOT_ENFORCED = {
    "request_percentage": "request_percentage needs the broker's thread time: the proxy enforces request_rate "
    "(requests per second) instead",
    "connection_creation_rate": "ip quotas are not served by the proxy",
}
_LIMITS = {"LONG": (2**63 - 1, "a LONG"), "INT": (2**31 - 1, "an INT"), "SHORT": (2**15 - 1, "a SHORT")}

Record = tuple[str, dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Caller:
    vc: str | None  # the caller's VC, None for a principal in none
    cluster_operator: bool  # holds the right on kafka-cluster: every VC's quotas, caps, defaults, global levels
    may_manage: bool  # may describe and alter its VC's quotas (see the quota stage's `may_manage_quotas`)


def names_virtual_clusters(request: Any) -> bool:
    """Whether the request uses the `virtual-cluster` entity type (then the proxy answers it)."""
    if hasattr(request, "components"):
        return any(c.entity_type == VIRTUAL_CLUSTER for c in request.components)
    return any(e.entity_type == VIRTUAL_CLUSTER for entry in request.entries for e in entry.entity)


def authorized(caller: Caller, request: Any) -> bool:
    """Whether the caller may make this request at all (AlterClientQuotas: every entry is checked too)."""
    return caller.may_manage and (caller.cluster_operator or not names_virtual_clusters(request))


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
            throttle_time=_no_throttle(), error_code=ErrorCode.cluster_authorization_failed, error_message=None,
            entries=None,
        )  # fmt: skip
    explicit = names_virtual_clusters(request)
    seen: set[str] = set()
    for c in request.components:  # as the controller checks a filter (ClientQuotaControlManager.validate)
        t = c.entity_type
        if not t:
            return fail(ErrorCode.invalid_request, "Invalid empty entity type.")
        if t in seen:
            return fail(ErrorCode.invalid_request, f"Entity type {t} cannot appear more than once in the filter.")
        seen.add(t)
        if t not in _KNOWN_TYPES:
            return fail(ErrorCode.unsupported_version, f"Unsupported entity type {t}")
        if int(c.match_type) not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return fail(ErrorCode.invalid_request, f"unknown match type {int(c.match_type)}")
        if int(c.match_type) == MATCH_DEFAULT and c.match is not None:
            return fail(ErrorCode.invalid_request, "a default match takes no name")
    if IP in seen and seen & {USER, CLIENT_ID}:
        return fail(
            ErrorCode.invalid_request,
            "Invalid entity filter component combination. IP filter component should not be used with user or "
            "clientId filter component.",
        )
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
        throttle_time=_no_throttle(), error_code=ErrorCode.none, error_message=None, entries=tuple(entries)
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


def alter(
    book: QuotaBook,
    caller: Caller,
    request: Any,
    response_cls: type,
    room: Callable[[str | None], limits.Room] | None = None,
) -> tuple[Any, list[Record]]:
    """`room(vc)`: a VC's state limits (None: the global levels'); without it, MAX_ENTITIES per VC."""
    if room is None:
        bounded = limits.Room(replace(limits.DEFAULT, max_quota_entities=MAX_ENTITIES, max_records=None))
        room = lambda _vc: bounded  # noqa: E731
    m = _types(response_cls)
    checked = [_alter_entry(book, caller, entry) for entry in request.entries]
    # An entity named by two entries: Kafka refuses it ("Ignoring duplicate entity"); here neither is applied.
    named: dict[Entity, int] = {}
    for _, _, ent, _ in checked:
        if ent is not None:
            named[ent] = named.get(ent, 0) + 1
    counts: dict[str | None, int] = {}  # entities per VC (None: global), with this request's new ones
    for ent in book.values:
        scope = dict(ent).get(VIRTUAL_CLUSTER)
        counts[scope] = counts.get(scope, 0) + 1
    results, records = [], []
    for entry, (code, message, ent, entry_records) in zip(request.entries, checked, strict=True):
        if ent is not None and named[ent] > 1:
            code, message, entry_records = (
                ErrorCode.invalid_request,
                f"Ignoring duplicate entity {_kafka_name(entry)}",
                [],
            )
        elif ent is not None and entry_records:
            scope = dict(ent).get(VIRTUAL_CLUSTER)
            here = room(scope)
            where = f"virtual cluster {scope!r}" if scope is not None else "the global quota levels"
            new = ent not in book.values and any(v is not None for _, v in entry_records)
            adding = sum(1 for _, v in entry_records if v is not None)
            # each entity is records every replica keeps: bounded
            why = (
                new
                and limits.count_refusal(
                    limits.MAX_QUOTA_ENTITIES, here.limits.max_quota_entities, counts.get(scope, 0), 1, where
                )
            ) or here.total_refusal(sum(1 for _, v in records if v is not None) + adding)
            if why:
                code, message, entry_records = ErrorCode.policy_violation, why, []
            elif new:
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


def bounds_a_vc(ent: Entity) -> bool:
    """Whether an entity bounds more than one user or client id of a VC: the VC's cap (`virtual-cluster=<vc>`
    alone), the VC default, or a global level (no VC: every VC's clients). Only cluster operators write these."""
    parts = dict(ent)
    return parts.get(VIRTUAL_CLUSTER) is None or len(parts) == 1


def _alter_entry(book: QuotaBook, caller: Caller, entry: Any) -> tuple[int, str | None, Entity | None, list[Record]]:
    """(error code, message, the stored entity, its records) for one entry."""
    components = [(e.entity_type, e.entity_name) for e in entry.entity]
    explicit = any(t == VIRTUAL_CLUSTER for t, _ in components)
    if not caller.may_manage or (explicit and not caller.cluster_operator):
        return ErrorCode.cluster_authorization_failed, "not authorized to alter client quotas here", None, []
    try:
        kind = _entity_kind(components, explicit)
        ops = _ops(entry, kind)
        if kind == IP:  # Kafka's, but the proxy opens no connections for clients: nothing it could enforce
            raise QuotaError(NOT_ENFORCED["connection_creation_rate"])
        ent = _stored_entity(caller, components, explicit)
    except QuotaError as exc:
        return ErrorCode.invalid_request, str(exc), None, []
    if bounds_a_vc(ent) and not caller.cluster_operator:  # never reached from a VC's own terms: kept as a guard
        return (
            ErrorCode.cluster_authorization_failed,
            "only cluster operators set quotas that bound a whole VC",
            None,
            [],
        )
    current = book.get(ent)
    records = [
        model.record(ent, key, value)
        for key, value in ops
        if (key in current if value is None else current.get(key) != value)  # Kafka writes changes only
    ]
    return ErrorCode.none, None, ent, records


def _entity_kind(components: list[tuple[str, str | None]], explicit: bool) -> str:
    """Kafka's checks of an entity (validateEntity, configKeysForEntityType), and the proxy's `virtual-cluster`
    type: which keys it takes, "client" (users and client ids, and a VC's cap) or "ip"."""
    if explicit:  # the proxy's type, for cluster operators: alone it is a cap; with others, Kafka's rules for them
        types = [t for t, _ in components]
        if types.count(VIRTUAL_CLUSTER) > 1:
            raise QuotaError(f"Invalid client quota entity, duplicate entity entry {VIRTUAL_CLUSTER}")
        components = [(t, n) for t, n in components if t != VIRTUAL_CLUSTER]
        if not components:
            return "client"
    if not components:
        raise QuotaError("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for t, n in components:
        if t in seen:
            raise QuotaError(f"Invalid client quota entity, duplicate entity entry {t}")
        if t not in _KAFKA_TYPES:
            raise QuotaError(f"Unhandled client quota entity type: {t}")
        seen[t] = n
        if n is not None and not n:
            raise QuotaError(f"Empty {t} not supported")
    if IP in seen:
        if len(seen) > 1:
            raise QuotaError("Invalid quota entity combination, IP entity should not be combined with User or ClientId")
        if seen[IP] is not None and not _ip_literal(seen[IP]):  # Kafka resolves names; the proxy does no I/O here
            raise QuotaError(f"{seen[IP]} is not a valid IP or resolvable host.")
        return IP
    return "client"


def _ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _ops(entry: Any, kind: str) -> list[tuple[str, float | None]]:
    """The entry's (key, value or None to remove), checked as Kafka's validateQuotaKeyValue, then for what the
    proxy enforces. Removing a key is never checked (Kafka: a no-op unless it is set)."""
    keys = [op.key for op in entry.ops]
    for key in keys:
        if keys.count(key) > 1:
            raise QuotaError(f"Duplicate quota key {key} not updating quota for this entity")
    out: list[tuple[str, float | None]] = []
    for op in entry.ops:
        if op.remove:
            out.append((op.key, None))
            continue
        value = float(op.value)
        config_type = KAFKA_KEYS[kind].get(op.key) or (PROXY_KEYS.get(op.key) if kind == "client" else None)
        if config_type is None:
            raise QuotaError(f"Invalid configuration key {op.key}")
        if not math.isfinite(value):  # Kafka lets NaN (and an infinite DOUBLE) through: never a quota here
            raise QuotaError(f"Quota {op.key} must be a finite number, not {value!r}")
        if value <= 0.0:
            raise QuotaError(f"Quota {op.key} must be greater than 0")
        if config_type in _LIMITS:
            limit, name = _LIMITS[config_type]
            if value > limit:
                raise QuotaError(f"Proposed value for {op.key} is too large for {name}.")
            if abs(value % 1.0) > 1e-6:
                raise QuotaError(f"{op.key} cannot be a fractional value.")
        if op.key in NOT_ENFORCED:
            raise QuotaError(NOT_ENFORCED[op.key])
        out.append((op.key, value))
    return out


def _stored_entity(caller: Caller, components: list[tuple[str, str | None]], explicit: bool) -> Entity:
    """The entity as kept: a VC caller's in its VC; an operator's as named (`kafka-cluster`: global)."""
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


def _kafka_name(entry: Any) -> str:
    """An entity as Kafka's ClientQuotaEntity prints it."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{e.entity_type}={e.entity_name}" for e in entry.entity) + "})"
