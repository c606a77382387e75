"""A group's subscription by topic names, sent again when the VC's topics behind those names change, sans-I/O.

KIP-848 and KIP-932 members (ConsumerGroupHeartbeat, ShareGroupHeartbeat) send their SubscribedTopicNames
once and then null ("unchanged"); the group coordinator keeps the names and follows the topics they name:
a topic deleted and created again under the same name is assigned under its new id. Through a VC the
coordinator keeps the physical names the proxy sent, and a VC's re-created topic is a new physical topic
(a new generation's name, proxy/tenancy/model.py: created_topic_for), so the group went on following the
old one: the unlinked topic still assigned (`delete_physical_topics: false`) or nothing at all, and the
new topic never (issue 25: librdkafka's 0184_share_consumer_topic_recreate read 0 messages after the
re-create through a VC, 30 directly). The same held for a name subscribed to before its topic existed.
So the proxy remembers, per group of this connection, the names and the physical topics they stood for,
and when those differ at a later heartbeat it sends the names again, translated as they stand now.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .model import VirtualCluster

MAX_GROUPS = 1024  # groups a connection tracks (least recently used dropped)


class NameSubscriptions:
    def __init__(self, limit: int = MAX_GROUPS):
        self.limit = limit
        # group -> (the names the member subscribed, the physical topic of each when last sent; None: no link)
        self._sent: OrderedDict[str, tuple[tuple[str, ...], tuple[str | None, ...]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sent)

    def names_to_send(self, vc: VirtualCluster, group: str, member_epoch: int, names: Any) -> tuple[str, ...] | None:
        """The SubscribedTopicNames the heartbeat should carry: the member's own when it sent some, the
        remembered ones when the VC's topics behind them changed since, else None (unchanged)."""
        if member_epoch < 0:  # leaving the group
            self._sent.pop(group, None)
            return names
        if names is not None:
            names = tuple(names)
            self._remember(group, names, _resolved(vc, names))
            return names
        if group not in self._sent:
            return None
        subscribed, sent = self._sent[group]
        current = _resolved(vc, subscribed)
        self._remember(group, subscribed, current)
        return subscribed if current != sent else None

    def _remember(self, group: str, names: tuple[str, ...], physical: tuple[str | None, ...]) -> None:
        self._sent[group] = (names, physical)
        self._sent.move_to_end(group)
        while len(self._sent) > self.limit:
            self._sent.popitem(last=False)


def _resolved(vc: VirtualCluster, names: tuple[str, ...]) -> tuple[str | None, ...]:
    return tuple(vc.physical_topic(name) for name in names)
