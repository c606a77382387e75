"""The state topic is guarded, checked and restorable (issue 8, class 10).

Two proxy replicas share one state topic on the session's real Kafka: on `plain`, the super-admin `ops`
(in kafka-cluster: the physical cluster's view) is not a state topic reader; on `operator` it is
(`tenancy.state_topic_readers`). The attacks are real clients (confluent-kafka)
and hand-built frames; the state is replayed independently of the proxies before and after. A third
proxy on a state topic of its own has that topic deleted under it.
"""

from __future__ import annotations

import copy
import http.client
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic
from kio.schema.errors import ErrorCode

from proxy.auth.credentials import make_entry
from proxy.protocol.apis import request_type
from proxy.state.backup import image_records
from proxy.state.store import StateStore, encode_value
from proxy.tenancy.model import TenancyImage, link_record
from tests.integration.rawclient import RawClient
from tests.integration.test_fail_closed import build
from vcproxy_tools.process import READY_LINE, ProxyProcess

from .ports import free_port_block
from .tenants import by_client_id, replayed, tenancy_config

TENANTS = ("team-a", "team-b")
UNBOUND = "ops-tool"  # a client id in no VC
# ops is a super-admin: in kafka-cluster, the physical cluster's view (the guard holds for it too);
# tenant has no binding of its own: its client id places it (team-a-app, team-b-app).
USERS = {"ops": "ops-secret", "tenant": "tenant-secret"}
DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED


def sasl(user: str) -> dict[str, object]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def guarded_config(kafka_cluster: object, port: int, **tenancy: object) -> dict:
    return tenancy_config(
        kafka_cluster,
        port,
        by_client_id(TENANTS),
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["PLAIN"]},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        tenancy={"super_admins": ["User:ops"], **tenancy},
    )


@pytest.fixture(scope="module")
def proxies(kafka_cluster, tmp_path_factory) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    workdir = tmp_path_factory.mktemp("state-guard")
    config = guarded_config(kafka_cluster, free_port_block())
    plain = ProxyProcess(config, workdir, name="plain").start(timeout=120)
    operator_config = copy.deepcopy(config)
    operator_config["listeners"]["bootstrap_port"] = free_port_block()
    operator_config["tenancy"]["state_topic_readers"] = ["User:ops"]
    operator = ProxyProcess(operator_config, workdir, name="operator").start(timeout=120)
    admin = AdminClient({"bootstrap.servers": plain.bootstrap, "client.id": "team-a-app", **sasl("tenant")})
    admin.create_topics([NewTopic("orders", 1, 3)])["orders"].result(60)
    yield plain, operator
    operator.stop()
    plain.stop()


def state_topic(proxy: ProxyProcess) -> str:
    return proxy.config["tenancy"]["state_topic"]


def unbound(proxy: ProxyProcess, **extra: object) -> dict[str, object]:
    """The operator's view: a super-admin in kafka-cluster (a reader of the state topic on `operator` only)."""
    return {"bootstrap.servers": proxy.bootstrap, "client.id": UNBOUND, **sasl("ops"), **extra}


def test_an_unbound_principal_cannot_hand_a_tenant_anothers_topic(kafka_cluster, proxies):
    plain, operator = proxies
    before = image_records(replayed(kafka_cluster, plain))
    a_orders = replayed(kafka_cluster, plain).vcs["team-a"].links["orders"]
    key, value = link_record("team-b", "stolen", a_orders)
    for proxy in (plain, operator):  # readers may read, never write
        errors: list[KafkaError] = []
        producer = Producer(unbound(proxy, acks="all"))
        deliver = lambda error, msg, errors=errors: errors.append(error)  # noqa: E731
        producer.produce(state_topic(proxy), key=key.encode(), value=encode_value(value), on_delivery=deliver)
        producer.flush(30)
        assert [e.code() for e in errors] == [DENIED], errors
    # Hand-built Produce (by name; by topic id the same rule holds, see the unit tests).
    request = build(
        request_type(0, 9),
        acks=-1,
        timeout_ms=5000,
        topic_data=[{"name": state_topic(plain), "partition_data": [{"index": 0, "records": b""}]}],
    )
    with RawClient(operator.bootstrap) as client:
        client.login_plain("ops", USERS["ops"], client_id=UNBOUND)
        client.send_raw(RawClient.encode(0, 9, 1, request, client_id=UNBOUND))
        _, response = RawClient.decode(0, 9, client.read_frame())
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
    assert image_records(replayed(kafka_cluster, plain)) == before
    assert "stolen" not in replayed(kafka_cluster, plain).vcs["team-b"].links


