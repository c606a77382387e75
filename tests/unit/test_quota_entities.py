"""AlterClientQuotas/DescribeClientQuotas entities and values checked as Kafka's controller checks them
(ClientQuotaControlManager, QuotaConfig), then for what the proxy enforces; and the entities that bound a
whole VC (its cap, the VC default, the global levels) written only by cluster operators."""

from __future__ import annotations

import pytest
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse
from kio.schema.describe_client_quotas.v1.response import DescribeClientQuotasResponse

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.core.session import ProxySession
from proxy.quotas.model import FETCH, PRODUCE, REQUEST, entity
from proxy.tenancy.model import principal_record, quota_record

from .test_quota_stage import LAYOUT, Clock, _Tenancy, alter_request, call, describe_request, image, session

OK, AUTHZ, UNSUPPORTED, INVALID = 0, 31, 35, 42
VC = "virtual-cluster"

# (entity components, ops, expected error code, a piece of the message): a VC admin (alice, team-a) in her VC.
IN_A_VC = [
    # Kafka: validateEntity
    ((), [(PRODUCE, 1e12)], INVALID, "Invalid empty client quota entity"),
    ((), [(PRODUCE, None)], INVALID, "Invalid empty client quota entity"),
    ((("user", "carol"), ("user", "dan")), [(PRODUCE, 1)], INVALID, "duplicate entity entry user"),
    ((("client-id", "a"), ("client-id", "a")), [(PRODUCE, 1)], INVALID, "duplicate entity entry client-id"),
    ((("group", "g"),), [(PRODUCE, 1)], INVALID, "Unhandled client quota entity type: group"),
    ((("", "x"),), [(PRODUCE, 1)], INVALID, "Unhandled client quota entity type: "),
    ((("user", ""),), [(PRODUCE, 1)], INVALID, "Empty user not supported"),
    ((("client-id", ""),), [(PRODUCE, 1)], INVALID, "Empty client-id not supported"),
    # Kafka: configKeysForEntityType (only user, client-id, user+client-id, and ip alone)
    ((("ip", "1.2.3.4"), ("user", "carol")), [("connection_creation_rate", 1)], INVALID, "IP entity should"),
    ((("ip", None), ("client-id", None)), [(PRODUCE, 1)], INVALID, "should not be combined"),
    ((("ip", "no such host!"),), [("connection_creation_rate", 1)], INVALID, "is not a valid IP"),
    # Kafka: validateQuotaKeyValue (keys by entity type, values)
    ((("ip", "1.2.3.4"),), [(PRODUCE, 1)], INVALID, "Invalid configuration key producer_byte_rate"),
    ((("ip", None),), [(REQUEST, 1)], INVALID, "Invalid configuration key request_rate"),
    ((("user", "carol"),), [("connection_creation_rate", 1)], INVALID, "Invalid configuration key connection_"),
    ((("user", "carol"),), [("SCRAM-SHA-256", 1)], INVALID, "Invalid configuration key SCRAM-SHA-256"),
    ((("user", "carol"),), [("nonsense", 1)], INVALID, "Invalid configuration key nonsense"),
    ((("user", "carol"),), [(PRODUCE, -5)], INVALID, "Quota producer_byte_rate must be greater than 0"),
    ((("user", "carol"),), [(PRODUCE, 0)], INVALID, "must be greater than 0"),
    ((("client-id", None),), [(FETCH, 1.5)], INVALID, "consumer_byte_rate cannot be a fractional value."),
    ((("client-id", None),), [(FETCH, 1e19)], INVALID, "too large for a LONG"),
    ((("user", "carol"),), [("controller_mutation_rate", float("nan"))], INVALID, "must be a finite number"),
    ((("user", "carol"),), [("controller_mutation_rate", float("inf"))], INVALID, "must be a finite number"),
    ((("user", "carol"),), [(PRODUCE, float("-inf"))], INVALID, "must be a finite number"),
    ((("user", "carol"),), [(PRODUCE, 1), (PRODUCE, 2)], INVALID, "Duplicate quota key producer_byte_rate"),
    # Kafka's, but not enforceable by the proxy
    ((("ip", "1.2.3.4"),), [("connection_creation_rate", 10)], INVALID, "ip quotas are not served"),
    ((("user", "carol"),), [("request_percentage", 10)], INVALID, "enforces request_rate"),
    # Accepted: the four shapes, the proxy's request_rate, fractional DOUBLE keys, removals unchecked
    ((("user", "carol"),), [(PRODUCE, 1048576)], OK, None),
    ((("user", None),), [(FETCH, 2e6)], OK, None),
    ((("client-id", "app"),), [(REQUEST, 12.5)], OK, None),
    ((("user", "carol"), ("client-id", None)), [("controller_mutation_rate", 0.5)], OK, None),
    ((("user", "carol"),), [("nonsense", None)], OK, None),
    # The proxy's virtual-cluster type: cluster operators only, whatever it names
    (((VC, "team-a"),), [(PRODUCE, 1e12)], AUTHZ, None),
    (((VC, "team-a"), ("user", "carol")), [(PRODUCE, 1)], AUTHZ, None),
    (((VC, None),), [(PRODUCE, None)], AUTHZ, None),
]


