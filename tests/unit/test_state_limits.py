"""Bounded state (proxy/tenancy/limits.py, issue 23 point 4): each limit allows its value and refuses one
beyond it with the API's error and a message naming the limit; who may set the limits; the config's
defaults; client-supplied names cut in log lines; orphaned physical topics counted and swept."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, Subject
from proxy.config import ConfigError, parse_config
from proxy.core.session import Action
from proxy.management import acl_plane, plane, users
from proxy.management.vc_settings import SettingsRefused, alter_settings
from proxy.protocol import entities
from proxy.protocol import management as m
from proxy.protocol.apis import request_type, response_type
from proxy.quotas.model import PRODUCE
from proxy.quoting import cut, shown
from proxy.tenancy import limits, orphans
from proxy.tenancy.model import (
    KAFKA_CLUSTER,
    TenancyImage,
    link_record,
    orphan_record,
    partitions_record,
    setting_record,
    topic_record,
)
from proxy.tenancy.policy import TopicPolicy, usage_of

from . import test_quota_stage as quota_stage
from .test_topic_policy import CREATE_TOPICS, _create, _local_reply, _send, open_session
from .test_topic_policy import shared as shared
from .test_users import alter_request, errors, upsert
from .test_users import apply as apply_records
from .test_users import image as users_image
from .test_users import scope as users_scope

POLICY_VIOLATION, UNACCEPTABLE_CREDENTIAL = 44, 93


def limited(img: TenancyImage, vc: str, **values: Any) -> TenancyImage:
    """The VC's limits as an operator sets them (its `vcconfig` records)."""
    for key, value in values.items():
        img.apply(*setting_record(vc, key, value))
    return img


# -- user names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("u" * 256, 0),  # at the default limit: 256 UTF-8 bytes
        ("u" * 257, UNACCEPTABLE_CREDENTIAL),
        ("é" * 128, 0),  # 256 bytes in 128 characters
        ("é" * 128 + "u", UNACCEPTABLE_CREDENTIAL),
        ("x" * 30_000, UNACCEPTABLE_CREDENTIAL),  # the attack's name
        ("nul\x00name", UNACCEPTABLE_CREDENTIAL),
        ("line\nbreak", UNACCEPTABLE_CREDENTIAL),
        ("del\x7f", UNACCEPTABLE_CREDENTIAL),
        ("c1\x85", UNACCEPTABLE_CREDENTIAL),
        ("comma,equals=ok", 0),  # SCRAM escapes these (=2C, =3D): allowed, as Kafka allows them
    ],
)
def test_a_user_name_is_bounded_in_bytes_and_holds_no_control_character(name, code):
    img = users_image()
    response, records = users.alter(img, users_scope("team-a", "User:alice"), alter_request(upsert(name)))
    got_code, message = errors(response)[name]
    assert got_code == code
    if code:
        assert not records
        assert "max_user_name_bytes is 256" in message or "control character" in message


def test_an_operator_sets_a_vcs_name_limit_and_the_global_one_applies_to_cluster_wide_callers():
    img = limited(users_image(), "team-a", max_user_name_bytes=8)
    response, _ = users.alter(img, users_scope("team-a", "User:alice"), alter_request(upsert("u" * 8), upsert("v" * 9)))
    assert errors(response)["u" * 8][0] == 0
    assert errors(response)["v" * 9] == (
        UNACCEPTABLE_CREDENTIAL,
        "User name is 9 bytes: the limit max_user_name_bytes is 8",
    )
    img.limits = limits.StateLimits(max_user_name_bytes=4)  # the proxy config's (tenancy.state_limits)
    response, _ = users.alter(img, users_scope(None, "User:admin"), alter_request(upsert("abcd"), upsert("abcde")))
    assert [errors(response)[n][0] for n in ("abcd", "abcde")] == [0, UNACCEPTABLE_CREDENTIAL]


def test_deleting_a_user_is_never_refused_by_a_limit():
    img = users_image()
    img.limits = limits.StateLimits(max_user_name_bytes=1, max_users=0, max_records=0)
    response, records = users.alter(img, users_scope(None, "User:admin"), alter_request(deletions=[("loner", 2)]))
    assert errors(response) == {"loner": (0, None)} and records


