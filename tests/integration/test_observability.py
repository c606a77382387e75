"""Spans, metrics and health endpoints of real `vcproxy serve` processes.

* a tenancy proxy (two VCs bound by client id, as in test_tenancy.py) tracing to JSON Lines with
  metrics on: two tenants produce and consume, one produces to a missing topic; the spans and
  /metrics must describe exactly that workload, and every span must be in the files after SIGTERM;
* a SASL proxy on the physical cluster exporting OTLP/HTTP to a collector run by the test:
  authenticate spans for a good and a bad login, and protobuf POSTs on /v1/traces;
* a proxy whose upstream does not answer: /healthz 200, /readyz 503 with the reason.

Ports are free ones chosen at run time (tests/integration/ports.py).
"""

from __future__ import annotations

import http.server
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from proxy.auth.credentials import make_entry
from proxy.protocol.apis import request_type
from vcproxy_tools.process import ProxyProcess, proxy_config

from .ports import free_port, free_port_block
from .rawclient import RawClient
from .tenants import by_client_id, tenancy_config

TENANTS = ("team-a", "team-b")
MESSAGES, VALUE_BYTES = 200, 100
TOPIC = "obs"
PHYSICAL_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.")


# -- helpers ------------------------------------------------------------------------------------------


def get(port: int, path: str) -> tuple[int, str, str]:
    """(status, content type, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, content_type, body = get(port, "/metrics")
    assert status == 200 and content_type.startswith("text/plain"), (status, content_type)
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def total(samples: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def metrics_port(process: ProxyProcess) -> int:
    return process.config["metrics"]["port"]


def scrape_when_open_connections(process: ProxyProcess, count: int, timeout: float = 60) -> dict:
    """The metrics once the proxy has exactly `count` client connections open. A connection's requests
    before its VC is bound (ApiVersions) are counted only when it binds or closes: a metrics read
    before the proxy has seen a client's close may miss them."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(metrics_port(process))
        if total(samples, "vcproxy_connections") == count:
            return samples
        assert time.monotonic() < deadline, f"{total(samples, 'vcproxy_connections')} connections open, not {count}"
        time.sleep(0.1)


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    def value(v: dict[str, Any]) -> Any:
        if "arrayValue" in v:
            return [value(x) for x in v["arrayValue"].get("values", [])]
        if "intValue" in v:
            return int(v["intValue"])
        return next(iter(v.values()))

    return {a["key"]: value(a["value"]) for a in span.get("attributes", [])}


