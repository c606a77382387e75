"""A group's subscription by names follows the VC's topics behind them (issue 25: librdkafka's
0184_share_consumer_topic_recreate). KIP-848 and KIP-932 members send their names once; the coordinator
keeps the physical names the proxy sent, so when a VC's topic is deleted and created again (a new physical
topic) the names go again on the next heartbeat, translated as they stand now, as a broker follows a name."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from proxy.protocol import codec
from proxy.protocol.apis import response_type
from proxy.tenancy.model import link_record

from .test_tenant_rewrite import answer, forward, make_image, tenant_session

HEARTBEATS = [(68, ConsumerGroupHeartbeatRequest), (76, ShareGroupHeartbeatRequest)]


class Member:
    """One member's heartbeats on one connection, each answered (empty) before the next."""

    def __init__(self, session: Any, key: int, cls: type):
        self.session, self.key, self.cls, self.cid = session, key, cls, 0

    def beat(self, names: tuple[str, ...] | None = None, epoch: int = 1) -> tuple[str, ...] | None:
        self.cid += 1
        request = codec._empty(self.cls, group_id="g", member_id="m", member_epoch=epoch, subscribed_topic_names=names)
        sent = forward(self.session, self.key, 1, request, cid=self.cid)
        answer(self.session, self.key, 1, codec._empty(response_type(self.key, 1)), cid=self.cid)
        return sent.subscribed_topic_names


def _recreate(image: Any, link: str) -> str:
    """A VC's delete and create of `link`: unlinked, then linked to a new physical topic."""
    image.apply(*link_record("team-a", link, None))
    physical = f"{uuid.uuid4()}.{link}"
    image.apply(*link_record("team-a", link, physical))
    return physical


@pytest.mark.parametrize(("key", "cls"), HEARTBEATS)
def test_names_go_again_once_the_vcs_topic_behind_them_is_recreated(key, cls):
    image, physical = make_image()
    member = Member(tenant_session(image), key, cls)
    assert member.beat(("orders",), epoch=0) == (physical["team-a"],)
    assert member.beat() is None  # unchanged: the member's null stays
    recreated = _recreate(image, "orders")
    assert member.beat() == (recreated,)
    assert member.beat() is None


@pytest.mark.parametrize(("key", "cls"), HEARTBEATS)
def test_names_go_again_when_their_topic_is_deleted_or_created(key, cls):
    image, physical = make_image()
    member = Member(tenant_session(image), key, cls)
    first = member.beat(("orders", "later"), epoch=0)
    assert first is not None and first[0] == physical["team-a"]
    image.apply(*link_record("team-a", "orders", None))  # deleted: the old topic is no longer followed
    gone = member.beat()
    assert gone is not None and physical["team-a"] not in gone
    later = f"{uuid.uuid4()}.later"
    image.apply(*link_record("team-a", "later", later))  # subscribed before it existed
    again = member.beat()
    assert again is not None and again[1] == later


@pytest.mark.parametrize(("key", "cls"), HEARTBEATS)
def test_a_member_that_left_is_not_sent_names(key, cls):
    image, _ = make_image()
    member = Member(tenant_session(image), key, cls)
    member.beat(("orders",), epoch=0)
    assert member.beat(epoch=-1) is None
    _recreate(image, "orders")
    assert member.beat() is None  # a new member sends its own names


@pytest.mark.parametrize(("key", "cls"), HEARTBEATS)
def test_new_names_replace_the_remembered_ones(key, cls):
    image, physical = make_image()
    member = Member(tenant_session(image), key, cls)
    member.beat(("later",), epoch=0)
    assert member.beat(("orders",)) == (physical["team-a"],)
    image.apply(*link_record("team-a", "later", f"{uuid.uuid4()}.later"))
    assert member.beat() is None  # "later" is no longer subscribed
