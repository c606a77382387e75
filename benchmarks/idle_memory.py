"""What an idle connection costs a proxy in memory: the proxy's resident set grown by N connections, each one
logged in, past its ApiVersions and two Produce requests (so that the forwarder has it, where it can: the second is
the forwarder's) and then idle, per connection, for each checkout and mode (`shell_cost.py`'s proxies: `passthrough`,
or `tenant`, a VC of client id `vcbench`). 50 connections first, not counted: the interpreter's and the allocator's
own growth. The broker connection each one opens is part of what is counted (its buffers and the forwarder's).

    PYTHONPATH=. .venv/bin/python benchmarks/idle_memory.py --bootstrap 127.0.0.1:26092 \\
        --checkout before=/tmp/base,PYTHONPATH=/tmp/base:/tmp/base-native --checkout after=. --connections 2000
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from pathlib import Path

from fetch_cost import Raw  # this directory is on sys.path
from handover_cost import produce_frame
from shell_cost import Proxy, create_topic, start_checkout, stop_proxies

WARM = 50


def resident_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit(f"no VmRSS for {pid}")


def open_idle(proxy: Proxy, n: int, frame: bytes) -> list[socket.socket]:
    out = []
    for _ in range(n):
        raw = Raw(proxy)
        for _ in range(2):
            raw.sock.sendall(frame)
            raw.read()
        out.append(raw.sock)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--checkout", action="append", required=True, help="NAME=DIR[,VAR=VALUE...], as shell_cost's")
    ap.add_argument("--modes", default="passthrough,tenant")
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--port", type=int, default=29900)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="idle-memory-"))
    frame = produce_frame()
    limits = {"limits": {"max_connections_per_ip": args.connections + 2 * WARM}}
    port = args.port
    print(f"{'proxy':24} {'KiB resident per idle connection':>34}")
    for mode in args.modes.split(","):
        for spec in args.checkout:
            proxy = start_checkout(work, spec, mode, port, args.bootstrap, limits)
            port += 20
            socks: list[socket.socket] = []
            try:
                create_topic(proxy)
                socks += open_idle(proxy, WARM, frame)
                time.sleep(1)  # the last answers' work done
                before = resident_kib(proxy.proc.pid)
                socks += open_idle(proxy, args.connections, frame)
                time.sleep(1)
                after = resident_kib(proxy.proc.pid)
                print(f"{proxy.name:24} {(after - before) / args.connections:>34.1f}", flush=True)
            finally:
                for sock in socks:
                    sock.close()
                stop_proxies([proxy], work)


if __name__ == "__main__":
    main()
