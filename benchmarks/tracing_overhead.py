"""Micro benchmark: what request spans and metrics add to the session's per-request work.

Each request goes through the same calls as in proxy/net/connection.py: the session decides, the
recorder's on_request, the session rewrites the response, the recorder's on_reply. Modes alternate
in rounds (machine load hits all of them alike); CPU is the whole process (`time.process_time`), so
the span export thread (JSON Lines to a temporary directory, flushed at the end of each run) counts.

Run: .venv/bin/python benchmarks/tracing_overhead.py [requests_per_run] [rounds]
"""

from __future__ import annotations

import datetime
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v16.response import FetchableTopicResponse, FetchResponse, PartitionData
from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v11.response import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from kio.static.primitive import i32, i64

from proxy.core.endpoints import ListenerLayout
from proxy.core.session import ProxySession
from proxy.observability.metrics import Metrics
from proxy.observability.tracing import Telemetry, Tracing
from proxy.protocol import codec
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, encode_response_header

LAYOUT = ListenerLayout("127.0.0.1", 9192, 9193)
PARTITIONS = 6


def produce_pair(correlation_id: int, record_bytes: int) -> tuple[bytes, bytes]:
    request = codec._empty(
        ProduceRequest,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(
                name="orders",
                partition_data=tuple(
                    PartitionProduceData(index=i32(i), records=b"r" * record_bytes) for i in range(PARTITIONS)
                ),
            ),
        ),
    )
    response = codec._empty(
        ProduceResponse,
        responses=(
            codec._empty(
                TopicProduceResponse,
                name="orders",
                partition_responses=tuple(codec._empty(PartitionProduceResponse, index=i) for i in range(PARTITIONS)),
            ),
        ),
    )
    return (
        frame(encode_request_header(0, 11, correlation_id, "bench-producer", 2) + codec.encode(request)),
        frame(encode_response_header(correlation_id, 1) + codec.encode(response)),
    )


def fetch_pair(correlation_id: int, record_bytes: int) -> tuple[bytes, bytes]:
    parts = tuple(
        PartitionData(
            partition_index=i32(i),
            error_code=ErrorCode.none,
            high_watermark=i64(10),
            aborted_transactions=None,
            records=b"x" * record_bytes,
        )
        for i in range(PARTITIONS)
    )
    body = FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=i32(1),
        responses=(FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=parts),),
    )
    request = frame(encode_request_header(1, 16, correlation_id, "bench-consumer", 2) + b"\x00" * 8)
    return request, frame(encode_response_header(correlation_id, 1) + codec.encode(body))


@dataclass
class Mode:
    name: str
    make: Callable[[str], Telemetry | None]


def modes() -> list[Mode]:
    def tracing(ratio: float, metrics: bool) -> Callable[[str], Telemetry]:
        return lambda tmp: Telemetry(
            Tracing(sample_ratio=ratio, jsonl_dir=tmp, jsonl_max_bytes=50 * 2**20, jsonl_keep=2),
            Metrics() if metrics else None,
            lambda: "physical-cluster-id",
        )

    return [
        Mode("off", lambda tmp: None),
        Mode("metrics", lambda tmp: Telemetry(None, Metrics(), lambda: "physical-cluster-id")),
        Mode("tracing 0.01", tracing(0.01, False)),
        Mode("tracing 0.1", tracing(0.1, False)),
        Mode("tracing 1.0", tracing(1.0, False)),
        Mode("tracing 1.0 + metrics", tracing(1.0, True)),
    ]


def run(mode: Mode, pairs: list[tuple[bytes, bytes]], count: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per request, export flush included."""
    with tempfile.TemporaryDirectory() as tmp:
        telemetry = mode.make(tmp)
        session = ProxySession(LAYOUT)
        recorder = telemetry.connection(("127.0.0.1", 50000), 1) if telemetry is not None else None
        if recorder is not None:
            recorder.session = session
        views = [(memoryview(req), memoryview(bytearray(resp))) for req, resp in pairs]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(count):
            request, response = views[i % len(views)]
            started = time.time_ns() if recorder is not None else 0
            decision = session.on_request(request)
            if recorder is not None:
                recorder.on_request(request, decision, started)
            result = session.on_response(response)
            if recorder is not None:
                recorder.on_reply(result.pieces, response)
        if telemetry is not None and telemetry.tracing is not None:
            telemetry.tracing.shutdown()  # the export thread's work is part of the cost
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return wall / count * 1e6, cpu / count * 1e6


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    # Half produce (6 x 16 KB), half fetch (6 x 64 KB): each pair shares its correlation id.
    pairs = [produce_pair(2 * i, 16_384) for i in range(8)] + [fetch_pair(2 * i + 1, 65_536) for i in range(8)]
    results: dict[str, list[tuple[float, float]]] = {m.name: [] for m in modes()}
    for _ in range(rounds):
        for mode in modes():
            results[mode.name].append(run(mode, pairs, count))
    # Best of the rounds: other work on the machine only ever adds time (as timeit does); medians too.
    best_cpu = {name: min(c for _, c in values) for name, values in results.items()}
    median_cpu = {name: statistics.median(c for _, c in values) for name, values in results.items()}
    base, base_median = best_cpu["off"], median_cpu["off"]
    print(f"{count} requests per run (produce 6x16KB / fetch 6x64KB alternating), {rounds} rounds")
    print(f"{'mode':<24}{'CPU µs/req':>12}{'+µs':>8}{'+%':>7}{'median':>10}{'+%':>7}{'req/s/core':>12}")
    for name in results:
        cpu, median = best_cpu[name], median_cpu[name]
        print(
            f"{name:<24}{cpu:>12.1f}{cpu - base:>8.1f}{100 * (cpu / base - 1):>6.0f}%"
            f"{median:>10.1f}{100 * (median / base_median - 1):>6.0f}%{1e6 / cpu:>12,.0f}"
        )


if __name__ == "__main__":
    main()
