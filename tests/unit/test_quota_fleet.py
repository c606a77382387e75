"""Quotas across replicas (proxy/quotas/fleet.py with the meters): the fleet is held to one quota, and a
replica that cannot see the others falls back to its share, never to the whole quota."""

from __future__ import annotations

import heapq
import json
import logging

import pytest

from proxy.quotas.fleet import MAX_ENTRIES, FleetUsage
from proxy.quotas.meter import Meters

KEY = ("producer_byte_rate", "team-a", "alice", "app")
QUOTA = 2_000_000.0  # bytes/s
REQUEST = 64 * 1024


class Replica:
    def __init__(self, name: str, replicas: int = 1):
        self.fleet = FleetUsage(name, replicas=replicas)
        self.meters = Meters(clock=lambda: 0.0)
        self.meters.fleet = self.fleet
        self.sent = 0.0


def simulate(replicas: list[Replica], seconds: float, *, delay: float = 0.2, topic_up=lambda t: True) -> float:
    """Each replica has one client that sends REQUEST bytes as soon as its mute ends; every 0.5 s each
    replica reports, and the report reaches every replica (itself too) `delay` later while the topic is
    up. Returns the fleet's bytes per second over the second half."""
    events: list[tuple[float, int, str, int, object]] = []
    seq = 0

    def push(at: float, kind: str, who: int, payload: object = None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, who, payload))

    for i in range(len(replicas)):
        push(0.0, "send", i)
        push(0.5, "report", i)
    measured_from, measured = seconds / 2, 0.0
    while events:
        now, _, kind, who, payload = heapq.heappop(events)
        if now > seconds:
            break
        replica = replicas[who]
        if kind == "send":
            wait = replica.meters.charge(KEY, REQUEST, QUOTA, now)
            if now >= measured_from:
                measured += REQUEST
            push(now + max(wait, 0.001), "send", who)
        elif kind == "report":
            records = replica.fleet.report(now)
            if topic_up(now):
                for j in range(len(replicas)):
                    for record in records:
                        push(now + delay, "deliver", j, record)
            push(now + 0.5, "report", who)
        else:
            assert isinstance(payload, bytes)
            for key, amount in replica.fleet.receive(payload, now):
                replica.meters.absorb(key, amount, now)
    return measured / (seconds - measured_from)


def test_one_replica_alone_holds_its_client_to_the_quota():
    assert simulate([Replica("r1")], 120) == pytest.approx(QUOTA, rel=0.05)


@pytest.mark.parametrize("count", [2, 3])
def test_replicas_that_share_their_use_hold_the_fleet_to_one_quota(count):
    assert simulate([Replica(f"r{i}") for i in range(count)], 120) == pytest.approx(QUOTA, rel=0.05)


def test_without_sharing_each_replica_would_give_a_whole_quota():
    """The problem itself: the same two replicas with their reports never delivered, and no share."""
    replicas = [Replica("r1"), Replica("r2")]
    for r in replicas:
        r.meters.fleet = None
    assert simulate(replicas, 120) == pytest.approx(2 * QUOTA, rel=0.05)


def test_when_the_topic_goes_down_each_replica_falls_back_to_its_share():
    """Reports stop arriving at 30 s: each replica goes on with half the quota (it heard one peer), so
    the fleet stays within the quota; never the whole quota each."""
    replicas = [Replica("r1"), Replica("r2")]
    rate = simulate(replicas, 240, topic_up=lambda t: t < 30)
    assert rate == pytest.approx(QUOTA, rel=0.05)
    assert all(r.fleet.share(240) == 0.5 for r in replicas)


def test_a_replica_that_never_heard_a_peer_uses_the_configured_replica_count():
    lonely = FleetUsage("r1", replicas=3)
    lonely.report(0.0)
    assert lonely.share(1.0) == 1.0  # within stale_after: its report may still come back
    assert lonely.share(10.0) == pytest.approx(1 / 3)


def test_a_topic_that_never_carries_a_report_leaves_each_replica_its_share():
    """Started, the usage topic never reads back (unreadable, or the consumer never reaches its end): no
    report was even sent, and still each replica falls back to its share, not the whole quota."""
    fleet = FleetUsage("r1", replicas=2)
    fleet.start(0.0)
    assert fleet.share(1.0) == 1.0
    assert fleet.share(3.5) == 0.5
    fleet.receive(fleet.report(4.0)[0], 4.1)  # it reads back at last
    assert fleet.share(4.2) == 1.0


