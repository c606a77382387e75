"""The one loader of the rewrite rules (``rewrite_rules/*.yaml``): data, validated when first loaded.

* apis.yaml: every API key, its class and what the proxy does with it for the physical cluster;
* tenant.yaml: what the tenancy stage does with it for a principal in a virtual cluster;
* endpoints.yaml: where broker endpoints sit in responses.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


def rules_dir() -> Path:
    # In a checkout the rules sit beside the package; a wheel carries them inside it.
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "rewrite_rules", here / "_rewrite_rules"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("rewrite_rules directory not found beside or inside the proxy package")


# The shipped rule files are read at every start: libyaml's parser (in PyYAML's wheels) reads them in a tenth
# of the pure-Python one's time, and reads the same documents.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(name: str) -> Any:
    path = rules_dir() / name
    with path.open(encoding="utf-8") as fh:
        return yaml.load(fh, Loader=_Loader)


@dataclass(frozen=True, slots=True)
class VersionRange:
    low: int
    high: int | None  # None: open-ended

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        text = str(text).strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            low, high = text.split("-", 1)
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and version >= self.low and (self.high is None or version <= self.high)


@dataclass(frozen=True, slots=True)
class ApiRule:
    key: int
    name: str
    api_class: str
    physical: str
    cluster_acl: str | None = None  # kafka-cluster's members: the CLUSTER operation it needs, "none", or None


# The operations a cluster_acl may name (Kafka's AclOperation names, in apis.yaml's spelling).
_CLUSTER_ACLS = {"none", "Alter", "Describe", "AlterConfigs", "DescribeConfigs"}


@dataclass(frozen=True, slots=True)
class EndpointRule:
    api: str
    versions: VersionRange
    path: str
    kind: str
    mode: str
    only_if: tuple[tuple[str, int], ...]
    id_field: str = "node_id"


_PHYSICAL = {"forward", "local", "refuse", "reject"}
_TENANT_ACTIONS = {"rewrite", "deny", "pass", "local"}
_TENANT_KEYS = {"action", "error", "request", "response", "filter", "splice", "handler", "versions"}
_KINDS = {"list", "single"}
_MODES = {"decode", "splice", "keep"}


@functools.cache
def api_rules() -> dict[int, ApiRule]:
    rules = {}
    for entry in load_yaml("apis.yaml")["apis"]:
        rule = ApiRule(entry["key"], entry["name"], entry["class"], entry["physical"], entry.get("cluster_acl"))
        if rule.physical not in _PHYSICAL:
            raise ValueError(f"apis.yaml: {rule.name}: unknown physical action {rule.physical!r}")
        if rule.cluster_acl is not None and rule.cluster_acl not in _CLUSTER_ACLS:
            raise ValueError(f"apis.yaml: {rule.name}: unknown cluster_acl {rule.cluster_acl!r}")
        rules[rule.key] = rule
    return rules


@functools.cache
def endpoint_rules() -> tuple[EndpointRule, ...]:
    names = {r.name for r in api_rules().values()}
    out = []
    for entry in load_yaml("endpoints.yaml")["endpoints"]:
        rule = EndpointRule(
            api=entry["api"],
            versions=VersionRange.parse(entry["versions"]),
            path=entry["path"],
            kind=entry["kind"],
            mode=entry["mode"],
            only_if=tuple((entry.get("only_if") or {}).items()),
            id_field=entry.get("id_field", "node_id"),
        )
        if rule.api not in names or rule.kind not in _KINDS or rule.mode not in _MODES:
            raise ValueError(f"endpoints.yaml: bad entry {entry!r}")
        out.append(rule)
    return tuple(out)


@dataclass(frozen=True)
class TenantRule:
    api: str
    action: str  # rewrite | deny | pass | local (answered by a stage before tenancy)
    error: int = 0  # deny: the Kafka error code
    request: tuple[tuple[str, str], ...] = ()  # extra {path: kind} to translate in requests
    response: tuple[tuple[str, str], ...] = ()  # ... and in responses
    filters: tuple[tuple[str, str, str], ...] = ()  # (array path, item field, kind)
    splice: frozenset[str] = frozenset()  # "request" / "response": walked, never decoded
    handler: str | None = None  # the name of the API's handler (proxy/tenancy/handlers/__init__.py HANDLERS)
    versions: VersionRange | None = None  # None: every version the proxy can parse


@functools.cache
def tenant_rules() -> dict[int, TenantRule]:
    from kio.schema.errors import ErrorCode

    by_name = {r.name: key for key, r in api_rules().items()}
    rules = {}
    for name, entry in load_yaml("tenant.yaml")["tenant"].items():
        where = f"tenant.yaml: {name}"
        if name not in by_name:
            raise ValueError(f"{where}: unknown API")
        unknown = set(entry) - _TENANT_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}")
        if entry.get("action") not in _TENANT_ACTIONS:
            raise ValueError(f"{where}: action must be one of {sorted(_TENANT_ACTIONS)}, not {entry.get('action')!r}")
        error = entry.get("error")
        if error is not None and not hasattr(ErrorCode, str(error).lower()):
            raise ValueError(f"{where}: unknown error {error!r}")
        if (entry["action"] == "deny") != (error is not None):
            raise ValueError(f"{where}: `error` goes with action deny, and only there")
        versions = entry.get("versions")
        rules[by_name[name]] = TenantRule(
            api=name,
            action=entry["action"],
            error=int(getattr(ErrorCode, error.lower())) if error else 0,
            request=tuple((entry.get("request") or {}).items()),
            response=tuple((entry.get("response") or {}).items()),
            filters=tuple((p, f, k) for p, (f, k) in (entry.get("filter") or {}).items()),
            splice=frozenset(entry.get("splice") or ()),
            handler=entry.get("handler"),
            versions=VersionRange.parse(versions) if versions is not None else None,
        )
    return rules
