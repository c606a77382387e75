"""The trust model's decisions (proxy/tenancy/rights.py): who is where, and who holds which right."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.tenancy.model import TenancyImage, admin_record, client_record, principal_record, vc_delete, vc_record
from proxy.tenancy.rights import Rights

Op = Operation
SUPER = "User:root"


def grant(principal: str, op: Operation, name: str, pattern: PatternType = PatternType.LITERAL, allow: bool = True):
    permission = Permission.ALLOW if allow else Permission.DENY
    return acl_record(
        "kafka-cluster", AclBinding(ResourceType.CLUSTER, name, pattern, principal, "*", op, permission), True
    )


def image(*records) -> TenancyImage:
    img = TenancyImage()
    for record in (
        vc_record("team-a"),
        vc_record("team-b"),
        principal_record("User:alice", "team-a"),
        principal_record("User:bob", "team-b"),
        client_record("rdkafka", "team-b"),  # bob (team-b's admin) bound kcat's default client id
        principal_record("User:ops", "kafka-cluster"),
        *records,
    ):
        img.apply(*record)
    return img


@pytest.mark.parametrize(
    ("principal", "client_id", "where"),
    [
        (SUPER, "rdkafka", "kafka-cluster"),  # a super-admin is never captured by a client id
        ("User:alice", "rdkafka", "team-a"),  # bound by name: the name wins
        ("User:ops", "rdkafka", "kafka-cluster"),  # a kafka-cluster member stays there
        ("User:dave", "rdkafka", None),  # holds a right (granted below): no label places it
        ("User:erin", "rdkafka", "team-b"),  # no identity stronger than the label
        ("User:ANONYMOUS", "rdkafka", "team-b"),
        ("User:ANONYMOUS", "other", None),  # anonymous and unbound: refused
        ("User:erin", None, None),  # unknown and unbound: refused
    ],
)
def test_everyone_is_somewhere_and_client_ids_are_labels(principal, client_id, where):
    img = image(grant("User:dave", Op.DESCRIBE_VIRTUAL_CLUSTER, "team-a"))
    assert Rights(img, {SUPER}).placement(principal, client_id) == where


def test_anonymous_is_never_in_kafka_cluster_nor_holds_a_right():
    img = image(principal_record("User:ANONYMOUS", "kafka-cluster"), grant("User:ANONYMOUS", Op.ALL, "kafka-cluster"))
    rights = Rights(img, {SUPER})
    assert rights.placement("User:ANONYMOUS", None) is None
    assert not rights.may("User:ANONYMOUS", Op.ALTER_VIRTUAL_CLUSTER, "team-a")


def test_rights_are_acls_on_a_vc_or_on_kafka_cluster():
    img = image(
        grant("User:dave", Op.ALTER_VIRTUAL_CLUSTER, "team-a"),
        grant("User:ops", Op.LIST_VIRTUAL_CLUSTERS, "kafka-cluster"),
        grant("User:pat", Op.CREATE_VIRTUAL_CLUSTER, "proj-", PatternType.PREFIXED),
        grant("User:kay", Op.ALTER_VIRTUAL_CLUSTER, "kafka", PatternType.PREFIXED),
        grant("User:den", Op.ALL, "kafka-cluster"),
        grant("User:den", Op.DELETE_VIRTUAL_CLUSTER, "team-b", allow=False),
        admin_record("team-b", "User:bob", True),  # an admin of older state
    )
    r = Rights(img, {SUPER})
    assert r.may("User:dave", Op.ALTER_VIRTUAL_CLUSTER, "team-a") and r.vc_admin("User:dave", "team-a")
    assert r.may("User:dave", Op.DESCRIBE_VIRTUAL_CLUSTER, "team-a")  # implied by ALTER
    assert r.may("User:dave", Op.LIST_VIRTUAL_CLUSTERS, "team-a")
    assert not r.may("User:dave", Op.DELETE_VIRTUAL_CLUSTER, "team-a")
    assert not r.may("User:dave", Op.ALTER_VIRTUAL_CLUSTER, "team-b") and not r.cluster_operator("User:dave")
    assert r.may("User:ops", Op.LIST_VIRTUAL_CLUSTERS, "team-b")  # on kafka-cluster: every VC
    assert not r.may("User:ops", Op.DESCRIBE_VIRTUAL_CLUSTER, "team-b")
    assert r.may("User:pat", Op.CREATE_VIRTUAL_CLUSTER, "proj-x") and not r.may(
        "User:pat", Op.CREATE_VIRTUAL_CLUSTER, "x"
    )
    # A prefix meant for VC names never reaches kafka-cluster itself.
    assert not r.cluster_operator("User:kay")
    assert r.cluster_operator("User:den") and not r.may("User:den", Op.DELETE_VIRTUAL_CLUSTER, "team-b")  # DENY wins
    assert r.may("User:bob", Op.ALTER_VIRTUAL_CLUSTER, "team-b") and not r.may(
        "User:bob", Op.DELETE_VIRTUAL_CLUSTER, "team-b"
    )
    assert r.holders(Op.ALTER_VIRTUAL_CLUSTER, "team-a") == {"User:dave", "User:den"}
    assert all(r.may(SUPER, op, "anything") for op in Op if op.value >= 100)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["admin", "unadmin", "allow", "deny", "revoke", "vc-delete"]),
            st.sampled_from(["team-a", "team-b"]),
            st.sampled_from(["User:x", "User:y", "User:z"]),
        ),
        max_size=30,
    )
)
def test_who_holds_any_right_is_what_every_vc_and_acl_would_answer_after_any_change(steps):
    """holds_any is asked of a set made once per change of the image (a client-id-bound connection asks at
    each change): after any sequence of admin, ACL and VC records it answers as looking at each VC's admins
    and each of kafka-cluster's ACLs would, asked before and after each change."""
    img = image()
    rights = Rights(img, frozenset({SUPER}))
    for kind, vc, principal in steps:
        if kind in ("admin", "unadmin"):
            record = admin_record(vc, principal, kind == "admin")
        elif kind == "vc-delete":
            record = vc_delete(vc)
        else:
            record = grant(principal, Op.ALTER_VIRTUAL_CLUSTER, vc, allow=kind == "allow")
            if kind == "revoke":
                record = (record[0], None)
        img.apply(*record)
        for who in ("User:x", "User:y", "User:z"):
            scanned = any(who in v.admins for v in img.vcs.values()) or any(
                b.principal == who and b.permission is Permission.ALLOW for b in img.cluster_acls
            )
            assert rights.holds_any(who) is scanned


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["bind", "unbind", "admin", "unadmin", "allow", "deny", "vc-delete"]),
            st.sampled_from(["team-a", "team-b", "kafka-cluster"]),
            st.sampled_from(["User:x", "user:y", "USER:z", "Group:x", "User:a:b"]),
        ),
        max_size=30,
    )
)
def test_the_names_a_relayed_login_may_not_take_are_every_user_the_image_names(steps):
    """named_user_names (what the relay guard asks, made once per change) is, after any sequence of records,
    the name after `User:` (in any case) of every principal bound, every VC's admin and every cluster ACL's."""
    img = image()
    for kind, vc, principal in steps:
        if kind in ("bind", "unbind"):
            record = principal_record(principal, vc if kind == "bind" else None)
        elif kind in ("admin", "unadmin"):
            record = admin_record(vc, principal, kind == "admin")
        elif kind == "vc-delete":
            record = vc_delete(vc) if vc != "kafka-cluster" else principal_record(principal, None)
        else:
            record = grant(principal, Op.ALTER_VIRTUAL_CLUSTER, vc, allow=kind == "allow")
        img.apply(*record)
        named = [*img.principals, *(a for v in img.vcs.values() for a in v.admins)]
        named += [b.principal for b in img.cluster_acls]
        expected = {p.partition(":")[2] for p in named if p.partition(":")[0].lower() == "user"}
        assert img.named_user_names() == expected
