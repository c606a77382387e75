"""VC-scoped ACLs: Kafka's ACL semantics (proxy/acl/model.py), the ACL APIs answered in a VC
(proxy/management/acl_plane.py), and enforcement through the sans-I/O session (proxy/acl/access.py and the
authorization stage), with frames built by kio."""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from proxy.acl.model import (
    AclBinding,
    AclError,
    AclFilter,
    AclSet,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    Subject,
    acl_record,
)
from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession
from proxy.protocol import codec
from proxy.protocol.apis import request_type, response_type
from proxy.protocol.headers import response_body_offset
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import TenancyImage, admin_record, group_record, link_record, principal_record, vc_record

from .wire import request_frame, response_frame

R, P, Op, Perm = ResourceType, PatternType, Operation, Permission
LAYOUT = ListenerLayout("127.0.0.1", 9192, 9193)


def allow(name: str, op: Operation, principal: str = "User:carol", rtype: ResourceType = R.TOPIC, **kw: Any):
    return AclBinding(
        rtype, name, kw.get("pattern", P.LITERAL), principal, kw.get("host", "*"), op, kw.get("perm", Perm.ALLOW)
    )


def deny(name: str, op: Operation, principal: str = "User:carol", rtype: ResourceType = R.TOPIC, **kw: Any):
    return allow(name, op, principal, rtype, perm=Perm.DENY, **kw)


def authorizer(*bindings: AclBinding, allow_if_no_acl: bool = True) -> Authorizer:
    acls = AclSet()
    for b in bindings:
        acls.add(b.validate())
    return Authorizer(acls, allow_if_no_acl)


CAROL = Subject("User:carol", "10.0.0.7")


# -- the model ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("granted", "asked", "allowed"),
    [
        (Op.READ, Op.READ, True),
        (Op.READ, Op.DESCRIBE, True),  # READ, WRITE, DELETE, ALTER imply DESCRIBE
        (Op.WRITE, Op.DESCRIBE, True),
        (Op.DELETE, Op.DESCRIBE, True),
        (Op.ALTER, Op.DESCRIBE, True),
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
        (Op.ALL, Op.WRITE, True),
        (Op.READ, Op.WRITE, False),
        (Op.DESCRIBE, Op.READ, False),
        (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, False),
    ],
)
def test_operations_imply_as_kafka_says(granted, asked, allowed):
    auth = authorizer(allow("orders", granted))
    assert auth.allows(CAROL, asked, R.TOPIC, "orders") is allowed


def test_deny_wins_over_allow_and_all():
    auth = authorizer(allow("orders", Op.ALL), deny("orders", Op.WRITE))
    assert auth.allows(CAROL, Op.READ, R.TOPIC, "orders")
    assert not auth.allows(CAROL, Op.WRITE, R.TOPIC, "orders")
    auth = authorizer(allow("*", Op.READ, principal="User:*"), deny("pay", Op.ALL, pattern=P.PREFIXED))
    assert not auth.allows(CAROL, Op.READ, R.TOPIC, "payments")
    assert auth.allows(CAROL, Op.READ, R.TOPIC, "orders")


def test_patterns_principals_and_hosts():
    auth = authorizer(
        allow("sales.", Op.READ, pattern=P.PREFIXED),
        allow("*", Op.DESCRIBE, principal="User:*"),
        allow("logs", Op.WRITE, host="10.0.0.9"),
    )
    assert auth.allows(CAROL, Op.READ, R.TOPIC, "sales.eu")
    assert not auth.allows(CAROL, Op.READ, R.TOPIC, "sales")  # a prefix is not the name itself
    assert auth.allows(Subject("User:dave", "1.2.3.4"), Op.DESCRIBE, R.TOPIC, "anything")
    assert not auth.allows(CAROL, Op.WRITE, R.TOPIC, "logs")  # from another host
    assert auth.allows(Subject("User:carol", "10.0.0.9"), Op.WRITE, R.TOPIC, "logs")


