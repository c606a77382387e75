"""`vcproxy acls`: the ACLs of virtual clusters for operators, with kafka-acls' options and the KIP's
--virtual-cluster and --virtual-cluster-pattern-type, over the proxy's Describe/Create/DeleteVirtualClusterAcls
(docs/acls-operators.md). Also the requests the ACL migration of `vcproxy virtual-clusters alter` makes.

Blocking and small: it builds the requests (pure functions, unit-tested), sends them over one
connection (vcproxy_tools/admin_client.py) and prints what came back.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from proxy.acl import migrate as migrate_model
from proxy.acl.model import CLUSTER_NAME, AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from proxy.protocol import management as m
from proxy.protocol.apikey import ApiKey
from vcproxy_tools.admin_client import ConfigProblem, ConnectError, Connection, login_from

OK, REFUSED, USAGE, UNREACHABLE, UNAUTHORIZED = 0, 1, 2, 3, 4
Op = Operation

EPILOG = """\
Names in ACLs are the virtual cluster's own: topic link names, and its group and transactional id names.
--virtual-cluster-pattern-type prefixed applies the command to every virtual cluster (that this principal
may manage) whose name starts with --virtual-cluster, as they are now.

--virtual-cluster kafka-cluster manages the cluster-wide ACLs (KIP-1134): the rights over virtual
clusters, e.g. a partial admin of team-a who may add users but not link foreign topics:
  vcproxy acls --bootstrap-server ... --command-config admin.properties --add --virtual-cluster kafka-cluster \
    --allow-principal User:dave --operation AlterVirtualCluster --operation DescribeVirtualCluster \
    --cluster-name team-a
(operations CreateVirtualCluster, AlterVirtualCluster, DeleteVirtualCluster, ListVirtualClusters,
DescribeVirtualCluster; --cluster-name kafka-cluster for every VC), and the physical names that members of
kafka-cluster whom the proxy authenticates may use (--topic, --group, --transactional-id, --cluster).

