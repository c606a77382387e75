"""Metadata, DescribeCluster (KIP-700) and DescribeTopicPartitions (KIP-966): the VC's topics as the VC sees them."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from ...acl.model import ALL_CLUSTER_OPERATIONS
from ...acl.operations import ALL_OPERATIONS_UNSET
from ...protocol import codec, entities
from ...quoting import cut, shown
from .. import names
from ..engine import TenantCall, TenantEngine
from ..model import (
    created_topic_for,
    derived_topic_for,
    link_record,
    partitions_record,
    topic_record,
)
from ..names import DESCRIBED_INTERNAL
from ..translate import ZERO_UUID
from .calls import error_answer

log = logging.getLogger(__name__)


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


# -- DescribeCluster (KIP-700) ------------------------------------------------------------------------------


def describe_cluster_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if int(getattr(body, "endpoint_type", 1)) != 1:
        raise error_answer(ex, int(ErrorCode.cluster_authorization_failed))  # controllers are not proxied
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
