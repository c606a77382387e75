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
import typing
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from ..protocol import codec
from ..rules import tenant_rules
from . import names
from .engine import Handler, LocalAnswer, Registry, TenantCall, TenantEngine
from .fetch_sessions import FETCH_SESSION_ID_NOT_FOUND, FETCH_SESSIONS, FIRST_SESSION_VERSION
from .model import TenancyError, created_topic_for, derived_topic_for, gen_record, link_record, topic_record
from .regex import REGEXES, Expansion, InvalidRegex, compile_client_regex

# Kafka Streams groups (KIP-1071) live in a module of their own, registered in HANDLERS below.
from .streams import streams_group_heartbeat_request, streams_group_heartbeat_response
from .translate import HIDDEN, ZERO_UUID

log = logging.getLogger(__name__)

TOPIC, GROUP, BROKER, BROKER_LOGGER = 2, 32, 4, 8
CONSUMER = "consumer"
ALL_OPERATIONS_UNSET = -2147483648
# Cluster operations a VC principal may use through the proxy (AclOperation codes): CREATE (topics),
# DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE. Reported by DescribeCluster (KIP-700).
TENANT_CLUSTER_OPERATIONS = sum(1 << op for op in (5, 8, 10, 12))


def _item_type(cls: type, field_name: str) -> type:
    hint = typing.get_type_hints(cls)[field_name]
    args = typing.get_args(hint)
    inner = args[0] if typing.get_origin(hint) is tuple else hint
    if typing.get_origin(inner) is not None:  # Optional[tuple[...]]
        inner = typing.get_args(typing.get_args(inner)[0])[0]
    return inner


def _error_answer(ex: TenantCall, error: int, message: str | None = None) -> LocalAnswer:
    body = codec.error_response_body(ex.api_key, ex.version, error)
    if body is None:
        raise TenancyError(f"api {ex.api_key} v{ex.version} cannot carry error {error}")
    cls = _response_cls(ex)
    entity, _ = codec.decode(cls, body)
    if message is not None and "error_message" in {f.name for f in dataclasses.fields(cls)}:
        entity = dataclasses.replace(entity, error_message=message)
    return LocalAnswer(entity)


def _response_cls(ex: TenantCall) -> type:
    from ..protocol.apis import response_type

    return response_type(ex.api_key, ex.version)


# -- Metadata ---------------------------------------------------------------------------------------


def metadata_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    item = _item_type(type(body), "topics")
    topics = body.topics
    if topics is None or (ex.version == 0 and not topics):
        # "All topics" means all of the VC's: ask the broker for exactly those, never the cluster's.
        links = sorted(engine.vc.links) or [f"{uuid.uuid4()}.none"]
        ex.state["all"] = True
        kwargs = {"topic_id": ZERO_UUID} if "topic_id" in {f.name for f in dataclasses.fields(item)} else {}
        topics = tuple(item(name=link, **kwargs) for link in links)
    changes: dict[str, Any] = {"topics": topics}
    missing = [t.name for t in topics or () if t.name is not None and engine.vc.physical_topic(t.name) is None]
    # Kafka answers INVALID_TOPIC_EXCEPTION for a name `Topic.validate` refuses; the placeholder the
    # broker sees may be legal (`UUID..`), so the proxy says it (metadata_response).
    ex.state["invalid"] = {name for name in missing if names.invalid_name(name) is not None}
    if hasattr(body, "allow_auto_topic_creation"):
        wanted = bool(body.allow_auto_topic_creation) and engine.policy.auto_create_topics
        wanted = wanted and engine.image.state_problem is None  # no link can be written: create nothing
        if wanted:
            access = ex.tx.access
            for name in missing:
                if access is not None and not (access.may_create_topic(name) and access.permits("topic", name)):
                    access.denied.setdefault("topic", set()).add(name)  # answered TOPIC_AUTHORIZATION_FAILED
                    continue  # never auto-created
                why = names.refusal(engine.vc, name)
                if why is not None:  # never created; a colliding name is invalid, an internal one unknown
                    if why.error == int(ErrorCode.invalid_topic_exception):
                        ex.state["invalid"].add(name)
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
    item = _item_type(type(body), "topics")
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


LEADER_NOT_AVAILABLE = 5  # what a freshly auto-created topic reports first


