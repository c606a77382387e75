"""CreateTopics in a VC creates one physical topic per link (issue 8, class 8), sans-I/O."""

from __future__ import annotations

import json
import uuid

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.errors import ErrorCode

from proxy.core.session import Action
from proxy.protocol import codec
from proxy.tenancy.model import created_topic_for, derived_topic_for, gen_record, link_record, partitions_record

from .test_tenant_rewrite import answer, forward, make_image, tenant_session
from .wire import request_frame


def _create(*names: str) -> CreateTopicsRequest:
    topics = tuple(codec._empty(CreatableTopic, name=n, num_partitions=1, replication_factor=1) for n in names)
    return codec._empty(CreateTopicsRequest, topics=topics)


def _local_reply(session, key: int, version: int, body) -> object:
    decision = session.on_request(memoryview(request_frame(key, version, 5, body)))
    assert decision.action is Action.LOCAL
    pending = session.next_local_reply()
    from proxy.protocol.apis import response_type
    from proxy.protocol.headers import response_body_offset

    frame = memoryview(pending.reply)
    entity, _ = codec.decode(response_type(key, version), frame, response_body_offset(frame, 1))
    return entity


def test_concurrent_creators_ask_the_broker_for_one_name():
    image, _ = make_image()
    vc = image.vcs["team-a"]
    names = {forward(tenant_session(image), 19, 7, _create("payments")).topics[0].name for _ in range(8)}
    assert names == {derived_topic_for(vc.id, "payments")}  # the same as Metadata auto-creation's


def test_a_name_twice_in_one_request_is_invalid_request_once_and_the_rest_goes_ahead():
    image, _ = make_image()
    session = tenant_session(image)
    sent = forward(session, 19, 7, _create("dup", "payments", "dup"))
    assert [t.name[37:] for t in sent.topics] == ["payments"]
    physical = sent.topics[0].name
    got, result = answer(
        session,
        19,
        7,
        codec._empty(CreateTopicsResponse, topics=(codec._empty(CreatableTopicResult, name=physical),)),
    )
    by_name = {t.name: t for t in got.topics}
    assert set(by_name) == {"dup", "payments"}
    assert by_name["dup"].error_code == ErrorCode.invalid_request
    assert by_name["dup"].error_message == "Duplicate topic name."
    assert by_name["payments"].error_code == ErrorCode.none
    assert result.writes == [link_record("team-a", "payments", physical), partitions_record(physical, 1)]


def test_only_duplicates_are_answered_without_the_broker():
    image, _ = make_image()
    got = _local_reply(tenant_session(image), 19, 7, _create("x", "x", "x"))
    assert [(t.name, t.error_code) for t in got.topics] == [("x", ErrorCode.invalid_request)]


def test_the_loser_of_a_race_gets_topic_already_exists_and_repairs_a_missing_link():
    image, _ = make_image()
    session = tenant_session(image)
    physical = forward(session, 19, 7, _create("payments")).topics[0].name
    result_item = codec._empty(
        CreatableTopicResult,
        name=physical,
        error_code=ErrorCode.topic_already_exists,
        error_message=f"Topic '{physical}' already exists.",
    )
    got, result = answer(session, 19, 7, codec._empty(CreateTopicsResponse, topics=(result_item,)))
    assert got.topics[0].error_code == ErrorCode.topic_already_exists
    assert got.topics[0].error_message == "Topic 'payments' already exists."
    # The winner's link, or the one a failed write left out: the same record either way.
    assert result.writes == [link_record("team-a", "payments", physical)]


def test_a_deleted_link_is_recreated_under_a_new_generation():
    image, _ = make_image()
    vc = image.vcs["team-a"]
    session = tenant_session(image)
    first = forward(session, 19, 7, _create("payments")).topics[0].name
    new_id = uuid.uuid4()
    _, result = answer(
        session,
        19,
        7,
        codec._empty(CreateTopicsResponse, topics=(codec._empty(CreatableTopicResult, name=first, topic_id=new_id),)),
    )
    for record in result.writes:
        image.apply(*record)
    delete = codec._empty(DeleteTopicsRequest, topics=(codec._empty(DeleteTopicState, name="payments"),))
    decision = session.on_request(memoryview(request_frame(20, 6, 2, delete)))
    assert decision.action is Action.LOCAL  # the physical topic is kept (tenancy.delete_physical_topics: false)
    writes = session.next_local_reply().writes
    assert writes[:2] == [gen_record("team-a", "payments", 1), link_record("team-a", "payments", None)]
    # ...and the kept topic is remembered as the VC's orphan (it counts against the VC's limits).
    assert [(json.loads(k), v["vc"]) for k, v in writes[2:]] == [(["orphan", first], "team-a")]
    for record in writes:
        image.apply(*record)
    # The same name again: a new physical topic, never the kept one.
    second = forward(tenant_session(image), 19, 7, _create("payments")).topics[0].name
    assert second == created_topic_for(vc.id, "payments", 1) != first


def test_topic_changes_are_refused_while_the_state_topic_is_unusable():
    image, _ = make_image()
    image.state_problem = "state topic __vcproxy_state does not exist"
    got = _local_reply(tenant_session(image), 19, 7, _create("payments"))
    assert got.topics[0].error_code == ErrorCode.policy_violation
    assert "does not exist" in got.topics[0].error_message
    delete = codec._empty(DeleteTopicsRequest, topics=(codec._empty(DeleteTopicState, name="orders"),))
    got = _local_reply(tenant_session(image), 20, 6, delete)
    assert got.responses[0].error_code == ErrorCode.policy_violation
    assert image.vcs["team-a"].physical_topic("orders") is not None


def test_metadata_auto_creation_uses_the_links_generation_and_nothing_while_the_state_is_unusable():
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    from proxy.core.session import ProxySession
    from proxy.tenancy.engine import Policy

    from .test_tenant_rewrite import LAYOUT, Tenancy

    image, _ = make_image()
    image.apply(*gen_record("team-a", "fresh", 2))  # "fresh" was created and deleted twice before
    request = MetadataRequest(
        topics=(MetadataRequestTopic(name="fresh", topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )

    def session() -> ProxySession:
        return ProxySession(
            LAYOUT, tenancy=Tenancy(image, Policy(auto_create_topics=True)), principal="User:team-a-user"
        )

    sent = forward(session(), 3, 12, request)
    assert sent.topics[0].name == created_topic_for(image.vcs["team-a"].id, "fresh", 2)
    assert sent.allow_auto_topic_creation
    image.state_problem = "state topic __vcproxy_state does not exist"
    assert not forward(session(), 3, 12, request).allow_auto_topic_creation
