"""Orphaned physical topics (issue 23, point 4), sans-I/O: what the periodic sweep does next.

A VC's DeleteTopics removes its link; with `delete_physical_topics: false` (KIP-1134's default) the
physical topic stays, with its partitions and data, invisible to the tenant. The state remembers which VC
left it (`["orphan", physical]` → {vc, at}: proxy/tenancy/model.py); it counts against that VC's topic and
partition limits until it is gone. An operator deletes it (`vcproxy state orphans --delete`, or any
DeleteTopics on the physical cluster), or sets the VC's `orphan_grace_seconds`: the proxy then deletes it
itself that long after the VC left it (the Trio shell's loop in proxy/net/upkeep.py).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from . import limits
from .model import TenancyImage, orphan_record, partitions_record, topic_record

Record = tuple[str, dict[str, Any] | None]


@dataclass
class Sweep:
    delete: list[str] = field(default_factory=list)  # physical topics whose grace is over
    forget: list[str] = field(default_factory=list)  # orphan records to drop: topic gone, or linked again


def sweep(image: TenancyImage, existing: Collection[str], now: float) -> Sweep:
    """What to do with the image's orphans, given the topics the broker has (`existing`) at `now`."""
    out = Sweep()
    for physical, orphan in sorted(image.orphans.items()):
        if physical not in existing or image.links_to(physical):
            out.forget.append(physical)
            continue
        grace = limits.of(image, orphan.vc).orphan_grace_seconds if orphan.vc in image.vcs else None
        if grace is not None and orphan.at + grace <= now:
            out.delete.append(physical)
    return out


def forget_records(image: TenancyImage, physical: str) -> list[Record]:
    """A gone orphan's records: the orphan itself and what the state knew of the topic."""
    records: list[Record] = [orphan_record(physical, None)]
    if physical in image.topic_ids:
        records.append(topic_record(physical, None))
    if physical in image.partitions:
        records.append(partitions_record(physical, None))
    return records
