"""One proxy instance over N worker processes, sans-I/O: which worker serves a new connection, and the
messages the accepting parent and its workers exchange (proxy/net/workers.py is the Trio side).

The parent holds the listeners and admission (connection limits hold for the instance, as a broker's
do), and hands each admitted socket to the worker with the fewest open connections. Workers are the
same program as a single proxy, less the listeners and the HTTP endpoints: each follows the state topic
and logs clients in itself. What must hold for the instance rather than per worker travels over each
worker's control channel as one JSON object per line:

* parent to worker: ``{"ask": "metrics"|"ready", "id": n}``, ``{"quota": report}``, ``{"session": [...]}``,
  ``{"regex": [...]}``, ``{"login": [...]}``;
* worker to parent: ``{"up": true}`` (replayed: the parent may listen), ``{"closed": n}``,
  ``{"id": n, "metrics": text}``, ``{"id": n, "ready": [bool, reason]}``, ``{"quota": report}``,
  ``{"session": [...]}``, ``{"regex": [...]}``, ``{"login": [...]}``.

Quota reports are proxy/quotas/fleet.py's, relayed to every worker (the sender's own included: that is
how it knows the others' are in sight); fetch-session owners, the regexes behind expansions and failed
logins are relayed to the other workers (`learn` in proxy/tenancy/fetch_sessions.py,
proxy/tenancy/regex.py and proxy/auth/guard.py). A VC's regex matching budget is the instance's, 1/N of
it in each worker (proxy/tenancy/regex.py). A failed login is told as ``["address"|"user"|"pair", key]``,
without its time (each worker's clock has its own origin): the receiver counts it at its own now, and each
worker paces a spent login budget at 1/N of its rate.
Workers are the parent's own children, not clients: still, a line that does not parse or exceeds its
bound is dropped with one log line, never trusted halfway.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_LINE = 64 * 1024 * 1024  # a worker's metrics text with many VCs; anything larger is a bug, not data
MAX_HEADER = 1024  # the JSON beside a handed-over socket


WORKER_MEMORY = 128 * 1024 * 1024  # what `auto` counts per worker (one with tenancy: about 100 MiB RSS)


def worker_count(value: str, cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """`--workers`: a number from 1, or `auto`: the CPUs this process may run on, no more than its cgroup's
    CPU limit allows (a container limited to 2 CPUs on a 64-CPU node runs 2, as a JVM's
    ActiveProcessorCount would), nor than its memory limit holds at `WORKER_MEMORY` each."""
    if value == "auto":
        counts = [len(os.sched_getaffinity(0))]
        cpu, memory = cgroup_cpu_limit(cgroup), cgroup_memory_limit(cgroup)
        if cpu is not None:
            counts.append(cpu)
        if memory is not None:
            counts.append(memory // WORKER_MEMORY)
        return max(1, min(counts))
    count = int(value)
    if not 1 <= count <= 256:
        raise ValueError("workers must be from 1 to 256, or auto")
    return count


def cgroup_cpu_limit(root: Path) -> int | None:
    """The CPUs a cgroup's quota allows, rounded up (v2's cpu.max, else v1's cfs quota); None: no limit."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else max(1, math.ceil(quota_us / period_us))


