"""A known two-tenant workload through the proxy, its spans exported, the Spark job run over them:
the aggregates must say what the workload did (request counts exactly, bytes within framing)."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from vcproxy_tools.process import ProxyProcess

from .ports import free_port_block
from .tenants import by_client_id, tenancy_config

SIZE = 1000
PRODUCED = {"team-a": 40, "team-b": 25}
BATCH_OVERHEAD = 200  # record batch header + record framing per single-record Produce, generously


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def wait_for_leader(admin: AdminClient, topic: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        found = admin.list_topics(topic, timeout=30).topics.get(topic)
        if found is not None and found.error is None and all(p.leader >= 0 for p in found.partitions.values()):
            return
        assert time.monotonic() < deadline, f"{topic} has no leader"
        time.sleep(0.2)


def test_spark_aggregates_match_the_workload(kafka_cluster, tmp_path):
    traces = tmp_path / "traces"
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        by_client_id(PRODUCED),
        tracing={"enabled": True, "sample_ratio": 1.0, "jsonl_dir": str(traces)},
    )
    proxy = ProxyProcess(config, tmp_path, name="traced").start(timeout=120)
    try:
        for tenant, count in PRODUCED.items():
            conf = {"bootstrap.servers": proxy.bootstrap, "client.id": f"{tenant}-app"}
            admin = AdminClient(conf)
            admin.create_topics([NewTopic("orders", 1, 3)])["orders"].result(60)
            wait_for_leader(admin, "orders")  # else a Produce could be refused and retried: one request too many
            # One message per Produce request: linger 0, one in flight, flush after each.
            producer = Producer({**conf, "linger.ms": 0, "max.in.flight": 1, "acks": "all", "batch.num.messages": 1})
            for _ in range(count):
                producer.produce("orders", b"x" * SIZE, key=None)
                assert producer.flush(30) == 0
            consumer = Consumer({**conf, "group.id": "reader", "auto.offset.reset": "earliest"})
            consumer.subscribe(["orders"])
            seen, deadline = 0, time.monotonic() + 60
            while seen < count and time.monotonic() < deadline:
                seen += sum(1 for m in consumer.consume(100, timeout=1) if not m.error())
            consumer.close()
            assert seen == count
    finally:
        assert proxy.stop(timeout=60) == 0  # SIGTERM drains and flushes the span files

    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "vcproxy_tools", "traces", "aggregate", "--input", str(traces), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    by_api = {(r["virtual_cluster"], r["api"]): r for r in _rows(out / "requests_by_api.csv")}
    showback = {(r["virtual_cluster"], r["topic"]): r for r in _rows(out / "topic_showback.csv")}
    for tenant, count in PRODUCED.items():
        assert int(by_api[(tenant, "Produce")]["requests"]) == count  # exactly the workload's requests
        assert int(by_api[(tenant, "Produce")]["errors"]) == 0
        assert int(by_api[(tenant, "CreateTopics")]["requests"]) == 1
        produced = int(showback[(tenant, "orders")]["bytes_produced"])
        assert count * SIZE <= produced <= count * (SIZE + BATCH_OVERHEAD), produced
        fetched = int(showback[(tenant, "orders")]["bytes_fetched"])
        assert fetched >= count * SIZE, fetched
    assert {vc for vc, _ in showback} >= set(PRODUCED)
    assert "team-a" in (out / "report.html").read_text() and "team-b" in (out / "report.html").read_text()
