"""The rewrite rules are data: check them against Kafka's schemas (as generated into kio)."""

import dataclasses
import typing

from proxy.core.apiversions import proxy_versions
from proxy.core.endpoints import rules_for
from proxy.protocol.apis import known_apis, response_type
from proxy.rules import api_rules, endpoint_rules


def test_every_api_key_has_a_rule():
    from proxy.protocol import management as schema

    assert sorted(api_rules()) == list(range(95)) + sorted(schema.REQUESTS)
    assert all(api_rules()[key].physical == "local" for key in schema.REQUESTS)


def test_tenant_rules_parse_versions_and_reject_unknown_keys(monkeypatch):
    import pytest

    from proxy import rules

    def loaded(tenant: dict) -> dict:
        monkeypatch.setattr(
            rules, "load_yaml", lambda name: {"tenant": tenant} if name == "tenant.yaml" else real(name)
        )
        rules.tenant_rules.cache_clear()
        try:
            return rules.tenant_rules()
        finally:
            monkeypatch.undo()
            rules.tenant_rules.cache_clear()

    real = rules.load_yaml
    got = loaded({"Metadata": {"action": "rewrite", "versions": "4-12"}})
    assert got[3].versions == rules.VersionRange(4, 12)
    for bad, why in (
        ({"Metadata": {"action": "rewrite", "verisons": "4+"}}, "unknown key"),
        ({"Metadata": {"action": "rewrit"}}, "action must be"),
        ({"Metadata": {"action": "deny"}}, "`error` goes with action deny"),
        ({"Metadta": {"action": "pass"}}, "unknown API"),
    ):
        with pytest.raises(ValueError, match=why):
            loaded(bad)


def test_handlers_and_rules_match_one_to_one():
    import pytest

    from proxy.rules import TenantRule, tenant_rules
    from proxy.tenancy.engine import Handler, Registry
    from proxy.tenancy.handlers import HANDLERS, SPECIAL_KINDS, registry

    assert registry().handlers is HANDLERS  # the real ones match
    Registry(HANDLERS, SPECIAL_KINDS).check(tenant_rules(), schemas=True)  # and every splice is within reach
    rules = dict(tenant_rules())
    rules[3] = TenantRule(api="Metadata", action="rewrite", handler="metdata")  # a typo
    with pytest.raises(ValueError, match=r"handlers that do not exist: \['metdata'\].*no rule .* uses: \['metadata'\]"):
        Registry(HANDLERS, SPECIAL_KINDS).check(rules)
    with pytest.raises(ValueError, match=r"no rule in tenant\.yaml uses"):
        Registry({**HANDLERS, "spare": Handler()}, SPECIAL_KINDS).check(tenant_rules())


def test_rejected_apis_are_never_advertised():
    advertised = proxy_versions()
    for key, rule in api_rules().items():
        if rule.physical == "reject":
            assert key not in advertised, rule.name
    # Inter-broker and controller-only examples from the inventory.
    for key in (52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82):
        assert key not in advertised
    # WriteTxnMarkers and the share-state APIs (83-87) are advertised to clients, as brokers do
    # (version-probing tools look for them), and refused in their own shape (test_session.py,
    # test_apiversions_broker.py).
    for key in (27, 83, 84, 85, 86, 87):
        assert key in advertised and api_rules()[key].physical == "refuse"


def _endpoint_fields(cls: type, prefix: str = "") -> list[str]:
    """Paths of fields that hold broker endpoints (a struct with host and port), at any depth."""
    names = {f.name for f in dataclasses.fields(cls)}
    found = [prefix or "."] if {"host", "port"} <= names else []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = typing.get_args(tp)
        inner = args[0] if typing.get_origin(tp) is tuple else tp
        if dataclasses.is_dataclass(inner) and inner is not cls:
            found += _endpoint_fields(inner, f"{prefix}.{f.name}" if prefix else f.name)
    return found


def test_every_endpoint_field_in_an_advertised_response_is_covered():
    """Fail closed: a response with a host/port the rules miss would leak a broker address."""
    for key, (low, high) in proxy_versions().items():
        for version in range(low, high + 1):
            paths = _endpoint_fields(response_type(key, version))
            rule = rules_for(key, version)
            if not paths:
                assert rule is None, (known_apis()[key].name, version)
                continue
            assert rule is not None, f"{known_apis()[key].name} v{version} has endpoints at {paths} but no rule"
            assert paths == [rule.path], (known_apis()[key].name, version, paths)


def _struct_fields(cls: type, path: str) -> set[str]:
    if path != ".":
        hint = typing.get_type_hints(cls)[path]
        cls = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else hint
    return {f.name for f in dataclasses.fields(cls)}


def test_endpoint_rules_name_real_fields():
    for rule in endpoint_rules():
        key = next(k for k, r in api_rules().items() if r.name == rule.api)
        info = known_apis()[key]
        high = rule.versions.high if rule.versions.high is not None else info.max_version
        for version in range(rule.versions.low, high + 1):
            cls = response_type(key, version)
            if rule.path != ".":
                assert rule.path in _endpoint_fields(cls), (rule, version)
            if rule.mode != "keep":
                assert rule.id_field in _struct_fields(cls, rule.path), (rule, version)
            for name, _ in rule.only_if:
                assert name in {f.name for f in dataclasses.fields(cls)}, (rule, version)
