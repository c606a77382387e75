"""Quotas across the fleet, sans-I/O (the clock is passed in): what each replica used, told to the others.

Every replica meters its own clients (meter.py). Alone, N replicas would let an entity use N times its
quota, one quota per replica. So each replica adds up what its clients used per meter and reports it
every `interval` seconds on a Kafka topic (`tenancy.quota_sharing`, quotas/sharing.py); every replica
charges what the others report to its own meters, as if their clients had been its own. Each meter then
sees the whole fleet's use, a report late, and its token bucket holds the fleet to the quota: a client
is throttled by its own replica for what it and the others' clients used together.

When the topic is slow or down (the replica's own last report has not come back within `stale_after`,
or a report could not be written), a replica cannot see the others' use. It then holds its own clients
to its share of each quota, 1/N, N being the replicas heard from in the `peer_timeout` before the topic
went quiet, and at least `replicas` (the deployment's replica count, as the operator states it): never
to the whole quota, so the fleet stays within it without the topic.

A report is JSON, one record per report (split when large), keyed by the replica's id:
``{"replica": id, "usage": [[[part, ...], amount], ...]}``; meter keys are quota/model.py's
`Limit.meter` tuples. Records from peers are hostile like any other input: one that does not parse, or
carries a negative, non-finite or absurd amount, is dropped whole, with one log line per replica.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Key = tuple[str, ...]

MAX_ENTRIES = 500  # meter keys per record: a report of 10,000 meters is 20 records of ~40 KB
MAX_AMOUNT = 1e15  # per entry and report: more than any link carries in a report's interval
MAX_KEY_PARTS = 8
MAX_PART = 512


@dataclass
class FleetUsage:
    """One replica's side of quota sharing: pending local use, peers' liveness, and its share."""

    replica: str
    replicas: int = 1  # the deployment's replica count, as configured: the least N of the fallback share
    stale_after: float = 3.0
    peer_timeout: float = 10.0
    pending: dict[Key, float] = field(default_factory=dict)
    peers: dict[str, float] = field(default_factory=dict)  # replica id -> when its last report arrived
    awaiting: float | None = None  # when the first report sent since one last came back was sent
    failed_at: float | None = None  # when writing a report last failed (None: since written again)
    _warned: set[str] = field(default_factory=set)

    def start(self, now: float) -> None:
        """Sharing begins: until a first report of this replica's comes back from the topic, the others' use
        is out of sight (a topic that cannot be read at all must not leave the whole quota to each replica)."""
        if self.awaiting is None:
            self.awaiting = now

    # -- this replica's use ---------------------------------------------------------------------

    def used(self, key: Key, amount: float) -> None:
        if amount > 0:
            self.pending[key] = self.pending.get(key, 0.0) + amount

    def report(self, now: float) -> list[bytes]:
        """What this replica used since its last report, as records (none when it used nothing: its
        liveness still needs one, so an empty report is sent then)."""
        items = [[list(key), amount] for key, amount in self.pending.items()]
        self.pending = {}
        if self.awaiting is None:
            self.awaiting = now
        chunks = [items[i : i + MAX_ENTRIES] for i in range(0, len(items), MAX_ENTRIES)] or [[]]
        return [json.dumps({"replica": self.replica, "usage": c}, separators=(",", ":")).encode() for c in chunks]

    def write_failed(self, now: float) -> None:
        self.failed_at = now

    def written(self) -> None:
        self.failed_at = None

    # -- the others' use ------------------------------------------------------------------------

    def receive(self, value: bytes | None, now: float) -> list[tuple[Key, float]]:
        """One record from the topic: the use to charge to this replica's meters (none for its own)."""
        parsed = _parse(value)
        if isinstance(parsed, str):
            self._warn("record", f"dropping a quota usage record: {parsed}")
            return []
        replica, usage = parsed
        if replica == self.replica:
            self.awaiting = None  # the topic carries this replica's reports: the others' are in sight
            return []
        self.peers[replica] = now
        if len(self.peers) > 4 * MAX_ENTRIES:  # replica ids are the fleet's, but bound them like the rest
            oldest = min(self.peers, key=self.peers.__getitem__)
            del self.peers[oldest]
        return usage

    # -- the share --------------------------------------------------------------------------------

    def stale(self, now: float) -> bool:
        """Whether the others' use is out of sight: this replica's report has not come back in time, or
        writing one failed."""
        since = self._quiet_since()
        return since is not None and (self.failed_at is not None or now - since > self.stale_after)

    def _quiet_since(self) -> float | None:
        if self.failed_at is not None:
            return self.failed_at if self.awaiting is None else min(self.failed_at, self.awaiting)
        return self.awaiting

    def share(self, now: float) -> float:
        """The part of each quota this replica's clients may use: all of it while the others' use is in
        sight (it is charged to the meters), else 1/N."""
        if not self.stale(now):
            return 1.0
        since = self._quiet_since()
        assert since is not None
        heard = sum(1 for t in self.peers.values() if t >= since - self.peer_timeout)
        return 1.0 / max(self.replicas, heard + 1)

    def _warn(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("%s (further ones are dropped silently)", message)


def _parse(value: bytes | None) -> tuple[str, list[tuple[Key, float]]] | str:
    if value is None or len(value) > 4 * 1024 * 1024:
        return "empty or over 4 MiB"
    try:
        doc = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not JSON ({exc})"
    if not isinstance(doc, dict) or not isinstance(doc.get("replica"), str) or not isinstance(doc.get("usage"), list):
        return "not a usage report"
    replica, entries = doc["replica"], doc["usage"]
    if not 0 < len(replica) <= MAX_PART or len(entries) > MAX_ENTRIES:
        return "a replica id or an entry count out of bounds"
    usage: list[tuple[Key, float]] = []
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)):
            return "an entry that is not [key, amount]"
        parts, amount = entry
        if not 0 < len(parts) <= MAX_KEY_PARTS or not all(isinstance(p, str) and len(p) <= MAX_PART for p in parts):
            return "a meter key out of bounds"
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            return "an amount that is not a number"
        if not (math.isfinite(amount) and 0 <= amount <= MAX_AMOUNT):
            return f"an amount out of bounds ({amount})"
        usage.append((tuple(parts), float(amount)))
    return replica, usage