exit codes: 0 done; 1 the proxy refused an item (each item's error is printed); 2 usage error;
3 cannot connect or log in; 4 not authorized (super admins may manage every VC's ACLs, a VC's admins its own).
"""

_OPERATIONS = {op.name.lower().replace("_", ""): op for op in Op if op not in (Op.UNKNOWN, Op.ANY)}
# kafka-acls' conveniences: what a producer and a consumer need, per resource type.
PRODUCER = {
    ResourceType.TOPIC: (Op.WRITE, Op.DESCRIBE, Op.CREATE),
    ResourceType.TRANSACTIONAL_ID: (Op.WRITE, Op.DESCRIBE),
}
CONSUMER = {ResourceType.TOPIC: (Op.READ, Op.DESCRIBE), ResourceType.GROUP: (Op.READ,)}


class Usage(ValueError):
    """A command line that cannot be carried out: the message says why (exit 2)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "acls",
        help="add, remove and list the ACLs of virtual clusters on a running proxy (kafka-acls with --virtual-cluster)",
        description="Manage VC-scoped ACLs as an operator, with kafka-acls' options plus the KIP's --virtual-cluster "
        "and --virtual-cluster-pattern-type. Log in with --command-config, as Kafka's tools do.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...] of the proxy")
    parser.add_argument("--command-config", type=Path, help="client properties (security.protocol, sasl.*, ssl.*)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    parser.add_argument("--virtual-cluster", required=True, metavar="NAME", help="the virtual cluster (or prefix)")
    parser.add_argument(
        "--virtual-cluster-pattern-type",
        choices=("literal", "prefixed"),
        default="literal",
        help="literal (default): the VC of that name; prefixed: every VC whose name starts with it",
    )
    for flag, text in (
        ("--allow-principal", "a principal allowed (Type:name), repeatable"),
        ("--deny-principal", "a principal denied (Type:name), repeatable"),
        ("--allow-host", "a host the allowed principals may come from (default *), repeatable"),
        ("--deny-host", "a host the denied principals are denied from (default *), repeatable"),
        ("--principal", "--list: only the ACLs of this principal, repeatable"),
    ):
        parser.add_argument(flag, action="append", default=[], metavar="VALUE", help=text)
    parser.add_argument(
        "--operation", action="append", default=[], help="an operation (Read, Write, ..., All; default All), repeatable"
    )
    parser.add_argument("--topic", action="append", default=[], help="a topic (link name), repeatable")
    parser.add_argument("--group", action="append", default=[], help="a consumer group, repeatable")
    parser.add_argument("--transactional-id", action="append", default=[], help="a transactional id, repeatable")
    parser.add_argument(
        "--cluster",
        nargs="?",
        const=CLUSTER_NAME,
        default=None,
        metavar="NAME",
        help="the cluster resource (kafka-cluster); with --virtual-cluster kafka-cluster also a VC's name (or "
        "prefix), for the *_VIRTUAL_CLUSTER rights over that VC",
    )
    parser.add_argument(
        "--cluster-name",
        action="append",
        default=[],
        metavar="VC",
        help="with --virtual-cluster kafka-cluster: a CLUSTER resource naming a VC (rights over it), repeatable",
    )
    parser.add_argument(
        "--resource-pattern-type",
        choices=("literal", "prefixed", "match", "any"),
        help="of the resources (default literal; --add: literal or prefixed)",
    )
    parser.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on the topics (and ids)")
    parser.add_argument("--consumer", action="store_true", help="READ, DESCRIBE on the topics, READ on the groups")
    parser.add_argument("--force", action="store_true", help="--remove without asking")
    parser.add_argument("--output", choices=("text", "json"), default="text", help="text (default) or json")
    parser.set_defaults(func=_run)


# -- the requests (pure) ----------------------------------------------------------------------------


def resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, args.cluster if isinstance(args.cluster, str) else CLUSTER_NAME))
    out += [(ResourceType.CLUSTER, name) for name in getattr(args, "cluster_name", ())]
    return out


def _pattern(args: argparse.Namespace) -> PatternType:
    return PatternType[(args.resource_pattern_type or "literal").upper()]


def _operations(names: Iterable[str]) -> list[Operation]:
    ops = []
    for name in names:
        op = _OPERATIONS.get(name.lower().replace("_", "").replace("-", ""))
        if op is None:
            known = ", ".join(o.name.title().replace("_", "") for o in _OPERATIONS.values())
            raise Usage(f"--operation {name!r}: one of {known}")
        ops.append(op)
    return list(dict.fromkeys(ops))


def _principal(value: str) -> str:
    kind, sep, who = value.partition(":")
    if not sep or not kind or not who:
        raise Usage(f"{value!r} is not a principal (Type:name, e.g. User:alice)")
    return value


def bindings(args: argparse.Namespace) -> list[AclBinding]:
    """What --add creates (and --remove with principals deletes), as kafka-acls builds it."""
    chosen = resources(args)
    if not chosen:
        raise Usage("name a resource: --topic, --group, --transactional-id or --cluster")
    if args.producer or args.consumer:
        if args.operation or args.deny_principal or args.deny_host:
            raise Usage("--producer and --consumer go with neither --operation nor --deny-principal/--deny-host")
        if not args.topic:
            raise Usage("--producer and --consumer need --topic")
        if args.consumer and not args.group:
            raise Usage("--consumer needs --group")
    pattern = _pattern(args)
    if args.add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise Usage("--add: --resource-pattern-type must be literal or prefixed")
    entries: list[tuple[str, str, Permission]] = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, Permission.ALLOW),
        (args.deny_principal, args.deny_host, Permission.DENY),
    ):
        if hosts and not principals:
            raise Usage("--allow-host/--deny-host go with --allow-principal/--deny-principal")
        entries += [(_principal(p), h, permission) for p in principals for h in hosts or ["*"]]
    if not entries:
        raise Usage("name who: --allow-principal or --deny-principal")
    out: list[AclBinding] = []
    for rtype, name in chosen:
        if args.producer or args.consumer:
            ops: list[Operation] = []
            for conv, on in ((PRODUCER, args.producer), (CONSUMER, args.consumer)):
                ops += conv.get(rtype, ()) if on else ()
        else:
            ops = _operations(args.operation) or [Op.ALL]
        out += [AclBinding(rtype, name, pattern, p, h, op, perm) for p, h, perm in entries for op in ops]
    return list(dict.fromkeys(out))


