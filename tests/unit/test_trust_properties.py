"""The trust model as a property (hypothesis): random sequences of management, ACL and binding requests by
random callers, applied through the plane (proxy/management/plane.py `handle`) and `TenancyImage.apply`.

Invariant: nobody's reach grows except by the action of a caller that held, before the action, the right
that grants that growth; and no caller gives anyone (itself included) a right it did not hold.

Reach of a principal (with one fixed client id, the label every connection uses here):
* its placement (`Rights.placement`): a VC, `kafka-cluster`, or None (refused at login);
* the physical topics that reach gives: its VC's links, or everything in `kafka-cluster`;
* its rights: the (operation, VC) pairs `Rights.may` grants over a fixed set of VC names (existing or
  not, and `kafka-cluster`), plus managing `kafka-cluster`'s own ACLs (ALTER / DESCRIBE on its CLUSTER).

What grants which growth (held by the caller before the step):
* a placement into a VC, or a new link to a topic already in it: ALTER_VIRTUAL_CLUSTER on that VC;
* a link to a physical topic not in the VC, a place in `kafka-cluster`, placing a principal that holds
  rights of its own beyond the VC: ALTER_VIRTUAL_CLUSTER on `kafka-cluster`;
* a right: that right itself (and, for `kafka-cluster`'s ACLs, ALTER on its CLUSTER).
A principal placed by the client-id label whose binding this step did not change entered through a door
the VC's admin opened earlier (a client-id binding places whoever carries no stronger identity); that is
allowed, and is checked when the door is opened.
Also: a super-admin is always in `kafka-cluster`; User:ANONYMOUS is never there and never holds a right;
a principal made an admin through AlterVirtualClusters is never left unbound-but-privileged (no place).

Users at runtime (AlterUserScramCredentials, proxy/management/users.py): whoever sets another's credential
can log in as it, so taking over a login is a growth too: the caller must already hold every right of
the user's and the right to alter the place the user is in (ALTER_VIRTUAL_CLUSTER on its VC, or, for a
member of kafka-cluster, ALTER on kafka-cluster's CLUSTER, Kafka's right for this API); a super-admin's
login is a super-admin's alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertion,
)
from kio.static.primitive import i8, i32

from proxy.acl.model import (
    VC_OPERATIONS,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    acl_record,
)
from proxy.auth.users import credential_from_salted, scram_record
from proxy.management import users
from proxy.management.plane import Caller, handle
from proxy.protocol import management as m
from proxy.tenancy.model import KAFKA_CLUSTER, TenancyImage, admin_record, link_record, principal_record, vc_record
from proxy.tenancy.rights import ANONYMOUS, Rights, admin_bindings
from vcproxy_tools import acls as acl_cli

VC_OPS = VC_OPERATIONS

Op, T, P, Perm = Operation, ResourceType, PatternType, Permission
LITERAL, PREFIXED = m.VirtualClusterPatternType.LITERAL, m.VirtualClusterPatternType.PREFIXED
ADD, REMOVE = m.ResourceOperation.ADD, m.ResourceOperation.REMOVE

SUPER = "User:admin"
SUPERS = frozenset({SUPER})
CLIENT_ID = "cid"  # every principal's connection uses this label
NOBODY = "User:nobody-at-all"  # never named anywhere: what everyone holds through User:* bindings

# The roles (callers) and the principals whose reach is watched.
ROLES = {
    "super-admin": SUPER,
    "vc-admin": "User:dave",  # team-a's admin (admin ACLs), in team-a
    "partial-admin": "User:pat",  # only ALTER_VIRTUAL_CLUSTER on team-a, in team-a
    "member": "User:alice",  # in team-a, no rights
    "other-admin": "User:bob",  # team-b's admin (an admin of older state), in team-b
    "kafka-cluster-member": "User:kc",  # in kafka-cluster, no rights
    "acl-admin": "User:aclop",  # in kafka-cluster, ALTER on CLUSTER kafka-cluster
    "operator": "User:oper",  # in kafka-cluster, ALTER_VIRTUAL_CLUSTER on kafka-cluster
    "unknown": "User:zed",  # in no VC
    "anonymous": ANONYMOUS,
}
PRINCIPALS = sorted({*ROLES.values(), "User:carol", "User:erin"})
GRANTEES = [*PRINCIPALS, "User:*"]
VC_NAMES = ["team-a", "team-b", "team-c", "kafkaesque", KAFKA_CLUSTER]  # rights are judged over these
CREATABLE = ["team-a", "team-b", "team-c", "kafkaesque", KAFKA_CLUSTER]
PREFIXES = ["team", "team-a", "kafka", "k", "kafka-cluster"]
PHYSICAL = ["phys.orders", "phys.events", "phys.free"]
LINKS = ["orders", "events", "alias", "free"]
CLIENTS = [CLIENT_ID, "batch"]
ACL_OPS = [*sorted(VC_OPS), Op.ALL, Op.ALTER, Op.DESCRIBE]
ACL_ALTER, ACL_DESCRIBE = "ACL:ALTER", "ACL:DESCRIBE"  # managing kafka-cluster's own ACLs, as "rights"


def initial() -> TenancyImage:
    img = TenancyImage()
    records = [
        vc_record("team-a"),
        vc_record("team-b"),
        principal_record("User:alice", "team-a"),
        principal_record("User:dave", "team-a"),
        principal_record("User:pat", "team-a"),
        principal_record("User:bob", "team-b"),
        admin_record("team-b", "User:bob", True),
        principal_record("User:kc", KAFKA_CLUSTER),
        principal_record("User:aclop", KAFKA_CLUSTER),
        principal_record("User:oper", KAFKA_CLUSTER),
        link_record("team-a", "orders", "phys.orders"),
        link_record("team-b", "events", "phys.events"),
        *(acl_record(KAFKA_CLUSTER, b, True) for b in admin_bindings("team-a", "User:dave")),
        acl_record(KAFKA_CLUSTER, cluster("team-a", "User:pat", Op.ALTER_VIRTUAL_CLUSTER), True),
        acl_record(KAFKA_CLUSTER, cluster(KAFKA_CLUSTER, "User:aclop", Op.ALTER), True),
        acl_record(KAFKA_CLUSTER, cluster(KAFKA_CLUSTER, "User:oper", Op.ALTER_VIRTUAL_CLUSTER), True),
    ]
    for record in records:
        img.apply(*record)
    for p in PRINCIPALS:  # everyone has a login of the proxy's
        img.apply(*scram_record(p.split(":", 1)[1], "SCRAM-SHA-512", CREDENTIAL))
    return img


CREDENTIAL = credential_from_salted("SCRAM-SHA-512", b"0123456789abcdef", 4096, b"k" * 64)


def scram_step(img: TenancyImage, caller: str, principals: list[str]) -> tuple[list, set[str]]:
    """AlterUserScramCredentials as the users stage scopes it (proxy/core/stages/users.py): the records, and
    the principals whose login the caller now holds."""
    rights = Rights(img, SUPERS)
    place = rights.placement(caller, CLIENT_ID)
    if place == KAFKA_CLUSTER:
        if caller not in SUPERS and not Caller(caller, SUPERS, image=img).acl_admin(Op.ALTER):
            return [], set()  # the authorization stage: kafka-cluster's ACLs, as a broker requires
        vc = None
    elif place is not None and rights.vc_admin(caller, place):
        vc = place
    else:
        return [], set()  # a member who may not: the tenancy stage refuses it
    names = [p.split(":", 1)[1] for p in principals]
    upserts = tuple(
        ScramCredentialUpsertion(
            name=n, mechanism=i8(2), iterations=i32(4096), salt=b"0123456789abcdef", salted_password=b"t" * 64
        )
        for n in names
    )
    request = AlterUserScramCredentialsRequest(deletions=(), upsertions=upserts)
    response, records = users.alter(img, users.Scope(Caller(caller, SUPERS), vc, "vcproxy"), request)
    return records, {f"User:{r.user}" for r in response.results if int(r.error_code) == 0}


def takeovers(caller: str, taken: set[str], before: dict[str, Reach], after: dict[str, Reach]) -> list[str]:
    """Logins taken over that widen the caller's reach."""
    if caller in SUPERS:
        return []
    held = before[caller].rights
    found = []
    for p in sorted(taken - {caller}):
        if p in SUPERS:
            found.append(f"{caller} set super-admin {p}'s credentials")
        extra = (personal(before, p) | personal(after, p)) - held
        if extra:
            found.append(f"{caller} took over {p}'s login, holding {sorted(map(str, extra))} it does not")
        place = after[p].place
        cluster_wide = before[caller].place == KAFKA_CLUSTER and (ACL_ALTER, KAFKA_CLUSTER) in held
        if place is not None and not cluster_wide and (Op.ALTER_VIRTUAL_CLUSTER, place) not in held:
            found.append(f"{caller} took over {p}'s login in {place} without ALTER_VIRTUAL_CLUSTER on it")
    return found


