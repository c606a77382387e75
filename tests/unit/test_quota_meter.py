"""The quota meters (proxy/quotas/meter.py) with a fake clock: Kafka's sampled rate, and the token bucket
that throttles."""

from __future__ import annotations

import heapq

import pytest

from proxy.quotas.fleet import FleetUsage
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


def test_a_debt_is_waited_out_in_full_however_large():
    meter = Meter()
    assert meter.charge(50_000, 1000, 0.0) == pytest.approx(50.0)  # not capped at SAMPLES windows
    assert meter.charge(0, 1000, 11.0) == pytest.approx(39.0)  # still 39 s in debt: what is left of the wait
    assert meter.tokens == pytest.approx(-39_000)
    assert meter.charge(0, 1000, 50.0) == 0.0  # paid


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


def _run_with_allowances(
    connections: int,
    request: float,
    quota: float,
    plain: int = 0,
    duration: float = 120.0,
    off: float = 0.0,
    answers: bool = False,
):
    """As `_run`, with each connection but the first `plain` handed to the forwarder as proxy/net/connection.py hands
    it: when its quota holds the request at hand and a tenth of a second's worth, with an allowance of at most a
    second's worth (QuotaStage.reserve), spent request by request and renewed every second (what was spent counted,
    topped up again, or all of it taken back while the meter is in debt: QuotaStage.renew); the first request that
    does not fit settles it and is charged one by one (muting the connection). The rate they get from 20 s on, and
    the part of their requests served within allowances. `off`: each second of sending is followed by that many
    seconds of none (a client that bursts). `answers`: the sizes are a Fetch answer's, known once it has come: served
    while anything is left, charged whole past it, and the connection then back to the session and muted for the
    debt (QuotaStage.settle)."""
    meters = Meters(clock=lambda: 0.0)
    limits = [(("q",), quota)]
    muted = [0.0] * connections
    held: list[list[float] | None] = [None] * connections  # [left, spent since the last renewal, next renewal]
    ready = [(0.001 * i, i) for i in range(connections)]
    sent = []
    lent = 0
    while ready:
        t, i = heapq.heappop(ready)
        if t > duration:
            break
        allowance = held[i]
        while allowance is not None and t >= allowance[2]:  # the renewals due by now
            meters.settle(limits, allowance[1], 0, allowance[2])
            allowance[1] = 0
            if meters.held(limits, allowance[2]) < 0:
                meters.settle(limits, 0, allowance[0], allowance[2])
                allowance[0] = 0
            else:
                allowance[0] += meters.reserve(limits, 0, quota - allowance[0], allowance[2])
            allowance[2] += 1.0
        if allowance is not None and allowance[0] < (1 if answers else request):  # back to the session
            meters.settle(limits, allowance[1], allowance[0], t)
            held[i] = allowance = None
        least = max(0 if answers else request, quota * 0.1)
        if i >= plain and allowance is None and t >= muted[i] and meters.reserve(limits, least, least, t, take=False):
            amount = meters.reserve(limits, least, max(least, quota * 1.0), t)
            held[i] = allowance = [amount, 0.0, t + 1.0]
        if allowance is not None:
            allowance[1] += request
            forward = t
            lent += 1
            if allowance[0] >= request:
                allowance[0] -= request
            else:  # an answer past what was left: charged whole, and the connection back and muted for the debt
                meters.settle(limits, allowance[1], 0, t)
                debt = -meters.held(limits, t)
                if debt > 0:
                    muted[i] = max(muted[i], t + min(debt / quota, SAMPLES * 1.0))
                held[i] = None
        else:
            forward = max(t, muted[i])
            muted[i] = max(muted[i], t + meters.charge(("q",), request, quota, t))
        sent.append(forward)
        following = forward + 0.005
        if off and following % (1 + off) >= 1:
            following += 1 + off - following % (1 + off)
        heapq.heappush(ready, (following, i))
    return sum(request for f in sent if 20 <= f < 110) / 90, lent / len(sent)


@pytest.mark.parametrize(
    ("connections", "size", "plain"),
    [(5, 3_400, 0), (1, 30_000, 0), (1, 1_000_000, 0), (3, 1_000_000, 0), (5, 256_000, 0), (4, 30_000, 2)],
)
def test_clients_on_allowances_converge_to_the_quota_too(connections, size, plain):
    """Allowances taken out of the bucket and settled later hold a client to its quota as charging each request does,
    alone or beside connections charged request by request (`plain`)."""
    assert _run_with_allowances(connections, size, 2_000_000, plain)[0] == pytest.approx(2_000_000, rel=0.02)


@pytest.mark.parametrize(("connections", "size"), [(1, 30_000), (3, 100_000), (5, 3_400)])
def test_a_client_that_bursts_past_its_quota_is_held_to_it_with_allowances_and_without(connections, size):
    """A client sending 1 s of 6 MB/s or more, then nothing for 0.5 s, against 2 MB/s: the meter fills while it waits,
    it spends that on allowances at each burst's start, and is then charged request by request; it gets its quota,
    as it does with every request charged."""
    rate, lent = _run_with_allowances(connections, size, 2_000_000, off=0.5)
    assert rate == pytest.approx(2_000_000, rel=0.03) and 0.05 < lent < 0.8
    assert _run_with_allowances(connections, size, 2_000_000, plain=connections, off=0.5)[0] == pytest.approx(
        2_000_000, rel=0.03
    )


