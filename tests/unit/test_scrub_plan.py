"""Error messages in tenant answers are scrubbed of physical names at any depth (proxy/tenancy/engine.py,
`scrub_messages`), walking only the fields that can hold one: checked against every response type the proxy
knows, field by field, and on a Produce answer."""

from __future__ import annotations

import dataclasses
import datetime
import typing

from kio.schema.produce.v9.response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from kio.static.primitive import i16, i32, i32Timedelta, i64

from proxy.protocol.apis import response_type
from proxy.protocol.kafka_versions import VERSIONS
from proxy.tenancy.engine import _entity_classes, _scrub_plan, scrub_messages


def _carries_message(cls: type) -> bool:
    """Naively: a *message field here or in any entity type below."""
    hints = typing.get_type_hints(cls)
    return any(
        f.name.endswith("message") or any(_carries_message(c) for c in _entity_classes(hints[f.name]))
        for f in dataclasses.fields(cls)
    )


def _reachable(cls: type) -> list[type]:
    hints = typing.get_type_hints(cls)
    below = [c for f in dataclasses.fields(cls) for c in _entity_classes(hints[f.name])]
    return [cls, *(d for c in below for d in _reachable(c))]


def test_the_plan_enters_exactly_the_fields_below_which_a_message_can_be_for_every_response():
    checked = 0
    for key, (_, low, high, _) in VERSIONS.items():
        for version in range(low, high + 1):
            for cls in _reachable(response_type(key, version)):
                messages, nested = _scrub_plan(cls)
                hints = typing.get_type_hints(cls)
                assert set(messages) == {f.name for f in dataclasses.fields(cls) if f.name.endswith("message")}
                for f in dataclasses.fields(cls):
                    inner = _entity_classes(hints[f.name])
                    if inner and not f.name.endswith("message"):
                        assert (f.name in nested) == any(_carries_message(c) for c in inner), (cls, f.name)
                checked += 1
    assert checked > 800  # every entity of every version of every API


class Scrub:
    """A translation's scrub: the physical prefix out of a message."""

    def scrub(self, text: str | None) -> str | None:
        return None if text is None else text.replace("0000-uuid.", "")


def _produce(message: str | None, record_message: str | None) -> ProduceResponse:
    partition = PartitionProduceResponse(
        index=i32(0),
        error_code=i16(87) if message else i16(0),
        base_offset=i64(-1),
        record_errors=(BatchIndexAndErrorMessage(batch_index=i32(0), batch_index_error_message=record_message),),
        error_message=message,
    )
    return ProduceResponse(
        responses=(TopicProduceResponse(name="0000-uuid.orders", partition_responses=(partition,)),),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
    )


def test_a_produce_answer_s_messages_are_scrubbed_at_every_depth_and_a_clean_one_is_kept_as_it_is():
    dirty = _produce("0000-uuid.orders: invalid record", "in 0000-uuid.orders")
    scrubbed = scrub_messages(dirty, Scrub())  # type: ignore[arg-type]
    partition = scrubbed.responses[0].partition_responses[0]
    assert partition.error_message == "orders: invalid record"
    assert partition.record_errors[0].batch_index_error_message == "in orders"
    assert scrubbed.responses[0].name == "0000-uuid.orders"  # names are the translation's, not the scrub's
    clean = _produce(None, None)
    assert scrub_messages(clean, Scrub()) is clean  # type: ignore[arg-type]