# -- users per VC ------------------------------------------------------------------------------------


def test_a_vc_admin_creates_users_up_to_the_vcs_limit_and_no_further():
    img = users_image()
    have = limits.users_in(img, "team-a")  # alice, carol
    limited(img, "team-a", max_users=have + 2)
    admin = users_scope("team-a", "User:alice")
    response, records = users.alter(img, admin, alter_request(upsert("new1"), upsert("new2"), upsert("new3")))
    assert [errors(response)[n][0] for n in ("new1", "new2")] == [0, 0]
    assert errors(response)["new3"] == (
        POLICY_VIOLATION,
        f"The limit max_users of virtual cluster 'team-a' is {have + 2} (it has {have + 2})",
    )
    apply_records(img, records)
    assert limits.users_in(img, "team-a") == have + 2
    # At the limit, an existing member's password still changes; a new user still does not come in.
    response, _ = users.alter(img, admin, alter_request(upsert("carol", "new-pw"), upsert("new4")))
    assert errors(response)["carol"][0] == 0 and errors(response)["new4"][0] == POLICY_VIOLATION


def test_cluster_wide_callers_are_held_to_the_global_user_limit():
    img = users_image()
    img.limits = limits.StateLimits(max_users=limits.users_in(img, None) + 1)
    response, _ = users.alter(img, users_scope(None, "User:admin"), alter_request(upsert("solo1"), upsert("solo2")))
    assert errors(response)["solo1"][0] == 0
    assert errors(response)["solo2"][0] == POLICY_VIOLATION
    assert "max_users of the users in no virtual cluster" in errors(response)["solo2"][1]


def test_the_states_total_bounds_every_writer():
    img = users_image()
    img.limits = limits.StateLimits(max_records=limits.record_count(img) + 1)
    response, records = users.alter(img, users_scope(None, "User:admin"), alter_request(upsert("one"), upsert("two")))
    assert errors(response)["one"][0] == 0 and len(records) == 1
    assert errors(response)["two"][0] == POLICY_VIOLATION
    assert f"max_records of the proxy's state is {limits.record_count(img) + 1}" in errors(response)["two"][1]


# -- ACLs per VC (CreateAcls inside the VC, and the operators' CreateVirtualClusterAcls) ------------------


def _binding(i: int, name: str = "orders") -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, f"{name}-{i}", PatternType.LITERAL, "User:carol", "*", Operation.READ, Permission.ALLOW
    )


def _create_acls(img: TenancyImage, *bindings: AclBinding) -> tuple[list[tuple[int, str | None]], list]:
    cls = request_type(30, 3)
    creation = entities.item_type(cls, "creations")
    request = cls(
        creations=tuple(
            creation(
                resource_type=b.resource_type,
                resource_name=b.name,
                resource_pattern_type=b.pattern,
                principal=b.principal,
                host=b.host,
                operation=b.operation,
                permission_type=b.permission,
            )
            for b in bindings
        )
    )
    vc = img.vcs["team-a"]
    who = Subject("User:alice", "127.0.0.1", super_user=True)
    response, records = acl_plane.handle("team-a", vc.acls, who, 30, 3, request, limits.room(img, "team-a"))
    assert type(response) is response_type(30, 3)
    return [(int(r.error_code), r.error_message) for r in response.results], records


def test_create_acls_in_a_vc_stops_at_the_vcs_limit():
    img = limited(users_image(), "team-a", max_acls=2)
    results, records = _create_acls(img, _binding(1), _binding(2), _binding(3))
    assert results == [
        (0, None),
        (0, None),
        (POLICY_VIOLATION, "The limit max_acls of this virtual cluster is 2 (it has 2)"),
    ]
    apply_records(img, records)
    assert len(img.vcs["team-a"].acls) == 2
    results, records = _create_acls(img, _binding(1), _binding(4))  # an existing binding still succeeds
    assert [code for code, _ in results] == [0, POLICY_VIOLATION] and not records


def test_a_binding_larger_than_a_state_record_may_be_is_refused():
    img = users_image()
    results, records = _create_acls(img, _binding(1, "t" * 5000))
    assert results[0][0] == POLICY_VIOLATION and "max_record_bytes is 4096" in results[0][1] and not records


