"""The librdkafka suite's verdict (tests/integration/librdkafka.py): test-runner's output parsed per test entry,
what counts as a difference from the direct run (a timing one included), and the table."""

from __future__ import annotations

from pathlib import Path

from tests.integration.librdkafka import (
    EXCLUDED,
    TESTS,
    Run,
    client_ids,
    differences,
    known_race,
    only_slower,
    outcomes,
    table,
    verdict,
)

G, C, R, Y, CLR = "\x1b[32m", "\x1b[36m", "\x1b[31m", "\x1b[35m", "\x1b[0m"

PASSED = f"""{C}[0001_multiobj               /  1.388s] 0001_multiobj: duration 1387.989ms
{CLR}{C}[0001_multiobj               /  1.388s] {G}================= Test 0001_multiobj PASSED ================={CLR}
{CLR}TEST 20261127044100 (bare, scenario default) SUMMARY
#==================================================================#
|{G} <MAIN>                                   |     PASSED |   1.602s {CLR}|
|{G} 0001_multiobj                            |     PASSED |   1.388s {CLR}|
#==================================================================#
"""

# An assert in a callback aborts the runner: no verdict line, no summary, only TEST_FAIL's block.
ABORTED = f"""{C}[0012_produce_consume        /  0.111s] TEST FAILURE
### Test "0012_produce_consume" failed at 0012-produce_consume.c:57:dr_cb() at Fri Nov 27 04:41:24 2026: ###
Message delivery failed: Local: Unknown partition
{CLR}{C}[<MAIN>                      /  1.300s] TEST FAILURE
### Test "<MAIN>" failed at test.c:1950:test_wait_exit() at Fri Nov 27 04:41:26 2026: ###
3 thread(s) still active in librdkafka
test-runner: test.c:7706: test_fail0: Assertion `0' failed.
"""

# A number with several entries: one fails (the summary gives the reason), one skips, one never ends.
MIXED = f"""{C}[0045_subscribe_update  / 10.000s] {G}========= Test 0045_subscribe_update PASSED ========={CLR}
{C}[0045_resubscribe_with_regex / 20.000s] {R}===== Test 0045_resubscribe_with_regex FAILED ====={CLR}
#==================================================================#
|{G} <MAIN>                                   |     PASSED |  99.000s {CLR}|
|{G} 0045_subscribe_update                    |     PASSED |  10.000s {CLR}|
|{R} 0045_resubscribe_with_regex              |     FAILED |  10.000s {CLR}|{R} Expected 2 topics, got 1{CLR}
|{C} 0045_subscribe_many_updates              |    SKIPPED |   0.000s {CLR}|{C} Needs authentication{CLR}
|{Y} 0045_subscribe_update_topic_remove       |    RUNNING |  79.000s {CLR}|
|{C} 0045_subscribe_update_mock               |    SKIPPED |   0.000s {CLR}|{C} Filtered due to negative test flags{CLR}
#==================================================================#
"""


SUBTEST = """### Test "0030_offset_commit (do_offset_test:122: ASYNC)" failed at 0030-offset_commit.c:62:cb() \
at Fri Nov 27 04:53:50 2026: ###
Offset commit failed: Local: Timed out
"""


def test_a_failing_subtest_fails_its_entry_and_names_itself_in_the_reason():
    entries, reasons = outcomes(SUBTEST)
    assert entries == {"0030_offset_commit": "FAIL"}
    assert reasons == {
        "0030_offset_commit": "Offset commit failed: Local: Timed out "
        "(0030-offset_commit.c:62:cb(), do_offset_test:122: ASYNC)"
    }


def test_a_passing_run_names_each_entry_not_the_runner_itself():
    assert outcomes(PASSED) == ({"0001_multiobj": "PASS"}, {})


def test_an_aborted_run_keeps_the_failure_and_its_reason():
    entries, reasons = outcomes(ABORTED)
    assert entries == {"0012_produce_consume": "FAIL"}
    assert reasons["0012_produce_consume"] == (
        "Message delivery failed: Local: Unknown partition (0012-produce_consume.c:57:dr_cb())"
    )
    assert verdict(entries) == "FAIL"


def test_the_summary_is_the_last_word_with_reasons_a_running_test_is_a_hang_and_local_entries_are_left_out():
    entries, reasons = outcomes(MIXED)
    assert entries == {
        "0045_subscribe_update": "PASS",
        "0045_resubscribe_with_regex": "FAIL",
        "0045_subscribe_many_updates": "SKIP",
        "0045_subscribe_update_topic_remove": "HANG",
    }
    assert reasons == {
        "0045_resubscribe_with_regex": "Expected 2 topics, got 1",
        "0045_subscribe_many_updates": "Needs authentication",
    }
    assert verdict(entries) == "HANG"
    assert verdict({"a": "PASS", "b": "SKIP"}) == "PASS"
    assert verdict({"a": "SKIP"}) == "SKIP"
    assert verdict({}) == "FAIL"  # a runner that said nothing did not pass