def cluster(name: str, principal: str, op: Operation, pattern=P.LITERAL, perm=Perm.ALLOW) -> AclBinding:
    return AclBinding(T.CLUSTER, name, pattern, principal, "*", op, perm)


# -- reach ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reach:
    place: str | None
    by_label: bool  # placed by the client-id binding, not by name
    topics: frozenset[str] | None  # None: everything (kafka-cluster)
    rights: frozenset[tuple[object, str]]


def rights_of(img: TenancyImage, principal: str) -> frozenset[tuple[object, str]]:
    rights = Rights(img, SUPERS)
    held = {(op, vc) for op in VC_OPS for vc in VC_NAMES if rights.may(principal, op, vc)}
    caller = Caller(principal, SUPERS, image=img)
    if caller.acl_admin(Op.ALTER):
        held.add((ACL_ALTER, KAFKA_CLUSTER))
    if caller.acl_admin(Op.DESCRIBE):
        held.add((ACL_DESCRIBE, KAFKA_CLUSTER))
    return frozenset(held)


def reach_of(img: TenancyImage, principal: str) -> Reach:
    place = Rights(img, SUPERS).placement(principal, CLIENT_ID)
    by_label = place is not None and principal not in SUPERS and principal not in img.principals
    if place is None:
        topics: frozenset[str] | None = frozenset()
    elif place == KAFKA_CLUSTER:
        topics = None
    else:
        topics = frozenset(img.vcs[place].links.values())
    return Reach(place, by_label, topics, rights_of(img, principal))


