"""CPU seconds per test module (issue 24: where the suite's time goes): this process, its waited-for children
(Kafka tools, proxies, Go test binaries) and the brokers of the session's cluster, which are children still
running. On a 2-core machine the suite's CPU, not its waiting, bounds how much running modules side by side
can save; this says which modules spend it."""

from __future__ import annotations

import os
from pathlib import Path

from vcproxy_tools.proxy_forks import ForkServer

REPORT_PROPERTY = "module cpu seconds"
_TICKS = os.sysconf("SC_CLK_TCK")
_cluster_dirs: list[str] = []  # the session cluster's directory, whose java processes are its brokers
_fork_servers: list[ForkServer] = []  # whose children (the proxies) are not this process's


def watch_forks(server: ForkServer) -> None:
    _fork_servers.append(server)


def watch_cluster(directory: Path) -> None:
    _cluster_dirs.append(str(directory))


def _brokers_seconds() -> float:
    if not _cluster_dirs:
        return 0.0
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if not any(f"{d}/".encode() in cmdline for d in _cluster_dirs):
                continue
            # utime and stime: fields 14 and 15, counted after the command name's closing parenthesis.
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile: its time is in the children's (once waited for)
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def seconds() -> float:
    """CPU seconds so far: this process, its waited-for children, the running brokers."""
    times = os.times()
    forked = sum(server.children_cpu for server in _fork_servers)
    return times.user + times.system + times.children_user + times.children_system + forked + _brokers_seconds()