def test_what_passed_directly_must_pass_the_other_way_a_skipped_entry_included():
    direct = Run("direct", "0045", "classic", "PASS", 10.0, {"0045_a": "PASS", "0045_b": "SKIP"})
    same = Run("virtual cluster", "0045", "classic", "PASS", 12.0, {"0045_a": "PASS", "0045_b": "SKIP"})
    assert differences(direct, same) == []
    hidden = Run("virtual cluster", "0045", "classic", "PASS", 12.0, {"0045_a": "SKIP"}, {"0045_a": "no API"})
    assert differences(direct, hidden) == ["0045_a [classic]: SKIP virtual cluster (PASS directly): no API"]
    hung = Run("proxy", "0045", "consumer", "HANG", 240.0, {})
    assert differences(direct, hung) == [
        "0045 [consumer]: HANG proxy (PASS directly)",
        "0045_a [consumer]: missing proxy (PASS directly)",
    ]
    # Nothing to compare with when the direct run did not pass.
    assert differences(Run("direct", "1", "classic", "FAIL", 1.0), Run("proxy", "1", "classic", "FAIL", 1.0)) == []


def test_a_pass_more_than_twice_as_slow_is_a_difference_beyond_a_short_tests_noise():
    direct = Run("direct", "0118", "consumer", "PASS", 10.0, {"0118_commit_rebalance": "PASS"})
    slow = Run("virtual cluster", "0118", "consumer", "PASS", 312.0, {"0118_commit_rebalance": "PASS"})
    assert differences(direct, slow) == ["0118 [consumer]: 312.0 s virtual cluster, 10.0 s directly"]
    assert only_slower(direct, slow)  # the one kind of difference that runs again (time is noisy)
    failed = Run("virtual cluster", "0118", "consumer", "FAIL", 312.0, {"0118_commit_rebalance": "FAIL"})
    assert not only_slower(direct, failed)
    within = Run("virtual cluster", "0118", "consumer", "PASS", 19.9, {"0118_commit_rebalance": "PASS"})
    assert differences(direct, within) == []
    # 2 s directly, 9 s through: twice and more, but within the seconds a loaded machine adds to any test.
    short = Run("direct", "0001", "classic", "PASS", 2.0, {"0001_multiobj": "PASS"})
    assert differences(short, Run("proxy", "0001", "classic", "PASS", 9.0, {"0001_multiobj": "PASS"})) == []


def test_the_table_has_a_row_per_test_and_protocol_with_the_known_differences_named():
    runs = {
        ("0001", "classic"): {
            "direct": Run("direct", "0001", "classic", "PASS", 2.0, {"0001_multiobj": "PASS"}),
            "proxy": Run("proxy", "0001", "classic", "HANG", 240.0, {"0001_multiobj": "HANG"}),
        },
        ("0118", "consumer"): {"direct": Run("direct", "0118", "consumer", "PASS", 10.0, note="run 2")},
    }
    text = table(runs, ["direct", "proxy"], {"0118/consumer": "Metadata by topic id"})
    assert "| 0001 (multiobj) | n/a | PASS 2.0 s | HANG 240.0 s |" in text
    assert "| 0118 (known difference: Metadata by topic id) | consumer | PASS 10.0 s (run 2) | - |" in text
    assert "| **passed, total time** | | 2/2, 12 s | 0/1, 240 s |" in text


def test_each_broker_test_is_run_or_excluded_with_a_reason_never_both():
    assert not set(TESTS) & set(EXCLUDED)
    assert all(reason for reason in EXCLUDED.values())


def test_the_vc_binds_every_test_by_name_and_the_ids_tests_set_themselves(tmp_path: Path):
    (tmp_path / "test.c").write_text(
        "struct test tests[] = {\n    _TEST(0001_multiobj, 0),\n    _TEST(0045_subscribe_update_mock, TEST_F_LOCAL),\n"
    )
    ids = client_ids(tmp_path)
    assert {"0001_multiobj", "0045_subscribe_update_mock", "rdkafka", "client1Leader", "c" * 270} <= set(ids)
    assert len(ids) == len(set(ids))


def test_a_known_race_is_named_only_by_its_own_line_in_a_failed_run(tmp_path: Path) -> None:
    lost = tmp_path / "lost.log"
    lost.write_text(
        'Test assertion failed: "cons->rebalance_cnt <= cons->max_rebalance_cnt": '
        "0091_max_poll_interval_timeout#consumer-6 rebalanced 3 times, max was 2\n"
    )
    other = tmp_path / "other.log"
    other.write_text("Test assertion failed: expected 30 msgs, got 0\n")
    assert "close" in (known_race(Run("virtual cluster", "0091", "consumer", "FAIL", 43.5, log=lost)) or "")
    assert known_race(Run("virtual cluster", "0091", "consumer", "FAIL", 43.5, log=other)) is None  # another failure
    assert known_race(Run("virtual cluster", "0091", "consumer", "PASS", 65.0, log=lost)) is None  # not failed
    assert known_race(Run("virtual cluster", "0184", "n/a", "FAIL", 74.4, log=lost)) is None  # not its test's race
