"""Fetch sessions belong to the VC that created them (issue 8, class 7), per (broker, session id): ids are
unique per broker only."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from proxy.core.session import Action
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.headers import response_body_offset
from proxy.tenancy import fetch_sessions
from proxy.tenancy.fetch_sessions import FetchSessionOwners
from proxy.tenancy.handlers import fetch as fetch_handlers

from .test_tenant_rewrite import answer, forward, make_image, tenant_session
from .wire import request_frame

FETCH = 1
VERSIONS = [7, 12, 13, 17, 18]


@pytest.fixture(autouse=True)
def fresh_table(monkeypatch):
    table = FetchSessionOwners()
    monkeypatch.setattr(fetch_sessions, "FETCH_SESSIONS", table)
    monkeypatch.setattr(fetch_handlers, "FETCH_SESSIONS", table)
    return table


def fetch(version: int, session_id: int, epoch: int):
    return codec._empty(request_type(FETCH, version), replica_id=-1, session_id=session_id, session_epoch=epoch)


def broker_says(session, version: int, session_id: int, error: int = 0, cid: int = 1):
    body = codec._empty(response_type(FETCH, version), error_code=ErrorCode(error), session_id=session_id)
    return answer(session, FETCH, version, body, cid)[0]


def local_reply(session, version: int, body, cid: int = 1) -> bytes:
    decision = session.on_request(memoryview(bytearray(request_frame(FETCH, version, cid, body))))
    assert decision.action is Action.LOCAL, decision.reason
    return session.next_local_reply().reply


def decode(version: int, raw: bytes):
    offset = response_body_offset(raw, api_info(FETCH).response_header_version(version))
    return codec.decode(response_type(FETCH, version), raw, offset)[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_foreign_session_id_is_not_found_exactly_like_a_random_one(version):
    image, _ = make_image()
    alice, bob = tenant_session(image), tenant_session(image, "User:team-b-user")
    forward(alice, FETCH, version, fetch(version, 0, 0))
    broker_says(alice, version, 424242)

    stolen = decode(version, local_reply(bob, version, fetch(version, 424242, 1)))
    assert stolen.error_code == ErrorCode.fetch_session_id_not_found
    assert stolen.session_id == 0 and stolen.responses == ()
    # No oracle: the same bytes for a live foreign id at any incremental epoch and an id that exists nowhere.
    same = {
        local_reply(bob, version, fetch(version, 424242, 7)),
        local_reply(bob, version, fetch(version, 987654, 1)),
    }
    assert len(same) == 1
    # A full fetch naming it (epoch 0 opens a new session, -1 fetches without one) is served as a broker
    # serves one naming an unknown id, without the id: bob cannot close alice's session.
    for epoch, cid in ((0, 10), (-1, 11)):
        for sid in (424242, 987654):
            sent = forward(bob, FETCH, version, fetch(version, sid, epoch), cid=cid)
            assert (sent.session_id, sent.session_epoch) == (0, epoch)
            cid += 100
    # The owner goes on, from any of its connections.
    assert forward(alice, FETCH, version, fetch(version, 424242, 1), cid=2).session_id == 424242
    assert forward(tenant_session(image), FETCH, version, fetch(version, 424242, 2)).session_id == 424242


@pytest.mark.parametrize(("epoch", "error"), [(-1, 0), (0, 0), (3, 70)])
def test_closed_or_gone_sessions_are_forgotten(fresh_table, epoch, error):
    image, _ = make_image()
    alice = tenant_session(image)
    forward(alice, FETCH, 12, fetch(12, 0, 0))
    broker_says(alice, 12, 1111)
    assert len(fresh_table) == 1
    forward(alice, FETCH, 12, fetch(12, 1111, epoch), cid=2)
    broker_says(alice, 12, 2222 if epoch == 0 else 0, error, cid=2)
    assert not fresh_table.owns(image.vcs["team-a"].id, 1, 1111)
    reply = decode(12, local_reply(alice, 12, fetch(12, 1111, 1), cid=3))
    assert reply.error_code == ErrorCode.fetch_session_id_not_found
    assert fresh_table.owns(image.vcs["team-a"].id, 1, 2222) is (epoch == 0)


@pytest.mark.parametrize("epoch", [0, -1])
def test_a_full_fetch_naming_a_session_the_broker_evicted_is_served(fresh_table, epoch):
    """Issue 18: the broker evicts a session (FETCH_SESSION_ID_NOT_FOUND, 70); the client resets and
    fetches with the old id at epoch 0, or, once it gives up on sessions, at epoch -1 (franz-go keeps the
    id). A broker serves both; answering them 70 locally looped the client for ever with no records."""
    image, _ = make_image()
    alice = tenant_session(image)
    forward(alice, FETCH, 12, fetch(12, 0, 0))
    broker_says(alice, 12, 1111)
    forward(alice, FETCH, 12, fetch(12, 1111, 5), cid=2)
    broker_says(alice, 12, 0, error=70, cid=2)  # evicted by the broker
    for cid in (3, 4, 5):  # every retry reaches the broker
        sent = forward(alice, FETCH, 12, fetch(12, 1111, epoch), cid=cid)
        assert (sent.session_id, sent.session_epoch) == (0, epoch)
        broker_says(alice, 12, 3333 if epoch == 0 else 0, cid=cid)
    assert fresh_table.owns(image.vcs["team-a"].id, 1, 3333) is (epoch == 0)


def test_epoch_error_keeps_the_session_for_its_owner(fresh_table):
    image, _ = make_image()
    alice = tenant_session(image)
    forward(alice, FETCH, 12, fetch(12, 0, 0))
    broker_says(alice, 12, 1111)
    forward(alice, FETCH, 12, fetch(12, 1111, 9), cid=2)
    broker_says(alice, 12, 0, 71, cid=2)
    assert fresh_table.owns(image.vcs["team-a"].id, 1, 1111)  # the client closes it next (epoch 0)


def test_the_table_is_bounded_least_recently_used_first():
    table = FetchSessionOwners(limit=3)
    for sid in (1, 2, 3):
        table.record("vc", 7, sid)
    assert table.owns("vc", 7, 1)  # used: now the most recent
    table.record("vc", 7, 4)
    assert len(table) == 3
    assert not table.owns("vc", 7, 2)
    assert table.owns("vc", 7, 1) and table.owns("vc", 7, 3) and table.owns("vc", 7, 4)


# -- ids are unique per broker only ------------------------------------------------------------------------


@pytest.mark.parametrize("version", [7, 13, 18])
def test_the_same_id_on_two_brokers_is_two_sessions_of_two_vcs(fresh_table, version):
    """Broker 1 gives team-a session 424242; broker 2 gives team-b the same id. Neither VC can use or end
    the other's, and neither's opening evicts the other's."""
    image, _ = make_image()
    alice_1, alice_2 = tenant_session(image, broker=1), tenant_session(image, broker=2)
    bob_1, bob_2 = (tenant_session(image, "User:team-b-user", broker=b) for b in (1, 2))
    forward(alice_1, FETCH, version, fetch(version, 0, 0))
    broker_says(alice_1, version, 424242)
    forward(bob_2, FETCH, version, fetch(version, 0, 0))
    broker_says(bob_2, version, 424242)
    team_a, team_b = image.vcs["team-a"].id, image.vcs["team-b"].id
    assert fresh_table.owns(team_a, 1, 424242) and fresh_table.owns(team_b, 2, 424242) and len(fresh_table) == 2

    # Each goes on where its session lives; on the other broker the id is not theirs.
    for session in (alice_1, bob_2):
        assert forward(session, FETCH, version, fetch(version, 424242, 1), cid=2).session_id == 424242
        broker_says(session, version, 424242, cid=2)
    for session in (bob_1, alice_2):
        reply = decode(version, local_reply(session, version, fetch(version, 424242, 1), cid=3))
        assert reply.error_code == ErrorCode.fetch_session_id_not_found and reply.responses == ()
    # Bob closing his (epoch -1 on broker 2) leaves alice's on broker 1.
    forward(bob_2, FETCH, version, fetch(version, 424242, -1), cid=4)
    broker_says(bob_2, version, 0, cid=4)
    assert not fresh_table.owns(team_b, 2, 424242) and fresh_table.owns(team_a, 1, 424242)
    # And a broker telling bob's connection on broker 2 that 424242 is gone does not touch broker 1's.
    forward(bob_2, FETCH, version, fetch(version, 0, 0), cid=5)
    broker_says(bob_2, version, 424242, cid=5)
    forward(bob_2, FETCH, version, fetch(version, 424242, 1), cid=6)
    broker_says(bob_2, version, 0, error=70, cid=6)
    assert fresh_table.owns(team_a, 1, 424242) and not fresh_table.owns(team_b, 2, 424242)