def metadata_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    kept = []
    invalid = ex.state.get("invalid")
    for topic in body.topics:
        if invalid and ex.tx.topics.get(topic.name) in invalid:
            topic = dataclasses.replace(topic, error_code=ErrorCode.invalid_topic_exception, partitions=())
        link = ex.state.get("auto", {}).get(topic.name)
        if link is not None and int(topic.error_code) in (0, LEADER_NOT_AVAILABLE):
            ex.writes.append(link_record(engine.vc.name, link, topic.name))
        if ex.state.get("all") and int(topic.error_code) != 0:
            continue  # a dangling link (or the empty-VC placeholder) is not a topic
        if int(topic.error_code) == 0 and getattr(topic, "topic_id", None) is not None:
            _learn_topic_id(engine, ex, topic.name, topic.topic_id)
        kept.append(dataclasses.replace(topic, is_internal=False) if hasattr(topic, "is_internal") else topic)
    changes: dict[str, Any] = {"topics": tuple(kept)}
    if hasattr(body, "cluster_id"):
        changes["cluster_id"] = engine.vc.cluster_id
    return dataclasses.replace(body, **changes)


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
        # Owned per (broker, id): ids are unique per broker only. A connection whose broker is not known
        # yet (a bootstrap connection before its upstream) owns none.
        if not FETCH_SESSIONS.owns(engine.vc.id, engine.broker(), session_id):
            # Not this VC's (another tenant's, or none at all): the broker's answer for an unknown id.
            log.info("virtual cluster %s: Fetch with fetch session %d it does not own", engine.vc.name, session_id)
            raise _error_answer(ex, FETCH_SESSION_ID_NOT_FOUND)
        ex.state["fetch_session"] = (session_id, int(body.session_epoch))
    return body


def fetch_spliced(engine: TenantEngine, ex: TenantCall, frame: memoryview, body_offset: int) -> None:
    """Fetch responses are spliced, never decoded: the session id sits at the head of the body."""
    if ex.version >= FIRST_SESSION_VERSION:
        # The broker now: the one the answer came from (a bootstrap connection knows it once connected).
        FETCH_SESSIONS.on_response(engine.vc.id, engine.broker(), ex.state.get("fetch_session"), frame[body_offset:])


def replica_id_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if int(getattr(body, "replica_id", -1)) >= 0:
        raise TenancyError("replica requests are for brokers only")
    return body


# -- FindCoordinator -----------------------------------------------------------------------------------


def find_coordinator_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    key_type = int(getattr(body, "key_type", 0))
    if key_type not in (0, 1):  # 2 = share partition keys: broker-internal (CLUSTER_ACTION)
        raise _error_answer(ex, int(ErrorCode.cluster_authorization_failed))
    kind = ex.state["kind"] = "group" if key_type == 0 else "txn"
    changes = {}
    if hasattr(body, "key") and body.key is not None:
        changes["key"] = ex.tx.to_physical(kind, body.key)
    if getattr(body, "coordinator_keys", None):
        changes["coordinator_keys"] = tuple(ex.tx.to_physical(kind, k) for k in body.coordinator_keys)
    return dataclasses.replace(body, **changes)


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
        what = "SourceTopicRegex" if ex.rule.api == "StreamsGroupHeartbeat" else "SubscribedTopicRegex"
        return REGEXES.expand(engine.vc, regex, what)
    except InvalidRegex as exc:
        log.info("virtual cluster %s: %s refused: %s", engine.vc.name, _api_name(ex), exc)
        raise _error_answer(ex, int(ErrorCode.invalid_regular_expression), str(exc)) from None


def _api_name(ex: TenantCall) -> str:
    return ex.rule.api


MAX_REGEX_GROUPS = 1024  # regex subscriptions a connection tracks (least recently used dropped)


def consumer_group_heartbeat_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """Clients send their regex once; the proxy's expansion is a list of topics, so when the VC gains
    or loses a matching topic (or the VC's matching budget let only part of it be computed) the
    proxy re-sends the regex on the member's next heartbeat."""
    group = body.group_id
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


