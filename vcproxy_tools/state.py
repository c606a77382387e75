"""`vcproxy state dump|export|import|orphans`: inspect, back up, restore and clean up the state topic.

`dump` and `export` only read. `import` writes a backup into the state topic (refusing a non-empty one
without --force). `orphans` lists physical VC topics no link points to and links whose topic is gone;
with --delete it removes them.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from proxy.tenancy.model import TenancyImage


def image_to_dict(image: TenancyImage) -> dict[str, Any]:
    """A plain, sorted view of the image for humans and diffs."""
    vcs = {}
    for name in sorted(image.vcs):
        vc = image.vcs[name]
        vcs[name] = {
            "id": vc.id,
            "cluster_id": vc.cluster_id,
            "principals": sorted(p for p, v in image.principals.items() if v == name),
            "client_ids": sorted(c for c, v in image.client_ids.items() if v == name),
            "links": dict(sorted(vc.links.items())),
        }
        if vc.settings:
            vcs[name]["settings"] = dict(sorted(vc.settings.items()))
    dangling = {  # bindings to a VC that does not exist (deleted, or written before its VC)
        "principals": {p: v for p, v in sorted(image.principals.items()) if v not in image.vcs},
        "client_ids": {c: v for c, v in sorted(image.client_ids.items()) if v not in image.vcs},
    }
    out: dict[str, Any] = {
        "virtual_clusters": vcs,
        "topic_ids": {t: str(i) for t, i in sorted(image.topic_ids.items())},
    }
    if any(dangling.values()):
        out["unbound"] = {k: v for k, v in dangling.items() if v}
    return out


def _store(args: argparse.Namespace) -> Any:
    """The config's StateStore, or None after printing why the config is bad."""
    from proxy.config import ConfigError, load_config
    from proxy.state.service import client_config
    from proxy.state.store import StateStore

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"vcproxy: invalid configuration:\n{exc}", file=sys.stderr)
        return None
    tc = config.tenancy
    return StateStore(client_config(config), tc.state_topic, tc.state_replication_factor)


class _Collect:
    """Records as replayed, in log order."""

    def __init__(self) -> None:
        self.records: list[tuple[str, Any]] = []

    def apply(self, key: str, value: Any) -> None:
        self.records.append((key, value))


def _dump(args: argparse.Namespace) -> int:
    import yaml

    from proxy.state.store import StateStoreError

    store = _store(args)
    if store is None:
        return 2
    image = TenancyImage()
    try:
        if store.exists(args.timeout):
            count = store.replay(image, args.timeout)
        else:
            print(f"vcproxy state: topic {store.topic} does not exist yet", file=sys.stderr)
            count = 0
    except StateStoreError as exc:
        print(f"vcproxy state: {exc}", file=sys.stderr)
        return 1
    out = {"state_topic": store.topic, "records": count, **image_to_dict(image)}
    sys.stdout.write(yaml.safe_dump(out, sort_keys=False))
    return 0


