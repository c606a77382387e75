"""A table every tenant fills, bounded per virtual cluster as well as in total, sans-I/O.

A process-wide least-recently-used table lets one tenant's churn evict another tenant's busy entries
(a fetch session, a placeholder, a regex's expansion): whoever adds fastest decides what everyone else
keeps. Here each entry belongs to one VC, and eviction stays within a VC:

* past `per_vc` entries (or the VC's own bound, `bound`), a VC's own least recently used entry goes;
* past `total`, the least recently used entry of the VC holding the most entries goes. That VC holds
  more than `total` / (VCs with entries), its fair share, so a VC under its share never loses an entry
  to another's churn. Of VCs holding as many, the one adding goes first (but never its new entry).

Operations are O(1): each VC's entries are in their own order, and VCs are bucketed by their count.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PerVcLru(Generic[K, V]):
    def __init__(self, total: int, per_vc: int):
        self.total = total
        self.per_vc = per_vc
        self._vc_of: dict[K, str] = {}
        self._entries: dict[str, OrderedDict[K, V]] = {}  # VC -> its entries, least recently used first
        self._by_count: dict[int, dict[str, None]] = {}  # entries held -> the VCs holding that many (ordered)
        self._most = 0  # the largest count held
        self._bounds: dict[str, int] = {}  # VC -> its own bound, where it is not `per_vc`

    def __len__(self) -> int:
        return len(self._vc_of)

    def __contains__(self, key: object) -> bool:
        return key in self._vc_of

    def count(self, vc: str) -> int:
        entries = self._entries.get(vc)
        return len(entries) if entries is not None else 0

    def vc_of(self, key: K) -> str | None:
        return self._vc_of.get(key)

    def bound(self, vc: str, per_vc: int | None) -> None:
        """`vc`'s own bound from its next entry on (None: `per_vc`)."""
        if per_vc is None:
            self._bounds.pop(vc, None)
        else:
            self._bounds[vc] = per_vc

    def get(self, key: K) -> V | None:
        """The entry's value, leaving its place as it is."""
        vc = self._vc_of.get(key)
        return self._entries[vc][key] if vc is not None else None

    def items(self, vc: str) -> Iterator[tuple[K, V]]:
        """A VC's entries, least recently used first."""
        return iter(list(self._entries.get(vc, {}).items()))

    def touch(self, key: K) -> bool:
        """Marks the entry used (False: there is none)."""
        vc = self._vc_of.get(key)
        if vc is None:
            return False
        self._entries[vc].move_to_end(key)
        return True

    def put(self, vc: str, key: K, value: V) -> list[tuple[str, K, V]]:
        """Adds or replaces the entry as `vc`'s, most recently used; the entries evicted for it, as (VC, key, value)
        (an entry `key` held for another VC is replaced, not evicted)."""
        owner = self._vc_of.get(key)
        if owner is not None and owner != vc:
            self.pop(key)
        entries = self._entries.get(vc)
        if entries is None:
            entries = self._entries[vc] = OrderedDict()
        before = len(entries)
        entries[key] = value
        entries.move_to_end(key)
        self._vc_of[key] = vc
        if len(entries) != before:
            self._recount(vc, before, before + 1)
        evicted: list[tuple[str, K, V]] = []
        while len(entries) > max(self._bounds.get(vc, self.per_vc), 1):
            evicted.append(self._evict(vc))
        while len(self._vc_of) > max(self.total, 1):
            evicted.append(self._evict(self._largest(vc, key)))
        return evicted

    def pop(self, key: K) -> V | None:
        vc = self._vc_of.pop(key, None)
        if vc is None:
            return None
        entries = self._entries[vc]
        value = entries.pop(key)
        self._recount(vc, len(entries) + 1, len(entries))
        if not entries:
            del self._entries[vc]
        return value

    def _largest(self, adding: str, key: K) -> str:
        """The VC to evict from when the table is full: one holding the most, `adding` first unless the only entry
        it holds is the one just added."""
        holders = self._by_count[self._most]
        if adding in holders and (self._most > 1 or key not in self._entries[adding]):
            return adding
        for vc in holders:
            if vc != adding:
                return vc
        return adding

    def _evict(self, vc: str) -> tuple[str, K, V]:
        key, value = next(iter(self._entries[vc].items()))
        self.pop(key)
        return vc, key, value

    def _recount(self, vc: str, old: int, new: int) -> None:
        if old:
            holders = self._by_count[old]
            del holders[vc]
            if not holders:
                del self._by_count[old]
                if old == self._most and new < old:
                    self._most = new
        if new:
            self._by_count.setdefault(new, {})[vc] = None
            self._most = max(self._most, new)
