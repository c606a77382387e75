"""How often a login may fail, and what a spent budget costs: the failed-login budgets the SASL servers of one
proxy share (a budget the broker lacks, but a proxy holding many tenants' passwords needs; docs/security.md).
Sans-I/O: the caller passes the clock.

Three budgets count failures: per (address, user), per user and per address. A spent budget is answered by
delay; no login is refused without a check unless its own key's checks are queued `horizon` seconds ahead:

* a spent (address, user) or user budget *paces* that key's logins: at most one password check per
  `window / limit` seconds for it (across workers), the waiting ones queued up to `horizon` seconds ahead.
  This is what slows one client looping on a stale password (its pair) and many addresses guessing one
  name (the user), while every other user's logins, from the same address too, go on at once;
* a spent address budget alone paces nothing (other users behind that NAT log in as usual); its failures are
  answered `SLOW_DOWN` times later than Kafka's failed-authentication delay, and its checks get no more than
  their fair share of the check threads (proxy/auth/check_queue.py). That is the bound on credential stuffing
  (many users, one address);
* a failure with any of the three spent is answered `SLOW_DOWN` times later.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..quoting import shown

LONG_NAME = 128  # user names longer than this are counted by their digest
MAX_KEY = 1024  # a user name or an address told by another worker; longer ones are not learnt
SLOW_DOWN = 10  # failed logins beyond a budget wait this many times the usual delay


@dataclass
class FailureBudget:
    """Failed attempts per key (a client address, a user name, both) within a sliding window.

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
class Pacer:
    """When the next paced check of a key may start. A key whose time has passed holds nothing: the table
    only holds keys paced now, at most `max_keys` (beyond, the stalest go first)."""

    max_keys: int = 100_000
    _next: dict[str, float] = field(default_factory=dict)

    def free_at(self, key: str, now: float) -> float:
        return max(now, self._next.get(key, now))

    def take(self, key: str, slot: float, interval: float, now: float) -> None:
        if key not in self._next and len(self._next) >= self.max_keys:
            for stale in [k for k, t in self._next.items() if t <= now]:
                del self._next[stale]
            while len(self._next) >= self.max_keys:
                del self._next[next(iter(self._next))]
        self._next[key] = slot + interval


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a login must do before its password is checked."""

    wait: float = 0.0  # seconds before the check may start (a spent pair or user budget paces it)
    refuse: bool = False  # the key's checks are queued beyond the horizon: fail, late, without a check
    spent: str | None = None  # which budget is spent, for the log


@dataclass
class FailureLog:
    """One log line per key per `interval`: the first failure of a key is logged, the next ones only counted
    until the interval has passed; the next line says how many failures and password checks it stands for."""

    interval: float = 10.0
    max_keys: int = 100_000
    _keys: dict[str, list[float]] = field(default_factory=dict)  # key -> [last line's time, failures, checks]

    def checked(self, key: str) -> None:
        entry = self._keys.get(key)
        if entry is not None:
            entry[2] += 1
        else:
            self._entry(key, -float("inf"))[2] = 1

    def failed(self, key: str, now: float) -> str | None:
        """The summary to log with this failure, or None: counted, not logged."""
        entry = self._keys.get(key) or self._entry(key, -float("inf"))
        entry[1] += 1
        if now - entry[0] < self.interval:
            return None
        since = "" if entry[0] == -float("inf") else f" in the last {now - entry[0]:.1f} s"
        failures, checks = int(entry[1]), int(entry[2])
        entry[:] = [now, 0, 0]
        plural = "" if failures == 1 else "s"
        return f"{failures} failure{plural} and {checks} password check{'' if checks == 1 else 's'}{since}"

    def _entry(self, key: str, at: float) -> list[float]:
        if len(self._keys) >= self.max_keys:
            newest = max((e[0] for e in self._keys.values()), default=0.0)
            for old in [k for k, e in self._keys.items() if e[0] <= newest - self.interval]:
                del self._keys[old]
            while len(self._keys) >= self.max_keys:
                del self._keys[next(iter(self._keys))]
        entry = self._keys[key] = [at, 0, 0]
        return entry


def user_key(user: str) -> str:
    """A user name as the budgets count it: a long one by its digest, so that no key of these tables, whose
    names come from strangers, costs more than about a hundred bytes."""
    if len(user) <= LONG_NAME:
        return user
    return "sha256:" + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()


def pair_key(address: str, user: str) -> str:
    return f"{address}\0{user_key(user)}"  # NUL: in neither an address nor a user name Kafka accepts


@dataclass
class LoginGuard:
    """The failed-login budgets the SASL servers of one proxy (all its workers) share; see the module."""

    by_address: FailureBudget
    by_user: FailureBudget
    by_pair: FailureBudget
    horizon: float = 5.0  # how far ahead a paced key's checks may be queued (under the login deadline)
    workers: int = 1  # each worker paces at 1/workers of the rate, so the instance holds it
    log: FailureLog = field(default_factory=FailureLog)
    _pace_user: Pacer = field(default_factory=Pacer)
    _pace_pair: Pacer = field(default_factory=Pacer)

    @classmethod
    def create(
        cls,
        limit: int,
        window: float,
        *,
        per_user: int | None = None,
        per_pair: int | None = None,
        horizon: float = 5.0,
        log_interval: float = 10.0,
    ) -> LoginGuard:
        return cls(
            FailureBudget(limit, window),
            FailureBudget(per_user or limit, window),
            FailureBudget(per_pair or limit, window),
            horizon=horizon,
            log=FailureLog(log_interval),
        )

    @classmethod
    def from_config(cls, limits: Any) -> LoginGuard:
        """From `limits.*` (proxy/config.py's LimitsConfig)."""
        return cls.create(
            limits.max_failed_authentications,
            limits.failed_authentication_window_seconds,
            per_user=limits.max_failed_authentications_per_user,
            per_pair=limits.max_failed_authentications_per_ip_and_user,
            horizon=limits.authentication_timeout_ms / 2000,  # a paced login still ends before its deadline
            log_interval=limits.failed_authentication_log_interval_ms / 1000,
        )

    def share(self, tell: Callable[[list[object]], None], workers: int = 1) -> None:
        """A worker's: each failure recorded here is told to the other workers (the budgets are the
        instance's). The time is not told: each worker's clock has its own origin, so the receiver
        stamps a failure with its own clock when it learns it."""
        self.workers = max(1, workers)
        self.by_address.tell = lambda key, _now: tell(["address", key])
        self.by_user.tell = lambda key, _now: tell(["user", key])
        self.by_pair.tell = lambda key, _now: tell(["pair", key])

    def learn(self, told: object, now: float) -> None:
        """Another worker's failure, as `share` tells it, learnt at `now`; anything else is ignored."""
        if not (isinstance(told, list) and len(told) in (2, 3)):
            return
        which, key = told[0], told[1]
        budgets = {"address": self.by_address, "user": self.by_user, "pair": self.by_pair}
        budget = budgets.get(which) if isinstance(which, str) else None
        if budget is None or not isinstance(key, str) or len(key) > 2 * MAX_KEY + 1:
            return
        if isinstance(now, bool) or not isinstance(now, (int, float)) or now != now:
            return
        budget._add(key, float(now))

    # -- what a login meets -----------------------------------------------------------------------

    def before_check(self, address: str, user: str, now: float) -> Verdict:
        """Whether a check of `user`'s password from `address` may run now, later, or (queued too far
        ahead) not at all. Taking a later slot reserves it: call once per check."""
        pair, name = pair_key(address, user), user_key(user)
        paced: list[tuple[Pacer, str, FailureBudget]] = []
        if self.by_pair.exhausted(pair, now):
            paced.append((self._pace_pair, pair, self.by_pair))
        if self.by_user.exhausted(name, now):
            paced.append((self._pace_user, name, self.by_user))
        if not paced:
            return Verdict(spent=self._address_spent(address, now))
        spent = " and ".join(self._name(budget, address, user) for _, _, budget in paced)
        slot = max(pacer.free_at(key, now) for pacer, key, _ in paced)
        if slot - now > self.horizon:
            return Verdict(refuse=True, spent=spent)
        for pacer, key, budget in paced:
            pacer.take(key, slot, budget.window / budget.limit * self.workers, now)
        return Verdict(wait=slot - now, spent=spent)

    def failed(self, address: str, user: str | None, now: float) -> bool:
        """Count a failed login; whether to answer it slowly (a budget was spent before it)."""
        slow = self.spent(address, user, now) is not None
        self.by_address.record(address, now)
        if user is not None:
            self.by_user.record(user_key(user), now)
            self.by_pair.record(pair_key(address, user), now)
        return slow

    def spent(self, address: str, user: str | None, now: float) -> str | None:
        """Which budget of a login of `user` from `address` is spent, if any."""
        if user is not None:
            if self.by_pair.exhausted(pair_key(address, user), now):
                return self._name(self.by_pair, address, user)
            if self.by_user.exhausted(user_key(user), now):
                return self._name(self.by_user, address, user)
        return self._address_spent(address, now)

    def _address_spent(self, address: str, now: float) -> str | None:
        return self._name(self.by_address, address, "") if self.by_address.exhausted(address, now) else None

    def _name(self, budget: FailureBudget, address: str, user: str) -> str:
        if budget is self.by_pair:
            return f"{address} and user {shown(user)}"
        return f"user {shown(user)}" if budget is self.by_user else address
