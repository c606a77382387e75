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

import datetime
import functools
import io
import statistics
import tempfile
from pathlib import Path

from fetch_cost import Raw, request_bytes  # this directory is on sys.path
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import i8, i16, i32, i64
from shell_cost import TOPIC, Proxy, checkout_args, rounds_of, spread, start_checkouts, stop_proxies

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
    ap = checkout_args(__doc__, 29800)
    ap.add_argument("--modes", default="passthrough,tenant")
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="handover-cost-"))
    proxies: list[Proxy] = []
    try:
        proxies += start_checkouts(work, args, args.modes.split(","))
        askers = {x.name: Asker(x) for x in proxies}
        for asker in askers.values():
            asker.run(KINDS["alternating"], 200)  # warm-up: the grant, the tables, the interpreter's caches
        runs = rounds_of(
            proxies,
            args.rounds,
            args.requests,
            lambda x: {k: functools.partial(askers[x.name].run, apis, args.requests) for k, apis in KINDS.items()},
        )
        print(f"{args.requests} requests one at a time a run, {args.rounds} rounds, µs CPU a request: median (range)")
        print(f"{'proxy':24} {'produce':>16} {'metadata':>16} {'alternating':>16} {'a cycle':>8}")
        for x in proxies:
            med = {k: statistics.median(runs[x.name, k]) for k in KINDS}
            cells = [spread(runs[x.name, k]) for k in KINDS]
            cycle = 2 * med["alternating"] - med["produce"] - med["metadata"]
            print(f"{x.name:24} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} {cycle:>8.0f}")
    finally:
        stop_proxies(proxies, work)


if __name__ == "__main__":
    main()
