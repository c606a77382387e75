"""Seeding the state topic from the `tenancy.virtual_clusters` section of the proxy config.

The seed is a floor, not a mirror: it creates missing VCs and (re)binds the principals and client
ids it names, and never deletes anything. A VC that exists keeps its id and cluster id, since its
groups, transactional ids and the cluster id its clients saw all hang off them. Topics are not
seeded: a link needs a physical topic, which the proxy creates when a tenant creates a topic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from ..tenancy.model import TenancyError, TenancyImage, client_record, principal_record, validate_vc_name, vc_record
from .store import Record


class VirtualClusterSeed(Protocol):
    """What seeding reads of one VC (config.VirtualClusterSeedConfig has it)."""

    @property
    def name(self) -> str: ...
    @property
    def principals(self) -> Sequence[str]: ...
    @property
    def client_ids(self) -> Sequence[str]: ...


def seed_records(image: TenancyImage, seed: Iterable[VirtualClusterSeed]) -> list[Record]:
    """The records that bring `image` up to `seed`: empty when it already is (a restart writes nothing).

    VC records come first, so a binding never names a VC that a reader has not seen yet.
    Raises TenancyError for an invalid seed (bad name, a VC twice, a principal or client id in two VCs).
    """
    vcs: list[Record] = []
    bindings: list[Record] = []
    owner: dict[tuple[str, str], str] = {}
    names: set[str] = set()
    for vc in seed:
        validate_vc_name(vc.name)
        if vc.name in names:
            raise TenancyError(f"virtual cluster {vc.name!r} is seeded twice")
        names.add(vc.name)
        if vc.name not in image.vcs:
            vcs.append(vc_record(vc.name))
        for kind, values, bound, record in (
            ("principal", vc.principals, image.principals, principal_record),
            ("client id", vc.client_ids, image.client_ids, client_record),
        ):
            for value in values:
                first = owner.setdefault((kind, value), vc.name)
                if first != vc.name:
                    raise TenancyError(f"{kind} {value!r} is seeded in both {first!r} and {vc.name!r}")
                if bound.get(value) != vc.name:
                    bindings.append(record(value, vc.name))
    return vcs + bindings