def filters(args: argparse.Namespace) -> list[AclFilter]:
    """What --list describes and --remove without principals deletes: one filter per resource."""
    chosen = resources(args)
    if args.remove and not chosen:
        raise Usage("--remove needs a resource: --topic, --group, --transactional-id or --cluster")
    principals = [_principal(p) for p in args.principal] or [None]
    ops = _operations(args.operation) or [Op.ANY]
    if not chosen:
        pattern = PatternType[(args.resource_pattern_type or "any").upper()]
        return [AclFilter(ResourceType.ANY, None, pattern, p, None, op) for p in principals for op in ops]
    pattern = _pattern(args)
    return [AclFilter(t, n, pattern, p, None, op) for t, n in chosen for p in principals for op in ops]


def _vc(args: argparse.Namespace) -> dict[str, Any]:
    kind = m.VirtualClusterPatternType[args.virtual_cluster_pattern_type.upper()]
    return {"virtual_cluster": args.virtual_cluster, "virtual_cluster_pattern_type": i8(kind)}


def _filter_fields(f: AclFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": i8(f.resource_type),
        "resource_name_filter": f.name,
        "pattern_type_filter": i8(f.pattern),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": i8(f.operation),
        "permission_type": i8(f.permission),
    }


def exact(b: AclBinding) -> AclFilter:
    """A filter matching this binding only."""
    return AclFilter(b.resource_type, b.name, b.pattern, b.principal, b.host, b.operation, b.permission)


def describe_request(f: AclFilter, vc: dict[str, Any]) -> m.DescribeVirtualClusterAclsRequest:
    return m.DescribeVirtualClusterAclsRequest(**_filter_fields(f), **vc)


def create_request(items: Iterable[AclBinding], vc: dict[str, Any]) -> m.CreateVirtualClusterAclsRequest:
    creations = tuple(m.VirtualClusterAclCreation(**b.wire("resource_pattern_type"), **vc) for b in items)
    return m.CreateVirtualClusterAclsRequest(creations=creations)


def delete_request(items: Iterable[AclFilter], vc: dict[str, Any]) -> m.DeleteVirtualClusterAclsRequest:
    return m.DeleteVirtualClusterAclsRequest(
        filters=tuple(m.DeleteVirtualClusterAclsFilter(**_filter_fields(f), **vc) for f in items)
    )


def binding_of(rtype: int, name: str, pattern: int, principal: str, host: str, op: int, perm: int) -> AclBinding:
    """A binding as a response carries it (ValueError: a value this proxy has no name for)."""
    return AclBinding(
        ResourceType(int(rtype)),
        name,
        PatternType(int(pattern)),
        principal,
        host,
        Operation(int(op)),
        Permission(int(perm)),
    )


def described(response: Any) -> list[tuple[str, AclBinding]]:
    """(VC, binding) of a DescribeVirtualClusterAcls answer."""
    return [
        (
            r.virtual_cluster,
            binding_of(
                r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type
            ),
        )
        for r in response.resources
        for a in r.acls
    ]


# -- talking to the proxy -----------------------------------------------------------------------------


class Refused(Exception):
    def __init__(self, code: int, message: str | None):
        super().__init__(f"error {code}: {message or 'refused'}")
        self.code = code


