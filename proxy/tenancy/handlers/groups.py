"""Groups: FindCoordinator, the classic protocol's consumer-protocol bytes, and KIP-848/KIP-932 heartbeats
with their regex and name subscriptions."""

from __future__ import annotations

import dataclasses
import importlib
import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from ...protocol import codec, entities
from ...protocol.apikey import ApiKey
from ...quoting import cut
from ..engine import LocalAnswer, TenantCall, TenantEngine
from ..regex import REGEXES, Expansion, InvalidRegex
from ..translate import HIDDEN
from .calls import api_name, error_answer, response_cls

log = logging.getLogger(__name__)

CONSUMER = "consumer"  # the classic protocol type whose bytes name topics


# -- FindCoordinator -----------------------------------------------------------------------------------


def find_coordinator_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    key_type = int(getattr(body, "key_type", 0))
    if key_type not in (0, 1):  # 2 = share partition keys: broker-internal (CLUSTER_ACTION)
        if getattr(body, "coordinator_keys", None) is not None:  # v4+: the error per key, as a broker answers
            raise LocalAnswer(_refused_coordinators(ex, body.coordinator_keys))
        raise error_answer(ex, int(ErrorCode.cluster_authorization_failed))
    kind = ex.state["kind"] = "group" if key_type == 0 else "txn"
    changes = {}
    if hasattr(body, "key") and body.key is not None:
        changes["key"] = ex.tx.to_physical(kind, body.key)
    if getattr(body, "coordinator_keys", None):
        changes["coordinator_keys"] = tuple(ex.tx.to_physical(kind, k) for k in body.coordinator_keys)
    return dataclasses.replace(body, **changes)


def _refused_coordinators(ex: TenantCall, keys: Any) -> Any:
    """Kafka's answer to a caller without CLUSTER_ACTION asking for share coordinators: each key refused."""
    cls = response_cls(ex)
    item = entities.item_type(cls, "coordinators")
    error = ErrorCode.cluster_authorization_failed
    refused = tuple(
        codec._empty(
            item,
            key=k,
            node_id=i32(-1),
            host="",
            port=i32(-1),
            error_code=error,
            error_message=codec.CLUSTER_AUTHORIZATION_MESSAGE,
        )
        for k in keys
    )
    return codec._empty(cls, coordinators=refused)


def find_coordinator_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if not getattr(body, "coordinators", None):
        return body
    kind = ex.state.get("kind", "group")
    return dataclasses.replace(
        body, coordinators=tuple(dataclasses.replace(c, key=ex.tx.to_virtual(kind, c.key)) for c in body.coordinators)
    )


# -- Classic groups: consumer-protocol bytes ------------------------------------------------------------


def _consumer_protocol(module: str, data: bytes, to_physical: bool, ex: TenantCall) -> bytes:
    if not data or len(data) < 2:
        return data
    version = int.from_bytes(data[:2], "big", signed=True)
    use = min(max(version, 0), 3)
    cls_name = "ConsumerProtocolSubscription" if module == "subscription" else "ConsumerProtocolAssignment"
    mod = importlib.import_module(f"kio.schema.consumer_protocol_{module}.v{use}.data")
    cls = getattr(mod, cls_name)
    try:
        entity, _ = codec.decode(cls, data, 2)
    except codec.CodecError:
        return data  # not consumer-protocol bytes after all: leave opaque
    translate = ex.tx.to_physical if to_physical else ex.tx.to_virtual
    if module == "subscription":
        entity = dataclasses.replace(entity, topics=tuple(translate("topic", t) for t in entity.topics))
        if hasattr(entity, "owned_partitions"):
            entity = dataclasses.replace(
                entity,
                owned_partitions=tuple(
                    dataclasses.replace(p, topic=translate("topic", p.topic)) for p in entity.owned_partitions
                ),
            )
    else:
        entity = dataclasses.replace(
            entity,
            assigned_partitions=tuple(
                dataclasses.replace(p, topic=translate("topic", p.topic)) for p in entity.assigned_partitions
            ),
        )
    return use.to_bytes(2, "big") + codec.encode(entity)


def subscription_kind(engine: TenantEngine, ex: TenantCall, value: bytes, to_physical: bool) -> bytes:
    return _consumer_protocol("subscription", value, to_physical, ex)


def assignment_kind(engine: TenantEngine, ex: TenantCall, value: bytes, to_physical: bool) -> bytes:
    return _consumer_protocol("assignment", value, to_physical, ex)


def join_group_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    engine.group_protocols[body.group_id] = body.protocol_type
    if body.protocol_type != CONSUMER:
        return body
    ex.state["consumer"] = True
    return dataclasses.replace(
        body,
        protocols=tuple(
            dataclasses.replace(p, metadata=subscription_kind(engine, ex, p.metadata, True)) for p in body.protocols
        ),
    )


def join_group_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if not ex.state.get("consumer"):
        return body
    return dataclasses.replace(
        body,
        members=tuple(
            dataclasses.replace(m, metadata=subscription_kind(engine, ex, m.metadata, False)) for m in body.members
        ),
    )


