"""Tables every tenant fills are bounded per VC as well as in total (issue 56): one VC's churn evicts only its own
entries, and when the whole table is full, the VC holding the most loses one, never a VC under its fair share."""

from __future__ import annotations

import random
import uuid

import pytest

from proxy.config import ProxyConfig
from proxy.tenancy.fetch_sessions import FetchSessionOwners
from proxy.tenancy.per_vc_lru import PerVcLru
from proxy.tenancy.placeholders import Placeholders
from proxy.tenancy.regex import RegexCache

from .test_tenant_rewrite import make_image

# -- the table itself ---------------------------------------------------------------------------------------------


def test_past_its_own_bound_a_vc_loses_its_least_recently_used_entry():
    table: PerVcLru[str, int] = PerVcLru(total=100, per_vc=3)
    for key in ("a1", "a2", "a3"):
        assert table.put("a", key, 0) == []
    table.put("b", "b1", 0)
    table.touch("a1")
    assert table.put("a", "a4", 0) == [("a", "a2", 0)]
    assert [k for k, _ in table.items("a")] == ["a3", "a1", "a4"]
    assert "b1" in table and len(table) == 4


def test_a_full_table_evicts_from_the_vc_holding_the_most_never_from_one_under_its_share():
    table: PerVcLru[tuple[str, int], None] = PerVcLru(total=10, per_vc=10)
    for i in range(3):
        table.put("small", ("small", i), None)
    for i in range(7):
        table.put("big", ("big", i), None)
    # Full: the small VC adding evicts the big one's oldest, not its own.
    assert table.put("small", ("small", 3), None) == [("big", ("big", 0), None)]
    # The big one churning evicts only its own, however long it goes on.
    for i in range(7, 5000):
        evicted = table.put("big", ("big", i), None)
        assert [vc for vc, _, _ in evicted] == ["big"]
    assert [k for k, _ in table.items("small")] == [("small", i) for i in range(4)]
    assert len(table) == 10


def test_among_vcs_holding_as_many_the_adding_one_goes_first_but_never_its_new_entry():
    table: PerVcLru[str, None] = PerVcLru(total=4, per_vc=4)
    for vc, key in (("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2")):
        table.put(vc, key, None)
    assert table.put("a", "a3", None) == [("a", "a1", None)]  # a and b held 2 each: a, adding, gives one up
    single: PerVcLru[str, None] = PerVcLru(total=2, per_vc=4)
    single.put("a", "a1", None)
    single.put("b", "b1", None)
    assert single.put("c", "c1", None) == [("a", "a1", None)]  # every VC holds one: c keeps its new entry
    assert "c1" in single


def test_a_key_given_to_another_vc_moves_and_counts_are_kept():
    table: PerVcLru[str, int] = PerVcLru(total=10, per_vc=10)
    table.put("a", "k", 1)
    assert table.put("b", "k", 2) == []
    assert (table.vc_of("k"), table.get("k"), table.count("a"), table.count("b")) == ("b", 2, 0, 1)
    assert table.pop("k") == 2 and table.pop("k") is None and len(table) == 0


def test_under_random_churn_no_vc_under_its_fair_share_ever_loses_an_entry():
    rng = random.Random(56)
    total, per_vc = 60, 40
    table: PerVcLru[tuple[str, int], None] = PerVcLru(total, per_vc)
    vcs = [f"vc-{i}" for i in range(5)]
    from_others = 0
    for step in range(20_000):
        vc = rng.choice(vcs[:2]) if rng.random() < 0.9 else rng.choice(vcs)  # two VCs churn, three add now and then
        if rng.random() < 0.1 and table.count(vc):
            table.pop(next(table.items(vc))[0])
            continue
        held = {v: table.count(v) + (v == vc) for v in vcs}  # as they are once the entry is in
        share = total / sum(1 for v in vcs if held[v])
        evicted = table.put(vc, (vc, step), None)
        assert len(evicted) <= 1
        for loser, _, _ in evicted:
            # Only the adding VC past its own bound, or a VC holding the most, which is more than its share.
            assert (loser == vc and held[vc] > per_vc) or held[loser] == max(held.values()) > share
            from_others += loser != vc
        assert len(table) <= total and all(table.count(v) <= per_vc for v in vcs)
        assert sum(table.count(v) for v in vcs) == len(table)
    assert from_others > 100  # the total bound was reached, and taken from the largest


