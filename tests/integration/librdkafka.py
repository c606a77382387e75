"""librdkafka's own integration tests (`tests/test-runner`), built at a pinned release and run against a real cluster.

librdkafka is the C library under confluent-kafka-python/-go/-dotnet, kcat and most non-JVM clients; its test
suite is written by the people who know its corners (KIP-848 groups, transactions, idempotence, admin, regex
subscriptions, share groups). The source comes from the npm registry: `@confluentinc/kafka-javascript` ships the
whole librdkafka tree, its tests included, in `deps/librdkafka`; the tarball is checked against the integrity
pinned here. It is configured and built (`-O0`, about 4 minutes on a loaded 2-core machine) once, and the built
tree kept in ~/.cache/vcproxy beside Kafka's jars; nothing of it is kept in this repository.

Each test number runs in a process of its own (`test-runner -L -p1 -Q`, TESTS=<number>) with a time limit;
the runner's `=== Test NAME PASSED/FAILED/SKIPPED ===` lines and its summary table are parsed into one outcome
per test entry (a number can hold several, e.g. 0045's).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import standing

PACKAGE = "@confluentinc/kafka-javascript"
PACKAGE_VERSION = "1.10.1"  # bundles librdkafka 2.15.1 (the newest the npm registry serves, see VERSION)
PACKAGE_INTEGRITY = "sha512-KVePUBn21EqCVP9mfxzEuM3SYJHHEF7X+iiC2e43QQgDSyEaksInmCGooT3w5q+cNAdkSCrK71j0ICfqoSqZLw=="
# The installed confluent-kafka (2.16.1) links librdkafka 2.16.0; no registry this project reaches serves that
# tree with its tests, and 2.15.1 is the nearest one served. VERSION is checked against the source's rdkafka.h.
VERSION = "2.15.1"

# librdkafka's tests are written for its "default" scenario (tests/scenarios/default.json: auto-creation on, 4
# partitions, replication factor 3) on a cluster set up as its tests/cluster_testing.py sets one up.
BROKER_PROPERTIES = {
    "num.partitions": "4",
    "auto.create.topics.enable": "true",
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    "group.share.min.record.lock.duration.ms": "1000",
    # An authorizer, as trivup configures one: 0081 creates and deletes ACLs ("No Authorizer is configured"
    # otherwise). Every client here is User:ANONYMOUS (PLAINTEXT), a super user, as the brokers themselves.
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "true",
    "auto.leader.rebalance.enable": "false",  # as the session's cluster: leaders stay where they are
}

CONSUMER_PROTOCOLS = ("classic", "consumer")  # group.protocol: the classic protocol and KIP-848's

# The broker tests (by number) run here, each with its time limit in seconds: about 3x its time through a VC
# on a loaded 2-core machine, so that only a hang (or a many-fold slowdown) reaches it. `groups` marks the
# tests that make a consumer group: only they run with both group protocols (the others' requests do not
# depend on it). Every broker test of the release is either here or in EXCLUDED.
DEFAULT_LIMIT = 240.0


@dataclass(frozen=True)
class Spec:
    limit: float = DEFAULT_LIMIT
    groups: bool = True


TESTS: dict[str, Spec] = {
    "0001": Spec(groups=False),
    "0002": Spec(groups=False),
    "0003": Spec(groups=False),
    "0005": Spec(groups=False),
    "0007": Spec(groups=False),
    "0008": Spec(groups=False),
    "0011": Spec(groups=False),
    "0012": Spec(groups=False),
    "0013": Spec(),
    "0014": Spec(),
    "0015": Spec(groups=False),
    "0017": Spec(groups=False),
    "0018": Spec(),
    "0019": Spec(),
    "0020": Spec(),
    "0021": Spec(groups=False),
    "0022": Spec(),
    "0026": Spec(),
    "0029": Spec(),
    "0030": Spec(),
    "0031": Spec(groups=False),
    "0033": Spec(),
    "0034": Spec(),
    "0035": Spec(groups=False),
    "0036": Spec(groups=False),
    "0038": Spec(groups=False),
    "0039": Spec(groups=False),
    "0040": Spec(),
    "0041": Spec(groups=False),
    "0042": Spec(),
    "0044": Spec(groups=False),
    "0045": Spec(),
    "0048": Spec(groups=False),
    "0049": Spec(),
    "0050": Spec(),
    "0051": Spec(),
    "0053": Spec(groups=False),
    "0054": Spec(groups=False),
    "0055": Spec(groups=False),
    "0056": Spec(),
    "0057": Spec(groups=False),
    "0059": Spec(groups=False),
    "0060": Spec(),
    "0061": Spec(),
    "0063": Spec(groups=False),
    "0064": Spec(),
    "0065": Spec(groups=False),
    "0067": Spec(),
    "0068": Spec(groups=False),
    "0069": Spec(),
    "0070": Spec(),
    "0073": Spec(),
    "0075": Spec(groups=False),
    "0076": Spec(groups=False),
    "0081": Spec(),
    "0082": Spec(groups=False),
    "0083": Spec(),
    "0084": Spec(),
    "0085": Spec(groups=False),
    "0086": Spec(groups=False),
    "0088": Spec(groups=False),
    "0089": Spec(),
    "0090": Spec(groups=False),
    "0091": Spec(),
    "0093": Spec(),
    "0094": Spec(groups=False),
    "0098": Spec(),
    "0099": Spec(),
    "0101": Spec(groups=False),
    "0102": Spec(),
    "0103": Spec(),
    "0107": Spec(),
    "0110": Spec(groups=False),
    "0111": Spec(),
    "0112": Spec(),
    "0113": Spec(),
    "0114": Spec(groups=False),
    "0118": Spec(),
    "0122": Spec(),
    "0123": Spec(groups=False),
    "0125": Spec(groups=False),
    "0127": Spec(),
    "0129": Spec(),
    "0130": Spec(),
    "0132": Spec(),
    "0137": Spec(),
    "0139": Spec(),
    "0140": Spec(),
    "0150": Spec(groups=False),
    "0170": Spec(groups=False),
    "0171": Spec(groups=False),
    "0172": Spec(groups=False),
    "0173": Spec(groups=False),
    "0174": Spec(groups=False),
    "0175": Spec(groups=False),
    "0176": Spec(groups=False),
    "0177": Spec(groups=False),
    "0178": Spec(groups=False),
    "0179": Spec(groups=False),
    "0180": Spec(groups=False),
    "0181": Spec(groups=False),
    "0184": Spec(groups=False),
    "0185": Spec(groups=False),
}

# Broker tests that cannot run against a plain external cluster, and why (docs/compatibility.md lists them).
EXCLUDED: dict[str, str] = {
    "0016": "checks client.software.name in the broker's JMX through trivup (KAFKA_PATH)",
    "0028": "marked a known issue by librdkafka (long topic names, its issue 529)",
    "0047": "marked a known issue by librdkafka",
    "0052": "sets topic configs with kafka-topics.sh (KAFKA_PATH, which the Maven-resolved Kafka has not got)",
    "0077": "sets topic configs with kafka-topics.sh (KAFKA_PATH)",
    "0092": "mixes message format versions that Kafka 4 no longer has",
    "0097": "needs an SSL listener with trivup's certificates",
    "0109": "sets ACLs with kafka-acls.sh (KAFKA_PATH)",
    "0115": "sets ACLs with kafka-acls.sh (KAFKA_PATH) and needs an authenticated listener",
    "0119": "sets ACLs with kafka-acls.sh (KAFKA_PATH) and needs an authenticated listener",
    "0126": "needs an OIDC token endpoint (trivup)",
    "0135": "needs a SASL listener in test.conf (security.protocol), which the other tests must not have",
    "0142": "needs a SASL listener in test.conf (security.protocol), which the other tests must not have",
    "0190": "a manual test (TEST_F_MANUAL)",
}

# The tests that found the tells of issue 25 and those of the features a VC rewrites most (groups, transactions,
# regex subscriptions, admin, share groups) run first in `make compat`: a run cut short has them.
FIRST = ("0118", "0081", "0113", "0033", "0045", "0102", "0103", "0098", "0090", "0129", "0171", "0175", "0018")

# The CI subset (test_librdkafka_suite.py without VCPROXY_LIBRDKAFKA_ALL): two fast tests that cover auto-creation,
# produce and consume on every partition (0012), offset commits and a consumer group with either protocol (0030).
# Not 0001: its one-second wall-clock assert (a warning since the runner gets CI=true) is all it adds to 0012.
CI_TESTS = ("0012", "0030")

# Client ids the tests set besides their own names (test.c gives each client its test's name): the VC way binds
# every one of them, or the proxy refuses the login. From the sources of VERSION.
EXTRA_CLIENT_IDS = (
    "rdkafka",  # librdkafka's default, for a conf made without test_conf_init(); also delete_test_topics()
    "<MAIN>",  # the runner's own clients, between tests
    "c" * 270,  # 0011: a 270-character client id
    "client1Leader",
    "client2Follower",  # 0045
    *(f"client_id_{i}" for i in range(4)),  # 0081
    "consumer1",
    "consumer2a",
    "consumer2b",  # 0102
    *(f"consumer{i}" for i in range(10)),  # 0113
    *(f"C_{i}" for i in range(10)),  # 0113
    "a_assign_rapid",  # 0113 (its function's name)
    *(f"c{i}" for i in range(10)),  # 0120, 0132
    "myclient",  # 0078
)

REPORT_KEY = pytest.StashKey[str]()  # the table, for the terminal summary (tests/integration/conftest.py)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# `================= Test 0001_multiobj PASSED =================` (TEST_SAY prefixes `[<test> /  1.2s] `).
_VERDICT = re.compile(r"=+ Test (\S+) (PASSED|FAILED|SKIPPED) =+")
# The summary table: `| 0001_multiobj                            |     PASSED |   3.211s | <reason>`.
_SUMMARY = re.compile(r"^\|\s*(\d{4}_\S+)\s*\|\s*([A-Z ]+?)\s*\|\s*([\d.]+)s\s*\|(.*)$", re.MULTILINE)
# A failure as TEST_FAIL reports it, with its reason on the next line (also when an assert aborts the runner
# before any summary): `### Test "0012_produce_consume" failed at 0012-produce_consume.c:57:dr_cb() at ...: ###`.
_FAILURE = re.compile(r'^### Test "([^"]+)" failed at (\S+) at [^\n]*###\n(.*)$', re.MULTILINE)
_NOT_A_BROKER_TEST = "Filtered due to negative test flags"
_STATES = {"PASSED": "PASS", "FAILED": "FAIL", "SKIPPED": "SKIP", "RUNNING": "HANG", "NOT STARTED": "SKIP"}


def fetch(workdir: Path) -> Path:
    """The librdkafka source tree of the pinned npm package, checked against its integrity, under workdir."""
    npm = shutil.which("npm")
    assert npm, "no npm on PATH: librdkafka's source comes from the npm registry"
    packed = subprocess.run(
        [npm, "pack", f"{PACKAGE}@{PACKAGE_VERSION}", "--json", "--pack-destination", str(workdir)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert packed.returncode == 0, packed.stdout + packed.stderr
    tarball = workdir / json.loads(packed.stdout)[0]["filename"]
    digest = "sha512-" + base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    assert digest == PACKAGE_INTEGRITY, f"{tarball.name}: integrity {digest}, pinned {PACKAGE_INTEGRITY}"
    prefix = "package/deps/librdkafka/"
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(workdir, members=members, filter="data")
        else:  # Python before 3.11.4 (Debian 12's 3.11.2) has no filters: plain files and directories, inside only
            plain = [m for m in members if (m.isfile() or m.isdir()) and ".." not in Path(m.name).parts]
            tar.extractall(workdir, members=plain)  # a pinned tarball: its digest is checked above
    source = workdir / prefix
    header = (source / "src" / "rdkafka.h").read_text()
    major, minor, patch = (int(part) for part in VERSION.split("."))
    assert f"#define RD_KAFKA_VERSION 0x{major:02x}{minor:02x}{patch:02x}ff" in header, "not librdkafka " + VERSION
    return source


def cache_dir() -> Path:
    """Where the built tree is kept between sessions: ~/.cache/vcproxy (beside Kafka's jars), by version and digest."""
    root = Path(os.environ.get("VCPROXY_CACHE_DIR") or Path.home() / ".cache" / "vcproxy")
    return root / "librdkafka" / f"{VERSION}-{hashlib.sha256(PACKAGE_INTEGRITY.encode()).hexdigest()[:12]}"


def build(target: Path | None = None) -> Path:
    """The tests directory (with `test-runner`) of librdkafka built from the pinned source: fetched, configured
    and built once into a temporary directory beside `target`, then moved there whole (a build cut short leaves
    nothing a later session would take for a built tree)."""
    target = target or cache_dir()
    runner = target / "tests" / "test-runner"
    if runner.exists():
        return runner.parent
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as scratch:
        workdir = Path(scratch)
        source = fetch(workdir)
        steps = [
            # No curl: only the OIDC test (excluded) needs it. -O0: the build takes minutes, not many.
            ["./configure", "--disable-optimization", "--disable-curl"],
            ["make", "-j2", "libs"],
            ["make", "-j2", "-C", "tests", "build"],
        ]
        log = workdir / "build.log"
        with log.open("w") as out:
            for step in steps:
                built = subprocess.run(step, cwd=source, stdout=out, stderr=subprocess.STDOUT, timeout=1800)
                if built.returncode != 0:
                    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
                    raise AssertionError(f"{' '.join(step)} failed ({built.returncode}):\n{tail}")
        assert (source / "tests" / "test-runner").exists(), "no test-runner after the build"
        try:
            source.rename(target)
        except OSError:
            assert runner.exists(), f"cannot move the build to {target}"  # another session's build got there first
    return runner.parent


def client_ids(tests_dir: Path) -> list[str]:
    """Every client id the tests use: each test's name (from test.c's list) and EXTRA_CLIENT_IDS."""
    names = re.findall(r"^\s*_TEST\((\d{4}_\w+),", (tests_dir / "test.c").read_text(), re.MULTILINE)
    return sorted({*names, *EXTRA_CLIENT_IDS})


@dataclass
class Run:
    """One librdkafka test number run one way with one group protocol: its outcome, its entries', its time, log."""

    way: str
    test: str
    protocol: str
    status: str  # PASS, FAIL, SKIP, or HANG (the time limit ended it)
    seconds: float
    entries: dict[str, str] = field(default_factory=dict)  # entry name -> PASS/FAIL/SKIP/HANG
    reasons: dict[str, str] = field(default_factory=dict)  # entry name -> the runner's failure or skip reason
    log: Path | None = None
    note: str = ""

    def tail(self, lines: int = 60) -> str:
        if self.log is None:
            return ""
        return "\n".join(_ANSI.sub("", self.log.read_text(errors="replace")).splitlines()[-lines:])


def outcomes(output: str) -> tuple[dict[str, str], dict[str, str]]:
    """Each test entry's outcome (PASS, FAIL, SKIP, HANG) and the reason the runner gave, from test-runner's output.

    The summary table is the runner's last word (it also names a test still RUNNING when a time-out ended the
    run); the verdict lines stand in for it when the process died before printing one.
    """
    text = _ANSI.sub("", output)
    found: dict[str, str] = {name: _STATES[state] for name, state in _VERDICT.findall(text)}
    reasons: dict[str, str] = {}
    for name, where, why in _FAILURE.findall(text):
        if name.startswith("<"):
            continue  # the runner's own checks (threads left at exit): the exit code tells
        entry, _, subtest = name.partition(" (")  # `0030_offset_commit (do_offset_test:122: ...)`
        found[entry] = "FAIL"
        reasons.setdefault(entry, f"{why.strip()} ({where}{', ' + subtest.rstrip(')') if subtest else ''})")
    for name, state, _seconds, rest in _SUMMARY.findall(text):
        if name.startswith("<") or rest.strip() == _NOT_A_BROKER_TEST:
            continue  # the runner itself; an entry of the number that needs no broker (-L leaves it out)
        found[name] = _STATES.get(state, "FAIL")
        if rest.strip() and name not in reasons:
            reasons[name] = rest.strip()
    return found, reasons


def verdict(entries: dict[str, str]) -> str:
    """A test number's outcome from its entries': any failure or hang decides, then any pass, else a skip."""
    for status in ("HANG", "FAIL", "PASS"):
        if status in entries.values():
            return status
    return "SKIP" if entries else "FAIL"


def write_conf(path: Path, bootstrap: str) -> Path:
    """test.conf for one way: the bootstrap, random topic names (no run meets another's topics) and the runner's
    own time-outs stretched for a loaded 2-core machine (ours, per process, are the ones that matter)."""
    path.write_text(
        f"bootstrap.servers={bootstrap}\ntest.topic.random=true\ntest.timeout.multiplier=3\nrequest.timeout.ms=30000\n"
    )
    return path


def run(
    tests_dir: Path,
    test: str,
    way: str,
    protocol: str,
    conf: Path,
    kafka_version: str,
    logdir: Path,
    attempt: int = 1,
) -> Run:
    """Run one test number of the runner one way; a process that outlives the test's limit is killed (HANG)."""
    limit = TESTS[test].limit if test in TESTS else DEFAULT_LIMIT
    slug = way.replace(" ", "-")
    log = logdir / f"{test}.{protocol}.{slug}{'' if attempt == 1 else f'.{attempt}'}.log"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("CI", "TESTS", "TEST_DEBUG")},
        # As librdkafka's own CI runs them: its wall-clock asserts (CreateTopics within 50 ms, a client's
        # create-produce-destroy under 1 s) warn instead of failing, its time limits get the CI margin.
        # Time stays a result here: the check compares each way's time with the direct one.
        "CI": "true",
        "TESTS": test,
        "RDKAFKA_TEST_CONF": str(conf),
        "TEST_KAFKA_VERSION": kafka_version,
        "TEST_CONSUMER_GROUP_PROTOCOL": protocol,
        "LD_LIBRARY_PATH": f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}",
    }
    # In logdir: the runner writes a stats file per test into its working directory (the built tree is shared).
    # -L: broker tests only; -p1: the number's entries one at a time; -Q: quick mode (fewer messages and
    # rounds). Not -D (the runner deletes its topics itself, then allows its threads one second to end: a
    # loaded machine failed passing tests there): delete_test_topics() does it after the run.
    command = [str(tests_dir / "test-runner"), "-L", "-p1", "-Q"]
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, cwd=logdir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        try:
            code: int | None = proc.wait(limit)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    seconds = time.monotonic() - started
    entries, reasons = outcomes(log.read_text(errors="replace"))
    status = verdict(entries)
    if code is None:
        status = "HANG"
        entries = {name: ("HANG" if outcome not in ("PASS", "SKIP") else outcome) for name, outcome in entries.items()}
    elif code != 0 and status in ("PASS", "SKIP"):
        status = "FAIL"  # the runner exits non-zero on a failure its summary did not show (a crash)
    return Run(way, test, protocol, status, seconds, entries, reasons, log)