@pytest.mark.parametrize(("components", "ops", "code", "message"), IN_A_VC)
def test_a_vc_admins_entries_are_checked_as_kafka_checks_them(components, ops, code, message):
    img = image(Clock())
    for validate_only in (False, True):
        reply, response = call(
            session(img, "User:alice"),
            49,
            alter_request((components, ops), validate_only=validate_only),
            AlterClientQuotasResponse,
        )
        (result,) = response.entries
        assert int(result.error_code) == code, result.error_message
        assert [(e.entity_type, e.entity_name) for e in result.entity] == list(components)
        if message is not None:
            assert message in (result.error_message or "")
        if code != OK or validate_only:
            assert reply.writes == []
    # Never a cap, never another VC's entity: whatever was accepted stays in team-a, with a user or client.
    assert img.quotas.resolve("team-a", "User:carol", "app").caps == {}


def test_an_empty_entity_no_longer_sets_the_vcs_cap():
    img = image(Clock())
    reply, response = call(
        session(img, "User:alice"), 49, alter_request(((), [(PRODUCE, 1e12), (FETCH, 1e12)])), AlterClientQuotasResponse
    )
    assert [int(e.error_code) for e in response.entries] == [INVALID] and reply.writes == []


def test_one_bad_entry_fails_alone_and_a_duplicated_entity_is_refused_twice():
    img = image(Clock())
    reply, response = call(
        session(img, "User:alice"),
        49,
        alter_request(
            ((("user", "carol"),), [(PRODUCE, 1000)]),
            ((("user", "dan"),), [(PRODUCE, -1)]),
            ((("client-id", "x"),), [(FETCH, 1000)]),
            ((("client-id", "x"),), [(REQUEST, 10)]),
        ),
        AlterClientQuotasResponse,
    )
    assert [int(e.error_code) for e in response.entries] == [OK, INVALID, INVALID, INVALID]
    assert "Ignoring duplicate entity" in response.entries[3].error_message
    assert [key for key, _ in reply.writes] == ['["quota","user=carol","virtual-cluster=team-a","producer_byte_rate"]']


def test_only_changes_are_written():
    img = image(Clock())
    img.apply(*quota_record(entity(virtual_cluster="team-a", user="carol"), PRODUCE, 1000.0))
    s = session(img, "User:alice")
    request = alter_request(((("user", "carol"),), [(PRODUCE, 1000), (FETCH, None)]))
    reply, response = call(s, 49, request, AlterClientQuotasResponse)
    assert int(response.entries[0].error_code) == OK and reply.writes == []


def operator_session(img, principal: str, operators: set[str]) -> ProxySession:
    return ProxySession(
        LAYOUT,
        tenancy=_Tenancy(img),
        principal=principal,
        super_admins=["User:admin"],
        cluster_operator=lambda p: p in operators,
    )


