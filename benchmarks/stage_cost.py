"""Where a real proxy's time per request goes: the session, each of its stages, and the rest (the shell).

`benchmarks/acl_cost.py` and `scaling.py` time the sans-I/O session in a tight loop, where its code and data
stay in the CPU's caches. A proxy behind a real client does not run so: between two requests the broker and
the client run, and each request meets cold caches. This times the same steps inside a running proxy, under
call_count.py's workload (Kafka's own producer, workload c of bench_peers.py: 100 B records, `linger.ms=0`,
`acks=1`, 5,000 records/s, a 6-partition topic), so the figures are what a request costs there.

Each proxy runs under a wrapper that times, with `time.perf_counter_ns`, the session's `on_request` and
`on_response` and, inside them, its parse, its settling, the answer's materializing and every stage's
`on_request` and `on_response` (the stage classes of proxy/core/stages/, found at start). SIGUSR1 starts the
measure after a warm-up, SIGUSR2 writes it with the process' CPU (`process_time`) and each thread's
(`/proc/self/task/*/schedstat`). The wrappers cost time too (two clock reads and a call each, cold): compare
rows of one run, and checkouts in one run (`--checkout`, as call_count.py).

Run (a cluster from `vcproxy kafka start --dir D --brokers 1`):
    PYTHONPATH=. .venv/bin/python benchmarks/stage_cost.py --bootstrap 127.0.0.1:29092 \
        --checkout before=/path/to/worktree --checkout after=. --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.call_count import create_topic, produce, start

# Runs the proxy as `python -m proxy serve` does, with the timers above; argv: output path, config path.
WRAPPER = r"""
import importlib, inspect, json, os, pkgutil, runpy, signal, sys, time
OUT = sys.argv[1]
from proxy.core import exchange, session
import proxy.core.stages as stages_package
clock = time.perf_counter_ns
measuring = [False]
spent = {}  # name -> [ns, calls]

def timed(cls, name, label):
    original = getattr(cls, name)
    def wrapper(self, *args):
        if not measuring[0]:
            return original(self, *args)
        started = clock()
        try:
            return original(self, *args)
        finally:
            entry = spent.setdefault(label, [0, 0])
            entry[0] += clock() - started
            entry[1] += 1
    setattr(cls, name, wrapper)

timed(session.ProxySession, "on_request", "session: on_request (all of it)")
timed(session.ProxySession, "on_response", "session: on_response (all of it)")
timed(session.ProxySession, "_parse", "session: parse")
timed(session.ProxySession, "_settle", "session: settle")
timed(exchange.ResponseMessage, "materialize", "session: materialize the answer")
for found in pkgutil.iter_modules(stages_package.__path__):
    module = importlib.import_module(f"proxy.core.stages.{found.name}")
    for cls_name, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ == module.__name__ and cls_name.endswith("Stage"):
            for name in ("on_request", "on_response"):
                if name in cls.__dict__:
                    timed(cls, name, f"{cls_name}.{name}")

# --time module:Class.method (or module:function): more steps, named by the caller.
for target in filter(None, os.environ.get("STAGE_COST_TIME", "").split(",")):
    module_name, _, qualified = target.partition(":")
    owner_name, _, name = qualified.rpartition(".")
    module = importlib.import_module(module_name)
    if owner_name:
        timed(getattr(module, owner_name), name, qualified)
    else:
        original_function = getattr(module, name)
        def function_wrapper(*args, _f=original_function, _label=qualified, **kwargs):
            if not measuring[0]:
                return _f(*args, **kwargs)
            started = clock()
            try:
                return _f(*args, **kwargs)
            finally:
                entry = spent.setdefault(_label, [0, 0])
                entry[0] += clock() - started
                entry[1] += 1
        setattr(module, name, function_wrapper)

def threads():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:  # a thread that ended meanwhile
            continue
        out[f"{comm}:{tid}"] = ns
    return out

began = {}
def begin(*_):
    began["threads"], began["cpu"] = threads(), time.process_time_ns()
    measuring[0] = True
