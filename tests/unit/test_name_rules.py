"""The rule table of Kafka's checks on names (proxy/protocol/name_rules.py) and its registration per API."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from proxy.catalogue import catalogue, spec
from proxy.protocol import codec, entities, name_rules
from proxy.protocol.apikey import ApiKey
from proxy.protocol.apis import known_apis, request_type, response_type
from proxy.tenancy import names

ROOT = Path(__file__).resolve().parents[2]


def request(key: ApiKey, version: int, **values: object) -> object:
    return entities.build(request_type(key, version), **values)


def refusal(key: ApiKey, version: int, body: object, topic_error=lambda _t: None) -> object:
    api = spec(key)
    assert api is not None
    return name_rules.refusal(api.name_rules, body, response_type(key, version), topic_error)


# -- Kafka's Topic.validate ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "the empty string is not allowed"),
        (".", "'.' is not allowed"),
        ("..", "'..' is not allowed"),
        ("a b", "'a b' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
        ("é", "'é' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
        ("x" * 250, f"the length of '{'x' * 250}' is longer than the max allowed length 249"),
    ],
)
def test_a_topic_name_kafka_refuses_is_refused_in_its_words(name, problem):
    assert name_rules.topic_name_problem(name) == problem
    assert name_rules.invalid_topic(name) == (ErrorCode.invalid_topic_exception, f"Topic name is invalid: {problem}")


@pytest.mark.parametrize("name", ["a", "...", "a.b_c-D9", "x" * 249, "__consumer_offsets"])
def test_a_topic_name_kafka_accepts_is_not_refused(name):
    assert name_rules.topic_name_problem(name) is None and name_rules.invalid_topic(name) is None


def test_a_vcs_topic_names_are_kafkas_rule_with_the_vcs_length():
    """One Topic.validate for both: the VC's own limit leaves room for the physical `UUID.` prefix."""
    assert names.invalid_name("x" * 212) is None
    assert names.invalid_name("x" * 213) == name_rules.topic_name_problem("x" * 213, 212)
    assert names.invalid_name(".") == name_rules.topic_name_problem(".")


# -- whole requests -----------------------------------------------------------------------------------------


def test_an_empty_group_id_refuses_join_group_with_the_member_id_the_client_sent():
    answer = refusal(ApiKey.JOIN_GROUP, 9, request(ApiKey.JOIN_GROUP, 9, group_id="", member_id="m-1"))
    assert answer.error_code == ErrorCode.invalid_group_id and answer.member_id == "m-1"
    codec.encode(answer)  # a valid answer of its version
    assert refusal(ApiKey.JOIN_GROUP, 9, request(ApiKey.JOIN_GROUP, 9, group_id="g", member_id="")) is None


@pytest.mark.parametrize(
    ("key", "version", "error"),
    [
        (ApiKey.SYNC_GROUP, 5, ErrorCode.invalid_group_id),
        (ApiKey.HEARTBEAT, 0, ErrorCode.invalid_group_id),
        (ApiKey.HEARTBEAT, 4, ErrorCode.invalid_group_id),
        (ApiKey.LEAVE_GROUP, 0, ErrorCode.invalid_group_id),
        (ApiKey.LEAVE_GROUP, 5, ErrorCode.invalid_group_id),
        (ApiKey.OFFSET_DELETE, 0, ErrorCode.invalid_group_id),
        (ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, ErrorCode.invalid_request),
        (ApiKey.SHARE_GROUP_HEARTBEAT, 1, ErrorCode.invalid_request),
        (ApiKey.STREAMS_GROUP_HEARTBEAT, 0, ErrorCode.invalid_request),
        (ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, ErrorCode.invalid_group_id),
        (ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, ErrorCode.invalid_group_id),
    ],
)
def test_an_empty_group_id_refuses_the_request_at_the_top(key, version, error):
    answer = refusal(key, version, request(key, version, group_id=""))
    assert answer.error_code == error
    if error == ErrorCode.invalid_request:
        assert answer.error_message == "GroupId can't be empty."
    codec.encode(answer)
    assert refusal(key, version, request(key, version, group_id="g")) is None


def test_txn_offset_commit_answers_each_partition_and_the_broker_checks_topics_first():
    item = entities.item_type(request_type(ApiKey.TXN_OFFSET_COMMIT, 3), "topics")
    part = entities.item_type(item, "partitions")
    partitions = tuple(entities.build(part, partition_index=p) for p in (0, 1))
    topics = tuple(entities.build(item, name=n, partitions=partitions) for n in ("mine", "gone"))
    body = request(ApiKey.TXN_OFFSET_COMMIT, 3, group_id="", transactional_id="tx", topics=topics)
    answer = refusal(ApiKey.TXN_OFFSET_COMMIT, 3, body, lambda t: 3 if t == "gone" else None)
    got = {(t.name, p.partition_index): int(p.error_code) for t in answer.topics for p in t.partitions}
    assert got == {("mine", 0): 24, ("mine", 1): 24, ("gone", 0): 3, ("gone", 1): 3}
    codec.encode(answer)