def snapshot(img: TenancyImage) -> dict[str, Reach]:
    return {p: reach_of(img, p) for p in [*PRINCIPALS, NOBODY]}


def personal(snap: dict[str, Reach], principal: str) -> frozenset[tuple[object, str]]:
    """The rights a principal holds of its own (not through User:* bindings, which everyone holds)."""
    return snap[principal].rights - snap[NOBODY].rights


# -- requests ------------------------------------------------------------------------------------------


def alter(vc: str, items) -> m.AlterVirtualClustersRequest:
    resources = tuple(
        m.VirtualClusterResourceChange(
            resource_type=i8(t),
            resource_operation=i8(o),
            resource_name=link or n,  # a topic link: its name, then the physical topic
            physical_topic_name=n if t == m.ResourceType.TOPIC else None,
        )
        for t, n, o, link in items
    )
    return m.AlterVirtualClustersRequest(virtual_clusters=(m.AlterableVirtualCluster(name=vc, resources=resources),))


def vc_fields(vc: str, pattern) -> dict:
    return {"virtual_cluster": vc, "virtual_cluster_pattern_type": i8(pattern)}


# Steps are drawn abstractly and built once the caller is known: SELF is the caller, OWN its own VC (where
# it is placed), so that requests by each role often aim at what it could plausibly reach.
SELF, OWN = "SELF", "OWN"
principal = st.sampled_from([*PRINCIPALS, SELF])
grantee = st.one_of(st.just(SELF), st.sampled_from(GRANTEES))
vc_name = st.sampled_from([OWN, OWN, OWN, *VC_NAMES])

