"""Requests that name topics by id only, through a virtual cluster (issue 25: librdkafka's KIP-848 consumer
asks Metadata by id for its newly assigned partitions). An id of the VC's own topic reaches the broker as
itself and comes back under the VC's name; an id of another VC's topic never reaches the broker and is
answered as Kafka answers an id it does not know (UNKNOWN_TOPIC_ID, the client's id echoed); an id the
proxy has not learned yet is asked about, and the answer kept only if it is the VC's own topic."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from proxy.protocol import codec
from proxy.protocol.apis import request_type, response_type
from proxy.tenancy.model import link_record, topic_record
from proxy.tenancy.translate import ZERO_UUID

from .test_tenant_rewrite import TOPIC_ID, answer, forward, make_image, sample, tenant_session

UNKNOWN_TOPIC_ID = int(ErrorCode.unknown_topic_id)


@pytest.fixture
def world():
    image, physical = make_image()
    b_id = uuid.uuid4()
    image.apply(*topic_record(physical["team-b"], b_id))
    return image, physical, b_id


def _metadata(topic_id: uuid.UUID, version: int = 12) -> Any:
    cls = request_type(3, version)
    topics = (codec._empty(_item(cls, "topics"), topic_id=topic_id, name=None),)
    return codec._empty(cls, topics=topics, allow_auto_topic_creation=True)


def _item(cls: type, name: str) -> type:
    import typing

    hint = typing.get_type_hints(cls)[name]
    if typing.get_origin(hint) is not tuple:
        hint = typing.get_args(hint)[0]
    return typing.get_args(hint)[0]


def _metadata_answer(version: int, name: str | None, topic_id: uuid.UUID, error: int = 0) -> Any:
    cls = response_type(3, version)
    partition = codec._empty(_item(_item(cls, "topics"), "partitions"), partition_index=0, leader_id=1)
    topic = codec._empty(
        _item(cls, "topics"),
        error_code=ErrorCode(error),
        name=name,
        topic_id=topic_id,
        partitions=(partition,) if error == 0 else (),
    )
    return codec._empty(cls, cluster_id="physical", topics=(topic,))


@pytest.mark.parametrize("version", [12, 13])
def test_metadata_by_the_vcs_own_topic_id_is_answered_under_its_virtual_name(world, version):
    image, physical, _ = world
    session = tenant_session(image)
    sent = forward(session, 3, version, _metadata(TOPIC_ID, version))
    assert [(t.name, t.topic_id) for t in sent.topics] == [(None, TOPIC_ID)]
    got, _ = answer(session, 3, version, _metadata_answer(version, physical["team-a"], TOPIC_ID))
    assert [(t.error_code, t.name, t.topic_id) for t in got.topics] == [(ErrorCode.none, "orders", TOPIC_ID)]
    assert len(got.topics[0].partitions) == 1


@pytest.mark.parametrize("version", [12, 13])
def test_metadata_by_another_vcs_topic_id_is_an_unknown_topic_id(world, version):
    image, _, b_id = world
    session = tenant_session(image)
    sent = forward(session, 3, version, _metadata(b_id, version))
    placeholder = sent.topics[0].topic_id
    assert placeholder not in (b_id, TOPIC_ID, ZERO_UUID)
    got, _ = answer(session, 3, version, _metadata_answer(version, None, placeholder, UNKNOWN_TOPIC_ID))
    assert [(int(t.error_code), t.name, t.topic_id) for t in got.topics] == [(UNKNOWN_TOPIC_ID, None, b_id)]


def test_metadata_by_an_id_not_learned_yet_resolves_the_vcs_topic_and_learns_its_id(world):
    """librdkafka creates topics with CreateTopics v4 (no id in the answer) and its KIP-848 consumer asks
    Metadata by the ids of its assignment: the proxy had not learned them and answered a zero id, which
    the broker refuses as a whole (UNKNOWN_SERVER_ERROR, no brokers): 300 s until a periodic refresh."""
    image, _, _ = world
    image.apply(*link_record("team-a", "fresh", "0f0f0f0f-0000-4000-8000-000000000001.fresh"))
    fresh_id = uuid.uuid4()
    session = tenant_session(image)
    sent = forward(session, 3, 13, _metadata(fresh_id, 13))
    assert sent.topics[0].topic_id == fresh_id  # asked as itself: only the broker knows whose it is
    answered = _metadata_answer(13, "0f0f0f0f-0000-4000-8000-000000000001.fresh", fresh_id)
    got, result = answer(session, 3, 13, answered)
    assert [(t.error_code, t.name, t.topic_id) for t in got.topics] == [(ErrorCode.none, "fresh", fresh_id)]
    assert topic_record("0f0f0f0f-0000-4000-8000-000000000001.fresh", fresh_id) in result.writes
    assert image.owns_topic_id(image.vcs["team-a"], fresh_id)


def test_metadata_by_an_id_not_learned_yet_of_another_vcs_topic_says_nothing_of_it(world):
    image, physical, _ = world
    hidden_id = uuid.uuid4()  # team-b's topic, whose id no VC has been shown yet
    session = tenant_session(image)
    sent = forward(session, 3, 13, _metadata(hidden_id, 13))
    got, result = answer(session, 3, 13, _metadata_answer(13, physical["team-b"], hidden_id))
    assert [(int(t.error_code), t.name, t.topic_id, t.partitions) for t in got.topics] == [
        (UNKNOWN_TOPIC_ID, None, hidden_id, ())
    ]
    assert sent.topics[0].topic_id == hidden_id and not result.writes
    assert not image.owns_topic_id(image.vcs["team-a"], hidden_id)


def _heartbeat_answer(topic_id: uuid.UUID) -> Any:
    from kio.schema.consumer_group_heartbeat.v1.response import (
        Assignment,
        ConsumerGroupHeartbeatResponse,
        TopicPartitions,
    )

    assignment = Assignment(topic_partitions=(TopicPartitions(topic_id=topic_id, partitions=(0, 1)),))
    return codec._empty(ConsumerGroupHeartbeatResponse, member_id="m", member_epoch=1, assignment=assignment)


def _heartbeat(session: Any) -> None:
    from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest

    request = codec._empty(
        ConsumerGroupHeartbeatRequest, group_id="g", member_id="m", member_epoch=0, subscribed_topic_names=("orders",)
    )
    forward(session, 68, 1, request)


def test_a_heartbeat_assignment_shows_the_groups_topic_ids_learned_or_not(world):
    """The assignment names the group's own topics: an id the proxy has not learned yet is shown as it
    is (it was shown as the zero id, which the client then asked Metadata about)."""
    image, _, _ = world
    for topic_id in (TOPIC_ID, uuid.uuid4()):
        session = tenant_session(image)
        _heartbeat(session)
        got, _ = answer(session, 68, 1, _heartbeat_answer(topic_id))
        assert [t.topic_id for t in got.assignment.topic_partitions] == [topic_id]


# -- every other request naming topics by id only -----------------------------------------------------------

BY_ID = [(1, 13), (1, 17), (8, 10), (78, 1), (68, 1)]  # Fetch, OffsetCommit v10, ShareFetch, ConsumerGroupHeartbeat


def _by_id(key: int, version: int, topic_id: uuid.UUID) -> Any:
    return sample(request_type(key, version), {"topic": "orders", "group": "g", "txn": "t", "topic_id": topic_id})


def _ids(entity: Any, path: str) -> list[uuid.UUID]:
    from .test_tenant_rewrite import values_at

    return values_at(entity, path)


@pytest.mark.parametrize(("key", "version"), BY_ID)
def test_requests_by_the_vcs_own_topic_id_reach_the_broker_as_it(world, key, version):
    image, _, _ = world
    sent = forward(tenant_session(image), key, version, _by_id(key, version, TOPIC_ID))
    path = "topic_partitions[].topic_id" if key == 68 else "topics[].topic_id"
    assert _ids(sent, path) == [TOPIC_ID]


@pytest.mark.parametrize(("key", "version"), BY_ID)
def test_requests_by_another_vcs_topic_id_are_answered_unknown_topic_id_with_the_clients_id(world, key, version):
    image, _, b_id = world
    session = tenant_session(image)
    sent = forward(session, key, version, _by_id(key, version, b_id))
    path = "topic_partitions[].topic_id" if key == 68 else "topics[].topic_id"
    (placeholder,) = _ids(sent, path)
    assert placeholder not in (b_id, TOPIC_ID, ZERO_UUID)
    if key == 68:
        return  # the heartbeat's answer names the group's assignment, not the request's topics
    # The broker's answer for an id it does not know, in the API's shape: the client's id comes back.
    reply = sample(response_type(key, version), {"topic": "x", "group": "g", "txn": "t", "topic_id": placeholder})
    got, _ = answer(session, key, version, reply)
    back = "responses[].topic_id" if key in (1, 78) else "topics[].topic_id"
    assert _ids(got, back) == [b_id]


def test_delete_topics_by_id(world):
    """DeleteTopics v6 names topics by id: the VC's own is unlinked (its name and id in the answer), another
    VC's is UNKNOWN_TOPIC_ID for the id the client sent."""
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
    from kio.schema.delete_topics.v6.response import DeletableTopicResult, DeleteTopicsResponse

    image, _, b_id = world
    session = tenant_session(image)
    request = codec._empty(DeleteTopicsRequest, topics=(DeleteTopicState(name=None, topic_id=b_id),))
    sent = forward(session, 20, 6, request)
    placeholder = sent.topics[0].topic_id
    assert placeholder not in (b_id, ZERO_UUID) and sent.topics[0].name is None
    result = codec._empty(DeletableTopicResult, name=None, topic_id=placeholder, error_code=ErrorCode.unknown_topic_id)
    got, _ = answer(session, 20, 6, codec._empty(DeleteTopicsResponse, responses=(result,)))
    assert [(r.name, r.topic_id, int(r.error_code)) for r in got.responses] == [(None, b_id, UNKNOWN_TOPIC_ID)]

    own = codec._empty(DeleteTopicsRequest, topics=(DeleteTopicState(name=None, topic_id=TOPIC_ID),))
    decision = tenant_session(image).on_request(memoryview(_frame(20, 6, own)))
    assert decision.action.name == "LOCAL"  # unlinked by the proxy (the physical topic stays, KIP-1134)