def test_describe_topic_partitions_with_the_empty_name_answers_every_topic_as_kafka_does():
    item = entities.item_type(request_type(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0), "topics")
    body = request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, topics=tuple(item(name=n) for n in ("t", "")))
    answer = refusal(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)
    assert [(t.name, t.error_code) for t in answer.topics] == [("t", -1), ("", -1)]
    body = request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, topics=(item(name="."),))
    assert refusal(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body) is None  # answered per item (below)


# -- items ----------------------------------------------------------------------------------------------------


def _described(key: ApiKey, version: int, *groups: tuple[str, int]) -> object:
    cls = response_type(key, version)
    item = entities.item_type(cls, "groups")
    state = {"group_state": "Stable", "group_epoch": 5}  # what the broker said of the VC's own renamed group
    return codec._empty(cls, groups=tuple(entities.build(item, group_id=g, error_code=e, **state) for g, e in groups))


@pytest.mark.parametrize(
    ("key", "version"),
    [(ApiKey.CONSUMER_GROUP_DESCRIBE, 1), (ApiKey.SHARE_GROUP_DESCRIBE, 1), (ApiKey.STREAMS_GROUP_DESCRIBE, 0)],
)
def test_an_empty_group_id_is_answered_in_its_own_item_and_the_others_as_the_broker_did(key, version):
    api = spec(key)
    body = request(key, version, group_ids=("", "g", "h"))
    response = _described(key, version, ("", 0), ("g", 0), ("h", ErrorCode.group_authorization_failed))
    fixed = name_rules.fix_items(api.name_rules, body, response)
    assert fixed.groups[0] == entities.build(type(fixed.groups[0]), group_id="", error_code=ErrorCode.invalid_group_id)
    assert fixed.groups[1:] == response.groups[1:]
    # Kafka authorizes first: an empty id the VC's ACLs refused keeps that answer.
    denied = _described(key, version, ("", ErrorCode.group_authorization_failed))
    assert name_rules.fix_items(api.name_rules, request(key, version, group_ids=("",)), denied) == denied


def test_describe_producers_answers_each_partition_of_a_topic_kafka_refuses():
    req_item = entities.item_type(request_type(ApiKey.DESCRIBE_PRODUCERS, 0), "topics")
    body = request(ApiKey.DESCRIBE_PRODUCERS, 0, topics=(req_item(name=".", partition_indexes=(0, 1)),))
    cls = response_type(ApiKey.DESCRIBE_PRODUCERS, 0)
    topic_cls = entities.item_type(cls, "topics")
    part_cls = entities.item_type(topic_cls, "partitions")
    unknown = tuple(entities.build(part_cls, partition_index=p, error_code=3, error_message="?") for p in (0, 1))
    response = codec._empty(cls, topics=(entities.build(topic_cls, name=".", partitions=unknown),))
    fixed = name_rules.fix_items(spec(ApiKey.DESCRIBE_PRODUCERS).name_rules, body, response)
    assert [(p.partition_index, p.error_code, p.error_message) for p in fixed.topics[0].partitions] == [
        (p, ErrorCode.invalid_topic_exception, "Topic name is invalid: '.' is not allowed") for p in (0, 1)
    ]


# -- config resources -----------------------------------------------------------------------------------------


DEFAULT_GROUP = "Default group resources are not allowed."


@pytest.mark.parametrize(
    ("key", "rtype", "name", "verdict"),
    [
        (ApiKey.DESCRIBE_CONFIGS, 2, "", name_rules.invalid_topic("")),
        (ApiKey.DESCRIBE_CONFIGS, 2, "a b", name_rules.invalid_topic("a b")),
        (ApiKey.DESCRIBE_CONFIGS, 32, "", (ErrorCode.invalid_request, "Group name must not be empty")),
        (ApiKey.ALTER_CONFIGS, 2, "", (ErrorCode.invalid_request, "Default topic resources are not allowed.")),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, 2, ".", name_rules.invalid_topic(".")),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, 32, "", (ErrorCode.invalid_request, DEFAULT_GROUP)),
        (ApiKey.DESCRIBE_CONFIGS, 2, "t", None),
        (ApiKey.DESCRIBE_CONFIGS, 32, "a b", None),  # a group id may hold any character
        (ApiKey.ALTER_CONFIGS, 4, "", None),  # broker resources are refused to a VC before this (the handler)
    ],
)  # fmt: skip
def test_a_config_resources_name_is_checked_as_kafka_checks_it(key, rtype, name, verdict):
    assert name_rules.resource_refusal(spec(key).name_rules, rtype, name) == verdict


