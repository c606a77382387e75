"""The management plane (proxy/management/plane.py) and its stages, sans-I/O: who may do what, the
per-item answers, and the records a change writes."""

from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession
from proxy.management.plane import Caller, advertised, handle
from proxy.protocol import codec
from proxy.protocol import management as m
from proxy.protocol.apikey import ApiKey
from proxy.protocol.apis import request_type
from proxy.protocol.headers import response_body_offset
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import TenancyImage, admin_record, link_record, principal_record, vc_record

from .wire import request_frame

ADMIN = Caller("User:admin", frozenset({"User:admin"}))
DAVE = Caller("User:dave", frozenset({"User:admin"}))  # team-a's VC admin
ALICE = Caller("User:alice", frozenset({"User:admin"}))  # a tenant of team-a


def image() -> TenancyImage:
    img = TenancyImage()
    for record in (
        vc_record("team-a"),
        vc_record("team-b"),
        principal_record("User:alice", "team-a"),
        principal_record("User:bob", "team-b"),
        principal_record("User:dave", "team-a"),  # everyone is somewhere: dave administers the VC he is in
        admin_record("team-a", "User:dave", True),
        link_record("team-a", "orders", "phys.orders"),
        link_record("team-b", "events", "phys.events"),
    ):
        img.apply(*record)
    return img


def apply(img: TenancyImage, records) -> TenancyImage:
    for key, value in records:
        img.apply(key, value)
    return img


def alter(vc: str, *resources: tuple[m.ResourceType, str, m.ResourceOperation, str | None], validate_only=False):
    items = tuple(
        m.VirtualClusterResourceChange(
            resource_type=i8(t),
            resource_operation=i8(o),
            resource_name=link or n,  # a topic link: its name, then the physical topic
            physical_topic_name=n if t == m.ResourceType.TOPIC else None,
        )
        for t, n, o, link in resources
    )
    return m.AlterVirtualClustersRequest(
        virtual_clusters=(m.AlterableVirtualCluster(name=vc, resources=items),), validate_only=validate_only
    )


ADD, REMOVE = m.ResourceOperation.ADD, m.ResourceOperation.REMOVE
T = m.ResourceType


def codes(response) -> list[int]:
    return [int(r.error_code) for vc in response.virtual_clusters for r in vc.resources]


def test_create_and_delete_by_super_admin_only_and_only_when_empty():
    img = image()
    response, records = handle(
        img, ADMIN, m.CreateVirtualClustersRequest(virtual_clusters=(m.CreatableVirtualCluster(name="team-c"),))
    )
    assert int(response.virtual_clusters[0].error_code) == 0 and len(records) == 1
    apply(img, records)
    again, none = handle(
        img,
        ADMIN,
        m.CreateVirtualClustersRequest(
            virtual_clusters=(m.CreatableVirtualCluster(name="team-c"), m.CreatableVirtualCluster(name="kafka-cluster"))
        ),
    )
    assert [int(r.error_code) for r in again.virtual_clusters] == [92, 42] and none == []
    refused, _ = handle(
        img, DAVE, m.CreateVirtualClustersRequest(virtual_clusters=(m.CreatableVirtualCluster(name="x"),))
    )
    assert int(refused.virtual_clusters[0].error_code) == 31
    deleted, records = handle(
        img,
        ADMIN,
        m.DeleteVirtualClustersRequest(
            virtual_clusters=tuple(m.DeletableVirtualCluster(name=n) for n in ("team-a", "team-c", "nope"))
        ),
    )
    assert [int(r.error_code) for r in deleted.responses] == [44, 0, 91]
    assert "2 users" in deleted.responses[0].error_message and "1 topic link" in deleted.responses[0].error_message
    apply(img, records)
    assert "team-c" not in img.vcs and "team-a" in img.vcs


