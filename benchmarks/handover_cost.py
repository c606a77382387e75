"""What a connection's move from the forwarder to the Python path and back costs: the proxy's CPU per request of a raw
client asking one request at a time, Produce only (the forwarder's), Metadata only (the Python path's: its answer
names brokers) and the two alternating, so that every request of the last run is a hand-back or a hand-over. The
cycle's own cost is what a Produce and a Metadata cost alternating beyond what each costs alone.

The proxies are `shell_cost.py`'s (`passthrough`, or `tenant`: a VC of client id `vcbench`, where every API but
Produce and Fetch is the Python path's), one per checkout and mode, started side by side; rounds rotate them.

    PYTHONPATH=. .venv/bin/python benchmarks/handover_cost.py --bootstrap 127.0.0.1:26092 \\
        --checkout before=/tmp/base,PYTHONPATH=/tmp/base:/tmp/base-native --checkout after=. --rounds 5
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import statistics
import sys
import tempfile
from pathlib import Path

from fetch_cost import Raw, request_bytes  # this directory is on sys.path
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import i8, i16, i32, i64
from shell_cost import TOPIC, Proxy, create_topic, start_checkout, stop_proxies

from proxy.protocol.apis import request_type
from proxy.protocol.entities import empty

KINDS = {"produce": (0,), "metadata": (3,), "alternating": (0, 3)}


def produce_frame() -> bytes:
    """A Produce v9 by name of one 100-byte record to partition 0, acks=1."""
    import kio.schema.produce.v9.request as p9

    now = datetime.datetime.now(datetime.UTC)
    record = Record(attributes=i8(0), timestamp=now, offset=i64(0), key=None, value=b"v" * 100, headers=())
    batch = NewRecordBatch(
        producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1), records=(record,), attributes=i16(0)
    )
    buffer = io.BytesIO()
    write_new_batch(buffer, batch)
    partition = empty(p9.PartitionProduceData, index=0, records=buffer.getvalue())
    topic = empty(p9.TopicProduceData, name=TOPIC, partition_data=(partition,))
    body = empty(p9.ProduceRequest, acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(topic,))
    return request_bytes(0, 9, 0, body)


def metadata_frame() -> bytes:
    body = request_type(3, 12)(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return request_bytes(3, 12, 0, body)


class Asker(Raw):
    def __init__(self, proxy: Proxy) -> None:
        super().__init__(proxy)
        self.frames = {0: produce_frame(), 3: metadata_frame()}

    def run(self, kinds: tuple[int, ...], n: int) -> None:
        """`n` requests, one at a time, of `kinds` in turn."""
        for i in range(n):
            self.sock.sendall(self.frames[kinds[i % len(kinds)]])
            self.read()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--checkout", action="append", required=True, help="NAME=DIR[,VAR=VALUE...], as shell_cost's")
    ap.add_argument("--modes", default="passthrough,tenant")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--port", type=int, default=29800)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="handover-cost-"))
    proxies: list[Proxy] = []
    try:
        port = args.port
        for mode in args.modes.split(","):
            for spec in args.checkout:
                proxies.append(start_checkout(work, spec, mode, port, args.bootstrap))
                port += 20
        for mode in args.modes.split(","):
            create_topic(next(x for x in proxies if x.mode == mode))
        askers = {x.name: Asker(x) for x in proxies}
        for asker in askers.values():
            asker.run(KINDS["alternating"], 200)  # warm-up: the grant, the tables, the interpreter's caches
        runs: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            order = proxies[r % len(proxies) :] + proxies[: r % len(proxies)]
            for x in order:
                for kind, apis in KINDS.items():
                    u0, s0 = x.cpu()
                    askers[x.name].run(apis, args.requests)
                    u1, s1 = x.cpu()
                    runs.setdefault((x.name, kind), []).append((u1 - u0 + s1 - s0) * 1e6 / args.requests)
            print(f"round {r + 1}/{args.rounds} done ({os.getloadavg()[0]:.1f} load)", file=sys.stderr)
        print(f"{args.requests} requests one at a time a run, {args.rounds} rounds, µs CPU a request: median (range)")
        print(f"{'proxy':24} {'produce':>16} {'metadata':>16} {'alternating':>16} {'a cycle':>8}")
        for x in proxies:
            med = {k: statistics.median(runs[x.name, k]) for k in KINDS}
            cells = [f"{med[k]:.0f} ({min(runs[x.name, k]):.0f}..{max(runs[x.name, k]):.0f})" for k in KINDS]
            cycle = 2 * med["alternating"] - med["produce"] - med["metadata"]
            print(f"{x.name:24} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} {cycle:>8.0f}")
    finally:
        stop_proxies(proxies, work)


if __name__ == "__main__":
    main()
