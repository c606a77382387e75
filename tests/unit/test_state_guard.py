"""The state topic, guarded from principals bound to no VC (issue 8, class 10), through the sans-I/O session."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode

from proxy.core.session import Action, ProxySession
from proxy.protocol import codec
from proxy.protocol.apis import api_info, response_type
from proxy.protocol.headers import response_body_offset
from proxy.tenancy.guard import StateTopicGuard

from .test_tenant_rewrite import LAYOUT, Tenancy, make_image
from .wire import request_frame, response_frame

STATE = "__vcproxy_state"
STATE_ID = uuid.UUID("99999999-8888-7777-6666-555555555555")


def session_for(principal: str) -> ProxySession:
    image, _ = make_image()
    image.guard = StateTopicGuard(STATE, frozenset({"User:ops"}), STATE_ID)
    # In kafka-cluster (as super-admins): the guard holds even for them.
    return ProxySession(LAYOUT, tenancy=Tenancy(image), principal=principal, super_admins=(principal,))


def refused(session: ProxySession, key: int, version: int, body: object) -> object:
    decision = session.on_request(memoryview(request_frame(key, version, 3, body)))
    assert decision.action is Action.LOCAL, decision
    pending = session.next_local_reply()
    frame = memoryview(pending.reply)
    hv = api_info(key).response_header_version(version)
    return codec.decode(response_type(key, version), frame, response_body_offset(frame, hv))[0]


def forwarded(session: ProxySession, key: int, version: int, body: object) -> None:
    decision = session.on_request(memoryview(request_frame(key, version, 3, body)))
    assert decision.action is Action.FORWARD, decision.reason


def produce(version: int, name: str | None, topic_id: uuid.UUID | None = None) -> object:
    module = __import__(f"kio.schema.produce.v{version}.request", fromlist=["ProduceRequest"])
    topic = {"name": name} if version < 13 else {"topic_id": topic_id}
    return module.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(
            module.TopicProduceData(
                **topic, partition_data=(module.PartitionProduceData(index=0, records=b"\x00" * 70),)
            ),
        ),
    )


@pytest.mark.parametrize("principal", ["User:admin", "User:ops"])
def test_nobody_may_produce_to_the_state_topic_by_name_or_id(principal):
    got = refused(session_for(principal), 0, 9, produce(9, STATE))
    assert got.responses[0].name == STATE
    assert got.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
    got = refused(session_for(principal), 0, 13, produce(13, None, STATE_ID))
    assert got.responses[0].topic_id == STATE_ID
    assert got.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed


def test_other_topics_pass_untouched():
    forwarded(session_for("User:admin"), 0, 9, produce(9, "some-physical-topic"))
    forwarded(session_for("User:admin"), 0, 13, produce(13, None, uuid.uuid4()))


def test_delete_alter_and_truncate_are_refused_in_the_apis_shape():
    from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )

    session = session_for("User:ops")
    got = refused(
        session, 20, 6, codec._empty(DeleteTopicsRequest, topics=(codec._empty(DeleteTopicState, name=STATE),))
    )
    assert [(r.name, r.error_code) for r in got.responses] == [(STATE, ErrorCode.topic_authorization_failed)]
    got = refused(
        session,
        20,
        6,
        codec._empty(DeleteTopicsRequest, topics=(codec._empty(DeleteTopicState, name=None, topic_id=STATE_ID),)),
    )
    assert got.responses[0].error_code == ErrorCode.topic_authorization_failed
    alter = IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=2,
                resource_name=STATE,
                configs=(AlterableConfig(name="cleanup.policy", config_operation=0, value="delete"),),
            ),
        ),
        validate_only=False,
    )
    got = refused(session, 44, 1, alter)
    assert got.responses[0].resource_name == STATE
    assert got.responses[0].error_code == ErrorCode.topic_authorization_failed
    truncate = codec._empty(
        DeleteRecordsRequest,
        topics=(
            codec._empty(DeleteRecordsTopic, name=STATE, partitions=(codec._empty(DeleteRecordsPartition, offset=10),)),
        ),
    )
    got = refused(session, 21, 2, truncate)
    assert got.topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed


def test_only_readers_may_fetch_it():
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    request = codec._empty(
        FetchRequest,
        topics=(codec._empty(FetchTopic, topic=STATE, partitions=(codec._empty(FetchPartition, partition=0),)),),
    )
    got = refused(session_for("User:admin"), 1, 12, request)
    assert got.error_code == ErrorCode.topic_authorization_failed
    forwarded(session_for("User:ops"), 1, 12, request)


def _metadata_roundtrip(
    session: ProxySession, topics: object, guarded: tuple[str, uuid.UUID] = (STATE, STATE_ID)
) -> object:
    """A Metadata request forwarded, and the broker's answer (the guarded topic and another) as the client gets it."""
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic

    forwarded(session, 3, 12, codec._empty(MetadataRequest, topics=topics))
    name, topic_id = guarded
    answer = codec._empty(
        MetadataResponse,
        topics=(
            codec._empty(MetadataResponseTopic, name=name, topic_id=topic_id),
            codec._empty(MetadataResponseTopic, name="other", topic_id=uuid.uuid4()),
        ),
    )
    result = session.on_response(memoryview(bytearray(response_frame(3, 12, 3, answer))))
    raw = b"".join(bytes(p) for p in result.pieces)
    return codec.decode(MetadataResponse, raw, response_body_offset(raw, 1))[0]


