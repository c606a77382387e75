"""franz-go's own integration tests (`pkg/kgo`), built at a pinned release and run against a real cluster.

The tests are franz-go's, written by people who know every corner of their client: they are the strongest
outside check that a virtual cluster cannot be told from a dedicated one. The module comes from the Go
module proxy (`go mod download`, checked against the Go checksum database), is copied out of the read-only
module cache and compiled with `go test -c`; nothing of it is kept in this repository.

Each test runs in a process of its own with a time limit, so a hang fails in minutes and names the test;
`go test -v` output is parsed into one outcome per test and subtest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import standing

MODULE = "github.com/twmb/franz-go"
VERSION = "v1.22.3"  # the newest release at the time; its tests include every test named below

# The tests that need a broker, with a time limit each: about 3x their time through a VC on a loaded
# 2-core machine with RECORDS records, so that only a hang (or a many-fold slowdown) reaches it.
RECORDS = 5_000
DEFAULT_LIMIT = 120.0
TESTS: dict[str, float] = {
    "TestPing": DEFAULT_LIMIT,
    "TestIssue1034": DEFAULT_LIMIT,
    "TestIssue325": DEFAULT_LIMIT,
    "TestConsumeTopicRetrieval": DEFAULT_LIMIT,
    "TestConsumeTopicRetrieval_Many": DEFAULT_LIMIT,
    "TestConsumeRegex": DEFAULT_LIMIT,
    "TestIssue337": DEFAULT_LIMIT,
    "TestDirectPartitionPurge": DEFAULT_LIMIT,
    "TestIssue434": DEFAULT_LIMIT,
    "TestAddRemovePartitions": DEFAULT_LIMIT,
    "TestPauseIssue489": DEFAULT_LIMIT,
    "TestPauseIssueOct2023": DEFAULT_LIMIT,
    "TestIssue523": DEFAULT_LIMIT,
    "TestIssue648": DEFAULT_LIMIT,
    "TestIssue810": DEFAULT_LIMIT,
    "TestIssue865": DEFAULT_LIMIT,
    "TestPooling": DEFAULT_LIMIT,
    "TestGroupSimple": DEFAULT_LIMIT,
    "TestGroupETL": 300.0,
    "TestClient_Produce": 300.0,  # 36 s alone, 90 s late in the whole suite (a busier cluster)
    "TestIssue769": DEFAULT_LIMIT,
    "TestIssue831": DEFAULT_LIMIT,
    "TestClient_ProduceLargeMessages": DEFAULT_LIMIT,
    "TestTxnEtl": 420.0,
    "TestShareGroup": DEFAULT_LIMIT,
    "TestShareGroupETL": 300.0,
    "TestShareGroupAckOnClose": DEFAULT_LIMIT,
    "TestShareGroupOffsetsAdmin": DEFAULT_LIMIT,
}

# The tests that keep the machine busy for their whole run (thousands of records, dozens of clients, each ETL test's
# subtests at once): run one process at a time. TestClient_Produce (10 s a way in the last runs) is not among them.
HEAVY = frozenset({"TestGroupETL", "TestTxnEtl", "TestShareGroupETL"})
# Run through the virtual cluster only in `make test` (every way in `make compat`): the ETL tests, the heavy lane's
# critical path (through the plain proxy TestTxnEtl took 101-115 s, TestGroupETL 30 s and TestShareGroupETL 21 s
# of a lane of 245 s, with the suite over its 20 minutes on a slow day). What they send through the plain proxy
# (transactions, groups through rebalances, share groups, produce and fetch at volume) the VC way sends too, through
# more of the proxy; through the plain proxy, tests stand in for each: a consume-transform-produce test with an
# aborted transaction (test_forwarder.py), a consumer group through a rebalance and a share group, each held to the
# direct run (test_equivalence.py), and franz-go's own TestGroupSimple, TestShareGroup, TestShareGroupAckOnClose.
VC_ONLY = frozenset({"TestGroupETL", "TestTxnEtl", "TestShareGroupETL"})

# Races franz-go's own tests know of, between the test and the broker, each by the line the test prints when it
# meets one: a way whose failure shows one runs once more, alone (the table says so). Any other failure through a
# proxy fails at once: an intermittent failure there is what the suite hunts.
KNOWN_RACES = {
    # TestGroupETL, TestTxnEtl with KIP-848: before KIP-1251 (Kafka 4.2 has not got it) a commit in the revoke
    # callback can be refused STALE_MEMBER_EPOCH and another member reads the records again. The test then means to
    # skip its checks, but another consumer's "saw double offset" can reach its error channel first (seen through
    # the plain proxy on a loaded machine; a matter of timing, the same directly).
    "848 stale commit; skip checks": "KIP-848 stale commit before KIP-1251",
}

# What each test reports when run directly against the suite's cluster (Kafka 4.2.2, franz-go VERSION): PASS, and
# PASS for these subtests (TestGroupSimple/848 skips directly). A direct run tests Kafka and franz-go, not the proxy:
# in `make test` it is made only when a proxy way does not match this reference, and then compared as ever (the
# heavy tests' direct runs were a third of the module's time). `make compat` (VCPROXY_FRANZ_GO_REPORT) runs every
# test directly and fails where the direct run no longer matches this table: update it with the versions.
REFERENCE: dict[str, frozenset[str]] = {
    test: frozenset(f"{test}/{sub}" for sub in subtests)
    for test, subtests in {
        "TestClient_ProduceLargeMessages": ("LargeMessage_FailureBroker", "LargeMessage_FailureClient"),
        "TestGroupSimple": ("classic",),
        "TestIssue523": ("roundrobin", "sticky"),
        **{
            etl: (
                "range",
                "range/848",
                "sticky/848",
                "sticky/848/static",
                "cooperative-sticky",
                "cooperative-sticky/static",
            )
            for etl in ("TestGroupETL", "TestTxnEtl")
        },
    }.items()
}
ALWAYS_DIRECT_ENV = "VCPROXY_FRANZ_GO_REPORT"  # set by `make compat`: every test runs directly too


def reference(test: str) -> Run:
    """The direct run REFERENCE describes, as a run that was not made."""
    return Run("direct", test, "PASS", 0.0, dict.fromkeys(REFERENCE.get(test, ()), "PASS"), note="reference, not run")


def off_reference(test: str, direct: Run) -> list[str]:
    """Where a direct run differs from REFERENCE (for `make compat`, which makes every direct run)."""
    expected = REFERENCE.get(test, frozenset())
    passed = {name for name, outcome in direct.subtests.items() if outcome == "PASS"}
    found = [f"{test}: {direct.status} directly"] if direct.status != "PASS" else []
    found += [f"{name}: {direct.subtests.get(name, 'missing')} directly" for name in sorted(expected - passed)]
    found += [f"{name}: PASS directly, not in the reference" for name in sorted(passed - expected)]
    return [f"{line} (update franz_go.REFERENCE)" for line in found]


# Each test's row travels to the terminal summary (tests/conftest.py) as a user property of its report: with
# pytest-xdist the test runs in a worker, and only reports reach the process that prints the summary.
REPORT_PROPERTY = "franz-go row"
WAYS = ["direct", "proxy", "virtual cluster"]


@dataclass(frozen=True)
class Cell:
    """A run as the table shows it."""

    status: str
    seconds: float
    note: str = ""


def row_property(test: str, by_way: dict[str, Run]) -> tuple[str, tuple[str, dict[str, tuple[str, float, str]]]]:
    """The user property carrying one test's row: plain values, as pytest-xdist sends reports between processes."""
    return REPORT_PROPERTY, (test, {way: (run.status, run.seconds, run.note) for way, run in by_way.items()})


