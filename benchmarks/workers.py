"""Small-request throughput of one proxy instance with N workers (`vcproxy serve --workers N`), the proxy
being the bottleneck.

On a 2-core machine the broker and the clients need CPU too, so "every core" cannot be shown by giving
the proxy whole cores. Instead each worker gets the same share of a core, `--share`, in one of two ways:
- `--limit cgroup`: each worker in a cgroup (v1, `cpu`) of its own whose CFS quota is that share of every
  `--period-ms`, so it runs whenever it has CPU time left in the period (needs root and a writable
  /sys/fs/cgroup/cpu);
- `--limit windows`: as `cpulimit` gives one, a thread of this script lets each worker run `--share` of every
  `--period-ms` of wall time and holds it stopped (SIGSTOP, SIGCONT) for the rest, the workers' windows staggered.
  A request that arrives in a stopped window waits for the next, so a worker may be bound by its windows before
  its CPU.
A worker then uses at most that share of a core, and the proxy is the bottleneck at any N whose shares leave the
rest of the machine to the broker and the clients: throughput with N workers against one worker is the scaling.
`--share 0` runs unthrottled (then the machine, not the proxy, is the limit).

The load: `--producers` librdkafka producers over `--processes` client processes, each sending ~3.3 KB
records one per Produce request (`batch.num.messages=1`, `linger.ms=0`, `acks=1`, up to `--depth` in
flight), as fast as the proxy lets them for `--seconds`, to a 1-partition topic; deliveries counted.
`--workers 1` is the proxy as one process (no parent), the
baseline. Rounds rotate the worker counts, so the machine's load hits all alike; medians reported, with the
proxy's CPU (the parent's and every worker's utime+stime) per request and each worker's share of it.

Run (a 1-broker cluster from `vcproxy kafka start --dir D --brokers 1 --base-port 29092`):
    PYTHONPATH=. .venv/bin/python benchmarks/workers.py --bootstrap 127.0.0.1:29092 --workers 1,2,3 \\
        --share 0.25 --rounds 3 --seconds 10
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from vcproxy_tools.process import children_of, wait_ready

CLIENT_ID = "vcbench"
TOPIC = "workersbench"
RECORD = b"x" * 3300
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start(work: Path, workers: int, port: int, upstream: str, tenancy: bool) -> subprocess.Popen[bytes]:
    cfg: dict[str, object] = {
        "listeners": {"host": "127.0.0.1", "bootstrap_port": port, "broker_port_base": port},
        "upstream": {"bootstrap_servers": [upstream]},
        "logging": {"level": "WARNING"},
    }
    if tenancy:
        cfg["tenancy"] = {"enabled": True, "virtual_clusters": [{"name": "bench", "client_ids": [CLIENT_ID]}]}
    path = work / f"workers-{workers}.json"
    path.write_text(json.dumps(cfg))
    log = work / f"workers-{workers}.log"
    argv = [sys.executable, "-m", "proxy", "serve", "--config", str(path), "--workers", str(workers)]
    argv += ["--log-level", "INFO"]
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    wait_ready(proc, log, 300, f"{workers} workers")
    return proc


class Throttle(threading.Thread):
    """Each pid runs `share` of every `period` seconds, stopped the rest; windows staggered by pid."""

    def __init__(self, pids: list[int], share: float, period: float):
        super().__init__(daemon=True)
        self.pids, self.share, self.period = pids, share, period
        self.stopping = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        running = dict.fromkeys(self.pids, True)
        while not self.stopping.is_set():
            now = time.monotonic() - start
            wake = math.inf
            for i, pid in enumerate(self.pids):
                cycles = now / self.period + i / len(self.pids)
                phase = cycles % 1.0
                should = phase < self.share
                if should != running[pid]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT if should else signal.SIGSTOP)
                    running[pid] = should
                # this pid's next edge: the end of its window, or the start of the next one
                edge = (math.floor(cycles) + (self.share if phase < self.share else 1.0)) - i / len(self.pids)
                wake = min(wake, edge * self.period)
            time.sleep(max(0.0, wake - (time.monotonic() - start)))  # from one edge to the next, no polling
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)


CGROUP_CPU = Path("/sys/fs/cgroup/cpu")


class CpuQuota:
    """Each pid (every thread of it) in a cgroup of its own whose CFS quota is `share` of every `period` seconds."""

    def __init__(self, pids: list[int], share: float, period: float):
        self.groups: list[Path] = []
        for pid in pids:
            group = CGROUP_CPU / f"vcbench-workers-{pid}"
            group.mkdir(exist_ok=True)
            self.groups.append(group)
            (group / "cpu.cfs_period_us").write_text(str(round(period * 1e6)))
            (group / "cpu.cfs_quota_us").write_text(str(round(share * period * 1e6)))
            (group / "cgroup.procs").write_text(str(pid))

    def throttled(self) -> list[float]:
        """The share of periods each group was throttled in so far."""
        out = []
        for group in self.groups:
            stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines())
            out.append(int(stat["nr_throttled"]) / max(1, int(stat["nr_periods"])))
        return out

    def stop(self) -> None:
        for group in self.groups:
            with contextlib.suppress(OSError):  # its processes have ended or moved back
                for pid in (group / "cgroup.procs").read_text().split():
                    (CGROUP_CPU / "cgroup.procs").write_text(pid)
                group.rmdir()


def produce(bootstrap: str, producers: int, depth: int, seconds: float, start_at: float, out: object) -> None:
    """One client process: `producers` producers, as fast as they may, from `start_at` for `seconds`."""
    conf = {
        "bootstrap.servers": bootstrap,
        "client.id": CLIENT_ID,
        "linger.ms": 0,
        "batch.num.messages": 1,
        "acks": 1,
        "compression.type": "none",
        "enable.idempotence": False,
        "max.in.flight.requests.per.connection": depth,
        "queue.buffering.max.messages": depth * 4,
    }
    ps = [Producer(conf) for _ in range(producers)]
    for p in ps:  # connected and knowing the leader before anything is counted
        p.produce(TOPIC, RECORD)
        p.flush(60)
    done = [0]

    def delivered(err: object, _msg: object) -> None:
        if err is None:
            done[0] += 1

    while time.monotonic() < start_at:
        time.sleep(0.01)
    end = start_at + seconds
    while time.monotonic() < end:
        for p in ps:
            with contextlib.suppress(BufferError):  # full: its deliveries first
                p.produce(TOPIC, RECORD, on_delivery=delivered)
            p.poll(0)
        if all(len(p) >= depth * 4 for p in ps):
            ps[0].poll(0.001)
    counted = done[0]
    for p in ps:
        p.flush(60)
    out.put(counted)  # type: ignore[attr-defined]


def run(bootstrap: str, args: argparse.Namespace, pids: list[int]) -> tuple[float, dict[int, float]]:
    """Requests per second over the measured window, and each pid's CPU seconds within it."""
    queue: multiprocessing.Queue[int] = multiprocessing.Queue()
    start_at = time.monotonic() + 8  # every client connected first
    each = max(1, args.producers // args.processes)
    procs = [
        multiprocessing.Process(target=produce, args=(bootstrap, each, args.depth, args.seconds, start_at, queue))
        for _ in range(args.processes)
    ]
    for p in procs:
        p.start()
    time.sleep(max(0.0, start_at - time.monotonic()))
    before = {pid: cpu_seconds(pid) for pid in pids}
    time.sleep(max(0.0, start_at + args.seconds - time.monotonic()))
    spent = {pid: cpu_seconds(pid) - cpu for pid, cpu in before.items()}
    counts = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    return sum(counts) / args.seconds, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--workers", default="1,2,3")
    parser.add_argument("--share", type=float, default=0.25, help="of the wall time each worker runs (0: all)")
    # Not a multiple of the kernel's 10 ms tick: CPU time is charged by ticks, and windows in step with them
    # would be charged all or nothing (measured: 0.38 and 0.21 core for two windows of 0.25 at 10 ms).
    parser.add_argument("--period-ms", type=float, default=23.7, help="the throttle's period")
    parser.add_argument("--limit", choices=("cgroup", "windows"), default="cgroup", help="how a share is held")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--producers", type=int, default=48)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--port", type=int, default=24600)
    parser.add_argument("--tenancy", action="store_true", help="a VC bound by client id (else passthrough)")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    if args.limit == "cgroup" and 0 < args.share * args.period_ms < 1:
        parser.error("a CFS quota is at least 1 ms: --share times --period-ms must be 1 or more")
    results: dict[int, list[tuple[float, float, list[float]]]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory(prefix="vcbench-workers-") as tmp:
        work = Path(tmp)
        for round_no in range(args.rounds):
            order = counts[round_no % len(counts) :] + counts[: round_no % len(counts)]
            for n in order:
                port = args.port + 10 * n
                proc = start(work, n, port, args.bootstrap, args.tenancy)
                throttle: Throttle | CpuQuota | None = None
                try:
                    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "client.id": CLIENT_ID})
                    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
                        with contextlib.suppress(Exception):
                            future.result(60)
                    workers = children_of(proc.pid) or [proc.pid]  # --workers 1: the proxy is one process
                    if args.share > 0 and args.limit == "cgroup":
                        throttle = CpuQuota(workers, args.share, args.period_ms / 1000)
                    elif args.share > 0:
                        throttle = Throttle(workers, args.share, args.period_ms / 1000)
                        throttle.start()
                    rate, spent = run(f"127.0.0.1:{port}", args, sorted({proc.pid, *workers}))
                    if isinstance(throttle, CpuQuota):
                        print(f"  periods throttled: {[round(t, 2) for t in throttle.throttled()]}", end="")
                    rss = {pid: _rss_mib(pid) for pid in sorted({proc.pid, *workers})}
                    print(f"  resident MiB: parent {rss[proc.pid]:.0f}" if n > 1 else "", end="")
                    print(f", workers {[round(rss[p]) for p in workers]}" if n > 1 else "", flush=True)
                finally:
                    if throttle is not None:
                        throttle.stop()
                    proc.terminate()
                    proc.wait(60)
                total = sum(spent.values())
                per_request = total / (rate * args.seconds) * 1e6 if rate else float("nan")
                shares = sorted(spent[pid] / total for pid in workers) if total else []
                busy = sorted(spent[pid] / args.seconds for pid in workers)  # cores each worker used
                parent = spent[proc.pid] / total if total and proc.pid not in workers else 0.0
                results[n].append((rate, per_request, shares))
                print(f"round {round_no + 1}, {n} worker(s): {rate:,.0f} requests/s, {per_request:,.0f} µs proxy "
                      f"CPU per request, workers' shares {[round(s, 2) for s in shares]}, cores each "
                      f"{[round(b, 2) for b in busy]}, the parent's part {parent:.1%}", flush=True)  # fmt: skip
    base = statistics.median(r for r, _, _ in results[counts[0]])
    head = f"| workers | requests/s (median of {args.rounds}) | ÷ {counts[0]} worker(s) | per worker |"
    print(f"\n{head} µs proxy CPU per request |")
    print("|---|---|---|---|---|")
    for n in counts:
        rate = statistics.median(r for r, _, _ in results[n])
        cpu = statistics.median(c for _, c, _ in results[n])
        print(f"| {n} | {rate:,.0f} | {rate / base:.2f} | {rate / base / n * counts[0]:.2f} | {cpu:,.0f} |")


if __name__ == "__main__":
    main()
