"""Translation of identifiers between a virtual cluster's names and the physical cluster's.

One `Translation` lives for one request/response pair: it remembers what it translated on the way
in (physical name -> the name the client used, substituted ids -> the ids the client sent), so the
response says exactly what the client asked about.

Unknown names and foreign ids never reach the broker as themselves: an unknown topic name becomes
a fresh `UUID.name` that exists nowhere, a topic id the VC does not own becomes a placeholder id
(proxy/tenancy/placeholders.py). The broker then answers UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID in the
API's own response shape, and the proxy maps the placeholder back. Nothing of another tenant can be named or probed.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from . import placeholders
from .model import TenancyImage, VirtualCluster
from .names import DESCRIBED_INTERNAL

HIDDEN = "<hidden>"
ZERO_UUID = uuid.UUID(int=0)
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_PHYSICAL_PREFIX = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.([a-zA-Z0-9._-]*)")


@dataclass
class Translation:
    vc: VirtualCluster
    image: TenancyImage
    topics: dict[str, str] = field(default_factory=dict)  # physical -> virtual, as requested
    fake_ids: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)  # placeholder -> client's id
    unknown_topics: set[str] = field(default_factory=set)  # virtual names with no link
    planned: dict[str, str] = field(default_factory=dict)  # link -> physical name a handler chose (auto-create)
    new_ids: set[uuid.UUID] = field(default_factory=set)  # ids of topics this exchange created (not yet in the image)
    access: Any = None  # the request's authorization (proxy/acl/access.py), asked about each name; None: all allowed
    refused: dict[str, str] = field(default_factory=dict)  # placeholder group/txn id -> the id the client sent
    # Metadata and DescribeTopicPartitions describe Kafka's internal topics as themselves, as a cluster does
    # to a principal with DESCRIBE on them (clients look for `__consumer_offsets`); elsewhere they are unknown.
    describe_internal: bool = False
    # Topic ids the image has not learned yet (no VC's Metadata has shown them: a topic created by CreateTopics
    # before v7 has none in the answer). Metadata asks the broker about such an id and keeps the answer only
    # if it names one of the VC's topics (metadata_response); `probed` are the ids sent so. A consumer group's
    # assignment (ConsumerGroupHeartbeat) names only the group's topics, so its unlearned ids are shown as they
    # are, and the client's Metadata by id then resolves them (issue 25: librdkafka's KIP-848 consumer).
    probe_ids: bool = False
    probed: set[uuid.UUID] = field(default_factory=set)
    keep_unlearned_ids: bool = False
    # Ids of topics the VC no longer has that a fetch session still holds: answered as deleted topics under the
    # client's own id (proxy/tenancy/fetch_deleted.py).
    deleted_ids: set[uuid.UUID] = field(default_factory=set)
    # Topic ids (as integers) sent as themselves because the VC owns them and the caller may use them: what the
    # tenancy stage grants the forwarder (proxy/core/forward_table.py).
    kept_ids: list[int] = field(default_factory=list)
    # Transactional ids sent as the VC's own (the caller may use them): physical -> the client's, what the tenancy
    # stage grants the forwarder with a Produce's topic names (proxy/core/grants.py).
    txn_ids: dict[str, str] = field(default_factory=dict)
    # Group ids sent as the VC's own (the caller may use them): physical -> the client's, what the tenancy stage grants
    # the forwarder with a Heartbeat, an OffsetCommit or a LeaveGroup (proxy/core/grants.py).
    group_ids: dict[str, str] = field(default_factory=dict)

    # -- requests: virtual -> physical -------------------------------------------------------------
    def to_physical(self, kind: str, value: Any) -> Any:
        if value is None:
            return None
        if kind == "topic":
            return self.topic(value)
        if kind == "txn" and value == "":
            return ""  # the empty id is no one's: the broker answers it as Kafka does (INVALID_REQUEST)
        if kind in ("group", "txn"):
            if self.access is not None and not self.access.permits(kind, value):
                return self._refused_id(value)
            if kind == "group":
                physical = self.vc.physical_group(value)
                self.group_ids[physical] = value
                return physical
            physical = self.vc.physical_txn(value)
            self.txn_ids[physical] = value
            return physical
        if kind == "topic_id":
            return self.topic_id(value)
        raise ValueError(f"unknown identifier kind {kind!r}")

    def _refused_id(self, value: str) -> str:
        """A group or transactional id the caller may not use: a placeholder no one has, so the broker
        answers its item in the API's shape (requests about one id are refused before they leave)."""
        placeholder = f"{uuid.uuid4()}.{value}"
        self.refused[placeholder] = value
        return placeholder

    def topic(self, link: str) -> str:
        if self.access is not None and not self.access.permits("topic", link):
            physical = f"{uuid.uuid4()}.{link}"  # refused: exists nowhere, the error is set on the way back
            self.topics[physical] = link
            return physical
        physical = self.vc.physical_topic(link) or self.planned.get(link)
        if physical is None and self.describe_internal and link in DESCRIBED_INTERNAL:
            physical = link
        if physical is None:
            self.unknown_topics.add(link)
            physical = f"{uuid.uuid4()}.{link}"  # exists nowhere: the broker reports it unknown
        self.topics[physical] = link
        return physical

    def topic_id(self, topic_id: uuid.UUID) -> uuid.UUID:
        if topic_id.int == 0:  # not `== ZERO_UUID`: UUID.__eq__ is Python, and this runs per id per request
            return topic_id
        if self.image.owns_topic_id(self.vc, topic_id):
            if self.access is None:  # no ACLs to ask: the VC's own topic goes as itself
                self.kept_ids.append(topic_id.int)
                return topic_id
            physical = self.image.physical_for_id(topic_id)
            link = self.vc.link_for(physical) if physical is not None else None
            if self.access.permits("topic_id", topic_id, link):
                self.kept_ids.append(topic_id.int)
                return topic_id
        elif self.probe_ids and self.unlearned(topic_id):
            self.probed.add(topic_id)  # the VC's ACLs are asked once the broker has named it
            return topic_id
        fake = placeholders.PLACEHOLDERS.of(self.vc.id, topic_id)
        self.fake_ids[fake] = topic_id
        return fake

    # -- responses: physical -> virtual -------------------------------------------------------------
    def to_virtual(self, kind: str, value: Any) -> Any:
        if value is None:
            return None
        if kind == "topic":
            return self.virtual_topic(value)
        if kind == "txn" and value == "":
            return ""
        if kind in ("group", "txn"):
            if value in self.refused:
                return self.refused[value]
            virtual = self.vc.virtual_group(value) if kind == "group" else self.vc.virtual_txn(value)
            return HIDDEN if virtual is None else virtual
        if kind == "topic_id":
            return self.virtual_topic_id(value)
        raise ValueError(f"unknown identifier kind {kind!r}")

    def internal(self, physical: str) -> bool:
        """Is this one of Kafka's internal topics, described to the VC as itself by this request?"""
        return self.describe_internal and physical in DESCRIBED_INTERNAL

    def virtual_topic(self, physical: str) -> str:
        if physical in self.topics:
            return self.topics[physical]
        if self.internal(physical):
            return physical
        link = self.vc.link_for(physical) or self.vc.derived_link(physical)
        return HIDDEN if link is None else link

    def virtual_topic_id(self, topic_id: uuid.UUID) -> uuid.UUID:
        # The usual answer first, the VC's own topic: a placeholder is never one (a keyed uuid5, not the broker's).
        if topic_id.int == 0 or self.image.owns_topic_id(self.vc, topic_id):
            return topic_id
        if (fake := self.fake_ids.get(topic_id)) is not None:
            return fake
        if (sent := placeholders.PLACEHOLDERS.client_id(self.vc.id, topic_id)) is not None:
            return sent  # a placeholder an earlier request put in a fetch session
        if topic_id in self.probed or topic_id in self.deleted_ids or topic_id in self.new_ids:
            return topic_id
        if self.keep_unlearned_ids and self.unlearned(topic_id):
            return topic_id
        return ZERO_UUID

    def sent_for(self, placeholder: uuid.UUID) -> uuid.UUID | None:
        """The client's id a placeholder of this VC's stands for; None for any other id."""
        if placeholder in self.fake_ids:
            return self.fake_ids[placeholder]
        return placeholders.PLACEHOLDERS.client_id(self.vc.id, placeholder)

    def unlearned(self, topic_id: uuid.UUID) -> bool:
        """An id the image knows as no one's topic (not another VC's either)."""
        return self.image.physical_for_id(topic_id) is None and topic_id not in self.new_ids

    def owns_id(self, topic_id: uuid.UUID) -> bool:
        return topic_id in self.new_ids or self.image.owns_topic_id(self.vc, topic_id)

    # -- listings: is this physical identifier the VC's? ---------------------------------------------
    def visible(self, kind: str, value: Any) -> bool:
        if value is None:
            return True
        if kind == "topic":
            return value in self.topics or self.vc.link_for(value) is not None or self.internal(value)
        if kind == "group":
            return self.vc.virtual_group(value) is not None
        if kind == "txn":
            return self.vc.virtual_txn(value) is not None
        if kind == "topic_id":
            return (
                value == ZERO_UUID
                or value in self.fake_ids
                or placeholders.PLACEHOLDERS.client_id(self.vc.id, value) is not None
                or value in self.probed
                or value in self.deleted_ids
                or self.owns_id(value)
            )
        return False

    # -- free text ------------------------------------------------------------------------------
    def scrub(self, text: str | None) -> str | None:
        """Error messages may quote physical names: say them the client's way, or hide them."""
        if not text:
            return text
        text = text.replace(self.vc.prefix, "")
        for physical, virtual in self.topics.items():
            # Placeholders for illegal names ("UUID.bad name") are more than the pattern below sees.
            if physical in text and not _LEGAL_NAME.fullmatch(physical):
                text = text.replace(physical, virtual)

        def replace(match: re.Match[str]) -> str:
            physical = match.group(0)
            virtual = self.virtual_topic(physical)
            return virtual if virtual != HIDDEN else HIDDEN

        return _PHYSICAL_PREFIX.sub(replace, text)
