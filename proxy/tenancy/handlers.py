"""API-specific tenant logic beyond field translation, named `<handler>_request` / `<handler>_response`.

Request hooks run before the generic translation of annotated fields (so they may add *virtual*
names for it to translate) and may raise LocalAnswer; response hooks run before the reverse
translation (so they see physical names).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib
import logging
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from ..acl.model import ALL_CLUSTER_OPERATIONS
from ..acl.operations import ALL_OPERATIONS_UNSET
from ..protocol import codec, entities
from ..protocol.apikey import ApiKey
from ..quoting import cut, shown
from ..rules import tenant_rules
from . import names
from .engine import Handler, LocalAnswer, Registry, TenantCall, TenantEngine
from .fetch_deleted import answer_deleted
from .fetch_sessions import FETCH_SESSIONS, FIRST_SESSION_VERSION
from .model import (
    TenancyError,
    created_topic_for,
    derived_topic_for,
    gen_record,
    link_record,
    orphan_record,
    partitions_record,
    topic_record,
)
from .names import DESCRIBED_INTERNAL
from .regex import REGEXES, Expansion, InvalidRegex, compile_client_regex

# Kafka Streams groups (KIP-1071) live in a module of their own, registered in HANDLERS below.
from .streams import streams_group_heartbeat_request, streams_group_heartbeat_response
from .translate import HIDDEN, ZERO_UUID

log = logging.getLogger(__name__)

TOPIC, GROUP, BROKER, BROKER_LOGGER = 2, 32, 4, 8
CONSUMER = "consumer"


def _error_answer(ex: TenantCall, error: int, message: str | None = None) -> LocalAnswer:
    body = codec.error_response_body(ex.api_key, ex.version, error)
    if body is None:
        raise TenancyError(f"api {ex.api_key} v{ex.version} cannot carry error {error}")
    cls = _response_cls(ex)
    entity, _ = codec.decode(cls, body)
    if message is not None and "error_message" in entities.field_names(cls):
        entity = dataclasses.replace(entity, error_message=message)
    return LocalAnswer(entity)


def _response_cls(ex: TenantCall) -> type:
    from ..protocol.apis import response_type

    return response_type(ex.api_key, ex.version)


# -- Metadata ---------------------------------------------------------------------------------------


def metadata_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    item = entities.item_type(type(body), "topics")
    topics = body.topics
    ex.tx.describe_internal = True
    ex.tx.probe_ids = True  # a topic id the image has not learned: asked, and kept only if it is the VC's
    if topics is None or (ex.version == 0 and not topics):
        # "All topics" means all of the VC's and Kafka's internal ones: ask the broker for exactly
        # those, never the cluster's.
        links = [*sorted(engine.vc.links), *sorted(DESCRIBED_INTERNAL)]
        ex.state["all"] = True
        kwargs = {"topic_id": ZERO_UUID} if "topic_id" in entities.field_names(item) else {}
        topics = tuple(item(name=link, **kwargs) for link in links)
    changes: dict[str, Any] = {"topics": topics}
    missing = [
        t.name
        for t in topics or ()
        if t.name is not None and engine.vc.physical_topic(t.name) is None and t.name not in DESCRIBED_INTERNAL
    ]
    # Kafka answers INVALID_TOPIC_EXCEPTION for a name `Topic.validate` refuses; the placeholder the
    # broker sees may be legal (`UUID..`), so the proxy says it (metadata_response).
    ex.state["invalid"] = {name for name in missing if names.invalid_name(name) is not None}
    if hasattr(body, "allow_auto_topic_creation"):
        wanted = bool(body.allow_auto_topic_creation) and engine.policy.auto_create_topics
        wanted = wanted and engine.image.state_problem is None  # no link can be written: create nothing
        if wanted:
            access = ex.tx.access
            budget = engine.budget() if missing else None  # (counts the VC's topics: only when needed)
            for name in missing:
                if access is not None and not (access.may_create_topic(name) and access.permits("topic", name)):
                    access.denied.setdefault("topic", set()).add(name)  # answered TOPIC_AUTHORIZATION_FAILED
                    continue  # never auto-created
                why = names.refusal(engine.vc, name)
                if why is not None:  # never created; a colliding name is invalid, an internal one unknown
                    if why.error == int(ErrorCode.invalid_topic_exception):
                        ex.state["invalid"].add(name)
                    continue
                assert budget is not None
                refused = budget.admit_topic(-1)  # the broker's default partition count (counted as one)
                if refused is not None:  # never created: unknown, as with auto-creation off
                    why = cut(refused)
                    log.info("virtual cluster %s: auto-creation of %s refused: %s", engine.vc.name, shown(name), why)
                    continue
                # The generation CreateTopics would use: a deleted link's old topic is never reused.
                ex.tx.planned[name] = created_topic_for(
                    engine.vc.id, name, engine.image.generation(engine.vc.name, name)
                )
            ex.state["auto"] = {p: link for link, p in ex.tx.planned.items()}
        # Never let the broker auto-create a name the proxy did not choose: with auto-creation on, a
        # missing name that is not planned never reaches the broker and is answered by the proxy.
        changes["allow_auto_topic_creation"] = auto = wanted and bool(ex.tx.planned)
        if auto:
            unplanned = {name for name in missing if name not in ex.tx.planned}
            if unplanned:
                ex.state["unplanned"] = sorted(unplanned)
                changes["topics"] = tuple(t for t in topics if t.name not in unplanned)
    return dataclasses.replace(body, **changes)


def metadata_finish(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """Names kept from the broker (metadata_request) answered as Kafka would: invalid, not authorized
    (the VC's ACLs refuse CREATE or DESCRIBE), or unknown."""
    unplanned = ex.state.get("unplanned")
    if not unplanned:
        return body
    item = entities.item_type(type(body), "topics")
    denied = ex.tx.access.denied.get("topic", set()) if ex.tx.access is not None else set()
    added = []
    for name in unplanned:
        if name in ex.state["invalid"]:
            error = ErrorCode.invalid_topic_exception
        elif name in denied:
            error = ErrorCode.topic_authorization_failed
        else:
            error = ErrorCode.unknown_topic_or_partition
        added.append(codec._empty(item, name=name, error_code=error))
    return dataclasses.replace(body, topics=body.topics + tuple(added))


def auto_physical_name(vc_id: str, link: str) -> str:
    """`UUID.link` like every VC topic, but the same UUID for the same VC and link, so two clients
    auto-creating one topic at once end up with one physical topic and one link."""
    return derived_topic_for(vc_id, link)


def metadata_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    kept = []
    invalid = ex.state.get("invalid")
    for topic in body.topics:
        if getattr(topic, "topic_id", None) in ex.tx.probed:
            topic = _probed(engine, ex, topic)
        if invalid and ex.tx.topics.get(topic.name) in invalid:
            topic = dataclasses.replace(topic, error_code=ErrorCode.invalid_topic_exception, partitions=())
        link = ex.state.get("auto", {}).get(topic.name)
        if link is not None and int(topic.error_code) in (0, ErrorCode.leader_not_available):
            ex.writes.append(link_record(engine.vc.name, link, topic.name))
            ex.mutations += max(len(topic.partitions), 1)  # created on the VC's behalf: the mutation quota's
            if topic.partitions:
                ex.writes.append(partitions_record(topic.name, len(topic.partitions)))
        if ex.state.get("all") and int(topic.error_code) != 0:
            continue  # a dangling link (or the empty-VC placeholder) is not a topic
        if int(topic.error_code) == 0:
            if getattr(topic, "topic_id", None) is not None:
                _learn_topic_id(engine, ex, topic.name, topic.topic_id)
            if link is None:
                _learn_partitions(engine, ex, topic.name, len(topic.partitions))
        kept.append(_internal_flag(ex, topic))
    changes: dict[str, Any] = {"topics": tuple(kept)}
    if hasattr(body, "cluster_id"):
        changes["cluster_id"] = engine.vc.cluster_id
    if int(getattr(body, "cluster_authorized_operations", ALL_OPERATIONS_UNSET)) != ALL_OPERATIONS_UNSET:
        changes["cluster_authorized_operations"] = i32(ALL_CLUSTER_OPERATIONS)  # the VC's, never the proxy's own
    return dataclasses.replace(body, **changes)


def _probed(engine: TenantEngine, ex: TenantCall, topic: Any) -> Any:
    """A topic asked for by an id the image had not learned: the VC's own topic is kept (its id is learned
    below); anything else is answered as a broker answers an id it does not know."""
    physical = topic.name
    link = engine.vc.link_for(physical) if physical is not None else None
    if int(topic.error_code) == 0 and link is not None:
        access = ex.tx.access
        if access is None or access.permits("topic_id", topic.topic_id, link):
            return topic
        # Refused by the VC's ACLs: the authorization stage sets TOPIC_AUTHORIZATION_FAILED on the item.
        return dataclasses.replace(topic, name=None, partitions=())
    return dataclasses.replace(topic, error_code=ErrorCode.unknown_topic_id, name=None, partitions=())


def _internal_flag(ex: TenantCall, topic: Any) -> Any:
    """`is_internal` only for Kafka's own internal topics: a broker may flag others (KIP-1071's)."""
    if not hasattr(topic, "is_internal"):
        return topic
    return dataclasses.replace(topic, is_internal=ex.tx.internal(topic.name))


def _learn_partitions(engine: TenantEngine, ex: TenantCall, physical: str | None, count: int) -> None:
    """A VC topic's partition count, as the broker says it (the topic policy's per-VC partition limit)."""
    if physical is None or count <= 0 or physical not in engine.vc.physical_links:
        return
    if engine.image.partitions.get(physical) != count:
        record = partitions_record(physical, count)
        engine.image.apply(*record)  # like a topic id: usable at once, persisted before the reply
        ex.writes.append(record)


def _learn_topic_id(engine: TenantEngine, ex: TenantCall, physical: str | None, topic_id: Any) -> None:
    if physical is None or topic_id in (None, ZERO_UUID) or physical not in engine.vc.physical_links:
        return
    if engine.image.topic_ids.get(physical) != topic_id:
        record = topic_record(physical, topic_id)
        engine.image.apply(*record)  # a fact from the broker: usable at once, persisted before the reply
        ex.writes.append(record)


# -- Fetch, ListOffsets, OffsetForLeaderEpoch: consumers only -------------------------------------------


def fetch_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    replica = body.replica_state.replica_id if hasattr(body, "replica_state") else getattr(body, "replica_id", -1)
    if int(replica) >= 0:
        raise _error_answer(ex, int(ErrorCode.cluster_authorization_failed))  # follower fetch: brokers only
    if getattr(body, "cluster_id", None) is not None:
        body = dataclasses.replace(body, cluster_id=None)  # a KRaft replica field; never the client's
    session_id = int(getattr(body, "session_id", 0))
    if session_id != 0:
        epoch = int(body.session_epoch)
        # Owned per (broker, id): ids are unique per broker only. A connection whose broker is not known
        # yet (a bootstrap connection before its upstream) owns none.
        if FETCH_SESSIONS.owns(engine.vc.id, engine.broker(), session_id):
            ex.state["fetch_session"] = (session_id, epoch)
        elif epoch <= 0:
            # A full fetch (epoch 0: new session, -1: none) that also closes `session_id`. A broker
            # never refuses one for an unknown id: it closes the id if it has it and serves the fetch.
            # Answering FETCH_SESSION_ID_NOT_FOUND here made clients loop forever (franz-go keeps the
            # id after giving up on sessions and fetches with epoch -1: issue 18). Forward it without
            # the id: the fetch is served and nobody else's session is closed.
            body = dataclasses.replace(body, session_id=0)
        else:
            # An incremental fetch in a session this VC does not own (another tenant's, one the broker
            # evicted, or none at all): the broker's answer for an unknown id.
            log.info("virtual cluster %s: Fetch with fetch session %d it does not own", engine.vc.name, session_id)
            raise _error_answer(ex, ErrorCode.fetch_session_id_not_found)
    return body


def fetch_spliced(engine: TenantEngine, ex: TenantCall, frame: memoryview, body_offset: int) -> None:
    """Fetch responses are spliced, never decoded: the session id sits at the head of the body."""
    if ex.version >= FIRST_SESSION_VERSION:
        # The broker now: the one the answer came from (a bootstrap connection knows it once connected).
        FETCH_SESSIONS.on_response(engine.vc.id, engine.broker(), ex.state.get("fetch_session"), frame[body_offset:])


def fetch_unseen(engine: TenantEngine, ex: TenantCall, frame: memoryview, body_offset: int) -> bytes | None:
    """A session's topic the VC has deleted: answered as a broker answers a deleted topic (fetch_deleted.py)."""
    return answer_deleted(_response_cls(ex), frame, body_offset, ex.tx)


def replica_id_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if int(getattr(body, "replica_id", -1)) >= 0:
        raise TenancyError("replica requests are for brokers only")
    return body


# -- FindCoordinator -----------------------------------------------------------------------------------


def find_coordinator_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    key_type = int(getattr(body, "key_type", 0))
    if key_type not in (0, 1):  # 2 = share partition keys: broker-internal (CLUSTER_ACTION)
        if getattr(body, "coordinator_keys", None) is not None:  # v4+: the error per key, as a broker answers
            raise LocalAnswer(_refused_coordinators(ex, body.coordinator_keys))
        raise _error_answer(ex, int(ErrorCode.cluster_authorization_failed))
    kind = ex.state["kind"] = "group" if key_type == 0 else "txn"
    changes = {}
    if hasattr(body, "key") and body.key is not None:
        changes["key"] = ex.tx.to_physical(kind, body.key)
    if getattr(body, "coordinator_keys", None):
        changes["coordinator_keys"] = tuple(ex.tx.to_physical(kind, k) for k in body.coordinator_keys)
    return dataclasses.replace(body, **changes)


def _refused_coordinators(ex: TenantCall, keys: Any) -> Any:
    """Kafka's answer to a caller without CLUSTER_ACTION asking for share coordinators: each key refused."""
    cls = _response_cls(ex)
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
        log.info("virtual cluster %s: %s refused: %s", engine.vc.name, _api_name(ex), cut(exc))
        raise _error_answer(ex, int(ErrorCode.invalid_regular_expression), str(exc)) from None


def _api_name(ex: TenantCall) -> str:
    return ex.rule.api


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


def txn_regex_kind(engine: TenantEngine, ex: TenantCall, value: str | None, to_physical: bool) -> str | None:
    if value is None or not to_physical:
        return value
    # The broker evaluates it, wrapped in the VC's fixed prefix. Checked first: a pattern that does
    # not stand on its own (`x)|(.*`) would otherwise escape the group around it.
    try:
        compile_client_regex(value, "TransactionalIdPattern")
    except InvalidRegex as exc:
        log.info("virtual cluster %s: %s refused: %s", engine.vc.name, _api_name(ex), cut(exc))
        raise _error_answer(ex, int(ErrorCode.invalid_regular_expression), str(exc)) from None
    return f"{engine.vc.id}\\.(?:{value})"


SPECIAL_KINDS = {
    "subscription": subscription_kind,
    "assignment": assignment_kind,
    "topic_regex": topic_regex_kind,
    "txn_regex": txn_regex_kind,
}


# -- Topic administration --------------------------------------------------------------------------------


def create_topics_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """Links are created exactly once (docs/state.md, "Creating topics").

    The physical name is derived from (VC id, link, generation), so concurrent creators on any
    replica ask the broker for the same name and the broker picks one winner; the others get
    TOPIC_ALREADY_EXISTS, as they would from Kafka. Checked in Kafka's order, each answered per topic:
    a name twice in one request is INVALID_REQUEST; without CREATE (on the topic or the cluster)
    TOPIC_AUTHORIZATION_FAILED, before anything else is said about the name; while the state topic
    cannot take changes POLICY_VIOLATION and the reason; then Kafka's rules for names; then the VC's
    topic policy (configs, partitions, topics and partitions per VC: POLICY_VIOLATION naming what).
    """
    counts = collections.Counter(t.name for t in body.topics)
    local: list[tuple[str, int, str]] = []  # (link, error, message) answered by the proxy
    for name in dict.fromkeys(t.name for t in body.topics):  # first-seen order, once per name
        if counts[name] > 1:
            local.append((name, int(ErrorCode.invalid_request), "Duplicate topic name."))
    problem = engine.image.state_problem
    access = ex.tx.access
    budget = engine.budget()
    created: dict[str, str] = {}
    partitions: dict[str, int] = {}  # physical -> partitions asked for (<= 0: the broker's default)
    topics = []
    for topic in body.topics:
        link = topic.name
        if counts[link] > 1:
            continue
        if access is not None and not access.may_create_topic(link):  # CREATE on the topic or the cluster
            local.append((link, int(ErrorCode.topic_authorization_failed), "Authorization failed."))
            continue
        if problem is not None:
            local.append((link, int(ErrorCode.policy_violation), f"topic changes are refused: {problem}"))
            continue
        why = names.refusal(engine.vc, link)  # Kafka's rules for names, in the VC
        if why is not None:
            log.info("virtual cluster %s: CreateTopics refused %s: %s", engine.vc.name, shown(link), cut(why.message))
            local.append((link, why.error, why.message))
            continue
        physical = engine.vc.physical_topic(link)
        if physical is None:  # (an existing link: the broker answers TOPIC_ALREADY_EXISTS, as Kafka first does)
            count = _partitions_asked(topic)
            configs = [(c.name, c.value) for c in topic.configs or ()]
            unknown = engine.topic_policy.unknown_config(configs)
            if unknown is not None:
                local.append((link, int(ErrorCode.invalid_config), unknown))
                continue
            refused = budget.admit_topic(count, configs)
            if refused is not None:
                log.info("virtual cluster %s: CreateTopics refused %s: %s", engine.vc.name, shown(link), cut(refused))
                local.append((link, int(ErrorCode.policy_violation), refused))
                continue
            physical = created_topic_for(engine.vc.id, link, engine.image.generation(engine.vc.name, link))
            created[physical] = link
            partitions[physical] = count
        ex.tx.topics[physical] = link
        topics.append(dataclasses.replace(topic, name=physical))
    ex.state["created"] = created
    ex.state["partitions"] = partitions
    ex.state["create_local"] = local
    ex.state["validate_only"] = bool(getattr(body, "validate_only", False))
    ex.state["skip_generic"] = True  # names are physical now: the generic pass must not translate again
    if local and not topics:
        cls = _response_cls(ex)
        raise LocalAnswer(codec._empty(cls, topics=_create_topics_local(cls, local)))
    return dataclasses.replace(body, topics=tuple(topics))


def _partitions_asked(topic: Any) -> int:
    """A CreatableTopic's partition count: its manual assignment's, else num_partitions (-1: the default)."""
    assignments = getattr(topic, "assignments", None)
    return len(assignments) if assignments else int(topic.num_partitions)


def _create_topics_local(cls: type, local: list[tuple[str, int, str]]) -> tuple[Any, ...]:
    item = entities.item_type(cls, "topics")
    fields = entities.field_names(item)
    results = []
    for link, error, message in local:
        kwargs: dict[str, Any] = {"name": link, "error_code": ErrorCode(error)}
        if "error_message" in fields:
            kwargs["error_message"] = message
        for name in ("num_partitions", "replication_factor"):
            if name in fields:
                kwargs[name] = type(getattr(codec._empty(item, name=link), name))(-1)
        results.append(codec._empty(item, **kwargs))
    return tuple(results)


def create_topics_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if ex.state.get("validate_only"):
        return body
    for topic in body.topics:
        link = ex.state["created"].get(topic.name)
        if link is None:
            continue
        error = int(topic.error_code)
        if error == ErrorCode.topic_already_exists and not topic.name.endswith("!"):
            # The derived name exists but no link points to it: a racing creator whose link is on its
            # way (writing it again changes nothing), or one whose link write failed (this repairs it).
            ex.writes.append(link_record(engine.vc.name, link, topic.name))
            continue
        if error != 0:
            continue
        ex.writes.append(link_record(engine.vc.name, link, topic.name))
        count = int(getattr(topic, "num_partitions", -1))  # v5+: what the broker created
        count = count if count > 0 else ex.state["partitions"].get(topic.name, -1)
        if count > 0:
            ex.writes.append(partitions_record(topic.name, count))
        if getattr(topic, "topic_id", None) not in (None, ZERO_UUID):
            ex.writes.append(topic_record(topic.name, topic.topic_id))
            ex.tx.new_ids.add(topic.topic_id)  # the client may see its new topic's id at once
    return body


def create_topics_finish(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    local = ex.state.get("create_local")
    if not local:
        return body
    return dataclasses.replace(body, topics=body.topics + _create_topics_local(type(body), local))


def delete_topics_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """Deleting a topic in a VC deletes the link; the physical topic goes only with its last link, and
    only if the VC's policy.delete_physical_topic says so (by default it stays, as KIP-1134 describes:
    an operator deletes it from kafka-cluster); a VC that shares a topic with others (owner or not) only
    removes its own link. DELETE on the topic is checked first, for every
    topic, whether the broker or the proxy answers it: refused, it goes to the broker as a name that
    exists nowhere and comes back TOPIC_AUTHORIZATION_FAILED (proxy/acl/access.py)."""
    problem = engine.image.state_problem
    if problem is not None:
        raise LocalAnswer(_delete_topics_refused(engine, ex, body, f"topic changes are refused: {problem}"))
    local: list[tuple[str, str, Any]] = []  # (link, physical, topic id) removed without the broker
    forward_links: dict[str, str] = {}  # physical -> link for those the broker deletes
    orphaned: list[str] = []  # physical topics this delete leaves behind

    def decide(link: str | None, topic_id: Any) -> bool:
        """True: keep in the forwarded request."""
        vc = engine.vc
        physical = vc.physical_topic(link) if link is not None else engine.image.physical_for_id(topic_id)
        if physical is None or physical not in vc.physical_links:
            return True  # unknown: the broker answers UNKNOWN_TOPIC(_ID) for the placeholder
        link = link or vc.link_for(physical)
        if not _acl_allows(ex, "topic", link):
            return True  # the generic pass sends a placeholder; TOPIC_AUTHORIZATION_FAILED on the way back
        others = [x for x in engine.image.links_to(physical) if x != (vc.name, link)]
        if others or not engine.policy.delete_physical_topic(vc.name):
            local.append((link, physical, engine.image.topic_ids.get(physical)))  # type: ignore[arg-type]
            if not others:  # the topic stays with no link: the VC's until deleted (its limits count it)
                orphaned.append(physical)
            return False
        forward_links[physical] = link  # type: ignore[assignment]
        return True

    if hasattr(body, "topics") and body.topics:
        body = dataclasses.replace(body, topics=tuple(t for t in body.topics if decide(t.name, t.topic_id)))
    elif hasattr(body, "topic_names"):
        body = dataclasses.replace(body, topic_names=tuple(n for n in body.topic_names if decide(n, None)))
    ex.state["local"] = local
    ex.state["forward"] = forward_links
    for link, _physical, _ in local:
        ex.writes.extend(_unlink(engine, link))
    now = time.time()
    ex.writes.extend(orphan_record(physical, engine.vc.name, now) for physical in orphaned)
    remaining = body.topics if hasattr(body, "topics") else body.topic_names
    if local and not remaining:
        raise LocalAnswer(_delete_topics_local(ex, _response_cls(ex)))
    return body


def _acl_allows(ex: TenantCall, kind: str, name: str | None) -> bool:
    """What the request's API needs of `kind` (proxy/acl/access.py), on `name`; no ACLs: allowed."""
    access = ex.tx.access
    if access is None or name is None:
        return True
    from ..acl.access import RESOURCE_OF_KIND

    op = access.need.ops.get(kind)
    return op is None or access.allows(op, RESOURCE_OF_KIND[kind], name)


def _unlink(engine: TenantEngine, link: str) -> list[Any]:
    """A deleted link's records: the next generation first, so that no replica ever sees the link
    gone while the old generation's name (a topic that may still exist) is current."""
    generation = engine.image.generation(engine.vc.name, link) + 1
    return [gen_record(engine.vc.name, link, generation), link_record(engine.vc.name, link, None)]


def _delete_topics_refused(engine: TenantEngine, ex: TenantCall, body: Any, message: str) -> Any:
    """Every topic refused while the state topic cannot take changes: POLICY_VIOLATION, except those
    the caller may not delete anyway (TOPIC_AUTHORIZATION_FAILED, as Kafka checks that first)."""
    cls = _response_cls(ex)
    item = entities.item_type(cls, "responses")
    asked = (
        [(t.name, t.topic_id) for t in body.topics]
        if getattr(body, "topics", None)
        else [(n, None) for n in getattr(body, "topic_names", ())]
    )
    results = []
    for name, topic_id in asked:
        link = name
        if link is None and topic_id is not None and engine.image.owns_topic_id(engine.vc, topic_id):
            physical = engine.image.physical_for_id(topic_id)
            link = engine.vc.link_for(physical) if physical is not None else None
        allowed = _acl_allows(ex, "topic", link) if link is not None else ex.tx.access is None
        error = ErrorCode.policy_violation if allowed else ErrorCode.topic_authorization_failed
        why = message if allowed else "Authorization failed."
        results.append(
            entities.build(item, name=name, error_code=error, topic_id=topic_id or ZERO_UUID, error_message=why)
        )
    return codec._empty(cls, responses=tuple(results))


def _delete_topics_local(ex: TenantCall, cls: type) -> Any:
    item = entities.item_type(cls, "responses")
    results = [
        entities.build(item, name=link, error_code=ErrorCode.none, topic_id=topic_id or ZERO_UUID)
        for link, _physical, topic_id in ex.state["local"]
    ]
    return codec._empty(cls, responses=tuple(results))


def delete_topics_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    for result in body.responses:
        physical = result.name or (
            engine.image.physical_for_id(result.topic_id) if getattr(result, "topic_id", None) else None
        )
        link = ex.state["forward"].get(physical) if physical else None
        if link is not None and int(result.error_code) == 0:
            ex.writes.extend(_unlink(engine, link))
            ex.writes.append(topic_record(physical, None))
            if physical in engine.image.partitions:
                ex.writes.append(partitions_record(physical, None))
    if ex.state["local"]:
        extra = _delete_topics_local(ex, type(body)).responses
        # Local results are already virtual: keep them out of the reverse translation.
        ex.state["local_results"] = extra
    return body


def delete_topics_finish(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    extra = ex.state.get("local_results")
    return dataclasses.replace(body, responses=body.responses + extra) if extra else body


# -- Configs --------------------------------------------------------------------------------------------


OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def configs_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on the VC's topics and groups, each
    resource checked as Kafka does before the broker sees it: the ACL first (ApiKey.DESCRIBE_CONFIGS or
    ApiKey.ALTER_CONFIGS on the topic or group: TOPIC_/GROUP_AUTHORIZATION_FAILED), then for changes to a
    topic its ownership (only the VC that owns a shared topic may reconfigure it) and the VC's topic
    policy (POLICY_VIOLATION naming the key, as Kafka's AlterConfigPolicy). A refused resource goes to
    the broker as a topic that exists nowhere, so the answer keeps the API's shape; its error is set
    on the way back (configs_response)."""
    refused: dict[str, tuple[int, str, int, str | None]] = {}  # placeholder -> (type, name, error, message)
    alter = ex.api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)
    # Kafka's internal topics are described with their configs (kafka-topics --describe asks for every
    # listed topic's), never reconfigured: an alter names a topic that exists nowhere.
    ex.tx.describe_internal = not alter
    resources = []
    for resource in body.resources:
        rtype, name = int(resource.resource_type), resource.resource_name
        why = _config_refusal(engine, ex, rtype, name, resource, alter)
        if why is not None:
            fake = f"{uuid.uuid4()}.refused"
            refused[fake] = (rtype, name, *why)
            rtype, name = TOPIC, fake
        elif rtype == TOPIC:
            name = ex.tx.topic(name)
        else:
            name = engine.vc.physical_group(name)
        resources.append(dataclasses.replace(resource, resource_type=i8(rtype), resource_name=name))
    ex.state["refused"] = refused
    return dataclasses.replace(body, resources=tuple(resources))


def _config_refusal(
    engine: TenantEngine, ex: TenantCall, rtype: int, name: str, resource: Any, alter: bool
) -> tuple[int, str | None] | None:
    if rtype not in (TOPIC, GROUP):
        # Broker, logger and client-metrics configs describe the physical cluster: never forwarded.
        return int(ErrorCode.cluster_authorization_failed), "not available in a virtual cluster"
    kind = "topic" if rtype == TOPIC else "group"
    if not _acl_allows(ex, kind, name):
        error = ErrorCode.topic_authorization_failed if rtype == TOPIC else ErrorCode.group_authorization_failed
        return int(error), None  # Kafka's words: the error's own message
    if rtype != TOPIC or not alter:
        return None
    physical = engine.vc.physical_topic(name)
    if physical is None:
        return None  # unknown: the broker answers UNKNOWN_TOPIC_OR_PARTITION for the placeholder
    if not engine.image.owns(engine.vc, physical):
        return int(ErrorCode.topic_authorization_failed), _NOT_OWNER.format(name=name)
    if ex.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        ops = (OP_SET, OP_APPEND)  # a value to check; DELETE and SUBTRACT need the key settable only
        changes = [(c.name, c.value if int(c.config_operation) in ops else None) for c in resource.configs]
    else:
        changes = [(c.name, c.value) for c in resource.configs]
    unknown = engine.topic_policy.unknown_config(changes)
    if unknown is not None:
        return int(ErrorCode.invalid_config), unknown
    why = engine.topic_policy.configs_refusal(changes)
    if why is not None:
        log.info("virtual cluster %s: config change of topic %s refused: %s", engine.vc.name, shown(name), cut(why))
        return int(ErrorCode.policy_violation), why
    return None


_NOT_OWNER = (
    "Topic '{name}' is shared with other virtual clusters: only the one that owns it (or the physical "
    "cluster's operators) may delete, truncate, reconfigure or grow it."
)


def configs_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    field_name = "results" if hasattr(body, "results") else "responses"
    refused = ex.state["refused"]
    out = []
    for result in getattr(body, field_name):
        rtype, name = int(result.resource_type), result.resource_name
        if name in refused:
            rtype, name, error, message = refused[name]
            result = dataclasses.replace(
                result,
                error_code=ErrorCode(error),
                error_message=message,
                **({"configs": ()} if hasattr(result, "configs") else {}),
            )
        elif rtype == TOPIC:
            name = ex.tx.virtual_topic(name)
        elif rtype == GROUP:
            name = ex.tx.to_virtual("group", name)
        out.append(dataclasses.replace(result, resource_type=i8(rtype), resource_name=name))
    return dataclasses.replace(body, **{field_name: tuple(out)})


# -- DeleteRecords and CreatePartitions: the owner's, within the VC's policy ---------------------------


def _owned_topics(engine: TenantEngine, ex: TenantCall, body: Any, check: Any = None) -> Any:
    """Each topic translated here (so the generic pass is skipped): the ACL first (ex.tx.topic: a
    placeholder refused on the way back), then ownership, then `check(topic, physical)` (a refusal
    message: POLICY_VIOLATION). Refused items go as placeholders and get their error on the way back."""
    refused: dict[str, tuple[int, str]] = {}
    topics = []
    for topic in body.topics:
        physical = ex.tx.topic(topic.name)
        if physical == engine.vc.physical_topic(topic.name):  # allowed and linked
            why: tuple[int, str] | None = None
            if not engine.image.owns(engine.vc, physical):
                why = (int(ErrorCode.topic_authorization_failed), _NOT_OWNER.format(name=topic.name))
            elif check is not None:
                message = check(topic, physical)
                if message is not None:
                    why = (int(ErrorCode.policy_violation), message)
            if why is not None:
                name = shown(topic.name)
                log.info("virtual cluster %s: %s refused %s: %s", engine.vc.name, ex.rule.api, name, cut(why[1]))
                physical = f"{uuid.uuid4()}.{topic.name}"
                ex.tx.topics[physical] = topic.name
                refused[physical] = why
        topics.append(dataclasses.replace(topic, name=physical))
    ex.state["refused"] = refused
    ex.state["skip_generic"] = True
    return dataclasses.replace(body, topics=tuple(topics))


def _refused_items(ex: TenantCall, items: tuple[Any, ...]) -> tuple[Any, ...]:
    refused = ex.state.get("refused") or {}
    return tuple(entities.with_error(i, *refused[i.name]) if i.name in refused else i for i in items)


def delete_records_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    return _owned_topics(engine, ex, body)


def delete_records_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    return dataclasses.replace(body, topics=_refused_items(ex, body.topics))


def create_partitions_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """CreatePartitions: the owner's only, and within the VC's policy (partitions per topic and per VC:
    POLICY_VIOLATION). A count that does not grow the topic is the broker's INVALID_PARTITIONS."""
    budget = engine.budget()
    grown: dict[str, int] = {}

    def check(topic: Any, physical: str) -> str | None:
        why = budget.admit_partitions(engine.image.partitions.get(physical), int(topic.count))
        if why is None:
            grown[physical] = int(topic.count)
        return why

    body = _owned_topics(engine, ex, body, check)
    ex.state["grown"] = {} if getattr(body, "validate_only", False) else grown
    return body


def create_partitions_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    for result in body.results:
        count = ex.state["grown"].get(result.name)
        if count is not None and int(result.error_code) == 0:
            ex.writes.append(partitions_record(result.name, count))
    return dataclasses.replace(body, results=_refused_items(ex, body.results))


# -- DescribeCluster (KIP-700) ------------------------------------------------------------------------------


def describe_cluster_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if int(getattr(body, "endpoint_type", 1)) != 1:
        raise _error_answer(ex, int(ErrorCode.cluster_authorization_failed))  # controllers are not proxied
    ex.state["ops"] = bool(body.include_cluster_authorized_operations)
    return body


def describe_cluster_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    # A VC without ACLs allows its members everything: all seven, as a broker reports them to such a
    # caller; with ACLs, the authorization stage recomputes the field from them (one definition for both).
    ops = ALL_CLUSTER_OPERATIONS if ex.state.get("ops") else ALL_OPERATIONS_UNSET
    return dataclasses.replace(body, cluster_id=engine.vc.cluster_id, cluster_authorized_operations=i32(ops))


# -- DescribeTopicPartitions (KIP-966) -----------------------------------------------------------------------


def describe_topic_partitions_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    ex.tx.describe_internal = True
    if body.topics:
        return body
    item = entities.item_type(type(body), "topics")
    links = [*sorted(engine.vc.links), *sorted(DESCRIBED_INTERNAL)]
    ex.state["all"] = True
    return dataclasses.replace(body, topics=tuple(item(name=link) for link in links))


def describe_topic_partitions_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    topics = body.topics
    if ex.state.get("all"):
        topics = tuple(t for t in topics if int(t.error_code) == 0)
    for topic in topics:
        if int(topic.error_code) == 0:
            _learn_topic_id(engine, ex, topic.name, topic.topic_id)
    return dataclasses.replace(body, topics=tuple(_internal_flag(ex, t) for t in topics))


# -- ListConfigResources (KIP-1142) -----------------------------------------------------------------------


def list_config_resources_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """A VC lists only its topics and groups; broker, logger and client-metrics resources are the
    physical cluster's. v0 lists client-metrics resources only: nothing for a VC."""
    if not hasattr(body, "resource_types"):
        raise LocalAnswer(codec._empty(_response_cls(ex)))
    wanted = [int(t) for t in body.resource_types] or [TOPIC, GROUP]
    kept = tuple(i8(t) for t in wanted if t in (TOPIC, GROUP))
    if not kept:
        raise LocalAnswer(codec._empty(_response_cls(ex)))
    return dataclasses.replace(body, resource_types=kept)


def list_config_resources_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    out = []
    for resource in body.config_resources:
        kind = {TOPIC: "topic", GROUP: "group"}.get(int(getattr(resource, "resource_type", -1)))
        if kind is not None and ex.tx.visible(kind, resource.resource_name):
            out.append(dataclasses.replace(resource, resource_name=ex.tx.to_virtual(kind, resource.resource_name)))
    return dataclasses.replace(body, config_resources=tuple(out))


# -- registration: each handler under the name tenant.yaml gives it (checked both ways at load) ----------

HANDLERS: dict[str, Handler] = {
    "metadata": Handler(request=metadata_request, response=metadata_response, finish=metadata_finish),
    "fetch": Handler(request=fetch_request, spliced=fetch_spliced, unseen=fetch_unseen),
    "replica_id": Handler(request=replica_id_request),
    "find_coordinator": Handler(request=find_coordinator_request, response=find_coordinator_response),
    "join_group": Handler(request=join_group_request, response=join_group_response),
    "sync_group": Handler(request=sync_group_request, response=sync_group_response),
    "describe_groups": Handler(response=describe_groups_response),
    "consumer_group_heartbeat": Handler(request=consumer_group_heartbeat_request),
    "share_group_heartbeat": Handler(request=share_group_heartbeat_request),
    "group_assignment": Handler(request=group_assignment_request),
    "streams_group_heartbeat": Handler(
        request=streams_group_heartbeat_request, response=streams_group_heartbeat_response
    ),
    "create_topics": Handler(
        request=create_topics_request, response=create_topics_response, finish=create_topics_finish
    ),
    "delete_topics": Handler(
        request=delete_topics_request, response=delete_topics_response, finish=delete_topics_finish
    ),
    "configs": Handler(request=configs_request, response=configs_response),
    "delete_records": Handler(request=delete_records_request, response=delete_records_response),
    "create_partitions": Handler(request=create_partitions_request, response=create_partitions_response),
    "describe_cluster": Handler(request=describe_cluster_request, response=describe_cluster_response),
    "describe_topic_partitions": Handler(
        request=describe_topic_partitions_request, response=describe_topic_partitions_response
    ),
    "list_config_resources": Handler(request=list_config_resources_request, response=list_config_resources_response),
}


@functools.cache
def registry() -> Registry:
    """The handlers and special kinds, checked against tenant.yaml (ValueError if they do not match)."""
    reg = Registry(HANDLERS, SPECIAL_KINDS)
    reg.check(tenant_rules())
    return reg