def row_of(value: tuple[str, dict[str, tuple[str, float, str]]]) -> tuple[str, dict[str, Cell]]:
    test, cells = value
    return test, {way: Cell(*cell) for way, cell in cells.items()}


# `--- PASS: TestGroupETL/range/848 (12.01s)`, indented two spaces per subtest level.
_RESULT = re.compile(r"^\s*--- (PASS|FAIL|SKIP): (\S+) \(([\d.]+)s\)", re.MULTILINE)


def cache() -> Path:
    """Where the compiled tests are kept between runs: ~/.cache/vcproxy/franz-go, or $VCPROXY_FRANZ_GO_CACHE."""
    env = os.environ.get("VCPROXY_FRANZ_GO_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "vcproxy" / "franz-go"


def built() -> Path:
    """The tests of VERSION compiled by this machine's Go, built at the first call into the cache. `make franz-go`
    (which .ci/run runs beside the Python install, on the core pip leaves idle) builds them before the suite,
    which then finds them: the build is some 30 s of CPU."""
    go = shutil.which("go")
    assert go, "no go on PATH: franz-go's tests are built with Go (the Go module proxy reachable)"
    toolchain = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    binary = cache() / f"{VERSION}-{toolchain}" / "kgo.test"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=binary.parent) as work:
        os.replace(build(Path(work)), binary)  # whole or not at all, should two processes build at once
    return binary