alter_item = st.one_of(
    st.tuples(st.sampled_from([m.ResourceType.USER, m.ResourceType.ADMIN]), principal),
    st.tuples(st.just(m.ResourceType.CLIENT), st.sampled_from(CLIENTS)),
    st.tuples(st.just(m.ResourceType.TOPIC), st.sampled_from(PHYSICAL), st.sampled_from(LINKS)),
    st.tuples(st.just(m.ResourceType.GROUP), st.sampled_from(["legacy-group", "g2"])),
).flatmap(lambda t: st.sampled_from([ADD, REMOVE]).map(lambda op, t=t: (t[0], t[1], op, t[2] if len(t) > 2 else None)))

cluster_binding = st.tuples(
    st.one_of(vc_name, st.sampled_from(PREFIXES)),  # the CLUSTER resource's name
    st.booleans(),  # prefixed
    grantee,
    st.sampled_from(ACL_OPS),
    st.integers(0, 4).map(lambda n: n == 0),  # DENY, now and then
)
acl_filter = st.tuples(
    st.one_of(st.none(), vc_name, st.sampled_from(PREFIXES)),
    st.sampled_from([*GRANTEES, SELF, None]),
    st.one_of(st.just(Op.ANY), st.sampled_from(ACL_OPS)),
    st.sampled_from([Perm.ANY, Perm.ANY, Perm.ALLOW, Perm.DENY]),
)
acl_target = st.one_of(
    st.just((KAFKA_CLUSTER, LITERAL)),
    st.tuples(vc_name, st.just(LITERAL)),
    st.tuples(st.sampled_from(PREFIXES), st.just(PREFIXED)),
)
request = st.one_of(
    st.tuples(st.just("create"), st.lists(st.sampled_from(CREATABLE), min_size=1, max_size=2)),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(CREATABLE), min_size=1, max_size=2)),
    st.tuples(st.just("alter"), vc_name, st.lists(alter_item, min_size=1, max_size=3)),
    st.tuples(st.just("alter"), vc_name, st.lists(alter_item, min_size=1, max_size=3)),
    st.tuples(st.just("grant"), st.just((KAFKA_CLUSTER, LITERAL)), st.lists(cluster_binding, min_size=1, max_size=2)),
    st.tuples(st.just("grant"), st.just((KAFKA_CLUSTER, LITERAL)), st.lists(cluster_binding, min_size=1, max_size=2)),
    st.tuples(st.just("grant"), acl_target, st.lists(cluster_binding, min_size=1, max_size=2)),
    st.tuples(st.just("grant-topic"), acl_target, st.lists(grantee, min_size=1, max_size=2)),
    st.tuples(st.just("revoke"), acl_target, st.lists(acl_filter, min_size=1, max_size=2)),
    st.tuples(st.just("revoke-existing"), st.integers(0, 99)),  # one of kafka-cluster's bindings, exactly
    st.tuples(st.just("revoke-existing"), st.integers(0, 99)),
    st.tuples(st.just("scram"), st.lists(principal, min_size=1, max_size=3)),
    st.tuples(st.just("scram"), st.lists(principal, min_size=1, max_size=3)),
)
# Privileged roles more often: their requests are the ones that change anything.
role = st.one_of(
    st.sampled_from(
        ["super-admin", "vc-admin", "partial-admin", "other-admin", "acl-admin", "operator", "super-admin"]
    ),
    st.sampled_from(sorted(ROLES)),
)


