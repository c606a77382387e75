"""`serve --workers N`, sans-I/O: which worker takes a connection, the control messages, fetch-session
ownership told between workers, and one /metrics for the instance (proxy/core/handoff.py,
proxy/tenancy/fetch_sessions.py, proxy/observability/merge.py)."""

from __future__ import annotations

import os
import random

import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.core import handoff
from proxy.core.handoff import Roster
from proxy.observability.merge import merge
from proxy.observability.metrics import Metrics
from proxy.tenancy.fetch_sessions import FetchSessionOwners


def test_the_least_busy_worker_takes_each_connection():
    roster = Roster()
    for worker in (0, 1, 2):
        roster.join(worker)
    taken = [roster.assign("10.0.0.1") for _ in range(6)]
    assert sorted(w for w, _ in taken[:3]) == [0, 1, 2] and sorted(w for w, _ in taken[3:]) == [0, 1, 2]
    assert len({n for _, n in taken}) == 6  # every connection its own number
    worker, number = taken[1]
    assert roster.closed(worker, number) == "10.0.0.1"
    assert roster.assign("10.0.0.2")[0] == worker  # now the least busy
    assert len(roster) == 6


def test_clients_busy_connections_do_not_all_land_on_one_worker():
    """Each client opens a bootstrap connection, then a broker connection that carries its records: with ties
    broken in a fixed order every broker connection would go to the second worker."""
    roster = Roster(rng=random.Random(7))
    roster.join(0)
    roster.join(1)
    busy = []
    for _ in range(40):
        roster.assign("10.0.0.1")  # the bootstrap connection, kept open
        busy.append(roster.assign("10.0.0.1")[0])  # the broker connection
    assert 10 <= busy.count(0) <= 30, busy.count(0)


def test_a_worker_cannot_close_another_workers_connection():
    roster = Roster()
    roster.join(0)
    roster.join(1)
    worker, number = roster.assign("10.0.0.1")
    assert roster.closed(1 - worker, number) is None
    assert roster.closed(worker, 999) is None
    assert roster.closed(worker, number) == "10.0.0.1"
    assert roster.closed(worker, number) is None  # released once only


def test_a_worker_gone_releases_each_of_its_connections_once():
    roster = Roster()
    roster.join(0)
    roster.join(1)
    served = [roster.assign(f"10.0.0.{i}") for i in range(4)]
    gone = roster.leave(0)
    assert sorted(gone) == sorted(f"10.0.0.{i}" for i, (w, _) in enumerate(served) if w == 0)
    assert all(roster.closed(0, n) is None for w, n in served if w == 0)
    assert [roster.assign("10.0.0.9")[0] for _ in range(3)] == [1, 1, 1]  # the one left


def test_a_paused_worker_takes_nothing_new_but_keeps_what_it_serves():
    roster = Roster()
    roster.join(0)
    roster.join(1)
    worker, number = roster.assign("10.0.0.1")
    roster.pause(worker)
    assert {roster.assign("10.0.0.2")[0] for _ in range(3)} == {1 - worker}
    assert roster.closed(worker, number) == "10.0.0.1"
    roster.pause(0)
    roster.pause(1)
    assert roster.assign("10.0.0.3") is None


def test_a_worker_that_cannot_take_one_connection_is_skipped_for_it_only():
    roster = Roster()
    roster.join(0)
    roster.join(1)
    assert {roster.assign("10.0.0.1", frozenset({0}))[0] for _ in range(3)} == {1}
    assert roster.assign("10.0.0.1", frozenset({0, 1})) is None
    assert roster.assign("10.0.0.1")[0] == 0  # still taking the next one: the least busy


def test_control_lines_are_bounded_and_must_be_objects():
    assert handoff.decode(handoff.encode({"closed": 3})) == {"closed": 3}
    assert handoff.decode(b"[1, 2]") == "not an object"
    assert handoff.decode(b"{nope").startswith("not JSON")
    assert handoff.decode(b" " * (handoff.MAX_LINE + 1)).startswith("a line of")


def test_control_lines_come_whole_whatever_the_chunks():
    stream = b"".join(handoff.encode({"n": i, "text": "x" * (i * 37)}) for i in range(50)) + b"[1]\n"
    for size in (1, 7, 4096, len(stream)):
        lines = handoff.Lines()
        got, dropped = [], []
        for at in range(0, len(stream), size):
            messages, why = lines.feed(stream[at : at + size])
            got += messages
            dropped += why
        assert [m["n"] for m in got] == list(range(50)) and dropped == ["not an object"], size