def txn_regex_kind(engine: TenantEngine, ex: TenantCall, value: str | None, to_physical: bool) -> str | None:
    if value is None or not to_physical:
        return value
    # The broker evaluates it, wrapped in the VC's fixed prefix. Checked first: a pattern that does
    # not stand on its own (`x)|(.*`) would otherwise escape the group around it.
    try:
        compile_client_regex(value, "TransactionalIdPattern")
    except InvalidRegex as exc:
        log.info("virtual cluster %s: %s refused: %s", engine.vc.name, _api_name(ex), exc)
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
    TOPIC_ALREADY_EXISTS, as they would from Kafka. A name twice in one request is INVALID_REQUEST
    for that name, as Kafka answers it; while the state topic cannot take changes, every topic is
    refused with POLICY_VIOLATION and the reason.
    """
    body, refused = names.refuse_create_topics(engine.vc, body)  # Kafka's rules for names, in the VC
    counts = collections.Counter(t.name for t in body.topics)
    local: list[tuple[str, int, str]] = refused  # (link, error, message) answered by the proxy
    for name in dict.fromkeys(t.name for t in body.topics):  # first-seen order, once per name
        if counts[name] > 1:
            local.append((name, int(ErrorCode.invalid_request), "Duplicate topic name."))
    problem = engine.image.state_problem
    created: dict[str, str] = {}
    topics = []
    for topic in body.topics:
        link = topic.name
        if counts[link] > 1:
            continue
        if problem is not None:
            local.append((link, int(ErrorCode.policy_violation), f"topic changes are refused: {problem}"))
            continue
        access = ex.tx.access
        if access is not None and not access.may_create_topic(link):  # CREATE on the topic or the cluster
            local.append((link, int(ErrorCode.topic_authorization_failed), "Authorization failed."))
            continue
        physical = engine.vc.physical_topic(link)
        if physical is None:
            try:
                physical = created_topic_for(engine.vc.id, link, engine.image.generation(engine.vc.name, link))
            except TenancyError:
                physical = f"{link}!"  # not a legal topic name: the broker answers INVALID_TOPIC_EXCEPTION
            created[physical] = link
        ex.tx.topics[physical] = link
        topics.append(dataclasses.replace(topic, name=physical))
    ex.state["created"] = created
    ex.state["create_local"] = local
    ex.state["validate_only"] = bool(getattr(body, "validate_only", False))
    ex.state["skip_generic"] = True  # names are physical now: the generic pass must not translate again
    if local and not topics:
        cls = _response_cls(ex)
        raise LocalAnswer(codec._empty(cls, topics=_create_topics_local(cls, local)))
    return dataclasses.replace(body, topics=tuple(topics))


def _create_topics_local(cls: type, local: list[tuple[str, int, str]]) -> tuple[Any, ...]:
    item = _item_type(cls, "topics")
    fields = {f.name for f in dataclasses.fields(item)}
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


TOPIC_ALREADY_EXISTS = 36


def create_topics_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if ex.state.get("validate_only"):
        return body
    for topic in body.topics:
        link = ex.state["created"].get(topic.name)
        if link is None:
            continue
        error = int(topic.error_code)
        if error == TOPIC_ALREADY_EXISTS and not topic.name.endswith("!"):
            # The derived name exists but no link points to it: a racing creator whose link is on its
            # way (writing it again changes nothing), or one whose link write failed (this repairs it).
            ex.writes.append(link_record(engine.vc.name, link, topic.name))
            continue
        if error != 0:
            continue
        ex.writes.append(link_record(engine.vc.name, link, topic.name))
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
    """Deleting a topic in a VC deletes the link; the physical topic goes only with its last link
    (and only if policy.delete_physical_topic), as KIP-1134 describes."""
    problem = engine.image.state_problem
    if problem is not None:
        raise LocalAnswer(_delete_topics_refused(ex, body, f"topic changes are refused: {problem}"))
    local: list[tuple[str, str, Any]] = []  # (link, physical, topic id) removed without the broker
    forward_links: dict[str, str] = {}  # physical -> link for those the broker deletes

    def decide(link: str | None, topic_id: Any) -> bool:
        """True: keep in the forwarded request."""
        vc = engine.vc
        physical = vc.physical_topic(link) if link is not None else engine.image.physical_for_id(topic_id)
        if physical is None or physical not in vc.physical_links:
            return True  # unknown: the broker answers UNKNOWN_TOPIC(_ID) for the placeholder
        link = link or vc.link_for(physical)
        others = [x for x in engine.image.links_to(physical) if x != (vc.name, link)]
        if others or not engine.policy.delete_physical_topic:
            local.append((link, physical, engine.image.topic_ids.get(physical)))
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
    remaining = body.topics if hasattr(body, "topics") else body.topic_names
    if local and not remaining:
        raise LocalAnswer(_delete_topics_local(ex, _response_cls(ex)))
    return body


def _unlink(engine: TenantEngine, link: str) -> list[Any]:
    """A deleted link's records: the next generation first, so that no replica ever sees the link
    gone while the old generation's name (a topic that may still exist) is current."""
    generation = engine.image.generation(engine.vc.name, link) + 1
    return [gen_record(engine.vc.name, link, generation), link_record(engine.vc.name, link, None)]


def _delete_topics_refused(ex: TenantCall, body: Any, message: str) -> Any:
    cls = _response_cls(ex)
    item = _item_type(cls, "responses")
    fields = {f.name for f in dataclasses.fields(item)}
    asked = (
        [(t.name, t.topic_id) for t in body.topics]
        if getattr(body, "topics", None)
        else [(n, None) for n in getattr(body, "topic_names", ())]
    )
    results = []
    for name, topic_id in asked:
        kwargs: dict[str, Any] = {"name": name, "error_code": ErrorCode.policy_violation}
        if "topic_id" in fields:
            kwargs["topic_id"] = topic_id or ZERO_UUID
        if "error_message" in fields:
            kwargs["error_message"] = message
        results.append(codec._empty(item, **kwargs))
    return codec._empty(cls, responses=tuple(results))


