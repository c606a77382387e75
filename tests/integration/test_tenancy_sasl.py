"""Two virtual clusters bound by SASL principal (alice -> team-a, bob -> team-b), with identical topic,
group and transactional names, used at the same time through one real proxy, by confluent-kafka and
by Kafka's own Java tools; plus an unbound principal (admin) that sees the physical cluster, and a
proxy that refuses unbound principals.

Ports: free blocks chosen at run time (tests/integration/ports.py).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.auth.credentials import make_entry
from proxy.tenancy.model import TenancyImage, VirtualCluster
from vcproxy_tools.demo import java_client_properties
from vcproxy_tools.process import ProxyProcess, proxy_config

from .polling import refused
from .ports import free_port_block
from .tenants import own, replayed
from .tool_jvm import run_tool

USERS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}
TENANTS = {"alice": "team-a", "bob": "team-b"}  # admin is a super-admin (in kafka-cluster) on the first proxy
PHYSICAL_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.")
TOOL_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tenancy-sasl")


@pytest.fixture(scope="module")
def state_topic() -> str:
    return f"__vcproxy_state_sasl_{uuid.uuid4().hex[:6]}"


def _tenancy_proxy(kafka_cluster, workdir: Path, name: str, port: int, state_topic: str, refuse: bool) -> ProxyProcess:
    config = proxy_config(
        kafka_cluster.bootstrap,
        port,
        listeners={"security_protocol": "SASL_PLAINTEXT"},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        tenancy={
            "enabled": True,
            "state_topic": state_topic,
            "virtual_clusters": [{"name": vc, "principals": [f"User:{user}"]} for user, vc in TENANTS.items()],
            "super_admins": [] if refuse else ["User:admin"],
        },
    )
    return ProxyProcess(config, workdir, name=name).start(timeout=120)


@pytest.fixture(scope="module")
def proxy(kafka_cluster, workdir, state_topic) -> Iterator[ProxyProcess]:
    process = _tenancy_proxy(kafka_cluster, workdir, "tenancy-sasl", free_port_block(), state_topic, refuse=False)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def refusing_proxy(kafka_cluster, workdir, state_topic, proxy) -> Iterator[ProxyProcess]:
    """A second replica on the same state topic (same VCs) where admin is no super-admin: in no VC, refused."""
    process = _tenancy_proxy(
        kafka_cluster, workdir, "tenancy-sasl-refusing", free_port_block(), state_topic, refuse=True
    )
    yield process
    process.stop()


@pytest.fixture(scope="module")
def command_configs(workdir) -> dict[str, Path]:
    """--command-config files for Kafka's Java tools: SCRAM-SHA-512 logins (the demo writes the same)."""
    paths = {}
    for user, password in USERS.items():
        path = workdir / f"{user}.properties"
        path.write_text(java_client_properties(user, password))
        paths[user] = path
    return paths


def alive(process: ProxyProcess) -> str:
    assert process.proc is not None and process.proc.poll() is None, f"proxy died:\n{process.log_tail()}"
    return process.bootstrap


def client(process: ProxyProcess, user: str, mechanism: str = "SCRAM-SHA-512", **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": alive(process),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS[user],
        **extra,
    }


def state(kafka_cluster, process: ProxyProcess) -> TenancyImage:
    return replayed(kafka_cluster, process)


def vc_of(image: TenancyImage, user: str) -> VirtualCluster:
    return image.vcs[TENANTS[user]]


def vc_groups(kafka_cluster, vc: VirtualCluster) -> set[str]:
    """The VC's groups as its tenant names them, read from the physical cluster (`<vc-uuid>.<group>`)."""
    physical = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})  # must outlive its future
    groups = physical.list_consumer_groups().result(30).valid
    return {g.group_id.removeprefix(vc.prefix) for g in groups if g.group_id.startswith(vc.prefix)}


