"""KIP-1134: a physical topic that a VC links to cannot be deleted from kafka-cluster (super-admins and
members alike), by name or by topic id; the request's other topics go to the broker as asked."""

from __future__ import annotations

import uuid

from kio.schema.delete_topics.v4.request import DeleteTopicsRequest as DeleteTopicsV4
from kio.schema.delete_topics.v4.response import DeletableTopicResult as ResultV4
from kio.schema.delete_topics.v4.response import DeleteTopicsResponse as ResponseV4
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.delete_topics.v6.response import DeletableTopicResult, DeleteTopicsResponse
from kio.schema.errors import ErrorCode

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.core.session import Action, ProxySession
from proxy.protocol import codec
from proxy.tenancy.model import KAFKA_CLUSTER, link_record, principal_record

from .test_tenant_rewrite import LAYOUT, TOPIC_ID, Tenancy, answer, forward, make_image
from .wire import request_frame

ZERO = uuid.UUID(int=0)


def admin_session(image, principal: str = "User:root") -> ProxySession:
    return ProxySession(LAYOUT, tenancy=Tenancy(image), principal=principal, super_admins=("User:root",))


def _v6(*topics: tuple[str | None, uuid.UUID]) -> DeleteTopicsRequest:
    states = tuple(DeleteTopicState(name=n, topic_id=i) for n, i in topics)
    return codec._empty(DeleteTopicsRequest, topics=states)


def _echo(sent: DeleteTopicsRequest, error: ErrorCode = ErrorCode.none) -> DeleteTopicsResponse:
    """What the broker answers: each topic as sent; names no topic has are unknown."""
    results = []
    for t in sent.topics:
        unknown = (t.name or "").endswith(".linked") or (t.name is None and t.topic_id != TOPIC_ID)
        code = ErrorCode.unknown_topic_or_partition if unknown else error
        results.append(codec._empty(DeletableTopicResult, name=t.name, topic_id=t.topic_id, error_code=code))
    return codec._empty(DeleteTopicsResponse, responses=tuple(results))


def test_a_linked_topic_is_refused_by_name_and_the_others_are_deleted():
    image, physical = make_image()
    session = admin_session(image)
    sent = forward(session, 20, 6, _v6((physical["team-a"], ZERO), ("plain-topic", ZERO)))
    assert sent.topics[0].name != physical["team-a"]  # a placeholder: the broker deletes nothing of it
    assert sent.topics[1].name == "plain-topic"
    got, _ = answer(session, 20, 6, _echo(sent))
    refused, deleted = got.responses
    assert (refused.name, refused.error_code) == (physical["team-a"], ErrorCode.policy_violation)
    assert "team-a" in refused.error_message and "team-b" not in refused.error_message
    assert (deleted.name, deleted.error_code) == ("plain-topic", ErrorCode.none)


def test_a_linked_topic_is_refused_by_topic_id():
    image, physical = make_image()
    session = admin_session(image)
    sent = forward(session, 20, 6, _v6((None, TOPIC_ID)))
    assert sent.topics[0].topic_id != TOPIC_ID
    got, _ = answer(session, 20, 6, _echo(sent))
    [result] = got.responses
    assert (result.name, result.topic_id) == (physical["team-a"], TOPIC_ID)
    assert result.error_code == ErrorCode.policy_violation


def test_a_topic_shared_by_two_vcs_names_both_and_old_versions_get_the_code():
    image, physical = make_image()
    image.apply(*link_record("team-b", "a-orders", physical["team-a"]))
    session = admin_session(image)
    sent = forward(session, 20, 4, codec._empty(DeleteTopicsV4, topic_names=(physical["team-a"],)))
    [placeholder] = sent.topic_names
    result = codec._empty(ResultV4, name=placeholder, error_code=ErrorCode.unknown_topic_or_partition)
    got, _ = answer(session, 20, 4, codec._empty(ResponseV4, responses=(result,)))
    assert [(r.name, r.error_code) for r in got.responses] == [(physical["team-a"], ErrorCode.policy_violation)]
    from proxy.tenancy.linked import refusal_message

    assert "team-a, team-b" in (refusal_message(image, physical["team-a"]) or "")


def test_an_unlinked_topic_is_sent_unchanged_and_a_member_needs_its_acl_first():
    image, physical = make_image()
    image.apply(*link_record("team-a", "orders", None))  # unlinked: an orphan, an operator may delete it
    decision = admin_session(image).on_request(memoryview(request_frame(20, 6, 1, _v6((physical["team-a"], ZERO)))))
    assert decision.action is Action.FORWARD and decision.pieces is None  # sent as received
    # A member of kafka-cluster with DELETE on team-b's topic only: its ACL is checked as a broker would;
    # team-b's linked topic is refused for the link.
    image.apply(*principal_record("User:ops", KAFKA_CLUSTER))
    grant = AclBinding(
        ResourceType.TOPIC, physical["team-b"], PatternType.LITERAL, "User:ops", "*", Operation.DELETE, Permission.ALLOW
    )
    image.apply(*acl_record(KAFKA_CLUSTER, grant, True))
    ops = admin_session(image, "User:ops")
    sent = forward(ops, 20, 6, _v6((physical["team-b"], ZERO)))
    got, _ = answer(ops, 20, 6, _echo(sent))
    assert [(r.name, r.error_code) for r in got.responses] == [(physical["team-b"], ErrorCode.policy_violation)]


def test_a_members_refused_and_linked_topics_leave_in_one_request():
    """kafka-cluster's ACLs and the linked-topics check edit the request's one decode; it is encoded once,
    with both edits, and each comes back with its own error."""
    image, physical = make_image()
    image.apply(*principal_record("User:ops", KAFKA_CLUSTER))
    grant = AclBinding(
        ResourceType.TOPIC, physical["team-b"], PatternType.LITERAL, "User:ops", "*", Operation.DELETE, Permission.ALLOW
    )
    image.apply(*acl_record(KAFKA_CLUSTER, grant, True))
    ops = admin_session(image, "User:ops")
    sent = forward(ops, 20, 6, _v6((physical["team-b"], ZERO), (physical["team-a"], ZERO)))
    assert not {physical["team-a"], physical["team-b"]} & {t.name for t in sent.topics}  # both placeholders
    got, _ = answer(ops, 20, 6, _echo(sent))
    assert [(r.name, r.error_code) for r in got.responses] == [
        (physical["team-b"], ErrorCode.policy_violation),  # linked by team-b
        (physical["team-a"], ErrorCode.topic_authorization_failed),  # no DELETE on it
    ]