def test_an_operators_vc_acls_stop_at_the_vcs_limit_too():
    img = limited(users_image(), "team-a", max_acls=1)

    def creation(b: AclBinding) -> m.VirtualClusterAclCreation:
        return m.VirtualClusterAclCreation(
            resource_type=b.resource_type,
            resource_name=b.name,
            resource_pattern_type=b.pattern,
            principal=b.principal,
            host=b.host,
            operation=b.operation,
            permission_type=b.permission,
            virtual_cluster="team-a",
        )

    request = m.CreateVirtualClusterAclsRequest(creations=(creation(_binding(1)), creation(_binding(2))))
    response, records = plane.handle(img, plane.Caller("User:admin", frozenset({"User:admin"})), request)
    assert [int(r.error_code) for r in response.results] == [0, POLICY_VIOLATION]
    assert response.results[1].error_message == "The limit max_acls of virtual cluster 'team-a' is 1 (it has 1)"
    assert len(records) == 1


# -- client ids and principals bound per VC (AlterVirtualClusters) --------------------------------------------


def _alter(vc: str, *resources: tuple[m.ResourceType, str]) -> m.AlterVirtualClustersRequest:
    items = tuple(
        m.VirtualClusterResourceChange(
            resource_type=t, resource_name=n, resource_operation=m.ResourceOperation.ADD, physical_topic_name=None
        )
        for t, n in resources
    )
    return m.AlterVirtualClustersRequest(virtual_clusters=(m.AlterableVirtualCluster(name=vc, resources=items),))


def test_client_id_bindings_stop_at_the_vcs_limit():
    img = limited(users_image(), "team-a", max_client_ids=2)
    request = _alter("team-a", *((m.ResourceType.CLIENT, f"app-{i}") for i in range(3)))
    response, records = plane.handle(img, plane.Caller("User:admin", frozenset({"User:admin"})), request)
    results = response.virtual_clusters[0].resources
    assert [int(r.error_code) for r in results] == [0, 0, POLICY_VIOLATION]
    assert results[2].error_message == "The limit max_client_ids of virtual cluster 'team-a' is 2 (it has 2)"
    assert len(records) == 2


def test_principal_bindings_count_against_the_vcs_user_limit():
    img = users_image()
    have = limits.users_in(img, "team-a")
    limited(img, "team-a", max_users=have + 1)
    request = _alter("team-a", (m.ResourceType.USER, "User:x1"), (m.ResourceType.USER, "User:x2"))
    response, records = plane.handle(img, plane.Caller("User:admin", frozenset({"User:admin"})), request)
    assert [int(r.error_code) for r in response.virtual_clusters[0].resources] == [0, POLICY_VIOLATION]
    assert len(records) == 1


# -- quota entities per VC (through the quota stage) -------------------------------------------------------


def test_quota_entities_stop_at_the_vcs_limit_with_a_message_naming_it():
    img = quota_stage.image(quota_stage.Clock())
    img.apply(*setting_record("team-a", "max_quota_entities", 1))
    s = quota_stage.session(img, "User:alice")
    entries = [((("user", f"u{i}"),), [(PRODUCE, 1)]) for i in range(2)]
    _, response = quota_stage.call(s, 49, quota_stage.alter_request(*entries), AlterClientQuotasResponse)
    assert [int(e.error_code) for e in response.entries] == [0, POLICY_VIOLATION]
    assert response.entries[1].error_message == (
        "The limit max_quota_entities of virtual cluster 'team-a' is 1 (it has 1)"
    )


# -- who sets the limits -------------------------------------------------------------------------------------


def _config(name: str, value: str) -> Any:
    return m.VirtualClusterConfig(name=name, config_operation=m.ConfigOperation.SET, value=value)


@pytest.mark.parametrize("key", limits.VC_KEYS)
def test_only_an_operator_sets_a_vcs_limits(key):
    img = users_image()
    vc_admin = plane.Caller("User:alice", frozenset({"User:admin"})).on(img)
    with pytest.raises(SettingsRefused) as refused:
        alter_settings(img, vc_admin, "team-a", [_config(key, "5")])
    assert refused.value.code == 31 and key in refused.value.message
    operator = plane.Caller("User:oper", frozenset({"User:admin"})).on(img)
    [(record_key, value)] = alter_settings(img, operator, "team-a", [_config(key, "5")])
    assert value == {"value": 5} and key in record_key