# -- fetch sessions -------------------------------------------------------------------------------------------------


def test_another_vcs_thousands_of_fetch_sessions_evict_none_of_a_vcs():
    table = FetchSessionOwners(limit=100, per_vc=60)
    for sid in range(1, 21):
        table.record("alice", 1, sid)
    for sid in range(1000, 6000):  # bob opens sessions steadily, on every broker
        table.record("bob", sid % 3, sid)
    assert all(table.owns("alice", 1, sid) for sid in range(1, 21))
    assert len(table) == 80  # bob keeps his own bound's worth


def test_a_full_fetch_session_table_takes_from_the_vc_holding_the_most():
    table = FetchSessionOwners(limit=50, per_vc=50)
    for sid in range(1, 51):
        table.record("bob", 1, sid)
    for sid in range(100, 110):
        table.record("alice", 1, sid)
    assert all(table.owns("alice", 1, sid) for sid in range(100, 110))
    assert not table.owns("bob", 1, 1) and table.owns("bob", 1, 50) and len(table) == 50


def test_a_session_the_forwarder_serves_is_kept_fresh_by_touch():
    """The forwarder serves a busy consumer's incremental Fetches without asking `owns`: `touch` (what it used,
    taken from the grant) keeps that session from being its VC's least recently used."""
    table = FetchSessionOwners(limit=100, per_vc=10)
    table.record("alice", 1, 7)  # the busy consumer's
    for sid in range(100, 200):  # alice's other clients come and go
        table.record("alice", 1, sid)
        table.touch("alice", 1, [7])
    assert table.owns("alice", 1, 7)
    stale = FetchSessionOwners(limit=100, per_vc=10)
    stale.record("alice", 1, 7)
    for sid in range(100, 110):
        stale.record("alice", 1, sid)
    assert not stale.owns("alice", 1, 7)  # without it: evicted by her own churn


def test_touch_is_told_to_the_other_workers_only_for_what_the_vc_owns():
    here, there = FetchSessionOwners(limit=100, per_vc=3), FetchSessionOwners(limit=100, per_vc=3)
    told: list[list[object]] = []
    here.tell = lambda message: (told.append(message), there.learn(message))
    for sid in (1, 2, 3):
        here.record("alice", 1, sid)
    here.record("bob", 1, 9)
    told.clear()
    here.touch("alice", 1, [1, 9, 404])  # 9 is bob's, 404 nobody's: neither is alice's to touch
    here.touch("alice", 1, [1])  # another connection's: told together
    here.touch("bob", 2, [9])  # bob's 9 is on broker 1
    assert told == []
    here.tell_uses()
    assert told == [["used", "alice", 1, [1]]]
    here.tell_uses()
    assert len(told) == 1
    there.record("alice", 1, 4)  # the other worker's alice churns: 2 goes, not 1, which was used
    assert there.owns("alice", 1, 1) and not there.owns("alice", 1, 2)


@pytest.mark.parametrize(
    "told",
    [["used"], ["used", 1, 1, [1]], ["used", "alice", "1", [1]], ["used", "alice", 1, 1], ["used", "bob", 1, [1]]],
)
def test_what_is_not_a_told_use_changes_nothing(told):
    table = FetchSessionOwners(limit=100, per_vc=2)
    table.record("alice", 1, 1)
    table.record("alice", 1, 2)
    table.learn(told)
    table.record("alice", 1, 3)
    assert not table.owns("alice", 1, 1)  # 1 stayed the least recently used


def test_an_eviction_voids_the_forwarders_sessions_of_that_vc_only():
    class Generation:
        def __init__(self) -> None:
            self.bumps = 0

        def bump(self) -> None:
            self.bumps += 1

        def value(self) -> int:
            return self.bumps

    table = FetchSessionOwners(limit=4, per_vc=2)
    table.make_generation = Generation
    alice, bob = table.changes_of("alice"), table.changes_of("bob")
    assert table.changes_of("alice") is alice
    table.record("alice", 1, 1)
    table.record("alice", 1, 2)
    table.record("alice", 1, 3)  # her own bound: 1 goes
    assert (table.generation("alice"), table.generation("bob")) == (1, 0)
    for sid in range(100, 200):  # bob's churn never voids alice's grants
        table.record("bob", 1, sid)
    assert alice.bumps == 1 and bob.bumps == 98
    table.record("bob", 1, 2)  # the broker gave alice's id to bob: hers goes
    assert alice.bumps == 2
    table.drop(1, 2)
    assert (alice.bumps, bob.bumps) == (2, 100)


