"""Client quotas inside virtual clusters (KIP-1134 "Quotas"), sans-I/O: what is defined, and which
definition applies to a client.

An entity is Kafka's: a set of (entity type, name) components, name None for `<default>`. The KIP's
`virtual-clusters` family adds the `virtual-cluster` component. What a client gets, per quota key, is
the first of these levels that defines the key (KIP-1134's list, top to bottom):

    /config/virtual-clusters/<vc>/users/<user>/clients/<client-id>
    /config/virtual-clusters/<vc>/users/<user>/clients/<default>
    /config/virtual-clusters/<vc>/users/<user>
    /config/virtual-clusters/<vc>/users/<default>/clients/<client-id>
    /config/virtual-clusters/<vc>/users/<default>/clients/<default>
    /config/virtual-clusters/<vc>/users/<default>
    /config/virtual-clusters/<vc>/clients/<client-id>
    /config/virtual-clusters/<vc>/clients/<default>
    ... then the same eight without the virtual cluster (global: they apply in every VC)

and, besides, the VC's cap `/config/virtual-clusters/<vc>` (else the VC default
`/config/virtual-clusters/<default>`), which bounds all of the VC's clients together.

Like Kafka's default quota callback, a level that names users (or their default) is measured per user,
one that names client ids per client id: carol's two producers share `/users/carol`'s quota, while
`/clients/<default>` gives every client id a quota of its own. Meters are kept per VC as well, so two
VCs' clients with the same id never share one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import Refusal
from .meter import Meters

VIRTUAL_CLUSTER = "virtual-cluster"
USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (CLIENT_ID, USER, VIRTUAL_CLUSTER)  # sorted: entities are kept in this order
# DescribeClientQuotas' component match types (ComponentData.match_type), as Kafka numbers them.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
PHYSICAL = "kafka-cluster"  # the KIP's name of the physical cluster: in the protocol, the global levels

PRODUCE = "producer_byte_rate"  # bytes/s of Produce requests
FETCH = "consumer_byte_rate"  # bytes/s of Fetch responses
REQUEST = "request_rate"  # requests/s (the proxy's; Kafka's request_percentage needs the broker's thread time)
MUTATION = "controller_mutation_rate"  # partitions created or deleted per second
# The keys whose APIs the forwarder serves within an allowance taken from their meters (proxy/core/stages/quotas.py,
# `QuotaStage.reserve`): a producer's byte rate (a Produce's size, known before it is sent), a consumer's (a Fetch
# answer's, known as it comes) and a request rate (one for each request, whatever its API).
ON_ALLOWANCE = frozenset({PRODUCE, FETCH, REQUEST})
KEYS = (PRODUCE, FETCH, REQUEST, MUTATION)

Name = str | None  # None: <default>
Entity = tuple[tuple[str, Name], ...]  # sorted by type


class QuotaError(Refusal, ValueError):
    """An entity or value Kafka's AlterClientQuotas would refuse; the message says why."""


def entity(**components: Name) -> Entity:
    """`entity(user="carol", client_id=None)`: keyword names with `_` for `-`."""
    return tuple(sorted((k.replace("_", "-"), v) for k, v in components.items()))


def user_name(principal: str | None) -> str:
    """Kafka's quota user entity for a principal: `User:carol` is `carol`."""
    if not principal:
        return ""
    return principal.split(":", 1)[1] if ":" in principal else principal


def check_value(key: str, value: float) -> None:
    if key not in KEYS:
        hint = " (the proxy enforces request_rate, in requests per second)" if key == "request_percentage" else ""
        raise QuotaError(f"unknown quota key {key!r}{hint}; known: {', '.join(KEYS)}")
    if not math.isfinite(value) or value <= 0:
        raise QuotaError(f"{key} must be a positive number, not {value!r}")


def check_entity(ent: Entity) -> None:
    """The shapes that mean something: the VC cap and default, and the precedence list's levels."""
    types = [t for t, _ in ent]
    if not types or len(set(types)) != len(types) or any(t not in ENTITY_TYPES for t in types):
        raise QuotaError(f"entity {format_entity(ent)} must be users and/or clients, optionally in one virtual cluster")
    parts = dict(ent)
    if VIRTUAL_CLUSTER in parts:
        vc = parts[VIRTUAL_CLUSTER]
        if vc == PHYSICAL:
            raise QuotaError(f"{PHYSICAL} is reserved: set global quotas without a virtual cluster")
        if vc is None and len(parts) > 1:
            raise QuotaError("the virtual-cluster default takes no users or clients")
        if vc is not None and not _valid_vc(vc):
            raise QuotaError(f"virtual cluster name {vc!r} must be 1-100 of [a-zA-Z0-9._-]")
    for t in (USER, CLIENT_ID):
        name = parts.get(t, "")
        if name is not None and t in parts and not name:
            raise QuotaError(f"an empty {t} name is not an entity (use the default)")


def _valid_vc(name: str) -> bool:
    return 0 < len(name) <= 100 and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)


