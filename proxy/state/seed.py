"""Seeding the state topic from the `tenancy.virtual_clusters` section of the proxy config.

The seed bootstraps; the management RPCs change things at runtime (docs/management.md). Each entry of
the seed (a VC, a principal or client-id binding, an admin: its rights as ACLs) is applied once, the first time a proxy
starts with it, and remembered in a `seeded` record of its VC (a setting by key and value: an edited
value is a new entry); later starts apply only entries never
applied before. So a restart never undoes a runtime change (an unbound principal stays unbound, a
deleted VC stays deleted), and an entry added to the seed still takes effect. A VC that exists keeps
its id and cluster id, since its groups, transactional ids and the cluster id its clients saw all
hang off them. Topics are not seeded: links are made by CreateTopics or the management RPCs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Protocol

from ..acl.model import acl_record
from ..tenancy.model import (
    KAFKA_CLUSTER,
    TenancyError,
    TenancyImage,
    client_record,
    principal_record,
    seeded_record,
    setting_record,
    validate_vc_name,
    vc_record,
)
from ..tenancy.rights import admin_bindings
from ..tenancy.settings import seeded as seeded_settings
from .store import Record


class VirtualClusterSeed(Protocol):
    """What seeding reads of one VC (config.VirtualClusterSeedConfig has it)."""

    @property
    def name(self) -> str: ...
    @property
    def principals(self) -> Sequence[str]: ...
    @property
    def client_ids(self) -> Sequence[str]: ...
    @property
    def admins(self) -> Sequence[str]: ...


def seed_records(image: TenancyImage, seed: Iterable[VirtualClusterSeed]) -> list[Record]:
    """The records that apply the seed's entries never applied before: empty when there are none (a
    restart writes nothing, and undoes nothing done at runtime).

    VC records come first, so a binding never names a VC that a reader has not seen yet; each VC's
    `seeded` record comes after its bindings. A binding whose principal or client id is bound elsewhere
    by then (a runtime change) is left alone. Raises TenancyError for an invalid seed (bad name, a VC
    twice, a principal or client id in two VCs).
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
        done = image.seeded.get(vc.name)
        if done is None:  # never seeded: create it unless it exists (made at runtime, or by an older proxy)
            if vc.name not in image.vcs:
                vcs.append(vc_record(vc.name))
            done = {}
        elif vc.name not in image.vcs:
            continue  # seeded once, deleted at runtime since: stays deleted
        applied = {kind: set(done.get(kind, ())) for kind in ("vc", "principals", "client_ids", "admins", "settings")}
        for kind, label, values, bound, record in (
            ("principals", "principal", vc.principals, image.principals, principal_record),
            ("client_ids", "client id", vc.client_ids, image.client_ids, client_record),
        ):
            for value in values:
                first = owner.setdefault((kind, value), vc.name)
                if first != vc.name:
                    raise TenancyError(f"{label} {value!r} is seeded in both {first!r} and {vc.name!r}")
                if value in applied[kind]:
                    continue
                applied[kind].add(value)
                if bound.get(value) is None:  # bound elsewhere at runtime: the runtime change stands
                    bindings.append(record(value, vc.name))
        for admin in vc.admins:  # an admin is a holder of the admin rights on the VC: ACLs in kafka-cluster's
            if admin not in applied["admins"]:
                applied["admins"].add(admin)
                bindings += [acl_record(KAFKA_CLUSTER, b, True) for b in admin_bindings(vc.name, admin)]
        for key, value in seeded_settings(vc).items():  # a runtime change stands until the seed's value changes
            entry = f"{key}={json.dumps(value, sort_keys=True)}"
            if entry not in applied["settings"]:
                applied["settings"] = {e for e in applied["settings"] if not e.startswith(f"{key}=")} | {entry}
                bindings.append(setting_record(vc.name, key, value))
        applied["vc"] = {vc.name}
        entries = {kind: sorted(values) for kind, values in applied.items()}
        if entries != {kind: sorted(done.get(kind, ())) for kind in entries}:
            bindings.append(seeded_record(vc.name, entries))
    return vcs + bindings
