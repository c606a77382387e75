"""Kafka's own Java tools (from the Maven artifacts) through the proxy."""

from __future__ import annotations

import json
import re
import uuid

from vcproxy_tools.kafka.tools import run_tool


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def _events(stdout: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # deprecation notices and the like
    return out


def test_kafka_topics_create_describe_list(proxy_bootstrap):
    topic = f"jt-{uuid.uuid4().hex[:8]}"
    b = ["--bootstrap-server", proxy_bootstrap]
    _ok(
        run_tool(
            "kafka-topics",
            [*b, "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "3"],
            timeout=120,
        )
    )
    described = _ok(run_tool("kafka-topics", [*b, "--describe", "--topic", topic], timeout=120))
    assert "ReplicationFactor: 3" in described
    assert len(re.findall(rf"Topic: {topic}\s+Partition: \d", described)) == 3
    assert topic in _ok(run_tool("kafka-topics", [*b, "--list"], timeout=120)).split()


def test_java_client_sees_proxy_endpoints_with_racks(kafka_cluster, proxy, proxy_bootstrap):
    out = _ok(run_tool("kafka-broker-api-versions", ["--bootstrap-server", proxy_bootstrap], timeout=120))
    port = proxy.config["listeners"]["bootstrap_port"]
    for broker in kafka_cluster.brokers:
        assert f"127.0.0.1:{port + 1 + broker.node_id} (id: {broker.node_id} rack: {broker.rack}" in out
    assert f":{kafka_cluster.brokers[0].port} " not in out  # no upstream address leaks


def test_console_producer_consumer_and_consumer_groups(proxy_bootstrap):
    topic, group = f"console-{uuid.uuid4().hex[:8]}", f"cg-{uuid.uuid4().hex[:8]}"
    b = ["--bootstrap-server", proxy_bootstrap]
    _ok(
        run_tool(
            "kafka-topics",
            [*b, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "3"],
            timeout=120,
        )
    )
    lines = [f"line-{i}" for i in range(20)]
    _ok(run_tool("kafka-console-producer", [*b, "--topic", topic], input="\n".join(lines) + "\n", timeout=120))
    consumed = _ok(
        run_tool(
            "kafka-console-consumer",
            [
                *b,
                "--topic",
                topic,
                "--group",
                group,
                "--from-beginning",
                "--max-messages",
                "20",
                "--timeout-ms",
                "60000",
            ],
            timeout=120,
        )
    )
    assert consumed.split() == lines
    described = _ok(run_tool("kafka-consumer-groups", [*b, "--describe", "--group", group], timeout=120))
    row = next(line.split() for line in described.splitlines() if line.split()[:2] == [group, topic])
    assert row[2:5] == ["0", "20", "20"]  # partition, committed offset, log end offset
    assert group in _ok(run_tool("kafka-consumer-groups", [*b, "--list"], timeout=120)).split()


def test_verifiable_producer_and_consumer_every_acked_message_consumed(proxy_bootstrap):
    topic, group = f"verify-{uuid.uuid4().hex[:8]}", f"vg-{uuid.uuid4().hex[:8]}"
    b = ["--bootstrap-server", proxy_bootstrap]
    _ok(
        run_tool(
            "kafka-topics",
            [
                *b,
                "--create",
                "--topic",
                topic,
                "--partitions",
                "3",
                "--replication-factor",
                "3",
                "--config",
                "min.insync.replicas=2",
            ],
            timeout=120,
        )
    )
    produced = _events(
        _ok(
            run_tool(
                "kafka-verifiable-producer",
                [*b, "--topic", topic, "--max-messages", "3000", "--acks", "-1"],
                timeout=180,
            )
        )
    )
    acked = {e["value"] for e in produced if e.get("name") == "producer_send_success"}
    assert len(acked) == 3000
    consumed = _events(
        _ok(
            run_tool(
                "kafka-verifiable-consumer",
                [
                    *b,
                    "--topic",
                    topic,
                    "--group-id",
                    group,
                    "--max-messages",
                    "3000",
                    "--verbose",
                    "--reset-policy",
                    "earliest",
                ],
                timeout=180,
            )
        )
    )
    values = {e["value"] for e in consumed if e.get("name") == "record_data"}
    assert acked <= values
    commits = [e for e in consumed if e.get("name") == "offsets_committed"]
    assert commits and all(c["success"] for c in commits)