@pytest.mark.parametrize(
    ("connections", "size", "off", "lent_least"),
    [
        (1, 30_000, 0.0, 0.0),
        (1, 1_000_000, 0.0, 0.0),
        (1, 30_000, 1.5, 0.5),
        (1, 100_000, 1.5, 0.5),
        (2, 30_000, 2.5, 0.5),
    ],
)
def test_consumers_whose_answers_are_charged_past_their_allowances_converge_to_the_quota(
    connections, size, off, lent_least
):
    """A Fetch answer's size is known once it has come: charged whole past what the allowance had left, the
    connection muted for the debt, a consumer still gets its quota, steady (all of it through the session) or in
    bursts (most of it on allowances)."""
    rate, lent = _run_with_allowances(connections, size, 2_000_000, off=off, answers=True)
    assert rate == pytest.approx(2_000_000, rel=0.03) and lent >= lent_least


@pytest.mark.parametrize(("connections", "plain", "off"), [(1, 0, 0.0), (3, 0, 0.0), (4, 2, 0.0), (2, 0, 0.5)])
def test_a_request_rate_on_allowances_converges_to_the_quota_too(connections, plain, off):
    """Under a request rate each request is one of the quota's units: connections sending 200 requests a second each
    against 100 a second, counted on allowances (a count of requests) or one by one, get 100 a second."""
    assert _run_with_allowances(connections, 1, 100.0, plain, off=off)[0] == pytest.approx(100, rel=0.02)


def test_a_client_within_its_request_rate_is_served_within_allowances():
    rate, lent = _run_with_allowances(1, 1, 1000.0)
    assert rate == pytest.approx(200, rel=0.01) and lent > 0.99


def test_a_client_within_its_quota_is_served_within_allowances():
    """3.4 KB every 5 ms (680 KB/s) against 2 MB/s: never held back, and all but its first requests on allowances."""
    rate, lent = _run_with_allowances(1, 3_400, 2_000_000)
    assert rate == pytest.approx(3_400 / 0.005, rel=0.01) and lent > 0.99


def test_an_allowance_is_what_the_buckets_hold_and_comes_back_when_unspent():
    meters = Meters(clock=lambda: 0.0)
    user, cap = (("user",), 1000.0), (("cap",), 4000.0)
    meters.charge(user[0], 0, user[1], 0.0)  # both start empty: a new meter paces from its first request
    meters.charge(cap[0], 0, cap[1], 0.0)
    assert meters.reserve([user, cap], 0, 10_000, 0.5) == 500  # the fuller bucket gives what the emptier holds
    assert meters.get(user[0]).tokens == 0 and meters.get(cap[0]).tokens == 1500
    assert meters.reserve([user, cap], 400, 10_000, 0.75) == 0  # 250 held, 400 wanted: nothing taken
    assert meters.reserve([user, cap], 100, 10_000, 0.75, take=False) == 250 and meters.get(user[0]).tokens == 250
    meters.settle([user, cap], 300, 200, 1.0)  # 300 of the 500 spent, 200 back
    assert meters.get(user[0]).tokens == pytest.approx(500 + 200)  # 0.5 s more of filling, and what came back
    assert meters.get(user[0]).rate.values[-1] == 300  # the rate counts what was spent, when it is settled
    meters.settle([user], 0, 10**9, 2.0)  # however much comes back, the bucket holds 11 s at most
    assert meters.get(user[0]).tokens == SAMPLES * 1000


def test_an_allowance_is_the_replicas_share_and_what_it_spent_is_reported_to_the_fleet():
    meters = Meters(clock=lambda: 0.0)
    meters.fleet = FleetUsage("r1", replicas=2, stale_after=3.0)
    meters.fleet.start(0.0)  # never heard back: from 3 s on, this replica holds its clients to half the quota
    meters.charge(("k",), 0, 1000.0, 0.0)
    assert meters.reserve([(("k",), 1000.0)], 0, 10**9, 10.0) == 10 * 500  # filled at its share, as `charge` fills
    meters.settle([(("k",), 1000.0)], 700, 0, 10.5)
    assert meters.fleet.pending == {("k",): 700}


def test_meters_are_bounded_lru():
    clock = [0.0]
    meters = Meters(clock=lambda: clock[0], limit=3)
    a = meters.get(("k", "a"))
    meters.get(("k", "b"))
    meters.get(("k", "c"))
    assert meters.get(("k", "a")) is a  # touched: now the most recent
    meters.get(("k", "d"))
    assert len(meters) == 3 and {k for k, _ in meters.items()} == {("k", "a"), ("k", "c"), ("k", "d")}
