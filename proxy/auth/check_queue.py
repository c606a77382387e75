"""Who runs the next password check: the bound on the CPU that key derivations (PLAIN's PBKDF2) may take, with
a fair share per client address. Sans-I/O: the shell (proxy/net/password_checks.py) runs what is admitted.

At most `slots` checks run at once (one thread each), at most `per_key` of them for one key (a client
address). A check beyond either waits, never refused: waiting keys take turns, one check each in the order
they first waited, so an address with a thousand logins queued delays another address's one login by at most
one check per address ahead of it, not by its thousand. What waits is a login on an open connection, so the
queue is as bounded as the connections are (limits.max_connections, the login deadline)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


@dataclass
class FairQueue(Generic[T]):
    slots: int = 1
    per_key: int = 1
    _running: dict[str, int] = field(default_factory=dict)
    _waiting: OrderedDict[str, deque[T]] = field(default_factory=OrderedDict)  # in turn order

    @property
    def running(self) -> int:
        return sum(self._running.values())

    @property
    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def resize(self, slots: int, per_key: int) -> list[T]:
        """New bounds (a reload); returns the waiting items admitted now that more may run."""
        self.slots, self.per_key = max(1, slots), max(1, per_key)
        return self._admit()

    def arrive(self, key: str, item: T) -> bool:
        """True: `item` runs now (call `leave` once done); False: it waits until `leave` admits it."""
        if key not in self._waiting and self._may_run(key):
            self._running[key] = self._running.get(key, 0) + 1
            return True
        self._waiting.setdefault(key, deque()).append(item)
        return False

    def leave(self, key: str) -> list[T]:
        """A running check of `key` ended; returns the waiting items admitted in its place (running now)."""
        count = self._running.get(key, 0) - 1
        if count > 0:
            self._running[key] = count
        else:
            self._running.pop(key, None)
        return self._admit()

    def cancel(self, key: str, item: T) -> bool:
        """A waiting item gives up (its connection closed). False: it was admitted already, so it runs
        and must `leave`."""
        queue = self._waiting.get(key)
        if queue is None or item not in queue:
            return False
        queue.remove(item)
        if not queue:
            del self._waiting[key]
        return True

    def _may_run(self, key: str) -> bool:
        return self.running < self.slots and self._running.get(key, 0) < self.per_key

    def _admit(self) -> list[T]:
        admitted: list[T] = []
        progress = True
        while progress and self._waiting and self.running < self.slots:
            progress = False
            for key in list(self._waiting):
                if self.running >= self.slots:
                    break
                if not self._may_run(key):
                    continue
                queue = self._waiting.pop(key)
                admitted.append(queue.popleft())
                self._running[key] = self._running.get(key, 0) + 1
                if queue:
                    self._waiting[key] = queue  # to the back: the other keys go first
                progress = True
                break
        return admitted