def test_a_partial_control_line_past_the_limit_is_dropped_and_the_next_one_read():
    lines = handoff.Lines(limit=100)
    assert lines.feed(b"{" + b" " * 150) == ([], ["a line over 100 bytes"])
    messages, dropped = lines.feed(b'}\n{"closed": 1}\n')  # the dropped line's tail, then a whole one
    assert messages == [{"closed": 1}] and len(dropped) == 1 and dropped[0].startswith("not JSON")


def test_a_large_control_line_costs_linear_time():
    """A worker's 8 MiB metrics text in 64 KiB chunks: each byte scanned once (it was copied per chunk)."""
    text = handoff.encode({"metrics": "m" * (8 << 20)})
    lines = handoff.Lines()
    scanned = 0
    real_find = bytearray.find

    class Counting(bytearray):
        def find(self, sub, start=0):  # type: ignore[override]
            nonlocal scanned
            scanned += len(self) - start
            return real_find(self, sub, start)

    lines._buf = Counting()
    for at in range(0, len(text), 65536):
        messages, _ = lines.feed(text[at : at + 65536])
    assert len(messages[0]["metrics"]) == 8 << 20
    assert scanned <= len(text)  # every byte searched once, from where the last search stopped


def test_a_handoff_header_says_number_broker_and_address():
    assert handoff.read_handoff(handoff.handoff_header(7, None, "::1")) == (7, None, "::1")
    assert handoff.read_handoff(handoff.handoff_header(8, 3, "10.0.0.1")) == (8, 3, "10.0.0.1")
    assert handoff.read_handoff(b'{"n": "7", "node": null, "ip": "x"}') == "not a handoff header"
    assert handoff.read_handoff(b"x" * (handoff.MAX_HEADER + 1)).startswith("a header of")


def test_worker_count(tmp_path):
    assert handoff.worker_count("3") == 3
    assert handoff.worker_count("auto", tmp_path) == len(os.sched_getaffinity(0))  # no cgroup limit
    for bad in ("0", "257", "-1", "two"):
        with pytest.raises(ValueError):
            handoff.worker_count(bad)


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "150000 100000\n"}, 2),
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu.max": "400000 100000\n"}, 4),
        ({"cpu/cpu.cfs_quota_us": "250000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu.max": "garbage"}, None),
        ({}, None),
    ],
)
def test_auto_workers_stay_within_the_containers_cpu_limit(tmp_path, files, limit):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert handoff.cgroup_cpu_limit(tmp_path) == limit
    cpus = len(os.sched_getaffinity(0))
    assert handoff.worker_count("auto", tmp_path) == (cpus if limit is None else min(cpus, limit))


# -- fetch sessions across workers ---------------------------------------------------------------


def _told(owners: FetchSessionOwners) -> list[list[object]]:
    told: list[list[object]] = []
    owners.tell = told.append
    return told


def test_a_worker_tells_each_change_of_ownership_once():
    owners = FetchSessionOwners()
    told = _told(owners)
    owners.record("vc-a", 1, 100)
    owners.record("vc-a", 1, 100)  # every Fetch answer records it again: not a change
    owners.record("vc-b", 1, 100)  # that broker reused the id
    owners.drop(1, 100)
    owners.drop(1, 100)
    owners.record("vc-a", ("bootstrap", ("lb", 9092), 1), 5)  # one upstream connection's key: not shareable
    assert told == [["record", "vc-a", 1, 100], ["record", "vc-b", 1, 100], ["drop", 1, 100]]


def test_another_workers_record_is_owned_here_too():
    a, b = FetchSessionOwners(), FetchSessionOwners()
    a.tell = b.learn
    a.record("vc-a", 1, 100)
    assert b.owns("vc-a", 1, 100)
    assert not b.owns("vc-b", 1, 100)
    a.drop(1, 100)
    assert not b.owns("vc-a", 1, 100)


