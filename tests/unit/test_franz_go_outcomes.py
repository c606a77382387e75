"""The franz-go suite's verdict (tests/integration/franz_go.py): `go test -v` output parsed per test and
subtest, and what counts as a difference from the direct run."""

from __future__ import annotations

from tests.integration.franz_go import (
    REFERENCE,
    REPORT_PROPERTY,
    TESTS,
    Run,
    differences,
    off_reference,
    outcomes,
    reference,
    row_of,
    row_property,
    table,
)

OUTPUT = """=== RUN   TestTxnEtl
=== RUN   TestTxnEtl/range
=== RUN   TestTxnEtl/range/848
    --- PASS: TestTxnEtl/range/848 (12.01s)
    --- SKIP: TestTxnEtl/sticky (0.00s)
--- FAIL: TestTxnEtl (51.30s)
"""


def test_outcomes_of_each_test_and_subtest():
    assert outcomes(OUTPUT) == {"TestTxnEtl/range/848": "PASS", "TestTxnEtl/sticky": "SKIP", "TestTxnEtl": "FAIL"}


def test_what_passed_directly_must_pass_the_other_way_a_skip_or_a_hang_included():
    direct = Run("direct", "T", "PASS", 1.0, {"T/a": "PASS", "T/b": "SKIP"})
    assert differences(direct, Run("proxy", "T", "PASS", 1.0, {"T/a": "PASS", "T/b": "PASS"})) == []
    assert differences(direct, Run("proxy", "T", "PASS", 1.0, {"T/a": "SKIP", "T/b": "SKIP"})) == [
        "T/a: SKIP proxy (PASS directly)"
    ]
    hung = differences(direct, Run("vc", "T", "HANG", 120.0, {}))
    assert hung == ["T: HANG vc (PASS directly)", "T/a: missing vc (PASS directly)"]
    # Nothing to compare with when the direct run did not pass.
    assert differences(Run("direct", "T", "FAIL", 1.0, {}), Run("proxy", "T", "FAIL", 1.0, {})) == []


def test_the_table_counts_passes_and_time_per_way():
    runs = {"T": {"direct": Run("direct", "T", "PASS", 2.0), "proxy": Run("proxy", "T", "HANG", 120.0)}}
    text = table(runs, ["direct", "proxy"])
    assert "| T | PASS 2.0 s | HANG 120.0 s |" in text
    assert "| **passed, total time** | 1/1, 2 s | 0/1, 120 s |" in text
    # A test not run one way (franz_go.VC_ONLY in `make test`) is "-" there, and not counted there.
    runs["U"] = {"direct": Run("direct", "U", "PASS", 1.0)}
    text = table(runs, ["direct", "proxy"])
    assert "| U | PASS 1.0 s | - |" in text
    assert "| **passed, total time** | 2/2, 3 s | 0/1, 120 s |" in text


def test_a_race_franz_go_names_is_known_by_its_line_and_a_second_run_says_why(tmp_path):
    raced = tmp_path / "raced.log"
    raced.write_text(
        "    testConsumer sendErr group=g: 848 stale commit; skip checks\n--- FAIL: TestGroupETL (88.22s)\n"
    )
    failed = tmp_path / "failed.log"
    failed.write_text("    helpers_test.go:983: saw double offset t x p14o81\n--- FAIL: TestGroupETL (88.22s)\n")
    assert Run("proxy", "TestGroupETL", "FAIL", 88.2, log=raced).known_race() == "KIP-848 stale commit before KIP-1251"
    assert Run("proxy", "TestGroupETL", "FAIL", 88.2, log=failed).known_race() is None
    again = Run("proxy", "TestGroupETL", "PASS", 30.0, note="run 2, after KIP-848 stale commit before KIP-1251")
    text = table({"TestGroupETL": {"proxy": again}}, ["proxy"])
    assert "| TestGroupETL | PASS 30.0 s (run 2, after KIP-848 stale commit before KIP-1251) |" in text


def test_a_row_travels_as_plain_values_and_makes_the_same_table():
    """pytest-xdist runs the suite in workers: a test's row reaches the summary as a report property of plain
    values (execnet sends nothing else), and the table made of it is the table made of the runs."""
    runs = {"direct": Run("direct", "T", "PASS", 2.0), "proxy": Run("proxy", "T", "PASS", 3.5, note="run 2, after x")}
    name, value = row_property("T", runs)
    assert name == REPORT_PROPERTY
    assert value == ("T", {"direct": ("PASS", 2.0, ""), "proxy": ("PASS", 3.5, "run 2, after x")})
    test, cells = row_of(value)
    assert table({test: cells}, ["direct", "proxy"]) == table({"T": runs}, ["direct", "proxy"])


def test_the_reference_stands_for_a_direct_run_a_proxy_way_must_match():
    assert set(REFERENCE) <= set(TESTS)
    expected = reference("TestTxnEtl")
    assert expected.status == "PASS" and set(expected.subtests) == REFERENCE["TestTxnEtl"] and expected.seconds == 0
    passed = Run("proxy", "TestTxnEtl", "PASS", 50.0, dict.fromkeys(REFERENCE["TestTxnEtl"], "PASS"))
    assert differences(expected, passed) == []
    missing = Run(
        "proxy", "TestTxnEtl", "PASS", 50.0, dict.fromkeys(REFERENCE["TestTxnEtl"] - {"TestTxnEtl/range"}, "PASS")
    )
    assert differences(expected, missing) == ["TestTxnEtl/range: missing proxy (PASS directly)"]
    # A test without subtests in the reference must pass as a whole.
    assert differences(reference("TestPing"), Run("vc", "TestPing", "SKIP", 0.1)) == [
        "TestPing: SKIP vc (PASS directly)"
    ]


def test_make_compat_fails_where_a_direct_run_no_longer_matches_the_reference():
    same = Run(
        "direct", "TestGroupSimple", "PASS", 1.0, {"TestGroupSimple/classic": "PASS", "TestGroupSimple/848": "SKIP"}
    )
    assert off_reference("TestGroupSimple", same) == []
    more = Run(
        "direct", "TestGroupSimple", "PASS", 1.0, {"TestGroupSimple/classic": "PASS", "TestGroupSimple/848": "PASS"}
    )
    assert off_reference("TestGroupSimple", more) == [
        "TestGroupSimple/848: PASS directly, not in the reference (update franz_go.REFERENCE)"
    ]
    fewer = Run("direct", "TestGroupSimple", "PASS", 1.0, {"TestGroupSimple/classic": "SKIP"})
    assert off_reference("TestGroupSimple", fewer) == [
        "TestGroupSimple/classic: SKIP directly (update franz_go.REFERENCE)"
    ]
