"""The failed-login guard (proxy/auth/guard.py) and the password-check queue (proxy/auth/check_queue.py),
sans-I/O with a clock the test moves; and the queue's Trio shell (proxy/net/password_checks.py)."""

from __future__ import annotations

import threading

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.auth.check_queue import FairQueue
from proxy.auth.guard import FailureLog, LoginGuard, pair_key
from proxy.config import ConfigError, parse_config
from proxy.net.password_checks import PasswordChecks

ADDRESSES = st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3"])
USERS = st.sampled_from(["alice", "bob", "carol", "dave"])
# (seconds since the previous attempt, address, user, whether the password is right)
ATTEMPTS = st.lists(
    st.tuples(st.floats(0, 3, allow_nan=False), ADDRESSES, USERS, st.booleans()), min_size=1, max_size=120
)


@settings(max_examples=300, deadline=None)
@given(ATTEMPTS, st.integers(1, 6), st.integers(1, 6), st.integers(1, 6))
def test_a_login_whose_own_budgets_are_unspent_is_checked_at_once(attempts, per_address, per_user, per_pair):
    """Whatever its address's budget says: another user's right password from a guesser's address is
    never refused nor delayed, unless that user's own budgets (the pair, the user) are spent."""
    guard = LoginGuard.create(per_address, 60.0, per_user=per_user, per_pair=per_pair)
    now = 1000.0
    for gap, address, user, right in attempts:
        now += gap
        own_spent = guard.by_pair.exhausted(pair_key(address, user), now) or guard.by_user.exhausted(user, now)
        verdict = guard.before_check(address, user, now)
        if not own_spent:
            assert verdict.wait == 0 and not verdict.refuse
        if not right and not verdict.refuse:
            guard.failed(address, user, now + verdict.wait)


@settings(max_examples=300, deadline=None)
@given(ATTEMPTS, st.integers(1, 4), st.integers(1, 6))
def test_a_spent_key_gets_at_most_one_check_per_interval(attempts, per_pair, per_user):
    """The guesser's rate of password checks: once its pair (or user) budget is spent, checks of that key
    start at least window/limit apart, however fast it retries, and none waits beyond the horizon."""
    guard = LoginGuard.create(100, 60.0, per_user=per_user, per_pair=per_pair, horizon=5.0)
    checks: dict[str, list[float]] = {}
    now = 1000.0
    for gap, address, user, right in attempts:
        now += gap
        pair = pair_key(address, user)
        paced_by = [
            (key, 60.0 / limit)
            for key, limit, spent in (
                ("p:" + pair, per_pair, guard.by_pair.exhausted(pair, now)),
                ("u:" + user, per_user, guard.by_user.exhausted(user, now)),
            )
            if spent
        ]
        verdict = guard.before_check(address, user, now)
        assert verdict.wait <= 5.0
        if verdict.refuse:
            assert paced_by  # only a paced key is ever refused
            continue
        start = now + verdict.wait
        for key, interval in paced_by:
            starts = checks.setdefault(key, [])
            assert not starts or start - starts[-1] >= interval - 1e-9, (key, starts, start)
            starts.append(start)
        if not right:
            guard.failed(address, user, start)


def test_credential_stuffing_and_brute_force_each_meet_their_budget():
    guard = LoginGuard.create(5, 60.0, per_user=5, per_pair=3)
    now = 1000.0
    # Credential stuffing: many users, one address. No pair or user budget is spent, so nothing is paced;
    # once the address's budget is spent every failure from it is answered slowly (SLOW_DOWN times later).
    slow = [guard.failed("10.6.6.6", f"user{i}", now) for i in range(8)]
    assert slow == [False] * 5 + [True] * 3
    assert guard.before_check("10.6.6.6", "alice", now).wait == 0  # alice behind that NAT: at once
    # Brute force: one user, many addresses. alice's user budget is spent: her checks are paced (one per
    # 60/5 s) from every address, while bob's are not.
    for i in range(5):
        guard.failed(f"10.7.0.{i}", "alice", now)
    waits = [guard.before_check(f"10.8.0.{i}", "alice", now) for i in range(3)]
    assert waits[0].wait == 0 and waits[1].refuse and waits[2].refuse  # the next slot is 12 s ahead
    assert "user 'alice'" in (waits[1].spent or "")
    assert guard.before_check("10.7.0.1", "bob", now).wait == 0
    now += 8
    assert guard.before_check("10.8.0.9", "alice", now).wait == pytest.approx(4)  # within the horizon: queued


