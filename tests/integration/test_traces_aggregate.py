"""`vcproxy traces aggregate`, the PySpark job, end to end on a synthetic span workload (no Kafka needed).

The workload is known exactly: two tenants (team-a, team-b) plus the physical cluster, several principals,
client ids, instance ids and APIs, errors, latencies chosen so that p50/p95/p99 are unambiguous (plateaus around
every rank), topics with and without vcproxy.topic_bytes, over four minutes; written as a rotated set of JSON
Lines files mixing both line shapes, with blank lines and four bad lines. The job runs once, as a subprocess in
local mode (the module fixture), and every table is checked against the workload, in both its CSV and its
Parquet form (read back with pyarrow, not Spark). A second run checks that all-bad input exits 2.

Needs pyspark and Java 17+; under CI both must be there (nothing is skipped).
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from vcproxy_tools.analytics import report
from vcproxy_tools.analytics.aggregate import BAD_LINES_TABLE, TABLES

T0 = 1_714_557_600  # 2024-05-01T10:00:00Z, on a minute boundary
MS = 1_000_000  # ns
PRODUCE, FETCH, METADATA, OFFSET_COMMIT = 0, 1, 3, 8
API_NAMES = {PRODUCE: "Produce", FETCH: "Fetch", METADATA: "Metadata", OFFSET_COMMIT: "OffsetCommit"}
ALICE_INSTANCE = "5f0b9a4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
CAROL_INSTANCE = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d"
JOB_TIMEOUT = 300


@dataclass
class Req:
    vc: str | None
    principal: str | None
    client_id: str | None
    instance: str | None
    api: int
    minute: int
    latency_ms: int
    bytes_in: int
    bytes_out: int
    topics: list[str] = field(default_factory=list)
    topic_bytes: list[int] | None = None
    error_codes: list[int] = field(default_factory=list)
    status_error: bool = False

    @property
    def vc_name(self) -> str:
        return self.vc or "(physical)"

    @property
    def is_error(self) -> bool:
        return bool(self.error_codes) or self.status_error


def _latencies(*plateaus: tuple[int, int]) -> list[int]:
    return [ms for count, ms in plateaus for _ in range(count)]


def workload() -> list[Req]:
    reqs: list[Req] = []
    # team-a / alice / orders-producer: 100 Produce to two topics. Latencies 90x10, 8x50, 2x200 ms:
    # p50 = 10, p95 = 50, p99 = 200 under any percentile definition. 5 errors (NOT_LEADER_OR_FOLLOWER).
    for i, lat in enumerate(_latencies((90, 10), (8, 50), (2, 200))):
        reqs.append(
            Req(
                "team-a",
                "User:alice",
                "orders-producer",
                ALICE_INSTANCE,
                PRODUCE,
                i % 4,
                lat,
                1000,
                50,
                ["orders", "payments"],
                [600, 300],
                [6] if i % 20 == 3 else [],
            )
        )
    # ... and 10 Metadata, 2 ms each.
    for i in range(10):
        reqs.append(Req("team-a", "User:alice", "orders-producer", ALICE_INSTANCE, METADATA, i % 2, 2, 40, 400))
    # team-a / bob / orders-consumer (no instance id): 60 Fetch at 500 ms, no topic_bytes: the response bytes are
    # split over the topics (2000 -> orders; 1001 -> 501 orders + 500 payments).
    for i in range(50):
        reqs.append(Req("team-a", "User:bob", "orders-consumer", None, FETCH, i % 4, 500, 80, 2000, ["orders"]))
    for _ in range(10):
        reqs.append(Req("team-a", "User:bob", "orders-consumer", None, FETCH, 3, 500, 90, 1001, ["orders", "payments"]))
    # ... and 4 OffsetCommit, one failing.
    for i in range(4):
        reqs.append(
            Req(
                "team-a",
                "User:bob",
                "orders-consumer",
                None,
                OFFSET_COMMIT,
                2,
                4,
                120,
                60,
                ["orders"],
                None,
                [25] if i == 0 else [],
            )
        )
    # team-b / carol / analytics: 20 Produce, latencies 11x5, 7x20, 2x80 ms -> p50 5, p95 80, p99 80.
    # Two errors: one Kafka error code, one proxy-side failure (status ERROR, no code).
    for i, lat in enumerate(_latencies((11, 5), (7, 20), (2, 80))):
        reqs.append(
            Req(
                "team-b",
                "User:carol",
                "analytics",
                CAROL_INSTANCE,
                PRODUCE,
                i % 2,
                lat,
                6000,
                40,
                ["clicks"],
                [5000],
                [87] if i == 4 else [],
                status_error=i == 7,
            )
        )
    # ... 10 Fetch of clicks, 100 ms, 3000 bytes each.
    for i in range(10):
        reqs.append(
            Req(
                "team-b", "User:carol", "analytics", CAROL_INSTANCE, FETCH, 1 + i % 3, 100, 70, 3100, ["clicks"], [3000]
            )
        )
    # team-b / dave, same client id as carol, another principal: 3 Metadata.
    for _ in range(3):
        reqs.append(Req("team-b", "User:dave", "analytics", None, METADATA, 0, 3, 30, 300))
    # The physical cluster (no virtual cluster attribute): an admin's 3 Metadata.
    for _ in range(3):
        reqs.append(Req(None, "User:admin", "admin-cli", None, METADATA, 3, 1, 25, 250))
    return reqs


def _attr(key: str, value: Any, int_as_number: bool = False) -> dict[str, Any]:
    def any_value(v: Any) -> dict[str, Any]:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):  # int64 is a decimal string in OTLP JSON; some writers use numbers
            return {"intValue": v if int_as_number else str(v)}
        if isinstance(v, list):
            return {"arrayValue": {"values": [any_value(x) for x in v]}} if v else {"arrayValue": {}}
        return {"stringValue": v}

    return {"key": key, "value": any_value(value)}


def encode(req: Req, n: int) -> dict[str, Any]:
    start = (T0 + req.minute * 60 + 1 + n % 50) * 10**9 + n  # inside the minute, distinct
    attrs = {
        "vcproxy.virtual_cluster": req.vc,
        "vcproxy.virtual_cluster.id": f"{req.vc}-id" if req.vc else "phys-cluster-id",
        "vcproxy.principal": req.principal,
        "vcproxy.client_id": req.client_id,
        "vcproxy.client_instance_id": req.instance,
        "client.address": f"10.0.0.{n % 3 + 1}",
        "vcproxy.api.name": API_NAMES[req.api],
        "vcproxy.api.key": req.api,
        "vcproxy.api.version": 9,
        "vcproxy.correlation_id": n,
        "vcproxy.topics": req.topics or None,
        "vcproxy.topic_bytes": req.topic_bytes,
        "vcproxy.bytes_in": req.bytes_in,
        "vcproxy.bytes_out": req.bytes_out,
        "vcproxy.error_codes": req.error_codes,
        "vcproxy.upstream.node_id": 1 + n % 3,
        "vcproxy.local": False,
    }
    return {
        "traceId": f"{n + 1:032x}",
        "spanId": f"{n + 1:016X}",  # upper case is still hex
        "name": API_NAMES[req.api],
        "kind": 2,
        "startTimeUnixNano": str(start) if n % 2 else start,
        "endTimeUnixNano": str(start + req.latency_ms * MS),
        "attributes": [_attr(k, v, int_as_number=n % 3 == 0) for k, v in attrs.items() if v is not None],
        "status": {"code": 2} if req.status_error else {},
    }


def non_request_spans(n: int) -> list[dict[str, Any]]:
    # connection and authenticate spans: no vcproxy.api.key, so no request table may count them.
    start = (T0 + 5) * 10**9
    return [
        {
            "traceId": f"{100000 + n:032x}",
            "spanId": f"{100000 + n:016x}",
            "name": name,
            "kind": 2,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 7 * MS),
            "attributes": [_attr("vcproxy.principal", "User:alice"), _attr("vcproxy.virtual_cluster", "team-a")],
        }
        for name in ("connection", "authenticate")
    ]


def resource_spans(spans: list[dict[str, Any]], instance: str) -> dict[str, Any]:
    return {
        "resource": {"attributes": [_attr("service.name", "vcproxy"), _attr("service.instance.id", instance)]},
        "scopeSpans": [{"scope": {"name": "vcproxy"}, "spans": spans}],
    }


BAD_LINES = [
    '{"resourceSpans": [{"resource": {"attributes": []}, "scopeSp',  # truncated by a crash
    "[1, 2, 3]",
    json.dumps(
        {"resourceSpans": [resource_spans([{"traceId": "xyz", "spanId": "00000000000000aa", "name": "Produce"}], "p")]}
    ),
    '{"hello": "world"}',
]


OLDEST = "archive/traces.jsonl.2.gz"  # an old rotated file, moved aside and compressed: read all the same


def write_input(root: Path, reqs: list[Req]) -> dict[str, list[int]]:
    """Rotated files, oldest first: archive/traces.jsonl.2.gz, traces.jsonl.1, traces.jsonl; returns the bad
    lines' numbers per file."""
    spans = [encode(r, n) for n, r in enumerate(reqs)]
    lines: list[str] = []
    for i in range(0, len(spans), 7):
        chunk = spans[i : i + 7]
        if i % 2:  # a whole TracesData with two ResourceSpans (two proxy instances)
            obj = {"resourceSpans": [resource_spans(chunk[:3], "proxy-1"), resource_spans(chunk[3:], "proxy-2")]}
        else:  # one ResourceSpans per line
            obj = resource_spans(chunk, "proxy-1")
        lines.append(json.dumps(obj))
    lines.append(json.dumps({"resourceSpans": [resource_spans(non_request_spans(1), "proxy-1")]}))
    thirds = [lines[: len(lines) // 3], lines[len(lines) // 3 : 2 * len(lines) // 3], lines[2 * len(lines) // 3 :]]
    files = {OLDEST: thirds[0], "traces.jsonl.1": thirds[1], "traces.jsonl": thirds[2]}
    # bad lines at known places; blank lines are not bad
    files[OLDEST][3:3] = [BAD_LINES[0], ""]  # lines 4 and 5
    files["traces.jsonl.1"][0:0] = [BAD_LINES[1]]  # line 1
    files["traces.jsonl"].extend([BAD_LINES[2], BAD_LINES[3], ""])
    (root / "archive").mkdir(parents=True)
    for name, content in files.items():
        data = ("\n".join(content) + "\n").encode()
        (root / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (root / "README.txt").write_text("not spans\n")  # ignored: not a .jsonl file
    (root / ".traces.jsonl.swp").write_text("{")  # ignored: hidden
    n_last = len(files["traces.jsonl"])
    return {OLDEST: [4], "traces.jsonl.1": [1], "traces.jsonl": [n_last - 2, n_last - 1]}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "vcproxy_tools", "traces", "aggregate", *args]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=JOB_TIMEOUT, env=_env())


SPARK_ARGS = (
    "--master",
    "local[2]",
    "--conf",
    "spark.ui.enabled=false",
    "--conf",
    "spark.driver.memory=512m",
    "--conf",
    "spark.sql.shuffle.partitions=2",
)


@dataclass
class Run:
    reqs: list[Req]
    bad: dict[str, list[int]]
    out: Path
    proc: subprocess.CompletedProcess[str]
    seconds: float
    only_bad: subprocess.CompletedProcess[str]  # the run over input with nothing valid in it


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("traces")
    reqs = workload()
    bad = write_input(root / "in", reqs)
    (root / "bad").mkdir()
    (root / "bad" / "traces.jsonl").write_text("\n".join(BAD_LINES) + "\n\n")
    (root / "bad" / "traces.jsonl.1").write_text("")
    # The two Spark runs overlap: each spends much of its time starting a JVM and waiting on it.
    only_bad = subprocess.Popen(
        cli("--input", str(root / "bad"), "--output", str(root / "bad-out"), *SPARK_ARGS),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        started = time.monotonic()
        proc = run_cli("--input", str(root / "in"), "--output", str(root / "out"), "--top", "2", *SPARK_ARGS)
        seconds = time.monotonic() - started
        out, err = only_bad.communicate(timeout=JOB_TIMEOUT)
    finally:
        only_bad.kill()
        only_bad.wait()
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    yield Run(
        reqs,
        bad,
        root / "out",
        proc,
        seconds,
        subprocess.CompletedProcess(only_bad.args, only_bad.returncode, out, err),
    )


def read_csv(run: Run, table: str) -> list[dict[str, str]]:
    with (run.out / f"{table}.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def read_parquet(run: Run, table: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(run.out / table).to_pylist()


def by(rows: list[dict[str, Any]], *keys: str) -> dict[Any, dict[str, Any]]:
    out = {}
    for r in rows:
        k = tuple(r[key] for key in keys)
        assert k not in out, f"duplicate key {k}"
        out[k if len(k) > 1 else k[0]] = r
    return out


# ---------------------------------------------------------------- the run itself


def test_job_runs_and_reports_progress(job: Run) -> None:
    err = job.proc.stderr
    for stage in ("starting Spark", "reading 3 file(s)", "parsed", "wrote vc_summary", "report:", "done:"):
        assert stage in err, f"missing progress {stage!r}:\n{err[-3000:]}"
    spans = len(job.reqs) + 2
    assert f"{spans} span(s), {len(job.reqs)} request span(s), 4 bad line(s)" in err
    # the first bad lines are named with file:line and a reason
    assert "4 bad line(s) skipped" in err
    assert f"traces.jsonl:{job.bad['traces.jsonl'][0]}: resourceSpans[0].scopeSpans[0].spans[0].traceId" in err
    assert "traces.jsonl.1:1: expected a JSON object" in err
    assert f"{OLDEST}:4: not valid JSON" in err
    print(f"job took {job.seconds:.1f}s")


def test_bad_lines_table(job: Run) -> None:
    rows = read_csv(job, "bad_lines")
    got = {(r["file"], int(r["line"])) for r in rows}
    want = {(f, n) for f, ns in job.bad.items() for n in ns}
    assert got == want
    reasons = {(r["file"], int(r["line"])): r["reason"] for r in rows}
    assert "neither a TracesData" in reasons[("traces.jsonl", job.bad["traces.jsonl"][1])]
    assert "expected 32 hex digits" in reasons[("traces.jsonl", job.bad["traces.jsonl"][0])]
    assert len(read_parquet(job, "bad_lines")) == 4


# ---------------------------------------------------------------- request tables


def test_vc_summary(job: Run) -> None:
    rows = by(read_parquet(job, "vc_summary"), "virtual_cluster")
    assert set(rows) == {"team-a", "team-b", "(physical)"}  # connection/authenticate spans are not requests
    a, b, phys = rows["team-a"], rows["team-b"], rows["(physical)"]
    assert (a["requests"], a["errors"]) == (174, 6)
    assert a["error_rate"] == pytest.approx(6 / 174)
    assert a["bytes_in"] == 100 * 1000 + 10 * 40 + 50 * 80 + 10 * 90 + 4 * 120
    assert a["bytes_out"] == 100 * 50 + 10 * 400 + 50 * 2000 + 10 * 1001 + 4 * 60
    assert a["bytes_produced"] == 100 * 900
    assert a["bytes_fetched"] == 50 * 2000 + 10 * 1001
    assert (a["principals"], a["client_ids"], a["virtual_cluster_id"]) == (2, 2, "team-a-id")
    assert (b["requests"], b["errors"], b["bytes_produced"], b["bytes_fetched"]) == (33, 2, 100_000, 30_000)
    assert (phys["requests"], phys["errors"], phys["virtual_cluster_id"]) == (3, 0, "phys-cluster-id")
    assert a["first_seen"].timestamp() >= T0 and a["last_seen"].timestamp() < T0 + 4 * 60


def test_requests_by_client_counts_errors_bytes_and_percentiles(job: Run) -> None:
    rows = by(read_parquet(job, "requests_by_client"), "virtual_cluster", "principal", "client_id", "api")
    produce_a = rows[("team-a", "User:alice", "orders-producer", "Produce")]
    assert produce_a["client_instance_id"] == ALICE_INSTANCE
    assert (produce_a["requests"], produce_a["errors"], produce_a["error_rate"]) == (100, 5, 0.05)
    assert (produce_a["bytes_in"], produce_a["bytes_out"]) == (100_000, 5_000)
    lat = (produce_a["latency_p50_ms"], produce_a["latency_p95_ms"], produce_a["latency_p99_ms"])
    assert lat == (10.0, 50.0, 200.0)
    assert produce_a["latency_max_ms"] == 200.0

    fetch_a = rows[("team-a", "User:bob", "orders-consumer", "Fetch")]
    assert fetch_a["client_instance_id"] is None
    assert (fetch_a["requests"], fetch_a["errors"], fetch_a["error_rate"]) == (60, 0, 0.0)
    assert (fetch_a["latency_p50_ms"], fetch_a["latency_p95_ms"], fetch_a["latency_p99_ms"]) == (500.0, 500.0, 500.0)

    commit = rows[("team-a", "User:bob", "orders-consumer", "OffsetCommit")]
    assert (commit["requests"], commit["errors"], commit["error_rate"]) == (4, 1, 0.25)

    produce_b = rows[("team-b", "User:carol", "analytics", "Produce")]
    assert (produce_b["requests"], produce_b["errors"], produce_b["error_rate"]) == (20, 2, 0.1)
    lat = (produce_b["latency_p50_ms"], produce_b["latency_p95_ms"], produce_b["latency_p99_ms"])
    assert lat == (5.0, 80.0, 80.0)

    # every group agrees with the workload
    want: dict[tuple[Any, ...], Counter[str]] = defaultdict(Counter)
    for r in job.reqs:
        c = want[(r.vc_name, r.principal, r.client_id, API_NAMES[r.api])]
        c["requests"] += 1
        c["errors"] += r.is_error
        c["bytes_in"] += r.bytes_in
        c["bytes_out"] += r.bytes_out
    assert set(rows) == set(want)
    for key, c in want.items():
        assert {k: rows[key][k] for k in c} == dict(c), key


def test_requests_by_api(job: Run) -> None:
    rows = by(read_parquet(job, "requests_by_api"), "virtual_cluster", "api")
    assert rows[("team-a", "Metadata")]["requests"] == 10
    assert rows[("team-a", "Metadata")]["latency_p99_ms"] == 2.0
    assert rows[("team-b", "Metadata")]["requests"] == 3  # dave's
    assert rows[("team-b", "Fetch")]["api_key"] == FETCH
    assert (rows[("team-b", "Fetch")]["requests"], rows[("team-b", "Fetch")]["latency_p50_ms"]) == (10, 100.0)
    assert sum(r["requests"] for r in rows.values()) == len(job.reqs)


def test_topic_showback(job: Run) -> None:
    rows = by(read_parquet(job, "topic_showback"), "virtual_cluster", "topic")
    assert set(rows) == {("team-a", "orders"), ("team-a", "payments"), ("team-b", "clicks")}
    orders, payments, clicks = rows[("team-a", "orders")], rows[("team-a", "payments")], rows[("team-b", "clicks")]
    # the OffsetCommit on "orders" is neither produced nor fetched
    assert (orders["bytes_produced"], orders["bytes_fetched"]) == (100 * 600, 50 * 2000 + 10 * 501)
    assert (payments["bytes_produced"], payments["bytes_fetched"]) == (100 * 300, 10 * 500)
    assert (orders["produce_requests"], orders["fetch_requests"]) == (100, 60)
    assert (payments["produce_requests"], payments["fetch_requests"]) == (100, 10)
    assert (clicks["bytes_produced"], clicks["bytes_fetched"], clicks["bytes_total"]) == (100_000, 30_000, 130_000)


def test_per_minute_rates(job: Run) -> None:
    rows = by(read_parquet(job, "per_minute"), "virtual_cluster", "minute")
    want: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    for r in job.reqs:
        c = want[(r.vc_name, T0 + 60 * r.minute)]
        c["requests"] += 1
        c["errors"] += r.is_error
        c["bytes_in"] += r.bytes_in
        c["bytes_out"] += r.bytes_out
    got = {(vc, int(minute.timestamp())): row for (vc, minute), row in rows.items()}
    assert set(got) == set(want)
    for key, c in want.items():
        row = got[key]
        assert {k: row[k] for k in c} == dict(c), key
        assert row["requests_per_sec"] == pytest.approx(c["requests"] / 60)
        assert row["bytes_in_per_sec"] == pytest.approx(c["bytes_in"] / 60)
        assert row["bytes_out_per_sec"] == pytest.approx(c["bytes_out"] / 60)
    # minute 0 of team-a: 25 Produce + 5 Metadata + 13 Fetch
    assert got[("team-a", T0)]["requests"] == 25 + 5 + 13


def test_top_clients(job: Run) -> None:
    rows = read_parquet(job, "top_clients")  # --top 2
    ranked = [(r["virtual_cluster"], r["rank"], r["principal"], r["client_id"]) for r in rows]
    assert ranked == [
        ("(physical)", 1, "User:admin", "admin-cli"),
        ("team-a", 1, "User:bob", "orders-consumer"),  # 125 KiB fetched beats 105 KiB produced
        ("team-a", 2, "User:alice", "orders-producer"),
        ("team-b", 1, "User:carol", "analytics"),
        ("team-b", 2, "User:dave", "analytics"),
    ]
    bob = rows[1]
    assert (bob["requests"], bob["errors"], bob["bytes_total"]) == (64, 1, 50 * 2080 + 10 * 1091 + 4 * 180)
    assert (rows[2]["instances"], bob["instances"], rows[2]["addresses"], rows[2]["apis"]) == (1, 0, 3, 2)
    assert (rows[2]["requests"], rows[2]["bytes_produced"]) == (110, 90_000)


# ---------------------------------------------------------------- files and report


@pytest.mark.parametrize("table", [*TABLES, BAD_LINES_TABLE])
def test_csv_and_parquet_agree(job: Run, table: str) -> None:
    csv_rows = read_csv(job, table)
    pq_rows = read_parquet(job, table)
    assert csv_rows and len(csv_rows) == len(pq_rows)
    assert list(csv_rows[0]) == list(pq_rows[0])  # same columns, same order (the CSV has a header)

    def norm(v: Any) -> str:
        if v is None:
            return ""
        if hasattr(v, "timestamp"):  # UTC, milliseconds only when there are some
            ms = v.microsecond // 1000
            return v.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms:03d}" if ms else "") + "Z"
        if isinstance(v, float):
            return repr(round(v, 9))
        return str(v)

    def norm_csv(k: str, v: str) -> str:
        sample = pq_rows[0][k]
        if isinstance(sample, float) and v != "":
            return repr(round(float(v), 9))
        return v

    assert [{k: norm_csv(k, v) for k, v in r.items()} for r in csv_rows] == [
        {k: norm(v) for k, v in r.items()} for r in pq_rows
    ]


def test_output_layout(job: Run) -> None:
    tables = {*TABLES, BAD_LINES_TABLE}
    want = tables | {f"{t}.csv" for t in tables} | {"report.html"}
    assert {p.name for p in job.out.iterdir()} == want
    for t in tables:  # one Parquet file per table
        assert len(list((job.out / t).glob("part-*.parquet"))) == 1


def test_report_html(job: Run) -> None:
    page = (job.out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for vc in ("team-a", "team-b", "(physical)"):
        assert f">{vc}" in page
    for text in ("Requests per second", "Bytes per second", "Top clients", "Topics (showback)", "By API"):
        assert text in page
    assert page.count("<svg") >= 10  # overview charts plus per-tenant charts
    assert "User:alice" in page and "orders-consumer" in page and "clicks" in page
    assert "Bad input lines: 4" in page
    assert "10 ms" in page and "200 ms" in page  # alice's p50 and p99


def test_report_escapes_names() -> None:
    evil = '<img src=x onerror="alert(1)">'
    rows = {
        "vc_summary": [
            {
                "virtual_cluster": evil,
                "virtual_cluster_id": "x&y",
                "requests": 1,
                "errors": 0,
                "error_rate": 0.0,
                "bytes_in": 1,
                "bytes_out": 2,
                "bytes_produced": 0,
                "bytes_fetched": 0,
                "latency_p50_ms": 1.0,
                "latency_p95_ms": 1.0,
                "latency_p99_ms": 1.0,
                "principals": 1,
                "client_ids": 1,
                "first_seen": T0,
                "last_seen": T0 + 1,
            }
        ],
        "per_minute": [
            {
                "virtual_cluster": evil,
                "minute": T0,
                "requests_per_sec": 1 / 60,
                "errors_per_sec": 0.0,
                "bytes_in_per_sec": 1 / 60,
                "bytes_out_per_sec": 2 / 60,
                "latency_p99_ms": 1.0,
            }
        ],
        "top_clients": [
            {
                "virtual_cluster": evil,
                "rank": 1,
                "principal": "User:<i>x</i>",
                "client_id": "c",
                "bytes_in": 1,
                "bytes_out": 2,
                "requests": 1,
                "errors": 0,
                "error_rate": 0.0,
            }
        ],
    }
    page = report.render({"input": "<in>", "spans": 1, "files": 1, "lines": 1, "bad_lines": 0}, rows)
    assert "<img" not in page and "<i>" not in page and "<in>" not in page
    assert "User:&lt;i&gt;x&lt;/i&gt;" in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


# ---------------------------------------------------------------- clear errors (exit 2)


def test_missing_input_dir_exits_2(tmp_path: Path) -> None:
    proc = run_cli("--input", str(tmp_path / "nope"), "--output", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "error: input directory" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_span_files_exits_2(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("hello\n")
    proc = run_cli("--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "error: no span files in" in proc.stderr and "*.jsonl" in proc.stderr


def test_only_bad_lines_exits_2(job: Run) -> None:
    proc = job.only_bad
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "error: no valid spans in 5 line(s) in 2 file(s): all 4 non-blank line(s) are bad" in proc.stderr
    assert "traces.jsonl:1: not valid JSON" in proc.stderr
    assert "traces.jsonl:2: expected a JSON object" in proc.stderr
    assert "Traceback" not in proc.stderr
