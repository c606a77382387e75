"""librdkafka's small Produce requests, one at a time: bench_peers.py's workload e.

A confluent-kafka producer sends `--requests` records of `--record-size` bytes, one record per Produce request
(`batch.num.messages=1`, `linger.ms=0`), waiting for each delivery before the next (as `shell_cost.py`'s depth 1):
librdkafka names topics by name (Produce v10), where Kafka's own Java producer names them by id (v13), so the two
take different paths through a proxy that renames topics. Prints one JSON line: records, requests, and the delivery
latency's p50/p99 in ms over all but the first tenth (the connection's first requests, the leader's lookup).

    python benchmarks/rdkafka_small.py --bootstrap HOST:PORT --topic T --client-id ID --requests 3000
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from confluent_kafka import Producer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--client-id", required=True)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--record-size", type=int, default=3300)
    args = ap.parse_args()
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "client.id": args.client_id,
            "linger.ms": 0,
            "batch.num.messages": 1,
            "acks": 1,
            "compression.type": "none",
            "enable.idempotence": False,
        }
    )
    record = b"x" * args.record_size
    failed: list[str] = []
    latencies: list[float] = []

    def done(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    for _ in range(args.requests):
        started = time.perf_counter()
        producer.produce(args.topic, record, on_delivery=done)
        producer.flush(60)
        latencies.append((time.perf_counter() - started) * 1000)
    if failed:
        raise SystemExit(f"{len(failed)} deliveries failed, e.g. {failed[0]}")
    measured = sorted(latencies[len(latencies) // 10 :])
    cuts = statistics.quantiles(measured, n=100)
    print(json.dumps({"records": args.requests, "requests": args.requests, "p50_ms": cuts[49], "p99_ms": cuts[98]}))


if __name__ == "__main__":
    main()