@pytest.mark.parametrize(
    ("key", "text", "why"),
    [
        ("max_user_name_bytes", "0", "must be 1 to 32767"),
        ("max_user_name_bytes", "40000", "must be 1 to 32767"),
        ("max_user_name_bytes", "null", "must be set"),
        ("max_users", "-1", "at least 0"),
        ("max_acls", "lots", "whole number"),
        ("orphan_grace_seconds", "-5", "at least 0"),
        ("orphan_grace_seconds", "nan", "whole number"),
    ],
)
def test_a_bad_limit_value_is_refused_naming_the_key(key, text, why):
    img = users_image()
    operator = plane.Caller("User:oper", frozenset({"User:admin"})).on(img)
    with pytest.raises(SettingsRefused) as refused:
        alter_settings(img, operator, "team-a", [_config(key, text)])
    assert refused.value.code == 40 and refused.value.message.startswith(f"{key}: ") and why in refused.value.message


def test_the_configs_defaults_and_a_bad_value_names_the_file_key_and_reason():
    base = {"upstream": {"bootstrap_servers": ["localhost:9092"]}}
    config = parse_config({**base, "tenancy": {"state_limits": {"max_users": 7, "orphan_grace_seconds": 60}}})
    built = config.tenancy.state_limits.build()
    assert built == dataclasses.replace(limits.DEFAULT, max_users=7, orphan_grace_seconds=60.0)
    assert parse_config(base).tenancy.state_limits.build() == limits.DEFAULT
    with pytest.raises(ConfigError) as error:
        parse_config({**base, "tenancy": {"state_limits": {"max_user_name_bytes": 40000}}}, "proxy.yaml")
    assert str(error.value).startswith("proxy.yaml: tenancy.state_limits.max_user_name_bytes: ")
    assert "32767" in str(error.value)


# -- log lines -------------------------------------------------------------------------------------------


def test_shown_quotes_and_cuts_a_name():
    assert shown("alice") == "'alice'"
    assert shown("a\nb") == "'a\\nb'"  # no forged line
    long = shown("x" * 30_000)
    assert long == repr("x" * 200) + "…(29800 more)" and len(long) < 230
    assert cut("y" * 1000).endswith("…(600 more)")


def test_a_30000_character_name_makes_no_30000_character_log_line(caplog):
    img = users_image()
    name = "z" * 30_000
    relaying = dataclasses.replace(users_scope("team-a", "User:alice"), relays_unknown=True)
    with caplog.at_level(logging.INFO, logger="proxy.management.users"):
        users.alter(img, relaying, alter_request(upsert(name)))  # refused, and logged, before its length is looked at
        users.alter(img, users_scope(None, "User:admin"), alter_request(upsert(name)))  # too long: refused
        img.limits = limits.StateLimits(max_user_name_bytes=32767)
        users.alter(img, users_scope(None, "User:admin"), alter_request(upsert(name)))  # a record too large
        img.limits = limits.StateLimits(max_user_name_bytes=32767, max_record_bytes=1 << 20)
        response, _ = users.alter(img, users_scope(None, "User:admin"), alter_request(upsert(name)))
    assert errors(response)[name][0] == 0
    assert [r.getMessage()[:20] for r in caplog.records] == [
        "refusing User:alice ",
        "refusing User:admin ",
        "User:admin set the S",
    ]
    assert all(len(r.getMessage()) < 800 for r in caplog.records)  # a name of 200, a reason of 400


# -- orphaned physical topics ------------------------------------------------------------------------------


def _orphan_image() -> TenancyImage:
    img = users_image()
    for record in (
        link_record("team-a", "kept", "phys.kept"),
        partitions_record("phys.kept", 3),
        orphan_record("phys.left", "team-a", 1000.0),
        partitions_record("phys.left", 10),
        topic_record("phys.left", __import__("uuid").uuid4()),
        orphan_record("phys.gone", "team-a", 1000.0),
        orphan_record("phys.relinked", "team-b", 1000.0),
        link_record("team-b", "again", "phys.relinked"),
    ):
        img.apply(*record)
    return img


