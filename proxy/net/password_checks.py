"""The Trio shell of proxy/auth/check_queue.py: password checks (PLAIN key derivations) run in worker threads,
at most `limits.num_password_check_threads` at once per process and `limits.max_password_checks_per_ip` of
them for one client address; the rest wait their turn (never the event loop, never refused)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio

from ..auth.check_queue import FairQueue

R = TypeVar("R")


class PasswordChecks:
    def __init__(self, slots: int = 1, per_key: int = 1):
        self._queue: FairQueue[trio.Event] = FairQueue(slots, per_key)
        self.ran = 0  # checks run since start (tests, the log)

    def resize(self, slots: int, per_key: int) -> None:
        if (slots, per_key) != (self._queue.slots, self._queue.per_key):
            for admitted in self._queue.resize(slots, per_key):
                admitted.set()

    async def run(self, key: str, check: Callable[[], R]) -> R:
        turn = trio.Event()
        if not self._queue.arrive(key, turn):
            try:
                await turn.wait()
            except BaseException:
                if not self._queue.cancel(key, turn):  # admitted meanwhile: its turn goes to the next
                    self._leave(key)
                raise
        try:
            self.ran += 1
            # Not abandoned on cancel: the thread runs on, and its slot is freed only once it has ended.
            return await trio.to_thread.run_sync(check)
        finally:
            self._leave(key)

    def _leave(self, key: str) -> None:
        for admitted in self._queue.leave(key):
            admitted.set()
