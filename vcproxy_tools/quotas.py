"""`vcproxy quotas`: client quotas of virtual clusters for cluster operators (by default the super admins),
over Kafka's own DescribeClientQuotas / AlterClientQuotas with the proxy's `virtual-cluster` entity type
(docs/quotas.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntryData, OpData
from kio.schema.alter_client_quotas.v1.request import EntityData as AlterEntity
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from proxy.protocol.apikey import ApiKey
from proxy.quotas.model import (
    CLIENT_ID,
    KEYS,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PHYSICAL,
    USER,
    VIRTUAL_CLUSTER,
)
from vcproxy_tools.admin_client import ConfigProblem, ConnectError, Connection, login_from

OK, REFUSED, USAGE, UNREACHABLE, UNAUTHORIZED = 0, 1, 2, 3, 4

EPILOG = f"""\
entities: --virtual-cluster NAME alone is the VC's cap (all its clients together), --virtual-cluster-default
the cap of every VC without one; with --user/--user-default and/or --client-id/--client-id-default, the
KIP-1134 levels inside that VC; --global with users or clients, the levels that apply in every VC.
quota keys: {", ".join(KEYS)} (bytes or requests or partition mutations per second).

exit codes: 0 done; 1 the proxy refused an entity (its error is printed); 2 usage error;
3 cannot connect or log in; 4 not authorized (only cluster operators, by default the proxy's super admins,
may use this tool).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    tool = subparsers.add_parser(
        "quotas",
        help="set, remove and describe client quotas of virtual clusters on a running proxy (KIP-1134)",
        description="Manage the KIP-1134 quotas of virtual clusters as an operator: VC caps, the VC default, and "
        "any user or client entity inside a VC. Log in with --command-config, as Kafka's tools do.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = tool.add_subparsers(dest="quota_command", required=True)
    for name, text in (("describe", "show the quotas of the chosen entities"), ("alter", "set or remove quotas")):
        parser = commands.add_parser(
            name, help=text, description=text, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        parser.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...] of the proxy")
        parser.add_argument("--command-config", type=Path, help="client properties (security.protocol, sasl.*, ssl.*)")
        parser.add_argument("--output", choices=("text", "json"), default="text", help="text (default) or json")
        scope = parser.add_mutually_exclusive_group(required=name == "alter")
        scope.add_argument("--virtual-cluster", metavar="NAME", help="a virtual cluster")
        scope.add_argument("--virtual-cluster-default", action="store_true", help="the default VC cap")
        scope.add_argument("--global", dest="global_", action="store_true", help="the levels outside any VC")
        user = parser.add_mutually_exclusive_group()
        user.add_argument("--user", metavar="NAME", help="a user (Kafka's name: carol for User:carol)")
        user.add_argument("--user-default", action="store_true", help="the default user")
        client = parser.add_mutually_exclusive_group()
        client.add_argument("--client-id", metavar="ID", help="a client id")
        client.add_argument("--client-id-default", action="store_true", help="the default client id")
        if name == "alter":
            parser.add_argument("--add-config", metavar="K=V[,K=V]", help="quotas to set")
            parser.add_argument("--delete-config", metavar="K[,K]", help="quotas to remove")
            parser.add_argument("--validate-only", action="store_true", help="check only; change nothing")
        parser.set_defaults(func=_run)


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None, int]]:
    """(entity type, name, match type) components of the chosen entity; name None is the default."""
    out: list[tuple[str, str | None, int]] = []
    if args.virtual_cluster is not None:
        out.append((VIRTUAL_CLUSTER, args.virtual_cluster, MATCH_EXACT))
    elif args.virtual_cluster_default:
        out.append((VIRTUAL_CLUSTER, None, MATCH_DEFAULT))
    elif args.global_:
        out.append((VIRTUAL_CLUSTER, PHYSICAL, MATCH_EXACT))
    else:
        out.append((VIRTUAL_CLUSTER, None, MATCH_SPECIFIED))  # describe: every VC
    if args.user is not None:
        out.append((USER, args.user, MATCH_EXACT))
    elif args.user_default:
        out.append((USER, None, MATCH_DEFAULT))
    if args.client_id is not None:
        out.append((CLIENT_ID, args.client_id, MATCH_EXACT))
    elif args.client_id_default:
        out.append((CLIENT_ID, None, MATCH_DEFAULT))
    return out