def test_an_unbound_principal_cannot_delete_truncate_or_reconfigure_it(kafka_cluster, proxies):
    plain, operator = proxies
    topic = state_topic(plain)
    for proxy in (plain, operator):
        admin = AdminClient(unbound(proxy))
        with pytest.raises(KafkaException) as info:
            admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
        assert info.value.args[0].code() == DENIED
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        change = ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)
        resource.add_incremental_config(change)
        with pytest.raises(KafkaException) as info:
            admin.incremental_alter_configs([resource])[resource].result(60)
        assert info.value.args[0].code() == DENIED
        with pytest.raises(KafkaException) as info:
            admin.create_partitions([NewPartitions(topic, 3)])[topic].result(60)
        assert info.value.args[0].code() == DENIED
    # DeleteRecords, hand-built (librdkafka's needs the partition leader from Metadata first).
    request = build(
        request_type(21, 2),
        topics=[{"name": topic, "partitions": [{"partition_index": 0, "offset": 1}]}],
        timeout_ms=5000,
    )
    for proxy in (plain, operator):
        with RawClient(proxy.bootstrap) as client:
            client.login_plain("ops", USERS["ops"], client_id=UNBOUND)
            client.send_raw(RawClient.encode(21, 2, 1, request, client_id=UNBOUND))
            _, response = RawClient.decode(21, 2, client.read_frame())
        assert response.topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    broker = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    described = broker.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    [configs] = [f.result(30) for f in described.values()]
    assert configs["cleanup.policy"].value == "compact"
    metadata = broker.list_topics(topic, timeout=10).topics[topic]
    assert metadata.error is None and len(metadata.partitions) == 1
    low, high = StateStore({"bootstrap.servers": kafka_cluster.bootstrap}, topic).end_offsets()
    assert low == 0 and high > 0  # never truncated