def test_listings_hide_it_from_all_but_readers():
    from kio.schema.metadata.v12.request import MetadataRequestTopic

    got = _metadata_roundtrip(session_for("User:admin"), None)
    assert [t.name for t in got.topics] == ["other"]
    got = _metadata_roundtrip(session_for("User:admin"), (codec._empty(MetadataRequestTopic, name=STATE),))
    state = next(t for t in got.topics if t.name == STATE)
    assert state.error_code == ErrorCode.topic_authorization_failed and state.topic_id in (
        None,
        uuid.UUID(int=0),
    )  # zero is None in kio
    from kio.schema.metadata.v12.request import MetadataRequest

    all_topics = request_frame(3, 12, 3, codec._empty(MetadataRequest, topics=None))
    decision = session_for("User:ops").on_request(memoryview(all_topics))
    assert decision.action is Action.FORWARD and decision.pending.exchange is None  # readers: untouched


@pytest.mark.parametrize("principal", ["User:admin", "User:ops"])
def test_nobody_may_use_the_replicas_decision_transactional_id(principal):
    """With the replicas' transactional id a super-admin (or a state reader) could fence every decision the
    proxies try to commit (docs/state.md): refused as a broker refuses an id the principal may not use."""
    from kio.schema.add_offsets_to_txn.v4.request import AddOffsetsToTxnRequest
    from kio.schema.end_txn.v5.request import EndTxnRequest
    from kio.schema.init_producer_id.v5.request import InitProducerIdRequest

    from proxy.tenancy.guard import decisions_id

    session = session_for(principal)
    ours = decisions_id(STATE)
    init = codec._empty(InitProducerIdRequest, transactional_id=ours, transaction_timeout_ms=10_000)
    assert refused(session, 22, 5, init).error_code == ErrorCode.transactional_id_authorization_failed
    offsets = codec._empty(AddOffsetsToTxnRequest, transactional_id=ours, group_id="g")
    assert refused(session, 25, 4, offsets).error_code == ErrorCode.transactional_id_authorization_failed
    end = codec._empty(EndTxnRequest, transactional_id=ours, committed=True)
    assert refused(session, 26, 5, end).error_code == ErrorCode.transactional_id_authorization_failed
    # Any other transactional id, even one that names the state topic, is the broker's to judge.
    forwarded(session_for(principal), 22, 5, codec._empty(InitProducerIdRequest, transactional_id=f"my.{STATE}"))
    forwarded(session_for(principal), 22, 5, codec._empty(InitProducerIdRequest, transactional_id=ours + "x"))


# -- the quota usage topic (proxy/state/quota_sharing.py): guarded as the state topic is -------------------

USAGE = STATE + ".quota-usage"
USAGE_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")


def usage_session(principal: str, usage_id: uuid.UUID | None = USAGE_ID) -> ProxySession:
    session = session_for(principal)
    image = session.tenancy.image  # type: ignore[union-attr]
    image.guard = image.guard.guarding(USAGE, usage_id)
    return session


@pytest.mark.parametrize("principal", ["User:admin", "User:ops"])
def test_nobody_may_write_usage_reports_by_name_or_id(principal):
    """A report written through the proxy would throttle a tenant (or hide a replica's use): refused to
    everyone, the state topic's readers included; the state topic stays guarded beside it."""
    got = refused(usage_session(principal), 0, 9, produce(9, USAGE))
    assert got.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
    got = refused(usage_session(principal), 0, 13, produce(13, None, USAGE_ID))
    assert got.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
    got = refused(usage_session(principal), 0, 13, produce(13, None, STATE_ID))
    assert got.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed


def test_the_usage_topic_is_guarded_by_name_before_its_id_is_known():
    got = refused(usage_session("User:admin", usage_id=None), 0, 9, produce(9, USAGE))
    assert got.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
    forwarded(usage_session("User:admin", usage_id=None), 0, 9, produce(9, USAGE + "x"))


def test_only_readers_may_fetch_usage_reports_and_listings_hide_them():
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.metadata.v12.request import MetadataRequestTopic

    request = codec._empty(
        FetchRequest,
        topics=(codec._empty(FetchTopic, topic=USAGE, partitions=(codec._empty(FetchPartition, partition=0),)),),
    )
    assert refused(usage_session("User:admin"), 1, 12, request).error_code == ErrorCode.topic_authorization_failed
    forwarded(usage_session("User:ops"), 1, 12, request)

    for asked in (None, (codec._empty(MetadataRequestTopic, name=USAGE),)):
        got = _metadata_roundtrip(usage_session("User:admin"), asked, (USAGE, USAGE_ID))
        shown = {t.name: t.error_code for t in got.topics}
        hidden = {} if asked is None else {USAGE: ErrorCode.topic_authorization_failed}  # named: Kafka's refusal
        assert shown == {"other": 0, **hidden}


def test_guarding_a_topic_again_replaces_its_id():
    guard = StateTopicGuard(STATE).guarding(USAGE, None).guarding(USAGE, USAGE_ID)
    assert guard.names == {STATE, USAGE} and guard.ids == {USAGE_ID} and len(guard.also) == 1