def _frame(key: int, version: int, body: Any) -> bytes:
    from .wire import request_frame

    return request_frame(key, version, 1, body)


def test_describe_topic_partitions_shows_only_the_vcs_topic_ids(world):
    from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest, TopicRequest

    image, physical, _ = world
    session = tenant_session(image)
    request = codec._empty(
        DescribeTopicPartitionsRequest, topics=(TopicRequest(name="orders"),), response_partition_limit=10
    )
    sent = forward(session, 75, 0, request)
    assert [t.name for t in sent.topics] == [physical["team-a"]]
    cls = response_type(75, 0)
    topic = codec._empty(_item(cls, "topics"), name=physical["team-a"], topic_id=TOPIC_ID)
    got, _ = answer(session, 75, 0, codec._empty(cls, topics=(topic,)))
    assert [(t.name, t.topic_id) for t in got.topics] == [("orders", TOPIC_ID)]


def test_metadata_by_an_unlearned_id_the_vcs_acls_refuse_is_topic_authorization_failed_without_its_name():
    """As Kafka answers a topic named by id that the caller may not describe: the error, no name."""
    from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record

    from .test_acls import session as acl_session

    image, _ = make_image()
    physical = "0f0f0f0f-0000-4000-8000-000000000002.secret"
    image.apply(*link_record("team-a", "secret", physical))
    image.apply(*link_record("team-a", "open", "0f0f0f0f-0000-4000-8000-000000000003.open"))
    binding = AclBinding(
        ResourceType.TOPIC, "open", PatternType.LITERAL, "User:team-a-user", "*", Operation.DESCRIBE, Permission.ALLOW
    )
    image.apply(*acl_record("team-a", binding, True))
    session = acl_session(image, "User:team-a-user", allow_if_no_acl=False)
    secret_id = uuid.uuid4()
    sent = forward(session, 3, 13, _metadata(secret_id, 13))
    assert sent.topics[0].topic_id == secret_id
    got, _ = answer(session, 3, 13, _metadata_answer(13, physical, secret_id))
    assert [(int(t.error_code), t.name, t.topic_id, t.partitions) for t in got.topics] == [
        (int(ErrorCode.topic_authorization_failed), None, secret_id, ())
    ]


def test_share_heartbeat_and_consumer_group_describe_show_the_groups_unlearned_topic_ids(world):
    from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
    from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

    image, physical, _ = world
    unlearned = uuid.uuid4()
    session = tenant_session(image)
    heartbeat = codec._empty(
        ShareGroupHeartbeatRequest, group_id="s", member_id="m", subscribed_topic_names=("orders",)
    )
    forward(session, 76, 1, heartbeat)
    reply = sample(response_type(76, 1), {"topic": "x", "group": "s", "txn": "t", "topic_id": unlearned})
    got, _ = answer(session, 76, 1, reply)
    assert [t.topic_id for t in got.assignment.topic_partitions] == [unlearned]

    session = tenant_session(image)
    forward(session, 69, 1, codec._empty(ConsumerGroupDescribeRequest, group_ids=("g",)))
    group = image.vcs["team-a"].physical_group("g")
    reply = sample(
        response_type(69, 1), {"topic": physical["team-a"], "group": group, "txn": "t", "topic_id": unlearned}
    )
    got, _ = answer(session, 69, 1, reply)
    member = got.groups[0].members[0]
    assert [(t.topic_id, t.topic_name) for t in member.assignment.topic_partitions] == [(unlearned, "orders")]
