"""DescribeVirtualClusters lists a VC's own groups and transactional ids (the brokers' listings, in the VC's
names); DeleteVirtualClusters refuses a VC that still has some unless forced, and a forced delete deletes
the groups first (sans-I/O: the plane with a listing, and the session with a fake broker)."""

from __future__ import annotations

import dataclasses

import trio

from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession
from proxy.management.inventory import Listing
from proxy.management.plane import groups_to_purge, handle
from proxy.protocol import codec
from proxy.protocol import management as m
from proxy.protocol.apikey import ApiKey
from proxy.protocol.headers import response_body_offset
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import group_record, link_record

from .test_management_plane import ADMIN, ALICE, DAVE, apply, image
from .wire import request_frame

POLICY_VIOLATION, CLUSTER_AUTHORIZATION_FAILED, COORDINATOR_NOT_AVAILABLE = 44, 31, 15


def emptied():
    """team-a and team-b with nothing in the state (links and users removed), as a delete needs."""
    img = image()
    img.vcs["team-a"].links.clear()
    img.vcs["team-a"].physical_links.clear()
    img.vcs["team-a"].admins.clear()
    img.vcs["team-b"].links.clear()
    img.vcs["team-b"].physical_links.clear()
    img.principals.clear()
    return img


def listing(img, **extra) -> Listing:
    a, b = img.vcs["team-a"].prefix, img.vcs["team-b"].prefix
    groups = {
        a + "billing": "Empty",
        a + "orders-app": "Stable",
        a + "old": "Dead",
        b + "bob-app": "Empty",
        "legacy": "Empty",
    }
    return Listing(groups=groups, txns={a + "tx-1": "Ongoing", b + "tx-b": "Empty"}, **extra)


def describe(name: str) -> m.DescribeVirtualClustersRequest:
    return m.DescribeVirtualClustersRequest(virtual_clusters=(m.DescribableVirtualCluster(name=name),))


def delete(name: str, force: bool = False, validate_only: bool = False) -> m.DeleteVirtualClustersRequest:
    return m.DeleteVirtualClustersRequest(
        virtual_clusters=(m.DeletableVirtualCluster(name=name),), force=force, validate_only=validate_only
    )


def test_describe_lists_the_vcs_own_and_assigned_groups_and_txns_in_its_names():
    img = apply(image(), [group_record("team-a", "legacy", True)])
    response, _ = handle(img, ADMIN, describe("team-a"), listing(img))
    [vc] = response.virtual_clusters
    assert vc.consumer_groups == ("billing", "legacy", "orders-app")  # not Dead "old", not team-b's
    assert vc.transactional_ids == ("tx-1",)
    assert vc.error_message is None
    response, _ = handle(img, ADMIN, describe("team-a"), Listing(error="broker 2: timed out"))
    [vc] = response.virtual_clusters
    assert vc.consumer_groups == ("legacy",) and "broker 2: timed out" in vc.error_message


def test_delete_is_refused_with_the_list_unless_forced():
    img = emptied()
    response, records = handle(img, ADMIN, delete("team-a"), listing(img))
    [result] = response.responses
    assert int(result.error_code) == POLICY_VIOLATION and not records
    assert "2 groups (billing, orders-app)" in result.error_message
    assert "1 transactional id (tx-1)" in result.error_message
    response, records = handle(img, ADMIN, delete("team-a", force=True), listing(img))
    assert int(response.responses[0].error_code) == 0 and records
    assert groups_to_purge(img, delete("team-a", force=True), response, listing(img)) == {
        "team-a": sorted(img.vcs["team-a"].prefix + g for g in ("billing", "orders-app"))
    }
    assert groups_to_purge(img, delete("team-a", force=True, validate_only=True), response, listing(img)) == {}
    # Groups that could not be deleted refuse the forced delete, saying which.
    response, records = handle(
        img, ADMIN, delete("team-a", force=True), listing(img), {"team-a": "billing: NON_EMPTY_GROUP"}
    )
    assert int(response.responses[0].error_code) == POLICY_VIOLATION and not records
    # A VC with nothing on the broker is deleted without force; a failed listing refuses (retriable).
    empty = Listing(groups={"legacy": "Empty"})
    assert int(handle(img, ADMIN, delete("team-a"), empty)[0].responses[0].error_code) == 0
    failed = handle(img, ADMIN, delete("team-a", force=True), Listing(error="broker 1: refused"))[0].responses[0]
    assert int(failed.error_code) == COORDINATOR_NOT_AVAILABLE and "broker 1" in failed.error_message


