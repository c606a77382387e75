"""The local Kafka launcher against real brokers: topology, Java tools, SASL, broker bounce, clean stop."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from vcproxy_tools.kafka import cli
from vcproxy_tools.kafka import cluster as cluster_mod
from vcproxy_tools.kafka.cluster import load_cluster, start_cluster, stop_cluster
from vcproxy_tools.kafka.tools import run_tool

from .ports import free_kafka_base_port
from .processes import java_processes_mentioning


def _live_brokers(bootstrap: str) -> dict[int, str | None]:
    """node id -> rack of the brokers the cluster reports alive (fenced ones are left out)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future (else _DESTROY)
    desc = admin.describe_cluster(request_timeout=10).result(timeout=20)
    return {n.id: n.rack for n in desc.nodes}


def _live_ids(bootstrap: str) -> set[int] | None:
    """Broker ids in a fresh Metadata response, or None while the cluster cannot answer.

    Not DescribeCluster: librdkafka sends that to the "controller" the metadata names, which can be the
    broker just killed.
    """
    try:
        return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)
    except KafkaException:
        return None


def _wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting until {what}"
        time.sleep(0.5)


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def test_three_brokers_with_racks(kafka_cluster):
    assert _live_brokers(kafka_cluster.bootstrap) == {1: "r1", 2: "r2", 3: "r3"}
    metadata = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap}).list_topics(timeout=20)
    assert metadata.cluster_id == kafka_cluster.cluster_id
    assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {
        b.node_id: (b.host, b.port) for b in kafka_cluster.brokers
    }
    assert [b.rack for b in kafka_cluster.brokers] == ["r1", "r2", "r3"]


def test_state_files(kafka_cluster):
    assert (kafka_cluster.dir / "bootstrap.txt").read_text().strip() == kafka_cluster.bootstrap
    assert load_cluster(kafka_cluster.dir) == kafka_cluster
    assert len(kafka_cluster.bootstrap.split(",")) == len(kafka_cluster.sasl_bootstrap.split(",")) == 3


def test_kafka_topics_tool(kafka_cluster):
    topic = f"launcher-{uuid.uuid4().hex[:8]}"
    b = ["--bootstrap-server", kafka_cluster.bootstrap]
    create = [*b, "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "3"]
    assert f"Created topic {topic}" in _ok(run_tool("kafka-topics", create, version=kafka_cluster.version))
    described = _ok(run_tool("kafka-topics", [*b, "--describe", "--topic", topic], version=kafka_cluster.version))
    assert "ReplicationFactor: 3" in described
    partitions = re.findall(rf"Topic: {topic}\s+Partition: (\d)\s+Leader: \d\s+Replicas: (\S+)", described)
    assert sorted(p for p, _ in partitions) == ["0", "1", "2"]
    assert all(sorted(r.split(",")) == ["1", "2", "3"] for _, r in partitions)


def test_cli_tool_passes_args_and_exit_code(kafka_cluster, capfd):
    assert (
        cli.main(["kafka", "tool", "kafka-cluster", "cluster-id", "--bootstrap-server", kafka_cluster.bootstrap]) == 0
    )
    assert f"Cluster ID: {kafka_cluster.cluster_id}" in capfd.readouterr().out
    assert cli.main(["kafka", "tool", "kafka-topics", "--no-such-flag"]) != 0


@pytest.mark.parametrize(
    ("mechanism", "user"), [("SCRAM-SHA-512", "alice"), ("SCRAM-SHA-256", "vcproxy"), ("PLAIN", "bob")]
)
def test_sasl_login(kafka_cluster, mechanism, user):
    errors: list[KafkaError] = []
    admin = AdminClient(
        {
            "bootstrap.servers": kafka_cluster.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": f"{user}-secret",
            "error_cb": errors.append,
        }
    )
    assert sorted(admin.list_topics(timeout=20).brokers) == [1, 2, 3]
    assert not errors


def test_sasl_rejects_a_wrong_password(kafka_cluster):
    errors: list[KafkaError] = []
    admin = AdminClient(
        {
            "bootstrap.servers": kafka_cluster.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "wrong",
            "error_cb": errors.append,
            "log_level": 0,
        }
    )
    with pytest.raises(Exception):  # noqa: B017 - librdkafka reports it as a transport failure
        admin.list_topics(timeout=5)
    deadline = time.monotonic() + 60  # the error callback may come after the failed call
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        admin.poll(0.2)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_stop_and_start_broker(kafka_cluster, hard):
    kafka_cluster.stop_broker(3, hard=hard)
    try:
        # After SIGKILL the controller fences the broker once its session (4 s) expires.
        _wait_until(lambda: _live_ids(kafka_cluster.bootstrap) == {1, 2}, 120, "broker 3 is gone")
    finally:
        kafka_cluster.start_broker(3)
    _wait_until(lambda: _live_ids(kafka_cluster.bootstrap) == {1, 2, 3}, 120, "broker 3 is back")


def test_stop_cluster_leaves_no_process(tmp_path, monkeypatch):
    base_port = free_kafka_base_port(brokers=1)
    # Exercise the launcher's no-confluent-kafka path too: readiness through Kafka's own Java tools.
    monkeypatch.setattr(cluster_mod, "_confluent_admin", lambda: None)
    info = start_cluster(tmp_path / "solo", brokers=1, base_port=base_port, timeout=180)
    try:
        assert info.bootstrap == f"127.0.0.1:{base_port}" and info.sasl_bootstrap is None
        assert _live_brokers(info.bootstrap) == {1: None}
        assert java_processes_mentioning(info.dir)
    finally:
        stop_cluster(info.dir)
    assert java_processes_mentioning(info.dir) == []
    stop_cluster(info.dir)  # idempotent
    cluster_mod.check_ports_free([(base_port, "client"), (base_port + 1, "controller")])