def test_pacing_spreads_over_workers():
    guard = LoginGuard.create(60, 60.0, per_pair=2)
    guard.share(lambda told: None, workers=3)
    for _ in range(2):
        guard.failed("10.0.0.1", "alice", 0.0)
    assert guard.before_check("10.0.0.1", "alice", 1.0).wait == 0
    assert guard.before_check("10.0.0.1", "alice", 30.0).refuse  # 60/2 s times 3 workers: the next slot at 91
    alone = LoginGuard.create(60, 60.0, per_pair=2)
    for _ in range(2):
        alone.failed("10.0.0.1", "alice", 0.0)
    assert alone.before_check("10.0.0.1", "alice", 1.0).wait == 0
    assert alone.before_check("10.0.0.1", "alice", 30.0).wait == pytest.approx(1)  # one worker: at 31


def test_the_pacing_tables_stay_bounded():
    guard = LoginGuard.create(1, 60.0)
    guard._pace_pair.max_keys = guard._pace_user.max_keys = 10
    for i in range(100):
        guard.failed("10.0.0.1", f"u{i}", float(i))
        guard.before_check("10.0.0.1", f"u{i}", float(i))
    assert len(guard._pace_pair._next) <= 10 and len(guard._pace_user._next) <= 10


# -- the failure log: one line per key per interval ------------------------------------------------------


def test_failures_are_logged_once_per_key_per_interval_with_their_count():
    log = FailureLog(interval=10.0, max_keys=3)
    assert log.failed("a", 0.0) == "1 failure and 0 password checks"
    for t in range(1, 9):
        log.checked("a")
        assert log.failed("a", float(t)) is None
    assert log.failed("b", 5.0) is not None  # another key has its own line
    log.checked("a")
    assert log.failed("a", 10.0) == "9 failures and 9 password checks in the last 10.0 s"
    for i in range(20):  # many keys: the table stays bounded
        log.failed(f"k{i}", 100.0 + i)
    assert len(log._keys) <= 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 4, allow_nan=False), st.sampled_from("abc")), max_size=200))
def test_every_failure_is_told_once_in_some_line(events):
    log, now = FailureLog(interval=10.0), 0.0
    lines: dict[str, list[float]] = {}
    told: dict[str, int] = {}
    pending: dict[str, int] = {}
    for gap, key in events:
        now += gap
        pending[key] = pending.get(key, 0) + 1
        summary = log.failed(key, now)
        if summary is not None:
            assert not lines.get(key) or now - lines[key][-1] >= 10.0  # at most one line per interval
            lines.setdefault(key, []).append(now)
            told[key] = told.get(key, 0) + int(summary.split()[0])
            pending[key] = 0
    for key in pending:
        assert told.get(key, 0) + pending[key] == sum(1 for _, k in events if k == key)


# -- the password-check queue ----------------------------------------------------------------------------


def test_a_flooding_address_does_not_hold_back_another_addresss_check():
    queue: FairQueue[str] = FairQueue(slots=1, per_key=1)
    assert queue.arrive("10.6.6.6", "g0")
    for i in range(1, 100):
        assert not queue.arrive("10.6.6.6", f"g{i}")
    assert not queue.arrive("10.0.0.1", "alice")
    assert queue.leave("10.6.6.6") == ["g1"]  # the flood had been waiting first
    assert queue.leave("10.6.6.6") == ["alice"]  # then the other address's turn, not 98 more guesses
    assert queue.leave("10.0.0.1") == ["g2"]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 3),
    st.lists(st.one_of(st.tuples(st.just("arrive"), ADDRESSES), st.tuples(st.just("leave"), ADDRESSES)), max_size=150),
)
def test_the_check_queue_holds_its_bounds_and_wastes_no_slot(slots, per_key, ops):
    queue: FairQueue[int] = FairQueue(slots, per_key)
    key_of: dict[int, str] = {}
    running: list[int] = []  # items running, oldest first
    for op, key in ops:
        if op == "arrive":
            item = len(key_of)
            key_of[item] = key
            if queue.arrive(key, item):
                running.append(item)
        else:
            mine = [item for item in running if key_of[item] == key]
            if not mine:
                continue
            running.remove(mine[0])
            running.extend(queue.leave(key))
        per = {k: sum(1 for item in running if key_of[item] == k) for k in set(key_of.values())}
        assert len(running) <= slots and all(n <= per_key for n in per.values())
        assert queue.running == len(running)
        # work-conserving: nothing waits while a slot it may take is free
        if len(running) < slots:
            assert all(per.get(k, 0) >= per_key for k in queue._waiting)


