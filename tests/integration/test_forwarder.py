"""Real clients through a passthrough proxy whose plain requests go by the forwarder (docs/architecture.md#the-
forwarder-plain-requests-off-the-interpreter): everything arrives, in order, and the forwarder did serve."""

from __future__ import annotations

import re
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from vcproxy_tools.kafka.tools import run_tool
from vcproxy_tools.process import ProxyProcess, proxy_config

from .ports import free_port_block

SERVED = re.compile(r"the forwarder served (\d+) requests \((\w[\w-]*)\)")


def test_librdkafka_and_java_clients_are_served_by_the_forwarder_and_lose_nothing(kafka_cluster, tmp_path):
    # DEBUG: each time the forwarder hands a connection back, it says how many requests it served.
    config = proxy_config(kafka_cluster.bootstrap, free_port_block(), logging={"level": "DEBUG"})
    proxy = ProxyProcess(config, tmp_path).start()
    try:
        bootstrap = proxy.bootstrap
        topic = f"forwarded-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(timeout=60)

        sent = [f"m-{i}".encode() for i in range(3000)]
        # Small batches: a few hundred Produce requests.
        producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0, "batch.num.messages": 10}
        )
        for i, value in enumerate(sent):
            producer.produce(topic, value, key=str(i % 7).encode())
            if i % 500 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        # Kafka's own producer (Produce v13 by topic id: answers skipped to their tagged section) and consumer.
        run_tool(
            "kafka-producer-perf-test",
            ["--topic", topic, "--num-records", "2000", "--record-size", "100", "--throughput", "-1",
             "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=0"],
            timeout=180,
        )  # fmt: skip
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got: dict[bytes, list[bytes]] = {}
        received = 0
        deadline = time.monotonic() + 120
        while received < 5000 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None or message.error() is not None:
                continue
            received += 1
            if message.key() is not None:
                got.setdefault(message.key(), []).append(message.value())
        consumer.close()
        assert received == 5000
        for k in range(7):  # one key, one partition: in the order produced
            assert got[str(k).encode()] == [v for i, v in enumerate(sent) if i % 7 == k]
    finally:
        proxy.stop()
    log = proxy.log_path.read_text()
    served = [int(n) for n, _kind in SERVED.findall(log)]
    # About 330 of the producers' and the consumer's requests were the forwarder's in every run so far (the rest:
    # ApiVersions, Metadata, FindCoordinator..., and plain ones sent while an answer the Python path awaited was
    # outstanding). A third of that is a margin for a loaded machine, and far above none.
    assert sum(served) >= 100, log[-3000:]
    assert not re.search(r"closing: (ProtocolViolation|FrameError)|internal error|panicked", log), log[-3000:]
