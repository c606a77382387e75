"""Clients that measure what got through: bytes by time, and the throttle librdkafka reported (test_quotas,
test_workers)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

VALUE = 1000  # bytes per record
TIMEOUT = 120.0  # a flow that got nothing through ends this long after its start


class Flow:
    """Bytes a client got through, by time, and the largest throttle its librdkafka statistics reported."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []
        self.throttle_ms = 0
        self.errors: list[Any] = []
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        with self.lock:
            self.events.append((time.monotonic(), n))

    def stats(self, text: str) -> None:
        brokers = json.loads(text).get("brokers", {}).values()
        self.throttle_ms = max([self.throttle_ms, *(b.get("throttle", {}).get("max", 0) for b in brokers)])

    def rate(self, start: float, end: float) -> float:
        """Bytes per second from the first event at or after `start` to the first at or after `end`:
        throttled clients get through in bursts (one per mute), and an interval from burst to burst
        holds whole bursts only, where one cut by a fixed edge would be off by a burst."""
        with self.lock:
            times = [t for t, _ in self.events]
            first = next(t for t in times if t >= start)
            last = next((t for t in times if t >= end), times[-1])
            assert last - first >= 0.8 * (end - start), f"too few events: {first:.1f}..{last:.1f}"
            return sum(n for t, n in self.events if first <= t < last) / (last - first)

    @property
    def first(self) -> float:
        assert self.events, f"nothing got through (errors: {self.errors[:3]})"
        return self.events[0][0]


def _ends(flow: Flow, start: float, seconds: float) -> float:
    """When a flow of `seconds` ends: counted from its first record through, since a loaded machine can take
    seconds to log in, join a group or fetch metadata, and the rates are measured from there (v9 of issue 24:
    a consumer's first record came 5 s after its start, and its window ran past the end); or TIMEOUT after the
    start when nothing got through at all."""
    with flow.lock:
        first = flow.events[0][0] if flow.events else None
    return first + seconds if first is not None else start + seconds + TIMEOUT


PACE_BURST = 0.1  # seconds of `pace` a paced producer may send at once after falling behind


def produce_for(config: dict[str, Any], topic: str, seconds: float, pace: float | None = None) -> Flow:
    """Produce VALUE-byte records for `seconds` from the first acknowledged one, as fast as the producer may,
    or at `pace` bytes/s from that first acknowledgement. The pace is a token bucket holding at most PACE_BURST
    seconds of it: a producer that fell behind (connecting, or starved of CPU on a loaded machine) does not
    catch up in a burst, which made a short run measure above its pace (3.40-3.43 MB/s against 3.0 in v30,
    v33 and v39) and a long one look slower beside it."""
    flow = Flow()
    producer = Producer(
        {**config, "acks": "all", "linger.ms": 5, "queue.buffering.max.kbytes": 2048,
         "statistics.interval.ms": 1000, "stats_cb": flow.stats}
    )  # fmt: skip

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            flow.errors.append(err)
        else:
            flow.add(len(msg.value()))

    value = b"v" * VALUE
    start = time.monotonic()
    sent = 0
    credit, filled = float(VALUE), None  # the bucket, and when it was last filled (None: not acknowledged yet)
    while (now := time.monotonic()) < _ends(flow, start, seconds):
        if pace is not None:
            if filled is None:
                with flow.lock:
                    filled = flow.events[0][0] if flow.events else None
            if filled is not None:
                credit, filled = min(credit + pace * (now - filled), max(PACE_BURST * pace, VALUE)), now
            # One record until the first is acknowledged, then `pace` from then on.
            if (filled is None and sent) or credit < VALUE:
                producer.poll(0.002)
                continue
        try:
            producer.produce(topic, value, on_delivery=delivered)
            sent += VALUE
            credit -= VALUE
        except BufferError:
            producer.poll(0.02)
        producer.poll(0)
    producer.flush(60)
    return flow


def consume_for(config: dict[str, Any], topic: str, seconds: float) -> Flow:
    flow = Flow()
    consumer = Consumer(
        {**config, "group.id": f"q-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
         "fetch.max.bytes": 1048576, "max.partition.fetch.bytes": 262144, "queued.max.messages.kbytes": 1024,
         "statistics.interval.ms": 1000, "stats_cb": flow.stats}
    )  # fmt: skip
    consumer.subscribe([topic])
    start = time.monotonic()
    try:
        while time.monotonic() < _ends(flow, start, seconds):
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                flow.add(len(msg.value()))
            consumer.poll(0)  # statistics callbacks
    finally:
        consumer.close()
    return flow
