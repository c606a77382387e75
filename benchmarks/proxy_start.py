"""CPU a `vcproxy serve` process spends before it listens, and idle afterwards (docs/performance.md, "The test
suite's CPU"): every test module, demo and rolling restart pays the start.

    PYTHONPATH=. .venv/bin/python benchmarks/proxy_start.py --bootstrap 127.0.0.1:9092 [--rounds 5]

Needs a running Kafka (e.g. `vcproxy kafka start --dir /tmp/k --brokers 1`). Each round starts a proxy without
tenancy and one with it (its own state topic), reads the process's CPU from /proc once it is ready, waits
`--idle` seconds and reads it again.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from vcproxy_tools.process import ProxyProcess, proxy_config


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one(bootstrap: str, tenancy: bool, idle: float) -> tuple[float, float, float]:
    """(seconds to ready, CPU seconds at ready, CPU seconds over `idle` seconds after)."""
    sections = {}
    if tenancy:
        vcs = [{"name": "team-a", "client_ids": ["a"]}]
        sections["tenancy"] = {"enabled": True, "state_topic": f"__vcproxy_bench_{uuid.uuid4().hex[:6]}",
                               "virtual_clusters": vcs}  # fmt: skip
    process = ProxyProcess(proxy_config(bootstrap, _free_port(), **sections), Path(tempfile.mkdtemp()))
    started = time.monotonic()
    process.start()
    ready = time.monotonic() - started
    assert process.proc is not None
    at_ready = _cpu(process.proc.pid)
    time.sleep(idle)
    idle_cpu = _cpu(process.proc.pid) - at_ready
    process.stop()
    return ready, at_ready, idle_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    for tenancy in (False, True):
        runs = [one(args.bootstrap, tenancy, args.idle) for _ in range(args.rounds)]
        ready, cpu, idle = (statistics.median(r[i] for r in runs) for i in range(3))
        print(
            f"{'tenancy' if tenancy else 'plain':8} ready in {ready:.2f} s, {cpu:.2f} s of CPU to listen, "
            f"{idle:.2f} s of CPU idle over {args.idle:.0f} s (medians of {args.rounds})"
        )


if __name__ == "__main__":
    main()
