"""Which virtual cluster owns each incremental fetch session (KIP-227), sans-I/O.

Behind the proxy every tenant is the same upstream principal, and a broker serves a fetch session to
whoever names its id: without this table one tenant's incremental Fetch carrying another's session
id returns the other's records. The proxy records the ids the broker hands out in Fetch responses
to a VC's requests; a Fetch naming an id its VC does not own is answered by the proxy with
FETCH_SESSION_ID_NOT_FOUND, the broker's answer for an id it does not know, so a live foreign id and
a dead one look the same.

Keyed by (broker, session id): a broker's session ids are unique on that broker only, so two brokers can
hand out the same id, and a VC must never reach, or evict, another VC's session on another broker that
happens to share its id. The broker of a connection is its listener's node id; a bootstrap connection's
is the broker it reached (the node whose address it connected to, else a key of that upstream connection
alone: proxy/net/discovery.py). A connection whose broker is not known yet owns nothing.

Per VC rather than per connection: a client that reconnects keeps its session. Bounded: the
broker's own cache holds `max.incremental.fetch.session.cache.slots` (1000) sessions per broker;
ids the broker reports gone or a client closes are dropped, and beyond `MAX_FETCH_SESSIONS_PER_VC`
of a VC (or its own bound, the operator's setting `max_fetch_sessions`), or `MAX_FETCH_SESSIONS` in
all, a least recently used id goes, of that VC or of the VC holding the most
(proxy/tenancy/per_vc_lru.py): one tenant opening sessions evicts only its own. Its owner's next
incremental fetch gets FETCH_SESSION_ID_NOT_FOUND and the client starts a new session, as it does
when a broker evicts one. A Fetch the forwarder serves marks its session used too (`touch`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from .per_vc_lru import PerVcLru

MAX_FETCH_SESSIONS = 10_000  # ten brokers' worth of Kafka's default cache slots (limits.max_fetch_sessions)
MAX_FETCH_SESSIONS_PER_VC = 1_000  # one broker's worth (limits.max_fetch_sessions_per_vc)
FIRST_SESSION_VERSION = 7  # Fetch v7 introduced sessions (KIP-227)
_HEAD = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id: the start of every v7+ body


Broker = Hashable  # a broker's node id (or a key of one upstream connection: see the module's doc)


class FetchSessionOwners:
    def __init__(self, limit: int = MAX_FETCH_SESSIONS, per_vc: int = MAX_FETCH_SESSIONS_PER_VC):
        # (broker, session id) -> its VC, each VC's least recently used first
        self._owner: PerVcLru[tuple[Broker, int], None] = PerVcLru(limit, per_vc)
        # With workers (proxy/core/handoff.py): told each change of a broker's (node id's) session, for the
        # other workers' `learn`; a client that reconnects to another worker keeps its session.
        self.tell: Callable[[list[object]], None] | None = None
        # Per VC, bumped whenever an id leaves it (dropped, evicted, given to another): the fetch sessions the
        # forwarder holds for that VC's connections are void, and another VC's churn leaves them standing
        # (vcproxy_native.Generation, made by `make_generation`, which proxy/core/grants.py sets; else none).
        self.make_generation: Callable[[], Any] | None = None
        self._changes: dict[str, Any] = {}  # VC id -> its Generation, made for a grant (VCs of the state only)
        self._uses: dict[tuple[str, int], set[int]] = {}  # (VC id, broker) -> sessions `touch`ed, not told yet

    def __len__(self) -> int:
        return len(self._owner)

    def bound(self, total: int, per_vc: int) -> None:
        """The limits from now on (the config's `limits.max_fetch_sessions*`); applied at the next record."""
        self._owner.total, self._owner.per_vc = total, per_vc

    def owns(self, vc_id: str, broker: Broker | None, session_id: int) -> bool:
        if broker is None:
            return False
        key = (broker, session_id)
        if self._owner.vc_of(key) != vc_id:
            return False
        self._owner.touch(key)
        return True

    def touch(self, vc_id: str, broker: Broker | None, session_ids: Iterable[int]) -> None:
        """Sessions of `vc_id` on `broker` a client used where `owns` was not asked (the forwarder served its Fetch):
        kept as fresh as those the Python path serves, here and (told) in the other workers."""
        if broker is None:
            return
        used = [s for s in session_ids if self._owner.vc_of((broker, s)) == vc_id and self._owner.touch((broker, s))]
        if used and self.tell is not None and type(broker) is int:
            self._uses.setdefault((vc_id, broker), set()).update(used)

    def tell_uses(self) -> None:
        """The uses `touch` noted since, told to the other workers: one message per VC and broker, not per
        connection (proxy/net/forwarder.py calls it once a second)."""
        uses, self._uses = self._uses, {}
        if self.tell is not None:
            for (vc_id, broker), used in uses.items():
                self.tell(["used", vc_id, broker, sorted(used)])

    def record(self, vc_id: str, broker: Broker, session_id: int, per_vc: int | None = None) -> None:
        """`per_vc`: the VC's own bound (its `max_fetch_sessions` setting), None for the config's."""
        key = (broker, session_id)
        if self._owner.vc_of(key) == vc_id:  # every answer of a session goes on: only used
            self._owner.touch(key)
            return
        if self.tell is not None and type(broker) is int:
            self.tell(["record", vc_id, broker, session_id])
        self._owner.bound(vc_id, per_vc)
        self._set(key, vc_id)  # a newer owner wins: that broker reused the id

    def drop(self, broker: Broker, session_id: int) -> None:
        owner = self._owner.vc_of((broker, session_id))
        if owner is None:
            return
        self._owner.pop((broker, session_id))
        self._changed(owner)
        if self.tell is not None and type(broker) is int:
            self.tell(["drop", broker, session_id])

    def learn(self, told: object) -> None:
        """Another worker's change, as its `tell` gave it. A record for an id this worker holds for another
        VC leaves the id to nobody: the two were told in some order across processes, and the older may
        have arrived last; either owner's next Fetch gets FETCH_SESSION_ID_NOT_FOUND and starts anew, and
        neither reaches the other's session. Anything else than a change `tell` gives is ignored."""
        if not isinstance(told, list) or not told:
            return
        if told[0] == "record" and len(told) == 4:
            _, vc_id, broker, session_id = told
            if isinstance(vc_id, str) and type(broker) is int and type(session_id) is int:
                key = (broker, session_id)
                owner = self._owner.vc_of(key)
                if owner is None or owner == vc_id:
                    self._set(key, vc_id)
                else:
                    self._owner.pop(key)
                    self._changed(owner)
        elif told[0] == "drop" and len(told) == 3:
            _, broker, session_id = told
            owner = self._owner.vc_of((broker, session_id)) if type(broker) is int and type(session_id) is int else None
            if owner is not None:
                self._owner.pop((broker, session_id))
                self._changed(owner)
        elif told[0] == "used" and len(told) == 4:
            _, vc_id, broker, used = told
            if isinstance(vc_id, str) and type(broker) is int and isinstance(used, list):
                for session_id in used[: self._owner.total]:
                    if type(session_id) is int and self._owner.vc_of((broker, session_id)) == vc_id:
                        self._owner.touch((broker, session_id))

    def _set(self, key: tuple[Broker, int], vc_id: str) -> None:
        owner = self._owner.vc_of(key)
        if owner is not None and owner != vc_id:
            self._changed(owner)
        for evicted, _, _ in self._owner.put(vc_id, key, None):  # of this VC, or of the VC holding the most
            self._changed(evicted)

    def changes_of(self, vc_id: str) -> Any:
        """The Generation of `vc_id`'s sessions (for a grant), made on first use; None without `make_generation`."""
        changes = self._changes.get(vc_id)
        if changes is None and self.make_generation is not None:
            changes = self._changes[vc_id] = self.make_generation()
        return changes

    def generation(self, vc_id: str) -> int:
        """How many times an id left `vc_id` since its Generation was made (0 where nothing counts: no forwarder)."""
        changes = self._changes.get(vc_id)
        return changes.value() if changes is not None else 0

    def _changed(self, vc_id: str) -> None:
        changes = self._changes.get(vc_id)
        if changes is not None:
            changes.bump()

    def on_response(
        self,
        vc_id: str,
        broker: Broker | None,
        sent: tuple[int, int] | None,
        body: memoryview | bytes,
        per_vc: int | None = None,
    ) -> None:
        """Learn from a Fetch v7+ response body from `broker` (read at its fixed head, records never decoded).

        `sent` is the (session id, epoch) of the request, None for a request without a session; `per_vc` the VC's
        own bound, as `record` takes it.
        """
        if len(body) < _HEAD.size or broker is None:
            return
        _, error, session_id = _HEAD.unpack_from(body)
        if sent is not None:
            old, epoch = sent
            # Epoch -1 closes the session, epoch 0 closes it and opens a new one; 70 says it is gone
            # (71 does not: the client closes it next, with epoch 0).
            if epoch <= 0 or error == ErrorCode.fetch_session_id_not_found or (error == 0 and session_id != old):
                self.drop(broker, old)
        if error == 0 and session_id != 0:
            self.record(vc_id, broker, session_id, per_vc)


FETCH_SESSIONS = FetchSessionOwners()  # one per proxy process: shared by every connection of a VC