def _ops(args: argparse.Namespace) -> list[OpData]:
    ops = []
    for item in filter(None, (args.add_config or "").split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"--add-config: {item!r} is not KEY=VALUE")
        try:
            ops.append(OpData(key=key.strip(), value=float(value), remove=False))
        except ValueError as exc:
            raise ValueError(f"--add-config: {key}: {value!r} is not a number") from exc
    for key in filter(None, (args.delete_config or "").split(",")):
        ops.append(OpData(key=key.strip(), value=0.0, remove=True))
    if not ops:
        raise ValueError("alter needs --add-config and/or --delete-config")
    return ops


def _request(args: argparse.Namespace) -> Any:
    components = _entity(args)
    if args.quota_command == "describe":
        return DescribeClientQuotasRequest(
            components=tuple(ComponentData(entity_type=t, match_type=i8(m), match=n) for t, n, m in components),
            strict=False,
        )
    entity = tuple(AlterEntity(entity_type=t, entity_name=n) for t, n, _ in components)
    return AlterClientQuotasRequest(
        entries=(EntryData(entity=entity, ops=tuple(_ops(args))),), validate_only=args.validate_only
    )


def _run(args: argparse.Namespace) -> int:
    try:
        request = _request(args)
        login = login_from(args.command_config)
    except (ValueError, ConfigProblem) as exc:
        print(f"vcproxy quotas: {exc}", file=sys.stderr)
        return USAGE
    key = ApiKey.DESCRIBE_CLIENT_QUOTAS if args.quota_command == "describe" else ApiKey.ALTER_CLIENT_QUOTAS
    try:
        with Connection(args.bootstrap_server, login, timeout=35, apis=[(key, 1)]) as conn:
            if key not in conn.versions:
                print("vcproxy quotas: the server does not offer client quotas", file=sys.stderr)
                return UNREACHABLE
            response = conn.request(key, 1, request)
    except (ConnectError, OSError) as exc:
        print(f"vcproxy quotas: {exc}", file=sys.stderr)
        return UNREACHABLE
    if key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
        code = int(response.error_code)
        out: dict[str, Any] = {"error_code": code, "error_message": response.error_message, "entries": []}
        for entry in response.entries or ():
            out["entries"].append(
                {
                    "entity": {e.entity_type: e.entity_name for e in entry.entity},
                    "quotas": {v.key: v.value for v in entry.values},
                }
            )
        codes = [code]
    else:
        out = {
            "validate_only": args.validate_only,
            "results": [
                {
                    "entity": {e.entity_type: e.entity_name for e in r.entity},
                    "error_code": int(r.error_code),
                    "error_message": r.error_message,
                }
                for r in response.entries
            ],
        }
        codes = [r["error_code"] for r in out["results"]]
    print(json.dumps(out, indent=2, sort_keys=True) if args.output == "json" else _text(key, out))
    if codes and all(c == ErrorCode.cluster_authorization_failed for c in codes):
        return UNAUTHORIZED
    return REFUSED if any(codes) else OK


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _name(entity: dict[str, str | None]) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in sorted(entity.items()))


def _text(key: int, out: dict[str, Any]) -> str:
    if key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
        if out["error_code"]:
            return f"Error {out['error_code']}: {out['error_message']}"
        lines = []
        for entry in out["entries"]:
            quotas = ", ".join(f"{k}={_number(v)}" for k, v in sorted(entry["quotas"].items()))
            lines.append(f"Quota configs for {_name(entry['entity'])} are {quotas}")
        return "\n".join(lines) or "No quotas."
    lines = []
    for r in out["results"]:
        if r["error_code"]:
            lines.append(f"Error {r['error_code']} ({_name(r['entity'])}): {r['error_message']}")
        else:
            verb = "Validated" if out["validate_only"] else "Changed"
            lines.append(f"{verb} quotas of {_name(r['entity'])}.")
    return "\n".join(lines)
