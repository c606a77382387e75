"""Where the state store's admin clients are let go: on the caller's thread, never on librdkafka's.

librdkafka aborts the whole process when a client is destroyed on one of that client's own threads. An
AdminClient runs Python there: the futures of its requests are resolved on its background thread, and any
Python code may start the cyclic garbage collector. An admin client caught in a reference cycle (a call's
frame kept by the traceback of the error it raised, after the call timed out) is then collected on its
own background thread when its late answer arrives, and the proxy dies mid-request. So each admin client
is held here until nothing else refers to it, and is dropped on a caller's thread: as the store call that
made it returns (`_admin_call` in store.py), or, if an error's traceback still holds it, by a later call.

The calls made again and again while the proxy runs (the state topic's check every few seconds, the
orphan sweep) share one kept client instead: making a client starts its threads and opens and greets a
broker connection each time, which was most of an idle replica's CPU. It is let go the same way, at close.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from confluent_kafka.admin import AdminClient

# sys.getrefcount of a held client in `sweep`'s comprehension when nothing else has it: the list's slot, the
# comprehension's variable, the call's argument.
_ONLY_OURS = 3


class AdminHandles:
    def __init__(self, make: Callable[[], AdminClient]) -> None:
        self._make = make
        self._held: list[AdminClient] = []
        self._kept: AdminClient | None = None
        self._lock = threading.Lock()

    def new(self) -> AdminClient:
        """A fresh admin client, held until a later `sweep` finds nobody else using it."""
        self.sweep()
        client = self._make()
        with self._lock:
            self._held.append(client)
        return client

    def kept(self) -> AdminClient:
        """The one client of the periodic calls: made at the first, held until `release`."""
        with self._lock:
            if self._kept is None:
                self._kept = self._make()
            return self._kept

    def release(self) -> int:
        """Let the kept client go too (at close); how many clients are still held (in use elsewhere)."""
        with self._lock:
            if self._kept is not None:
                self._held.append(self._kept)
                self._kept = None
        return self.sweep()

    def sweep(self) -> int:
        """Destroy, on this thread, every held client nothing else refers to; how many are still held."""
        with self._lock:
            held = self._held
            self._held = [client for client in held if sys.getrefcount(client) > _ONLY_OURS]
            remaining = len(self._held)
        held.clear()  # librdkafka's destroy runs here, outside the lock (it waits for the client's threads)
        return remaining