def test_validate_only_answers_the_same_and_writes_nothing():
    request = alter("team-a", (T.USER, "carol", ADD, None))
    checked, records = handle(image(), ADMIN, dataclasses.replace(request, validate_only=True))
    done, written = handle(image(), ADMIN, request)
    assert codes(checked) == codes(done) == [0] and records == [] and len(written) == 1


def test_alter_items_apply_in_order_with_their_own_answers():
    img = image()
    request = alter(
        "team-a",
        (T.USER, "carol", ADD, None),
        (T.USER, "User:carol", ADD, None),  # already added by the item before
        (T.USER, "bob", ADD, None),  # bound to team-b
        (T.TOPIC, "phys.orders", REMOVE, "orders"),
        (T.TOPIC, "phys.orders", ADD, "orders"),  # re-added after the removal above
        (T.CLIENT, "batch", ADD, None),
        (T.GROUP, "legacy-group", ADD, None),
        (T.TRANSACTIONAL_ID, "legacy-tx", ADD, None),
        (T.ADMIN, "User:admin", ADD, None),  # a super-admin holds every right already
        (T.USER, "admin", ADD, None),  # a super-admin is never bound
    )
    response, records = handle(img, ADMIN, request)
    assert codes(response) == [0, 92, 92, 0, 0, 0, 0, 0, 42, 42]
    assert "team-b" in response.virtual_clusters[0].resources[2].error_message  # a super-admin is told where
    apply(img, records)
    vc = img.vcs["team-a"]
    assert img.principals["User:carol"] == "team-a" and img.client_ids["batch"] == "team-a"
    assert vc.links == {"orders": "phys.orders"} and vc.groups == {"legacy-group"} and vc.txns == {"legacy-tx"}
    assert vc.physical_group("legacy-group") == "legacy-group" and vc.physical_group("new") == vc.prefix + "new"
    # One owner per group: team-b cannot have it, nor team-a's own prefixed ids.
    taken, _ = handle(
        img, ADMIN, alter("team-b", (T.GROUP, "legacy-group", ADD, None), (T.GROUP, vc.prefix + "x", ADD, None))
    )
    assert codes(taken) == [92, 92]


def test_a_vc_admin_stays_inside_its_vc():
    img = image()
    response, records = handle(
        img,
        DAVE,
        alter(
            "team-a",
            (T.USER, "carol", ADD, None),  # allowed
            (T.TOPIC, "phys.orders", ADD, "orders-alias"),  # an alias of a topic already in team-a: allowed
            (T.TOPIC, "phys.events", ADD, "events"),  # team-b's topic: no
            (T.GROUP, "someone-elses", ADD, None),  # an existing group: no
            (T.USER, "bob", ADD, None),  # bound elsewhere: refused without saying where
            (T.ADMIN, "User:erin", ADD, None),  # allowed
        ),
    )
    assert codes(response) == [0, 0, 31, 31, 92, 0]
    assert "team-b" not in response.virtual_clusters[0].resources[4].error_message
    other, nothing = handle(img, DAVE, alter("team-b", (T.USER, "carol", ADD, None)))
    assert codes(other) == [31] and nothing == []
    missing, _ = handle(img, DAVE, alter("no-such-vc", (T.USER, "carol", ADD, None)))
    assert codes(missing) == [31]  # never says whether it exists
    apply(img, records)
    assert img.vcs["team-a"].links == {"orders": "phys.orders", "orders-alias": "phys.orders"}