# -- placeholders and regexes ---------------------------------------------------------------------------------------


def test_another_vcs_placeholders_never_make_a_vc_forget_its_own():
    table = Placeholders(limit=100, per_vc=50)
    mine = [uuid.uuid4() for _ in range(10)]
    placeholders = [table.of("alice", topic_id) for topic_id in mine]
    for _ in range(5000):
        table.of("bob", uuid.uuid4())
    assert [table.client_id("alice", p) for p in placeholders] == mine
    assert len(table) == 60
    for _ in range(50):  # her own churn forgets her own, least recently used first
        table.of("alice", uuid.uuid4())
    assert table.client_id("alice", placeholders[0]) is None


def test_another_vcs_regexes_never_drop_a_vcs_evaluation():
    image, _ = make_image()
    alice, bob = image.vcs["team-a"], image.vcs["team-b"]
    cache = RegexCache(limit=40, per_vc=30)
    expansion = cache.expand(alice, "orders.*").pattern
    for i in range(500):
        cache.expand(bob, f"churn-{i}.*")
    assert cache.regex_for(alice, expansion) == "orders.*"
    assert len(cache._evaluations) == 31 and cache._evaluations.count(alice.id) == 1


def test_an_operator_sets_a_vcs_own_bound_in_the_fetch_session_table():
    """The VC setting `max_fetch_sessions` (proxy/tenancy/settings.py), which the fetch handler passes along."""
    table = FetchSessionOwners(limit=1000, per_vc=10)
    for sid in range(100):
        table.record("big", 1, sid, per_vc=50)
        table.record("small", 2, sid)
    big = sum(table.owns("big", 1, s) for s in range(100))
    assert (big, sum(table.owns("small", 2, s) for s in range(100))) == (50, 10)
    table.record("big", 1, 100)  # the setting deleted: the config's again
    assert sum(table.owns("big", 1, s) for s in range(101)) == 10


def test_the_fetch_handler_records_with_the_vcs_own_bound(monkeypatch):
    from proxy.tenancy import fetch_sessions
    from proxy.tenancy.handlers import fetch as fetch_handlers
    from proxy.tenancy.model import setting_record

    from .test_tenant_fetch_sessions import FETCH, broker_says, fetch
    from .test_tenant_rewrite import forward, tenant_session

    table = FetchSessionOwners(limit=1000, per_vc=2)
    monkeypatch.setattr(fetch_sessions, "FETCH_SESSIONS", table)
    monkeypatch.setattr(fetch_handlers, "FETCH_SESSIONS", table)
    image, _ = make_image()
    image.apply(*setting_record("team-a", "max_fetch_sessions", 3))
    alice = tenant_session(image)
    for cid, sid in enumerate((11, 12, 13, 14), start=1):
        forward(alice, FETCH, 12, fetch(12, 0, 0), cid=cid)
        broker_says(alice, 12, sid, cid=cid)
    team_a = image.vcs["team-a"].id
    assert [table.owns(team_a, 1, s) for s in (11, 12, 13, 14)] == [False, True, True, True]


def test_the_config_bounds_the_tables_per_vc_and_in_total():
    limits = ProxyConfig.model_validate({"upstream": {"bootstrap_servers": ["k:9092"]}}).limits
    assert (limits.max_fetch_sessions, limits.max_fetch_sessions_per_vc) == (10_000, 1_000)
    assert (limits.max_placeholders, limits.max_placeholders_per_vc) == (10_000, 1_000)
    assert (limits.max_regexes, limits.max_regexes_per_vc) == (4096, 256)
    table = FetchSessionOwners()
    table.bound(5, 2)
    for sid in range(10):
        table.record(f"vc-{sid % 4}", 1, sid)
    assert len(table) == 5
