"""How often a login may fail: the failed-login budgets the SASL servers of one proxy share (a budget the
broker lacks, but a proxy holding many tenants' passwords needs; docs/security.md). Sans-I/O: the caller
passes the clock."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


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

    def spent(self, address: str, user: str, now: float) -> str | None:
        """Which budget a PLAIN check for `user` from `address` would exceed, if any."""
        if self.by_address.exhausted(address, now):
            return address
        if self.by_user.exhausted(user, now):
            return f"user {user!r}"
        return None


SLOW_DOWN = 10  # failed logins from an address whose budget is spent wait this many times the usual delay
