"""Fetch sessions belong to the VC that created them (issue 8, class 7)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from proxy.core.session import Action
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.headers import response_body_offset
from proxy.tenancy import fetch_sessions, handlers
from proxy.tenancy.fetch_sessions import FetchSessionOwners

from .test_tenant_rewrite import answer, forward, make_image, tenant_session
from .wire import request_frame

FETCH = 1
VERSIONS = [7, 12, 13, 17, 18]


@pytest.fixture(autouse=True)
def fresh_table(monkeypatch):
    table = FetchSessionOwners()
    monkeypatch.setattr(fetch_sessions, "FETCH_SESSIONS", table)
    monkeypatch.setattr(handlers, "FETCH_SESSIONS", table)
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
    # No oracle: the same bytes for a live foreign id, any epoch, and an id that exists nowhere.
    same = {
        local_reply(bob, version, fetch(version, 424242, 7)),
        local_reply(bob, version, fetch(version, 424242, -1)),
        local_reply(bob, version, fetch(version, 424242, 0)),
        local_reply(bob, version, fetch(version, 987654, 1)),
    }
    assert len(same) == 1
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
    assert not fresh_table.owns(image.vcs["team-a"].id, 1111)
    reply = decode(12, local_reply(alice, 12, fetch(12, 1111, 1), cid=3))
    assert reply.error_code == ErrorCode.fetch_session_id_not_found
    assert fresh_table.owns(image.vcs["team-a"].id, 2222) is (epoch == 0)


def test_epoch_error_keeps_the_session_for_its_owner(fresh_table):
    image, _ = make_image()
    alice = tenant_session(image)
    forward(alice, FETCH, 12, fetch(12, 0, 0))
    broker_says(alice, 12, 1111)
    forward(alice, FETCH, 12, fetch(12, 1111, 9), cid=2)
    broker_says(alice, 12, 0, 71, cid=2)
    assert fresh_table.owns(image.vcs["team-a"].id, 1111)  # the client closes it next (epoch 0)


def test_the_table_is_bounded_least_recently_used_first():
    table = FetchSessionOwners(limit=3)
    for sid in (1, 2, 3):
        table.record("vc", sid)
    assert table.owns("vc", 1)  # used: now the most recent
    table.record("vc", 4)
    assert len(table) == 3
    assert not table.owns("vc", 2)
    assert table.owns("vc", 1) and table.owns("vc", 3) and table.owns("vc", 4)
