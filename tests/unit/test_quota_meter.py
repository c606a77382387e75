"""The quota meters (proxy/quotas/meter.py) with a fake clock: Kafka's sampled rate, and the token bucket
that throttles."""

from __future__ import annotations

import heapq

import pytest

from proxy.quotas.meter import SAMPLES, Meter, Meters, Rate


def test_rate_counts_at_least_samples_minus_one_windows():
    rate = Rate()
    rate.record(1000, 0.0)
    # One burst at start is spread over 10 windows, not the few ms since it came.
    assert rate.rate(0.001) == pytest.approx(1000 / 10)


def test_steady_rate_is_measured_and_old_windows_expire():
    rate = Rate()
    t = 0.0
    while t < 30:
        rate.record(100, t)  # 1000/s
        t += 0.1
    assert rate.rate(t) == pytest.approx(1000, rel=0.05)
    assert rate.rate(t + 12) == 0.0


def test_sparse_large_values_keep_windows_whole():
    rate = Rate()
    t = 0.0
    while t < 40:
        rate.record(1300, t)  # one value every 1.3 s: 1000/s
        t += 1.3
    assert rate.rate(t) == pytest.approx(1000, rel=0.12)
    assert all(b - a == pytest.approx(round(b - a)) for a, b in zip(rate.starts, rate.starts[1:], strict=False))


def test_a_new_client_waits_for_what_it_sent():
    meter = Meter()
    assert meter.charge(5000, 1000, 0.0) == pytest.approx(5.0)
    assert meter.throttled == pytest.approx(5.0)
    # Having waited, the next request costs only itself.
    assert meter.charge(1000, 1000, 5.0) == pytest.approx(1.0)


def test_idle_time_is_credit_up_to_the_window():
    meter = Meter()
    meter.charge(1, 1000, 0.0)
    assert meter.charge(10_000, 1000, 100.0) == 0.0  # 100 s idle: 11 s of credit, 10 used
    assert meter.charge(2_000, 1000, 100.0) == pytest.approx(1.0)  # the last 1 s of credit, then 1 s of debt


def test_one_mute_is_bounded_and_the_debt_stays():
    meter = Meter()
    assert meter.charge(50_000, 1000, 0.0) == SAMPLES * 1.0
    assert meter.charge(0, 1000, 11.0) == SAMPLES * 1.0  # still 39 s in debt: muted again
    assert meter.tokens == pytest.approx(-39_000)


def _run(connections: int, request: float, quota: float, duration: float = 120.0) -> float:
    """Clients pipelining `request`-byte requests on `connections` connections that share one meter, each
    connection muted as the stage mutes it; the rate they get, from 20 s on."""
    meter = Meter()
    muted = [0.0] * connections
    ready = [(0.001 * i, i) for i in range(connections)]
    sent = []
    while ready:
        t, i = heapq.heappop(ready)
        if t > duration:
            break
        forward = max(t, muted[i])  # held back until the connection's mute ends
        muted[i] = max(muted[i], t + meter.charge(request, quota, t))
        sent.append(forward)
        heapq.heappush(ready, (forward + 0.005, i))  # the next request is read once this one went on
    return sum(request for f in sent if 20 <= f < 110) / 90


@pytest.mark.parametrize(("connections", "size"), [(1, 30_000), (1, 1_000_000), (3, 1_000_000), (5, 256_000)])
def test_clients_converge_to_the_quota_whatever_their_connections_and_requests(connections, size):
    assert _run(connections, size, 2_000_000) == pytest.approx(2_000_000, rel=0.02)


def test_meters_are_bounded_lru():
    clock = [0.0]
    meters = Meters(clock=lambda: clock[0], limit=3)
    a = meters.get(("k", "a"))
    meters.get(("k", "b"))
    meters.get(("k", "c"))
    assert meters.get(("k", "a")) is a  # touched: now the most recent
    meters.get(("k", "d"))
    assert len(meters) == 3 and {k for k, _ in meters.items()} == {("k", "a"), ("k", "c"), ("k", "d")}
