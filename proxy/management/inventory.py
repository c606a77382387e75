"""What a VC has on the broker (sans-I/O): its groups and transactional ids, as the broker lists them.

A VC's own groups and transactional ids live only on the broker (`<vc-id>.<name>`, proxy/tenancy/model.py);
the state topic records only those assigned by migration. DescribeVirtualClusters lists both (the KIP: "the
topics, users, clients, groups and transactions assigned to that virtual cluster"), and
DeleteVirtualClusters refuses a VC that still has any unless forced. The listing comes from the broker's
ListGroups and ListTransactions (every broker, under the proxy's own upstream login: proxy/net/listings.py);
this module turns it into each VC's names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..tenancy.model import VirtualCluster

GONE = frozenset({"Dead"})  # a group or transaction the coordinator is removing: nothing left of it
MAX_NAMED = 20  # names quoted in a refusal's message; the rest are counted


@dataclass(frozen=True)
class Listing:
    """Every group and transactional id the brokers list, with its state; `error` when a broker could
    not be asked (the listing is then incomplete)."""

    groups: dict[str, str] = field(default_factory=dict)  # physical group id -> state
    txns: dict[str, str] = field(default_factory=dict)  # physical transactional id -> state
    error: str | None = None


def own_groups(vc: VirtualCluster, listing: Listing) -> dict[str, str]:
    """The VC's own live groups: VC name -> physical id (not those assigned by migration)."""
    return _own(vc, listing.groups)


def own_txns(vc: VirtualCluster, listing: Listing) -> dict[str, str]:
    return _own(vc, listing.txns)


def _own(vc: VirtualCluster, listed: dict[str, str]) -> dict[str, str]:
    out = {}
    for physical, state in listed.items():
        name = vc.virtual_id(physical)
        if name is not None and state not in GONE:
            out[name] = physical
    return out


def groups_of(vc: VirtualCluster, listing: Listing | None) -> list[str]:
    """The groups DescribeVirtualClusters shows: assigned and own, in the VC's names."""
    return sorted(vc.groups | (set(own_groups(vc, listing)) if listing is not None else set()))


def txns_of(vc: VirtualCluster, listing: Listing | None) -> list[str]:
    return sorted(vc.txns | (set(own_txns(vc, listing)) if listing is not None else set()))


def named(what: str, names: list[str]) -> str:
    """`2 groups (a, b)`, at most MAX_NAMED names quoted."""
    shown = ", ".join(names[:MAX_NAMED]) + (f", and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")
    return f"{len(names)} {what}{'s' if len(names) != 1 else ''} ({shown})"
