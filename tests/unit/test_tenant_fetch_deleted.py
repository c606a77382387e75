"""A topic the VC deleted, still in a fetch session, is answered as a broker answers a deleted topic (issue 25:
franz-go's TestIssue434 ran in 1-5 s through a VC against 15 s directly)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from kio.schema.errors import ErrorCode

from proxy.protocol import entities
from proxy.protocol.apis import response_type
from proxy.tenancy import fetch_sessions
from proxy.tenancy.fetch_sessions import FetchSessionOwners
from proxy.tenancy.handlers import fetch as fetch_handlers
from proxy.tenancy.model import link_record, topic_record
from proxy.tenancy.translate import ZERO_UUID

from .test_tenant_fetch_sessions import fetch
from .test_tenant_rewrite import TOPIC_ID, answer, forward, make_image, tenant_session

FETCH = 1
SESSION = 4242
RECORDS = b"\x00" * 61  # bytes the client must not get: the records of a topic its VC no longer has


@pytest.fixture(autouse=True)
def fresh_table(monkeypatch):
    table = FetchSessionOwners()
    monkeypatch.setattr(fetch_sessions, "FETCH_SESSIONS", table)
    monkeypatch.setattr(fetch_handlers, "FETCH_SESSIONS", table)


def response(version: int, topics: list[tuple[object, int]]):
    """A broker's Fetch answer in session SESSION: (topic name or id, partition error) each, with records."""
    cls = response_type(FETCH, version)
    topic_cls = entities.hints(cls)["responses"].__args__[0]
    part_cls = entities.hints(topic_cls)["partitions"].__args__[0]
    key = "topic_id" if version >= 13 else "topic"
    items = tuple(
        entities.build(
            topic_cls,
            **{key: ident},
            partitions=(
                entities.build(
                    part_cls,
                    partition_index=3,
                    error_code=ErrorCode(error),
                    high_watermark=1,
                    records=None if error else RECORDS,
                ),
            ),
        )
        for ident, error in topics
    )
    return entities.build(cls, error_code=ErrorCode.none, session_id=SESSION, responses=items)


@pytest.mark.parametrize("version", [13, 16, 18])
@pytest.mark.parametrize("broker_error", [ErrorCode.none, ErrorCode.unknown_topic_or_partition])
def test_a_deleted_topic_in_a_fetch_session_is_unknown_under_its_id(version, broker_error):
    image, physical = make_image()
    session = tenant_session(image)
    forward(session, FETCH, version, fetch(version, 0, 0))
    other_id = uuid.uuid4()
    other = f"{uuid.uuid4()}.payments"
    image.apply(*link_record("team-a", "payments", other))
    image.apply(*topic_record(other, other_id))
    answer(session, FETCH, version, response(version, []))
    # The client deletes `orders`: the link and the id go (the physical topic may stay: KIP-1134's unlink).
    image.apply(*link_record("team-a", "orders", None))
    image.apply(*topic_record(physical["team-a"], None))

    forward(session, FETCH, version, fetch(version, SESSION, 1), cid=2)  # incremental: names no topic
    got, _ = answer(session, FETCH, version, response(version, [(TOPIC_ID, broker_error), (other_id, 0)]), cid=2)

    gone, kept = got.responses
    # Kafka answers a session partition of a deleted topic UNKNOWN_TOPIC_OR_PARTITION under the id the session
    # holds (KafkaApis.handleFetchRequest: the session knows the name, the metadata cache does not), no records.
    assert gone.topic_id == TOPIC_ID != ZERO_UUID
    (partition,) = gone.partitions
    assert partition.partition_index == 3
    assert partition.error_code == ErrorCode.unknown_topic_or_partition
    assert partition.high_watermark == -1 and partition.records is None
    # The VC's other topics are untouched, records and all.
    assert kept.topic_id == other_id
    assert kept.partitions[0].error_code == ErrorCode.none
    assert bytes(kept.partitions[0].records) == RECORDS


def test_a_topic_still_linked_passes_as_it_is():
    image, _ = make_image()
    session = tenant_session(image)
    forward(session, FETCH, 18, fetch(18, 0, 0))
    answer(session, FETCH, 18, response(18, []))
    forward(session, FETCH, 18, fetch(18, SESSION, 1), cid=2)
    got, _ = answer(session, FETCH, 18, response(18, [(TOPIC_ID, 0)]), cid=2)
    assert got.responses[0].topic_id == TOPIC_ID
    assert bytes(got.responses[0].partitions[0].records) == RECORDS