def build(workdir: Path) -> Path:
    """Download the pinned module through the Go module proxy and compile pkg/kgo's tests into a binary."""
    go = shutil.which("go")
    assert go, "no go on PATH: franz-go's tests are built with Go (the Go module proxy reachable)"
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    downloaded = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert downloaded.returncode == 0, downloaded.stdout + downloaded.stderr
    info = json.loads(downloaded.stdout)
    assert "Error" not in info, info["Error"]
    source = workdir / "franz-go"
    shutil.copytree(info["Dir"], source, dirs_exist_ok=True)  # the module cache is read-only
    for path in (source, *source.rglob("*")):
        path.chmod(path.stat().st_mode | 0o200)
    binary = workdir / "kgo.test"
    built = subprocess.run(
        [go, "test", "-c", "-o", str(binary), "./pkg/kgo"],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return binary


@dataclass
class Run:
    """One franz-go test run one way: its outcome, each subtest's, its wall time and its log."""

    way: str
    test: str
    status: str  # PASS, FAIL, SKIP, or HANG (the time limit ended it)
    seconds: float
    subtests: dict[str, str] = field(default_factory=dict)
    log: Path | None = None
    note: str = ""  # why this is a second run, for the table

    def known_race(self) -> str | None:
        """The race of KNOWN_RACES this run's log shows, if any."""
        text = self.log.read_text(errors="replace") if self.log is not None else ""
        return next((why for sign, why in KNOWN_RACES.items() if sign in text), None)

    def tail(self, lines: int = 60) -> str:
        if self.log is None:
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def outcomes(output: str) -> dict[str, str]:
    """Each test's and subtest's last reported outcome in `go test -v` output."""
    return {name: status for status, name, _ in _RESULT.findall(output)}


def run(binary: Path, test: str, way: str, seeds: str, logdir: Path, attempt: int = 1) -> Run:
    """Run one test of the binary against `seeds`; the binary's own -test.timeout panics with every
    goroutine's stack (the picture of a hang), and a process that outlives it is killed."""
    limit = TESTS.get(test, DEFAULT_LIMIT)
    log = logdir / (f"{test}.{way}.log" if attempt == 1 else f"{test}.{way}.{attempt}.log")
    env = {
        **os.environ,
        "KGO_SEEDS": seeds,
        # franz-go's own CI runs its suite at replication factor 1. At 3, replication was most of the suite's
        # broker CPU (TestClient_Produce: 64-72 s against 16 s) and says nothing of the proxy, which forwards
        # a Produce the same whatever its acks wait for; leaders still spread over the 3 brokers.
        "KGO_TEST_RF": "1",
        "KGO_TEST_RECORDS": str(RECORDS),
        "KGO_LOG_LEVEL": os.environ.get("KGO_LOG_LEVEL", "info"),
    }
    command = [str(binary), "-test.run", f"^{test}$", "-test.v", "-test.timeout", f"{limit:.0f}s", "-test.count=1"]
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            code = proc.wait(limit + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    seconds = time.monotonic() - started
    text = log.read_text(errors="replace")
    results = outcomes(text)
    status = results.get(test, "FAIL")
    if "panic: test timed out after" in text or code is None or code < 0:
        status = "HANG"
    elif code != 0 and status == "PASS":
        status = "FAIL"  # a pass followed by a failing exit (a leak check, a panic in cleanup)
    subtests = {name: outcome for name, outcome in results.items() if name != test}
    return Run(way, test, status, seconds, subtests, log)


def differences(direct: Run, other: Run) -> list[str]:
    """What passed directly but not the other way: the test itself and every subtest (a skip counts,
    since a client skips a test when the proxy hides a feature the broker has)."""
    found = []
    if direct.status == "PASS" and other.status != "PASS":
        found.append(f"{other.test}: {other.status} {other.way} (PASS directly)")
    for name, outcome in direct.subtests.items():
        theirs = other.subtests.get(name, "missing")
        if outcome == "PASS" and theirs != "PASS":
            found.append(f"{name}: {theirs} {other.way} (PASS directly)")
    return found


def table(runs: dict[str, dict[str, Run]] | dict[str, dict[str, Cell]], ways: list[str]) -> str:
    """A Markdown table: one row per test, its outcome and time each way."""
    lines = [
        "| test | " + " | ".join(ways) + " |",
        "|---|" + "---|" * len(ways),
    ]
    for test, by_way in runs.items():
        cells = [standing.cell(by_way[w]) if w in by_way else "-" for w in ways]
        lines.append(f"| {test} | " + " | ".join(cells) + " |")
    lines.append(standing.totals_row(runs, ways, "| **passed, total time** |"))
    return "\n".join(lines)


if __name__ == "__main__":  # `make franz-go`
    print(built())