def test_list_describe_and_what_is_advertised():
    img = image()
    assert advertised(img, ADMIN) == set(m.KEYS)
    assert advertised(img, DAVE) == set(m.KEYS)  # holds a right: each item is then checked against it
    assert advertised(img, ALICE) == set()
    listed, _ = handle(img, DAVE, m.ListVirtualClustersRequest())
    assert [v.name for v in listed.virtual_clusters] == ["team-a"]
    refused, _ = handle(img, ALICE, m.ListVirtualClustersRequest())
    assert int(refused.error_code) == 31
    names = (m.DescribableVirtualCluster(name="team-a"), m.DescribableVirtualCluster(name="team-b"))
    described, _ = handle(img, DAVE, m.DescribeVirtualClustersRequest(virtual_clusters=names))
    a, b = described.virtual_clusters
    assert int(a.error_code) == 0 and a.users == ("User:alice", "User:dave") and a.admins == ("User:dave",)
    assert a.topic_links == (m.VirtualClusterTopicLink(link_name="orders", physical_name="phys.orders"),)
    assert a.cluster_id == img.vcs["team-a"].cluster_id
    assert int(b.error_code) == 31


# -- through the session: advertised in ApiVersions to those who may, refused to the others ------------


@dataclasses.dataclass
class _Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


def _session(principal: str, img: TenancyImage) -> ProxySession:
    return ProxySession(
        ListenerLayout("127.0.0.1", 9192, 9193), tenancy=_Tenancy(img), principal=principal, super_admins=["User:admin"]
    )


def _local_body(session: ProxySession, api_key: int):
    reply = session.next_local_reply()
    assert reply is not None and reply.reply is not None
    body, _ = codec.decode(m.RESPONSES[api_key], reply.reply, response_body_offset(reply.reply, 1))
    return body, reply


@pytest.mark.parametrize(
    ("principal", "code"), [("User:admin", 0), ("User:dave", 0), ("User:alice", 31), ("User:eve", None)]
)
def test_session_answers_management_requests_itself(principal: str, code: int | None):
    img = image()
    session = _session(principal, img)
    frame = request_frame(ApiKey.LIST_VIRTUAL_CLUSTERS, 0, 3, m.ListVirtualClustersRequest())
    decision = session.on_request(memoryview(bytearray(frame)))
    if code is None:  # in no VC: refused before anything is answered
        assert decision.action is Action.CLOSE and "in no virtual cluster" in decision.reason
        return
    assert decision.action is Action.LOCAL
    body, _ = _local_body(session, ApiKey.LIST_VIRTUAL_CLUSTERS)
    assert int(body.error_code) == code


def test_session_hands_the_records_of_a_change_to_the_shell():
    img = image()
    session = _session("User:admin", img)
    request = m.CreateVirtualClustersRequest(virtual_clusters=(m.CreatableVirtualCluster(name="team-c"),))
    decision = session.on_request(memoryview(bytearray(request_frame(ApiKey.CREATE_VIRTUAL_CLUSTERS, 0, 4, request))))
    assert decision.action is Action.LOCAL
    body, reply = _local_body(session, ApiKey.CREATE_VIRTUAL_CLUSTERS)
    assert int(body.virtual_clusters[0].error_code) == 0 and len(reply.writes) == 1


def test_binding_change_closes_the_connection_at_its_next_request():
    img = image()
    session = _session("User:alice", img)
    metadata = request_frame(3, 12, 1, codec._empty(request_type(3, 12)))
    assert session.on_request(memoryview(bytearray(metadata))).action is Action.FORWARD
    session.in_flight.clear()
    assert session.stale_binding() is None
    img.apply(*principal_record("User:alice", None))
    assert "no longer in team-a" in (session.stale_binding() or "")
    assert session.on_request(memoryview(bytearray(metadata))).action is Action.CLOSE