def consume_all(proxy: ProxyProcess, topic: str) -> tuple[list[bytes], KafkaError | None]:
    consumer = Consumer(unbound(proxy, **{"group.id": f"g-{uuid.uuid4()}", "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    keys: list[bytes] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return keys, None
                return keys, msg.error()
            keys.append(msg.key())
        raise AssertionError("neither records nor an error within 120 s")
    finally:
        consumer.close()


def test_only_state_topic_readers_see_or_read_it(proxies):
    plain, operator = proxies
    topic = state_topic(plain)
    assert topic not in AdminClient(unbound(plain)).list_topics(timeout=10).topics
    metadata = build(request_type(3, 12), topics=[{"name": topic}])
    fetch = build(
        request_type(1, 12),
        replica_id=-1,
        max_wait_ms=100,
        max_bytes=1 << 20,
        topics=[{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
    )
    with RawClient(plain.bootstrap) as client:  # a consumer's two requests, by hand: librdkafka stops at the first
        client.login_plain("ops", USERS["ops"], client_id=UNBOUND)
        client.send_raw(RawClient.encode(3, 12, 1, metadata, client_id=UNBOUND))
        _, described = RawClient.decode(3, 12, client.read_frame())
        client.send_raw(RawClient.encode(1, 12, 2, fetch, client_id=UNBOUND))
        _, fetched = RawClient.decode(1, 12, client.read_frame())
    [state] = described.topics
    assert state.error_code == ErrorCode.topic_authorization_failed and not state.partitions
    assert fetched.error_code == ErrorCode.topic_authorization_failed and not fetched.responses
    assert topic in AdminClient(unbound(operator)).list_topics(timeout=10).topics
    keys, error = consume_all(operator, topic)
    assert error is None and b'["vc","team-a"]' in keys


def get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vcproxy_tools", "state", *args], capture_output=True, text=True, timeout=120
    )


def test_export_then_import_into_a_fresh_state_topic_replays_to_the_same_image(kafka_cluster, proxies, tmp_path):
    plain, _ = proxies
    export = cli("export", "--config", str(plain.config_path))
    assert export.returncode == 0, export.stderr
    backup = tmp_path / "backup.jsonl"
    backup.write_text(export.stdout)
    fresh = copy.deepcopy(plain.config)
    fresh["tenancy"]["state_topic"] = f"__vcproxy_restored_{uuid.uuid4().hex[:6]}"
    fresh_path = tmp_path / "fresh.yaml"
    fresh_path.write_text(yaml.safe_dump(fresh))
    restored = cli("import", "--config", str(fresh_path), str(backup))
    assert restored.returncode == 0, restored.stderr
    original = replayed(kafka_cluster, plain)
    image = TenancyImage()
    StateStore({"bootstrap.servers": kafka_cluster.bootstrap}, fresh["tenancy"]["state_topic"]).replay(image)
    assert image_records(image) == image_records(original)
    assert image.vcs["team-a"].cluster_id == original.vcs["team-a"].cluster_id
    assert image.vcs["team-a"].links["orders"] == original.vcs["team-a"].links["orders"]
    again = cli("import", "--config", str(fresh_path), str(backup))
    assert again.returncode == 1 and "not empty" in again.stderr
    forced = cli("import", "--config", str(fresh_path), str(backup), "--force")
    assert forced.returncode == 0, forced.stderr
    image = TenancyImage()
    StateStore({"bootstrap.servers": kafka_cluster.bootstrap}, fresh["tenancy"]["state_topic"]).replay(image)
    assert image_records(image) == image_records(original)


@pytest.fixture
def doomed(kafka_cluster, tmp_path: Path) -> Iterator[tuple[ProxyProcess, int]]:
    metrics = free_port_block(1)
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        by_client_id(TENANTS),
        tenancy={"state_check_interval_seconds": 0.5},
        metrics={"enabled": True, "port": metrics},
    )
    proxy = ProxyProcess(config, tmp_path, name="doomed").start(timeout=120)
    yield proxy, metrics
    proxy.stop()


def test_a_deleted_state_topic_makes_the_proxy_not_ready_and_refuse_topic_changes(kafka_cluster, doomed):
    proxy, metrics = doomed
    assert get(metrics, "/readyz")[0] == 200
    topic = state_topic(proxy)
    broker = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    broker.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 120
    while (status := get(metrics, "/readyz"))[0] == 200:
        assert time.monotonic() < deadline, "still ready 120 s after the state topic was deleted"
        time.sleep(0.2)
    assert status[0] == 503 and "does not exist" in status[1], status
    tenant = AdminClient({"bootstrap.servers": proxy.bootstrap, "client.id": "team-a-app"})
    with pytest.raises(KafkaException) as info:
        tenant.create_topics([NewTopic("after", 1, 3)])["after"].result(60)
    error = info.value.args[0]
    assert error.code() == KafkaError.POLICY_VIOLATION and "does not exist" in error.str(), error
    # Ten more checks: the topic never comes back (no state client auto-creates it).
    for _ in range(10):
        status = get(metrics, "/readyz")
        assert status[0] == 503, status
        assert topic not in broker.list_topics(timeout=10).topics
        time.sleep(0.5)  # one check interval: the proxy looks again between our looks
    log = proxy.log_path.read_text(errors="replace")
    assert "Traceback" not in log, proxy.log_tail(lines=60)


def test_a_missing_state_topic_waits_for_an_operator_when_create_state_topic_is_false(kafka_cluster, tmp_path):
    metrics = free_port_block(1)
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        by_client_id(TENANTS),
        tenancy={"create_state_topic": False},
        metrics={"enabled": True, "port": metrics},
    )
    proxy = ProxyProcess(config, tmp_path, name="no-create")
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(proxy.start, 300)  # never ready: stopped below once /readyz says why
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    status = get(metrics, "/readyz")
                except OSError:  # not listening yet
                    status = (0, "")
                if "create_state_topic is false" in status[1]:
                    break
                assert time.monotonic() < deadline, f"no reason on /readyz: {status}"
                time.sleep(0.2)
            assert status[0] == 503
            assert (
                state_topic(proxy)
                not in AdminClient({"bootstrap.servers": kafka_cluster.bootstrap}).list_topics(timeout=10).topics
            )
            assert get(metrics, "/readyz")[0] == 503 and READY_LINE not in proxy.log_path.read_text()
        finally:
            proxy.stop(timeout=60)
        with pytest.raises(RuntimeError, match="exited"):  # it was still waiting when stopped
            starting.result()
