"""Kafka's rules for new topic names, applied within a virtual cluster (sans-I/O).

A VC's topic is a physical `UUID.name`, so the broker sees neither the tenant's name nor the VC's
other topics: it cannot apply Kafka's rules for names in the VC itself. The proxy does, with Kafka
4.2's errors and words (`org.apache.kafka.common.internals.Topic`, the controller's CreateTopics),
and always in the tenant's own names:

* `Topic.validate`: not empty, not `.` or `..`, only `[a-zA-Z0-9._-]`, and at most 212 characters
  (Kafka's 249 less the 37-character physical prefix): INVALID_TOPIC_EXCEPTION;
* a name that differs from one of the VC's topics only by `.` versus `_` (their metric names
  collide): INVALID_TOPIC_EXCEPTION "collides with existing topic";
* Kafka's internal topic names (`Topic.INTERNAL_TOPICS` and the KRaft metadata topic): a VC has
  its own offsets, transactions and share-group state, so these names mean Kafka's topics there
  too: INVALID_REQUEST "Creation of internal topic ... is prohibited." (the controller's answer for
  `__cluster_metadata`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.name_rules import topic_name_problem
from .model import MAX_LINK_NAME

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"})
# Kafka's `Topic.INTERNAL_TOPICS`: a VC's Metadata describes them as themselves (flagged internal), as
# a cluster does to a principal with DESCRIBE on them; no other request reaches them (unknown topics).
DESCRIBED_INTERNAL = INTERNAL_TOPICS - {"__cluster_metadata"}


@dataclasses.dataclass(frozen=True)
class Refusal:
    error: int
    message: str


def unify(name: str) -> str:
    return name.replace(".", "_")


def invalid_name(name: str) -> str | None:
    """Kafka's `Topic.validate` reason for `name` in a VC, or None if the name is legal."""
    return topic_name_problem(name, MAX_LINK_NAME)


class CollisionIndex:
    """Each VC's link names by their `.`->`_` form, rebuilt when the VC's links change."""

    def __init__(self) -> None:
        self._by_vc: dict[str, tuple[int, dict[str, str]]] = {}

    def colliding(self, vc: Any, name: str) -> str | None:
        if "." not in name and "_" not in name:
            return None
        version, index = self._by_vc.get(vc.id, (-1, {}))
        if version != vc.links_version:
            index = {}
            for link in sorted(vc.links):
                if "." in link or "_" in link:
                    index.setdefault(unify(link), link)
            self._by_vc[vc.id] = (vc.links_version, index)
        other = index.get(unify(name))
        return other if other is not None and other != name else None


COLLISIONS = CollisionIndex()


def refusal(vc: Any, name: str) -> Refusal | None:
    """Why Kafka would refuse to create topic `name` in this VC, or None."""
    reason = invalid_name(name)
    if reason is not None:
        return Refusal(int(ErrorCode.invalid_topic_exception), f"Topic name is invalid: {reason}")
    if name in INTERNAL_TOPICS:
        return Refusal(int(ErrorCode.invalid_request), f"Creation of internal topic {name} is prohibited.")
    if vc.physical_topic(name) is None:
        other = COLLISIONS.colliding(vc, name)
        if other is not None:
            message = f"Topic '{name}' collides with existing topic: {other}"
            return Refusal(int(ErrorCode.invalid_topic_exception), message)
    return None