def test_a_deleted_vc_takes_its_acls_and_quotas_along():
    from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
    from proxy.tenancy.model import quota_record

    img = TenancyImage()
    img.apply(*vc_record("team-c"))
    binding = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:x", "*", Operation.READ, Permission.ALLOW)
    img.apply(*acl_record("team-c", binding, True))
    img.apply(*quota_record((("user", "x"), ("virtual-cluster", "team-c")), "producer_byte_rate", 1024.0))
    img.apply(*quota_record((("virtual-cluster", "team-c"),), "consumer_byte_rate", 4096.0))
    img.apply(*quota_record((("user", "x"),), "producer_byte_rate", 512.0))  # global: not the VC's
    deleted, records = handle(
        img, ADMIN, m.DeleteVirtualClustersRequest(virtual_clusters=(m.DeletableVirtualCluster(name="team-c"),))
    )
    assert int(deleted.responses[0].error_code) == 0  # ACLs and quotas do not make a VC "not empty"
    apply(img, records)
    assert "team-c" not in img.vcs
    assert img.quotas.values == {(("user", "x"),): {"producer_byte_rate": 512.0}}
    img.apply(*vc_record("team-c"))  # a new VC of the same name starts with nothing
    assert not len(img.vcs["team-c"].acls)


# -- the trust model: rights are ACLs, and none widens its holder's reach --------------------------------


def _grant(img: TenancyImage, principal: str, op, vc: str) -> None:
    from proxy.acl.model import AclBinding, PatternType, Permission, ResourceType, acl_record

    b = AclBinding(ResourceType.CLUSTER, vc, PatternType.LITERAL, principal, "*", op, Permission.ALLOW)
    img.apply(*acl_record("kafka-cluster", b, True))


def test_a_partial_admin_adds_users_but_links_no_foreign_topic():
    from proxy.acl.model import Operation

    img = image()
    img.apply(*principal_record("User:pat", "team-a"))
    _grant(img, "User:pat", Operation.ALTER_VIRTUAL_CLUSTER, "team-a")
    pat = Caller("User:pat", frozenset({"User:admin"}))
    response, records = handle(
        img,
        pat,
        alter(
            "team-a",
            (T.USER, "carol", ADD, None),
            (T.TOPIC, "phys.events", ADD, "events"),  # team-b's physical topic: beyond team-a
            (T.TOPIC, "phys.orders", ADD, "orders-2"),  # already in team-a: an alias is fine
            (T.GROUP, "legacy", ADD, None),
        ),
    )
    assert codes(response) == [0, 31, 0, 31]
    assert len(records) == 2
    described, _ = handle(
        img, pat, m.DescribeVirtualClustersRequest(virtual_clusters=(m.DescribableVirtualCluster(name="team-a"),))
    )
    assert int(described.virtual_clusters[0].error_code) == 0  # ALTER implies DESCRIBE
    deleted, _ = handle(
        img, pat, m.DeleteVirtualClustersRequest(virtual_clusters=(m.DeletableVirtualCluster(name="team-a"),))
    )
    assert int(deleted.responses[0].error_code) == 31


def test_removing_a_link_by_its_name_alone_reaches_only_the_callers_vc():
    """inkless' layout names a link to remove by its name alone (PhysicalTopicName null): the name is looked up in
    the altered VC only, so team-a's admin cannot reach team-b's link of that name, nor alter team-b at all."""
    img = image()
    name_only = m.AlterVirtualClustersRequest(
        virtual_clusters=(
            m.AlterableVirtualCluster(
                name="team-a",
                resources=(
                    m.VirtualClusterResourceChange(
                        resource_type=i8(T.TOPIC),
                        resource_operation=i8(REMOVE),
                        resource_name="events",  # team-b's link, not team-a's
                        physical_topic_name=None,
                    ),
                ),
            ),
        )
    )
    response, records = handle(img, DAVE, name_only)
    assert codes(response) == [int(ErrorCode.resource_not_found)] and records == []
    other, records = handle(img, DAVE, alter("team-b", (T.TOPIC, "phys.events", REMOVE, "events")))
    assert all(code != 0 for code in codes(other)) and records == []
    assert img.vcs["team-b"].links["events"] == "phys.events"
    own = dataclasses.replace(
        name_only,
        virtual_clusters=(
            dataclasses.replace(
                name_only.virtual_clusters[0],
                resources=(dataclasses.replace(name_only.virtual_clusters[0].resources[0], resource_name="orders"),),
            ),
        ),
    )
    response, records = handle(img, DAVE, own)
    assert codes(response) == [0] and len(records) == 1  # its own link goes, by name


