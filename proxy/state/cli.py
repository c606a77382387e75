"""`vcproxy state dump`: the replayed state topic as YAML (read-only: creates and writes nothing)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from ..tenancy.model import TenancyImage


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


def _dump(args: argparse.Namespace) -> int:
    import yaml

    from ..config import ConfigError, load_config
    from .service import client_config
    from .store import StateStore, StateStoreError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"vcproxy: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    tc = config.tenancy
    store = StateStore(client_config(config), tc.state_topic, tc.state_replication_factor)
    image = TenancyImage()
    try:
        if store.exists(args.timeout):
            count = store.replay(image, args.timeout)
        else:
            print(f"vcproxy state: topic {tc.state_topic} does not exist yet", file=sys.stderr)
            count = 0
    except StateStoreError as exc:
        print(f"vcproxy state: {exc}", file=sys.stderr)
        return 1
    out = {"state_topic": tc.state_topic, "records": count, **image_to_dict(image)}
    sys.stdout.write(yaml.safe_dump(out, sort_keys=False))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    state = sub.add_parser("state", help="inspect the virtual-cluster state topic")
    state_sub = state.add_subparsers(dest="state_command", required=True)
    dump = state_sub.add_parser("dump", help="replay the state topic and print it as YAML")
    dump.add_argument("--config", required=True, help="proxy YAML configuration (upstream and tenancy)")
    dump.add_argument("--timeout", type=float, default=30, help="seconds to wait for the cluster")
    dump.set_defaults(func=_dump)