CAPS = [
    ((VC, "team-a"),),  # team-a's cap
    ((VC, None),),  # the VC default
    ((VC, "kafka-cluster"), ("user", None)),  # a global level: every VC's users
]


@pytest.mark.parametrize("components", CAPS)
def test_what_bounds_a_whole_vc_is_written_by_cluster_operators_only(components):
    img = image(Clock())
    img.apply(*quota_record(entity(virtual_cluster="team-a"), PRODUCE, 5e6))
    img.apply(*principal_record("User:carl", "kafka-cluster"))
    # kafka-cluster's own ACLs let carl alter configs (the quota APIs' operation on the cluster).
    carl = AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:carl", "*",
                      Operation.ALTER_CONFIGS, Permission.ALLOW)  # fmt: skip
    img.apply(*acl_record("kafka-cluster", carl, True))
    # The injected callable decides: alice, team-a's admin, is not an operator; carl (in kafka-cluster) is;
    # the config's super admin is not, once the callable says so.
    for principal, allowed in (("User:alice", False), ("User:admin", False), ("User:carl", True)):
        for ops in ([(PRODUCE, 1e12)], [(PRODUCE, None)]):
            reply, response = call(
                operator_session(img, principal, {"User:carl"}), 49, alter_request((components, ops)),
                AlterClientQuotasResponse,
            )  # fmt: skip
            code = int(response.entries[0].error_code)
            if allowed:
                assert code == OK, response.entries[0].error_message
            else:
                assert code == AUTHZ and reply.writes == []
    assert img.quotas.resolve("team-a", "User:alice", None).caps[PRODUCE].quota == 5e6


def test_by_default_the_super_admins_are_the_cluster_operators():
    img = image(Clock())
    reply, response = call(
        session(img, "User:admin"), 49, alter_request((((VC, "team-a"),), [(PRODUCE, 5e6)])), AlterClientQuotasResponse
    )
    assert int(response.entries[0].error_code) == OK and len(reply.writes) == 1
    reply, response = call(
        session(img, "User:alice"), 49, alter_request((((VC, "team-a"),), [(PRODUCE, 1e12)])), AlterClientQuotasResponse
    )
    assert int(response.entries[0].error_code) == AUTHZ and reply.writes == []


def test_a_cluster_operator_is_held_to_kafkas_rules_too():
    img = image(Clock())
    s = session(img, "User:admin")
    for components, ops, message in (
        (((VC, "team-a"), (VC, "team-b")), [(PRODUCE, 1)], "duplicate entity entry virtual-cluster"),
        (((VC, "team-a"), ("ip", "1.2.3.4")), [("connection_creation_rate", 1)], "ip quotas are not served"),
        (((VC, "team-a"), ("user", "")), [(PRODUCE, 1)], "Empty user not supported"),
        (((VC, "team-a"),), [(PRODUCE, -1)], "must be greater than 0"),
        (((VC, "kafka-cluster"),), [(PRODUCE, 1)], "kafka-cluster is reserved"),
    ):
        reply, response = call(s, 49, alter_request((components, ops)), AlterClientQuotasResponse)
        assert int(response.entries[0].error_code) == INVALID, components
        assert message in response.entries[0].error_message and reply.writes == []


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        ((("user", 0, "a"), ("user", 0, "b")), INVALID, "Entity type user cannot appear more than once"),
        ((("", 2, None),), INVALID, "Invalid empty entity type."),
        ((("group", 2, None),), UNSUPPORTED, "Unsupported entity type group"),
        ((("ip", 2, None), ("user", 2, None)), INVALID, "IP filter component should not be used"),
        ((("user", 1, "x"),), INVALID, "a default match takes no name"),
        ((("user", 2, None),), OK, None),
    ],
)
def test_describe_filters_are_checked_as_kafka_checks_them(components, code, message):
    _, response = call(
        session(image(Clock()), "User:alice"), 48, describe_request(*components), DescribeClientQuotasResponse
    )
    assert int(response.error_code) == code
    if message is not None:
        assert message in response.error_message
