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
  on the cluster or on each topic, then the VC's topic policy (proxy/tenancy/policy.py). A refused
  topic goes to the broker as its derived name plus an illegal `!`, so the broker creates nothing and
  reports it missing; the proxy says why in Kafka's words in the MISSING_INTERNAL_TOPICS status.
* **Source topics** the VC does not have (yet) get that same stable name, without a link: the
  broker keeps the topology it was given, and a fresh random placeholder per heartbeat would make
  it inconsistent. The broker reports them missing; `derived_link` names them back in status text.
* **Source regexes** are confined like KIP-848 regexes: the proxy sends the alternation of the VC's
  matching physical topics, computed when the member joins (the topology is only sent then).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol import codec
from . import names
from .engine import LocalAnswer, TenantCall, TenantEngine
from .model import derived_topic_for, link_record, partitions_record
from .translate import HIDDEN

log = logging.getLogger(__name__)


MISSING_INTERNAL_TOPICS = 1  # the StreamsGroupHeartbeat status code (KIP-1071)
REFUSED_MARK = "!"  # appended to a refused internal topic's derived name: illegal, so the broker creates nothing
_REFUSED = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[a-zA-Z0-9._-]+)!")
MAX_REFUSALS = 1024  # reasons a connection remembers for its refused internal topics


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


def streams_group_heartbeat_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """A joining member's topology: internal topics the VC has no link for are created by the broker,
    so they are checked as Kafka checks them before creating any (KafkaApis): CREATE on the cluster,
    else on each topic; a refusal holds back every topic the heartbeat would create, and the member
    hears it in the MISSING_INTERNAL_TOPICS status ("Unauthorized to CREATE on topics ..."), as from
    Kafka. Then the VC's topic policy (configs, partitions, topics and partitions per VC), per topic:
    "Creation failed: <topic> (...)". A refused topic goes to the broker under a name it cannot create."""
    if body.topology is None:
        return body
    internal, sources = _topology_topics(body.topology)
    to_create = sorted(n for n in internal if engine.vc.physical_topic(n) is None)
    access = ex.tx.access
    refusals: dict[str, str] = {}
    if access is not None:
        unauthorized = [n for n in to_create if not access.may_create_topic(n)]
        if unauthorized:
            reason = f"Unauthorized to CREATE on topics {', '.join(unauthorized)}."
            refusals = dict.fromkeys(to_create, reason)
    problem = engine.image.state_problem
    if problem is not None and not refusals:
        refusals = dict.fromkeys(to_create, f"Creation failed: topic changes are refused: {problem}.")
    budget = engine.budget()
    to_link: dict[str, str] = {}  # physical -> link, written once the broker accepted the topology
    partitions: dict[str, int] = {}
    for name in sorted(set(internal) | sources):
        if engine.vc.physical_topic(name) is not None:
            continue  # linked already (an earlier member, or created by the tenant): use that topic
        if name in internal:
            why = names.refusal(engine.vc, name)
            if why is not None:  # the broker would create it: Kafka's rules for new names first
                raise _invalid_topology(ex, f"internal topic {why.message}")
            physical = derived_topic_for(engine.vc.id, name)
            if name not in refusals:
                info = internal[name]
                count = int(info.partitions) if info is not None else 0
                configs = [(kv.key, kv.value) for kv in info.topic_configs] if info is not None else []
                refused = budget.admit_topic(count, configs)
                if refused is not None:
                    refusals[name] = f"Creation failed: {name} (Policy violation: {refused})."
            if name in refusals:
                log.info("virtual cluster %s: internal topic %r refused: %s", engine.vc.name, name, refusals[name])
                _remember(engine, name, refusals[name])
                physical += REFUSED_MARK
            else:
                to_link[physical] = name
                partitions[physical] = count
        elif names.invalid_name(name) is None:
            physical = derived_topic_for(engine.vc.id, name)
        else:
            physical = f"{uuid.uuid4()}.{name}"  # illegal, or random: a source topic that exists nowhere
        ex.tx.planned[name] = physical  # the generic pass translates the topology with these
    ex.state["links"] = to_link
    ex.state["partitions"] = partitions
    return body


def _remember(engine: TenantEngine, name: str, reason: str) -> None:
    reasons = engine.refused_internal
    reasons[name] = reason
    reasons.move_to_end(name)
    while len(reasons) > MAX_REFUSALS:
        reasons.popitem(last=False)


def _invalid_topology(ex: TenantCall, message: str) -> LocalAnswer:
    from ..protocol.apis import response_type

    cls = response_type(ex.api_key, ex.version)
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
        status = tuple(
            dataclasses.replace(s, status_detail=ex.tx.scrub(_refused_detail(engine, s)) or "") for s in body.status
        )
        body = dataclasses.replace(body, status=status)
    return body


def _refused_detail(engine: TenantEngine, status: Any) -> str:
    """A status naming topics the proxy refused (under their unusable names): the names back, and
    instead of the broker's failure to create them, why the proxy refused them."""
    detail = status.status_detail or ""
    found = [engine.vc.derived_link(m.group(1)) for m in _REFUSED.finditer(detail)]
    refused = sorted({n for n in found if n is not None})
    if not refused:
        return detail
    parts = [p for p in detail.split("; ") if not (p.startswith("Creation failed:") and _REFUSED.search(p))]
    head = _REFUSED.sub(lambda m: engine.vc.derived_link(m.group(1)) or HIDDEN, "; ".join(parts))
    default = "Creation failed: refused by the virtual cluster's policy."
    reasons = dict.fromkeys(engine.refused_internal.get(n, default) for n in refused)
    if int(status.status_code) == MISSING_INTERNAL_TOPICS:
        return "; ".join([head, *reasons])
    return head
