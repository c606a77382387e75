"""Kafka Streams groups (KIP-1071) in a virtual cluster.

The group id is a group id like any other (`<vc-id>.<app id>`), and every topic name in the
topology, the IQ partition lists and StreamsGroupDescribe is an annotated `TopicName`, so the
engine's generic pass translates them. What needs more is in the topology a member sends when it
joins:

* **Internal topics** (changelog and repartition topics, `<application.id>-...`) are created by the
  group coordinator on the broker, under the names the topology gives. A name the VC has no link
  for gets the deterministic `uuid5(vc id, name).name` (the name Metadata auto-creation uses), so
  every member and proxy replica sends the same topology and the broker creates one topic; the link
  is written to the state topic before the member hears back, so the topic shows up in the VC's
  Metadata, under its own name, as soon as the broker has created it, and in no other VC.
* **Creation is checked first**, as Kafka's KafkaApis checks it before asking the controller: CREATE
  on the cluster or on each topic, then the VC's topic policy (proxy/tenancy/policy.py). Refused, the
  join never reaches the broker; the proxy answers it with Kafka's MISSING_INTERNAL_TOPICS status and
  has the member rejoin at each heartbeat, so it gets in once creation is allowed
  (`streams_group_heartbeat_request`).
* **Source topics** the VC does not have (yet) get that same stable name, without a link: the
  broker keeps the topology it was given, and a fresh random placeholder per heartbeat would make
  it inconsistent. The broker reports them missing; `derived_link` names them back in status text.
* **Source regexes** are confined like KIP-848 regexes: the proxy sends the alternation of the VC's
  matching physical topics, computed when the member joins (the topology is only sent then).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from ...protocol import codec, entities
from ...quoting import cut, shown
from .. import names
from ..engine import LocalAnswer, TenantCall, TenantEngine
from ..model import derived_topic_for, link_record, partitions_record
from ..per_vc_lru import PerVcLru

log = logging.getLogger(__name__)


MISSING_INTERNAL_TOPICS = 1  # the StreamsGroupHeartbeat status code (KIP-1071)
# The member epoch the proxy gives a member it keeps out of the broker: no broker gets near it (epochs
# start at 1 and grow by one per rebalance), so any replica, on any connection, knows such a member.
HELD_EPOCH = 2**31 - 1
MAX_HELD = 65536  # held members remembered for their leave (least recently joined forgotten) ...
MAX_HELD_PER_VC = 4096  # ... and of one VC: another VC's joins never forget a VC's
_HELD: PerVcLru[tuple[str, str, str], None] = PerVcLru(MAX_HELD, MAX_HELD_PER_VC)  # (vc id, group, member id)
# What the proxy answers a member it keeps out: Kafka's defaults for the group's intervals.
HEARTBEAT_INTERVAL = datetime.timedelta(seconds=5)  # streams.heartbeat.interval.ms
TASK_OFFSET_INTERVAL = datetime.timedelta(minutes=1)  # task offset interval
ACCEPTABLE_RECOVERY_LAG = 10_000


def _topology_topics(topology: Any) -> tuple[dict[str, Any], set[str]]:
    """(internal topic name -> its TopicInfo, or None for a repartition sink only; user source topic names)."""
    internal: dict[str, Any] = {}
    sources: set[str] = set()
    for sub in topology.subtopologies:
        for info in (*sub.state_changelog_topics, *sub.repartition_source_topics):
            internal[info.name] = info
        for name in sub.repartition_sink_topics:
            internal.setdefault(name, None)
        sources.update(sub.source_topics)
    return internal, sources - set(internal)


def _spec(info: Any) -> tuple[int, tuple[tuple[str, str | None], ...]]:
    """(partitions, configs) of an internal topic: what creating it asks for (0: the broker derives it)."""
    if info is None:
        return 0, ()
    return int(info.partitions), tuple((kv.key, kv.value) for kv in info.topic_configs)


def _refusals(engine: TenantEngine, ex: TenantCall, specs: dict[str, Any]) -> tuple[dict[str, str], dict[str, int]]:
    """Why the broker may not create these internal topics for the caller (name -> Kafka's words), as
    Kafka checks them (KafkaApis, before any is created): CREATE on the cluster, else on each topic
    (one refusal holds back every topic); the state topic; then the VC's topic policy, per topic.
    Also the partitions of those admitted (for the partition counts the proxy learns)."""
    to_create = sorted(n for n in specs if engine.vc.physical_topic(n) is None)
    access = ex.tx.access
    if access is not None:
        unauthorized = [n for n in to_create if not access.may_create_topic(n)]
        if unauthorized:
            return dict.fromkeys(to_create, f"Unauthorized to CREATE on topics {', '.join(unauthorized)}."), {}
    problem = engine.image.state_problem
    if problem is not None and to_create:
        return dict.fromkeys(to_create, f"Creation failed: topic changes are refused: {problem}."), {}
    budget = engine.budget()
    refusals: dict[str, str] = {}
    admitted: dict[str, int] = {}
    for name in to_create:
        partitions, configs = specs[name]
        why = budget.admit_topic(partitions, configs)
        if why is None:
            admitted[name] = partitions
        else:
            refusals[name] = f"Creation failed: {name} (Policy violation: {why})."
    return refusals, admitted


def streams_group_heartbeat_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """A joining member's topology: internal topics the VC has no link for would be created by the
    broker, so they are checked first, as Kafka checks them (`_refusals`). Refused, the join never
    reaches the broker (which would create them): the proxy answers it as Kafka answers a member whose
    internal topics are missing — in the group, no tasks, and the MISSING_INTERNAL_TOPICS status in
    Kafka's words ("Unauthorized to CREATE on topics ...", "Creation failed: ...") — under HELD_EPOCH.
    That member's next heartbeat is answered FENCED_MEMBER_EPOCH, so it rejoins at once with its
    topology and is checked again: once creation is allowed, the broker gets the join. Stateless, so
    any replica and any connection answers it alike."""
    ex.tx.to_physical("group", body.group_id)  # READ on the group first, as Kafka: before any local answer
    if body.topology is None:
        return _held_heartbeat(engine, ex, body)
    internal, sources = _topology_topics(body.topology)
    specs = {name: _spec(info) for name, info in internal.items()}
    for name in sorted(n for n in internal if engine.vc.physical_topic(n) is None):
        why = names.refusal(engine.vc, name)
        if why is not None:  # the broker would create it: Kafka's rules for new names first
            raise _invalid_topology(ex, f"internal topic {why.message}")
    refusals, admitted = _refusals(engine, ex, specs)
    key = (engine.vc.id, body.group_id, body.member_id)
    if refusals:
        _HELD.put(engine.vc.id, key, None)
        for name, reason in refusals.items():
            log.info("virtual cluster %s: internal topic %s refused: %s", engine.vc.name, shown(name), cut(reason))
        raise _missing_topics(ex, body, specs, refusals)
    _HELD.pop(key)
    to_link: dict[str, str] = {}  # physical -> link, written once the broker accepted the topology
    partitions: dict[str, int] = {}
    for name in sorted(set(internal) | sources):
        if engine.vc.physical_topic(name) is not None:
            continue  # linked already (an earlier member, or created by the tenant): use that topic
        if name in internal:
            physical = derived_topic_for(engine.vc.id, name)
            to_link[physical] = name
            partitions[physical] = admitted.get(name, 0)
        elif names.invalid_name(name) is None:
            physical = derived_topic_for(engine.vc.id, name)
        else:
            physical = f"{uuid.uuid4()}.{name}"  # illegal, or random: a source topic that exists nowhere
        ex.tx.planned[name] = physical  # the generic pass translates the topology with these
    ex.state["links"] = to_link
    ex.state["partitions"] = partitions
    return body


def _held_heartbeat(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """A heartbeat of a member the proxy keeps out of the broker (its join was refused)."""
    epoch = int(body.member_epoch)
    key = (engine.vc.id, body.group_id, body.member_id)
    if epoch == HELD_EPOCH:  # rejoin (with the topology), to be checked again
        cls = _response_type(ex)
        message = "Internal topics are missing: rejoin to have them checked again."
        raise LocalAnswer(codec._empty(cls, error_code=ErrorCode.fenced_member_epoch, error_message=message))
    if epoch < 0 and key in _HELD:  # leaving, never having reached the broker
        _HELD.pop(key)
        raise LocalAnswer(codec._empty(_response_type(ex), member_id=body.member_id, member_epoch=i32(epoch)))
    return body


def _response_type(ex: TenantCall) -> type:
    from ...protocol.apis import response_type

    return response_type(ex.api_key, ex.version)


def _missing_topics(
    ex: TenantCall,
    body: Any,
    specs: dict[str, Any],
    refusals: dict[str, str],
) -> LocalAnswer:
    """Kafka's answer to a member whose internal topics are missing: in the group, no tasks, and why."""
    cls = _response_type(ex)
    missing = sorted(n for n in specs if ex.tx.vc.physical_topic(n) is None)
    detail = "; ".join([f"Internal topics are missing: [{', '.join(missing)}]", *dict.fromkeys(refusals.values())])
    status_cls = entities.item_type(cls, "status")
    statuses = (codec._empty(status_cls, status_code=i8(MISSING_INTERNAL_TOPICS), status_detail=detail),)
    tasks: tuple[Any, ...] = ()
    return LocalAnswer(
        codec._empty(
            cls,
            member_id=body.member_id,
            member_epoch=i32(HELD_EPOCH),
            heartbeat_interval=HEARTBEAT_INTERVAL,
            acceptable_recovery_lag=i32(ACCEPTABLE_RECOVERY_LAG),
            task_offset_interval=TASK_OFFSET_INTERVAL,
            status=statuses,
            active_tasks=tasks,
            standby_tasks=tasks,
            warmup_tasks=tasks,
            partitions_by_user_endpoint=None,
        )
    )


def _invalid_topology(ex: TenantCall, message: str) -> LocalAnswer:
    cls = _response_type(ex)
    return LocalAnswer(codec._empty(cls, error_code=ErrorCode.streams_invalid_topology, error_message=message))


def streams_group_heartbeat_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if int(body.error_code) == 0:
        for physical, link in ex.state.get("links", {}).items():
            ex.writes.append(link_record(engine.vc.name, link, physical))
            count = ex.state["partitions"].get(physical, 0)
            if count > 0:
                ex.writes.append(partitions_record(physical, count))
            ex.mutations += max(count, 1)  # created on the VC's behalf: the mutation quota's
    if body.status:
        # Status details quote topic names ("internal topics are missing: ..."): say them the VC's way.
        status = tuple(dataclasses.replace(s, status_detail=ex.tx.scrub(s.status_detail) or "") for s in body.status)
        body = dataclasses.replace(body, status=status)
    return body
