"""A virtual cluster's consumer CPU: the proxy's CPU per Fetch answer of about 1 MB (or, with --empty, of none: a
consumer that has caught up), by name (v12: Java clients before 3.1, sarama) and by topic id (v13+), for each
checkout, in rounds.

One client connection per (proxy, version) asks full fetches (no session) of partition 0 from offset 0, so that each
answer carries the same megabyte from the broker's page cache; what differs between runs is the proxy's work. The
proxies are `shell_cost.py`'s, in its `tenant` mode (a VC of client id `vcbench`), started side by side.

    PYTHONPATH=. .venv/bin/python benchmarks/fetch_cost.py --bootstrap 127.0.0.1:26092 \\
        --checkout before=/tmp/base,PYTHONPATH=/tmp/base:/tmp/base-native --checkout after=. --rounds 5
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from shell_cost import (  # this directory is on sys.path
    TOPIC,
    Proxy,
    checkout_args,
    cpu_us,
    drive,
    producer,
    rotated,
    start_checkouts,
    stop_proxies,
)

from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.entities import empty
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, response_body_offset

PARTITION_MAX = 1 << 20
CLIENT_ID = "vcbench"  # shell_cost's tenant mode binds it to its VC


def request_bytes(key: int, version: int, correlation: int, body: Any) -> bytes:
    header = encode_request_header(key, version, correlation, CLIENT_ID, api_info(key).request_header_version(version))
    return frame(header + codec.encode(body))


class Raw:
    """A raw client connection to a proxy: one request at a time, each answer read whole."""

    def __init__(self, proxy: Proxy) -> None:
        host, port = proxy.bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        if proxy.cafile is not None:  # a TLS mode (shell_cost.py): the run's CA
            self.sock = ssl.create_default_context(cafile=proxy.cafile).wrap_socket(self.sock, server_hostname=host)
        self.correlation = 0
        self.ask(18, 3, request_type(18, 3)(client_software_name="vcbench-raw", client_software_version="1"))

    def ask(self, key: int, version: int, body: Any) -> Any:
        self.correlation += 1
        self.sock.sendall(request_bytes(key, version, self.correlation, body))
        answer = self.read()
        offset = response_body_offset(answer, api_info(key).response_header_version(version))
        return codec.decode(response_type(key, version), memoryview(answer), offset)[0]

    def read(self) -> bytes:
        head = self._exactly(4)
        return head + self._exactly(int.from_bytes(head, "big"))

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(min(n - len(out), 1 << 20))
            if not chunk:
                raise SystemExit("the proxy closed the connection")
            out += chunk
        return bytes(out)


class Fetcher(Raw):
    """A raw connection that asks the same full fetch again and again and reads each answer whole."""

    def __init__(self, proxy: Proxy, version: int, empty_answers: bool = False) -> None:
        super().__init__(proxy)
        metadata = request_type(3, 12)(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        answer = self.ask(3, 12, metadata)
        (topic,) = [t for t in answer.topics if t.name == TOPIC]
        offset = self._end() if empty_answers else 0
        self.frame = self._fetch(version, topic.topic_id, offset, 0 if empty_answers else 100)

    def _end(self) -> int:
        """Partition 0's log end offset: a fetch from there is answered at once with no records."""
        import kio.schema.list_offsets.v7.request as lo

        partition = empty(lo.ListOffsetsPartition, partition_index=0, timestamp=-1, current_leader_epoch=-1)
        topic = empty(lo.ListOffsetsTopic, name=TOPIC, partitions=(partition,))
        return int(
            self.ask(2, 7, empty(lo.ListOffsetsRequest, replica_id=-1, topics=(topic,))).topics[0].partitions[0].offset
        )

    @staticmethod
    def _fetch(version: int, topic_id: Any, offset: int, wait_ms: int) -> bytes:
        req = request_type(1, version)
        fields = set(req.__dataclass_fields__)
        partition = empty(
            nested("fetch", version, "FetchPartition"),
            partition=0,
            fetch_offset=offset,
            partition_max_bytes=PARTITION_MAX,
            current_leader_epoch=-1,
            last_fetched_epoch=-1,
            log_start_offset=-1,
        )
        topic_cls = nested("fetch", version, "FetchTopic")
        topic = empty(topic_cls, topic=TOPIC, partitions=(partition,))
        if version >= 13:
            topic = empty(topic_cls, topic_id=topic_id, partitions=(partition,))
        body: dict[str, Any] = {
            "max_wait": datetime.timedelta(milliseconds=wait_ms),
            "min_bytes": 0 if wait_ms == 0 else 1,
            "max_bytes": 4 * PARTITION_MAX,
            "session_id": 0,
            "session_epoch": -1,
            "topics": (topic,),
        }
        if "replica_id" in fields:
            body["replica_id"] = -1
        return request_bytes(1, version, 0, empty(req, **body))

    def run(self, n: int) -> int:
        """Bytes of `n` answers."""
        total = 0
        for _ in range(n):
            self.sock.sendall(self.frame)
            total += len(self.read())
        return total


def nested(api: str, version: int, name: str) -> type:
    """A class of kio's request schema of `api` (its package, e.g. "fetch") at `version`."""
    import importlib

    return getattr(importlib.import_module(f"kio.schema.{api}.v{version}.request"), name)


def main() -> None:
    ap = checkout_args(__doc__, 29700)
    ap.add_argument("--versions", default="12,13")
    ap.add_argument("--answers", type=int, default=300)
    ap.add_argument("--empty", action="store_true", help="fetch from the log's end: answers with no records, at once")
    args = ap.parse_args()
    versions = [int(v) for v in args.versions.split(",")]
    work = Path(tempfile.mkdtemp(prefix="fetch-cost-"))
    proxies: list[Proxy] = []
    try:
        proxies += start_checkouts(work, args, ["tenant"])
        drive(producer(proxies[0], 5), 5, 400)  # about 1.3 MB: every answer is a full megabyte
        fetchers = {(x.name, v): Fetcher(x, v, args.empty) for x in proxies for v in versions}
        for fetcher in fetchers.values():
            fetcher.run(20)  # warm-up
        runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for r in range(args.rounds):
            for x in rotated(proxies, r):
                for v in versions:
                    us, size = cpu_us(x, args.answers, lambda f=fetchers[x.name, v]: f.run(args.answers))
                    runs.setdefault((x.name, v), []).append((us, us * args.answers / 1e6 / (size / 1e9)))
            print(f"round {r + 1}/{args.rounds} done ({os.getloadavg()[0]:.1f} load)", file=sys.stderr)
        print(
            f"{args.answers} Fetch answers of {'no records (from the log end)' if args.empty else '~1 MB'} per run,"
            f" {args.rounds} rounds, medians (range)"
        )
        print(f"{'proxy':24} {'Fetch':>6} {'µs CPU per answer':>22} {'s CPU per GB':>18}")
        for (name, v), values in runs.items():
            us, gb = [a for a, _ in values], [b for _, b in values]
            print(
                f"{name:24} {'v' + str(v):>6} {statistics.median(us):>10.0f} ({min(us):.0f}..{max(us):.0f})"
                f" {statistics.median(gb):>8.2f} ({min(gb):.2f}..{max(gb):.2f})"
            )
    finally:
        stop_proxies(proxies, work)


if __name__ == "__main__":
    main()
