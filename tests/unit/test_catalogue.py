"""The catalogue of APIs: one name per key (proxy/protocol/apikey.py), as Kafka and the rule files name them."""

from __future__ import annotations

import ast
from pathlib import Path

from kio.schema.index import api_key_map

from proxy.protocol import management as management
from proxy.protocol.apikey import ApiKey
from proxy.rules import api_rules


def test_every_key_kio_knows_is_named_as_kio_names_it():
    for key, name in api_key_map.items():
        assert ApiKey(key).name.lower() == name


def test_the_enum_names_every_api_of_the_rule_files_and_no_other():
    rules = api_rules()
    assert set(rules) == set(ApiKey)
    for key, rule in rules.items():
        assert ApiKey(key).title == rule.name


def test_the_management_rpcs_are_named_in_the_enum():
    assert set(management.KEYS) <= set(ApiKey)
    # KIP-1134's at aiven/inkless' keys, vcproxy's own ACL RPCs far above Kafka's range
    assert all(501 <= ApiKey(key) <= 505 or ApiKey(key) >= 1139 for key in management.KEYS)
    assert management.NAMES[ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS] == "DescribeVirtualClusterAcls"


def test_a_key_compares_and_hashes_as_its_number():
    assert ApiKey.PRODUCE == 0 and {0: "x"}[ApiKey.PRODUCE] == "x" and f"{ApiKey.METADATA}" == "3"


# -- the catalogue is the one place that keys knowledge by API -----------------------------------------------

CATALOGUE = {"proxy/catalogue.py", "proxy/protocol/apikey.py", "proxy/rules.py"}
# What is still keyed by API outside the catalogue, each for a reason; a new entry needs one.
ALLOWED = {
    # KIP-1313's header-v3 facts and body conversions sit in the protocol layer, below the catalogue.
    "proxy/protocol/kip1313.py",
    # The tenancy handlers, registered by the names tenant.yaml gives them (checked against it at load).
    "proxy/tenancy/handlers/__init__.py",
}
# ApiVersions' answer to a version it cannot read names ApiVersions' own range: a version table sent to a
# client, not knowledge about the API.
ALLOWED_LINES = {("proxy/core/stages/versions.py", "{ApiKey.API_VERSIONS: advertised[ApiKey.API_VERSIONS]}")}


def _api_key_expr(node: ast.AST) -> bool:
    """An expression that reads an API key: `api_key`, `ex.api_key`, `trace.api_key`, `info.key`, ..."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in ("api_key", "key") and not (isinstance(node, ast.Name) and name == "key")


def _numbers(node: ast.AST) -> list[int]:
    elts = node.elts if isinstance(node, ast.Tuple | ast.Set | ast.List) else [node]
    return [e.value for e in elts if isinstance(e, ast.Constant) and type(e.value) is int]


def _findings(path: Path, source: str) -> list[str]:
    names = {k.title for k in ApiKey} | {k.name.lower() for k in ApiKey}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict | ast.Set):  # a table keyed by API: by member, by number or by name
            if (str(path), ast.get_source_segment(source, node)) in ALLOWED_LINES:
                continue
            keys = [k for k in (node.keys if isinstance(node, ast.Dict) else node.elts) if k is not None]
            for k in keys:
                if isinstance(k, ast.Attribute) and isinstance(k.value, ast.Name) and k.value.id == "ApiKey":
                    found.append(f"{path}:{k.lineno}: ApiKey.{k.attr} keys a table")
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value in names:
                    found.append(f"{path}:{k.lineno}: the API name {k.value!r} keys a table")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_api_key_expr(s) for s in sides) and any(_numbers(s) for s in sides):
                found.append(f"{path}:{node.lineno}: an API key compared with a bare number")
            for s in sides:
                if isinstance(s, ast.Constant) and isinstance(s.value, str) and s.value in names:
                    found.append(f"{path}:{node.lineno}: an API compared by its name {s.value!r}")
        called = getattr(node.func, "id", getattr(node.func, "attr", "")) if isinstance(node, ast.Call) else ""
        if called in ("request_type", "response_type", "api_info") and node.args and _numbers(node.args[0]):
            found.append(f"{path}:{node.lineno}: an API named by its bare number")
    return found


def test_no_api_number_or_name_keys_anything_outside_the_catalogue():
    found = []
    for path in sorted(Path("proxy").rglob("*.py")):
        if str(path) in CATALOGUE | ALLOWED:
            continue
        found += _findings(path, path.read_text(encoding="utf-8"))
    assert found == []


def test_the_scan_finds_what_it_looks_for():
    source = """
NEEDS = {0: 1, ApiKey.FETCH: 2}
if ex.api_key == 3 or info.key in (17, 36): pass
if rule.api == "Metadata": pass
cls = request_type(19, version)
LISTED = {"CreateTopics": 1}
"""
    found = _findings(Path("proxy/x.py"), source)
    assert len(found) == 6, found


def test_each_spec_holds_what_the_stages_tables_held():
    from proxy.acl import operations
    from proxy.catalogue import catalogue, spec
    from proxy.protocol import refusals

    specs = catalogue()
    assert set(specs) == set(ApiKey)
    assert {k for k, s in specs.items() if s.management} == set(management.REQUESTS)
    assert spec(ApiKey.LIST_GROUPS).acl_listing == ("groups", "group_id", "group")
    assert spec(ApiKey.DELETE_TOPICS).refuse_items is refusals.delete_topics
    assert spec(ApiKey.DESCRIBE_CLUSTER).authorized_operations is operations.describe_cluster
    assert spec(ApiKey.CREATE_PARTITIONS).mutation_items == "results"
    assert spec(ApiKey.PRODUCE).state_guard.writes and spec(ApiKey.PRODUCE).spliced
    assert not spec(ApiKey.METADATA).state_guard.writes and spec(ApiKey.METADATA).state_guard.lists_topics
    assert {k for k, s in specs.items() if s.fetch_bytes} == {
        ApiKey.FETCH,
        ApiKey.SHARE_FETCH,
        ApiKey.SHARE_ACKNOWLEDGE,
    }
    assert spec(99999) is None