def ensure_topic(conf: dict[str, Any], name: str, partitions: int = 3) -> None:
    """Create `name` (RF 3) unless it exists, then wait until every partition has a leader."""
    admin = AdminClient(conf)
    try:
        admin.create_topics([NewTopic(name, partitions, 3)], operation_timeout=30)[name].result(60)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} never got leaders")


def produce(conf: dict[str, Any], topic: str, values: list[str]) -> None:
    producer = Producer({**conf, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    errors: list[KafkaError] = []
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda e, _m: errors.append(e) if e else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors


def consume(conf: dict[str, Any], topic: str, group: str, count: int, timeout: float = 90, **extra: Any) -> list[str]:
    """Read until `count` values (or the timeout), then a little longer to catch anything extra; commit."""
    consumer = Consumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}
    )
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1):
                if msg.error():
                    raise KafkaException(msg.error())
                seen.append(msg.value().decode())
            if len(seen) >= count:
                deadline = min(deadline, time.monotonic() + 2)  # extra records would show up here
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def concurrently(fn: Callable[[str], Any], users: tuple[str, ...] = tuple(TENANTS)) -> dict[str, Any]:
    """Run fn(user) for each user at the same time; re-raises the first failure."""
    with ThreadPoolExecutor(len(users)) as pool:
        futures = {user: pool.submit(fn, user) for user in users}
        return {user: future.result() for user, future in futures.items()}


# -- confluent-kafka ------------------------------------------------------------------------------------

COUNTS = {"alice": 300, "bob": 200}  # different, so committed offsets tell the tenants apart
MECHANISMS = {"alice": ("SCRAM-SHA-512", "PLAIN"), "bob": ("PLAIN", "SCRAM-SHA-512")}  # (produce, consume)


def test_confluent_identical_names_at_the_same_time(kafka_cluster, proxy):
    def workload(user: str) -> dict[str, list[str]]:
        produce_mech, consume_mech = MECHANISMS[user]
        conf = client(proxy, user, produce_mech)
        ensure_topic(conf, "orders")
        ensure_topic(conf, "payments", partitions=1)
        produce(conf, "orders", [f"{user}-{i}" for i in range(COUNTS[user])])
        # Transactional id "tx" in both VCs at once: a shared id would fence the other tenant's producer.
        producer = Producer({**conf, "transactional.id": "tx", "acks": "all"})
        producer.init_transactions(30)
        for round_ in range(3):
            producer.begin_transaction()
            producer.produce("payments", f"{user}-tx-{round_}".encode())
            producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce("payments", f"{user}-aborted".encode())
        assert producer.flush(30) == 0  # registered before the abort (librdkafka issue 4849: test_forwarder.py)
        producer.abort_transaction(30)
        reader = client(proxy, user, consume_mech)
        return {
            "orders": consume(reader, "orders", "shared-group", COUNTS[user]),
            "payments": consume(reader, "payments", "tx-group", 3, **{"isolation.level": "read_committed"}),
        }

    seen = concurrently(workload)
    for user in TENANTS:
        assert sorted(seen[user]["orders"]) == sorted(f"{user}-{i}" for i in range(COUNTS[user]))
        assert seen[user]["payments"] == [f"{user}-tx-{r}" for r in range(3)]

    image = state(kafka_cluster, proxy)
    cluster_ids = {}
    for user in TENANTS:
        vc = vc_of(image, user)
        admin = AdminClient(client(proxy, user))
        listed = admin.list_topics(timeout=10)
        assert {"orders", "payments"} <= set(listed.topics)
        assert own(listed.topics) == set(vc.links), f"{user} lists {sorted(listed.topics)}"
        described = admin.describe_cluster(request_timeout=20).result(30)
        assert described.cluster_id == listed.cluster_id == vc.cluster_id  # Metadata and DescribeCluster agree
        assert {n.rack for n in described.nodes} == {b.rack for b in kafka_cluster.brokers}
        cluster_ids[user] = described.cluster_id
        for group, topic, expected in (("shared-group", "orders", COUNTS[user]), ("tx-group", "payments", None)):
            committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
            assert {tp.topic for tp in committed.topic_partitions} == {topic}, committed.topic_partitions
            if expected is not None:
                assert sum(tp.offset for tp in committed.topic_partitions) == expected
            else:  # 3 committed records at 0, 2, 4 (a marker after each), then an aborted one and its marker
                assert 5 <= committed.topic_partitions[0].offset <= 8, committed.topic_partitions
    assert cluster_ids["alice"] != cluster_ids["bob"]
    assert kafka_cluster.cluster_id not in cluster_ids.values()
    # Two physical topics per name, one per VC.
    assert vc_of(image, "alice").links["orders"] != vc_of(image, "bob").links["orders"]
    log = proxy.log_path.read_text(errors="replace")
    for user, (produce_mech, consume_mech) in MECHANISMS.items():
        assert f"authenticated User:{user} with {produce_mech}" in log
        assert f"authenticated User:{user} with {consume_mech}" in log
        assert f"User:{user} (client id 'rdkafka') is in virtual cluster {TENANTS[user]}" in log