def test_a_deleted_topic_by_name_loses_its_records_too():
    """Fetch before v13 names topics: an unlinked one's records never reach the client either."""
    image, physical = make_image()
    session = tenant_session(image)
    forward(session, FETCH, 12, fetch(12, 0, 0))
    answer(session, FETCH, 12, response(12, []))
    image.apply(*link_record("team-a", "orders", None))
    forward(session, FETCH, 12, fetch(12, SESSION, 1), cid=2)
    got, _ = answer(session, FETCH, 12, response(12, [(physical["team-a"], 0)]), cid=2)
    (partition,) = got.responses[0].partitions
    assert partition.error_code == ErrorCode.unknown_topic_or_partition and partition.records is None


@pytest.mark.parametrize("version", [13, 18])
def test_an_id_the_vc_does_not_own_stays_the_clients_own_in_later_answers_of_its_session(version):
    """A fetch session keeps the placeholder a request sent for an id the VC does not own (a topic it deleted):
    the broker answers it UNKNOWN_TOPIC_ID in every later response, and the client must see its own id there,
    as a broker shows it the id it added."""
    image, physical = make_image()
    session = tenant_session(image)
    image.apply(*link_record("team-a", "orders", None))
    image.apply(*topic_record(physical["team-a"], None))
    sent = forward(session, FETCH, version, fetch_topic(version, TOPIC_ID))
    (placeholder,) = [t.topic_id for t in sent.topics]
    assert placeholder != TOPIC_ID
    for cid in (1, 2):  # the exchange that added it, then an incremental one that names nothing
        if cid == 2:
            forward(session, FETCH, version, fetch(version, SESSION, 1), cid=cid)
        got, _ = answer(
            session, FETCH, version, response(version, [(placeholder, ErrorCode.unknown_topic_id)]), cid=cid
        )
        assert [t.topic_id for t in got.responses] == [TOPIC_ID]
        assert got.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
    # Another VC's request for the same id goes as another placeholder, and never maps back to it.
    other = forward(tenant_session(image, "User:team-b-user"), FETCH, version, fetch_topic(version, TOPIC_ID))
    assert other.topics[0].topic_id not in (TOPIC_ID, placeholder)


def fetch_topic(version: int, topic_id: uuid.UUID):
    """A full fetch (a new session) of partition 3 of `topic_id`."""
    from proxy.protocol.apis import request_type

    cls = request_type(FETCH, version)
    topic_cls = entities.item_type(cls, "topics")
    part_cls = entities.item_type(topic_cls, "partitions")
    partition = entities.build(part_cls, partition=3, fetch_offset=0, partition_max_bytes=1 << 20)
    topic = entities.build(topic_cls, topic_id=topic_id, partitions=(partition,))
    return entities.build(cls, replica_id=-1, session_id=0, session_epoch=0, topics=(topic,))


@pytest.mark.parametrize("version", [13, 18])
def test_a_deleted_topic_named_again_in_its_session_is_one_entry_as_at_a_broker(version):
    """franz-go names a deleted topic's partition again in its session: through the VC it goes as a placeholder
    that the broker's session holds beside the id (two entries for one partition: 'duplicate partition'). A
    broker has the one entry, the session's, answered UNKNOWN_TOPIC_OR_PARTITION."""
    image, physical = make_image()
    session = tenant_session(image)
    forward(session, FETCH, version, fetch(version, 0, 0))
    answer(session, FETCH, version, response(version, []))
    image.apply(*link_record("team-a", "orders", None))
    image.apply(*topic_record(physical["team-a"], None))
    again = fetch_topic(version, TOPIC_ID)
    again = dataclasses.replace(again, session_id=SESSION, session_epoch=1)
    (placeholder,) = [t.topic_id for t in forward(session, FETCH, version, again, cid=2).topics]
    for cid in (2, 3):
        if cid == 3:
            forward(session, FETCH, version, fetch(version, SESSION, 2), cid=cid)
        both = [(placeholder, ErrorCode.unknown_topic_id), (TOPIC_ID, ErrorCode.none)]
        got, _ = answer(session, FETCH, version, response(version, both), cid=cid)
        (entry,) = got.responses
        assert entry.topic_id == TOPIC_ID
        assert [p.error_code for p in entry.partitions] == [ErrorCode.unknown_topic_or_partition]
