"""Quota meters, sans-I/O (the clock is passed in): what a client used, and how long it must back off.

Each meter does what a Kafka broker does, in two parts:

* **the rate** (metrics, `vcproxy_quota_rate`): Kafka's sampled rate, the sum over `samples` windows of
  `window` seconds (quota.window.num=11, quota.window.size.seconds=1) divided by the time they span,
  counted as at least samples - 1 windows. Windows keep to a grid of whole windows (a broker opens one
  at the first value after the last closed, so sparse large requests stretch windows and under-count).
* **the throttle**: Kafka's token bucket (KIP-599, the broker's controller mutation quota): the bucket
  fills at the quota up to samples * window seconds' worth (a client that was idle may burst that
  much), every request takes its size out, and a client in debt waits debt / quota. A broker's byte
  rate quotas instead throttle by the windowed rate, `(rate - quota) / quota * span`: that lets a client
  settle above its quota by about its request size / span per connection, and the proxy's meters span
  every broker connection of a client (a broker meters its own only), where it adds up (3 connections
  of 1 MB requests against 2 MB/s: about +9%). The bucket converges to the quota exactly, however many
  connections share it. A new meter starts empty: a client is paced from its first request, rather than
  allowed a window's worth at once as on a broker.

A debt is paid in full: the wait is debt / quota however large (only the throttle time a response tells the client is
capped, at `MAX_TOLD`), so a client that ran up a large debt on many connections waits it out on every one, a new
one included (the meter is the entity's, not the connection's).

With several replicas (fleet.py), each meter is also charged what the other replicas' clients of its
entity used (`Meters.absorb`), so that the fleet together is held to the quota.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from .fleet import FleetUsage, Key

SAMPLES = 11
WINDOW = 1.0
MAX_METERS = 10_000  # per proxy: beyond this the least recently used meters are dropped
MAX_TOLD = SAMPLES * WINDOW  # seconds: the most a response's throttle_time_ms says (the mute may last longer)


class Rate:
    """Kafka's sampled rate over `samples` windows of `window` seconds."""

    __slots__ = ("starts", "values", "window")

    def __init__(self, samples: int = SAMPLES, window: float = WINDOW):
        self.window = window
        self.starts = [-1e18] * samples  # start of each window, oldest first; unused ones expired
        self.values = [0.0] * samples

    def record(self, value: float, now: float) -> None:
        newest = len(self.starts) - 1
        last = self.starts[newest]
        elapsed = now - last
        if elapsed >= self.window:
            self.starts.pop(0)
            self.values.pop(0)
            self.starts.append(now if last < -1e17 else last + (elapsed // self.window) * self.window)
            self.values.append(0.0)
        self.values[newest] += value

    def rate(self, now: float) -> float:
        expiry = len(self.starts) * self.window
        total, oldest = 0.0, now
        for start, value in zip(self.starts, self.values, strict=True):
            if now - start < expiry:
                total += value
                oldest = min(oldest, start)
        span = max(now - oldest, (len(self.starts) - 1) * self.window)
        return total / span


class Meter:
    """One entity's use of one quota: its rate, and its token bucket."""

    __slots__ = ("last", "quota", "rate", "throttled", "tokens")

    def __init__(self) -> None:
        self.rate = Rate()
        self.tokens = 0.0  # what the client may still use now; negative: its debt
        self.last: float | None = None
        self.quota = 0.0  # the quota last charged against (for metrics)
        self.throttled = 0.0  # seconds of throttle this meter gave out, in total (for metrics)

    def charge(self, amount: float, quota: float, now: float) -> float:
        """Count `amount` used now against `quota` per second; the seconds the client must now wait."""
        self.rate.record(amount, now)
        self.fill(quota, now)
        self.tokens -= amount
        if self.tokens >= 0:
            return 0.0
        wait = -self.tokens / quota
        self.throttled += wait
        return wait

    def fill(self, quota: float, now: float) -> None:
        """The bucket filled at `quota` per second up to now."""
        if self.last is not None and now > self.last:
            self.tokens = min(quota * SAMPLES * WINDOW, self.tokens + quota * (now - self.last))
        self.last = now if self.last is None else max(self.last, now)
        self.quota = quota

    def settle(self, spent: float, left: float, quota: float, now: float) -> float:
        """An allowance taken out of the bucket earlier (`Meters.reserve`) comes back: `spent` of it was used (counted
        in the rate now), `left` was not (back in the bucket, which it cannot fill past its top; negative: more was
        used than lent, taken out now). The seconds the client must now wait, as `charge` says them, when what it
        used leaves the bucket in debt."""
        self.rate.record(spent, now)
        self.fill(quota, now)
        self.tokens = min(quota * SAMPLES * WINDOW, self.tokens + left)
        if self.tokens >= 0 or (spent <= 0 and left >= 0):
            return 0.0
        wait = -self.tokens / quota
        self.throttled += wait
        return wait

    def absorb(self, amount: float, now: float) -> None:
        """Count what another replica's clients used: in the rate and out of the bucket, throttling nobody
        now (this replica's next client of the entity pays for it). What others report may put the meter at most
        2 * samples windows of the quota in debt: reports are input from the network, and one replica's bug must not
        lock an entity out of every replica for long (its own clients' debt on a replica has no floor)."""
        self.rate.record(amount, now)
        if self.last is not None and now > self.last:
            self.tokens = min(self.quota * SAMPLES * WINDOW, self.tokens + self.quota * (now - self.last))
            self.last = now
        self.tokens = min(self.tokens, max(self.tokens - amount, -self.quota * SAMPLES * WINDOW * 2))


class Meters:
    """The proxy's meters, by meter key (quota key and entity), bounded: an LRU of MAX_METERS, so that
    clients inventing client ids cannot grow memory; a dropped meter starts again empty."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, limit: int = MAX_METERS):
        self.clock = clock
        self.limit = limit
        self._meters: OrderedDict[tuple[str, ...], Meter] = OrderedDict()
        self.fleet: FleetUsage | None = None  # set when replicas share their use (quotas/sharing.py)

    def charge(self, key: Key, amount: float, quota: float, now: float) -> float:
        """Charge a local client's use to meter `key`; the seconds it must now wait. With quota sharing
        the use is also reported to the other replicas, and the quota is this replica's share of it
        while their use is out of sight."""
        fleet = self.fleet
        meter = self.get(key)
        if fleet is None:
            return meter.charge(amount, quota, now)
        fleet.used(key, amount)
        wait = meter.charge(amount, quota * fleet.share(now), now)
        meter.quota = quota  # metrics compare the fleet's rate (what the meter sees) with the whole quota
        return wait

    def held(self, limits: list[tuple[Key, float]], now: float) -> float:
        """What the buckets of `limits` (meter key, quota) hold now, the emptiest's (negative: a debt)."""
        share = self.fleet.share(now) if self.fleet is not None else 1.0
        held = math.inf
        for key, quota in limits:
            meter = self.get(key)
            meter.fill(quota * share, now)
            meter.quota = quota
            held = min(held, meter.tokens)
        return held

    def reserve(
        self, limits: list[tuple[Key, float]], want: float, most: float, now: float, take: bool = True
    ) -> float:
        """An allowance out of the buckets of `limits`, each charged the same: what they all hold now, in whole bytes,
        at most `most`; 0 (none taken) when that is less than `want` or nothing. Spent or not, it comes back through
        `settle`: until then the buckets fill as if it had been used, so a client's requests within it and those
        charged one by one together keep to its quota as exactly as those charged one by one alone.
        `take=False`: what it would give, nothing taken."""
        amount = float(math.floor(min(most, self.held(limits, now))))
        if amount <= 0 or amount < want:
            return 0.0
        for key, _ in limits if take else ():
            self.get(key).tokens -= amount
        return amount

    def precharge(self, limits: list[tuple[Key, float]], most: float, least: float, now: float) -> tuple[float, float]:
        """What a request whose cost is known only once answered (a Fetch) may cost, taken out of the buckets of
        `limits` before it is sent: what they hold, at least `least` and at most `most`; and the seconds it must wait
        for that (what the buckets then owe, paid at the quota). Settled once the answer is charged (`settle`, with
        what it cost and what was taken less that). -> (taken, wait)."""
        share = self.fleet.share(now) if self.fleet is not None else 1.0
        amount = float(math.floor(min(most, max(least, self.held(limits, now)))))
        wait = 0.0
        for key, quota in limits:
            meter = self.get(key)
            meter.tokens -= amount
            if meter.tokens < 0:
                wait = max(wait, -meter.tokens / (quota * share))
        return amount, wait

    def until(self, limits: list[tuple[Key, float]], amount: float, now: float) -> float:
        """The seconds until the buckets of `limits` all hold `amount` (0: they do now)."""
        share = self.fleet.share(now) if self.fleet is not None else 1.0
        wait = 0.0
        for key, quota in limits:
            meter = self.get(key)
            meter.fill(quota * share, now)
            meter.quota = quota
            if meter.tokens < amount:
                wait = max(wait, (amount - meter.tokens) / (quota * share))
        return wait

    def settle(self, limits: list[tuple[Key, float]], spent: float, left: float, now: float) -> float:
        """Of an allowance `reserve` gave: `spent` counted as used now (and told the fleet), `left` returned; the
        seconds the client must now wait (`Meter.settle`), the longest of the limits'."""
        fleet = self.fleet
        share = fleet.share(now) if fleet is not None else 1.0
        wait = 0.0
        for key, quota in limits:
            meter = self.get(key)
            wait = max(wait, meter.settle(spent, left, quota * share, now))
            meter.quota = quota
            if fleet is not None:
                fleet.used(key, spent)
        return wait

    def absorb(self, key: Key, amount: float, now: float) -> None:
        """Another replica's use of meter `key`: charged only where this replica meters the entity too
        (a meter created later starts empty and paces from its first request anyway)."""
        meter = self._meters.get(key)
        if meter is not None:
            meter.absorb(amount, now)

    def get(self, key: tuple[str, ...]) -> Meter:
        meter = self._meters.get(key)
        if meter is None:
            meter = self._meters[key] = Meter()
            if len(self._meters) > self.limit:
                self._meters.popitem(last=False)
        else:
            self._meters.move_to_end(key)
        return meter

    def __len__(self) -> int:
        return len(self._meters)

    def items(self) -> Iterator[tuple[tuple[str, ...], Meter]]:
        return iter(list(self._meters.items()))
