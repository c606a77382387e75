"""The placeholder a VC's request sends for a topic id it does not own, stable and remembered, sans-I/O.

A topic id the VC does not own never reaches the broker as itself: it goes as a placeholder that names no
topic, and the broker answers UNKNOWN_TOPIC_ID for it. A fetch session (KIP-227) keeps what a request added,
so the broker goes on answering the placeholder in later responses, where the client names nothing: a fresh
placeholder per request could not be said back as the client's id there (it reached the client as the zero
id, an answer to nothing it asked: issue 25, franz-go's TestIssue434, a topic deleted while fetched). So the
placeholder of a (VC, id) is the same in every request, derived with a key of this process (nobody can
guess one, or tell from it which id it stands for), and remembered, least recently used first, for the way
back. A forgotten one is answered as before (proxy/tenancy/fetch_deleted.py).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict

MAX_PLACEHOLDERS = 10_000


class Placeholders:
    def __init__(self, limit: int = MAX_PLACEHOLDERS):
        self.limit = limit
        self._key = uuid.uuid4()
        self._client_ids: OrderedDict[uuid.UUID, tuple[str, uuid.UUID]] = OrderedDict()  # placeholder -> (VC, id)

    def __len__(self) -> int:
        return len(self._client_ids)

    def of(self, vc_id: str, topic_id: uuid.UUID) -> uuid.UUID:
        placeholder = uuid.uuid5(self._key, f"{vc_id}/{topic_id}")
        self._client_ids[placeholder] = (vc_id, topic_id)
        self._client_ids.move_to_end(placeholder)
        while len(self._client_ids) > self.limit:
            self._client_ids.popitem(last=False)
        return placeholder

    def client_id(self, vc_id: str, placeholder: uuid.UUID) -> uuid.UUID | None:
        """The id a request of `vc_id` sent as `placeholder`; None for any other id."""
        found = self._client_ids.get(placeholder)
        return found[1] if found is not None and found[0] == vc_id else None


PLACEHOLDERS = Placeholders()  # one per proxy process: a session outlives the connection that opened it