def test_force_needs_delete_virtual_cluster_like_any_delete():
    img = emptied()
    for caller, vc in ((DAVE, "team-a"), (DAVE, "team-b"), (ALICE, "team-a")):
        response, records = handle(img, caller, delete(vc, force=True), listing(img))
        assert int(response.responses[0].error_code) == CLUSTER_AUTHORIZATION_FAILED and not records
        assert groups_to_purge(img, delete(vc, force=True), response, listing(img)) == {}


@dataclasses.dataclass
class _Tenancy:
    image: object
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


class FakeBroker:
    def __init__(self, listed: Listing, refuse: frozenset[str] = frozenset()):
        self.listed = listed
        self.refuse = refuse
        self.deleted: list[str] = []

    async def listing(self) -> Listing:
        return self.listed

    async def delete_groups(self, groups: list[str]) -> dict[str, str | None]:
        self.deleted += groups
        return {g: ("NON_EMPTY_GROUP" if g in self.refuse else None) for g in groups}


def _run(session: ProxySession, api_key: int, request) -> tuple[object, list]:
    """What the shell does: slow work awaited until the decision is an answer; the answer decoded."""
    decision = session.on_request(memoryview(bytearray(request_frame(api_key, 0, 7, request))))
    while decision.action is Action.CHECK:
        decision = decision.resume(trio.run(decision.work))
    assert decision.action is Action.LOCAL
    reply = session.next_local_reply()
    body, _ = codec.decode(m.RESPONSES[api_key], reply.reply, response_body_offset(reply.reply, 1))
    return body, reply.writes


def session_for(img, broker: FakeBroker, principal: str = "User:admin") -> ProxySession:
    return ProxySession(
        ListenerLayout("127.0.0.1", 9192, 9193),
        tenancy=_Tenancy(img),
        principal=principal,
        super_admins=["User:admin"],
        listings=broker,
    )


def test_the_session_asks_the_broker_then_answers():
    img = emptied()
    broker = FakeBroker(listing(img))
    body, _ = _run(session_for(img, broker), ApiKey.DESCRIBE_VIRTUAL_CLUSTERS, describe("team-a"))
    assert body.virtual_clusters[0].consumer_groups == ("billing", "orders-app")
    body, writes = _run(session_for(img, broker), ApiKey.DELETE_VIRTUAL_CLUSTERS, delete("team-a"))
    assert int(body.responses[0].error_code) == POLICY_VIOLATION and not writes and not broker.deleted
    body, writes = _run(session_for(img, broker), ApiKey.DELETE_VIRTUAL_CLUSTERS, delete("team-a", force=True))
    assert int(body.responses[0].error_code) == 0 and writes
    assert sorted(broker.deleted) == sorted(img.vcs["team-a"].prefix + g for g in ("billing", "orders-app"))


def test_a_group_the_broker_keeps_refuses_the_forced_delete():
    img = emptied()
    stuck = img.vcs["team-a"].prefix + "orders-app"
    broker = FakeBroker(listing(img), frozenset({stuck}))
    body, writes = _run(session_for(img, broker), ApiKey.DELETE_VIRTUAL_CLUSTERS, delete("team-a", force=True))
    [result] = body.responses
    assert int(result.error_code) == POLICY_VIOLATION and not writes
    assert "orders-app: NON_EMPTY_GROUP" in result.error_message


def test_a_caller_without_the_right_never_makes_the_broker_work():
    img = apply(emptied(), [link_record("team-b", "events", "phys.events")])
    broker = FakeBroker(listing(img))
    img.principals["User:dave"] = "team-a"
    session = session_for(img, broker, "User:dave")
    decision = session.on_request(
        memoryview(bytearray(request_frame(ApiKey.DELETE_VIRTUAL_CLUSTERS, 0, 7, delete("team-b", force=True))))
    )
    assert decision.action is not Action.CHECK and not broker.deleted