def format_entity(ent: Entity) -> str:
    return "/".join(f"{t}={'<default>' if n is None else n}" for t, n in ent) or "<none>"


@dataclass(frozen=True, slots=True)
class Limit:
    quota: float
    meter: tuple[str, ...]  # what is measured against it: (key, vc, user, client id) or (key, "vc", vc)


@dataclass(frozen=True, slots=True)
class Resolved:
    """What applies to one (vc, user, client id): per key the client's limit and the VC's cap."""

    limits: dict[str, Limit]
    caps: dict[str, Limit]
    # Any limit or cap at all: a field, read on every request (a `__bool__` would be a Python call each time).
    applies: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "applies", bool(self.limits or self.caps))

    def __bool__(self) -> bool:
        return self.applies


# The precedence list, as (user component, client component): "name", "default" or "" (absent).
_LEVELS = (
    ("name", "name"),
    ("name", "default"),
    ("name", ""),
    ("default", "name"),
    ("default", "default"),
    ("default", ""),
    ("", "name"),
    ("", "default"),
)


@dataclass
class QuotaBook:
    """Every quota defined, as replayed from the state topic; and the meters measuring them."""

    values: dict[Entity, dict[str, float]] = field(default_factory=dict)
    version: int = 0  # bumped on every change: sessions re-resolve their limits when it moves
    meters: Meters = field(default_factory=Meters)

    def apply(self, ent: Entity, key: str, value: float | None) -> None:
        entry = self.values.get(ent)
        if value is None:
            if entry is not None:
                entry.pop(key, None)
                if not entry:
                    del self.values[ent]
        else:
            self.values.setdefault(ent, {})[key] = float(value)
        self.version += 1

    def records(self) -> list[tuple[str, dict[str, Any] | None]]:
        """Every quota as state records (a backup writes these)."""
        ordered = sorted(self.values.items(), key=lambda kv: [(t, n or "") for t, n in kv[0]])
        return [record(ent, key, value) for ent, values in ordered for key, value in values.items()]

    def of_vc(self, vc: str) -> list[tuple[str, dict[str, Any] | None]]:
        """Tombstones for every quota of one VC (its entities and its cap): a deleted VC takes them along."""
        return [
            record(ent, key, None)
            for ent, values in self.values.items()
            if (VIRTUAL_CLUSTER, vc) in ent
            for key in values
        ]

    def get(self, ent: Entity) -> dict[str, float]:
        return self.values.get(ent, {})

    def resolve(self, vc: str, principal: str | None, client_id: str | None) -> Resolved:
        """The limits for a client: per key the first level of the precedence list that defines it."""
        if not self.values:
            return Resolved({}, {})
        user, client = user_name(principal), client_id or ""
        limits: dict[str, Limit] = {}
        for scope in (vc, None):
            for user_part, client_part in _LEVELS:
                parts: list[tuple[str, Name]] = []
                if client_part:
                    parts.append((CLIENT_ID, client if client_part == "name" else None))
                if user_part:
                    parts.append((USER, user if user_part == "name" else None))
                if scope is not None:
                    parts.append((VIRTUAL_CLUSTER, scope))
                defined = self.values.get(tuple(parts))
                if not defined:
                    continue
                for key, quota in defined.items():
                    if key not in limits:
                        limits[key] = Limit(quota, (key, vc, user if user_part else "", client if client_part else ""))
        caps: dict[str, Limit] = {}
        for key, quota in (self.get(((VIRTUAL_CLUSTER, None),)) | self.get(((VIRTUAL_CLUSTER, vc),))).items():
            caps[key] = Limit(quota, (key, "vc", vc))
        return Resolved(limits, caps)


# -- records ---------------------------------------------------------------------------------------------
#
# One record per entity and key, so that two admins altering different keys of one entity on two
# replicas never undo each other. Keys are JSON arrays of strings (like every state record): the
# entity's components in type order, `type=name` for a name and `type` alone for the default, then the
# quota key: ["quota", "user=carol", "virtual-cluster=team-a", "producer_byte_rate"] -> {"value": x}.


def _component(t: str, n: Name) -> str:
    return t if n is None else f"{t}={n}"


def parse_record(parts: list[Any], value: dict[str, Any] | None) -> tuple[Entity, str, float | None]:
    """(entity, key, value or None) of a quota record; ValueError/KeyError/TypeError for a bad one."""
    *components, key = parts
    ent: list[tuple[str, Name]] = []
    for c in components:
        t, eq, n = str(c).partition("=")
        ent.append((t, n if eq else None))
    if not ent or key not in KEYS:
        raise ValueError("not a quota record")
    return tuple(sorted(ent)), str(key), None if value is None else float(value["value"])


def record(ent: Entity, key: str, value: float | None) -> tuple[str, dict[str, Any] | None]:
    check_entity(ent)
    if value is not None:
        check_value(key, value)
    text = json.dumps(["quota", *(_component(t, n) for t, n in ent), key], separators=(",", ":"))
    return text, None if value is None else {"value": value}