def test_no_acl_on_a_resource_follows_the_vcs_default():
    auth = authorizer(allow("orders", Op.READ))
    assert auth.allows(CAROL, Op.WRITE, R.TOPIC, "payments")  # nothing names payments: open
    assert not auth.allows(Subject("User:dave", "h"), Op.READ, R.TOPIC, "orders")  # orders has ACLs
    closed = authorizer(allow("orders", Op.READ), allow_if_no_acl=False)
    assert not closed.allows(CAROL, Op.WRITE, R.TOPIC, "payments")
    assert closed.allows(Subject("User:carol", "x", super_user=True), Op.WRITE, R.TOPIC, "payments")
    assert authorizer().open and not authorizer(allow_if_no_acl=False).open


def test_authorized_operations_bits():
    auth = authorizer(allow("orders", Op.READ), allow_if_no_acl=False)
    bits = auth.authorized_operations(CAROL, R.TOPIC, "orders")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


@pytest.mark.parametrize(
    "binding",
    [
        AclBinding(R.TOPIC, "t", P.MATCH, "User:a", "*", Op.READ, Perm.ALLOW),
        AclBinding(R.TOPIC, "", P.LITERAL, "User:a", "*", Op.READ, Perm.ALLOW),
        AclBinding(R.CLUSTER, "other", P.LITERAL, "User:a", "*", Op.ALTER, Perm.ALLOW),
        AclBinding(R.GROUP, "g", P.LITERAL, "User:a", "*", Op.WRITE, Perm.ALLOW),
        AclBinding(R.TOPIC, "t", P.LITERAL, "alice", "*", Op.READ, Perm.ALLOW),
        AclBinding(R.TOPIC, "t", P.LITERAL, "User:a", "*", Op.ANY, Perm.ALLOW),
        AclBinding(R.TOPIC, "t", P.LITERAL, "User:a", "*", Op.READ, Perm.ANY),
    ],
)
def test_invalid_bindings_are_refused(binding):
    with pytest.raises(AclError):
        binding.validate()


def test_filters_match_as_kafka_filters_do():
    bindings = [allow("sales.", Op.READ, pattern=P.PREFIXED), allow("sales.eu", Op.WRITE), allow("*", Op.DESCRIBE)]
    acls = AclSet()
    for b in bindings:
        acls.add(b)
    assert acls.matching(AclFilter(name="sales.eu", pattern=P.MATCH)) == sorted(bindings, key=lambda b: b.key_parts())
    assert acls.matching(AclFilter(name="sales.eu")) == [bindings[1]]  # ANY: exact name
    assert acls.matching(AclFilter(pattern=P.PREFIXED)) == [bindings[0]]
    assert acls.matching(AclFilter(operation=Op.WRITE, principal="User:other")) == []


def test_records_replay_into_the_vcs_acl_set_and_go_with_the_vc():
    image = TenancyImage()
    image.apply(*vc_record("team-a"))
    b = allow("orders", Op.READ)
    image.apply(*acl_record("team-a", b, True))
    assert b in image.vcs["team-a"].acls
    image.apply(*acl_record("team-b", b, True))  # no such VC: ignored
    image.apply(*acl_record("team-a", b, False))
    assert len(image.vcs["team-a"].acls) == 0


# -- through the session -------------------------------------------------------------------------------


@dataclasses.dataclass
class Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


@pytest.fixture
def image() -> TenancyImage:
    image = TenancyImage()
    image.apply(*vc_record("team-a"))
    for user in ("carol", "alice"):
        image.apply(*principal_record(f"User:{user}", "team-a"))
    image.apply(*admin_record("team-a", "User:alice", True))
    for link in ("orders", "payments"):
        image.apply(*link_record("team-a", link, f"{uuid.uuid4()}.{link}"))
    image.apply(*group_record("team-a", "legacy", True))
    return image


def session(image: TenancyImage, principal: str = "User:carol", allow_if_no_acl: bool = True) -> ProxySession:
    return ProxySession(
        LAYOUT,
        tenancy=Tenancy(image),
        principal=principal,
        host="10.0.0.7",
        allow_if_no_acl=lambda vc: allow_if_no_acl,
        super_admins=("User:admin",),
    )


def grant(image: TenancyImage, *bindings: AclBinding) -> None:
    for b in bindings:
        image.apply(*acl_record("team-a", b, True))


def _send(s: ProxySession, api: int, version: int, body: Any):
    return s.on_request(memoryview(bytearray(request_frame(api, version, 7, body))))


