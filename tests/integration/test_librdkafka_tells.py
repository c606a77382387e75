"""The tells librdkafka's own suite found through a virtual cluster (issue 25), with a real client.

librdkafka creates topics with CreateTopics v4, whose answer has no topic id, and its KIP-848 consumer
(`group.protocol=consumer`) asks Metadata by id, name null, for the partitions a heartbeat assigns it.
The proxy had learned no id for such a topic: the assignment showed the zero id, the broker refused
Metadata for it as a whole (UNKNOWN_SERVER_ERROR, no brokers) and the consumer logged "Metadata request
failed" until a periodic refresh by name, 300 s later (0118_commit_rebalance: 312 s instead of 10 s).
"""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from vcproxy_tools.process import ProxyProcess

from ..gobuild import go_build
from .ports import free_port_block
from .tenants import by_client_id, tenancy_config
from .test_tenancy import conf, produce


@pytest.fixture(scope="module")
def vc_proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("librdkafka-tells")
    config = tenancy_config(kafka_cluster, free_port_block(), by_client_id(("team-a", "team-b"), "app"))
    process = ProxyProcess(config, workdir, name="librdkafka-tells").start(timeout=120)
    yield process
    process.stop()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_kip848_consumer_gets_its_assignment_by_topic_id_through_a_vc(vc_proxy):
    config = conf(vc_proxy, "team-a")
    topic = f"by-id-{uuid.uuid4().hex[:8]}"
    # Created the librdkafka way (CreateTopics v4: no id in the answer) and never described by name before
    # the consumer's heartbeat assigns it: the proxy meets the topic's id first in that assignment.
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 3, 3)], operation_timeout=30)[topic].result(60)
    lines = _Lines()
    logger = logging.getLogger(f"librdkafka.{topic}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    consumer = Consumer(
        {
            **config,
            "group.id": f"kip848-{topic}",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "logger": logger,
        }
    )
    try:
        consumer.subscribe([topic])
        # The assignment first (before any Metadata by name could teach the proxy the id) ...
        deadline = time.monotonic() + 60  # the failure this guards against lasts 300 s (metadata refresh)
        while len(consumer.assignment()) < 3:
            assert time.monotonic() < deadline, f"no assignment: {lines.lines[-20:]}"
            for msg in consumer.consume(10, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
        # ... then records, consumed from every assigned partition.
        produce(config, topic, [str(i) for i in range(30)])
        seen: list[str] = []
        while len(seen) < 30:
            assert time.monotonic() < deadline + 60, f"consumed {len(seen)} of 30: {lines.lines[-20:]}"
            for msg in consumer.consume(30, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                seen.append(msg.value().decode())
        assert sorted(int(v) for v in seen) == list(range(30))
    finally:
        consumer.close()
    failed = [line for line in lines.lines if "Metadata request failed" in line]
    assert not failed, failed


def test_franz_gos_version_probe_names_the_brokers_release_through_a_vc(kafka_cluster, vc_proxy, tmp_path):
    """`kcl misc probe-version` said "at least v3.9" through a VC and "v4.2" directly: the share-state
    APIs a 4.2 broker lists to clients were left out of ApiVersions."""
    probe = go_build(Path(__file__).parent / "probe_version", tmp_path / "probe_version")

    def guess(bootstrap: str, client_id: str) -> str:
        done = subprocess.run([str(probe), bootstrap, client_id], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    direct = guess(kafka_cluster.bootstrap.split(",")[0], "probe")
    assert direct == "v4.2", direct  # the test cluster is Kafka 4.2
    assert guess(vc_proxy.bootstrap, "team-a-app") == direct