def sync_group_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    protocol_type = getattr(body, "protocol_type", None) or engine.group_protocols.get(body.group_id)
    if protocol_type != CONSUMER:
        return body
    ex.state["consumer"] = True
    return dataclasses.replace(
        body,
        assignments=tuple(
            dataclasses.replace(a, assignment=assignment_kind(engine, ex, a.assignment, True)) for a in body.assignments
        ),
    )


def sync_group_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if not ex.state.get("consumer"):
        return body
    return dataclasses.replace(body, assignment=assignment_kind(engine, ex, body.assignment, False))


def describe_groups_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    groups = []
    for group in body.groups:
        if group.protocol_type == CONSUMER:
            group = dataclasses.replace(
                group,
                members=tuple(
                    dataclasses.replace(
                        m,
                        member_metadata=subscription_kind(engine, ex, m.member_metadata, False),
                        member_assignment=assignment_kind(engine, ex, m.member_assignment, False),
                    )
                    for m in group.members
                ),
            )
        groups.append(group)
    return dataclasses.replace(body, groups=tuple(groups))


# -- Regexes ------------------------------------------------------------------------------------------


def topic_regex_kind(engine: TenantEngine, ex: TenantCall, value: str | None, to_physical: bool) -> str | None:
    """KIP-848 regex subscriptions, confined to the VC.

    The broker evaluates the regex over every physical topic, and physical names carry random
    UUIDs, so no rewrite of the pattern alone can confine it to one VC. The proxy evaluates the
    pattern over the VC's link names itself (RE2, cached, budgeted: proxy/tenancy/regex.py) and sends
    the alternation of the matching physical names; heartbeats re-send it when the VC's topics
    change. Unmatched: a name that exists nowhere. A pattern RE2 refuses is INVALID_REGULAR_EXPRESSION.
    """
    if not value:
        return value  # None: unchanged since the last heartbeat; "": no regex (the broker's meanings)
    if not to_physical:
        return REGEXES.regex_for(engine.vc, value) or HIDDEN
    return _expand(engine, ex, value).pattern


def _expand(engine: TenantEngine, ex: TenantCall, regex: str) -> Expansion:
    try:
        what = "SourceTopicRegex" if ex.api_key == ApiKey.STREAMS_GROUP_HEARTBEAT else "SubscribedTopicRegex"
        return REGEXES.expand(engine.vc, regex, what)
    except InvalidRegex as exc:
        log.info("virtual cluster %s: %s refused: %s", engine.vc.name, api_name(ex), cut(exc))
        raise error_answer(ex, int(ErrorCode.invalid_regular_expression), str(exc)) from None


MAX_REGEX_GROUPS = 1024  # regex subscriptions a connection tracks (least recently used dropped)


def consumer_group_heartbeat_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """Clients send their regex once; the proxy's expansion is a list of topics, so when the VC gains
    or loses a matching topic (or the VC's matching budget let only part of it be computed) the
    proxy re-sends the regex on the member's next heartbeat."""
    group = body.group_id
    ex.tx.keep_unlearned_ids = True  # the assignment names the group's own topics (translate.Translation)
    ex.tx.to_physical("group", group)  # READ on the group first, as Kafka: before any answer about the regex
    body = _names_again(engine, body)
    subscriptions = engine.regex_subscriptions
    if int(body.member_epoch) < 0:  # leaving the group
        subscriptions.pop(group, None)
        return body
    regex = getattr(body, "subscribed_topic_regex", None)
    if regex is not None:
        if regex == "":
            subscriptions.pop(group, None)  # the member dropped its regex
            return body
        subscriptions[group] = (regex, _expand(engine, ex, regex).pattern)
    elif group in subscriptions:
        regex, sent = subscriptions[group]
        current = _expand(engine, ex, regex).pattern
        if current != sent:
            subscriptions[group] = (regex, current)
            body = dataclasses.replace(body, subscribed_topic_regex=regex)
    else:
        return body
    subscriptions.move_to_end(group)
    while len(subscriptions) > MAX_REGEX_GROUPS:
        subscriptions.popitem(last=False)
    return body


def share_group_heartbeat_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """As ConsumerGroupHeartbeat's names: sent again when the VC's topics behind them change."""
    ex.tx.keep_unlearned_ids = True  # the assignment names the group's own topics (translate.Translation)
    ex.tx.to_physical("group", body.group_id)  # READ on the group first, as Kafka
    return _names_again(engine, body)


def _names_again(engine: TenantEngine, body: Any) -> Any:
    """The member's SubscribedTopicNames, or the ones it sent before when a name's topic in the VC is another
    physical topic now (re-created, deleted, created): proxy/tenancy/subscribed_names.py."""
    names = getattr(body, "subscribed_topic_names", None)
    send = engine.name_subscriptions.names_to_send(engine.vc, body.group_id, int(body.member_epoch), names)
    if send is not None and names is None:
        return dataclasses.replace(body, subscribed_topic_names=send)
    return body


def group_assignment_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """ConsumerGroupDescribe: an assignment names only the group's own topics, so an
    id the proxy has not learned yet is shown as it is (translate.Translation.keep_unlearned_ids)."""
    ex.tx.keep_unlearned_ids = True
    return body
