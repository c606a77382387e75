"""Physical topics that virtual clusters link to are not deleted from kafka-cluster (sans-I/O).

KIP-1134: "Deleting the physical topic wouldn't be allowed as long as there are links pointing to it. This
is necessary to prevent dangling links." A DeleteTopics from a member of kafka-cluster (the physical
cluster: super-admins and the users added to it) that names a linked topic, by name or by topic id, gets
POLICY_VIOLATION for that topic with a message naming the VCs that link it; the request's other topics go
to the broker as asked. Kafka has no topic rename, so nothing else can pull a topic from under a link.

A refused topic is sent as a name (or id) that exists nowhere, so the broker answers it in the API's own
shape (and order), and the answer is set back here: the same way refused topics of a VC's ACLs are
handled (proxy/acl/access.py).

A topic id counts only if the proxy learned it (from a VC's CreateTopics, Metadata or
DescribeTopicPartitions): an id of a linked topic no VC client ever saw is not known to be linked.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from .model import TenancyImage

ZERO_UUID = uuid.UUID(int=0)


@dataclass
class LinkedDeletes:
    """One DeleteTopics whose linked topics were swapped for placeholders: how to answer them."""

    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # placeholder -> (physical, why)
    ids: dict[uuid.UUID, tuple[uuid.UUID, str, str]] = field(default_factory=dict)  # placeholder -> (id, physical, why)


def refusal_message(image: TenancyImage, physical: str) -> str | None:
    """Why `physical` may not be deleted from kafka-cluster, or None when no VC links it."""
    vcs = sorted({vc for vc, _ in image.links_to(physical)})
    if not vcs:
        return None
    return (
        f"Topic {physical} is linked by virtual cluster(s) {', '.join(vcs)}: a physical topic is deleted only "
        "once no virtual cluster links it (KIP-1134); remove the links first"
    )


def check(image: TenancyImage, body: Any) -> tuple[Any, LinkedDeletes] | None:
    """None: nothing linked, send the DeleteTopics request (`body`, decoded) as it is. Else its new
    body, linked topics swapped for placeholders, and what to set back in the answer."""
    out = LinkedDeletes()

    def name(physical: str) -> str:
        why = refusal_message(image, physical)
        if why is None:
            return physical
        placeholder = f"{uuid.uuid4()}.linked"  # exists nowhere: UNKNOWN_TOPIC_OR_PARTITION from the broker
        out.names[placeholder] = (physical, why)
        return placeholder

    def by_id(topic_id: uuid.UUID) -> uuid.UUID:
        physical = image.physical_for_id(topic_id)
        why = refusal_message(image, physical) if physical is not None else None
        if physical is None or why is None:
            return topic_id
        placeholder = uuid.uuid4()
        out.ids[placeholder] = (topic_id, physical, why)
        return placeholder

    if getattr(body, "topics", None):  # v6+: by name or by id
        topics = tuple(
            dataclasses.replace(t, name=name(t.name))
            if t.name
            else dataclasses.replace(t, topic_id=by_id(t.topic_id))
            if t.topic_id not in (None, ZERO_UUID)
            else t
            for t in body.topics
        )
        body = dataclasses.replace(body, topics=topics)
    elif getattr(body, "topic_names", None):
        body = dataclasses.replace(body, topic_names=tuple(name(n) for n in body.topic_names))
    if not (out.names or out.ids):
        return None
    return body, out


def fix_response(linked: LinkedDeletes, body: Any) -> Any:
    """The placeholders' answers as POLICY_VIOLATION for the topics asked for, with the reason."""
    results = []
    for result in body.responses:
        hit = linked.names.get(result.name) if result.name else None
        if hit is None and getattr(result, "topic_id", None) in linked.ids:
            topic_id, physical, why = linked.ids[result.topic_id]
            hit = (physical, why)
            result = dataclasses.replace(result, topic_id=topic_id)
        if hit is not None:
            changes: dict[str, Any] = {"name": hit[0], "error_code": ErrorCode.policy_violation}
            if hasattr(result, "error_message"):  # v5+
                changes["error_message"] = hit[1]
            result = dataclasses.replace(result, **changes)
        results.append(result)
    return dataclasses.replace(body, responses=tuple(results))
