"""Kafka's checks on the names a client sends, made by the proxy on the name as sent (sans-I/O).

A VC's group id is renamed `<vc-uuid>.<id>` before it reaches the broker, so the broker never sees the id the
client sent: the empty group id, which Kafka refuses for most group APIs, arrives non-empty and is accepted
(issue 56). Each rule here is one of Kafka 4.2's checks, as the broker answers it (directly and through a VC
compared: tests/integration/test_name_rules.py); each API's rules are registered in its catalogue entry
(proxy/catalogue.py, `name_rules`) and docs/tenancy.md lists them.

* `Whole`: the request is answered without the broker, with the API's error in its top-level field (or in
  each item where the API has no top-level one, as TxnOffsetCommit); made after the VC's ACLs, as Kafka
  authorizes before it validates.
* `Items`: each listed name that fails is answered in its own item, the others as the broker answers them.

Where Kafka accepts the empty group id (OffsetCommit, OffsetFetch, DescribeGroups, DeleteGroups,
FindCoordinator, AddOffsetsToTxn, DescribeShareGroupOffsets) there is no rule: the VC's own empty group is used.
Transactional ids need none: the empty one is sent as itself (translate.py) and the broker refuses it.
Topic names are checked by `names.invalid_name` (CreateTopics, Metadata).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol import codec, entities

# (request, response class, error, the error of a topic the broker answers for before the name: unknown or not
# authorized, else None) -> response, for `Whole.shape`
Shape = Callable[[Any, type, ErrorCode, Callable[[str], int | None]], Any]
TopicError = Callable[[str], int | None]


def empty(name: str | None) -> bool:
    """Kafka's group coordinator: a group id must not be empty (`isGroupIdNotEmpty`)."""
    return name is not None and name == ""


@dataclasses.dataclass(frozen=True)
class Whole:
    """The request is refused when its `field` fails `invalid`: `error` (and `message`) at the top, or `shape`."""

    field: str
    error: ErrorCode
    message: str | None = None
    shape: Shape | None = None  # the refusal of an API with no top-level error (an error per item)
    echo: tuple[str, ...] = ()  # request fields the broker's refusal repeats (JoinGroup's member_id)
    invalid: Callable[[str | None], bool] = empty

    def refusal(self, request: Any, response_cls: type, topic_error: TopicError) -> Any | None:
        if not self.invalid(getattr(request, self.field, None)):
            return None
        if self.shape is not None:
            return self.shape(request, response_cls, self.error, topic_error)
        names = entities.field_names(response_cls)
        values: dict[str, Any] = {"error_code": self.error}
        if "error_message" in names:
            values["error_message"] = self.message
        values.update({f: getattr(request, f) for f in self.echo if f in names})
        return codec._empty(response_cls, **values)


@dataclasses.dataclass(frozen=True)
class Items:
    """Each name of the request's `names` array that fails `invalid` is answered with `error` in the response's
    `items` item that names it (found by `field`), in place of the broker's answer about the renamed id."""

    names: str
    items: str
    field: str
    error: ErrorCode
    invalid: Callable[[str | None], bool] = empty

    def refused(self, request: Any) -> set[str]:
        return {n for n in getattr(request, self.names, None) or () if self.invalid(n)}

    def fix(self, request: Any, response: Any) -> Any:
        refused = self.refused(request)
        if not refused:
            return response
        item_cls = entities.item_type(type(response), self.items)
        fixed = tuple(
            entities.build(item_cls, **{self.field: name, "error_code": self.error})
            if (name := getattr(item, self.field)) in refused and not _authorization(item.error_code)
            else item
            for item in getattr(response, self.items)
        )
        return dataclasses.replace(response, **{self.items: fixed})


NameRule = Whole | Items


def _authorization(error: int) -> bool:
    """An item the VC's ACLs refused keeps that answer: Kafka authorizes before it validates."""
    return int(error) in (ErrorCode.group_authorization_failed, ErrorCode.topic_authorization_failed)


def _no_topic_error(_name: str) -> int | None:
    return None


def refusal(
    rules: tuple[NameRule, ...], request: Any, response_cls: type, topic_error: TopicError = _no_topic_error
) -> Any | None:
    """The response refusing the whole request for a name it sent, or None. `topic_error`: what the broker answers
    about a topic it checks before the name (TxnOffsetCommit: one the caller may not read, or that is unknown)."""
    for rule in rules:
        if isinstance(rule, Whole) and (answer := rule.refusal(request, response_cls, topic_error)) is not None:
            return answer
    return None


def fix_items(rules: tuple[NameRule, ...], request: Any, response: Any) -> Any:
    """The response with each refused item answered as Kafka answers it."""
    for rule in rules:
        if isinstance(rule, Items):
            response = rule.fix(request, response)
    return response


def has_items(rules: tuple[NameRule, ...]) -> bool:
    return any(isinstance(rule, Items) for rule in rules)


# -- the shapes of refusals with an error per item -------------------------------------------------------


def txn_offset_commit(request: Any, cls: type, error: ErrorCode, topic_error: TopicError) -> Any:
    """Kafka's answer: each partition of a topic the caller may not read or that is unknown with that error (the
    broker checks topics first), every other partition with `error` (TxnOffsetCommitRequest.getErrorResponse)."""
    topic_cls = entities.item_type(cls, "topics")
    partition_cls = entities.item_type(topic_cls, "partitions")
    return codec._empty(
        cls,
        topics=tuple(
            entities.build(
                topic_cls,
                name=t.name,
                partitions=tuple(
                    entities.build(
                        partition_cls, partition_index=p.partition_index, error_code=ErrorCode(first or error)
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
            for first in (topic_error(t.name),)
        ),
    )


# -- the rules, as Kafka 4.2's broker makes them (registered per API in proxy/catalogue.py) ----------------

INVALID_GROUP = Whole("group_id", ErrorCode.invalid_group_id)
# JoinGroup's refusal repeats the member id the client sent.
INVALID_GROUP_JOIN = Whole("group_id", ErrorCode.invalid_group_id, echo=("member_id",))
INVALID_GROUP_TXN_OFFSETS = Whole("group_id", ErrorCode.invalid_group_id, shape=txn_offset_commit)
# The share-group offset APIs (KIP-932) say it in words too.
INVALID_GROUP_SHARE_OFFSETS = Whole("group_id", ErrorCode.invalid_group_id, "The group id is invalid.")
# The heartbeats of KIP-848, KIP-932 and KIP-1071 groups: the request is invalid.
EMPTY_GROUP_HEARTBEAT = Whole("group_id", ErrorCode.invalid_request, "GroupId can't be empty.")
# The describes of those groups: each empty id answered in its own item.
EMPTY_GROUP_DESCRIBED = Items("group_ids", "groups", "group_id", ErrorCode.invalid_group_id)