def _local_reply(s: ProxySession, decision, api: int, version: int) -> Any:
    assert decision.action is Action.LOCAL
    ex = s.next_local_reply()
    assert ex is not None and ex.reply is not None
    raw = memoryview(ex.reply)
    entity, _ = codec.decode(response_type(api, version), raw, response_body_offset(raw, ex.response_header_version))
    return entity


def _forwarded_body(decision, api: int, version: int) -> Any:
    assert decision.action is Action.FORWARD
    raw = b"".join(bytes(p) for p in decision.pieces) if decision.pieces else bytes(decision.pending.frame)
    ex = decision.pending
    return codec.decode(request_type(api, version), raw, ex.header.body_offset)[0]


def _answer(s: ProxySession, api: int, version: int, body: Any) -> Any:
    result = s.on_response(memoryview(bytearray(response_frame(api, version, 7, body))))
    raw = memoryview(b"".join(bytes(p) for p in result.pieces))
    ex = result.exchange
    return codec.decode(response_type(api, version), raw, response_body_offset(raw, ex.response_header_version))[0]


def _item(cls: type, name: str) -> type:
    hint = typing.get_type_hints(cls)[name]
    if typing.get_origin(hint) is not tuple:  # Optional[tuple[...]]
        hint = typing.get_args(hint)[0]
    return typing.get_args(hint)[0]


def _metadata(names: list[str] | None, version: int = 12) -> Any:
    cls = request_type(3, version)
    topics = None if names is None else tuple(codec._empty(_item(cls, "topics"), name=n) for n in names)
    return codec._empty(cls, topics=topics, allow_auto_topic_creation=False)


def test_an_open_vc_checks_nothing(image):
    s = session(image)
    decision = _send(s, 3, 12, _metadata(["orders"]))
    assert decision.action is Action.FORWARD and decision.pending.access is None


def test_metadata_hides_topics_without_describe_and_refuses_named_ones(image):
    grant(image, allow("orders", Op.READ), allow("payments", Op.READ, principal="User:dave"))
    s = session(image)
    body = _forwarded_body(_send(s, 3, 12, _metadata(None)), 3, 12)
    physical = {t.name for t in body.topics}
    assert image.vcs["team-a"].links["orders"] in physical
    assert image.vcs["team-a"].links["payments"] not in physical  # placeholder: exists nowhere

    s = session(image)
    body = _forwarded_body(_send(s, 3, 12, _metadata(["payments"])), 3, 12)
    placeholder = body.topics[0].name
    assert placeholder != image.vcs["team-a"].links["payments"]
    resp_cls = response_type(3, 12)
    topic_cls = _item(resp_cls, "topics")
    answer = codec._empty(
        resp_cls,
        topics=(codec._empty(topic_cls, name=placeholder, error_code=ErrorCode.unknown_topic_or_partition),),
    )
    got = _answer(s, 3, 12, answer)
    assert [(t.name, int(t.error_code)) for t in got.topics] == [("payments", 29)]


def test_produce_to_a_topic_without_write_gets_topic_authorization_failed(image):
    grant(image, allow("orders", Op.WRITE), allow("payments", Op.READ))
    s = session(image)
    cls = request_type(0, 9)
    topic_cls = _item(cls, "topic_data")
    part_cls = _item(topic_cls, "partition_data")
    request = codec._empty(
        cls,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=tuple(
            codec._empty(topic_cls, name=n, partition_data=(codec._empty(part_cls, index=0, records=b""),))
            for n in ("orders", "payments")
        ),
    )
    body = _forwarded_body(_send(s, 0, 9, request), 0, 9)
    names = [t.name for t in body.topic_data]
    assert names[0] == image.vcs["team-a"].links["orders"]
    assert names[1] != image.vcs["team-a"].links["payments"] and names[1].endswith(".payments")
    resp_cls = response_type(0, 9)
    r_topic = _item(resp_cls, "responses")
    r_part = _item(r_topic, "partition_responses")
    answer = codec._empty(
        resp_cls,
        responses=tuple(
            codec._empty(r_topic, name=n, partition_responses=(codec._empty(r_part, index=0, error_code=ErrorCode(e)),))
            for n, e in ((names[0], 0), (names[1], 3))
        ),
    )
    got = _answer(s, 0, 9, answer)
    assert [(t.name, int(t.partition_responses[0].error_code)) for t in got.responses] == [
        ("orders", 0),
        ("payments", 29),
    ]