def test_orphans_count_against_the_vc_that_left_them():
    img = _orphan_image()
    assert img.orphans_of("team-a") == ["phys.gone", "phys.left"]
    assert img.orphans_of("team-b") == []  # linked again: counted as its link, once
    usage = usage_of(img.vcs["team-a"], img.partitions, img.orphans_of("team-a"))
    assert (usage.topics, usage.partitions) == (3, 3 + 10 + 1)
    policy = TopicPolicy(max_topics=3)
    assert policy.growth_refusal(usage, 1, 1) == "This virtual cluster may have at most 3 topics (it has 3)."


def test_create_topics_counts_what_the_vcs_deletes_left_behind(shared):
    image, _ = shared  # team-a: 2 topics (links), 4 partitions
    policy = TopicPolicy(max_topics=3, max_partitions=100)
    decision = _send(open_session(image, "User:carol", policy), CREATE_TOPICS, 7, _create(("fresh", 1, {})))
    assert decision.action is Action.FORWARD  # a third topic: within the limit
    image.apply(*orphan_record("phys.deleted-by-a", "team-a", 1000.0))
    s = open_session(image, "User:carol", policy)
    got = _local_reply(s, _send(s, CREATE_TOPICS, 7, _create(("fresh", 1, {}))), CREATE_TOPICS, 7)
    assert got.topics[0].error_code == POLICY_VIOLATION
    assert got.topics[0].error_message == "This virtual cluster may have at most 3 topics (it has 3)."
    # team-b's own count is untouched by team-a's orphan
    decision = _send(open_session(image, "User:bob", policy), CREATE_TOPICS, 7, _create(("fresh", 1, {})))
    assert decision.action is Action.FORWARD


def test_the_sweep_forgets_gone_or_relinked_orphans_and_deletes_only_past_the_grace():
    img = _orphan_image()
    existing = {"phys.kept", "phys.left", "phys.relinked"}
    plan = orphans.sweep(img, existing, now=10_000.0)
    assert plan.delete == [] and plan.forget == ["phys.gone", "phys.relinked"]  # no grace set: never deleted
    limited(img, "team-a", orphan_grace_seconds=60)
    assert orphans.sweep(img, existing, now=1059.0).delete == []  # not yet due
    assert orphans.sweep(img, existing, now=1060.0).delete == ["phys.left"]  # due exactly at the grace
    records = orphans.forget_records(img, "phys.left")
    assert [k for k, _ in records] == ['["orphan","phys.left"]', '["topic","phys.left"]', '["parts","phys.left"]']
    assert all(v is None for _, v in records)
    apply_records(img, records)
    assert img.orphans_of("team-a") == ["phys.gone"] and "phys.left" not in img.partitions


def test_an_orphan_of_a_deleted_vc_is_never_deleted_by_the_proxy():
    img = _orphan_image()
    img.limits = limits.StateLimits(orphan_grace_seconds=0)
    img.orphans["phys.x"] = dataclasses.replace(img.orphans["phys.left"], vc="gone-vc")
    plan = orphans.sweep(img, {"phys.left", "phys.x"}, now=2000.0)
    assert plan.delete == ["phys.left"]


def test_kafka_cluster_has_no_limit_settings():
    img = users_image()
    operator = plane.Caller("User:oper", frozenset({"User:admin"})).on(img)
    with pytest.raises(SettingsRefused):
        alter_settings(img, operator, KAFKA_CLUSTER, [_config("max_users", "1")])


# -- the state's size at the limits (docs/state.md, "Limits") -------------------------------------------------


def max_salt(name_bytes: int, bounds: limits.StateLimits) -> int:
    """The longest salt whose SCRAM-SHA-512 record for a name of `name_bytes` still fits in one record."""
    from proxy.auth.users import credential_from_salted, scram_record

    size = bounds.max_record_bytes
    while size > 0:
        cred = credential_from_salted("SCRAM-SHA-512", bytes(size), 4096, bytes(64))
        if limits.record_size_refusal(scram_record("u" * name_bytes, "SCRAM-SHA-512", cred), bounds) is None:
            return size
        size -= 8
    raise AssertionError("no salt fits")


