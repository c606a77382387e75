"""`vcproxy virtual-clusters`: the KIP-1134 tool (create, alter, delete, list, describe) over the proxy's
management RPCs (docs/management.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from proxy.protocol import management as m
from vcproxy_tools import acls as acl_cli
from vcproxy_tools.admin_client import ConfigProblem, ConnectError, Connection, login_from

OK, REFUSED, USAGE, UNREACHABLE, UNAUTHORIZED = 0, 1, 2, 3, 4

EPILOG = """\
--topic names the physical topic and --link the name the virtual cluster sees (default: the same name);
the KIP's examples leave open which is which.

ACL migration (alter --add --user U): --copy-acls-from SOURCE copies U's ACLs from SOURCE (another virtual
cluster, or kafka-cluster: the broker's own ACLs, topic names translated to the links) before U is added;
--remove-old-acls-from SOURCE then removes from SOURCE those the virtual cluster now has.

Settings (alter --config K=V, --delete-config K; repeatable): description and labels (k=v,k2=v2) by the
VC's admins; allow_everyone_if_no_acl_found, delete_physical_topics, max_partitions_per_topic, max_topics,
max_partitions (null: no limit), allow_unlisted_configs, the state limits (max_users, max_acls,
max_client_ids, max_quota_entities, max_user_name_bytes) and orphan_grace_seconds by operators only
(docs/management.md).