def test_a_waiting_check_that_gives_up_leaves_the_queue():
    queue: FairQueue[str] = FairQueue(slots=1, per_key=1)
    assert queue.arrive("a", "x") and not queue.arrive("a", "y") and not queue.arrive("b", "z")
    assert queue.cancel("a", "y")
    assert queue.leave("a") == ["z"]
    assert not queue.cancel("b", "z")  # admitted already: it runs and leaves
    assert queue.leave("b") == [] and queue.running == 0 and queue.waiting == 0


async def test_the_shell_runs_checks_in_threads_within_the_bound_and_fairly():
    checks = PasswordChecks(slots=2, per_key=1)
    running, most, order = 0, 0, []
    lock = threading.Lock()
    release = threading.Event()

    def check(name: str) -> bool:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            order.append(name)
        release.wait(10)
        with lock:
            running -= 1
        return name.startswith("ok")

    results: dict[str, bool] = {}

    async def login(key: str, name: str) -> None:
        results[name] = await checks.run(key, lambda: check(name))

    async with trio.open_nursery() as nursery:
        for i in range(6):
            nursery.start_soon(login, "10.6.6.6", f"guess{i}")
            await trio.sleep(0.01)
        nursery.start_soon(login, "10.0.0.1", "ok-alice")
        await trio.sleep(0.05)
        release.set()
    assert most <= 2  # two threads, and the flooding address only ever one of them
    assert order.index("ok-alice") <= 2  # its turn came after at most one more guess
    assert results["ok-alice"] and not results["guess0"] and checks.ran == 7


async def test_a_cancelled_waiter_passes_its_turn_on():
    checks = PasswordChecks(slots=1, per_key=1)
    gate = threading.Event()
    done = []

    async with trio.open_nursery() as nursery:
        nursery.start_soon(checks.run, "a", lambda: gate.wait(10))
        await trio.sleep(0.01)
        with trio.CancelScope() as scope:
            scope.deadline = trio.current_time() + 0.05
            await checks.run("b", lambda: done.append("b"))
        assert scope.cancelled_caught
        gate.set()
    assert await checks.run("c", lambda: done.append("c") or True)
    assert done == ["c"]


# -- config ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"num_password_check_threads": 0}, "f.yaml: limits.num_password_check_threads: Input should be greater"),
        ({"max_password_checks_per_ip": 0}, "f.yaml: limits.max_password_checks_per_ip: Input should be greater"),
        ({"max_failed_authentications_per_user": 0}, "f.yaml: limits.max_failed_authentications_per_user: Input"),
        ({"max_failed_authentications_per_ip_and_user": "x"}, "limits.max_failed_authentications_per_ip_and_user:"),
        ({"failed_authentication_log_interval_ms": -1}, "f.yaml: limits.failed_authentication_log_interval_ms:"),
    ],
)
def test_bad_login_limits_name_file_key_and_reason(limits, expected):
    with pytest.raises(ConfigError) as info:
        parse_config({"upstream": {"bootstrap_servers": ["k:1"]}, "limits": limits}, "f.yaml")
    assert expected in str(info.value)


def test_the_login_budgets_follow_max_failed_authentications_unless_set():
    def guard(**limits: object) -> LoginGuard:
        config = parse_config({"upstream": {"bootstrap_servers": ["k:1"]}, "limits": limits}, "f.yaml")
        return LoginGuard.from_config(config.limits)

    old = guard(max_failed_authentications=7, failed_authentication_window_seconds=30)  # an existing config
    assert (old.by_address.limit, old.by_user.limit, old.by_pair.limit) == (7, 7, 7)
    assert old.by_pair.window == 30 and old.horizon == 5.0
    new = guard(max_failed_authentications_per_user=20, max_failed_authentications_per_ip_and_user=5)
    assert (new.by_address.limit, new.by_user.limit, new.by_pair.limit) == (60, 20, 5)
    assert guard(authentication_timeout_ms=4000, failed_authentication_log_interval_ms=0).horizon == 2.0


def test_a_long_user_name_costs_the_tables_a_digest():
    guard = LoginGuard.create(1, 60.0)
    name = "x" * 500_000  # a stranger's PLAIN token may carry half a megabyte of name
    guard.failed("10.0.0.1", name, 0.0)
    guard.before_check("10.0.0.1", name, 1.0)
    keys = [*guard.by_user._failures, *guard.by_pair._failures, *guard._pace_pair._next, *guard._pace_user._next]
    assert len(keys) == 4 and all(len(key) < 100 for key in keys)
    assert guard.spent("10.0.0.1", name, 1.0) is not None  # and still counted as that name
    assert guard.spent("10.0.0.1", name + "y", 1.0) == "10.0.0.1"  # another name: only the address is spent