# -- ApiVersions (KIP-511) ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("software", "refused"), [("librdkafka", False), ("2.6.1-RC1", False), ("a", False),
                                                    ("", True), ("a b", True), ("-x", True), ("x.", True)])  # fmt: skip
def test_a_client_software_name_is_checked_as_kip_511_says(software, refused):
    rules = spec(ApiKey.API_VERSIONS).name_rules
    assert name_rules.refuses(rules, request(ApiKey.API_VERSIONS, 3, client_software_name=software,
                                             client_software_version="1.0")) is refused  # fmt: skip
    assert name_rules.refuses(rules, request(ApiKey.API_VERSIONS, 3, client_software_name="c",
                                             client_software_version=software)) is refused  # fmt: skip
    assert not name_rules.refuses(rules, request(ApiKey.API_VERSIONS, 2))  # no such fields before v3


# -- the registration -----------------------------------------------------------------------------------------

# Where Kafka accepts the empty group id: no rule, the VC's own empty group is used.
ACCEPTING = (ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS,
             ApiKey.FIND_COORDINATOR, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)  # fmt: skip


def test_apis_that_accept_the_empty_group_id_have_no_rule():
    assert all(spec(key).name_rules == () for key in ACCEPTING)


def _path_exists(cls: type, path: str) -> bool:
    array, _, member = path.partition("[]")
    if array not in entities.field_names(cls):
        return False
    return not member or member.lstrip(".") in entities.field_names(entities.item_type(cls, array))


def test_every_rule_names_fields_each_version_of_its_api_has():
    """A field a version lacks is read as null and checks nothing: each rule must reach each version."""
    checked = 0
    for key, api in catalogue().items():
        for rule in api.name_rules:
            info = known_apis()[key]
            for version in range(info.min_version, info.max_version + 1):
                req, resp = request_type(key, version), response_type(key, version)
                if isinstance(rule, name_rules.Whole):
                    optional = key == ApiKey.API_VERSIONS and version < 3  # KIP-511's fields are from v3
                    assert optional or _path_exists(req, rule.field), (api.name, version, rule.field)
                elif isinstance(rule, name_rules.Items):
                    assert _path_exists(req, rule.names), (api.name, version, rule.names)
                    assert rule.field in entities.field_names(entities.item_type(resp, rule.items))
                checked += 1
    assert checked > 50


def test_every_api_with_rules_is_in_the_docs_table():
    text = (ROOT / "docs" / "tenancy.md").read_text()
    table = text[text.index("### Names checked as the client sent them") :]
    for api in catalogue().values():
        if api.name_rules and api.key != ApiKey.API_VERSIONS:
            assert f"| {api.name} |" in table, api.name
    assert "| ApiVersions v3+ |" in table


def test_a_whole_refusal_is_an_answer_of_its_version():
    """Every registered whole-request rule builds an answer its version can encode."""
    for key, api in catalogue().items():
        for rule in api.name_rules:
            info = known_apis()[key]
            if not isinstance(rule, name_rules.Whole) or key == ApiKey.API_VERSIONS:
                continue
            for version in range(info.min_version, info.max_version + 1):
                body = entities.empty(request_type(key, version))
                field = rule.field.partition("[]")[0]
                if rule.field.endswith("[].name"):
                    item = entities.item_type(type(body), field)
                    body = dataclasses.replace(body, **{field: (entities.build(item, name=""),)})
                else:
                    body = dataclasses.replace(body, **{field: ""})
                answer = rule.refusal(body, response_type(key, version), lambda _t: None)
                assert answer is not None, (api.name, version)
                codec.encode(answer)


def test_apis_answered_per_item_are_decoded_both_ways():
    """An `Items` rule edits the decoded answer: its API's answer must not be spliced (tenant.yaml)."""
    for api in catalogue().values():
        if name_rules.has_items(api.name_rules):
            assert api.tenant is not None and api.tenant.action == "rewrite" and "response" not in api.tenant.splice


def test_names_read_off_an_undecoded_request_are_checked_by_the_whole_request_rules():
    """A spliced request kio cannot decode (a member id that is no UTF-8) is checked by its renamed group ids."""
    rules = spec(ApiKey.LEAVE_GROUP).name_rules
    assert name_rules.refuses_any(rules, [""]) and not name_rules.refuses_any(rules, ["g", "a b"])
    assert not name_rules.refuses_any(spec(ApiKey.OFFSET_COMMIT).name_rules, [""])
