"""How often a login may fail: the failed-login budgets the SASL servers of one proxy share (a budget the
broker lacks, but a proxy holding many tenants' passwords needs; docs/security.md). Sans-I/O: the caller
passes the clock."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_KEY = 1024  # a user name or an address told by another worker; longer ones are not learnt


@dataclass
class FailureBudget:
    """Failed attempts per key (a client address, a user name) within a sliding window.

    Memory stays bounded: each key keeps at most `limit` timestamps, and keys whose newest failure
    left the window are dropped when the table is larger than `max_keys`.
    """

    limit: int
    window: float
    max_keys: int = 100_000
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    # With workers (proxy/core/handoff.py): told each failure, for the other workers' `learn`.
    tell: Callable[[str, float], None] | None = None

    def exhausted(self, key: str, now: float) -> bool:
        times = self._failures.get(key)
        if times is None:
            return False
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
            return False
        return len(times) >= self.limit

    def record(self, key: str, now: float) -> None:
        if self.tell is not None:
            self.tell(key, now)
        self._add(key, now)

    def _add(self, key: str, now: float) -> None:
        times = self._failures.get(key)
        if times is None:
            if len(self._failures) >= self.max_keys:
                self._expire(now)
            times = self._failures[key] = deque(maxlen=self.limit)
        times.append(now)

    def _expire(self, now: float) -> None:
        for key in [k for k, t in self._failures.items() if not t or t[-1] <= now - self.window]:
            del self._failures[key]
        while len(self._failures) >= self.max_keys:  # all recent: forget the oldest entry
            del self._failures[next(iter(self._failures))]


@dataclass
class LoginGuard:
    """The failed-login budgets the SASL servers of one proxy share.

    Failures count per client address (every mechanism) and per user (PLAIN checks). Spent budgets
    cost the guesser, never the tenant whose name is guessed, and never lock out a correct login:
    * a PLAIN check runs a key derivation (real CPU): beyond either budget, passwords this proxy has
      not verified before for the user fail without one; verified ones still pass, so a tenant
      keeps logging in while someone guesses its name;
    * a SCRAM proof costs two HMACs, so it is always checked; failures from a spent address are
      answered `SLOW_DOWN` times later than Kafka's failed-authentication delay.
    A client retrying a wrong password in a loop (librdkafka reconnects ~8 times a second) therefore
    slows itself down, and the other clients behind its address (NAT, a Kubernetes node) carry on.
    """

    by_address: FailureBudget
    by_user: FailureBudget

    @classmethod
    def create(cls, limit: int, window: float) -> LoginGuard:
        return cls(FailureBudget(limit, window), FailureBudget(limit, window))

    def share(self, tell: Callable[[list[object]], None]) -> None:
        """A worker's: each failure recorded here is told to the other workers (the budgets are the
        instance's). The time is the monotonic clock's, which every process on the host shares."""
        self.by_address.tell = lambda key, now: tell(["address", key, now])
        self.by_user.tell = lambda key, now: tell(["user", key, now])

    def learn(self, told: object) -> None:
        """Another worker's failure, as `share` tells it; anything else is ignored."""
        if not (isinstance(told, list) and len(told) == 3):
            return
        which, key, now = told
        budget = {"address": self.by_address, "user": self.by_user}.get(which) if isinstance(which, str) else None
        if budget is None or not isinstance(key, str) or len(key) > MAX_KEY:
            return
        if isinstance(now, bool) or not isinstance(now, (int, float)) or now != now:
            return
        budget._add(key, float(now))

    def spent(self, address: str, user: str, now: float) -> str | None:
        """Which budget a PLAIN check for `user` from `address` would exceed, if any."""
        if self.by_address.exhausted(address, now):
            return address
        if self.by_user.exhausted(user, now):
            return f"user {user!r}"
        return None


SLOW_DOWN = 10  # failed logins from an address whose budget is spent wait this many times the usual delay
