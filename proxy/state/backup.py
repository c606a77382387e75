"""Backup, restore and orphan detection for the state topic, sans-I/O (the CLI in cli.py does the I/O).

A backup is the replayed image written back out as records, one JSON object per line
(`{"key": [...], "value": {...} | null}`): the canonical state, independent of the topic's history and
of compaction. Replaying a restored backup gives the same VCs, ids, cluster ids, bindings, links,
topic ids, link generations, assigned groups and transactional ids, admins, ACLs, the VCs' settings,
quotas and the proxy's users (salted SCRAM keys).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..acl.model import acl_record
from ..tenancy.model import (
    KAFKA_CLUSTER,
    TenancyImage,
    admin_record,
    group_record,
    seeded_record,
    setting_record,
    txn_record,
)

Record = tuple[str, dict[str, Any] | None]  # as in store.py (not imported: it loads confluent-kafka)

# A VC topic's physical name: `<uuid>.<link>` (random uuid4 or derived uuid5).
VC_TOPIC = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[a-zA-Z0-9._-]+$")


def _key(*parts: str) -> str:
    return json.dumps(list(parts), separators=(",", ":"))


def image_records(image: TenancyImage) -> list[Record]:
    """Records that replay to `image`: VCs first (bindings and links name them), links in the order
    they were applied (the first link to a physical topic names it back)."""
    records: list[Record] = []
    for name, vc in sorted(image.vcs.items()):
        records.append((_key("vc", name), {"id": vc.id, "cluster_id": vc.cluster_id}))
    records += [(_key("principal", p), {"vc": v}) for p, v in sorted(image.principals.items())]
    records += [(_key("client", c), {"vc": v}) for c, v in sorted(image.client_ids.items())]
    for name, vc in sorted(image.vcs.items()):
        order = [link for names in vc.physical_links.values() for link in names]
        records += [(_key("link", name, link), {"physical": vc.links[link]}) for link in order]
    records += [(_key("topic", t), {"topic_id": str(i)}) for t, i in sorted(image.topic_ids.items())]
    records += [(_key("parts", t), {"n": n}) for t, n in sorted(image.partitions.items())]
    records += [(_key("gen", v, link), {"gen": g}) for (v, link), g in sorted(image.generations.items())]
    for name, vc in sorted(image.vcs.items()):  # what migration assigned, the VC's admins and ACLs
        records += [group_record(name, g, True) for g in sorted(vc.groups)]
        records += [txn_record(name, t, True) for t in sorted(vc.txns)]
        records += [admin_record(name, p, True) for p in sorted(vc.admins)]
        records += [acl_record(name, b, True) for b in sorted(vc.acls, key=lambda b: b.key_parts())]
        records += [setting_record(name, k, v) for k, v in sorted(vc.settings.items())]
    records += [acl_record(KAFKA_CLUSTER, b, True) for b in sorted(image.cluster_acls, key=lambda b: b.key_parts())]
    records += [seeded_record(name, entries) for name, entries in sorted(image.seeded.items())]
    records += image.quotas.records()
    records += image.users.records()  # the proxy's users: salted keys only
    return records


def dump_lines(records: Iterable[Record]) -> Iterable[str]:
    for key, value in records:
        yield json.dumps({"key": json.loads(key), "value": value}, separators=(",", ":"), sort_keys=True) + "\n"


def parse_lines(lines: Iterable[str]) -> list[Record]:
    """Records of a backup; ValueError (with the line number) for anything that is not one."""
    records: list[Record] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            key, value = entry["key"], entry["value"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"line {number}: not a state record: {exc}") from None
        if not isinstance(key, list) or not key or not all(isinstance(p, str) for p in key):
            raise ValueError(f"line {number}: key must be a non-empty JSON array of strings")
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"line {number}: value must be a JSON object or null")
        records.append((_key(*key), value))
    return records


def replay_records(records: Iterable[Record]) -> TenancyImage:
    image = TenancyImage()
    for key, value in records:
        image.apply(key, value)
    return image


@dataclass
class Orphans:
    topics: list[str]  # physical VC-looking topics no link points to
    links: list[tuple[str, str, str]]  # (vc, link, physical) whose physical topic is gone


def find_orphans(image: TenancyImage, before: set[str], after: set[str]) -> Orphans:
    """Topics listed both before and after the replay that no link points to, and links whose topic was
    in neither listing. Two listings around the replay keep a topic created (and linked) meanwhile
    from looking orphaned."""
    linked = {physical for vc in image.vcs.values() for physical in vc.physical_links}
    topics = sorted(t for t in before & after if VC_TOPIC.match(t) and t not in linked)
    links = sorted(
        (vc.name, link, physical)
        for vc in image.vcs.values()
        for link, physical in vc.links.items()
        if physical not in before and physical not in after
    )
    return Orphans(topics, links)


def unlink_records(image: TenancyImage, links: Iterable[tuple[str, str, str]]) -> list[Record]:
    """Tombstones for dangling links, each after its next generation (as DeleteTopics writes them)."""
    records: list[Record] = []
    for vc, link, _ in links:
        records.append((_key("gen", vc, link), {"gen": image.generation(vc, link) + 1}))
        records.append((_key("link", vc, link), None))
    return records


def as_yaml_dict(orphans: Orphans) -> dict[str, Any]:
    return {
        "orphan_topics": orphans.topics,
        "dangling_links": [{"vc": v, "link": link, "physical": p} for v, link, p in orphans.links],
    }