def test_group_apis_about_one_group_are_refused_with_group_authorization_failed(image):
    grant(image, allow("app", Op.READ, rtype=R.GROUP, principal="User:dave"))
    s = session(image)
    cls = request_type(11, 9)
    request = codec._empty(cls, group_id="app", session_timeout_ms=10000, protocol_type="consumer")
    got = _local_reply(s, _send(s, 11, 9, request), 11, 9)
    assert int(got.error_code) == 30


def test_describe_groups_refuses_only_the_groups_it_may_not_describe(image):
    grant(
        image, allow("app", Op.READ, rtype=R.GROUP, principal="User:dave"), allow("legacy", Op.DESCRIBE, rtype=R.GROUP)
    )
    s = session(image)
    body = _forwarded_body(_send(s, 15, 5, codec._empty(request_type(15, 5), groups=("app", "legacy"))), 15, 5)
    assert body.groups[1] == "legacy"  # assigned by migration: its physical name is its own
    assert body.groups[0] != "app" and body.groups[0].endswith(".app")
    resp_cls = response_type(15, 5)
    g = _item(resp_cls, "groups")
    answer = codec._empty(
        resp_cls,
        groups=tuple(
            codec._empty(g, group_id=name, group_state="Dead", authorized_operations=1 << 3) for name in body.groups
        ),
    )
    got = _answer(s, 15, 5, answer)
    assert [(x.group_id, int(x.error_code)) for x in got.groups] == [("app", 30), ("legacy", 0)]
    assert got.groups[1].authorized_operations == 1 << Op.DESCRIBE  # what the VC's ACLs allow


def test_create_topics_needs_create(image):
    grant(image, allow("new.", Op.CREATE, pattern=P.PREFIXED))
    s = session(image, allow_if_no_acl=False)
    cls = request_type(19, 7)
    t = _item(cls, "topics")
    request = codec._empty(
        cls,
        timeout_ms=1000,
        topics=tuple(codec._empty(t, name=n, num_partitions=1, replication_factor=1) for n in ("new.a", "b")),
    )
    body = _forwarded_body(_send(s, 19, 7, request), 19, 7)
    assert [x.name.split(".", 1)[1] for x in body.topics] == ["new.a"]


def test_idempotent_producer_needs_idempotent_write_or_a_topic_write(image):
    grant(image, allow("orders", Op.READ))
    request = codec._empty(request_type(22, 4), transactional_id=None, transaction_timeout_ms=1000)
    s = session(image, allow_if_no_acl=False)
    assert int(_local_reply(s, _send(s, 22, 4, request), 22, 4).error_code) == 31
    grant(image, allow("orders", Op.WRITE))
    s = session(image, allow_if_no_acl=False)
    assert _send(s, 22, 4, request).action is Action.FORWARD


# -- CreateAcls / DescribeAcls / DeleteAcls in a VC -------------------------------------------------------


def _creation(cls: type, b: AclBinding) -> Any:
    return _item(cls, "creations")(
        resource_type=b.resource_type,
        resource_name=b.name,
        resource_pattern_type=b.pattern,
        principal=b.principal,
        host=b.host,
        operation=b.operation,
        permission_type=b.permission,
    )