def test_a_bootstrap_connection_owns_sessions_of_the_broker_it_reached(fresh_table):
    image, _ = make_image()
    team_a = image.vcs["team-a"].id
    boot = tenant_session(image, broker=None)
    # Before its upstream is connected it knows no broker: no id is its own.
    reply = decode(12, local_reply(boot, 12, fetch(12, 5555, 1)))
    assert reply.error_code == ErrorCode.fetch_session_id_not_found
    forward(boot, FETCH, 12, fetch(12, 0, 0), cid=2)  # a new session goes to the broker
    boot.upstream_broker(3)  # the shell connected it to broker 3 (the node advertising that address)
    broker_says(boot, 12, 5555, cid=2)
    assert fresh_table.owns(team_a, 3, 5555) and not fresh_table.owns(team_a, 1, 5555)
    # The same broker through its own listener is the same session; another broker's listener is not.
    assert forward(tenant_session(image, broker=3), FETCH, 12, fetch(12, 5555, 1)).session_id == 5555
    reply = decode(12, local_reply(tenant_session(image, broker=1), 12, fetch(12, 5555, 1)))
    assert reply.error_code == ErrorCode.fetch_session_id_not_found


def test_the_shell_keys_a_bootstrap_upstream_by_the_broker_it_reached():

    from proxy.core.endpoints import BrokerEndpoint
    from proxy.net.discovery import BrokerRegistry

    registry = BrokerRegistry()
    registry.update([BrokerEndpoint(1, "b1.internal", 9092, None), BrokerEndpoint(2, "b2.internal", 9092, None)])
    key = registry.broker_key
    assert key(2, ("b2.internal", 9092)) == 2  # a broker's listener: its node id
    assert key(None, ("b1.internal", 9092)) == 1  # the bootstrap reached broker 1's address
    # An address no broker advertises (a DNS name, a load balancer): a key of that upstream connection alone.
    first, second = key(None, ("kafka.lb", 9092)), key(None, ("kafka.lb", 9092))
    assert first != second and first not in (1, 2) and second not in (1, 2)
