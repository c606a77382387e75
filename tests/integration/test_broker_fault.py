"""A broker stops and restarts while an idempotent producer runs through the proxy."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from .test_confluent_clients import _create_topic


def test_broker_bounce_loses_no_acked_message(kafka_cluster, proxy_bootstrap):
    topic = f"bounce-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": proxy_bootstrap})
    _create_topic(admin, topic, partitions=3, rf=3, **{"min.insync.replicas": "2"})
    # Not the controller: the cluster keeps its metadata quorum while this broker is down.
    victim = max(b.node_id for b in kafka_cluster.brokers)

    acked: list[int] = []
    failed: list[str] = []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err:
            failed.append(str(err))
        else:
            acked.append(int(msg.value()))

    def produce() -> None:
        producer = Producer(
            {
                "bootstrap.servers": proxy_bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, value=str(i).encode(), on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            producer.poll(0.002)
        producer.flush(120)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        _wait(lambda: len(acked) > 2000, 120, "producer never got going")
        kafka_cluster.stop_broker(victim)
        # The outage lasts until the cluster has noticed it (the victim is fenced), not a fixed time.
        direct = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
        _wait(lambda: victim not in direct.list_topics(timeout=10).brokers, 120, "the stopped broker was never fenced")
        before_restart = len(acked)
        kafka_cluster.start_broker(victim)
        _wait(lambda: len(acked) > before_restart + 2000, 180, "producer did not recover after the bounce")
    finally:
        stop.set()
        thread.join(150)
    assert not thread.is_alive()
    assert failed == [], failed[:5]

    consumer = Consumer(
        {
            "bootstrap.servers": proxy_bootstrap,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: list[int] = []
    deadline = time.monotonic() + 120
    target = set(acked)
    got: set[int] = set()
    while not target <= got and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=1):
            if not msg.error():
                seen.append(int(msg.value()))
                got.add(seen[-1])
    consumer.close()
    missing = target - got
    assert not missing, f"{len(missing)} acked messages lost, e.g. {sorted(missing)[:10]}"
    assert len(seen) == len(got), "idempotent producer wrote duplicates"


def _wait(condition, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.1)