def test_a_vc_admin_manages_acls_and_an_ordinary_member_may_not(image):
    cls = request_type(30, 3)
    b = allow("orders", Op.READ)
    s = session(image, "User:alice")
    decision = _send(
        s, 30, 3, cls(creations=(_creation(cls, b), _creation(cls, dataclasses.replace(b, principal="x"))))
    )
    got = _local_reply(s, decision, 30, 3)
    assert [int(r.error_code) for r in got.results] == [0, 42]
    assert decision.pending.writes == [acl_record("team-a", b, True)]
    for record in decision.pending.writes:
        image.apply(*record)

    s = session(image, "User:carol")
    got = _local_reply(s, _send(s, 30, 3, cls(creations=(_creation(cls, b),))), 30, 3)
    assert [int(r.error_code) for r in got.results] == [31]

    describe = codec._empty(
        request_type(29, 3), resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
    )
    s = session(image, "User:alice")
    got = _local_reply(s, _send(s, 29, 3, describe), 29, 3)
    assert int(got.error_code) == 0
    assert [(r.resource_name, [a.principal for a in r.acls]) for r in got.resources] == [("orders", ["User:carol"])]
    s = session(image, "User:carol")
    assert int(_local_reply(s, _send(s, 29, 3, describe), 29, 3).error_code) == 31

    dcls = request_type(31, 3)
    flt = _item(dcls, "filters")(
        resource_type_filter=2,
        resource_name_filter="orders",
        pattern_type_filter=3,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    s = session(image, "User:alice")
    decision = _send(s, 31, 3, dcls(filters=(flt,)))
    got = _local_reply(s, decision, 31, 3)
    assert [m.resource_name for m in got.filter_results[0].matching_acls] == ["orders"]
    assert decision.pending.writes == [acl_record("team-a", b, False)]


def test_acl_apis_are_advertised_and_super_admins_reach_the_broker(image):
    s = session(image, "User:admin")  # a super-admin, in kafka-cluster: the physical cluster's ACLs
    describe = codec._empty(
        request_type(29, 3), resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
    )
    assert _send(s, 29, 3, describe).action is Action.FORWARD


def test_apis_with_per_item_errors_are_advertised_and_refused_per_item_in_a_vc(image):
    from proxy.core.apiversions import tenant_versions

    assert {29, 30, 31, 34, 51, 27} <= set(tenant_versions())  # some principal (an unbound admin) may use them
    cls = request_type(51, 0)
    deletion = _item(cls, "deletions")(name="carol", mechanism=1)
    s = session(image)
    got = _local_reply(s, _send(s, 51, 0, cls(deletions=(deletion,), upsertions=())), 51, 0)
    assert [(r.user, int(r.error_code)) for r in got.results] == [("carol", 31)]


# -- the index against a plain reading of Kafka's rules ---------------------------------------------------

_names = st.sampled_from(["a", "ab", "abc", "b", "*"])
_bindings = st.builds(
    AclBinding,
    st.sampled_from([R.TOPIC, R.GROUP]),
    _names,
    st.sampled_from([P.LITERAL, P.PREFIXED]),
    st.sampled_from(["User:carol", "User:dave", "User:*"]),
    st.sampled_from(["*", "10.0.0.7", "10.0.0.8"]),
    st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE, Op.ALL]),
    st.sampled_from([Perm.ALLOW, Perm.DENY]),
).filter(lambda b: not (b.pattern is P.PREFIXED and b.name == "*"))


def _reference(bindings, who, op, rtype, name, allow_if_no_acl):
    def resource(b):
        if b.resource_type is not rtype:
            return False
        return name.startswith(b.name) if b.pattern is P.PREFIXED else b.name in (name, "*")

    here = [b for b in bindings if resource(b)]
    mine = [b for b in here if b.principal in (who.principal, "User:*") and b.host in (who.host, "*")]
    if any(b.permission is Perm.DENY and b.operation in (op, Op.ALL) for b in mine):
        return False
    implied = {op, Op.ALL} | ({Op.READ, Op.WRITE, Op.DELETE, Op.ALTER} if op is Op.DESCRIBE else set())
    if any(b.permission is Perm.ALLOW and b.operation in implied for b in mine):
        return True
    return not here and allow_if_no_acl


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_bindings, max_size=12),
    st.lists(_bindings, max_size=4),
    st.sampled_from([R.TOPIC, R.GROUP]),
    st.sampled_from(["a", "ab", "abc", "b", "c"]),
    st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE]),
    st.booleans(),
)
def test_indexed_decisions_equal_kafkas_rules_read_plainly(bindings, removed, rtype, name, op, default):
    acls = AclSet()
    for b in bindings + removed:
        acls.add(b)
    for b in removed:
        if b not in bindings:
            acls.discard(b)
    kept = [b for b in dict.fromkeys(bindings)]
    matching = {
        b
        for b in kept
        if b.resource_type is rtype and (name.startswith(b.name) if b.pattern is P.PREFIXED else b.name in (name, "*"))
    }
    assert sorted(acls.candidates(rtype, name), key=repr) == sorted(matching, key=repr)  # exactly, each once
    auth = Authorizer(acls, default)
    for who in (CAROL, Subject("User:dave", "10.0.0.8")):
        assert auth.allows(who, op, rtype, name) == _reference(kept, who, op, rtype, name, default)