def test_two_owners_of_one_id_leave_it_to_neither():
    """Worker B heard the broker give id 100 to vc-b; a record of vc-a for it arrives from A, told before or
    after (the order across processes is not known): neither VC may then reach the session by naming it."""
    b = FetchSessionOwners()
    b.record("vc-b", 1, 100)
    b.learn(["record", "vc-a", 1, 100])
    assert not b.owns("vc-a", 1, 100)
    assert not b.owns("vc-b", 1, 100)


@pytest.mark.parametrize(
    "told",
    [
        None,
        [],
        ["record"],
        ["record", "vc", "1", 2],
        ["record", "vc", 1, 2.0],
        ["record", 5, 1, 2],
        ["drop", 1],
        ["forget", 1, 2],
        "record",
        {"record": 1},
    ],
)
def test_what_is_not_a_tell_is_ignored(told):
    owners = FetchSessionOwners()
    owners.record("vc-a", 1, 2)
    owners.learn(told)
    assert owners.owns("vc-a", 1, 2)
    assert len(owners) == 1


# -- one /metrics -----------------------------------------------------------------------------------


def _worker_text(requests: int) -> str:
    metrics = Metrics()
    for _ in range(requests):
        metrics.request("Produce", "vc1", "cluster", 0.002, 100, 50, [])
    return metrics.render().decode()


def test_one_scrape_has_every_workers_samples_labelled():
    text = merge({"0": _worker_text(2), "1": _worker_text(3)}).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {s.labels["worker"]: s.value for s in families["vcproxy_requests"].samples}
    assert requests == {"0": 2.0, "1": 3.0}
    assert text.count("# TYPE vcproxy_requests_total counter") == 1
    up = {s.labels["worker"]: s.value for s in families["vcproxy_worker_up"].samples}
    assert up == {"0": 1.0, "1": 1.0}


def test_a_worker_that_did_not_answer_shows_as_down():
    text = merge({"0": _worker_text(1), "1": "not { the exposition format"}).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {s.labels["worker"]: s.value for s in families["vcproxy_worker_up"].samples} == {"0": 1.0, "1": 0.0}
    assert {s.labels["worker"] for s in families["vcproxy_requests"].samples} == {"0"}


@pytest.mark.parametrize(
    ("files", "workers"),
    [
        ({"memory.max": "max\n"}, None),
        ({"memory.max": "536870912\n"}, 4),  # 512 MiB
        ({"memory.max": "100000000\n"}, 1),  # less than one worker's: still one
        ({"memory/memory.limit_in_bytes": "268435456\n"}, 2),
        ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1's "no limit"
        ({"memory.max": "lots"}, None),
    ],
)
def test_auto_workers_stay_within_the_containers_memory_limit(tmp_path, files, workers):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    cpus = len(os.sched_getaffinity(0))
    assert handoff.worker_count("auto", tmp_path) == (cpus if workers is None else min(cpus, workers))


# -- failed logins across workers ----------------------------------------------------------------------


def test_failed_logins_count_for_the_instance():
    from proxy.auth.guard import LoginGuard

    here, there = LoginGuard.create(3, 60.0), LoginGuard.create(3, 60.0)
    told: list[object] = []
    here.share(told.append, workers=2)
    for _ in range(3):
        here.failed("10.0.0.1", None, 100.0)
    here.failed("10.0.0.2", "alice", 100.0)
    assert told[-2:] == [["user", "alice"], ["pair", "10.0.0.2\0alice"]]  # no time: each clock has its origin
    for message in told:
        there.learn(message, 5000.0)  # stamped with the receiver's clock
    assert there.spent("10.0.0.1", "bob", 5001.0) == "10.0.0.1"  # spent here, spent there too
    assert there.by_user.exhausted("alice", 5001.0) is False  # one failure of three
    assert there.spent("10.0.0.1", "bob", 5061.0) is None  # the window passes there as here
    assert here.workers == 2


@pytest.mark.parametrize(
    "told",
    [None, [], ["address"], ["host", "10.0.0.1"], ["address", 7], ["address", "x" * 3000],
     ["address", "10.0.0.1", 1.0, 2.0], {"address": "10.0.0.1"}],
)  # fmt: skip
def test_what_is_not_a_told_failure_is_ignored(told):
    from proxy.auth.guard import LoginGuard

    guard = LoginGuard.create(1, 60.0)
    guard.learn(told, 1.0)
    assert guard.by_address._failures == {} and guard.by_user._failures == {} and guard.by_pair._failures == {}