# -- Kafka's Java tools ---------------------------------------------------------------------------------

CLI_TOPIC = "cli-orders"
CLI_GROUP = "cli-group"
CLI_LINES = {"alice": 12, "bob": 7}


@dataclass
class ToolRun:
    name: str
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    oracle: set[str] | None = None  # what the listing must show, taken from the physical cluster right after

    def ok(self) -> str:
        assert self.returncode == 0, (
            f"{self.name} {' '.join(self.args)} exited {self.returncode}:\n{self.stderr[-4000:]}"
        )
        return self.stdout


def tool(proxy: ProxyProcess, configs: dict[str, Path], user: str, name: str, *args: str, **kw: Any) -> ToolRun:
    argv = ["--bootstrap-server", alive(proxy), "--command-config", str(configs[user]), *args]
    result = run_tool(name, argv, timeout=kw.pop("timeout", TOOL_TIMEOUT), **kw)
    return ToolRun(name, list(args), result.returncode, result.stdout, result.stderr)


def table(text: str, first: str) -> list[dict[str, str]]:
    """Rows of the whitespace-separated table whose header starts with `first`, up to a blank line (the
    tools print "-" for empty cells, so every row has every column)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        header = line.split()
        if header and header[0] == first:
            rows = []
            for row in lines[i + 1 :]:
                if not row.strip():
                    break
                cells = row.split()
                assert len(cells) == len(header), f"row {row!r} does not fit header {header}"
                rows.append(dict(zip(header, cells, strict=True)))
            return rows
    raise AssertionError(f"no table with a {first!r} column in:\n{text}")


def console_consume(proxy: ProxyProcess, configs: dict[str, Path], user: str) -> ToolRun:
    return tool(
        proxy,
        configs,
        user,
        "kafka-console-consumer",
        "--topic",
        CLI_TOPIC,
        "--group",
        CLI_GROUP,
        "--from-beginning",
        "--max-messages",
        str(CLI_LINES[user]),
        "--timeout-ms",
        "60000",
    )


@pytest.fixture(scope="module")
def java_runs(kafka_cluster, proxy, command_configs) -> dict[str, dict[str, ToolRun]]:
    """Each tenant's session with Kafka's tools, both tenants at the same time, every tool's result kept
    (the tests below assert on them, so one failing tool fails its own test, with its stderr)."""

    def session(user: str) -> dict[str, ToolRun]:
        def run(name: str, *args: str, **kw: Any) -> ToolRun:
            return tool(proxy, command_configs, user, name, *args, **kw)

        runs = {
            "create": run(
                "kafka-topics", "--create", "--topic", CLI_TOPIC, "--partitions", "3", "--replication-factor", "3"
            ),
            "list": run("kafka-topics", "--list"),
            "describe": run("kafka-topics", "--describe", "--topic", CLI_TOPIC),
        }
        runs["list"].oracle = set(vc_of(state(kafka_cluster, proxy), user).links)
        lines = [f"{user}-line-{i}" for i in range(CLI_LINES[user])]
        runs["produce"] = run(
            "kafka-console-producer", "--topic", CLI_TOPIC, input="".join(f"{line}\n" for line in lines)
        )
        runs["consume"] = console_consume(proxy, command_configs, user)
        runs["groups"] = run("kafka-consumer-groups", "--list")
        runs["groups"].oracle = vc_groups(kafka_cluster, vc_of(state(kafka_cluster, proxy), user))
        runs["describe-group"] = run("kafka-consumer-groups", "--describe", "--group", CLI_GROUP)
        runs["reset"] = run(
            "kafka-consumer-groups",
            "--reset-offsets",
            "--group",
            CLI_GROUP,
            "--topic",
            CLI_TOPIC,
            "--to-earliest",
            "--execute",
        )
        runs["consume-again"] = console_consume(proxy, command_configs, user)
        return runs

    return concurrently(session)


def test_java_kafka_topics_create_list_describe(kafka_cluster, proxy, java_runs):
    image = state(kafka_cluster, proxy)
    for user, runs in java_runs.items():
        assert f"Created topic {CLI_TOPIC}." in runs["create"].ok()
        listed = runs["list"].ok().split()
        assert CLI_TOPIC in listed
        assert own(listed) == runs["list"].oracle, f"{user} lists {listed}"
        assert not any(PHYSICAL_NAME.search(name) for name in listed)
        described = runs["describe"].ok()
        summary = described.splitlines()[0]
        fields = dict(part.split(": ", 1) for part in summary.split("\t") if ": " in part)
        assert fields["Topic"] == CLI_TOPIC, described
        assert fields["PartitionCount"] == "3" and fields["ReplicationFactor"] == "3", described
        partitions = [line for line in described.splitlines() if "\tPartition: " in line]
        assert len(partitions) == 3 and all(f"Topic: {CLI_TOPIC}\t" in line for line in partitions), described
        assert not PHYSICAL_NAME.search(described)
    assert vc_of(image, "alice").links[CLI_TOPIC] != vc_of(image, "bob").links[CLI_TOPIC]


def test_java_console_producer_and_consumer_group(java_runs):
    for user, runs in java_runs.items():
        runs["produce"].ok()
        expected = sorted(f"{user}-line-{i}" for i in range(CLI_LINES[user]))
        assert sorted(runs["consume"].ok().split()) == expected, runs["consume"].stderr[-2000:]


def test_java_consumer_groups_list_and_describe(java_runs):
    for user, runs in java_runs.items():
        listed = set(runs["groups"].ok().split())
        assert CLI_GROUP in listed
        # Exactly the VC's groups, without their prefix: the physical cluster is the oracle.
        assert listed == runs["groups"].oracle, f"{user} lists {listed}"
        rows = table(runs["describe-group"].ok(), "GROUP")
        assert {r["GROUP"] for r in rows} == {CLI_GROUP} and {r["TOPIC"] for r in rows} == {CLI_TOPIC}, rows
        assert sum(int(r["CURRENT-OFFSET"]) for r in rows) == CLI_LINES[user], rows
        assert all(r["LAG"] == "0" for r in rows), rows
        assert not PHYSICAL_NAME.search(runs["groups"].stdout + runs["describe-group"].stdout)


def test_java_reset_offsets_to_earliest_rereads(java_runs):
    for user, runs in java_runs.items():
        rows = table(runs["reset"].ok(), "GROUP")
        assert {r["GROUP"] for r in rows} == {CLI_GROUP} and {r["TOPIC"] for r in rows} == {CLI_TOPIC}, rows
        assert sorted(int(r["PARTITION"]) for r in rows) == [0, 1, 2] and all(r["NEW-OFFSET"] == "0" for r in rows)
        expected = sorted(f"{user}-line-{i}" for i in range(CLI_LINES[user]))
        assert sorted(runs["consume-again"].ok().split()) == expected


def test_java_tools_hit_no_unexpected_refusal(proxy, java_runs):
    """What the tools sent was translated, not refused: the one refusal is ListPartitionReassignments
    (kafka-topics --describe asks for it and shows none on CLUSTER_AUTHORIZATION_FAILED, as with a
    user lacking the cluster ACL). Anything else here is a translation gap worth reporting."""
    log = proxy.log_path.read_text(errors="replace").splitlines()
    refused = [line for line in log if "refusing request:" in line or ": closing: " in line]
    unexpected = [line for line in refused if "list_partition_reassignments in virtual cluster" not in line]
    assert not unexpected, "\n".join(unexpected)


def test_java_kafka_transactions_list(proxy, command_configs):
    def transact(user: str) -> ToolRun:
        conf = client(proxy, user)
        ensure_topic(conf, "cli-tx", partitions=1)
        producer = Producer({**conf, "transactional.id": "tx", "acks": "all"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("cli-tx", f"{user}-tx".encode())
        producer.commit_transaction(30)
        return tool(proxy, command_configs, user, "kafka-transactions", "list")

    for user, run in concurrently(transact).items():
        rows = table(run.ok(), "TransactionalId")
        assert [r["TransactionalId"] for r in rows] == ["tx"], f"{user}: {run.stdout}"
        assert not PHYSICAL_NAME.search(run.stdout)


# -- kafka-cluster (the super-admin) and principals in no virtual cluster (refused) ------------------------


def test_super_admin_sees_the_physical_cluster(kafka_cluster, proxy, command_configs):
    for user in TENANTS:  # something of each VC's to look for: a topic, a group, a transactional id
        conf = client(proxy, user)
        ensure_topic(conf, "admin-view")
        produce(conf, "admin-view", [user])
        assert consume(conf, "admin-view", "admin-view-group", 1) == [user]
        Producer({**conf, "transactional.id": "tx"}).init_transactions(30)
    image = state(kafka_cluster, proxy)
    admin = AdminClient(client(proxy, "admin", "PLAIN"))
    listed = admin.list_topics(timeout=10)
    assert listed.cluster_id == kafka_cluster.cluster_id
    physical = {vc_of(image, user).links["admin-view"] for user in TENANTS}
    assert len(physical) == 2 and physical <= set(listed.topics), sorted(listed.topics)
    assert all(PHYSICAL_NAME.match(name) for name in physical)
    assert "admin-view" not in listed.topics
    described = admin.describe_cluster(request_timeout=20).result(30)
    assert described.cluster_id == kafka_cluster.cluster_id
    groups = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    assert {vc_of(image, user).physical_id("admin-view-group") for user in TENANTS} <= groups
    # Kafka's tools as admin: the physical transactional ids of both VCs.
    rows = table(tool(proxy, command_configs, "admin", "kafka-transactions", "list").ok(), "TransactionalId")
    ids = {r["TransactionalId"] for r in rows}
    assert {vc_of(image, user).physical_id("tx") for user in TENANTS} <= ids
    assert "tx" not in ids
    assert "User:admin (client id 'rdkafka') is in virtual cluster" not in proxy.log_path.read_text(errors="replace")


def test_principals_in_no_vc_are_refused_at_login(kafka_cluster, proxy, refusing_proxy):
    errors: list[KafkaError] = []
    admin = AdminClient({**client(refusing_proxy, "admin"), "error_cb": errors.append})
    refused(admin, errors, lambda e: e.code() == KafkaError._AUTHENTICATION)
    assert errors, "the refused client reported no error"
    log = refusing_proxy.log_path.read_text(errors="replace")
    assert "authenticated User:admin with SCRAM-SHA-512" in log  # the login is fine; the principal is not
    assert "refusing User:admin: in no virtual cluster" in log
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors  # told, not left retrying
    image = state(kafka_cluster, proxy)
    listed = AdminClient(client(refusing_proxy, "alice")).list_topics(timeout=20)
    assert listed.cluster_id == vc_of(image, "alice").cluster_id  # same state topic: same VC as on the first proxy
    assert own(listed.topics) == set(vc_of(image, "alice").links)
