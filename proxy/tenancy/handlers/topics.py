"""Topic administration: CreateTopics, DeleteTopics, DeleteRecords and CreatePartitions, within the VC's policy."""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol import codec, entities
from ...quoting import cut, shown
from .. import names
from ..engine import LocalAnswer, TenantCall, TenantEngine
from ..model import (
    created_topic_for,
    gen_record,
    link_record,
    orphan_record,
    partitions_record,
    topic_record,
)
from ..translate import ZERO_UUID
from .calls import NOT_OWNER, acl_allows, response_cls

log = logging.getLogger(__name__)


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
        cls = response_cls(ex)
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
        if not acl_allows(ex, "topic", link):
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
        raise LocalAnswer(_delete_topics_local(ex, response_cls(ex)))
    return body


def _unlink(engine: TenantEngine, link: str) -> list[Any]:
    """A deleted link's records: the next generation first, so that no replica ever sees the link
    gone while the old generation's name (a topic that may still exist) is current."""
    generation = engine.image.generation(engine.vc.name, link) + 1
    return [gen_record(engine.vc.name, link, generation), link_record(engine.vc.name, link, None)]


def _delete_topics_refused(engine: TenantEngine, ex: TenantCall, body: Any, message: str) -> Any:
    """Every topic refused while the state topic cannot take changes: POLICY_VIOLATION, except those
    the caller may not delete anyway (TOPIC_AUTHORIZATION_FAILED, as Kafka checks that first)."""
    cls = response_cls(ex)
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
        allowed = acl_allows(ex, "topic", link) if link is not None else ex.tx.access is None
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
                why = (int(ErrorCode.topic_authorization_failed), NOT_OWNER.format(name=topic.name))
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