def cgroup_memory_limit(root: Path) -> int | None:
    """A cgroup's memory limit in bytes (v2's memory.max, else v1's limit_in_bytes); None: no limit."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            limit = int(text)
        except ValueError:
            return None
        return None if limit <= 0 or limit >= 1 << 62 else limit  # v1 says "none" with a huge number
    return None


@dataclass
class Roster:
    """The workers taking connections, and which connection each serves (for admission's release)."""

    open: dict[int, int] = field(default_factory=dict)  # worker index -> connections open
    _served: dict[int, tuple[int, str]] = field(default_factory=dict)  # connection number -> (worker, ip)
    _next: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def join(self, worker: int) -> None:
        self.open.setdefault(worker, 0)

    def pause(self, worker: int) -> None:
        """The worker takes no new connection (it could not be handed one) until it joins again; what it
        serves stays its own until it closes or the worker leaves."""
        self.open.pop(worker, None)

    def leave(self, worker: int) -> list[str]:
        """A worker is gone: the addresses of the connections it served, each to be released once."""
        self.open.pop(worker, None)
        gone = [n for n, (w, _) in self._served.items() if w == worker]
        return [self._served.pop(n)[1] for n in gone]

    def assign(self, ip: str, skip: frozenset[int] = frozenset()) -> tuple[int, int] | None:
        """The worker for a new connection from `ip` and the connection's number; None without workers.
        Fewest open connections first, at random among equals: a client opens its bootstrap connection and
        then its broker connections, and a fixed order would put every client's busy broker connection on
        the same worker (the bootstrap one's on the first, the broker one's on the second)."""
        open_ = {w: n for w, n in self.open.items() if w not in skip}  # `skip`: could not take this one
        if not open_:
            return None
        fewest = min(open_.values())
        worker = self.rng.choice([w for w, n in open_.items() if n == fewest])
        self._next += 1
        self.open[worker] += 1
        self._served[self._next] = (worker, ip)
        return worker, self._next

    def closed(self, worker: int, number: int) -> str | None:
        """A worker says a connection ended: its address, None for a number that is not that worker's."""
        served = self._served.get(number)
        if served is None or served[0] != worker:
            return None
        del self._served[number]
        if worker in self.open:
            self.open[worker] -= 1
        return served[1]

    def serving(self) -> Counter[int]:
        """Connections open per worker, paused ones included (for /metrics)."""
        return Counter(worker for worker, _ in self._served.values())

    def __len__(self) -> int:
        return len(self._served)


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any] | str:
    """One control line: the message, or why it is dropped."""
    if len(line) > MAX_LINE:
        return f"a line of {len(line)} bytes"
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not JSON ({exc})"
    if not isinstance(message, dict):
        return "not an object"
    return message


class Lines:
    """The control channel's lines, out of a byte stream. Each byte is scanned for a newline once and the
    partial line grows in one bytearray, so a worker's large metrics text costs linear time, not a copy and
    a split of everything received so far per chunk. A partial line past `limit` is dropped."""

    def __init__(self, limit: int = MAX_LINE):
        self.limit = limit
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> tuple[list[dict[str, Any]], list[str]]:
        """The messages the chunk completes, and why any line was dropped."""
        scanned = len(self._buf)
        self._buf += chunk
        messages: list[dict[str, Any]] = []
        dropped: list[str] = []
        start = 0
        while (end := self._buf.find(b"\n", scanned)) != -1:
            message = decode(bytes(self._buf[start:end]))
            (dropped if isinstance(message, str) else messages).append(message)  # type: ignore[arg-type]
            start = scanned = end + 1
        del self._buf[:start]
        if len(self._buf) > self.limit:
            dropped.append(f"a line over {self.limit} bytes")
            self._buf.clear()
        return messages, dropped


def handoff_header(number: int, node_id: int | None, ip: str) -> bytes:
    header = json.dumps({"n": number, "node": node_id, "ip": ip}, separators=(",", ":")).encode()
    assert len(header) <= MAX_HEADER
    return header


def read_handoff(data: bytes) -> tuple[int, int | None, str] | str:
    """The header beside a handed-over socket: (connection number, broker node id or None, client address)."""
    message = decode(data) if len(data) <= MAX_HEADER else f"a header of {len(data)} bytes"
    if isinstance(message, str):
        return message
    number, node, ip = message.get("n"), message.get("node"), message.get("ip")
    if not isinstance(number, int) or not (node is None or isinstance(node, int)) or not isinstance(ip, str):
        return "not a handoff header"
    return number, node, ip