def own_vc(img: TenancyImage, caller: str) -> str:
    place = Rights(img, SUPERS).placement(caller, CLIENT_ID)
    return place if place in img.vcs else "team-a"


def build(img: TenancyImage, caller: str, abstract):
    """The request an abstract step stands for, SELF and OWN resolved for this caller on this image."""
    own = own_vc(img, caller)

    def who(x):
        return caller if x == SELF else x

    def where(x):
        return own if x == OWN else x

    kind, *args = abstract
    if kind == "create":
        return m.CreateVirtualClustersRequest(
            virtual_clusters=tuple(m.CreatableVirtualCluster(name=n) for n in args[0])
        )
    if kind == "delete":
        return m.DeleteVirtualClustersRequest(
            virtual_clusters=tuple(m.DeletableVirtualCluster(name=n) for n in args[0])
        )
    if kind == "alter":
        vc, items = args
        return alter(where(vc), [(t, who(n), o, link) for t, n, o, link in items])
    if kind == "revoke-existing":
        existing = sorted(img.cluster_acls.matching(AclFilter()), key=lambda b: b.key_parts())
        if not existing:
            return m.ListVirtualClustersRequest()
        b = existing[args[0] % len(existing)]
        exact = AclFilter(b.resource_type, b.name, b.pattern, b.principal, b.host, b.operation, b.permission)
        return acl_cli.delete_request([exact], vc_fields(KAFKA_CLUSTER, LITERAL))
    (vc, pattern), things = args
    fields = vc_fields(where(vc), pattern)
    if kind == "grant":
        bindings = [
            AclBinding(
                T.CLUSTER,
                where(name),
                P.PREFIXED if prefixed else P.LITERAL,
                who(p),
                "*",
                op,
                Perm.DENY if deny else Perm.ALLOW,
            )
            for name, prefixed, p, op, deny in things
        ]
        return acl_cli.create_request(bindings, fields)
    if kind == "grant-topic":
        bindings = [AclBinding(T.TOPIC, "orders", P.LITERAL, who(p), "*", Op.READ, Perm.ALLOW) for p in things]
        return acl_cli.create_request(bindings, fields)
    filters = [
        AclFilter(
            T.CLUSTER, None if name is None else where(name), P.ANY, None if p is None else who(p), None, op, perm
        )
        for name, p, op, perm in things
    ]
    return acl_cli.delete_request(filters, fields)


step = st.tuples(role, request)


# -- the invariant -------------------------------------------------------------------------------------


def violations(caller: str, req, label_was: str | None, before: dict[str, Reach], after: dict[str, Reach]) -> list[str]:
    held = before[caller].rights
    operator = (Op.ALTER_VIRTUAL_CLUSTER, KAFKA_CLUSTER) in held

    def may_alter(vc: str) -> bool:
        return (Op.ALTER_VIRTUAL_CLUSTER, vc) in held

    found = []
    for p in PRINCIPALS:
        old, new = before[p], after[p]
        if p in SUPERS and new.place != KAFKA_CLUSTER:
            found.append(f"super-admin {p} moved to {new.place}")
        if p == ANONYMOUS and (new.place == KAFKA_CLUSTER or new.rights):
            found.append(f"{p} is in {new.place} with rights {sorted(map(str, new.rights))}")
        # Placement.
        if new.place is not None and new.place != old.place:
            door = new.by_label and label_was == new.place
            if door:
                if personal(after, p):
                    found.append(f"{p} placed by a client id in {new.place} while holding rights of its own")
            elif not may_alter(new.place):
                found.append(f"{caller} placed {p} in {new.place} without ALTER_VIRTUAL_CLUSTER on it")
            else:
                beyond = {(op, vc) for op, vc in personal(before, p) | personal(after, p) if vc != new.place}
                if beyond and not operator:
                    found.append(
                        f"{caller} (no operator) placed {p}, holding {sorted(map(str, beyond))}, in {new.place}"
                    )
        # Topics, staying in the same VC.
        elif new.place is not None and new.place != KAFKA_CLUSTER and new.place == old.place:
            assert old.topics is not None and new.topics is not None
            for topic in new.topics - old.topics:  # an alias of a topic already in the VC adds none
                if not operator:
                    found.append(f"{caller} linked foreign topic {topic} into {new.place} without being an operator")
        # Rights.
        for right in new.rights - old.rights:
            if right not in held:
                found.append(f"{caller} gave {p} {right} without holding it")
        if (
            isinstance(req, m.AlterVirtualClustersRequest)
            and new.rights - old.rights
            and new.place is None
            and p != ANONYMOUS
        ):
            found.append(f"{p} was given rights {sorted(map(str, new.rights - old.rights))} but is in no VC")
    return found