def end(*_):
    measuring[0] = False
    now = threads()
    result = {
        "cpu_ns": time.process_time_ns() - began["cpu"],
        "threads_ns": {k: v - began["threads"].get(k, 0) for k, v in now.items()},
        "spent": spent,
    }
    with open(OUT, "w") as f:
        json.dump(result, f)
    os._exit(0)
signal.signal(signal.SIGUSR1, begin)
signal.signal(signal.SIGUSR2, end)
sys.argv = ["proxy", "serve", "--config", sys.argv[2]]
runpy.run_module("proxy", run_name="__main__")
"""


def measure(checkout: Path, mode: str, port: int, bootstrap: str, work: Path, rate: int, seconds: int) -> dict:
    proc, out = start(checkout, mode, port, bootstrap, work, WRAPPER)  # STAGE_COST_TIME passes to it
    try:
        proxy = f"127.0.0.1:{port}"
        topic = f"stagecost-{port}-{int(time.time())}"
        create_topic(proxy, topic, work)
        produce(proxy, topic, rate * 2, rate)  # warm-up, not measured
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        requests = produce(proxy, topic, rate * seconds, rate)
        proc.send_signal(signal.SIGUSR2)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = json.loads(out.read_text())
    result["requests"] = requests
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", required=True, help="a running cluster (one broker is enough)")
    p.add_argument("--checkout", action="append", metavar="NAME=DIR", help="a checkout to time (default: this one)")
    p.add_argument("--modes", default="passthrough,tenant")
    p.add_argument("--rate", type=int, default=5000, help="records/s (default 5000)")
    p.add_argument("--seconds", type=int, default=15, help="measured seconds per round (default 15)")
    p.add_argument("--rounds", type=int, default=1, help="rounds, every proxy once per round, in turn")
    p.add_argument("--port", type=int, default=26900, help="first proxy port; +10 per proxy")
    p.add_argument(
        "--time",
        action="append",
        default=[],
        metavar="MODULE:NAME",
        help="also time this method (module:Class.method) or module-level function (module:function), "
        "as the modules that imported it by name call it (e.g. proxy.tenancy.engine:TenantEngine.request)",
    )
    a = p.parse_args()
    os.environ["STAGE_COST_TIME"] = ",".join(a.time)
    checkouts = [c.split("=", 1) for c in a.checkout or ["this=."]]
    work = Path(tempfile.mkdtemp(prefix="stage-cost-"))
    runs: dict[str, list[dict]] = {}
    for round_number in range(a.rounds):
        port = a.port
        for name, directory in checkouts:
            for mode in a.modes.split(","):
                label = f"{name}/{mode}"
                result = measure(Path(directory).resolve(), mode, port, a.bootstrap, work, a.rate, a.seconds)
                runs.setdefault(label, []).append(result)
                per = result["cpu_ns"] / result["requests"] / 1000
                print(f"round {round_number + 1}, {label}: {result['requests']:,.0f} requests, {per:.1f} µs CPU each")
                port += 10
    print("\nµs per request, median of the rounds (the session's rows are parts of the process' CPU):\n")
    labels = list(runs)
    rows: dict[str, dict[str, float]] = {}
    for label, results in runs.items():
        rows.setdefault("process CPU", {})[label] = statistics.median(r["cpu_ns"] / r["requests"] for r in results)
        for key in {k for r in results for k in r["spent"]}:
            rows.setdefault(key, {})[label] = (
                statistics.median(r["spent"].get(key, [0, 0])[0] / r["requests"] for r in results) / 1000
            )
        rows["process CPU"][label] /= 1000
    order = ["process CPU", "session: on_request (all of it)", "session: on_response (all of it)"]
    order += sorted((k for k in rows if k not in order), key=lambda k: -max(rows[k].values()))
    print("| µs per request | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for key in order:
        print(f"| {key} | " + " | ".join(f"{rows[key].get(label, 0):.1f}" for label in labels) + " |")
    print(f"\n(results and logs: {work})")


if __name__ == "__main__":
    main()