exit codes: 0 done; 1 the proxy refused an item (each item's error is printed); 2 usage error;
3 cannot connect or log in; 4 not authorized (this principal may not manage these virtual clusters).
"""

_RESOURCES = (
    ("user", m.ResourceType.USER, "PRINCIPAL", "a principal (alice means User:alice)"),
    ("client", m.ResourceType.CLIENT, "CLIENT_ID", "a client id"),
    ("topic", m.ResourceType.TOPIC, "TOPIC", "a physical topic, linked under --link"),
    ("group", m.ResourceType.GROUP, "GROUP", "an existing consumer group (migration)"),
    ("transactional_id", m.ResourceType.TRANSACTIONAL_ID, "TRANSACTIONAL_ID", "an existing transactional id"),
    ("admin", m.ResourceType.ADMIN, "PRINCIPAL", "a principal that may describe and alter this VC"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    tool = subparsers.add_parser(
        "virtual-clusters",
        help="create, alter, delete, list and describe virtual clusters on a running proxy (KIP-1134)",
        description="Manage virtual clusters at runtime through a proxy's management RPCs, as the KIP's "
        "virtual-clusters tool does. Log in with --command-config, as Kafka's tools do.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = tool.add_subparsers(dest="vc_command", required=True)

    def command(name: str, help_text: str, vc: bool = True) -> argparse.ArgumentParser:
        parser = commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...] of the proxy")
        parser.add_argument("--command-config", type=Path, help="client properties (security.protocol, sasl.*, ssl.*)")
        parser.add_argument("--output", choices=("text", "json"), default="text", help="text (default) or json")
        parser.add_argument("--timeout-ms", type=int, default=60000, help="how long the proxy may take (default 60000)")
        if vc:
            parser.add_argument("--virtual-cluster", required=True, help="the virtual cluster's name")
        parser.set_defaults(func=_run)
        return parser

    command("create", "create a virtual cluster").add_argument(
        "--validate-only", action="store_true", help="check only; change nothing"
    )
    delete = command("delete", "delete an empty virtual cluster")
    delete.add_argument("--validate-only", action="store_true", help="check only; change nothing")
    delete.add_argument(
        "--force",
        action="store_true",
        help="delete it although it still has groups or transactional ids: its groups and their committed "
        "offsets are deleted first (transactional ids expire on their own)",
    )
    command("list", "list the virtual clusters this principal may see", vc=False)
    command("describe", "show a virtual cluster's links, users, client ids, groups, transactional ids and admins")
    alter = command("alter", "add a resource to a virtual cluster, or remove one; change its settings")
    alter.add_argument("--validate-only", action="store_true", help="check only; change nothing")
    alter.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="set one of the VC's settings"
    )
    alter.add_argument(
        "--delete-config", action="append", default=[], metavar="KEY", help="remove a setting (the config's applies)"
    )
    op = alter.add_mutually_exclusive_group()
    op.add_argument("--add", action="store_true", help="add the resource")
    op.add_argument("--remove", action="store_true", help="remove the resource")
    what = alter.add_mutually_exclusive_group()
    for dest, _, metavar, text in _RESOURCES:
        what.add_argument(f"--{dest.replace('_', '-')}", dest=dest, metavar=metavar, help=text)
    alter.add_argument("--link", help="with --topic: the name the virtual cluster sees (default: the topic's)")
    for flag, text in (
        (
            "--copy-acls-from",
            "with --add --user: copy the user's ACLs from SOURCE (a virtual cluster, or kafka-cluster)",
        ),
        ("--migrate-acls-from", "the same as --copy-acls-from (the KIP's examples use both)"),
        ("--remove-old-acls-from", "with --add --user: then remove from SOURCE the user's ACLs the VC now has"),
    ):
        alter.add_argument(flag, metavar="SOURCE", help=text)


def _run(args: argparse.Namespace) -> int:
    try:
        request = _request(args)
    except ValueError as exc:
        print(f"vcproxy virtual-clusters: {exc}", file=sys.stderr)
        return USAGE
    try:
        login = login_from(args.command_config)
    except ConfigProblem as exc:
        print(f"vcproxy virtual-clusters: {exc}", file=sys.stderr)
        return USAGE
    if _migration(args):  # vcproxy_tools/acls.py: the ACLs, then the user, then the old ACLs
        user = args.user if ":" in args.user else f"User:{args.user}"  # as the plane reads --user
        return acl_cli.migrate(args, login, user)
    key = type(request).__api_key__
    try:
        with Connection(
            args.bootstrap_server, login, timeout=max(args.timeout_ms / 1000, 1) + 5, apis=[(key, 0)]
        ) as conn:
            if key not in conn.versions:
                print(
                    f"vcproxy virtual-clusters: {m.NAMES[key]} is not offered to this principal: it may not manage "
                    "virtual clusters here, or the server is not a vcproxy with virtual clusters on",
                    file=sys.stderr,
                )
                return UNAUTHORIZED
            response = conn.request(key, 0, request)
    except (ConnectError, OSError) as exc:
        print(f"vcproxy virtual-clusters: {exc}", file=sys.stderr)
        return UNREACHABLE
    out, codes = _result(args, response)
    if args.output == "json":
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        print(_text(args, out))
    if codes and all(c == ErrorCode.cluster_authorization_failed for c in codes):
        return UNAUTHORIZED
    return REFUSED if any(codes) else OK


def _migration(args: argparse.Namespace) -> bool:
    return any(getattr(args, f, None) for f in ("copy_acls_from", "migrate_acls_from", "remove_old_acls_from"))


def _request(args: argparse.Namespace) -> Any:
    timeout = i32(args.timeout_ms)
    validate = bool(getattr(args, "validate_only", False))
    name = getattr(args, "virtual_cluster", None)
    if args.vc_command == "create":
        return m.CreateVirtualClustersRequest(
            virtual_clusters=(m.CreatableVirtualCluster(name=name),), timeout_ms=timeout, validate_only=validate
        )
    if args.vc_command == "delete":
        return m.DeleteVirtualClustersRequest(
            virtual_clusters=(m.DeletableVirtualCluster(name=name),),
            timeout_ms=timeout,
            validate_only=validate,
            force=bool(args.force),
        )
    if args.vc_command == "list":
        return m.ListVirtualClustersRequest()
    if args.vc_command == "describe":
        return m.DescribeVirtualClustersRequest(virtual_clusters=(m.DescribableVirtualCluster(name=name),))
    if _migration(args) and not (args.add and args.user is not None):
        raise ValueError("--copy-acls-from, --migrate-acls-from and --remove-old-acls-from go with --add --user")
    configs = _configs(args)
    chosen = [(dest, kind) for dest, kind, _, _ in _RESOURCES if getattr(args, dest) is not None]
    if not chosen and not configs:
        raise ValueError(
            "alter needs one of --user, --client, --topic, --group, --transactional-id, --admin, "
            "or --config/--delete-config"
        )
    resources: tuple[m.VirtualClusterResourceChange, ...] = ()
    if chosen:
        dest, kind = chosen[0]
        if args.link is not None and kind is not m.ResourceType.TOPIC:
            raise ValueError("--link goes with --topic")
        if not (args.add or args.remove):
            raise ValueError("a resource needs --add or --remove")
        operation = m.ResourceOperation.ADD if args.add else m.ResourceOperation.REMOVE
        value = getattr(args, dest)
        topic = kind is m.ResourceType.TOPIC
        resources = (  # a topic link as inkless puts it: the link's name, then the physical topic
            m.VirtualClusterResourceChange(
                resource_type=i8(kind),
                resource_operation=i8(operation),
                resource_name=(args.link or value) if topic else value,
                physical_topic_name=value if topic else None,
            ),
        )
    elif args.add or args.remove or args.link is not None:
        raise ValueError("--add, --remove and --link go with a resource (--user, --topic...)")
    return m.AlterVirtualClustersRequest(
        virtual_clusters=(m.AlterableVirtualCluster(name=name, resources=resources, configs=configs),),
        timeout_ms=timeout,
        validate_only=validate,
    )


def _configs(args: argparse.Namespace) -> tuple[m.VirtualClusterConfig, ...]:
    """--config K=V and --delete-config K (the proxy checks keys and values)."""
    out = []
    for item in args.config:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--config {item!r}: expected KEY=VALUE")
        out.append(m.VirtualClusterConfig(name=key, config_operation=i8(m.ConfigOperation.SET), value=value))
    for key in args.delete_config:
        out.append(m.VirtualClusterConfig(name=key, config_operation=i8(m.ConfigOperation.DELETE)))
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError("each setting may be given once")
    return tuple(out)


def _result(args: argparse.Namespace, response: Any) -> tuple[dict[str, Any], list[int]]:
    """(the json object, every error code in it)."""
    if isinstance(response, m.ListVirtualClustersResponse):
        code = int(response.error_code)
        return {"error_code": code, "virtual_clusters": [v.name for v in response.virtual_clusters]}, [code]
    if isinstance(response, m.DescribeVirtualClustersResponse):
        vc = response.virtual_clusters[0]
        out = {
            "name": vc.name,
            "error_code": int(vc.error_code),
            "error_message": vc.error_message,
            "cluster_id": vc.cluster_id,
            "topic_links": [{"link": t.link_name, "physical": t.physical_name} for t in vc.topic_links],
            "users": list(vc.users),
            "client_ids": list(vc.client_ids),
            "consumer_groups": list(vc.consumer_groups),
            "transactional_ids": list(vc.transactional_ids),
            "admins": list(vc.admins),
            "settings": {c.name: c.value for c in vc.configs},
        }
        return out, [int(vc.error_code)]
    if isinstance(response, m.AlterVirtualClustersResponse):
        items = [
            {
                "virtual_cluster": vc.name,
                "resource_type": m.ResourceType(int(r.resource_type)).name
                if int(r.resource_type) in set(m.ResourceType)
                else int(r.resource_type),
                # a topic link's physical topic and, when it differs, its name (as --topic and --link)
                "resource_name": r.physical_topic_name or r.resource_name,
                "link_name": r.resource_name
                if r.physical_topic_name is not None and r.resource_name != r.physical_topic_name
                else None,
                "operation": "add" if int(r.resource_operation) == m.ResourceOperation.ADD else "remove",
                "error_code": int(r.error_code),
                "error_message": r.error_message,
            }
            for vc in response.virtual_clusters
            for r in vc.resources
        ]
        items += [_settings_result(args, vc) for vc in response.virtual_clusters if args.config or args.delete_config]
    else:  # Create, Delete
        entries = (
            response.virtual_clusters if isinstance(response, m.CreateVirtualClustersResponse) else response.responses
        )
        items = [{"name": e.name, "error_code": int(e.error_code), "error_message": e.error_message} for e in entries]
    return {"validate_only": bool(getattr(args, "validate_only", False)), "results": items}, [
        i["error_code"] for i in items
    ]


def _settings_result(args: argparse.Namespace, vc: Any) -> dict[str, Any]:
    return {
        "virtual_cluster": vc.name,
        "settings": {
            **{k: v for k, _, v in (c.partition("=") for c in args.config)},
            **dict.fromkeys(args.delete_config),
        },
        "error_code": int(vc.configs_error_code),
        "error_message": vc.configs_error_message,
    }


def _text(args: argparse.Namespace, out: dict[str, Any]) -> str:
    command = args.vc_command
    if command == "list":
        if out["error_code"]:
            return f"Error {out['error_code']}: not authorized to list virtual clusters."
        return "\n".join(out["virtual_clusters"])
    if command == "describe":
        if out["error_code"]:
            return f"Error {out['error_code']} describing {out['name']}: {out['error_message']}"
        lines = [f"Virtual cluster: {out['name']}", f"  Cluster id:        {out['cluster_id']}"]
        links = [f"{t['link']} -> {t['physical']}" for t in out["topic_links"]]
        for title, values in (
            ("Topic links", links),
            ("Users", out["users"]),
            ("Client ids", out["client_ids"]),
            ("Consumer groups", out["consumer_groups"]),
            ("Transactional ids", out["transactional_ids"]),
            ("Admins", out["admins"]),
            ("Settings", [f"{k}={v}" for k, v in out["settings"].items()]),
        ):
            lines.append(f"  {title + ':':<19}{', '.join(values) if values else '-'}")
        return "\n".join(lines)
    done = (
        "Validated" if out["validate_only"] else {"create": "Created", "delete": "Deleted", "alter": "Changed"}[command]
    )
    lines = []
    for item in out["results"]:
        if "settings" in item:
            changes = ", ".join(f"{k}={v}" if v is not None else f"{k} deleted" for k, v in item["settings"].items())
            what = f"settings {changes}"
        else:
            what = item.get("name") or f"{item['operation']} {item['resource_type']} {item['resource_name']}"
        if item.get("link_name"):
            what += f" as {item['link_name']}"
        where = item.get("virtual_cluster") or args.virtual_cluster
        if item["error_code"]:
            lines.append(f"Error {item['error_code']} ({what}, virtual cluster {where}): {item['error_message']}")
        elif command == "alter":
            lines.append(f"{done} virtual cluster {where}: {what}.")
        else:
            lines.append(f"{done} virtual cluster {what}.")
    return "\n".join(lines)