def run(steps) -> None:
    img = initial()
    before = snapshot(img)
    for role, abstract in steps:
        caller = ROLES[role]
        label_was = img.client_ids.get(CLIENT_ID)
        taken: set[str] = set()
        if abstract[0] == "scram":
            req = None
            records, taken = scram_step(img, caller, [who if who != SELF else caller for who in abstract[1]])
        else:
            req = build(img, caller, abstract)
            _, records = handle(img, Caller(caller, SUPERS), req)
        for key, value in records:
            img.apply(key, value)
        after = snapshot(img)
        problems = violations(caller, req, label_was, before, after) + takeovers(caller, taken, before, after)
        assert not problems, (role, req, problems)
        before = after


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(step, min_size=2, max_size=12))
def test_no_reach_grows_without_the_right_to_grant_it(steps):
    run(steps)


# -- regressions: holes this property found in the plane ----------------------------------------------

L_KC = (KAFKA_CLUSTER, LITERAL)


def _do(img: TenancyImage, role: str, abstract) -> tuple[object, list]:
    caller = ROLES.get(role, role)
    response, records = handle(img, Caller(caller, SUPERS), build(img, caller, abstract))
    for key, value in records:
        img.apply(key, value)
    return response, records


def test_an_acl_admin_cannot_grant_itself_rights_over_vcs():
    """ALTER on CLUSTER kafka-cluster manages kafka-cluster's ACLs; it used to let its holder grant itself
    (or anyone) CREATE/ALTER_VIRTUAL_CLUSTER on every VC, i.e. widen its own reach."""
    img = initial()
    for op, name, prefixed in (
        (Op.CREATE_VIRTUAL_CLUSTER, KAFKA_CLUSTER, False),
        (Op.ALTER_VIRTUAL_CLUSTER, "team-a", False),
        (Op.ALL, "team-b", False),
        (Op.DESCRIBE_VIRTUAL_CLUSTER, "team", True),
    ):
        response, records = _do(img, "acl-admin", ("grant", L_KC, [(name, prefixed, SELF, op, False)]))
        assert [int(r.error_code) for r in response.results] == [31] and records == []
    # What it holds, it may grant: managing the ACLs (ALTER, and DESCRIBE, which ALTER implies as in Kafka).
    response, records = _do(img, "acl-admin", ("grant", L_KC, [(KAFKA_CLUSTER, False, "User:kc", Op.DESCRIBE, False)]))
    assert int(response.results[0].error_code) == 0 and records
    # Holding the right is not enough either: granting it is managing kafka-cluster's ACLs (ALTER on it).
    response, _ = _do(img, "operator", ("grant", L_KC, [("team-b", False, "User:kc", Op.ALTER_VIRTUAL_CLUSTER, False)]))
    assert int(response.results[0].error_code) == 31
    run([("acl-admin", ("grant", L_KC, [(OWN, False, SELF, Op.CREATE_VIRTUAL_CLUSTER, False)]))])


