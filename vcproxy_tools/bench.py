"""`vcproxy bench`: Kafka's own perf tools run directly against a broker and through the proxy.

One broker (started here unless ``--bootstrap`` is given) and, in front of it, one proxy process per
proxied variant: ``proxy`` (tracing off, the default configuration) and ``proxy-traced`` (tracing on,
sample ratio 1.0, JSON Lines exporter), or ``proxy-traced-R`` (ratio R). Per round, the same suite runs
once per variant (``direct`` included), the order rotating from round to round. The suite is: producer
perf (acks=all, unthrottled), consumer perf reading back exactly those records, a fixed-rate producer run
(for produce latency that is not just queueing in the producer's buffer), and the end-to-end latency
tool. The proxies' CPU time is read from /proc around each tool run. Parsing and reporting live in
``bench_results``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vcproxy_tools.bench_results import (
    DEFAULT_VARIANTS,
    DIRECT,
    MIB,
    PROXY,
    ParseError,
    Variant,
    count_spans,
    cpu_seconds_per_gb,
    format_variant_table,
    format_verdicts,
    mode_order,
    parse_consumer_perf,
    parse_e2e_latency,
    parse_proc_stat_times,
    parse_proc_status_kib,
    parse_producer_perf,
    parse_system_busy_ticks,
    parse_variants,
    rows_from_doc,
    summarize_variants,
    summary_json,
    verdicts,
)

TOOL_TIMEOUT = 1800.0
TOPIC_PARTITIONS = 6
QUICK = {"records": 20_000, "latency_records": 300, "rounds": 1}
PROXY_PORT_STEP = 10  # proxied variant i listens on --proxy-port + 10 i (its broker N on +1+N)

# What bin/kafka-run-class.sh gives a perf tool (kafka-*-perf-test.sh set -Xmx512M). The launcher's
# default tool flags (C1 only, serial GC) suit short admin calls, but would cap the client here.
PERF_JVM_FLAGS = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35"]
FAST_START_FLAGS = {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}
PERF_HEAP = "512m"


class BenchError(RuntimeError):
    """Something broke (a tool failed, the proxy died): the figures would be meaningless."""


@dataclass(frozen=True)
class Options:
    dir: Path
    rounds: int
    records: int
    record_size: int
    latency_records: int
    latency_rate: int
    bootstrap: str | None
    base_port: int
    proxy_port: int
    output: Path | None
    quick: bool
    variants: tuple[Variant, ...] = (Variant(DIRECT), Variant(PROXY))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark the proxy against direct access with Kafka's perf tools",
        description="Run Kafka's producer/consumer/e2e perf tools directly and through the proxy (tracing off "
        "and on), in rotating order.",
    )
    p.add_argument("--dir", type=Path, default=Path(".vcproxy/bench"), help="work dir (default: .vcproxy/bench)")
    p.add_argument("--rounds", type=int, default=None, help="rounds; each runs every variant once (default 3)")
    p.add_argument(
        "--variants",
        default=DEFAULT_VARIANTS,
        help=f"comma-separated, from direct, proxy (tracing off), proxy-traced (tracing on, sample ratio 1.0), "
        f"proxy-traced-RATIO (e.g. proxy-traced-0.1), proxy-metrics (metrics on); default {DEFAULT_VARIANTS}",
    )
    p.add_argument("--records", type=int, default=None, help="producer/consumer records per run (default 500000)")
    p.add_argument("--record-size", type=int, default=1024, help="record size in bytes (default 1024)")
    p.add_argument("--latency-records", type=int, default=None, help="records for the latency runs (default 5000)")
    p.add_argument(
        "--latency-rate", type=int, default=1000, help="records/s of the fixed-rate produce latency run (default 1000)"
    )
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="use this cluster instead of starting one")
    p.add_argument("--base-port", type=int, default=19500, help="first port of the bench's own cluster")
    p.add_argument(
        "--proxy-port",
        type=int,
        default=19600,
        help=f"bootstrap port of the first proxy (broker N on +1+N); the next proxies at +{PROXY_PORT_STEP} each "
        f"(a metrics port at +{PROXY_PORT_STEP - 1})",
    )
    p.add_argument("--output", type=Path, help="also write the results as JSON to this file")
    p.add_argument(
        "--report", type=Path, metavar="JSON", help="run nothing: print the table of a results file (--output)"
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test")
    p.set_defaults(func=_main)


def _options(args: argparse.Namespace) -> Options:
    quick = QUICK if args.quick else {}

    def pick(name: str, default: int) -> int:
        value = getattr(args, name)
        value = value if value is not None else quick.get(name, default)
        if value < 1:
            raise SystemExit(f"vcproxy bench: --{name.replace('_', '-')} must be at least 1")
        return value

    try:
        variants = parse_variants(args.variants)
    except ValueError as exc:
        raise SystemExit(f"vcproxy bench: --variants: {exc}") from None
    return Options(
        dir=args.dir.expanduser().resolve(),
        rounds=pick("rounds", 3),
        records=pick("records", 500_000),
        record_size=pick("record_size", 1024),
        latency_records=pick("latency_records", 5000),
        latency_rate=pick("latency_rate", 1000),
        bootstrap=args.bootstrap,
        base_port=args.base_port,
        proxy_port=args.proxy_port,
        output=args.output,
        quick=args.quick,
        variants=variants,
    )


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# Processes


def perf_tool_argv(name: str, args: Sequence[str]) -> list[str]:
    from vcproxy_tools.kafka.tools import tool_argv

    argv = [a for a in tool_argv(name, args, heap=PERF_HEAP) if a not in FAST_START_FLAGS]
    return [argv[0], *PERF_JVM_FLAGS, *argv[1:]]


class CpuProbe:
    """Cumulative CPU seconds (user + system) of one process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def times(self) -> tuple[float, float]:
        """(user, system) CPU seconds so far."""
        try:
            user, system = parse_proc_stat_times(Path(f"/proc/{self.pid}/stat").read_text())
        except (OSError, ParseError) as exc:
            raise BenchError(f"cannot read CPU time of pid {self.pid}: {exc}") from None
        return user / self.tick, system / self.tick

    def seconds(self) -> float:
        return sum(self.times())

    def peak_rss_kib(self) -> int | None:
        with contextlib.suppress(OSError):
            return parse_proc_status_kib(Path(f"/proc/{self.pid}/status").read_text(), "VmHWM")
        return None