def describe_vc(conn: Connection, f: AclFilter, vc: dict[str, Any]) -> list[tuple[str, AclBinding]]:
    response = conn.request(ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS, 0, describe_request(f, vc))
    if int(response.error_code):
        raise Refused(int(response.error_code), response.error_message)
    return described(response)


def describe_broker(conn: Connection, principal: str) -> tuple[list[AclBinding], list[str]]:
    """The broker's own ACLs of a principal, via Kafka's DescribeAcls sent through the proxy (an unbound
    principal's goes to the broker unchanged): (bindings, what could not be read)."""
    request = DescribeAclsRequest(
        resource_type_filter=i8(ResourceType.ANY),
        resource_name_filter=None,
        pattern_type_filter=i8(PatternType.ANY),
        principal_filter=principal,
        host_filter=None,
        operation=i8(Op.ANY),
        permission_type=i8(Permission.ANY),
    )
    response = conn.request(ApiKey.DESCRIBE_ACLS, 3, request)
    if int(response.error_code):
        raise Refused(int(response.error_code), response.error_message)
    out, unreadable = [], []
    for r in response.resources:
        for a in r.acls:
            try:
                out.append(
                    binding_of(
                        r.resource_type,
                        r.resource_name,
                        r.pattern_type,
                        a.principal,
                        a.host,
                        a.operation,
                        a.permission_type,
                    )
                )
            except ValueError:
                unreadable.append(f"{r.resource_type}:{r.resource_name} {a.operation}/{a.permission_type}")
    return out, unreadable


def delete_broker(conn: Connection, items: list[AclBinding]) -> list[tuple[AclBinding, int, str | None]]:
    """Delete exactly these bindings from the broker: (binding, error code, message) each."""
    request = DeleteAclsRequest(
        filters=tuple(DeleteAclsFilter(**_filter_fields(exact(b))) for b in items)  # kio's field names are Kafka's
    )
    response = conn.request(ApiKey.DELETE_ACLS, 3, request)
    return [(b, int(r.error_code), r.error_message) for b, r in zip(items, response.filter_results, strict=True)]


def offered(conn: Connection, keys: Iterable[int]) -> list[str]:
    """The names of the APIs among `keys` this connection may not use."""
    names = {**m.NAMES, ApiKey.DESCRIBE_ACLS: "DescribeAcls v3", ApiKey.DELETE_ACLS: "DeleteAcls v3"}
    missing = []
    for key in keys:
        low, high = conn.versions.get(key, (0, -1))
        version = 3 if key in (ApiKey.DESCRIBE_ACLS, ApiKey.DELETE_ACLS) else 0
        if not low <= version <= high:
            missing.append(names[key])
    return missing


# -- the tool ---------------------------------------------------------------------------------------------


def _binding_dict(vc: str, b: AclBinding) -> dict[str, Any]:
    return {"virtual_cluster": vc, **b.as_dict()}


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():  # never read a pipe or /dev/null as an answer
        raise Usage("--remove asks before removing; without a terminal, pass --force")
    return input(f"{question} (y/n) ").strip().lower() in ("y", "yes")


