"""Kafka's checks on the names a client sends, for the proxy to make on the name as sent (sans-I/O).

A VC's group ids and topic names are renamed (`<vc-uuid>.<id>`, `UUID.name`) before they reach the broker, so the
broker never checks the name the client sent: the empty group id, which Kafka refuses for most group APIs,
arrives non-empty and is accepted (issue 56). Each rule here is one of Kafka 4.2's checks, with the error (and
message) its broker answers; each API's rules are registered in its catalogue entry (proxy/catalogue.py,
`name_rules`), and docs/tenancy.md lists them. Directly and through a VC compared:
tests/integration/test_name_rules.py.

* `Whole`: the request is answered without the broker, with the API's error in its top-level field (or in each
  item, `shape`, where the API has no top-level one). The tenancy stage asks after the VC's ACLs, as Kafka
  authorizes before it validates, and before anything is forwarded or granted to the forwarder.
* `Items`: each name that fails is answered in its own item, the others as the broker answers them (read-only
  APIs: the renamed item goes to the broker, and its answer is replaced).
* `Resources`: a config resource's name, asked by the configs handler (proxy/tenancy/handlers/configs.py).

Where Kafka accepts the empty group id (OffsetCommit, OffsetFetch, DescribeGroups, DeleteGroups, FindCoordinator,
AddOffsetsToTxn, DescribeShareGroupOffsets) there is no rule: the VC's own empty group is used. Transactional ids
need none: the empty one is sent as itself (proxy/tenancy/translate.py) and the broker refuses it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from . import codec, entities

# (request, response class, error, the error of a topic the broker answers for before the name: unknown or not
# authorized, else None) -> response, for `Whole.shape`
TopicError = Callable[[str], int | None]
Shape = Callable[[Any, type, ErrorCode, TopicError], Any]
Verdict = tuple[ErrorCode, str | None]  # Kafka's error for a name, and its message (None: the error's own)
Check = Callable[[str | None], Verdict | None]


def empty_name(error: ErrorCode, message: str | None = None) -> Check:
    """The empty name refused (Kafka's group coordinator: `isGroupIdNotEmpty`)."""
    return lambda name: (error, message) if name == "" else None


KAFKA_MAX_TOPIC = 249  # Kafka's Topic.MAX_NAME_LENGTH
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")  # fixed pattern over a bounded name: no tenant regex here


def topic_name_problem(name: str, max_length: int = KAFKA_MAX_TOPIC) -> str | None:
    """Kafka's `Topic.validate`, in Kafka 4.2's words (None: a legal name). A VC's own names are shorter
    (proxy/tenancy/names.py passes its limit)."""
    if not name:
        return "the empty string is not allowed"
    if name in (".", ".."):
        return f"'{name}' is not allowed"
    if len(name) > max_length:
        return f"the length of '{name}' is longer than the max allowed length {max_length}"
    if not _LEGAL_TOPIC.fullmatch(name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def invalid_topic(name: str | None) -> Verdict | None:
    """A topic name `Topic.validate` refuses: INVALID_TOPIC_EXCEPTION, in Kafka's words. (A name a VC refuses for
    its length only, past the VC's limit, is refused by the broker too: renamed, it is past Kafka's.)"""
    reason = topic_name_problem(name) if name is not None else None
    return None if reason is None else (ErrorCode.invalid_topic_exception, f"Topic name is invalid: {reason}")


def invalid_described_topic(name: str | None) -> Verdict | None:
    """DescribeTopicPartitions answers a name `Topic.validate` refuses INVALID_TOPIC_EXCEPTION, without a message."""
    return (ErrorCode.invalid_topic_exception, None) if invalid_topic(name) is not None else None


_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?")  # fixed pattern over a bounded string


def invalid_software(value: str | None) -> Verdict | None:
    """KIP-511: ApiVersions' client software name and version (v3+) as Kafka's ApiVersionsRequest.isValid wants
    them: letters, digits, '.' and '-', starting and ending with a letter or digit."""
    if value is None or _SOFTWARE.fullmatch(value):
        return None
    return ErrorCode.invalid_request, None


def _named(request: Any, path: str) -> list[Any]:
    """The names at `path` of a request: "field", "array[]" (of strings) or "array[].field"."""
    array, brackets, member = path.partition("[]")
    if not brackets:
        return [getattr(request, path, None)]
    values = getattr(request, array, None) or ()
    return [getattr(v, member.lstrip(".")) for v in values] if member else list(values)


@dataclasses.dataclass(frozen=True)
class Whole:
    """The request is refused when a name at `field` (a path: `_named`) fails `check`: the error (and message) at
    the top, or `shape`."""

    field: str
    check: Check
    shape: Shape | None = None  # the refusal of an API with no top-level error (an error per item)
    echo: tuple[str, ...] = ()  # request fields the broker's refusal repeats (JoinGroup's member_id)

    def refusal(self, request: Any, response_cls: type, topic_error: TopicError) -> Any | None:
        verdict = next(filter(None, map(self.check, _named(request, self.field))), None)
        if verdict is None:
            return None
        error, message = verdict
        if self.shape is not None:
            return self.shape(request, response_cls, error, topic_error)
        fields = entities.field_names(response_cls)
        values: dict[str, Any] = {"error_code": error}
        if "error_message" in fields:
            values["error_message"] = message
        values.update({f: getattr(request, f) for f in self.echo if f in fields})
        return codec._empty(response_cls, **values)


@dataclasses.dataclass(frozen=True)
class Items:
    """Each name of the request (`names`: "array[]" of strings or "array[].field") that fails `check` is answered
    in the response's `items` item that names it (by `field`), in place of the broker's answer about the name it
    was sent as (read-only APIs: the VC's own renamed id, or a topic that exists nowhere). `fresh`: the item is
    built anew (Kafka's refusal has nothing else); else the error is set in the item and in everything in it."""

    names: str
    items: str
    field: str
    check: Check
    fresh: bool = True

    def refused(self, request: Any) -> dict[str, Verdict]:
        return {n: verdict for n in _named(request, self.names) if (verdict := self.check(n)) is not None}

    def fix(self, request: Any, response: Any) -> Any:
        refused = self.refused(request)
        if not refused:
            return response
        item_cls = entities.item_type(type(response), self.items)
        out = []
        for item in getattr(response, self.items):
            verdict = refused.get(getattr(item, self.field))
            if verdict is not None and not _authorization(getattr(item, "error_code", 0)):
                error, message = verdict
                item = (
                    entities.build(item_cls, **{self.field: getattr(item, self.field), "error_code": error})
                    if self.fresh
                    else entities.with_error(item, error, message)
                )
            out.append(item)
        return dataclasses.replace(response, **{self.items: tuple(out)})


@dataclasses.dataclass(frozen=True)
class Resources:
    """Config resources (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs): a topic's name as `Topic.validate`
    wants it, a group's not empty; the empty name is Kafka's default resource, which no alter may name. Asked by
    the configs handler for each resource, after the VC's ACLs (proxy/tenancy/handlers/configs.py)."""

    alter: bool

    def refusal(self, resource_type: int, name: str) -> Verdict | None:
        if name == "" and resource_type in (TOPIC_RESOURCE, GROUP_RESOURCE):
            if self.alter:
                kind = "topic" if resource_type == TOPIC_RESOURCE else "group"
                return ErrorCode.invalid_request, f"Default {kind} resources are not allowed."
            if resource_type == GROUP_RESOURCE:
                return ErrorCode.invalid_request, "Group name must not be empty"
        return invalid_topic(name) if resource_type == TOPIC_RESOURCE else None


TOPIC_RESOURCE, GROUP_RESOURCE = 2, 32  # Kafka's ConfigResource.Type
NameRule = Whole | Items | Resources


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


def refuses(rules: tuple[NameRule, ...], request: Any) -> bool:
    """Would a rule refuse the whole request? (Where the broker's own answer is wanted, forwarded to it.)"""
    return any(isinstance(rule, Whole) and any(map(rule.check, _named(request, rule.field))) for rule in rules)


def refuses_any(rules: tuple[NameRule, ...], names: Iterable[str]) -> bool:
    """Would a whole-request rule refuse one of these names (read off a request that was not decoded)?"""
    return any(isinstance(rule, Whole) and rule.check(name) is not None for rule in rules for name in names)


def has_items(rules: tuple[NameRule, ...]) -> bool:
    return any(isinstance(rule, Items) for rule in rules)


def resource_refusal(rules: tuple[NameRule, ...], resource_type: int, name: str) -> Verdict | None:
    """Kafka's refusal of a config resource's name, where the API has such a rule."""
    for rule in rules:
        if isinstance(rule, Resources) and (verdict := rule.refusal(resource_type, name)) is not None:
            return verdict
    return None


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


def every_topic(request: Any, cls: type, error: ErrorCode, _topic_error: TopicError) -> Any:
    """Every topic asked about, with the error (DescribeTopicPartitions' answer when its handler fails)."""
    item = entities.item_type(cls, "topics")
    return codec._empty(cls, topics=tuple(entities.build(item, name=t.name, error_code=error) for t in request.topics))


# -- the rules, as Kafka 4.2's broker makes them (registered per API in proxy/catalogue.py) ----------------

INVALID_GROUP = Whole("group_id", empty_name(ErrorCode.invalid_group_id))
# JoinGroup's refusal repeats the member id the client sent.
INVALID_GROUP_JOIN = Whole("group_id", empty_name(ErrorCode.invalid_group_id), echo=("member_id",))
INVALID_GROUP_TXN_OFFSETS = Whole("group_id", empty_name(ErrorCode.invalid_group_id), shape=txn_offset_commit)
# The share-group offset APIs (KIP-932) say it in words too.
INVALID_GROUP_SHARE_OFFSETS = Whole("group_id", empty_name(ErrorCode.invalid_group_id, "The group id is invalid."))
# The heartbeats of KIP-848, KIP-932 and KIP-1071 groups: the request is invalid.
EMPTY_GROUP_HEARTBEAT = Whole("group_id", empty_name(ErrorCode.invalid_request, "GroupId can't be empty."))
# The describes of those groups: each empty id answered in its own item.
EMPTY_GROUP_DESCRIBED = Items("group_ids[]", "groups", "group_id", empty_name(ErrorCode.invalid_group_id))
# DescribeProducers validates each topic's name: every partition asked about gets the error.
INVALID_TOPIC_PRODUCERS = Items("topics[].name", "topics", "name", invalid_topic, fresh=False)
INVALID_TOPIC_DESCRIBED = Items("topics[].name", "topics", "name", invalid_described_topic)
# Kafka 4.2's DescribeTopicPartitions handler fails on the empty name: every topic of the request is answered so.
EMPTY_TOPIC_DESCRIBED = Whole("topics[].name", empty_name(ErrorCode.unknown_server_error), shape=every_topic)
# ApiVersions v3+ (KIP-511), which the versions stage answers from the broker's cached answer: a request Kafka
# would refuse goes to the broker instead, which answers it (INVALID_REQUEST, and no versions).
CLIENT_SOFTWARE = (Whole("client_software_name", invalid_software), Whole("client_software_version", invalid_software))
DESCRIBED_CONFIGS = Resources(alter=False)
ALTERED_CONFIGS = Resources(alter=True)