def test_no_right_captures_a_principal_or_leaves_a_vc_without_an_admin():
    img = image()
    img.apply(*principal_record("User:ops", "kafka-cluster"))
    for who, code in (
        ("admin", 42),  # a super-admin is never bound
        ("bob", 92),  # another VC's member
        ("ops", 92),  # in kafka-cluster
    ):
        response, records = handle(img, DAVE, alter("team-a", (T.USER, who, ADD, None)))
        assert codes(response) == [code] and records == [], who
    # Another VC's admin (a principal holding rights elsewhere) is not placed by a VC admin.
    img.apply(*principal_record("User:bob", None))
    img.apply(*admin_record("team-b", "User:bob", True))
    response, _ = handle(img, DAVE, alter("team-a", (T.USER, "bob", ADD, None)))
    assert codes(response) == [31]
    # dave cannot remove himself as team-a's last admin; the super-admin can.
    response, _ = handle(img, DAVE, alter("team-a", (T.ADMIN, "User:dave", REMOVE, None)))
    assert codes(response) == [44]
    response, _ = handle(img, ADMIN, alter("team-a", (T.ADMIN, "User:dave", REMOVE, None)))
    assert codes(response) == [0]
    # Nobody adds User:ANONYMOUS (or anyone, without the right on kafka-cluster) to kafka-cluster.
    response, _ = handle(img, ADMIN, alter("kafka-cluster", (T.USER, "User:ANONYMOUS", ADD, None)))
    assert codes(response) == [42]
    response, _ = handle(img, DAVE, alter("kafka-cluster", (T.USER, "User:eve", ADD, None)))
    assert codes(response) == [31]
    response, records = handle(
        img, ADMIN, alter("kafka-cluster", (T.USER, "User:eve", ADD, None), (T.CLIENT, "x", ADD, None))
    )
    assert codes(response) == [0, 42] and len(records) == 1  # client ids never place anyone in kafka-cluster


def test_an_api_versions_answer_built_once_goes_to_callers_of_its_kind_alone(monkeypatch):
    """A broker's ApiVersions answer is built once per kind of caller (proxy/core/stages/versions.py, `_BUILT`):
    a second connection of that kind gets the same bytes without a decode, and a caller without a management right
    never gets the answer built for one who has it, nor the reverse."""
    from proxy.core import apiversions
    from proxy.core.stages import versions
    from proxy.protocol.apis import response_type

    from .test_session import api_versions_response, joined, roundtrip
    from .wire import response_frame

    monkeypatch.setattr(versions, "_BUILT", {})
    decoded: list[int] = []
    decode = apiversions.decode_response
    monkeypatch.setattr(apiversions, "decode_response", lambda v, body: decoded.append(v) or decode(v, body))
    img = image()
    broker = response_frame(18, 3, 5, api_versions_response({0: (3, 13), 3: (0, 13), 18: (0, 4)}))
    request = request_frame(18, 3, 5, codec._empty(request_type(18, 3)))

    def keys(principal: str) -> set[int]:
        out = joined(roundtrip(_session(principal, img), request, broker).pieces)
        body, _ = codec.decode(response_type(18, 3), out, response_body_offset(out, 0))
        return {int(k.api_key) for k in body.api_keys}

    first = {who: keys(who) for who in ("User:admin", "User:alice")}
    assert len(decoded) == 2
    assert ApiKey.LIST_VIRTUAL_CLUSTERS in first["User:admin"]
    assert ApiKey.LIST_VIRTUAL_CLUSTERS not in first["User:alice"]
    assert {who: keys(who) for who in ("User:alice", "User:admin", "User:alice")} == first
    assert len(decoded) == 2  # built once per kind of caller