def test_lifting_a_deny_needs_the_right_it_denied():
    img = initial()
    _do(img, "super-admin", ("grant", L_KC, [("team-a", False, "User:pat", Op.ALTER_VIRTUAL_CLUSTER, True)]))
    assert not Rights(img, SUPERS).may("User:pat", Op.ALTER_VIRTUAL_CLUSTER, "team-a")
    lift = ("revoke", L_KC, [("team-a", "User:pat", Op.ALTER_VIRTUAL_CLUSTER, Perm.DENY)])
    response, records = _do(img, "acl-admin", lift)
    assert int(response.filter_results[0].error_code) == 31 and records == []
    response, records = _do(img, "vc-admin", lift)  # dave holds ALTER_VIRTUAL_CLUSTER on team-a
    assert int(response.filter_results[0].error_code) == 31  # but does not manage kafka-cluster's ACLs
    response, records = _do(img, "super-admin", lift)
    assert int(response.filter_results[0].error_code) == 0 and records
    assert Rights(img, SUPERS).may("User:pat", Op.ALTER_VIRTUAL_CLUSTER, "team-a")


def test_deleting_a_vc_keeps_the_denys_on_its_name():
    """A DENY on a VC's name used to go with the VC, so whoever may delete it gave a later VC of the same
    name to a holder of a prefixed grant the DENY had excluded."""
    img = initial()
    _do(img, "super-admin", ("create", ["team-c"]))
    _do(
        img,
        "super-admin",
        (
            "grant",
            L_KC,
            [
                ("team", True, "User:erin", Op.ALTER_VIRTUAL_CLUSTER, False),
                ("team-c", False, "User:erin", Op.ALTER_VIRTUAL_CLUSTER, True),
                ("team-c", False, "User:carol", Op.DELETE_VIRTUAL_CLUSTER, False),
            ],
        ),
    )
    _do(img, "super-admin", ("alter", "team-b", [(m.ResourceType.USER, "User:carol", ADD, None)]))
    response, _ = _do(img, "User:carol", ("delete", ["team-c"]))
    assert int(response.responses[0].error_code) == 0 and "team-c" not in img.vcs
    assert not Rights(img, SUPERS).may("User:carol", Op.DELETE_VIRTUAL_CLUSTER, "team-c")  # its ALLOWs went
    _do(img, "super-admin", ("create", ["team-c"]))
    assert not Rights(img, SUPERS).may("User:erin", Op.ALTER_VIRTUAL_CLUSTER, "team-c")  # still denied


def test_a_new_admin_bound_nowhere_is_placed_in_the_vc():
    """An admin added through AlterVirtualClusters while bound nowhere used to hold rights but no place
    (refused at login); it is now bound to the VC, under the same rules as adding it as a user."""
    img = initial()
    response, _ = _do(img, "vc-admin", ("alter", OWN, [(m.ResourceType.ADMIN, "User:erin", ADD, None)]))
    assert int(response.virtual_clusters[0].resources[0].error_code) == 0
    assert Rights(img, SUPERS).placement("User:erin", None) == "team-a"
    # One holding rights beyond the VC is not captured by a VC admin (only an operator may place it).
    _do(img, "super-admin", ("grant", L_KC, [("team-b", False, "User:carol", Op.DESCRIBE_VIRTUAL_CLUSTER, False)]))
    response, records = _do(img, "vc-admin", ("alter", OWN, [(m.ResourceType.ADMIN, "User:carol", ADD, None)]))
    assert int(response.virtual_clusters[0].resources[0].error_code) == 31 and records == []
    response, _ = _do(img, "operator", ("alter", "team-a", [(m.ResourceType.ADMIN, "User:carol", ADD, None)]))
    assert int(response.virtual_clusters[0].resources[0].error_code) == 0
    assert Rights(img, SUPERS).placement("User:carol", None) == "team-a"
