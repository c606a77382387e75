"""Loads the rewrite rules (``rewrite_rules/*.yaml``): data, validated once at import."""

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


def load_yaml(name: str) -> Any:
    path = rules_dir() / name
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


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
    tenant: str


@dataclass(frozen=True, slots=True)
class EndpointRule:
    api: str
    versions: VersionRange
    path: str
    kind: str
    mode: str
    only_if: tuple[tuple[str, int], ...]
    id_field: str = "node_id"


_PHYSICAL = {"forward", "local", "reject"}
_KINDS = {"list", "single"}
_MODES = {"decode", "splice", "keep"}


@functools.cache
def api_rules() -> dict[int, ApiRule]:
    rules = {}
    for entry in load_yaml("apis.yaml")["apis"]:
        rule = ApiRule(entry["key"], entry["name"], entry["class"], entry["physical"], entry["tenant"])
        if rule.physical not in _PHYSICAL:
            raise ValueError(f"apis.yaml: {rule.name}: unknown physical action {rule.physical!r}")
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