def read_spans(directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(spans with decoded attributes under "attrs", resources) from every traces.jsonl* file."""
    spans, resources = [], []
    for path in sorted(directory.glob("traces.jsonl*")):
        for line in path.read_text().splitlines():
            for resource_spans in json.loads(line)["resourceSpans"]:
                resources.append(attributes(resource_spans["resource"]))
                for scope_spans in resource_spans["scopeSpans"]:
                    assert scope_spans["scope"]["name"] == "vcproxy"
                    for span in scope_spans["spans"]:
                        spans.append({**span, "attrs": attributes(span)})
    return spans, resources


def create_topic(admin: AdminClient, name: str) -> None:
    admin.create_topics([NewTopic(name, 3, 3)], operation_timeout=30)[name].result(60)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} never got leaders")


def produce(config: dict[str, Any], topic: str, count: int) -> None:
    producer = Producer({**config, "acks": "all", "linger.ms": 5})
    errors: list[Any] = []
    for i in range(count):
        value = f"{i:0{VALUE_BYTES}d}".encode()
        producer.produce(topic, value, on_delivery=lambda e, m: errors.append(e) if e else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors


def consume(config: dict[str, Any], topic: str, count: int) -> int:
    consumer = Consumer({**config, "group.id": "obs-group", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 90
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=1):
            if message.error():
                raise KafkaException(message.error())
            seen += 1
    consumer.close()
    return seen


# -- the tenancy proxy: JSON Lines and metrics ---------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("observability")


@pytest.fixture(scope="module")
def tenant_proxy(kafka_cluster, workdir) -> Iterator[ProxyProcess]:
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        by_client_id(TENANTS, "app", "admin"),
        tracing={"enabled": True, "jsonl_dir": str(workdir / "traces"), "jsonl_max_bytes": 200_000, "jsonl_keep": 1000},
        metrics={"enabled": True, "port": free_port()},
    )
    process = ProxyProcess(config, workdir, name="observability").start(timeout=90)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def workload(tenant_proxy) -> dict[str, Any]:
    """Both tenants create, produce to and consume from "obs"; each also produces to a missing topic."""
    cluster_ids = {}
    for tenant in TENANTS:
        admin = AdminClient({"bootstrap.servers": tenant_proxy.bootstrap, "client.id": f"{tenant}-admin"})
        create_topic(admin, TOPIC)
        cluster_ids[tenant] = admin.describe_cluster(request_timeout=20).result().cluster_id
        del admin
    for tenant in TENANTS:
        app = {"bootstrap.servers": tenant_proxy.bootstrap, "client.id": f"{tenant}-app"}
        produce(app, TOPIC, MESSAGES)
        assert consume(app, TOPIC, MESSAGES) == MESSAGES
        missing = Producer({**app, "message.timeout.ms": 2000})
        failures: list[Any] = []
        missing.produce("no-such-topic", b"lost", on_delivery=lambda e, m, out=failures: out.append(e))
        missing.flush(15)
        assert failures and failures[0] is not None  # never delivered: the topic does not exist in the VC
        del missing  # librdkafka's handles close their connections when destroyed
    return {"cluster_ids": cluster_ids, "metrics": scrape_when_open_connections(tenant_proxy, 0)}


def test_health_endpoints_of_a_ready_proxy(tenant_proxy):
    port = metrics_port(tenant_proxy)
    assert get(port, "/healthz")[0] == 200
    status, _, body = get(port, "/readyz")
    assert (status, body.strip()) == (200, "ready")
    assert get(port, "/nothing")[0] == 404
    assert total(scrape(port), "vcproxy_ready") == 1
    assert total(scrape(port), "vcproxy_upstream_connected", node_id="-1") == 1


def test_metrics_count_the_workload_per_virtual_cluster(workload):
    samples, cluster_ids = workload["metrics"], workload["cluster_ids"]
    for tenant in TENANTS:
        labels = {"vc": tenant, "cluster_id": cluster_ids[tenant]}
        assert total(samples, "vcproxy_requests_total", api="Produce", **labels) >= 1
        assert total(samples, "vcproxy_requests_total", api="Fetch", **labels) >= 1
        assert total(samples, "vcproxy_bytes_in_total", **labels) > MESSAGES * VALUE_BYTES
        assert total(samples, "vcproxy_bytes_out_total", **labels) > MESSAGES * VALUE_BYTES
        assert total(samples, "vcproxy_request_errors_total", api="Metadata", error_code="3", **labels) >= 1
        assert total(samples, "vcproxy_request_duration_seconds_count", api="Produce", vc=tenant) >= 1
        assert total(samples, "vcproxy_request_duration_seconds_bucket", api="Produce", vc=tenant, le="+Inf") >= 1
    assert cluster_ids["team-a"] != cluster_ids["team-b"]
    assert total(samples, "vcproxy_connections_accepted_total") >= 6
    assert total(samples, "vcproxy_upstream_connected") >= 1


@pytest.fixture(scope="module")
def spans_after_sigterm(tenant_proxy, workload, workdir) -> dict[str, Any]:
    """A client still connected and just served when SIGTERM comes: its connection span ends after the
    signal, so it reaches the files only if the proxy flushes on its way out.

    The client is a raw one that sends nothing unasked (a librdkafka client may reconnect between the
    metrics read and the signal, and that request would be traced but not counted)."""
    lingering = RawClient(tenant_proxy.bootstrap, timeout=60)
    try:
        hello = request_type(18, 3)(client_software_name="raw", client_software_version="1")
        lingering.send_raw(RawClient.encode(18, 3, 1, hello, client_id="team-a-app"))
        assert lingering.decode(18, 3, lingering.read_frame())[1].api_keys
        metadata = request_type(3, 12)(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        lingering.send_raw(RawClient.encode(3, 12, 2, metadata, client_id="team-a-app"))  # binds team-a
        assert lingering.decode(3, 12, lingering.read_frame())[1].brokers
        metrics = scrape_when_open_connections(tenant_proxy, 1)  # the workload's connections are all closed
        assert tenant_proxy.stop(timeout=60) == 0  # SIGTERM: drain, then flush the exporters
    finally:
        lingering.close()
    spans, resources = read_spans(workdir / "traces")
    return {"spans": spans, "resources": resources, "metrics": metrics}


def test_every_request_span_is_in_the_files_after_sigterm(spans_after_sigterm):
    """/metrics counted each request once; with sample_ratio 1.0 each has its span, none lost at exit."""
    spans = spans_after_sigterm["spans"]
    drained = [s for s in spans if s["name"] == "connection" and s["attrs"]["vcproxy.close_reason"] == "proxy draining"]
    assert drained and all(s["attrs"]["vcproxy.client_id"] == "team-a-app" for s in drained)
    counted: Counter[tuple[str, str]] = Counter()
    for (name, labels), value in spans_after_sigterm["metrics"].items():
        if name == "vcproxy_requests_total":
            labels = dict(labels)
            counted[(labels["api"], labels["vc"])] += int(value)
    traced = Counter(
        (s["name"], s["attrs"].get("vcproxy.virtual_cluster", "kafka-cluster"))
        for s in spans
        if s["name"] not in ("connection", "authenticate")
    )
    assert traced == counted
    instance_ids = {r["service.instance.id"] for r in spans_after_sigterm["resources"]}
    assert len(instance_ids) == 1 and uuid.UUID(instance_ids.pop())
    assert {r["service.name"] for r in spans_after_sigterm["resources"]} == {"vcproxy"}


def test_request_spans_describe_each_tenant_in_its_own_terms(kafka_cluster, workload, spans_after_sigterm):
    spans = spans_after_sigterm["spans"]
    for tenant in TENANTS:
        mine = [s for s in spans if s["attrs"].get("vcproxy.virtual_cluster") == tenant and s["name"] != "connection"]
        assert mine, tenant
        for span in mine:
            a = span["attrs"]
            assert a["vcproxy.virtual_cluster.id"] == workload["cluster_ids"][tenant]
            assert a["vcproxy.principal"] == "User:ANONYMOUS"
            assert a["vcproxy.client_id"] in (f"{tenant}-app", f"{tenant}-admin")
            uuid.UUID(a["vcproxy.client_instance_id"])
            assert a["client.address"] == "127.0.0.1" and a["client.port"] > 0
            assert a["vcproxy.api.name"] == span["name"] and isinstance(a["vcproxy.api.key"], int)
            assert isinstance(a["vcproxy.api.version"], int) and isinstance(a["vcproxy.correlation_id"], int)
            assert a["vcproxy.bytes_in"] > 0 and isinstance(a["vcproxy.local"], bool)
            assert span["kind"] == 2 and int(span["endTimeUnixNano"]) >= int(span["startTimeUnixNano"])
            assert not PHYSICAL_NAME.search(json.dumps(a)), a  # no physical topic or group name
            assert kafka_cluster.cluster_id not in json.dumps(a)

        produce = [s["attrs"] for s in mine if s["name"] == "Produce"]
        assert all(a["vcproxy.topics"] == [TOPIC] and a["vcproxy.api.key"] == 0 for a in produce)
        assert all(a["vcproxy.error_codes"] == [] and a["vcproxy.bytes_out"] > 0 for a in produce)
        assert sum(a["vcproxy.topic_bytes"][0] for a in produce) > MESSAGES * VALUE_BYTES
        fetched = [s["attrs"] for s in mine if s["name"] == "Fetch" and s["attrs"].get("vcproxy.topic_bytes")]
        assert all(a["vcproxy.topics"] == [TOPIC] and a["vcproxy.api.key"] == 1 for a in fetched)
        assert sum(a["vcproxy.topic_bytes"][0] for a in fetched) > MESSAGES * VALUE_BYTES
        failed = [
            s for s in mine if s["name"] == "Metadata" and "no-such-topic" in s["attrs"].get("vcproxy.topics", [])
        ]
        assert failed and all(3 in s["attrs"]["vcproxy.error_codes"] for s in failed)
        assert all(s["status"]["code"] == 2 and "UNKNOWN_TOPIC" in s["status"]["message"] for s in failed)
        created = [s["attrs"] for s in mine if s["name"] == "CreateTopics"]
        assert created and created[0]["vcproxy.topics"] == [TOPIC]
        versions = [s["attrs"] for s in mine if s["name"] == "ApiVersions"]
        assert versions and all(a["vcproxy.api.key"] == 18 for a in versions)


def test_connection_spans(spans_after_sigterm):
    connections = [s for s in spans_after_sigterm["spans"] if s["name"] == "connection"]
    assert len(connections) >= 6
    by_vc = Counter(s["attrs"].get("vcproxy.virtual_cluster") for s in connections)
    assert by_vc["team-a"] >= 2 and by_vc["team-b"] >= 2
    for span in connections:
        a = span["attrs"]
        assert a["client.address"] == "127.0.0.1" and a["vcproxy.close_reason"]
        assert a["vcproxy.listener"] == "bootstrap" or a["vcproxy.listener"].startswith("broker-")
        listener = a["vcproxy.listener"]
        assert a["vcproxy.upstream.node_id"] == (-1 if listener == "bootstrap" else int(listener[len("broker-") :]))
        assert [e["name"] for e in span.get("events", [])] == ["upstream connected"]


# -- SASL on the physical cluster, OTLP/HTTP to a collector ---------------------------------------------


class Collector(http.server.ThreadingHTTPServer):
    def __init__(self, port: int):
        self.posts: list[tuple[str, str, bytes]] = []
        super().__init__(("127.0.0.1", port), _CollectorHandler)


class _CollectorHandler(http.server.BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.posts.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    server = Collector(free_port())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_sasl_logins_give_authenticate_spans_exported_over_otlp_http(kafka_cluster, workdir, collector):
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        credentials={"users": {"alice": make_entry("alice-secret", 4096)}},
        tracing={"enabled": True, "otlp_endpoint": f"http://127.0.0.1:{collector.server_address[1]}"},
        metrics={"enabled": True, "port": free_port()},
    )
    config["listeners"]["security_protocol"] = "SASL_PLAINTEXT"
    process = ProxyProcess(config, workdir, name="sasl-otlp").start(timeout=120)
    try:
        login = {
            "bootstrap.servers": process.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
        }
        topic = f"obs-sasl-{uuid.uuid4().hex[:6]}"
        create_topic(AdminClient({**login, "sasl.password": "alice-secret"}), topic)
        produce({**login, "sasl.password": "alice-secret"}, topic, 10)
        refused = AdminClient({**login, "sasl.password": "wrong"})
        with pytest.raises(KafkaException):
            refused.list_topics(timeout=5)
        del refused
        deadline = time.monotonic() + 60  # the client may give up before the proxy has counted the failure
        while total(samples := scrape(metrics_port(process)), "vcproxy_auth_failures_total") < 1:
            assert time.monotonic() < deadline, "no authentication failure counted"
            time.sleep(0.1)
        assert total(samples, "vcproxy_auth_failures_total", mechanism="SCRAM-SHA-256") >= 1
        assert total(samples, "vcproxy_requests_total", api="Produce", vc="kafka-cluster") >= 1
    finally:
        assert process.stop(timeout=60) == 0

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    assert collector.posts, "nothing reached the collector"
    assert {(path, content_type) for path, content_type, _ in collector.posts} == {
        ("/v1/traces", "application/x-protobuf")
    }
    spans = []
    for _, _, body in collector.posts:
        for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            assert resource["service.name"] == "vcproxy"
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    values = {}
                    for a in span.attributes:
                        kind = a.value.WhichOneof("value")
                        values[a.key] = getattr(a.value, kind) if kind != "array_value" else a.value.array_value
                    spans.append((span, values))
    auth = [(s, a) for s, a in spans if s.name == "authenticate"]
    assert {a["vcproxy.auth.success"] for _, a in auth} == {True, False}
    assert all(a["vcproxy.auth.mechanism"] == "SCRAM-SHA-256" for _, a in auth)
    assert any(a.get("vcproxy.principal") == "User:alice" for _, a in auth)
    connection_ids = {s.span_id for s, _ in spans if s.name == "connection"}
    assert all(s.parent_span_id in connection_ids for s, _ in auth)
    produce_spans = [a for s, a in spans if s.name == "Produce"]
    assert produce_spans and all(a["vcproxy.principal"] == "User:alice" for a in produce_spans)
    assert all("vcproxy.virtual_cluster" not in a for a in produce_spans)
    assert all(a["vcproxy.virtual_cluster.id"] == kafka_cluster.cluster_id for a in produce_spans)
    assert all([v.string_value for v in a["vcproxy.topics"].values] == [topic] for a in produce_spans)


# -- an upstream that does not answer -----------------------------------------------------------------


def test_readyz_is_503_with_the_reason_while_the_upstream_is_unreachable(workdir):
    down_metrics_port = free_port()
    config = proxy_config(
        f"127.0.0.1:{free_port()}", free_port_block(), metrics={"enabled": True, "port": down_metrics_port}
    )  # nothing listens on the upstream port
    config["upstream"]["connect_timeout_seconds"] = 1
    path = workdir / "down.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (workdir / "down.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(path)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if get(down_metrics_port, "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, (workdir / "down.log").read_text()
            time.sleep(0.2)
        deadline = time.monotonic() + 120
        while True:  # the reason names the failure once a discovery attempt has failed
            status, _, reason = get(down_metrics_port, "/readyz")
            assert status == 503, reason
            if "upstream not reachable yet" in reason:
                break
            assert time.monotonic() < deadline, reason
            time.sleep(0.2)
        samples = scrape(down_metrics_port)
        assert total(samples, "vcproxy_ready") == 0
        assert total(samples, "vcproxy_upstream_connected", node_id="-1") == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        log.close()