def test_a_failed_write_is_stale_at_once_and_a_write_that_works_again_ends_it():
    fleet = FleetUsage("r1", replicas=2)
    fleet.report(0.0)
    fleet.write_failed(0.1)
    assert fleet.share(0.1) == 0.5
    fleet.written()
    fleet.receive(fleet.report(1.0)[0], 1.1)
    assert fleet.share(1.2) == 1.0


def test_peers_heard_long_before_the_topic_went_quiet_do_not_count():
    fleet = FleetUsage("r1", peer_timeout=10.0)
    for peer in ("r2", "r3"):
        fleet.receive(json.dumps({"replica": peer, "usage": []}).encode(), 0.0)
    fleet.receive(json.dumps({"replica": "r2", "usage": []}).encode(), 50.0)
    fleet.report(55.0)  # never comes back
    assert fleet.share(60.0) == 0.5  # r1 and r2; r3 was last heard 55 s before


def test_a_report_carries_what_was_used_since_the_last_once_and_splits_when_large():
    fleet = FleetUsage("r1")
    fleet.used(KEY, 10)
    fleet.used(KEY, 5)
    fleet.used(("request_percentage", "team-a", "alice", "app"), 0)  # nothing used: nothing reported
    (record,) = fleet.report(0.0)
    assert json.loads(record) == {"replica": "r1", "usage": [[list(KEY), 15.0]]}
    assert json.loads(fleet.report(0.5)[0])["usage"] == []  # still sent: it shows the replica alive
    for i in range(MAX_ENTRIES + 1):
        fleet.used(("k", str(i)), 1)
    records = fleet.report(1.0)
    assert [len(json.loads(r)["usage"]) for r in records] == [MAX_ENTRIES, 1]
    peer = FleetUsage("r2")
    assert sum(len(peer.receive(r, 1.0)) for r in records) == MAX_ENTRIES + 1


def test_a_replicas_own_reports_are_not_charged_twice():
    fleet = FleetUsage("r1")
    fleet.used(KEY, 10)
    (record,) = fleet.report(0.0)
    assert fleet.receive(record, 0.1) == []


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"not json",
        b"[]",
        b'{"replica": "r2"}',
        b'{"replica": "", "usage": []}',
        b'{"replica": "r2", "usage": [["k", 1]]}',
        b'{"replica": "r2", "usage": [[[], 1]]}',
        b'{"replica": "r2", "usage": [[["k"], -1]]}',
        b'{"replica": "r2", "usage": [[["k"], 1e300]]}',
        b'{"replica": "r2", "usage": [[["k"], NaN]]}',
        b'{"replica": "r2", "usage": [[["k"], true]]}',
        b'{"replica": "r2", "usage": [[["k"], "1"]]}',
        b'{"replica": "r2", "usage": [[[1], 1]]}',
        json.dumps({"replica": "r2", "usage": [[["k"], 1]] * (MAX_ENTRIES + 1)}).encode(),
        json.dumps({"replica": "r2", "usage": [[["x" * 513], 1]]}).encode(),
    ],
)
def test_a_record_that_is_not_a_sound_report_is_dropped_whole_with_one_line(value, caplog):
    fleet = FleetUsage("r1")
    with caplog.at_level(logging.WARNING, logger="proxy.quotas.fleet"):
        assert fleet.receive(value, 0.0) == []
        assert fleet.receive(value, 0.0) == []
    assert len(caplog.records) == 1 and "dropping a quota usage record" in caplog.records[0].getMessage()
    assert fleet.peers == {}


def test_a_peers_use_reaches_only_meters_this_replica_already_has():
    """Another replica's entities do not fill this replica's meters (bounded by its own clients)."""
    meters = Meters(clock=lambda: 0.0)
    meters.absorb(KEY, 1000, 0.0)
    assert len(meters) == 0
    meters.charge(KEY, 1000, QUOTA, 0.0)
    meters.absorb(KEY, 3 * QUOTA, 0.1)
    assert meters.charge(KEY, 1, QUOTA, 0.2) > 2.5  # paying for the peer's use


def test_a_peers_huge_reports_cannot_put_a_meter_in_debt_for_ever():
    meters = Meters(clock=lambda: 0.0)
    meters.charge(KEY, 1, QUOTA, 0.0)
    for _ in range(1000):
        meters.absorb(KEY, 1e15, 0.0)
    assert meters.get(KEY).tokens >= -2 * QUOTA * 11