def test_prefixes_are_found_by_their_length_and_forgotten_with_their_last_binding():
    acls = AclSet()
    short = AclBinding(R.TOPIC, "ord", P.PREFIXED, "User:carol", "*", Op.READ, Perm.ALLOW)
    long = AclBinding(R.TOPIC, "orders-", P.PREFIXED, "User:carol", "*", Op.WRITE, Perm.ALLOW)
    other = dataclasses.replace(long, principal="User:dave")
    for b in (short, long, other, *(dataclasses.replace(short, name=f"x{i}") for i in range(1000))):
        acls.add(b)
    assert set(acls.candidates(R.TOPIC, "orders-eu")) == {short, long, other}
    assert set(acls.candidates(R.TOPIC, "ord")) == {short}  # a prefix matches the name itself
    assert set(acls.candidates(R.GROUP, "orders-eu")) == set()
    acls.discard(long)
    assert set(acls.candidates(R.TOPIC, "orders-eu")) == {short, other}  # the prefix stays while one binds it
    acls.discard(other)
    acls.discard(short)
    assert set(acls.candidates(R.TOPIC, "orders-eu")) == set()
    assert set(acls.prefix_lengths[R.TOPIC]) == {2, 3, 4}  # only the x0..x999 lengths are left
    for i in range(1000):
        acls.discard(dataclasses.replace(short, name=f"x{i}"))
    assert acls.prefix_lengths == {} and acls.prefixed == {} and not len(acls)


# -- authorized operations on the cluster: as a broker reports them (issue 25, librdkafka's 0081_admin) ----


def _describe_cluster_ops(s: ProxySession) -> int:
    from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
    from kio.schema.describe_cluster.v1.response import DescribeClusterResponse

    request = DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1)
    assert _send(s, 60, 1, request).action is Action.FORWARD
    # The broker's answer is for the proxy's own principal: whatever it says, the VC's answer is computed.
    reply = codec._empty(DescribeClusterResponse, cluster_id="physical", cluster_authorized_operations=1 << 8)
    return int(_answer(s, 60, 1, reply).cluster_authorized_operations)


KAFKAS_SEVEN = {Op.ALTER, Op.ALTER_CONFIGS, Op.CLUSTER_ACTION, Op.CREATE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS}
KAFKAS_SEVEN |= {Op.IDEMPOTENT_WRITE}


def _bits(ops: set[Operation]) -> int:
    return sum(1 << op for op in ops)


def test_a_member_allowed_everything_sees_the_seven_cluster_operations_a_broker_shows(image):
    """librdkafka's 0081_admin expects 7 (a broker's ALL on the cluster); the VC said 6, or 4 without ACLs."""
    from proxy.acl.model import CLUSTER_NAME

    assert _describe_cluster_ops(session(image)) == _bits(KAFKAS_SEVEN)  # an open VC without ACLs
    grant(image, allow(CLUSTER_NAME, Op.ALL, rtype=R.CLUSTER))
    assert _describe_cluster_ops(session(image, allow_if_no_acl=False)) == _bits(KAFKAS_SEVEN)
    only = TenancyImage()
    for record in (vc_record("team-a"), principal_record("User:carol", "team-a")):
        only.apply(*record)
    grant(only, allow(CLUSTER_NAME, Op.DESCRIBE, rtype=R.CLUSTER))
    assert _describe_cluster_ops(session(only, allow_if_no_acl=False)) == _bits({Op.DESCRIBE})


def test_cluster_action_shown_to_an_all_member_is_still_refused_as_a_broker_refuses_it(image):
    """Reported as a broker reports it, refused where a VC cannot do it (inter-broker APIs): the broker's error
    for a caller without CLUSTER_ACTION."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse

    from proxy.acl.model import CLUSTER_NAME

    grant(image, allow(CLUSTER_NAME, Op.ALL, rtype=R.CLUSTER))
    s = session(image, allow_if_no_acl=False)
    share_keys = codec._empty(FindCoordinatorRequest, key_type=2, coordinator_keys=("g:topic-id:0",))
    reply = _local_reply(s, _send(s, 10, 4, share_keys), 10, 4)
    assert isinstance(reply, FindCoordinatorResponse)
    assert {int(c.error_code) for c in reply.coordinators} == {int(ErrorCode.cluster_authorization_failed)}
