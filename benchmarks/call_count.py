"""How many Python-level calls the proxy makes per small Produce request: a count, not a timing.

On a shared 2-core machine a change of a tenth in per-request CPU is inside the noise of one run (see
docs/performance.md); the number of interpreted calls per request is not. This starts one proxy per
(checkout, mode) in front of a running cluster, under `cProfile` switched on by a signal after a warm-up,
and drives it with Kafka's own producer (`kafka-producer-perf-test`: bench_peers.py's workload c, 100 B
records, `linger.ms=0`, `acks=1`, a 6-partition topic, by default 5,000 records/s for 20 s). A second
signal writes the profile; calls per request are the profile's calls over the producer's `request-total`.
It prints, per proxy, the calls per request, the share in Trio's own modules, and with --top N the
functions with most calls per request.

The perf tool is a Java client of this Kafka (Produce v13: topics by id), unlike shell_cost.py's
librdkafka, which sends names; Metadata requests and the proxy's own background work fall in the count
too (a few calls per request at this rate).

Run (a cluster from `vcproxy kafka start --dir D --brokers 1`):
    PYTHONPATH=. .venv/bin/python benchmarks/call_count.py --bootstrap 127.0.0.1:29092 \
        --checkout before=/path/to/worktree --checkout after=. --top 15
"""

from __future__ import annotations

import argparse
import json
import pstats
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vcproxy_tools.kafka.tools import tool_argv
from vcproxy_tools.process import wait_ready

CLIENT_ID = "vcbench"
REQUEST_TOTAL = re.compile(r"producer-metrics:request-total:\{client-id=[^}]*\}\s*:\s*([0-9.Ee+]+)")
# Runs the proxy as `python -m proxy serve` does, with a profiler that SIGUSR1 starts and SIGUSR2 writes out.
WRAPPER = """
import cProfile, os, runpy, signal, sys
profile, out = cProfile.Profile(), sys.argv[1]
def write(*_):
    profile.disable()
    profile.dump_stats(out)
    os._exit(0)
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
signal.signal(signal.SIGUSR2, write)
sys.argv = ["proxy", "serve", "--config", sys.argv[2]]
runpy.run_module("proxy", run_name="__main__")
"""


def python_of(checkout: Path) -> str:
    own = checkout / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def start(
    checkout: Path, mode: str, port: int, upstream: str, work: Path, wrapper: str = WRAPPER
) -> tuple[subprocess.Popen[bytes], Path]:
    """A proxy of `checkout` in `mode` (passthrough, tenant) under `wrapper`: SIGUSR1 starts its measure,
    SIGUSR2 writes it to the returned path and ends the process."""
    name = f"{checkout.name or 'checkout'}-{mode}-{port}"
    config: dict = {
        "listeners": {"host": "127.0.0.1", "bootstrap_port": port, "broker_port_base": port},
        "upstream": {"bootstrap_servers": [upstream]},
        "logging": {"level": "INFO"},
    }
    if mode == "tenant":
        config["tenancy"] = {
            "enabled": True,
            "state_topic": f"__vcproxy_state_callcount_{port}",
            "virtual_clusters": [{"name": "callcount", "client_ids": [CLIENT_ID]}],
        }
    path = work / f"{name}.json"
    path.write_text(json.dumps(config))  # JSON is YAML
    out, log = work / f"{name}.prof", work / f"{name}.log"
    argv = [python_of(checkout), "-c", wrapper, str(out), str(path)]
    proc = subprocess.Popen(argv, cwd=checkout, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    wait_ready(proc, log, 120, name)
    return proc, out


def produce(bootstrap: str, topic: str, records: int, rate: int) -> float:
    """Requests the producer sent (its request-total)."""
    argv = tool_argv(
        "kafka-producer-perf-test",
        [
            "--topic", topic, "--num-records", str(records), "--record-size", "100", "--throughput", str(rate),
            "--producer-props", f"bootstrap.servers={bootstrap}", f"client.id={CLIENT_ID}", "acks=1", "linger.ms=0",
            "--print-metrics",
        ],
        heap="512m",
    )  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    found = REQUEST_TOTAL.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the producer failed ({done.returncode}):\n{(done.stderr or done.stdout)[-2000:]}")
    return float(found.group(1))


def create_topic(bootstrap: str, topic: str, work: Path) -> None:
    props = work / "client.properties"
    props.write_text(f"client.id={CLIENT_ID}\n")  # a tenant proxy binds this client id to its VC
    argv = tool_argv(
        "kafka-topics",
        ["--bootstrap-server", bootstrap, "--command-config", str(props), "--create", "--topic", topic,
         "--partitions", "6", "--replication-factor", "1"],
    )  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"cannot create {topic}:\n{done.stderr[-2000:]}")


def count(profile: Path, requests: float, top: int) -> tuple[float, float, list[tuple[float, str]]]:
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    total = sum(v[1] for v in stats.values())
    trio = sum(v[1] for k, v in stats.items() if "/trio/" in k[0] or "/outcome/" in k[0])
    rows = sorted(((v[1] / requests, f"{Path(k[0]).name}:{k[1]}({k[2]})") for k, v in stats.items()), reverse=True)
    return total / requests, trio / requests, rows[:top]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", required=True, help="a running cluster (one broker is enough)")
    p.add_argument("--checkout", action="append", metavar="NAME=DIR", help="a checkout to count (default: this one)")
    p.add_argument("--modes", default="passthrough,tenant")
    p.add_argument("--rate", type=int, default=5000, help="records/s (default 5000)")
    p.add_argument("--seconds", type=int, default=20, help="measured seconds (default 20)")
    p.add_argument("--port", type=int, default=26700, help="first proxy port; +10 per proxy")
    p.add_argument("--top", type=int, default=0, help="also list the N functions with most calls per request")
    a = p.parse_args()
    checkouts = [c.split("=", 1) for c in a.checkout or ["this=."]]
    work = Path(tempfile.mkdtemp(prefix="call-count-"))
    port = a.port
    results = []
    for name, directory in checkouts:
        for mode in a.modes.split(","):
            proc, out = start(Path(directory).resolve(), mode, port, a.bootstrap, work)
            try:
                bootstrap = f"127.0.0.1:{port}"
                topic = f"callcount-{port}-{int(time.time())}"
                create_topic(bootstrap, topic, work)
                produce(bootstrap, topic, a.rate * 2, a.rate)  # warm-up, not counted
                proc.send_signal(signal.SIGUSR1)
                time.sleep(0.5)
                requests = produce(bootstrap, topic, a.rate * a.seconds, a.rate)
                proc.send_signal(signal.SIGUSR2)
                proc.wait(60)
            finally:
                if proc.poll() is None:
                    proc.kill()
            calls, trio, rows = count(out, requests, a.top)
            results.append((f"{name}/{mode}", requests, calls, trio))
            print(f"{name}/{mode}: {requests:,.0f} requests, {calls:.1f} calls per request ({trio:.1f} in Trio)")
            for per, function in rows:
                print(f"    {per:7.2f}  {function}")
            port += 10
    print("\n| proxy | requests | calls per request | of them Trio's |\n|---|---|---|---|")
    for name, requests, calls, trio in results:
        print(f"| {name} | {requests:,.0f} | {calls:.1f} | {trio:.1f} |")
    print(f"(profiles and logs: {work})")


if __name__ == "__main__":
    main()