def delete_test_topics(bootstrap: str, prefix: str = "rdkafkatest", timeout: float = 60) -> str:
    """Delete the tests' topics (their names start with the runner's prefix) where a run made them: a 3-broker test
    cluster holds some thousands of partitions, and a later regex subscription must not meet them. Returns what
    went wrong ("" if nothing): a clean-up that fails (a cluster too loaded to answer in time) is the table's
    note, not the test's failure."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "rdkafka"})
    try:
        names = [name for name in admin.list_topics(timeout=timeout).topics if name.startswith(prefix)]
        futures = admin.delete_topics(names, operation_timeout=timeout) if names else {}
        for future in futures.values():
            try:
                future.result(timeout)
            except KafkaException as exc:  # already gone (a test deleted it)
                if "UNKNOWN_TOPIC" not in str(exc):
                    raise
    except (KafkaException, TimeoutError) as exc:  # (a future's result() times out with TimeoutError)
        return f"topics not deleted: {exc!r}"
    return ""


SLOWDOWN = 2.0  # through a VC, a test may take at most this many times its direct time...
SLOWDOWN_FLOOR = 10.0  # ...or this many seconds more, whichever is larger (a short test's noise is seconds)


def differences(direct: Run, other: Run) -> list[str]:
    """What passed directly but not the other way (an entry that skips there counts: the proxy hid a feature),
    and a run far slower than directly."""
    found = []
    if direct.status == "PASS" and other.status != "PASS":
        found.append(f"{other.test} [{other.protocol}]: {other.status} {other.way} (PASS directly)")
    for name, outcome in direct.entries.items():
        theirs = other.entries.get(name, "missing")
        if outcome == "PASS" and theirs != "PASS":
            reason = other.reasons.get(name, "")
            found.append(
                f"{name} [{other.protocol}]: {theirs} {other.way} (PASS directly){': ' + reason if reason else ''}"
            )
    if direct.status == "PASS" and other.status == "PASS" and too_slow(direct.seconds, other.seconds):
        found.append(_slower(direct, other))
    return found


# Races in librdkafka's own tests, each keyed by the line the test prints when it loses one, with why it is
# the test's and not the proxy's. A proxied run that failed with that line runs once more (the table says so);
# any other failure through a proxy still fails at once.
KNOWN_RACES: dict[str, tuple[str, str]] = {
    "0091": (
        "rebalanced 3 times, max was 2",
        "a member is assigned the partition another member's close freed during its own close: with the KIP-848"
        " heartbeat every 500 ms and a close of about 30 ms, about 6% of runs whichever way",
    ),
}


def known_race(run: Run) -> str | None:
    """Why a failed run lost a known race of its test, from its log; None if it failed otherwise."""
    race = KNOWN_RACES.get(run.test)
    if run.status != "FAIL" or race is None or run.log is None or not run.log.exists():
        return None
    line, why = race
    return why if line in run.log.read_text(errors="replace") else None


def only_slower(direct: Run, other: Run) -> bool:
    """Whether the one difference is time: every entry as directly, only far slower."""
    return direct.status == other.status == "PASS" and differences(direct, other) == [_slower(direct, other)]


def _slower(direct: Run, other: Run) -> str:
    return f"{other.test} [{other.protocol}]: {other.seconds:.1f} s {other.way}, {direct.seconds:.1f} s directly"


def too_slow(direct: float, other: float) -> bool:
    return other > max(direct * SLOWDOWN, direct + SLOWDOWN_FLOOR)


def table(runs: dict[tuple[str, str], dict[str, Run]], ways: list[str], known: dict[str, str] | None = None) -> str:
    """A Markdown table: one row per (test, group protocol), its outcome and time each way."""
    known = known or {}
    lines = [
        "| test | group protocol | " + " | ".join(ways) + " |",
        "|---|---|" + "---|" * len(ways),
    ]
    for (test, protocol), by_way in runs.items():
        cells = [standing.cell(by_way[w]) if w in by_way else "-" for w in ways]
        name = test + (f" ({_entry_names(by_way)})" if _entry_names(by_way) else "")
        why = known.get(f"{test}/{protocol}") or known.get(test)
        mark = f" (known difference: {why})" if why else ""
        lines.append(
            f"| {name}{mark} | {protocol if TESTS.get(test, Spec()).groups else 'n/a'} | " + " | ".join(cells) + " |"
        )
    lines.append(standing.totals_row(runs, ways, "| **passed, total time** | |"))
    return "\n".join(lines)


def _entry_names(by_way: dict[str, Run]) -> str:
    names = sorted({name for run in by_way.values() for name in run.entries})
    return ", ".join(n.split("_", 1)[1] for n in names if "_" in n)
