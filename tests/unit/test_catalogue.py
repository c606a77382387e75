"""The catalogue of APIs: one name per key (proxy/protocol/apikey.py), as Kafka and the rule files name them."""

from __future__ import annotations

from kio.schema.index import api_key_map

from proxy.management import schema as management
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
    assert all(ApiKey(key) >= 1134 for key in management.KEYS)
    assert management.NAMES[ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS] == "DescribeVirtualClusterAcls"


def test_a_key_compares_and_hashes_as_its_number():
    assert ApiKey.PRODUCE == 0 and {0: "x"}[ApiKey.PRODUCE] == "x" and f"{ApiKey.METADATA}" == "3"
