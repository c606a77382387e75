"""Two virtual clusters with identical names on one physical cluster, through one real proxy.

Tenants are told apart here by client id (KIP-1134 binds client ids as well as principals), so the
test needs no SASL; tests/integration/test_tenancy_sasl.py does the same by principal.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from vcproxy_tools.process import ProxyProcess

from .ports import free_port_block
from .tenants import by_client_id, own, replayed, tap_bytes, tenancy_config

TENANTS = ("team-a", "team-b")


@pytest.fixture(scope="module")
def tenant_proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("tenancy")
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        by_client_id(TENANTS, "app", "admin"),
        debug={"tap_dir": str(workdir / "tap")},
    )
    process = ProxyProcess(config, workdir, name="tenancy").start(timeout=120)
    yield process
    process.stop()


def conf(proxy: ProxyProcess, tenant: str, **extra) -> dict:
    return {"bootstrap.servers": proxy.bootstrap, "client.id": f"{tenant}-app", **extra}


def create(admin: AdminClient, name: str, partitions: int = 3) -> None:
    admin.create_topics([NewTopic(name, partitions, 3)], operation_timeout=30)[name].result(60)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} never got leaders")


def produce(config: dict, topic: str, values: list[str], **extra) -> None:
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", **extra})
    errors = []
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda e, m: errors.append(e) if e else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors


def consume(config: dict, topic: str, group: str, count: int, timeout: float = 90, **extra) -> list[str]:
    consumer = Consumer(
        {**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}
    )
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while len(seen) < count and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=1):
            if msg.error():
                raise KafkaException(msg.error())
            seen.append(msg.value().decode())
    consumer.commit(asynchronous=False)
    consumer.close()
    return seen


def test_same_names_in_two_vcs_are_two_isolated_topics_and_groups(kafka_cluster, tenant_proxy):
    for tenant in TENANTS:
        create(AdminClient(conf(tenant_proxy, tenant)), "orders")
    for tenant in TENANTS:
        produce(conf(tenant_proxy, tenant), "orders", [f"{tenant}-{i}" for i in range(500)])
    for tenant in TENANTS:
        seen = consume(conf(tenant_proxy, tenant), "orders", "shared-name-group", 500)
        assert sorted(seen) == sorted(f"{tenant}-{i}" for i in range(500))

    views = {t: AdminClient(conf(tenant_proxy, t)).list_topics(timeout=10) for t in TENANTS}
    for view in views.values():
        assert own(view.topics) == {"orders"}, view.topics
        assert view.cluster_id not in (kafka_cluster.cluster_id, None)
    assert views["team-a"].cluster_id != views["team-b"].cluster_id
    for tenant in TENANTS:  # each VC's group committed its own 500 offsets on its own "orders"
        admin = AdminClient(conf(tenant_proxy, tenant))
        request = [ConsumerGroupTopicPartitions("shared-name-group")]
        committed = admin.list_consumer_group_offsets(request)["shared-name-group"].result(30)
        assert {tp.topic for tp in committed.topic_partitions} == {"orders"}
        assert sum(tp.offset for tp in committed.topic_partitions) == 500

    physical = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap}).list_topics(timeout=10).topics
    orders = [name for name in physical if name.endswith(".orders")]
    assert len(orders) >= 2 and all(len(name) == 36 + len(".orders") for name in orders)


def test_describe_cluster_is_the_vcs_view(kafka_cluster, tenant_proxy):
    for tenant in TENANTS:
        admin = AdminClient(conf(tenant_proxy, tenant))  # must outlive the future
        described = admin.describe_cluster(include_authorized_operations=True, request_timeout=20).result()
        assert described.cluster_id != kafka_cluster.cluster_id and len(described.cluster_id) == 22
        assert {n.rack for n in described.nodes} == {b.rack for b in kafka_cluster.brokers}
        bootstrap_port = tenant_proxy.config["listeners"]["bootstrap_port"]
        assert all(n.host == "127.0.0.1" and n.port > bootstrap_port for n in described.nodes)


def test_transactional_ids_are_per_vc(tenant_proxy):
    """Both tenants use transactional.id "tx": if they shared it, each would fence the other."""
    for tenant in TENANTS:
        create(AdminClient(conf(tenant_proxy, tenant)), "tx-topic", partitions=1)
    producers = {t: Producer(conf(tenant_proxy, t, **{"transactional.id": "tx", "acks": "all"})) for t in TENANTS}
    for producer in producers.values():
        producer.init_transactions(30)
    for round_ in range(3):
        for tenant, producer in producers.items():  # interleaved: a shared id would fence
            producer.begin_transaction()
            producer.produce("tx-topic", f"{tenant}-{round_}".encode())
            producer.commit_transaction(30)
    aborted = producers["team-a"]
    aborted.begin_transaction()
    aborted.produce("tx-topic", b"team-a-aborted")
    assert aborted.flush(30) == 0  # registered before the abort (librdkafka issue 4849: test_forwarder.py)
    aborted.abort_transaction(30)
    for tenant in TENANTS:
        seen = consume(
            conf(tenant_proxy, tenant), "tx-topic", "tx-reader", 3, timeout=60, **{"isolation.level": "read_committed"}
        )
        assert sorted(seen) == [f"{tenant}-{r}" for r in range(3)]


def test_kip848_consumer_group_protocol(tenant_proxy):
    tenant = "team-a"
    create(AdminClient(conf(tenant_proxy, tenant)), "kip848")
    produce(conf(tenant_proxy, tenant), "kip848", [str(i) for i in range(300)])
    seen = consume(conf(tenant_proxy, tenant), "kip848", "new-protocol", 300, **{"group.protocol": "consumer"})
    assert sorted(int(v) for v in seen) == list(range(300))


def test_leak_oracle_tenant_a_never_receives_tenant_b_identifiers(kafka_cluster, tenant_proxy):
    """Every byte the proxy sent to team-a's connections, searched for anything of team-b's."""
    for tenant in TENANTS:  # a topic of its own in each VC, as the other tests have: it runs alone too
        create(AdminClient(conf(tenant_proxy, tenant)), "oracle")
        produce(conf(tenant_proxy, tenant), "oracle", [f"{tenant}-oracle"])
    for tenant in TENANTS:
        assert consume(conf(tenant_proxy, tenant), "oracle", "oracle", 1) == [f"{tenant}-oracle"]
    image = replayed(kafka_cluster, tenant_proxy)
    vc_b = image.vcs["team-b"]
    b_topics = list(vc_b.physical_links)
    b_ids = [image.topic_ids[t].bytes for t in b_topics if t in image.topic_ids]
    assert b_topics and b_ids, "team-b has no topics to look for"

    a_bytes, b_bytes = tap_bytes(tenant_proxy, "team-a"), tap_bytes(tenant_proxy, "team-b")
    assert a_bytes and b_bytes, "the tap recorded nothing"
    # The oracle can see what it looks for: team-b's own connections did receive its topic ids.
    assert any(topic_id in b_bytes for topic_id in b_ids)

    secrets: list[bytes] = [kafka_cluster.cluster_id.encode(), vc_b.id.encode(), vc_b.cluster_id.encode()]
    secrets += [t.encode() for t in b_topics] + b_ids
    secrets += [t.encode() for t in image.vcs["team-a"].physical_links]  # no physical name at all
    leaked = [secret for secret in secrets if secret in a_bytes]
    assert not leaked, leaked


def test_anonymous_placed_by_no_client_id_is_refused(tenant_proxy):
    """Everyone is somewhere: User:ANONYMOUS whose client id no VC binds is closed at its first request,
    with one log line; it never falls through to the physical cluster."""
    stranger = AdminClient({"bootstrap.servers": tenant_proxy.bootstrap, "client.id": "nobody"})
    with pytest.raises(KafkaException):  # the client stays, retrying, while the log is read
        stranger.list_topics(timeout=1)
    line = "User:ANONYMOUS (client id 'nobody') is in no virtual cluster: refused"
    deadline = time.monotonic() + 30
    while line not in tenant_proxy.log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, tenant_proxy.log_tail()
        time.sleep(0.1)
    assert "Traceback" not in tenant_proxy.log_path.read_text(errors="replace")
    AdminClient(conf(tenant_proxy, "team-a")).list_topics(timeout=30)  # a bound client id still works
