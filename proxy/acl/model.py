"""Kafka's ACL model inside one virtual cluster (sans-I/O).

The semantics are those of Kafka's StandardAuthorizer, applied to the names a VC's clients use:
a binding matches a resource by literal name, the literal wildcard `*`, or a prefix; a principal by
name or `User:*`; a host by address or `*`. DENY wins over ALLOW; READ, WRITE, DELETE and ALTER imply
DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL is every operation. A resource that no binding
matches at all is allowed or denied by the VC's `allow_everyone_if_no_acl_found` choice. Super users
(the config's super admins and the VC's own admins) may do everything in the VC.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kio.static.primitive import i8

from ..errors import Refusal


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15
    # KIP-1134's rights over virtual clusters, on CLUSTER resources of `kafka-cluster`'s own ACLs: the
    # resource names a VC (or `kafka-cluster` for every VC). Kafka has no codes for them yet; the proxy
    # uses a range far above Kafka's (docs/security.md#rights), so a future Kafka code cannot collide.
    CREATE_VIRTUAL_CLUSTER = 100
    ALTER_VIRTUAL_CLUSTER = 101
    DELETE_VIRTUAL_CLUSTER = 102
    LIST_VIRTUAL_CLUSTERS = 103
    DESCRIBE_VIRTUAL_CLUSTER = 104


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the cluster resource's only name, in a VC as on a broker
VC_OPERATIONS = frozenset(
    {
        Operation.CREATE_VIRTUAL_CLUSTER,
        Operation.ALTER_VIRTUAL_CLUSTER,
        Operation.DELETE_VIRTUAL_CLUSTER,
        Operation.LIST_VIRTUAL_CLUSTERS,
        Operation.DESCRIBE_VIRTUAL_CLUSTER,
    }
)
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
Op = Operation
# What each resource type supports (Kafka's AclEntry.supportedOperations): the bits of an
# authorized-operations field, and what a binding may name.
SUPPORTED: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset(
        {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    ),
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {
            Op.CREATE,
            Op.CLUSTER_ACTION,
            Op.DESCRIBE_CONFIGS,
            Op.ALTER_CONFIGS,
            Op.IDEMPOTENT_WRITE,
            Op.ALTER,
            Op.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT}),
}
# A cluster's authorized-operations field for a caller allowed everything on it, as a broker reports it
# (KIP-430/KIP-700): all seven. Inside a VC the same seven are reported, each as the VC's ACLs grant it;
# what a VC then refuses (CLUSTER_ACTION's inter-broker APIs, broker configs) is refused when attempted,
# with the broker's error for a caller without the right (CLUSTER_AUTHORIZATION_FAILED).
ALL_CLUSTER_OPERATIONS = sum(1 << op for op in SUPPORTED[ResourceType.CLUSTER])
# An ALLOW of any of these grants the key (Kafka's implied operations).
_GRANTED_BY: dict[Operation, frozenset[Operation]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL}),
}


class AclError(Refusal, ValueError):
    """A binding or filter Kafka would refuse (INVALID_REQUEST); the message says why."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self, cluster_wide: bool = False) -> AclBinding:
        """Kafka's checks; `cluster_wide`: a binding of `kafka-cluster`'s own ACLs, where a CLUSTER resource
        may name a virtual cluster and take the KIP-1134 *_VIRTUAL_CLUSTER operations."""
        if self.resource_type not in SUPPORTED:
            raise AclError(f"resource type {self.resource_type.name} cannot be used in a virtual cluster")
        if self.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"pattern type must be LITERAL or PREFIXED, not {self.pattern.name}")
        if not self.name:
            raise AclError("resource name must not be empty")
        if self.pattern is PatternType.PREFIXED and self.name == WILDCARD:
            raise AclError("a prefixed pattern cannot be the wildcard '*'")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME and not cluster_wide:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        if self.operation in (Op.UNKNOWN, Op.ANY):
            raise AclError(f"operation {self.operation.name} cannot be granted")
        if self.operation in VC_OPERATIONS:
            if not cluster_wide:
                raise AclError(f"{self.operation.name} is granted in kafka-cluster's ACLs, not in a virtual cluster")
            if self.resource_type is not ResourceType.CLUSTER:
                raise AclError(f"{self.operation.name} applies to CLUSTER resources (a virtual cluster's name)")
        elif self.operation is not Op.ALL and self.operation not in SUPPORTED[self.resource_type]:
            raise AclError(f"operation {self.operation.name} does not apply to {self.resource_type.name}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError(f"permission must be ALLOW or DENY, not {self.permission.name}")
        kind, sep, who = self.principal.partition(":")
        if not sep or not kind or not who:
            raise AclError(f"principal {self.principal!r} must be Type:name")
        if not self.host:
            raise AclError("host must not be empty (use '*' for any)")
        return self

    # -- the state topic ---------------------------------------------------------------------------
    def key_parts(self) -> list[str]:
        return [
            self.resource_type.name,
            self.name,
            self.pattern.name,
            self.principal,
            self.host,
            self.operation.name,
            self.permission.name,
        ]

    @classmethod
    def from_key_parts(cls, parts: list[str]) -> AclBinding:
        rtype, name, pattern, principal, host, op, perm = parts
        return cls(ResourceType[rtype], name, PatternType[pattern], principal, host, Operation[op], Permission[perm])

    def wire(self, pattern_field: str = "pattern_type") -> dict[str, Any]:
        """The binding as the ACL APIs' fields (CreateAcls names the pattern `resource_pattern_type`)."""
        return {
            "resource_type": i8(self.resource_type),
            "resource_name": self.name,
            pattern_field: i8(self.pattern),
            "principal": self.principal,
            "host": self.host,
            "operation": i8(self.operation),
            "permission_type": i8(self.permission),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type.name,
            "name": self.name,
            "pattern": self.pattern.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filters (Kafka's AclBindingFilter): None and ANY match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Op.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> AclFilter:
        for value, enum_type in (
            (self.resource_type, ResourceType),
            (self.pattern, PatternType),
            (self.operation, Operation),
            (self.permission, Permission),
        ):
            if value is enum_type(0):
                raise AclError(f"{enum_type.__name__} UNKNOWN cannot be used in a filter")
        return self

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and b.resource_type is not self.resource_type:
            return False
        if not self._matches_pattern(b):
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation is not Op.ANY and b.operation is not self.operation:
            return False
        return self.permission is Permission.ANY or b.permission is self.permission

    def _matches_pattern(self, b: AclBinding) -> bool:
        if self.pattern is PatternType.MATCH:
            if self.name is None:
                return True
            if b.pattern is PatternType.PREFIXED:
                return self.name.startswith(b.name)
            return b.name in (self.name, WILDCARD)
        if self.pattern is not PatternType.ANY and b.pattern is not self.pattern:
            return False
        return self.name is None or b.name == self.name


@dataclass
class AclSet:
    """One VC's bindings, indexed so a check looks only at those that can match (as Kafka's
    StandardAuthorizer does, not a scan): literal ones by (type, name), the wildcard with them, prefixed
    ones by (type, prefix), found by looking up the resource name cut at each prefix length in use. A
    check costs a few dictionary lookups however many bindings the VC has."""

    by_type: dict[ResourceType, set[AclBinding]] = field(default_factory=dict)
    literal: dict[tuple[ResourceType, str], set[AclBinding]] = field(default_factory=dict)
    prefixed: dict[tuple[ResourceType, str], set[AclBinding]] = field(default_factory=dict)
    # type -> {prefix length: how many prefixes of that length}, shortest first (at most 249 lengths)
    prefix_lengths: dict[ResourceType, dict[int, int]] = field(default_factory=dict)
    version: int = 0  # bumped on every change: keys what was computed from the set

    def __len__(self) -> int:
        return sum(len(s) for s in self.by_type.values())

    def __iter__(self) -> Iterator[AclBinding]:
        for bindings in self.by_type.values():
            yield from bindings

    def __contains__(self, b: object) -> bool:
        return isinstance(b, AclBinding) and b in self.by_type.get(b.resource_type, ())

    def add(self, b: AclBinding) -> None:
        self.by_type.setdefault(b.resource_type, set()).add(b)
        slot = self._index(b).setdefault(self._slot(b), set())
        if b.pattern is PatternType.PREFIXED and not slot:  # a prefix new to the index: its length too
            lengths = self.prefix_lengths.setdefault(b.resource_type, {})
            lengths[len(b.name)] = lengths.get(len(b.name), 0) + 1
            self.prefix_lengths[b.resource_type] = dict(sorted(lengths.items()))
        slot.add(b)
        self.version += 1

    def discard(self, b: AclBinding) -> None:
        if b not in self:
            return
        for index, slot in ((self.by_type, b.resource_type), (self._index(b), self._slot(b))):
            bindings = index[slot]  # type: ignore[index]
            bindings.discard(b)
            if not bindings:
                del index[slot]  # type: ignore[arg-type]  # empty means none: the open fast path
                if index is self.prefixed:
                    self._forget_length(b.resource_type, len(b.name))
        self.version += 1

    def _forget_length(self, rtype: ResourceType, length: int) -> None:
        lengths = self.prefix_lengths[rtype]
        lengths[length] -= 1
        if not lengths[length]:
            del lengths[length]
            if not lengths:
                del self.prefix_lengths[rtype]

    def _index(self, b: AclBinding) -> dict[tuple[ResourceType, str], set[AclBinding]]:
        return self.prefixed if b.pattern is PatternType.PREFIXED else self.literal

    @staticmethod
    def _slot(b: AclBinding) -> tuple[ResourceType, str]:
        return b.resource_type, b.name

    def candidates(self, rtype: ResourceType, name: str) -> Iterator[AclBinding]:
        """The bindings whose pattern matches this resource."""
        yield from self.literal.get((rtype, name), ())
        if name != WILDCARD:
            yield from self.literal.get((rtype, WILDCARD), ())
        lengths = self.prefix_lengths.get(rtype)
        if lengths:
            prefixed = self.prefixed
            for length in lengths:
                if length > len(name):
                    break  # shortest first: no longer prefix fits either
                yield from prefixed.get((rtype, name[:length]), ())

    def matching(self, flt: AclFilter) -> list[AclBinding]:
        return sorted((b for b in self if flt.matches(b)), key=lambda b: b.key_parts())


@dataclass(frozen=True)
class Subject:
    """Who asks, from where."""

    principal: str
    host: str
    super_user: bool = False


class Authorizer:
    """Decisions for one VC's bindings, with the VC's default for resources no binding matches."""

    def __init__(self, acls: AclSet, allow_if_no_acl: bool):
        self.acls = acls
        self.allow_if_no_acl = allow_if_no_acl

    @property
    def open(self) -> bool:
        """Every request is allowed (no bindings, and no binding means allowed): nothing to check."""
        return self.allow_if_no_acl and not len(self.acls)

    def allows(self, who: Subject, op: Operation, rtype: ResourceType, name: str) -> bool:
        if who.super_user:
            return True
        granting = _GRANTED_BY.get(op, frozenset({op, Op.ALL}))
        found, allowed = judge(self.acls.candidates(rtype, name), who.principal, who.host, op, granting)
        return allowed or (not found and self.allow_if_no_acl)

    def authorized_operations(self, who: Subject, rtype: ResourceType, name: str) -> int:
        """The bit field of KIP-430's authorized-operations fields."""
        return sum(1 << op for op in SUPPORTED[rtype] if self.allows(who, op, rtype, name))


def judge(
    candidates: Iterable[AclBinding], principal: str, host: str, op: Operation, granting: Collection[Operation]
) -> tuple[bool, bool]:
    """Kafka's rule over the bindings that match a resource: (whether any matched at all, whether this
    principal from this host may do `op`): a matching DENY of `op` (or ALL) wins, else an ALLOW of any
    operation in `granting` (op, ALL and what implies it) allows."""
    found = allowed = False
    for b in candidates:
        found = True
        if b.principal not in (principal, WILDCARD_PRINCIPAL) or b.host not in (host, WILDCARD):
            continue
        if b.permission is Permission.DENY:
            if b.operation in (op, Op.ALL):
                return True, False
        elif b.operation in granting:
            allowed = True
    return found, allowed


OPEN = Authorizer(AclSet(), True)


# -- the state topic: one record per binding, keyed by all of it ---------------------------------------


def acl_record(vc: str, binding: AclBinding, present: bool) -> tuple[str, dict[str, Any] | None]:
    return json.dumps(["acl", vc, *binding.key_parts()], separators=(",", ":")), ({} if present else None)


def bindings_of(items: Iterable[dict[str, Any]]) -> list[AclBinding]:
    """Bindings from their JSON form (`as_dict`), e.g. an export."""
    return [
        AclBinding(
            ResourceType[d["resource_type"]],
            d["name"],
            PatternType[d["pattern"]],
            d["principal"],
            d["host"],
            Operation[d["operation"]],
            Permission[d["permission"]],
        ).validate()
        for d in items
    ]
