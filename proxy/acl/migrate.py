"""ACL migration into a virtual cluster (the KIP's --copy-acls-from / --remove-old-acls-from), sans-I/O:
which of a user's bindings in a source become which bindings in the target VC, and which cannot.

* From another VC the bindings are already in VC names: the user's are copied as they are.
* From `kafka-cluster` (the broker's own ACLs) names are physical and are translated to the target
  VC's: a literal topic becomes a literal ACL on every link to it; a prefixed topic pattern becomes
  a prefixed ACL per link whose physical topic it matches, its prefix translated the way the link
  renames the topic (`teamA.ord` on `teamA.orders` linked as `orders` gives `ord`; when the rename
  drops the whole prefix, the link name itself); groups and transactional ids keep their physical
  names, so only those assigned to the VC are copied (literal, or the assigned names a prefix
  matches); the cluster and `*` wildcards are copied as they are. Everything else is skipped, with
  the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .model import AclBinding, AclError, PatternType, ResourceType

KAFKA_CLUSTER = "kafka-cluster"  # the source naming the broker's own ACLs
TOPIC, GROUP, TXN, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER


@dataclass(frozen=True)
class Target:
    """What the translation needs of the target VC: its links and its assigned groups and transactional ids."""

    links: Mapping[str, str]  # link name -> physical topic
    groups: frozenset[str] = frozenset()
    txns: frozenset[str] = frozenset()


@dataclass
class Plan:
    copies: list[tuple[AclBinding, AclBinding]] = field(default_factory=list)  # (source, target), in order
    skipped: list[tuple[AclBinding, str]] = field(default_factory=list)  # (source, why)

    @property
    def targets(self) -> list[AclBinding]:
        return list(dict.fromkeys(target for _, target in self.copies))

    def removable(self, present: Iterable[AclBinding]) -> list[AclBinding]:
        """Source bindings migrated whole: every binding they became is in the target now."""
        have = set(present)
        sources: dict[AclBinding, bool] = {}
        for source, target in self.copies:
            sources[source] = sources.get(source, True) and target in have
        return [source for source, whole in sources.items() if whole]


def from_virtual_cluster(bindings: Iterable[AclBinding], principal: str) -> Plan:
    plan = Plan()
    for b in bindings:
        if b.principal == principal:
            plan.copies.append((b, b))
    return plan


def from_kafka_cluster(bindings: Iterable[AclBinding], principal: str, target: Target) -> Plan:
    plan = Plan()
    for b in bindings:
        if b.principal != principal:
            continue
        try:
            names = _translate(b, target)
        except _Skip as skip:
            plan.skipped.append((b, str(skip)))
            continue
        for resource_name, pattern in names:
            translated = AclBinding(
                b.resource_type, resource_name, pattern, b.principal, b.host, b.operation, b.permission
            )
            try:
                translated.validate()
            except AclError as exc:
                plan.skipped.append((b, str(exc)))
                break
            plan.copies.append((b, translated))
    return plan


class _Skip(Exception):
    pass


def _translate(b: AclBinding, target: Target) -> list[tuple[str, PatternType]]:
    """(name, pattern) of every binding `b` becomes in the target VC; _Skip says why there is none."""
    literal, prefixed = PatternType.LITERAL, PatternType.PREFIXED
    if b.pattern not in (literal, prefixed):
        raise _Skip(f"pattern type {b.pattern.name} is not an ACL's")
    if (b.name == "*" and b.pattern is literal) or b.resource_type is CLUSTER:
        return [(b.name, b.pattern)]  # every resource of the type, or the cluster: in the VC, the VC's
    if b.resource_type is TOPIC:
        out: list[tuple[str, PatternType]] = []
        for link, physical in sorted(target.links.items()):
            if b.pattern is literal and physical == b.name:
                out.append((link, literal))
            elif b.pattern is prefixed and physical.startswith(b.name):
                out.append((_prefix_for(b.name, link, physical), prefixed))
        if not out:
            raise _Skip(f"no topic {'named' if b.pattern is literal else 'starting with'} {b.name!r} is linked")
        return list(dict.fromkeys(out))
    if b.resource_type in (GROUP, TXN):
        assigned = target.groups if b.resource_type is GROUP else target.txns
        what = "group" if b.resource_type is GROUP else "transactional id"
        if b.pattern is literal:
            if b.name in assigned:
                return [(b.name, literal)]
            raise _Skip(f"{what} {b.name!r} is not assigned to the virtual cluster")
        names = sorted(n for n in assigned if n.startswith(b.name))
        if not names:
            raise _Skip(f"no {what} starting with {b.name!r} is assigned to the virtual cluster")
        return [(n, literal) for n in names]
    raise _Skip(f"{b.resource_type.name} ACLs have no place in a virtual cluster")


def _prefix_for(prefix: str, link: str, physical: str) -> str:
    """The prefix `prefix` of `physical`, renamed as `link` renames the topic (its tail kept)."""
    rest = physical[len(prefix) :]
    if rest and link.endswith(rest) and len(link) > len(rest):
        return link[: -len(rest)]
    return link  # the whole name was the prefix, or the rename dropped all of it: the link itself