def _vc_at_its_limits(vc: str, bounds: limits.StateLimits) -> list[tuple[str, Any]]:
    """One VC holding all the limits allow, every name as long as a record may hold: users with both SCRAM
    mechanisms and the longest salt, ACLs, client ids, quota entities with every key the proxy enforces."""
    import os

    from proxy.auth.users import credential_from_salted, scram_record
    from proxy.quotas.model import FETCH, MUTATION, REQUEST, entity
    from proxy.tenancy.model import client_record, principal_record, quota_record, vc_record

    def long(prefix: str, room: int) -> str:  # a name that fills a record up to `room` bytes of overhead
        return prefix.ljust(bounds.max_record_bytes - room, "n")

    records: list[tuple[str, Any]] = [vc_record(vc)]
    # Kafka bounds no salt (ScramControlManager checks only the iterations): the record's size bounds it.
    salt = max_salt(bounds.max_user_name_bytes, bounds)
    by_mechanism = {
        mech: credential_from_salted(mech, os.urandom(salt), 4096, os.urandom(size))
        for mech, size in (("SCRAM-SHA-256", 32), ("SCRAM-SHA-512", 64))
    }
    for i in range(bounds.max_users):
        name = f"{vc}-{i:06d}-".ljust(bounds.max_user_name_bytes, "u")
        records += [scram_record(name, mech, cred) for mech, cred in by_mechanism.items()]
        records.append(principal_record(f"User:{name}", vc))
    for i in range(bounds.max_acls):
        b = AclBinding(
            ResourceType.GROUP,
            long(f"g{i:06d}", 200),
            PatternType.LITERAL,
            "User:c",
            "*",
            Operation.READ,
            Permission.ALLOW,
        )
        records.append(acl_plane.acl_record(vc, b, True))
    records += [client_record(long(f"c{i:06d}", 100), vc) for i in range(bounds.max_client_ids)]
    for i in range(bounds.max_quota_entities):
        ent = entity(virtual_cluster=vc, user=long(f"q{i:06d}", 150))
        records += [quota_record(ent, key, 1024.0) for key in (PRODUCE, FETCH, MUTATION, REQUEST)]
    return records


def test_a_vc_at_its_limits_holds_the_records_and_memory_docs_state_md_states():
    import json
    import tracemalloc

    records = _vc_at_its_limits("team-a", limits.DEFAULT)
    assert len(records) == 9001  # docs/state.md: 3 per user, 1 per ACL and client id, 4 per quota entity, the VC
    assert all(limits.record_size_refusal(r, limits.DEFAULT) is None for r in records)
    written = sum(len(k.encode()) + len(json.dumps(v, separators=(",", ":")).encode()) for k, v in records)
    assert 29e6 < written < 36e6  # docs/state.md: about 32 MB of records
    tracemalloc.start()
    try:
        img = TenancyImage()
        for record in records:
            img.apply(*record)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert limits.record_count(img) == 9001
    assert 15 * 2**20 < held < 25 * 2**20  # docs/state.md: about 19.5 MiB in each replica
    # ...and nothing more fits in it
    more = limits.room(img, "team-a")
    assert limits.count_refusal(limits.MAX_ACLS, more.limits.max_acls, len(img.vcs["team-a"].acls))
    assert limits.count_refusal(limits.MAX_USERS, more.limits.max_users, limits.users_in(img, "team-a"))
    assert limits.count_refusal(limits.MAX_CLIENT_IDS, more.limits.max_client_ids, limits.client_ids_in(img, "team-a"))


def test_creating_vcs_stops_at_the_states_total():
    img = users_image()
    img.limits = limits.StateLimits(max_records=limits.record_count(img) + 1)
    request = m.CreateVirtualClustersRequest(
        virtual_clusters=(m.CreatableVirtualCluster(name="one"), m.CreatableVirtualCluster(name="two"))
    )
    response, records = plane.handle(img, plane.Caller("User:admin", frozenset({"User:admin"})), request)
    assert [int(r.error_code) for r in response.virtual_clusters] == [0, POLICY_VIOLATION]
    assert "max_records" in response.virtual_clusters[1].error_message and len(records) == 1
