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
* **Source topics** the VC does not have (yet) get that same stable name, without a link: the
  broker keeps the topology it was given, and a fresh random placeholder per heartbeat would make
  it inconsistent. The broker reports them missing; `derived_link` names them back in status text.
* **Source regexes** are confined like KIP-848 regexes: the proxy sends the alternation of the VC's
  matching physical topics, computed when the member joins (the topology is only sent then).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol import codec
from . import names
from .engine import LocalAnswer, TenantCall, TenantEngine
from .model import derived_topic_for, link_record


def _topology_topics(topology: Any) -> tuple[set[str], set[str]]:
    """(internal topic names, user source topic names) of a heartbeat topology."""
    internal: set[str] = set()
    sources: set[str] = set()
    for sub in topology.subtopologies:
        internal.update(t.name for t in sub.state_changelog_topics)
        internal.update(t.name for t in sub.repartition_source_topics)
        internal.update(sub.repartition_sink_topics)
        sources.update(sub.source_topics)
    return internal, sources - internal


def streams_group_heartbeat_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if body.topology is None:
        return body
    internal, sources = _topology_topics(body.topology)
    to_link: dict[str, str] = {}  # physical -> link, written once the broker accepted the topology
    for name in sorted(internal | sources):
        if engine.vc.physical_topic(name) is not None:
            continue  # linked already (an earlier member, or created by the tenant): use that topic
        if name in internal:
            why = names.refusal(engine.vc, name)
            if why is not None:  # the broker would create it: Kafka's rules for new names first
                raise _invalid_topology(ex, f"internal topic {why.message}")
            physical = derived_topic_for(engine.vc.id, name)
            to_link[physical] = name
        elif names.invalid_name(name) is None:
            physical = derived_topic_for(engine.vc.id, name)
        else:
            physical = f"{uuid.uuid4()}.{name}"  # illegal, or random: a source topic that exists nowhere
        ex.tx.planned[name] = physical  # the generic pass translates the topology with these
    ex.state["links"] = to_link
    return body


def _invalid_topology(ex: TenantCall, message: str) -> LocalAnswer:
    from ..protocol.apis import response_type

    cls = response_type(ex.api_key, ex.version)
    return LocalAnswer(codec._empty(cls, error_code=ErrorCode.streams_invalid_topology, error_message=message))


def streams_group_heartbeat_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    if int(body.error_code) == 0:
        for physical, link in ex.state.get("links", {}).items():
            ex.writes.append(link_record(engine.vc.name, link, physical))
    if body.status:
        # Status details quote topic names ("internal topics are missing: ..."): say them the VC's way.
        status = tuple(dataclasses.replace(s, status_detail=ex.tx.scrub(s.status_detail) or "") for s in body.status)
        body = dataclasses.replace(body, status=status)
    return body