def _run(args: argparse.Namespace) -> int:
    try:
        login = login_from(args.command_config)
        vc = _vc(args)
        if args.add:
            plan: Any = bindings(args)
        elif args.remove and (args.allow_principal or args.deny_principal):
            plan = [exact(b) for b in bindings(args)]
        else:
            plan = filters(args)
        if args.remove and not args.force:
            what = "these ACLs" if args.allow_principal or args.deny_principal else "all ACLs of these resources"
            if not _confirm(f"Remove {what} from virtual cluster {args.virtual_cluster}?"):
                print("Nothing removed.")
                return OK
    except (Usage, ConfigProblem) as exc:
        print(f"vcproxy acls: {exc}", file=sys.stderr)
        return USAGE
    key = ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS if args.add else ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS
    if args.list:
        key = ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS
    try:
        with Connection(args.bootstrap_server, login, apis=[(key, 0)]) as conn:
            if offered(conn, [key]):
                print(
                    f"vcproxy acls: {m.NAMES[key]} is not offered to this principal: it may manage the ACLs of no "
                    "virtual cluster here, or the server is not a vcproxy with virtual clusters on",
                    file=sys.stderr,
                )
                return UNAUTHORIZED
            if args.add:
                response = conn.request(key, 0, create_request(plan, vc))
                out, codes = _added(plan, response)
            elif args.remove:
                response = conn.request(key, 0, delete_request(plan, vc))
                out, codes = _removed(plan, response)
            else:
                out, codes = _listed(conn, plan, vc)
    except (ConnectError, OSError) as exc:
        print(f"vcproxy acls: {exc}", file=sys.stderr)
        return UNREACHABLE
    out = {
        "virtual_cluster": args.virtual_cluster,
        "virtual_cluster_pattern_type": args.virtual_cluster_pattern_type,
        **out,
    }
    print(json.dumps(out, indent=2, sort_keys=True) if args.output == "json" else _text(args, out))
    if codes and all(c == ErrorCode.cluster_authorization_failed for c in codes):
        return UNAUTHORIZED
    return REFUSED if any(codes) else OK


def _added(plan: list[AclBinding], response: Any) -> tuple[dict[str, Any], list[int]]:
    results = [
        {**b.as_dict(), "error_code": int(r.error_code), "error_message": r.error_message}
        for b, r in zip(plan, response.results, strict=True)
    ]
    return {"operation": "add", "results": results}, [r["error_code"] for r in results]


def _removed(plan: list[AclFilter], response: Any) -> tuple[dict[str, Any], list[int]]:
    results, removed = [], []
    for f, r in zip(plan, response.filter_results, strict=True):
        results.append({"filter": _filter_dict(f), "error_code": int(r.error_code), "error_message": r.error_message})
        for a in r.matching_acls:
            b = binding_of(
                a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation, a.permission_type
            )
            removed.append(_binding_dict(a.virtual_cluster, b))
    return {"operation": "remove", "results": results, "removed": removed}, [r["error_code"] for r in results]


