"""The placeholder a VC's request sends for a topic id it does not own, stable and remembered, sans-I/O.

A topic id the VC does not own never reaches the broker as itself: it goes as a placeholder that names no
topic, and the broker answers UNKNOWN_TOPIC_ID for it. A fetch session (KIP-227) keeps what a request added,
so the broker goes on answering the placeholder in later responses, where the client names nothing: a fresh
placeholder per request could not be said back as the client's id there (it reached the client as the zero
id, an answer to nothing it asked: issue 25, franz-go's TestIssue434, a topic deleted while fetched). So the
placeholder of a (VC, id) is the same in every request, derived with a key of this process (nobody can
guess one, or tell from it which id it stands for), and remembered, least recently used first, for the way
back, at most `MAX_PLACEHOLDERS_PER_VC` of a VC and `MAX_PLACEHOLDERS` in all (proxy/tenancy/per_vc_lru.py:
one tenant naming ids by the thousand forgets only its own). A forgotten one is answered as before
(proxy/tenancy/fetch_deleted.py).
"""

from __future__ import annotations

import uuid

from .per_vc_lru import PerVcLru

MAX_PLACEHOLDERS = 10_000  # limits.max_placeholders
MAX_PLACEHOLDERS_PER_VC = 1_000  # limits.max_placeholders_per_vc


class Placeholders:
    def __init__(self, limit: int = MAX_PLACEHOLDERS, per_vc: int = MAX_PLACEHOLDERS_PER_VC):
        self._key = uuid.uuid4()
        self._client_ids: PerVcLru[uuid.UUID, uuid.UUID] = PerVcLru(limit, per_vc)  # placeholder -> the VC's id

    def __len__(self) -> int:
        return len(self._client_ids)

    def bound(self, total: int, per_vc: int) -> None:
        """The limits from now on (the config's `limits.max_placeholders*`)."""
        self._client_ids.total, self._client_ids.per_vc = total, per_vc

    def of(self, vc_id: str, topic_id: uuid.UUID) -> uuid.UUID:
        placeholder = uuid.uuid5(self._key, f"{vc_id}/{topic_id}")
        self._client_ids.put(vc_id, placeholder, topic_id)
        return placeholder

    def client_id(self, vc_id: str, placeholder: uuid.UUID) -> uuid.UUID | None:
        """The id a request of `vc_id` sent as `placeholder`; None for any other id."""
        return self._client_ids.get(placeholder) if self._client_ids.vc_of(placeholder) == vc_id else None


PLACEHOLDERS = Placeholders()  # one per proxy process: a session outlives the connection that opened it