def _export(args: argparse.Namespace) -> int:
    from proxy.state.backup import dump_lines, image_records
    from proxy.state.store import StateStoreError

    store = _store(args)
    if store is None:
        return 2
    image = TenancyImage()
    try:
        if not store.exists(args.timeout):
            print(f"vcproxy state: topic {store.topic} does not exist", file=sys.stderr)
            return 1
        store.replay(image, args.timeout)
    except StateStoreError as exc:
        print(f"vcproxy state: {exc}", file=sys.stderr)
        return 1
    records = image_records(image)
    sys.stdout.writelines(dump_lines(records))
    print(f"exported {len(records)} record(s) from {store.topic}: {len(image.vcs)} virtual cluster(s)", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    from proxy.state.backup import image_records, parse_lines, replay_records
    from proxy.state.store import StateStoreError

    store = _store(args)
    if store is None:
        return 2
    try:
        with open(args.backup, encoding="utf-8") as f:
            records = parse_lines(f)
    except (OSError, ValueError) as exc:
        print(f"vcproxy state import: {args.backup}: {exc}", file=sys.stderr)
        return 2
    wanted = image_records(replay_records(records))
    try:
        store.ensure_topic(args.timeout, create=True)
        existing = _Collect()
        store.replay(existing, args.timeout)
        if existing.records and not args.force:
            print(
                f"vcproxy state import: {store.topic} is not empty ({len(existing.records)} record(s)); "
                "--force overwrites it",
                file=sys.stderr,
            )
            return 1
        # Overwrite: every key present goes first, so the backup alone decides what replays.
        tombstones = [(key, None) for key in dict.fromkeys(k for k, _ in existing.records)]
        store.write(tombstones + wanted, args.timeout)
        check = TenancyImage()
        store.replay(check, args.timeout)
    except StateStoreError as exc:
        print(f"vcproxy state import: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    if image_records(check) != wanted:
        print(f"vcproxy state import: {store.topic} does not replay to the backup", file=sys.stderr)
        return 1
    print(f"imported {len(wanted)} record(s) into {store.topic}: {len(check.vcs)} virtual cluster(s)")
    return 0


def _orphans(args: argparse.Namespace) -> int:
    import yaml

    from proxy.state.backup import as_yaml_dict, find_orphans, unlink_records
    from proxy.state.store import StateStoreError
    from proxy.tenancy.orphans import forget_records

    store = _store(args)
    if store is None:
        return 2
    try:
        if not store.exists(args.timeout):
            print(f"vcproxy state: topic {store.topic} does not exist", file=sys.stderr)
            return 1
        before = store.topic_names(args.timeout)
        image = TenancyImage()
        store.replay(image, args.timeout)
        orphans = find_orphans(image, before, store.topic_names(args.timeout))
        sys.stdout.write(yaml.safe_dump({"state_topic": store.topic, **as_yaml_dict(orphans)}, sort_keys=False))
        if not args.delete:
            if orphans.topics or orphans.links:
                print("dry run: nothing changed (--delete removes them)", file=sys.stderr)
            return 0
        # Look again right before deleting: a topic linked since is no longer an orphan.
        fresh = TenancyImage()
        store.replay(fresh, args.timeout)
        linked = {p for vc in fresh.vcs.values() for p in vc.physical_links}
        topics = [t for t in orphans.topics if t not in linked]
        links = [x for x in orphans.links if fresh.vcs.get(x[0]) and fresh.vcs[x[0]].links.get(x[1]) == x[2]]
        failed = {t: e for t, e in store.delete_topics(topics, args.timeout).items() if e is not None}
        gone = [t for t in topics if t not in failed and t in fresh.orphans]  # no longer counted against a VC
        forgotten = [r for t in gone for r in forget_records(fresh, t)]
        store.write(unlink_records(fresh, links) + forgotten, args.timeout)
    except StateStoreError as exc:
        print(f"vcproxy state orphans: {exc}", file=sys.stderr)
        return 1
    finally:
        store.close()
    for topic, error in failed.items():
        print(f"could not delete {topic}: {error}", file=sys.stderr)
    print(f"deleted {len(topics) - len(failed)} topic(s) and {len(links)} dangling link(s)", file=sys.stderr)
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    state = sub.add_parser(
        "state",
        help="inspect the virtual-cluster state topic",
        description="Inspect, back up, restore and clean up the virtual-cluster state topic (tenancy.state_topic) "
        "on the upstream cluster, reached with the configuration's upstream settings (docs/state.md).",
    )
    state_sub = state.add_subparsers(dest="state_command", required=True)
    dump = state_sub.add_parser(
        "dump",
        help="replay the state topic and print it as YAML",
        description="Replay the state topic from its beginning, as a proxy does when it starts, and print the "
        "result as YAML: each virtual cluster with its VC id, cluster id, bound principals and client ids and "
        "topic links (name -> physical topic), and the topic ids the proxy knows. Only reads.",
    )
    dump.add_argument("--config", required=True, help="proxy YAML configuration (upstream and tenancy)")
    dump.add_argument("--timeout", type=float, default=30, help="seconds to wait for the cluster")
    dump.set_defaults(func=_dump)
    export = state_sub.add_parser(
        "export",
        help="write the replayed state as JSON lines (a backup) to stdout",
        description="Replay the state topic and write its live records as JSON lines to stdout: a backup that "
        "`vcproxy state import` restores. Only reads.",
    )
    export.set_defaults(func=_export)
    restore = state_sub.add_parser(
        "import",
        help="restore a backup made by `state export` into the state topic",
        description="Write the records of a backup made by `vcproxy state export` into the state topic (created "
        "if missing). A state topic that already holds records is refused unless --force. Stop the proxies "
        "first (docs/state.md#backup-and-restore).",
    )
    restore.add_argument("backup", help="the JSON-lines file `state export` wrote")
    restore.add_argument("--force", action="store_true", help="overwrite a state topic that is not empty")
    restore.set_defaults(func=_import)
    orphans = state_sub.add_parser(
        "orphans",
        help="physical VC topics no link points to, and links without a topic",
        description="List the physical topics of virtual clusters that no link points to, and the links whose "
        "physical topic is gone. A dry run unless --delete, which deletes those topics and links.",
    )
    orphans.add_argument("--delete", action="store_true", help="delete them (default: only list them)")
    orphans.set_defaults(func=_orphans)
    for command in (export, restore, orphans):
        command.add_argument("--config", required=True, help="proxy YAML configuration (upstream and tenancy)")
        command.add_argument("--timeout", type=float, default=30, help="seconds to wait for the cluster")