def _listed(conn: Connection, plan: list[AclFilter], vc: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    acls: dict[tuple[str, AclBinding], None] = {}
    errors = []
    for f in plan:
        try:
            acls.update(dict.fromkeys(describe_vc(conn, f, vc)))
        except Refused as exc:
            errors.append({"filter": _filter_dict(f), "error_code": exc.code, "error_message": str(exc)})
    listed = [_binding_dict(v, b) for v, b in sorted(acls, key=lambda x: (x[0], x[1].key_parts()))]
    return {"operation": "list", "acls": listed, "errors": errors}, [e["error_code"] for e in errors]


def _filter_dict(f: AclFilter) -> dict[str, Any]:
    return {
        "resource_type": f.resource_type.name,
        "name": f.name,
        "pattern": f.pattern.name,
        "principal": f.principal,
        "host": f.host,
        "operation": f.operation.name,
        "permission": f.permission.name,
    }


def _text(args: argparse.Namespace, out: dict[str, Any]) -> str:
    lines: list[str] = []
    if out["operation"] == "list":
        by_resource: dict[tuple[str, str, str, str], list[str]] = {}
        for a in out["acls"]:
            key = (a["virtual_cluster"], a["resource_type"], a["name"], a["pattern"])
            entry = f"principal={a['principal']}, host={a['host']}, operation={a['operation']}"
            by_resource.setdefault(key, []).append(f"({entry}, permissionType={a['permission']})")
        for (vc, rtype, name, pattern), entries in by_resource.items():
            lines.append(
                f"Current ACLs for resource `ResourcePattern(resourceType={rtype}, name={name}, "
                f"patternType={pattern})` in virtual cluster {vc}:"
            )
            lines += [f" \t{e}" for e in entries]
            lines.append("")
        if not by_resource and not out["errors"]:
            lines.append(f"No ACLs in virtual cluster(s) {args.virtual_cluster} match.")
        items = out["errors"]
    elif out["operation"] == "add":
        for r in out["results"]:
            if not r["error_code"]:
                lines.append(
                    f"Added ACL {r['principal']} {r['permission']} {r['operation']} from {r['host']} on "
                    f"{r['resource_type']}:{r['pattern']}:{r['name']} in virtual cluster(s) {args.virtual_cluster}."
                )
        items = out["results"]
    else:
        for a in out["removed"]:
            lines.append(
                f"Removed ACL {a['principal']} {a['permission']} {a['operation']} from {a['host']} on "
                f"{a['resource_type']}:{a['pattern']}:{a['name']} in virtual cluster {a['virtual_cluster']}."
            )
        if not out["removed"] and not any(r["error_code"] for r in out["results"]):
            lines.append("No ACLs matched; nothing removed.")
        items = out["results"]
    for r in items:
        if r["error_code"]:
            lines.append(f"Error {r['error_code']}: {r['error_message']}")
    return "\n".join(lines).rstrip("\n")


# -- ACL migration: `vcproxy virtual-clusters alter --add --user U --copy-acls-from S --remove-old-acls-from S` --


OnError = Callable[[str, int, str | None], None]  # (step, error code, message): a refused step


def _short(b: AclBinding) -> str:
    return f"{b.resource_type.name}:{b.pattern.name}:{b.name} {b.permission.name} {b.operation.name} from {b.host}"


def migrate(args: argparse.Namespace, login: Any, principal: str) -> int:
    """Copy `principal`'s ACLs from a source (another VC, or the broker's own: kafka-cluster) into the VC,
    bind the user, then remove from the source what the VC now has; print what was done."""
    target = args.virtual_cluster
    copy_from = args.copy_acls_from or args.migrate_acls_from
    remove_from = args.remove_old_acls_from
    if args.copy_acls_from and args.migrate_acls_from and args.copy_acls_from != args.migrate_acls_from:
        print("vcproxy virtual-clusters: --copy-acls-from and --migrate-acls-from name two sources", file=sys.stderr)
        return USAGE
    if target in (copy_from, remove_from):
        print(f"vcproxy virtual-clusters: {target!r} is the virtual cluster the ACLs go to", file=sys.stderr)
        return USAGE
    literal = {"virtual_cluster": target, "virtual_cluster_pattern_type": i8(m.VirtualClusterPatternType.LITERAL)}
    needed = [ApiKey.DESCRIBE_VIRTUAL_CLUSTERS, ApiKey.ALTER_VIRTUAL_CLUSTERS, ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS]
    needed += [ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS] if copy_from else []
    if migrate_model.KAFKA_CLUSTER in (copy_from, remove_from):
        needed.append(ApiKey.DESCRIBE_ACLS)
    if remove_from is not None:
        needed.append(
            ApiKey.DELETE_ACLS if remove_from == migrate_model.KAFKA_CLUSTER else ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS
        )
    report: dict[str, Any] = {
        "virtual_cluster": target,
        "user": principal,
        "copy_from": copy_from,
        "remove_from": remove_from,
        "validate_only": bool(args.validate_only),
        "copied": [],
        "skipped": [],
        "removed": [],
        "kept": [],
        "user_added": None,
        "errors": [],
    }
    codes: list[int] = []

    def error(step: str, code: int, message: str | None) -> None:
        codes.append(code)
        report["errors"].append({"step": step, "error_code": code, "error_message": message})

    try:
        with Connection(
            args.bootstrap_server,
            login,
            timeout=max(args.timeout_ms / 1000, 1) + 5,
            apis=[(k, 3 if k in (ApiKey.DESCRIBE_ACLS, ApiKey.DELETE_ACLS) else 0) for k in dict.fromkeys(needed)],
        ) as conn:
            missing = offered(conn, dict.fromkeys(needed))
            if missing:
                print(
                    f"vcproxy virtual-clusters: not offered to this principal: {', '.join(missing)} (the ACL migration "
                    "needs a super admin for kafka-cluster, else an admin of both virtual clusters)",
                    file=sys.stderr,
                )
                return UNAUTHORIZED
            vc = conn.request(
                ApiKey.DESCRIBE_VIRTUAL_CLUSTERS,
                0,
                m.DescribeVirtualClustersRequest(virtual_clusters=(m.DescribableVirtualCluster(name=target),)),
            ).virtual_clusters[0]
            if int(vc.error_code):
                error("describe", int(vc.error_code), vc.error_message)
                return _migration_done(args, report, codes)
            into = migrate_model.Target(
                {t.link_name: t.physical_name for t in vc.topic_links},
                frozenset(vc.consumer_groups),
                frozenset(vc.transactional_ids),
            )
            plans: dict[str, migrate_model.Plan] = {}
            for source in dict.fromkeys(s for s in (copy_from, remove_from) if s is not None):
                try:
                    plans[source] = _plan(conn, source, principal, into, report)
                except Refused as exc:
                    error(f"read {source}", exc.code, str(exc))
            if report["errors"]:
                return _migration_done(args, report, codes)  # a source it cannot read: change nothing
            if copy_from in plans:
                plan = plans[copy_from]
                report["skipped"] += [{**b.as_dict(), "reason": why} for b, why in plan.skipped]
                wanted = plan.targets
                results = [(b, 0, None) for b in wanted]
                if wanted and not args.validate_only:
                    response = conn.request(ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS, 0, create_request(wanted, literal))
                    results = [
                        (b, int(r.error_code), r.error_message) for b, r in zip(wanted, response.results, strict=True)
                    ]
                sources = {t: s for s, t in plan.copies}
                for b, code, message in results:
                    if code:
                        error(f"copy {_short(b)}", code, message)
                    else:
                        report["copied"].append({**b.as_dict(), "from": sources[b].as_dict()})
            _bind(conn, args, principal, vc.users, report, error)
            if remove_from in plans:
                _remove_old(conn, args, remove_from, plans[remove_from], principal, literal, report, error)
    except (ConnectError, OSError) as exc:
        print(f"vcproxy virtual-clusters: {exc}", file=sys.stderr)
        return UNREACHABLE
    return _migration_done(args, report, codes)


def _plan(
    conn: Connection, source: str, principal: str, into: migrate_model.Target, report: dict[str, Any]
) -> migrate_model.Plan:
    if source == migrate_model.KAFKA_CLUSTER:
        found, unreadable = describe_broker(conn, principal)
        report["skipped"] += [{"acl": u, "reason": "not an ACL this proxy can read"} for u in unreadable]
        return migrate_model.from_kafka_cluster(found, principal, into)
    literal = {"virtual_cluster": source, "virtual_cluster_pattern_type": i8(m.VirtualClusterPatternType.LITERAL)}
    found_in_vc = describe_vc(conn, AclFilter(principal=principal), literal)
    return migrate_model.from_virtual_cluster((b for _, b in found_in_vc), principal)


def _bind(
    conn: Connection, args: argparse.Namespace, principal: str, users: Any, report: dict[str, Any], error: OnError
) -> None:
    if principal in users:
        report["user_added"] = "already"  # the KIP: an added user is not added again
        return
    resource = m.VirtualClusterResourceChange(
        resource_type=i8(m.ResourceType.USER), resource_name=principal, resource_operation=i8(m.ResourceOperation.ADD)
    )
    request = m.AlterVirtualClustersRequest(
        virtual_clusters=(m.AlterableVirtualCluster(name=args.virtual_cluster, resources=(resource,)),),
        validate_only=bool(args.validate_only),
    )
    result = conn.request(ApiKey.ALTER_VIRTUAL_CLUSTERS, 0, request).virtual_clusters[0].resources[0]
    if int(result.error_code):
        report["user_added"] = False
        error(f"add user {principal}", int(result.error_code), result.error_message)
    else:
        report["user_added"] = True


def _remove_old(
    conn: Connection,
    args: argparse.Namespace,
    source: str,
    plan: migrate_model.Plan,
    principal: str,
    literal: dict[str, Any],
    report: dict[str, Any],
    error: OnError,
) -> None:
    """Remove from the source the bindings the VC has whole now (what was not copied stays)."""
    present = [b for _, b in describe_vc(conn, AclFilter(principal=principal), literal)]
    if args.validate_only:
        present += plan.targets  # what the copy would have made
    removable = plan.removable(present)
    gone = set(removable)
    report["kept"] = [
        {**s.as_dict(), "reason": f"not all of it is in {args.virtual_cluster}"}
        for s in dict.fromkeys(s for s, _ in plan.copies)
        if s not in gone
    ]
    if not removable:
        return
    if args.validate_only:
        results = [(b, 0, None) for b in removable]
    elif source == migrate_model.KAFKA_CLUSTER:
        results = delete_broker(conn, removable)
    else:
        where = {"virtual_cluster": source, "virtual_cluster_pattern_type": i8(m.VirtualClusterPatternType.LITERAL)}
        response = conn.request(
            ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS, 0, delete_request([exact(b) for b in removable], where)
        )
        results = [
            (b, int(r.error_code), r.error_message) for b, r in zip(removable, response.filter_results, strict=True)
        ]
    for b, code, message in results:
        if code:
            error(f"remove {_short(b)} from {source}", code, message)
        else:
            report["removed"].append(b.as_dict())


def _migration_done(args: argparse.Namespace, report: dict[str, Any], codes: list[int]) -> int:
    if args.output == "json":
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(_migration_text(report))
    if codes and all(c == ErrorCode.cluster_authorization_failed for c in codes):
        return UNAUTHORIZED
    return REFUSED if codes else OK


def _migration_text(r: dict[str, Any]) -> str:
    def short(d: dict[str, Any]) -> str:
        return f"{d['resource_type']}:{d['pattern']}:{d['name']} {d['permission']} {d['operation']} from {d['host']}"

    would = "Would copy" if r["validate_only"] else "Copied"
    vc, lines = r["virtual_cluster"], []
    if r["copy_from"]:
        lines.append(f"{would} {len(r['copied'])} ACL(s) of {r['user']} from {r['copy_from']} to virtual cluster {vc}:")
        lines += [f"  {short(c)}   (was {short(c['from'])})" for c in r["copied"]]
    if r["skipped"]:
        lines.append(f"Skipped {len(r['skipped'])} ACL(s):")
        lines += [f"  {short(s) if 'name' in s else s['acl']}: {s['reason']}" for s in r["skipped"]]
    if r["user_added"] == "already":
        lines.append(f"{r['user']} is already in virtual cluster {vc}.")
    elif r["user_added"]:
        lines.append(f"{'Would add' if r['validate_only'] else 'Added'} user {r['user']} to virtual cluster {vc}.")
    if r["remove_from"]:
        what = "Would remove" if r["validate_only"] else "Removed"
        lines.append(f"{what} {len(r['removed'])} ACL(s) from {r['remove_from']}:")
        lines += [f"  {short(d)}" for d in r["removed"]]
        if r["kept"]:
            lines.append(f"Kept {len(r['kept'])} ACL(s) in {r['remove_from']}:")
            lines += [f"  {short(k)}: {k['reason']}" for k in r["kept"]]
    lines += [f"Error {e['error_code']} ({e['step']}): {e['error_message']}" for e in r["errors"]]
    return "\n".join(lines)
