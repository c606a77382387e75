"""KIP-714: a client that does not speak KIP-1313 still gets its own instance id in the spans when it
uses client telemetry. A one-broker Kafka with a telemetry exporter installed (without one, Kafka
does not offer the telemetry APIs) logs the id of every push; librdkafka through the proxy must show
the same id in the proxy's spans."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from proxy.protocol import codec
from proxy.protocol.apis import request_type
from vcproxy_tools.kafka.cluster import ClusterInfo, start_cluster, stop_cluster
from vcproxy_tools.kafka.dist import ensure_dist, java_executable
from vcproxy_tools.process import ProxyProcess, proxy_config

from ..jsonl import complete_records
from .ports import free_kafka_base_port, free_port_block
from .rawclient import RawClient
from .tool_jvm import run_tool

SINK = Path(__file__).parent / "telemetry" / "TelemetrySink.java"
PUSH = re.compile(r"vcproxy-telemetry-sink push from (\S+)")


@pytest.fixture(scope="module")
def telemetry_cluster(tmp_path_factory) -> Iterator[ClusterInfo]:
    libs = ensure_dist()
    javac = shutil.which("javac", path=str(Path(java_executable()).resolve().parent)) or shutil.which("javac")
    assert javac, "no javac next to java or on PATH: this test needs a JDK 17+"
    classes = tmp_path_factory.mktemp("telemetry-sink")
    subprocess.run([javac, "-d", str(classes), "-cp", f"{libs}/*", str(SINK)], check=True, timeout=180)
    info = start_cluster(
        tmp_path_factory.mktemp("telemetry-kafka"),
        brokers=1,
        base_port=free_kafka_base_port(brokers=1),
        extra_classpath=[classes],
        extra_properties={"metric.reporters": "TelemetrySink"},
        timeout=180,
    )
    try:
        # Subscribe every client to every metric each second, so pushes come quickly.
        out = run_tool(
            "kafka-configs",
            [
                "--bootstrap-server",
                info.bootstrap,
                "--alter",
                "--entity-type",
                "client-metrics",
                "--entity-name",
                "all",
                "--add-config",
                "metrics=*,interval.ms=1000",
            ],
        )
        assert out.returncode == 0, out.stdout + out.stderr
        yield info
    finally:
        stop_cluster(info.dir)


@pytest.fixture(scope="module")
def traced_proxy(telemetry_cluster, tmp_path_factory) -> Iterator[tuple[ProxyProcess, Path]]:
    workdir = tmp_path_factory.mktemp("telemetry-proxy")
    config = proxy_config(
        telemetry_cluster.bootstrap, free_port_block(), tracing={"enabled": True, "jsonl_dir": str(workdir / "traces")}
    )
    process = ProxyProcess(config, workdir, name="telemetry").start(timeout=120)
    yield process, workdir / "traces"
    process.stop()


def pushed_ids(cluster: ClusterInfo) -> set[uuid.UUID]:
    """The client instance ids the broker received pushes from (Kafka prints them base64url)."""
    text = "".join(p.read_text(errors="replace") for p in cluster.dir.glob("n*/*.log"))
    return {uuid.UUID(bytes=base64.urlsafe_b64decode(m + "==")) for m in PUSH.findall(text)}


def span_ids(directory: Path) -> dict[str, set[str]]:
    """source -> instance ids, over every request span exported so far."""
    out: dict[str, set[str]] = {}
    for data in complete_records(directory):
        for rs in data.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    attrs: dict[str, Any] = {a["key"]: a["value"].get("stringValue") for a in span["attributes"]}
                    source = attrs.get("vcproxy.client_instance_id.source")
                    if source is not None and "vcproxy.api.name" in attrs:
                        out.setdefault(source, set()).add(attrs["vcproxy.client_instance_id"])
    return out


def test_librdkafka_instance_id_learnt_from_its_telemetry(telemetry_cluster, traced_proxy):
    proxy, traces = traced_proxy
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "client.id": "telemetry-app"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        producer.produce("telemetry-topic", b"x")
        producer.poll(0.5)
        pushed = pushed_ids(telemetry_cluster)
        learnt = span_ids(traces).get("telemetry", set())
        if pushed and {str(u) for u in pushed} <= learnt:
            break
    producer.flush(10)
    assert pushed, "the broker got no telemetry push through the proxy"
    assert {str(u) for u in pushed} <= span_ids(traces).get("telemetry", set())


def test_broker_assigned_id_is_taken_up_by_the_connection(telemetry_cluster, traced_proxy):
    """A raw KIP-714 client: GetTelemetrySubscriptions v0 with the zero id, then other requests."""
    proxy, traces = traced_proxy
    with RawClient(proxy.bootstrap) as client:
        _, versions = client.request(
            18, 3, 1, request_type(18, 3)(client_software_name="t", client_software_version="1")
        )
        assert {int(k.api_key) for k in versions.api_keys} >= {71, 72}, "telemetry APIs not offered through the proxy"
        _, subscription = client.request(71, 0, 2, request_type(71, 0)(client_instance_id=uuid.UUID(int=0)))
        assigned = str(subscription.client_instance_id)
        assert int(subscription.error_code) == 0 and assigned != str(uuid.UUID(int=0))
        client.request(16, 5, 3, codec._empty(request_type(16, 5)))
    deadline = time.monotonic() + 120
    while assigned not in span_ids(traces).get("telemetry", set()):
        assert time.monotonic() < deadline, span_ids(traces)
        time.sleep(0.5)
