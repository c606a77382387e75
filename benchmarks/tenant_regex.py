"""Micro benchmark: what a tenant's topic regex costs the proxy (issue 8, class 3).

Prints, for Python's backtracking `re` (what the proxy used before) and for the RE2 evaluation with
its cache and budget (proxy/tenancy/regex.py): the time to expand `(a+)+b` over a VC whose topic is
`a` x N, and for adversarial RE2 patterns over a VC of many 212-character names, the longest single
call (what one request can hold the event loop) and how many calls it takes to finish.

Run: .venv/bin/python benchmarks/tenant_regex.py [topics]
"""

from __future__ import annotations

import random
import re
import sys
import time
import uuid

from proxy.tenancy import regex
from proxy.tenancy.model import TenancyImage, link_record, vc_record


def vc_with(names: list[str]):  # type: ignore[no-untyped-def]
    image = TenancyImage()
    image.apply(*vc_record("bench"))
    for name in names:
        image.apply(*link_record("bench", name, f"{uuid.uuid4()}.{name}"))
    return image.vcs["bench"]


def backtracking(n: int) -> float:
    started = time.perf_counter()
    re.fullmatch("(a+)+b", "a" * n)
    return time.perf_counter() - started


def budgeted(vc, pattern: str) -> tuple[int, float, float]:  # type: ignore[no-untyped-def]
    """(calls until complete, longest call, total) with the proxy's slices and VC budget; the budget's
    clock is real, so between calls the loop sleeps as long as the refill needs (heartbeats do)."""
    cache = regex.RegexCache()
    calls, longest, total = 0, 0.0, 0.0
    while True:
        calls += 1
        started = time.perf_counter()
        done = cache.expand(vc, pattern).complete
        spent = time.perf_counter() - started
        longest, total = max(longest, spent), total + spent
        if done:
            return calls, longest, total
        time.sleep(regex.SLICE_SECONDS / regex.VC_RATE)


def main() -> None:
    topics = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    print("Python re, (a+)+b over a*N (one topic):")
    for n in (18, 20, 22):
        print(f"  N={n}: {backtracking(n) * 1e3:9.1f} ms (doubles per extra a: N=25 is ~8x N=22)")
    vc = vc_with(["a" * 25])
    calls, longest, total = budgeted(vc, "(a+)+b")
    print(f"RE2, (a+)+b over a*25: {total * 1e6:.0f} us, {calls} call(s)")
    rng = random.Random(1)
    names = ["".join(rng.choice("ab") for _ in range(212)) for _ in range(topics)]
    vc = vc_with(names)
    print(
        f"RE2 over {topics} names of 212 characters (slice {regex.SLICE_SECONDS * 1e3:.0f} ms, "
        f"VC budget {regex.VC_RATE * 1e3:.0f} ms/s, burst {regex.VC_BURST * 1e3:.0f} ms):"
    )
    for pattern in ("a.*", "(a+)+b", ".*a.{20}", ".*a.{150}"):
        calls, longest, total = budgeted(vc, pattern)
        print(f"  {pattern:12} {calls:5} calls, longest {longest * 1e3:6.1f} ms, total {total * 1e3:8.1f} ms")
    cache = regex.RegexCache()
    cache.expand(vc, "a.*")
    started = time.perf_counter()
    for _ in range(1000):
        cache.expand(vc, "a.*")
    print(f"cached heartbeat lookup: {(time.perf_counter() - started) * 1e3:.1f} us per call")


if __name__ == "__main__":
    main()
