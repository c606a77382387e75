"""Kafka's rules for names within a virtual cluster (issue 8, class 9), sans-I/O."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.init_producer_id.v5.response import InitProducerIdResponse
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic

from proxy.core.session import ProxySession
from proxy.protocol import codec
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import MAX_LINK_NAME, link_record
from proxy.tenancy.names import INTERNAL_TOPICS

from .test_create_topics_once import _create, _local_reply
from .test_tenant_rewrite import LAYOUT, Tenancy, answer, forward, make_image, tenant_session

INVALID_TOPIC, INVALID_REQUEST = ErrorCode.invalid_topic_exception, ErrorCode.invalid_request
REFUSED = [
    ("", INVALID_TOPIC, "Topic name is invalid: the empty string is not allowed"),
    (".", INVALID_TOPIC, "Topic name is invalid: '.' is not allowed"),
    ("..", INVALID_TOPIC, "Topic name is invalid: '..' is not allowed"),
    ("bad name", INVALID_TOPIC, "'bad name' contains one or more characters other than ASCII alphanumerics"),
    ("x" * (MAX_LINK_NAME + 1), INVALID_TOPIC, "is longer than the max allowed length 212"),
    ("a.b", INVALID_TOPIC, "Topic 'a.b' collides with existing topic: a_b"),
    ("a_b.", None, None),  # no collision: "a_b_" is nobody's
    *[(name, INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.") for name in sorted(INTERNAL_TOPICS)],
]


def _image():
    image, _ = make_image()
    image.apply(*link_record("team-a", "a_b", f"{uuid.uuid4()}.a_b"))
    image.apply(*link_record("team-b", "c_d", f"{uuid.uuid4()}.c_d"))  # another VC's: no collision in team-a
    return image


@pytest.mark.parametrize(("name", "error", "message"), REFUSED)
def test_create_topics_refuses_what_kafka_refuses_in_the_tenants_words(name, error, message):
    session = tenant_session(_image())
    if error is None:
        assert forward(session, 19, 7, _create(name)).topics[0].name.endswith(f".{name}")
        return
    got = _local_reply(session, 19, 7, _create(name))
    (result,) = got.topics
    assert (result.name, result.error_code) == (name, error)
    assert message in result.error_message
    assert "!" not in result.error_message and "<hidden>" not in result.error_message


def test_the_limit_is_212_characters():
    session = tenant_session(_image())
    assert forward(session, 19, 7, _create("x" * MAX_LINK_NAME)).topics[0].name.endswith("x" * MAX_LINK_NAME)
    assert MAX_LINK_NAME == 212


def test_collision_is_per_vc():
    session = tenant_session(_image())
    assert forward(session, 19, 7, _create("c.d")).topics[0].name.endswith(".c.d")


def test_refused_names_are_answered_next_to_the_broker_results():
    session = tenant_session(_image())
    sent = forward(session, 19, 7, _create("..", "payments", "__consumer_offsets"))
    assert [t.name[37:] for t in sent.topics] == ["payments"]
    response = codec._empty(
        CreateTopicsResponse, topics=(codec._empty(CreatableTopicResult, name=sent.topics[0].name),)
    )
    got, _ = answer(session, 19, 7, response)
    errors = {t.name: t.error_code for t in got.topics}
    assert errors == {"payments": ErrorCode.none, "..": INVALID_TOPIC, "__consumer_offsets": INVALID_REQUEST}


def test_a_refused_name_twice_is_a_duplicate_first():
    got = _local_reply(tenant_session(_image()), 19, 7, _create("..", ".."))
    assert [(t.name, t.error_code) for t in got.topics] == [("..", INVALID_REQUEST)]


def _metadata(session, name: str, auto: bool = True):
    request = MetadataRequest(
        topics=(MetadataRequestTopic(name=name, topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=auto,
        include_topic_authorized_operations=False,
    )
    sent = forward(session, 3, 12, request)
    physical = sent.topics[0].name
    topic = MetadataResponseTopic(
        error_code=ErrorCode.unknown_topic_or_partition, name=physical, topic_id=uuid.UUID(int=0), partitions=()
    )
    got, result = answer(session, 3, 12, codec._empty(MetadataResponse, topics=(topic,)))
    return sent, got.topics[0], result


@pytest.mark.parametrize(
    ("name", "error"),
    [("..", INVALID_TOPIC), ("a.b", INVALID_TOPIC), ("__transaction_state", ErrorCode.unknown_topic_or_partition)],
)
def test_metadata_never_auto_creates_a_refused_name(name, error):
    session = ProxySession(
        LAYOUT, tenancy=Tenancy(_image(), Policy(auto_create_topics=True)), principal="User:team-a-user"
    )
    sent, topic, result = _metadata(session, name)
    assert sent.allow_auto_topic_creation is False and result.writes == []
    assert (topic.name, topic.error_code) == (name, error)


def test_metadata_says_invalid_for_an_illegal_name_without_auto_creation():
    _, topic, _ = _metadata(tenant_session(_image()), ".", auto=False)
    assert (topic.name, topic.error_code) == (".", INVALID_TOPIC)


def test_an_empty_transactional_id_reaches_the_broker_as_itself():
    session = tenant_session(_image())
    request = codec._empty(InitProducerIdRequest, transactional_id="")
    assert forward(session, 22, 5, request).transactional_id == ""  # Kafka answers INVALID_REQUEST for ""
    got, _ = answer(session, 22, 5, codec._empty(InitProducerIdResponse, error_code=INVALID_REQUEST))
    assert got.error_code == INVALID_REQUEST
    named = codec._empty(InitProducerIdRequest, transactional_id="tx")
    assert forward(session, 22, 5, named, cid=2).transactional_id.endswith(".tx")


def test_messages_quoting_a_placeholder_for_an_illegal_name_say_the_tenants_name():
    from proxy.tenancy.translate import Translation

    image = _image()
    tx = Translation(image.vcs["team-a"], image)
    placeholder = tx.topic("bad name")
    assert tx.scrub(f"Source topics {placeholder} are missing.") == "Source topics bad name are missing."