class Bench:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.logs = opts.dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.prefix = f"vcbench-{int(time.time()):x}"
        self.proxies: dict[str, Any] = {}  # variant -> ProxyProcess
        self.proxy_cpu: dict[str, CpuProbe] = {}
        self.trace_dirs: dict[str, Path] = {}
        self.broker_cpu: CpuProbe | None = None
        self.direct_bootstrap = ""

    # -- tools ---------------------------------------------------------------------------------------

    def tool(self, label: str, name: str, args: Sequence[str], perf: bool = True) -> str:
        """Run a Kafka tool, keep its output under DIR/logs, and return its stdout; fail loudly."""
        from vcproxy_tools.kafka.tools import tool_argv

        argv = perf_tool_argv(name, args) if perf else tool_argv(name, args)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TOOL_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            raise BenchError(f"{label}: {name} did not finish within {TOOL_TIMEOUT:.0f}s") from None
        elapsed = time.monotonic() - t0
        log = self.logs / f"{label}.log"
        log.write_text(
            f"$ {' '.join(argv)}\n# exit {proc.returncode} after {elapsed:.1f}s\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}\n"
        )
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise BenchError(f"{label}: {name} exited with {proc.returncode} (full output in {log}):\n{tail}")
        self.check_proxy(label)
        return proc.stdout

    def check_proxy(self, label: str) -> None:
        for name, proxy in self.proxies.items():
            if proxy.proc.poll() is not None:
                raise BenchError(
                    f"{label}: the {name} proxy exited with {proxy.proc.returncode}; log {proxy.log_path}:\n"
                    f"{proxy.log_tail()}"
                )

    def bootstrap(self, variant: str) -> str:
        return self.direct_bootstrap if variant == DIRECT else self.proxies[variant].bootstrap

    def create_topics(self, topics: Sequence[tuple[str, int]]) -> None:
        """Create topics directly on the broker, a few JVMs at a time (each costs seconds to start)."""
        from vcproxy_tools.kafka.tools import tool_argv

        pending = list(topics)
        while pending:
            batch, pending = pending[:4], pending[4:]
            procs = [
                (
                    topic,
                    subprocess.Popen(
                        tool_argv(
                            "kafka-topics",
                            [
                                "--bootstrap-server",
                                self.direct_bootstrap,
                                "--create",
                                "--topic",
                                topic,
                                "--partitions",
                                str(partitions),
                                "--replication-factor",
                                "1",
                            ],
                        ),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                    ),
                )
                for topic, partitions in batch
            ]
            for topic, proc in procs:
                out, _ = proc.communicate(timeout=300)
                if proc.returncode != 0:
                    raise BenchError(f"creating topic {topic} failed:\n{out.strip()[-2000:]}")

    def delete_topics(self) -> None:
        with contextlib.suppress(Exception):
            self.tool(
                "cleanup-delete-topics",
                "kafka-topics",
                ["--bootstrap-server", self.direct_bootstrap, "--delete", "--topic", f"{self.prefix}-.*"],
                perf=False,
            )

    # -- measurements -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def cpu(self, variant: str) -> Iterator[dict[str, float]]:
        """CPU seconds spent inside the block by the variant's proxy (``proxy``), all proxies
        (``proxies``), the broker (if ours), the tool (our child processes) and the whole machine, plus
        the wall time; ``<who>_kernel`` is the system part."""
        probes = {f"proxy:{v}": p for v, p in self.proxy_cpu.items()}
        if self.broker_cpu is not None:
            probes["broker"] = self.broker_cpu
        start = {k: p.times() for k, p in probes.items()}
        children0 = _children_cpu()
        system0 = _system_cpu()
        t0 = time.monotonic()
        used: dict[str, float] = {}
        yield used
        used["wall"] = time.monotonic() - t0
        used["system"] = _system_cpu() - system0
        used["tool"] = _children_cpu() - children0
        for k, probe in probes.items():
            (user0, sys0), (user1, sys1) = start[k], probe.times()
            used[k] = (user1 - user0) + (sys1 - sys0)
            used[f"{k}_kernel"] = sys1 - sys0
        used["proxies"] = sum(used[f"proxy:{v}"] for v in self.proxy_cpu)
        if f"proxy:{variant}" in used:
            used["proxy"] = used[f"proxy:{variant}"]
            used["proxy_kernel"] = used[f"proxy:{variant}_kernel"]

    def suite(self, round_no: int, mode: str, topic: str, e2e_topic: str) -> dict[str, float]:
        o = self.opts
        bootstrap = self.bootstrap(mode)
        tag = f"r{round_no}-{mode}"
        res: dict[str, float] = {}

        with self.cpu(mode) as used:
            out = self.tool(
                f"{tag}-producer",
                "kafka-producer-perf-test",
                [
                    *("--bootstrap-server", bootstrap, "--topic", topic),
                    *("--num-records", str(o.records), "--record-size", str(o.record_size)),
                    *("--throughput", "-1", "--command-property", "acks=all"),
                ],
            )
        p = parse_producer_perf(out)
        if p.records != o.records:
            raise BenchError(f"{tag}: producer sent {p.records} records, expected {o.records}")
        res |= {
            "producer_mb_s": p.mb_per_sec,
            "producer_rec_s": p.records_per_sec,
            "producer_avg_ms": p.avg_ms,
            "producer_p99_ms": p.p99_ms,
        }
        self._cpu_metrics(res, used, mode, "produce", p.records * o.record_size, p.records / p.records_per_sec)
        _say(f"  {tag} producer: {p.mb_per_sec:.1f} MB/s, {p.records_per_sec:,.0f} rec/s, p99 {p.p99_ms:g} ms")

        with self.cpu(mode) as used:
            out = self.tool(
                f"{tag}-consumer",
                "kafka-consumer-perf-test",
                [
                    *("--bootstrap-server", bootstrap, "--topic", topic),
                    *("--num-records", str(o.records), "--group", f"{self.prefix}-{tag}", "--timeout", "30000"),
                ],
            )
        c = parse_consumer_perf(out)
        if c.records < o.records:
            raise BenchError(f"{tag}: consumer read {c.records} records, expected {o.records}")
        res |= {
            "consumer_mb_s": c.fetch_mb_per_sec,
            "consumer_rec_s": c.fetch_records_per_sec,
            "consumer_total_mb_s": c.mb_per_sec,
        }
        self._cpu_metrics(res, used, mode, "consume", c.bytes, c.fetch_ms / 1000)
        _say(f"  {tag} consumer: {c.fetch_mb_per_sec:.1f} MB/s, {c.fetch_records_per_sec:,.0f} rec/s")

        # Unthrottled, acks=all latency is mostly time spent queued in the producer's buffer; at a
        # fixed, modest rate it is the request round trip, which is what the proxy adds to. The
        # first second (JVM warm-up, metadata) would otherwise own the p99, hence --warmup-records.
        warmup = max(100, o.latency_records // 5)
        out = self.tool(
            f"{tag}-fixed-rate-producer",
            "kafka-producer-perf-test",
            [
                *("--bootstrap-server", bootstrap, "--topic", topic),
                *("--num-records", str(o.latency_records + warmup), "--warmup-records", str(warmup)),
                *("--record-size", str(o.record_size), "--throughput", str(o.latency_rate)),
                *("--command-property", "acks=all"),
            ],
        )
        f = parse_producer_perf(out)
        if not f.steady_state:
            raise BenchError(f"{tag}: fixed-rate producer printed no steady-state summary")
        res |= {"fixed_avg_ms": f.avg_ms, "fixed_p50_ms": f.p50_ms, "fixed_p99_ms": f.p99_ms}
        _say(f"  {tag} fixed-rate producer: avg {f.avg_ms:g} ms, p50 {f.p50_ms:g} ms, p99 {f.p99_ms:g} ms")

        out = self.tool(
            f"{tag}-e2e",
            "kafka-e2e-latency",
            [
                *("--bootstrap-server", bootstrap, "--topic", e2e_topic),
                *("--num-records", str(o.latency_records), "--producer-acks", "all"),
                *("--record-size", str(o.record_size)),
            ],
        )
        e = parse_e2e_latency(out)
        res |= {"e2e_avg_ms": e.avg_ms, "e2e_p99_ms": e.p99_ms}
        _say(f"  {tag} e2e: avg {e.avg_ms:g} ms, p99 {e.p99_ms:g} ms")
        return res

    @staticmethod
    def _cpu_metrics(
        res: dict[str, float], used: dict[str, float], mode: str, what: str, nbytes: int, seconds: float
    ) -> None:
        """``seconds`` is the tool's own measurement window (JVM start and group join excluded)."""
        # Whole tool run, JVM start included: a little below the load while data flows.
        res[f"machine_cores_{what}"] = used["system"] / used["wall"]
        if "broker" in used:
            res[f"broker_cpu_s_per_gb_{what}"] = cpu_seconds_per_gb(used["broker"], nbytes)
            ours = used["broker"] + used["proxies"] + used["tool"]
            res[f"background_cores_{what}"] = max(0.0, used["system"] - ours) / used["wall"]
        if mode != DIRECT:
            res[f"proxy_cpu_s_per_gb_{what}"] = cpu_seconds_per_gb(used["proxy"], nbytes)
            if seconds > 0:
                res[f"proxy_core_util_{what}"] = 100 * used["proxy"] / seconds
            if used["proxy"] > 0:
                res[f"proxy_kernel_pct_{what}"] = 100 * used["proxy_kernel"] / used["proxy"]

    def warm_up(self, topics: dict[str, str]) -> None:
        """One unmeasured produce+consume per variant: JIT and page cache warm-up for the broker and the proxies."""
        # A full-size run: the broker JIT needs that long (a tenth was not enough; round 1 ran slow).
        n = self.opts.records
        for mode, topic in topics.items():
            bootstrap = self.bootstrap(mode)
            self.tool(
                f"warmup-{mode}-producer",
                "kafka-producer-perf-test",
                [
                    *("--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(n)),
                    *("--record-size", str(self.opts.record_size), "--throughput", "-1"),
                    *("--command-property", "acks=all"),
                ],
            )
            self.tool(
                f"warmup-{mode}-consumer",
                "kafka-consumer-perf-test",
                [
                    *("--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(n)),
                    *("--group", f"{self.prefix}-warmup-{mode}", "--timeout", "30000"),
                ],
            )

    # -- the whole thing ----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from vcproxy_tools.kafka.cluster import start_cluster
        from vcproxy_tools.kafka.dist import DEFAULT_KAFKA_VERSION
        from vcproxy_tools.process import ProxyProcess, proxy_config

        o = self.opts
        load_start = _loadavg()
        if load_start > (os.cpu_count() or 1):
            _say(f"warning: load average {load_start:.1f} on {os.cpu_count()} CPUs: other work will skew the figures")
        if o.bootstrap:
            self.direct_bootstrap = o.bootstrap
        else:
            cluster_dir = o.dir / "cluster"
            self._stop_stale_cluster(cluster_dir)
            _say(f"starting a 1-broker Kafka {DEFAULT_KAFKA_VERSION} cluster in {cluster_dir} ...")
            info = start_cluster(cluster_dir, brokers=1, base_port=o.base_port)
            self.direct_bootstrap = info.bootstrap
            self.broker_cpu = self._broker_probe(cluster_dir)

        _say(f"direct {self.direct_bootstrap}")
        proxied = [v for v in o.variants if v.proxied]
        for i, v in enumerate(proxied):
            sections: dict[str, Any] = {}
            port = o.proxy_port + PROXY_PORT_STEP * i
            if v.sample_ratio is not None:
                self.trace_dirs[v.name] = Path(tempfile.mkdtemp(prefix=f"traces-{v.name}-", dir=o.dir))
                sections["tracing"] = tracing_section(v, self.trace_dirs[v.name])
            if v.metrics:
                sections["metrics"] = {"enabled": True, "port": port + PROXY_PORT_STEP - 1}
            config = proxy_config(self.direct_bootstrap, port, **sections)
            proxy = self.proxies[v.name] = ProxyProcess(config, o.dir / "proxy", name=v.name)
            proxy.start()
            self.proxy_cpu[v.name] = CpuProbe(proxy.pid)
            tracing = f"tracing on, sample ratio {v.sample_ratio:g}" if v.sample_ratio is not None else "tracing off"
            metrics = f", metrics on :{sections['metrics']['port']}" if v.metrics else ""
            _say(f"{v.name}: {proxy.bootstrap} (pid {proxy.pid}, {tracing}{metrics})")

        names = [v.name for v in o.variants]
        plan = [(r, m) for r in range(1, o.rounds + 1) for m in mode_order(r, names)]
        warm = {m: f"{self.prefix}-warmup-{m}" for m in names}
        topics = {(r, m): f"{self.prefix}-r{r}-{m}" for r, m in plan}
        e2e = {(r, m): f"{self.prefix}-e2e-r{r}-{m}" for r, m in plan}
        _say(f"creating {2 * len(plan) + len(warm)} topics ...")
        self.create_topics(
            [(t, TOPIC_PARTITIONS) for t in [*warm.values(), *topics.values()]]
            # one partition, as the e2e tool would create for itself
            + [(t, 1) for t in e2e.values()]
        )
        _say("warm-up ...")
        self.warm_up(warm)

        runs: list[dict[str, Any]] = []
        for r, m in plan:
            _say(f"round {r}/{o.rounds}, {m}:")
            runs.append({"round": r, "mode": m, **self.suite(r, m, topics[r, m], e2e[r, m])})

        rows = summarize_variants(runs, names)
        peaks = {v: p.peak_rss_kib() for v, p in self.proxy_cpu.items()}
        self.stop_proxies()  # a drain flushes the span exporters
        return {
            "variants": names,
            "rows": rows,
            "verdicts": verdicts([r.pair() for r in rows]) if {DIRECT, PROXY} <= set(names) else [],
            "runs": runs,
            "proxy_peak_rss_kib": peaks.get(PROXY),
            "proxy_peak_rss_kib_by_variant": peaks,
            "tracing": {
                v.name: {"sample_ratio": v.sample_ratio, **trace_output(self.trace_dirs[v.name])}
                for v in proxied
                if v.name in self.trace_dirs
            },
            "kafka_version": DEFAULT_KAFKA_VERSION,
            "load_average": [load_start, _loadavg()],
        }

    def stop_proxies(self) -> None:
        while self.proxies:
            _, proxy = self.proxies.popitem()
            proxy.stop()

    def _stop_stale_cluster(self, cluster_dir: Path) -> None:
        """A bench killed hard may leave its own cluster running in its own dir; stop that one only."""
        from vcproxy_tools.kafka.cluster import stop_cluster

        if (cluster_dir / "cluster.json").exists():
            with contextlib.suppress(Exception):
                stop_cluster(cluster_dir)

    @staticmethod
    def _broker_probe(cluster_dir: Path) -> CpuProbe | None:
        with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
            state = json.loads((cluster_dir / "cluster.json").read_text())
            return CpuProbe(int(state["nodes"][0]["pid"]))
        return None

    def close(self) -> None:
        try:
            self.stop_proxies()
        finally:
            for d in self.trace_dirs.values():
                shutil.rmtree(d, ignore_errors=True)
            self._close_cluster()

    def _close_cluster(self) -> None:
        if self.opts.bootstrap:
            if self.direct_bootstrap:
                self.delete_topics()
        else:
            from vcproxy_tools.kafka.cluster import stop_cluster

            cluster_dir = self.opts.dir / "cluster"
            if (cluster_dir / "cluster.json").exists():
                stop_cluster(cluster_dir)
                # The records are gigabytes and worthless now; the broker log stays for inspection.
                for data in cluster_dir.glob("n*/data"):
                    shutil.rmtree(data, ignore_errors=True)


def tracing_section(variant: Variant, jsonl_dir: Path) -> dict[str, Any]:
    """The proxy's ``tracing`` section for a traced variant: JSON Lines only, and files large and many
    enough that rotation never deletes spans before they are counted."""
    return {
        "enabled": True,
        "sample_ratio": variant.sample_ratio,
        "jsonl_dir": str(jsonl_dir),
        "jsonl_max_bytes": 256 * 1024 * 1024,
        "jsonl_keep": 1000,
    }


def trace_output(jsonl_dir: Path) -> dict[str, int]:
    """Spans and bytes the exporter wrote (read after the proxy drained)."""
    files = sorted(jsonl_dir.glob("traces.jsonl*"))
    spans = 0
    for f in files:
        with f.open(encoding="utf-8", errors="replace") as fh:
            spans += sum(count_spans(line) for line in fh)
    return {"spans": spans, "bytes": sum(f.stat().st_size for f in files), "files": len(files)}


def _loadavg() -> float:
    return os.getloadavg()[0]


def _children_cpu() -> float:
    """CPU seconds of our waited-for child processes (the tools; the proxy and broker still run)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _system_cpu() -> float:
    try:
        return parse_system_busy_ticks(Path("/proc/stat").read_text()) / os.sysconf("SC_CLK_TCK")
    except (OSError, ParseError) as exc:
        raise BenchError(f"cannot read /proc/stat: {exc}") from None


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _report(opts: Options, result: dict[str, Any], seconds: float) -> str:
    o = opts
    names = result["variants"]
    lines = [
        f"vcproxy bench: {o.rounds} round(s) of {', '.join(names)}; {o.records:,} x {o.record_size} B records per "
        f"producer/consumer run, {o.latency_records:,} latency records (fixed rate {o.latency_rate}/s), "
        f"Kafka {result['kafka_version']}, {os.cpu_count()} CPUs, {seconds / 60:.1f} min",
        "",
        format_variant_table(result["rows"], names),
        "",
    ]
    if result["verdicts"]:
        lines += [format_verdicts(result["verdicts"]), ""]
    for v, peak in result["proxy_peak_rss_kib_by_variant"].items():
        if peak is not None:
            lines.append(f"{v} peak RSS: {peak / 1024:.0f} MiB")
    for v, t in result["tracing"].items():
        lines.append(f"{v} exported {t['spans']:,} spans, {t['bytes'] / MIB:.1f} MiB of JSON Lines")
    start, end = result["load_average"]
    lines.append(f"1-min load average: {start:.2f} at start, {end:.2f} at end")
    return "\n".join(lines)


def report_file(path: Path) -> str:
    """The table of a results JSON written by ``--output`` (also by versions without variants)."""
    doc = json.loads(path.read_text())
    names, rows = rows_from_doc(doc)
    parts = [format_variant_table(rows, names)]
    if {DIRECT, PROXY} <= set(names):
        parts.append(format_verdicts(verdicts([r.pair() for r in rows])))
    return "\n\n".join(parts)


def _main(args: argparse.Namespace) -> int:
    if args.report is not None:
        try:
            print(report_file(args.report))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # ParseError and JSON errors are ValueErrors
            _say(f"vcproxy bench: {args.report}: {exc}")
            return 1
        return 0
    opts = _options(args)
    bench = Bench(opts)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    t0 = time.monotonic()
    try:
        result = bench.run()
    except KeyboardInterrupt:
        _say("vcproxy bench: interrupted; stopping everything")
        return 130
    except (BenchError, ParseError) as exc:
        _say(f"vcproxy bench: {exc}")
        return 1
    except Exception as exc:  # the cluster or the proxy failed to start: still clean up, then report
        _say(f"vcproxy bench: {type(exc).__name__}: {exc}")
        return 1
    finally:
        try:
            bench.close()
        finally:
            signal.signal(signal.SIGTERM, previous)
    elapsed = time.monotonic() - t0
    print(_report(opts, result, elapsed))
    if opts.output is not None:
        opts.output.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "command": sys.argv,
            "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items() if k != "variants"},
            "variants": [asdict(v) for v in opts.variants],
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "kafka_version": result["kafka_version"],
            "seconds": round(elapsed, 1),
            "proxy_peak_rss_kib": result["proxy_peak_rss_kib"],
            "proxy_peak_rss_kib_by_variant": result["proxy_peak_rss_kib_by_variant"],
            "tracing": result["tracing"],
            "load_average": result["load_average"],
            "summary": summary_json(result["rows"]),
            "verdicts": [asdict(v) for v in result["verdicts"]],
            "runs": result["runs"],
        }
        opts.output.write_text(json.dumps(doc, indent=2) + "\n")
    return 0