def _delete_topics_local(ex: TenantCall, cls: type) -> Any:
    item = _item_type(cls, "responses")
    fields = {f.name for f in dataclasses.fields(item)}
    results = []
    for link, _physical, topic_id in ex.state["local"]:
        kwargs: dict[str, Any] = {"name": link, "error_code": ErrorCode.none}
        if "topic_id" in fields:
            kwargs["topic_id"] = topic_id or ZERO_UUID
        results.append(codec._empty(item, **kwargs))
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
    if ex.state["local"]:
        extra = _delete_topics_local(ex, type(body)).responses
        # Local results are already virtual: keep them out of the reverse translation.
        ex.state["local_results"] = extra
    return body


def delete_topics_finish(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    extra = ex.state.get("local_results")
    return dataclasses.replace(body, responses=body.responses + extra) if extra else body


# -- Configs --------------------------------------------------------------------------------------------


def configs_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    denied: dict[str, tuple[int, str]] = {}
    resources = []
    for resource in body.resources:
        rtype, name = int(resource.resource_type), resource.resource_name
        if rtype == TOPIC:
            name = ex.tx.topic(name)
        elif rtype == GROUP:
            name = engine.vc.physical_group(name)
        else:
            # Broker, logger and client-metrics configs describe the physical cluster: never forwarded.
            # Asked as an unknown topic so the answer keeps the API's shape; the error is set on the way back.
            fake = f"{uuid.uuid4()}.denied"
            denied[fake] = (rtype, name)
            rtype, name = TOPIC, fake
        resources.append(dataclasses.replace(resource, resource_type=i8(rtype), resource_name=name))
    ex.state["denied"] = denied
    return dataclasses.replace(body, resources=tuple(resources))


def configs_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    field_name = "results" if hasattr(body, "results") else "responses"
    out = []
    for result in getattr(body, field_name):
        rtype, name = int(result.resource_type), result.resource_name
        if name in ex.state["denied"]:
            rtype, name = ex.state["denied"][name]
            result = dataclasses.replace(
                result,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message="not available in a virtual cluster",
                **({"configs": ()} if hasattr(result, "configs") else {}),
            )
        elif rtype == TOPIC:
            name = ex.tx.virtual_topic(name)
        elif rtype == GROUP:
            name = ex.tx.to_virtual("group", name)
        out.append(dataclasses.replace(result, resource_type=i8(rtype), resource_name=name))
    return dataclasses.replace(body, **{field_name: tuple(out)})


# -- DescribeCluster (KIP-700) ------------------------------------------------------------------------------


def describe_cluster_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if int(getattr(body, "endpoint_type", 1)) != 1:
        raise _error_answer(ex, int(ErrorCode.cluster_authorization_failed))  # controllers are not proxied
    ex.state["ops"] = bool(body.include_cluster_authorized_operations)
    return body


def describe_cluster_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    ops = TENANT_CLUSTER_OPERATIONS if ex.state.get("ops") else ALL_OPERATIONS_UNSET
    return dataclasses.replace(body, cluster_id=engine.vc.cluster_id, cluster_authorized_operations=i32(ops))


# -- DescribeTopicPartitions (KIP-966) -----------------------------------------------------------------------


def describe_topic_partitions_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if body.topics:
        return body
    item = _item_type(type(body), "topics")
    links = sorted(engine.vc.links) or [f"{uuid.uuid4()}.none"]
    ex.state["all"] = True
    return dataclasses.replace(body, topics=tuple(item(name=link) for link in links))


def describe_topic_partitions_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    topics = body.topics
    if ex.state.get("all"):
        topics = tuple(t for t in topics if int(t.error_code) == 0)
    for topic in topics:
        if int(topic.error_code) == 0:
            _learn_topic_id(engine, ex, topic.name, topic.topic_id)
    return dataclasses.replace(body, topics=tuple(dataclasses.replace(t, is_internal=False) for t in topics))


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
    "fetch": Handler(request=fetch_request, spliced=fetch_spliced),
    "replica_id": Handler(request=replica_id_request),
    "find_coordinator": Handler(request=find_coordinator_request, response=find_coordinator_response),
    "join_group": Handler(request=join_group_request, response=join_group_response),
    "sync_group": Handler(request=sync_group_request, response=sync_group_response),
    "describe_groups": Handler(response=describe_groups_response),
    "consumer_group_heartbeat": Handler(request=consumer_group_heartbeat_request),
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
