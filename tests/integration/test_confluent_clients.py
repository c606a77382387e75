"""confluent-kafka (librdkafka) through the proxy against the real 3-broker, 3-rack cluster."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.core.endpoints import ListenerLayout

MESSAGES = 10_000


def _layout(proxy) -> ListenerLayout:
    listeners = proxy.config["listeners"]
    return ListenerLayout("127.0.0.1", listeners["bootstrap_port"], listeners["bootstrap_port"] + 1)


def test_admin_sees_only_proxy_endpoints_with_true_ids_racks_and_cluster_id(kafka_cluster, proxy, proxy_bootstrap):
    admin = AdminClient({"bootstrap.servers": proxy_bootstrap})
    metadata = admin.list_topics(timeout=20)
    layout = _layout(proxy)
    upstream_ids = sorted(b.node_id for b in kafka_cluster.brokers)
    assert sorted(metadata.brokers) == upstream_ids
    for node_id, broker in metadata.brokers.items():
        assert (broker.host, broker.port) == ("127.0.0.1", layout.broker_port(node_id))
    assert metadata.cluster_id == kafka_cluster.cluster_id

    described = admin.describe_cluster(request_timeout=20).result()
    assert described.cluster_id == kafka_cluster.cluster_id
    racks = {node.id: node.rack for node in described.nodes}
    assert racks == {b.node_id: b.rack for b in kafka_cluster.brokers}
    assert {(n.host, n.port) for n in described.nodes} == {("127.0.0.1", layout.broker_port(i)) for i in racks}
    assert described.controller is not None and described.controller.id in racks


def _create_topic(admin: AdminClient, name: str, partitions: int = 3, rf: int = 3, **config: str) -> None:
    futures = admin.create_topics([NewTopic(name, partitions, rf, config=config)], operation_timeout=30)
    futures[name].result(timeout=60)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until every partition has a leader
        topic = admin.list_topics(name, timeout=10).topics[name]
        if (
            topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {name} not ready")


def test_idempotent_producer_and_consumer_group_roundtrip(proxy_bootstrap):
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    group = f"group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": proxy_bootstrap})
    _create_topic(admin, topic, partitions=3, rf=3)
    described = admin.list_topics(topic, timeout=10).topics[topic]
    assert all(len(p.replicas) == 3 for p in described.partitions.values())

    acked: list[int] = []
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is None:
            acked.append(int(msg.value()))
        else:
            errors.append(str(err))

    producer = Producer(
        {"bootstrap.servers": proxy_bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    )
    for i in range(MESSAGES):
        while True:
            try:
                producer.produce(topic, value=str(i).encode(), key=str(i % 97).encode(), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == [] and sorted(acked) == list(range(MESSAGES))

    consumer = Consumer(
        {
            "bootstrap.servers": proxy_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: set[int] = set()
    deadline = time.monotonic() + 180
    while len(seen) < MESSAGES and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=1):
            if msg.error():
                raise KafkaException(msg.error())
            seen.add(int(msg.value()))
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=20)
    consumer.close()
    assert seen == set(range(MESSAGES))
    assert sum(tp.offset for tp in committed) == MESSAGES


def test_acks_zero_produce_needs_no_response_and_keeps_the_connection_in_sync(proxy_bootstrap):
    topic = f"acks0-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": proxy_bootstrap})
    _create_topic(admin, topic, partitions=1, rf=3)
    producer = Producer({"bootstrap.servers": proxy_bootstrap, "acks": 0, "linger.ms": 1})
    for i in range(2000):
        producer.produce(topic, str(i).encode())
        producer.poll(0)
    assert producer.flush(30) == 0
    # Requests that do expect answers still get theirs on the same connections.
    assert producer.list_topics(topic, timeout=10).topics[topic].error is None
    consumer = Consumer(
        {"bootstrap.servers": proxy_bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    seen: set[int] = set()
    deadline = time.monotonic() + 180
    while len(seen) < 2000 and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=1):
            if not msg.error():
                seen.add(int(msg.value()))
    consumer.close()
    assert seen == set(range(2000))
