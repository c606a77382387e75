"""VC-scoped ACLs for operators, sans-I/O: the Describe/Create/DeleteVirtualClusterAcls handlers and who may
use them (plane and session), the `vcproxy acls` request builders, and the ACL migration's translation."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
from kio.static.primitive import i8

from proxy.acl import migrate
from proxy.acl.model import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession
from proxy.management.plane import Caller, advertised, handle
from proxy.protocol import codec
from proxy.protocol import management as m
from proxy.protocol.apikey import ApiKey
from proxy.protocol.headers import response_body_offset
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import TenancyImage, admin_record, link_record, principal_record, vc_record
from vcproxy_tools import acls as acl_cli

from .wire import request_frame

ADMIN = Caller("User:admin", frozenset({"User:admin"}))
DAVE = Caller("User:dave", frozenset({"User:admin"}))  # team-a's VC admin
ALICE = Caller("User:alice", frozenset({"User:admin"}))  # a member of team-a
T, P, Op, Perm = ResourceType, PatternType, Operation, Permission
LITERAL, PREFIXED = m.VirtualClusterPatternType.LITERAL, m.VirtualClusterPatternType.PREFIXED
OK, CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, RESOURCE_NOT_FOUND = 0, 31, 42, 91


def image() -> TenancyImage:
    img = TenancyImage()
    for record in (
        vc_record("team-a"),
        vc_record("team-b"),
        vc_record("other"),
        principal_record("User:alice", "team-a"),
        principal_record("User:dave", "team-a"),
        admin_record("team-a", "User:dave", True),
        link_record("team-a", "orders", "teamA.orders"),
    ):
        img.apply(*record)
    return img


def apply(img: TenancyImage, records) -> TenancyImage:
    for key, value in records:
        img.apply(key, value)
    return img


def read(principal: str, name: str = "orders", op: Operation = Op.READ) -> AclBinding:
    return AclBinding(T.TOPIC, name, P.LITERAL, principal, "*", op, Perm.ALLOW)


def vc_fields(vc: str, pattern: m.VirtualClusterPatternType = LITERAL) -> dict:
    return {"virtual_cluster": vc, "virtual_cluster_pattern_type": i8(pattern)}


def create(*items: tuple[AclBinding, str, m.VirtualClusterPatternType]) -> m.CreateVirtualClusterAclsRequest:
    return m.CreateVirtualClusterAclsRequest(
        creations=tuple(acl_cli.create_request([b], vc_fields(vc, pat)).creations[0] for b, vc, pat in items)
    )


def describe(vc: str, pattern=LITERAL, flt: AclFilter | None = None) -> m.DescribeVirtualClusterAclsRequest:
    return acl_cli.describe_request(flt or AclFilter(), vc_fields(vc, pattern))


def described(response) -> set[tuple[str, AclBinding]]:
    assert int(response.error_code) == 0, response.error_message
    return set(acl_cli.described(response))


def test_super_admin_creates_describes_and_deletes_in_any_vc():
    img = image()
    carol = read("User:carol")
    response, records = handle(img, ADMIN, create((carol, "team-a", LITERAL), (carol, "team-b", LITERAL)))
    assert [int(r.error_code) for r in response.results] == [OK, OK]
    assert records == [acl_record("team-a", carol, True), acl_record("team-b", carol, True)]
    apply(img, records)
    assert carol in img.vcs["team-a"].acls and carol in img.vcs["team-b"].acls
    # Creating it again succeeds and writes nothing, as in Kafka.
    again, none = handle(img, ADMIN, create((carol, "team-a", LITERAL)))
    assert int(again.results[0].error_code) == OK and none == []
    # Describe answers per VC: each resource says whose it is; nothing of team-b shows in team-a.
    only_a, _ = handle(img, ADMIN, describe("team-a"))
    assert described(only_a) == {("team-a", carol)}
    every, _ = handle(img, ADMIN, describe("team-", PREFIXED))
    assert described(every) == {("team-a", carol), ("team-b", carol)}
    # Delete by filter, in the VCs a prefix names: the matches say their VC, one record per binding.
    flt = AclFilter(T.TOPIC, "orders", P.ANY)
    request = acl_cli.delete_request([flt, flt], vc_fields("team-", PREFIXED))
    deleted, records = handle(img, ADMIN, request)
    first, second = deleted.filter_results
    assert int(first.error_code) == OK and {a.virtual_cluster for a in first.matching_acls} == {"team-a", "team-b"}
    assert len(second.matching_acls) == 2
    assert sorted(records) == sorted([acl_record("team-a", carol, False), acl_record("team-b", carol, False)])
    apply(img, records)
    assert not len(img.vcs["team-a"].acls) and not len(img.vcs["team-b"].acls)


def test_a_prefixed_vc_pattern_applies_to_every_matching_vc_now():
    img = image()
    b = read("User:carol")
    _, records = handle(img, ADMIN, create((b, "team-", PREFIXED)))
    assert sorted(records) == sorted([acl_record("team-a", b, True), acl_record("team-b", b, True)])  # not "other"


def test_a_vc_admin_manages_its_own_vc_only():
    img = image()
    b = read("User:alice")
    response, records = handle(img, DAVE, create((b, "team-a", LITERAL), (b, "team-b", LITERAL), (b, "nope", LITERAL)))
    # Never saying whether team-b or nope exist.
    assert [int(r.error_code) for r in response.results] == [
        OK,
        CLUSTER_AUTHORIZATION_FAILED,
        CLUSTER_AUTHORIZATION_FAILED,
    ]
    assert records == [acl_record("team-a", b, True)]
    apply(img, records)
    # A prefix reaches only the VCs it administers.
    _, prefixed = handle(img, DAVE, create((read("User:x"), "team-", PREFIXED)))
    assert [k for k, _ in prefixed] == [acl_record("team-a", read("User:x"), True)[0]]
    refused, _ = handle(img, DAVE, describe("team-b"))
    assert int(refused.error_code) == CLUSTER_AUTHORIZATION_FAILED and not refused.resources
    deleted, gone = handle(img, DAVE, acl_cli.delete_request([AclFilter()], vc_fields("team-b")))
    assert int(deleted.filter_results[0].error_code) == CLUSTER_AUTHORIZATION_FAILED and gone == []


def test_members_and_strangers_are_offered_none_of_it():
    img = image()
    assert set(m.ACL_KEYS) <= advertised(img, ADMIN)
    assert set(m.ACL_KEYS) <= advertised(img, DAVE)
    assert not advertised(img, ALICE) & set(m.ACL_KEYS)
    response, records = handle(img, ALICE, create((read("User:alice"), "team-a", LITERAL)))
    assert int(response.results[0].error_code) == CLUSTER_AUTHORIZATION_FAILED and records == []


@pytest.mark.parametrize(
    ("binding", "vc", "pattern", "code"),
    [
        (read("User:carol"), "missing", LITERAL, RESOURCE_NOT_FOUND),
        (read("User:carol"), "zzz", PREFIXED, RESOURCE_NOT_FOUND),
        # A right over VCs lives in kafka-cluster's ACLs, never in a VC's own.
        (
            AclBinding(T.CLUSTER, "kafka-cluster", P.LITERAL, "User:c", "*", Op.ALTER_VIRTUAL_CLUSTER, Perm.ALLOW),
            "team-a",
            LITERAL,
            INVALID_REQUEST,
        ),
        (read("carol"), "team-a", LITERAL, INVALID_REQUEST),  # not Type:name
        (AclBinding(T.GROUP, "g", P.LITERAL, "User:c", "*", Op.WRITE, Perm.ALLOW), "team-a", LITERAL, INVALID_REQUEST),
        (AclBinding(T.TOPIC, "t", P.MATCH, "User:c", "*", Op.READ, Perm.ALLOW), "team-a", LITERAL, INVALID_REQUEST),
        (AclBinding(T.USER, "u", P.LITERAL, "User:c", "*", Op.ALL, Perm.ALLOW), "team-a", LITERAL, INVALID_REQUEST),
    ],
)
def test_refused_items_get_their_own_error(binding, vc, pattern, code):
    img = image()
    response, records = handle(img, ADMIN, create((read("User:ok"), "team-a", LITERAL), (binding, vc, pattern)))
    assert [int(r.error_code) for r in response.results] == [OK, code]
    assert records == [acl_record("team-a", read("User:ok"), True)]  # the good item is written all the same


def test_unknown_enum_values_are_invalid_not_a_crash():
    img = image()
    bad_vc_pattern = dataclasses.replace(describe("team-a"), virtual_cluster_pattern_type=i8(1))
    response, _ = handle(img, ADMIN, bad_vc_pattern)
    assert int(response.error_code) == INVALID_REQUEST
    bad_type = dataclasses.replace(describe("team-a"), resource_type_filter=i8(99))
    response, _ = handle(img, ADMIN, bad_type)
    assert int(response.error_code) == INVALID_REQUEST


def test_the_three_rpcs_round_trip_through_the_codec():
    b = read("User:carol")
    for request in (
        describe("team-a"),
        create((b, "team-a", PREFIXED)),
        acl_cli.delete_request([AclFilter()], {**vc_fields("a")}),
    ):
        raw = codec.encode(request)
        again, _ = codec.decode(type(request), raw, 0)
        assert again == request
    img = apply(image(), [acl_record("team-a", b, True)])
    response, _ = handle(img, ADMIN, describe("team-a"))
    again, _ = codec.decode(m.DescribeVirtualClusterAclsResponse, codec.encode(response), 0)
    assert described(again) == {("team-a", b)}


# -- through the session: offered to super admins and VC admins, refused per item to the others -----------


@dataclasses.dataclass
class _Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


def _session(principal: str, img: TenancyImage) -> ProxySession:
    return ProxySession(
        ListenerLayout("127.0.0.1", 9192, 9193), tenancy=_Tenancy(img), principal=principal, super_admins=["User:admin"]
    )


@pytest.mark.parametrize(
    ("principal", "code", "writes"),
    [("User:admin", OK, 1), ("User:dave", OK, 1), ("User:alice", CLUSTER_AUTHORIZATION_FAILED, 0)],
)
def test_session_answers_and_writes_or_refuses_per_item(principal: str, code: int, writes: int):
    session = _session(principal, image())
    request = create((read("User:carol"), "team-a", LITERAL), (read("User:bob"), "team-a", LITERAL))
    frame = request_frame(ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS, 0, 7, request)
    assert session.on_request(memoryview(bytearray(frame))).action is Action.LOCAL
    reply = session.next_local_reply()
    assert reply is not None and reply.reply is not None
    body, _ = codec.decode(m.CreateVirtualClusterAclsResponse, reply.reply, response_body_offset(reply.reply, 1))
    assert [int(r.error_code) for r in body.results] == [code, code]
    assert len(reply.writes or []) == 2 * writes


@pytest.mark.parametrize("principal", ["User:admin", "User:alice"])
def test_a_malformed_request_closes_the_connection(principal: str):
    session = _session(principal, image())
    good = codec.encode(describe("team-a"))
    frame = request_frame(ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS, 0, 8, good[:-3])  # cut short
    assert session.on_request(memoryview(bytearray(frame))).action is Action.CLOSE


# -- `vcproxy acls`: what it asks for ------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    from vcproxy_tools.cli import build_parser

    return build_parser().parse_args(["acls", "--bootstrap-server", "127.0.0.1:1", "--virtual-cluster", "a", *argv])


def test_add_builds_bindings_as_kafka_acls_does():
    args = parse(
        "--add", "--allow-principal", "User:bob", "--allow-principal", "User:alice", "--allow-host", "10.0.0.1"
    )
    args.operation, args.topic = ["Read", "write"], ["t"]
    got = acl_cli.bindings(args)
    assert len(got) == 4 and {b.host for b in got} == {"10.0.0.1"} and {b.operation for b in got} == {Op.READ, Op.WRITE}
    producer = acl_cli.bindings(
        parse(
            "--add", "--allow-principal", "User:j", "--producer", "--topic", "T-", "--resource-pattern-type", "prefixed"
        )
    )
    assert {(b.name, b.pattern, b.operation) for b in producer} == {
        ("T-", P.PREFIXED, op) for op in (Op.WRITE, Op.DESCRIBE, Op.CREATE)
    }
    consumer = acl_cli.bindings(
        parse("--add", "--allow-principal", "User:j", "--consumer", "--topic", "t", "--group", "g")
    )
    assert {(b.resource_type, b.operation) for b in consumer} == {
        (T.TOPIC, Op.READ),
        (T.TOPIC, Op.DESCRIBE),
        (T.GROUP, Op.READ),
    }
    default_all = acl_cli.bindings(parse("--add", "--deny-principal", "User:x", "--cluster"))
    assert default_all == [AclBinding(T.CLUSTER, "kafka-cluster", P.LITERAL, "User:x", "*", Op.ALL, Perm.DENY)]
    # In kafka-cluster's ACLs a CLUSTER resource may name a VC: a right over that VC only.
    partial = acl_cli.bindings(
        parse("--add", "--allow-principal", "User:p", "--operation", "AlterVirtualCluster", "--cluster", "team-a")
    )
    assert partial == [AclBinding(T.CLUSTER, "team-a", P.LITERAL, "User:p", "*", Op.ALTER_VIRTUAL_CLUSTER, Perm.ALLOW)]


@pytest.mark.parametrize(
    "argv",
    [
        ("--add", "--allow-principal", "User:a"),  # no resource
        ("--add", "--topic", "t"),  # no principal
        ("--add", "--allow-principal", "alice", "--topic", "t"),  # not Type:name
        ("--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"),
        ("--add", "--allow-principal", "User:a", "--topic", "t", "--operation", "Reed"),
        ("--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"),  # no --group
        ("--add", "--allow-principal", "User:a", "--producer", "--topic", "t", "--operation", "Read"),
        ("--remove", "--force"),  # remove what?
    ],
)
def test_usage_errors_exit_2_before_connecting(argv, capsys):
    assert acl_cli._run(parse(*argv)) == acl_cli.USAGE
    assert "vcproxy acls:" in capsys.readouterr().err


def test_remove_without_a_terminal_needs_force_and_never_reads_stdin(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    monkeypatch.setattr("builtins.input", lambda *_: pytest.fail("read stdin"))
    assert acl_cli._run(parse("--remove", "--topic", "t")) == acl_cli.USAGE
    assert "--force" in capsys.readouterr().err
    # With --force nothing is asked: it goes on to connect (nothing listens on port 1).
    assert acl_cli._run(parse("--remove", "--topic", "t", "--force")) == acl_cli.UNREACHABLE


def test_list_filters():
    assert acl_cli.filters(parse("--list")) == [AclFilter(pattern=P.ANY)]
    listed = acl_cli.filters(
        parse("--list", "--topic", "t", "--principal", "User:a", "--resource-pattern-type", "match")
    )
    assert listed == [AclFilter(T.TOPIC, "t", P.MATCH, "User:a")]


# -- migration: the translation (pure) -------------------------------------------------------------------


JANE = "User:jane"
TARGET = migrate.Target(
    links={"orders": "teamA.orders", "payments": "teamA.payments", "teamA.audit": "teamA.audit", "x": "other.x"},
    groups=frozenset({"orders-app", "billing"}),
    txns=frozenset({"orders-tx"}),
)


def b(rtype: ResourceType, name: str, pattern: PatternType = P.LITERAL, op: Operation = Op.READ, who: str = JANE):
    return AclBinding(rtype, name, pattern, who, "*", op, Perm.ALLOW)


def test_kafka_cluster_topics_become_link_names():
    plan = migrate.from_kafka_cluster(
        [
            b(T.TOPIC, "teamA.orders"),  # literal: the link to it
            b(T.TOPIC, "teamA.", P.PREFIXED, Op.WRITE),  # prefixed: per matching link, the prefix renamed
            b(T.TOPIC, "teamA.pay", P.PREFIXED, Op.DESCRIBE),  # a prefix the rename keeps part of
            b(T.TOPIC, "teamB.stock"),  # not linked: skipped
            b(T.TOPIC, "teamA.orders", who="User:bob"),  # someone else's: not looked at
        ],
        JANE,
        TARGET,
    )
    copies = {(s.name, t.name, t.pattern) for s, t in plan.copies}
    assert copies == {
        ("teamA.orders", "orders", P.LITERAL),
        ("teamA.", "orders", P.PREFIXED),  # the rename drops the whole prefix: the link itself
        ("teamA.", "payments", P.PREFIXED),
        ("teamA.", "teamA.", P.PREFIXED),  # a link that keeps the physical name keeps the prefix
        ("teamA.pay", "pay", P.PREFIXED),
    }
    assert [(s.name, why) for s, why in plan.skipped] == [("teamB.stock", "no topic named 'teamB.stock' is linked")]


def test_kafka_cluster_groups_and_ids_keep_physical_names_if_assigned():
    plan = migrate.from_kafka_cluster(
        [
            b(T.GROUP, "orders-app"),
            b(T.GROUP, "bill", P.PREFIXED),  # the assigned groups it matches, literally
            b(T.GROUP, "stranger"),
            b(T.TRANSACTIONAL_ID, "orders-tx", op=Op.WRITE),
            b(T.TRANSACTIONAL_ID, "else-tx", op=Op.WRITE),
            b(T.CLUSTER, "kafka-cluster", op=Op.IDEMPOTENT_WRITE),
            b(T.TOPIC, "*"),  # every topic: in the VC, the VC's
            b(T.DELEGATION_TOKEN, "tok", op=Op.DESCRIBE),
        ],
        JANE,
        TARGET,
    )
    assert {(t.resource_type, t.name, t.pattern) for _, t in plan.copies} == {
        (T.GROUP, "orders-app", P.LITERAL),
        (T.GROUP, "billing", P.LITERAL),
        (T.TRANSACTIONAL_ID, "orders-tx", P.LITERAL),
        (T.CLUSTER, "kafka-cluster", P.LITERAL),
        (T.TOPIC, "*", P.LITERAL),
    }
    assert {s.name for s, _ in plan.skipped} == {"stranger", "else-tx", "tok"}


def test_from_another_vc_the_users_bindings_are_copied_as_they_are():
    mine, theirs = b(T.TOPIC, "orders"), b(T.TOPIC, "orders", who="User:bob")
    plan = migrate.from_virtual_cluster([mine, theirs], JANE)
    assert plan.copies == [(mine, mine)] and plan.targets == [mine]


def test_only_sources_whose_every_translation_is_in_the_target_are_removable():
    prefixed = b(T.TOPIC, "teamA.", P.PREFIXED)
    plan = migrate.from_kafka_cluster([b(T.TOPIC, "teamA.orders"), prefixed], JANE, TARGET)
    some = [t for s, t in plan.copies if s == prefixed][:1]
    assert plan.removable([b(T.TOPIC, "orders"), *some]) == [b(T.TOPIC, "teamA.orders")]
    assert set(plan.removable(plan.targets)) == {b(T.TOPIC, "teamA.orders"), prefixed}


def test_text_output_reads_like_kafka_acls():
    out = {
        "operation": "list",
        "errors": [],
        "acls": [{"virtual_cluster": "team-a", **read("User:carol").as_dict()}],
    }
    text = acl_cli._text(parse("--list"), out)
    assert text.splitlines() == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)` "
        "in virtual cluster team-a:",
        " \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)",
    ]
    refused = {"operation": "add", "results": [{**read("User:x").as_dict(), "error_code": 31, "error_message": "no"}]}
    assert acl_cli._text(parse("--add"), refused) == "Error 31: no"


class _FakeProxy:
    """A Connection answering from a TenancyImage through the plane, as the proxy would (as ADMIN)."""

    def __init__(self, img: TenancyImage):
        self.img = img
        self.sent: list[int] = []
        self.versions = {key: (0, 0) for key in m.KEYS}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def request(self, key: int, version: int, body):
        self.sent.append(key)
        response, records = handle(self.img, ADMIN, body)
        apply(self.img, records)
        return response


@pytest.mark.parametrize("validate_only", [False, True])
def test_migration_from_another_vc_copies_binds_and_removes(monkeypatch, capsys, validate_only):
    img = image()
    kims = [read("User:kim"), AclBinding(T.TOPIC, "ev", P.PREFIXED, "User:kim", "*", Op.WRITE, Perm.ALLOW)]
    apply(img, [acl_record("team-b", b, True) for b in [*kims, read("User:erin")]])
    fake = _FakeProxy(img)
    monkeypatch.setattr(acl_cli, "Connection", lambda *_a, **_k: fake)
    from vcproxy_tools.cli import build_parser

    argv = ["virtual-clusters", "alter", "--bootstrap-server", "x:1", "--virtual-cluster", "team-a", "--add"]
    argv += ["--user", "kim", "--copy-acls-from", "team-b", "--remove-old-acls-from", "team-b", "--output", "json"]
    args = build_parser().parse_args(argv + (["--validate-only"] if validate_only else []))
    assert args.func(args) == acl_cli.OK
    out = json.loads(capsys.readouterr().out)
    assert len(out["copied"]) == 2 and len(out["removed"]) == 2 and out["user_added"] is True
    if validate_only:  # read and reported; nothing changed
        assert (
            ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS not in fake.sent and ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS not in fake.sent
        )
        assert not len(img.vcs["team-a"].acls) and len(img.vcs["team-b"].acls) == 3
        assert "User:kim" not in img.principals
    else:
        assert set(img.vcs["team-a"].acls) == set(kims)
        assert set(img.vcs["team-b"].acls) == {read("User:erin")}
        assert img.principals["User:kim"] == "team-a"
