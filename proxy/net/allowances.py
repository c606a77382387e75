"""A connection's allowances while the forwarder has it: what its byte and request rates let the forwarder serve.

A byte rate or a request rate that applies to a VC connection keeps what it meters with the quota stage, but for an
allowance: when the connection goes to the forwarder, the quota stage takes bytes (requests) out of the meters
(`QuotaStage.reserve`); the forwarder spends them (native/src/forward.rs: a Produce only when its size fits, a Fetch
while anything is left and once the answer before it was charged, its max_bytes lowered to what is left and its answer
charged whole, any request only while one is left); once a term they are counted
and topped up (`QuotaStage.renew`), and when the connection comes back what was spent is counted and what was not
given back (`QuotaStage.settle`). docs/quotas.md, "Measuring and throttling".
"""

from __future__ import annotations

from typing import Any

from ..core.stages.quotas import ALLOWANCE_TERM, QuotaStage
from ..protocol.apikey import ApiKey
from ..protocol.primitives import INT16
from ..quotas.model import FETCH, PRODUCE, REQUEST

# The API whose sizes each byte rate meters: a Produce request's, a Fetch answer's (a request rate counts every API).
METERS = {PRODUCE: ApiKey.PRODUCE, FETCH: ApiKey.FETCH}
IDLE_TERMS = 32  # an allowance nothing was spent of is looked at less often, up to this many terms apart


def want(quota: QuotaStage | None, frame: memoryview) -> int | None:
    """Whether the forwarder may take the connection at `frame` (a whole request, size prefix included) as far as its
    quotas go: None when an allowance it needs could not be had now (the session charges it, and mutes as it would
    have); else the bytes the Produce allowance must hold (its size; 0 for anything else)."""
    keys = quota.allowances() if quota is not None else frozenset()
    if not keys:
        return 0
    api = INT16.unpack_from(frame, 4)[0]
    assert quota is not None
    size = 0
    for key in keys:
        if key == REQUEST:
            needed = 1
        elif METERS[key] == api:
            needed = size = len(frame) if key == PRODUCE else 0
        else:
            continue
        if not quota.reserve(key, needed, take=False):
            return None
    return size


class Allowances:
    """The allowances of one stay on the forwarder, by quota key."""

    def __init__(self, quota: QuotaStage | None, module: Any, want: int):
        self.quota = quota
        keys = quota.allowances() if quota is not None else frozenset()
        self.held: dict[str, Any] = {}
        for key in sorted(keys):
            assert quota is not None
            needed = want if key == PRODUCE else 1 if key == REQUEST else 0
            self.held[key] = module.Allowance(quota.reserve(key, needed))
        self._every = ALLOWANCE_TERM

    @property
    def request(self) -> Any:
        """What Produce requests may spend (vcproxy_native.Allowance), or None."""
        return self.held.get(PRODUCE)

    @property
    def answer(self) -> Any:
        """What Fetch answers may spend, or None."""
        return self.held.get(FETCH)

    @property
    def count(self) -> Any:
        """The requests the forwarder may serve under a request rate, or None."""
        return self.held.get(REQUEST)

    def tick(self) -> tuple[float, Any] | None:
        """The forwarder's `tick`: (seconds, the renewal), or None without allowances."""
        return (ALLOWANCE_TERM, self.renew) if self.held else None

    def renew(self) -> float:
        """What each allowance spent counted, and each topped up, or taken back while its meters are in debt (the next
        request it meters then goes to the session); the seconds until the next look: a term while anything is spent,
        twice as long each time nothing was, up to `IDLE_TERMS` terms (idle connections cost few wake-ups)."""
        quota = self.quota
        assert quota is not None
        spent_any = False
        for key, allowance in self.held.items():
            spent = allowance.drain()
            spent_any |= spent > 0
            if debt := allowance.overdrawn():  # an answer past what was left: the connection comes back with it
                quota.settle(key, 0, -debt, over=False)
            more = quota.renew(key, spent, allowance.left())
            if more > 0:
                allowance.grant(more)
            elif more < 0:
                quota.settle(key, 0, allowance.revoke(), over=False)
        self._every = ALLOWANCE_TERM if spent_any else min(self._every * 2, IDLE_TERMS * ALLOWANCE_TERM)
        return self._every

    def settle(self) -> None:
        """The connection back from the forwarder: what was spent counted, what was not given back."""
        for key, allowance in self.held.items():
            assert self.quota is not None
            spent, left = allowance.drain(), allowance.revoke()
            self.quota.settle(key, spent, left - allowance.overdrawn())  # negative: a debt, which mutes
        self.held.clear()
