"""Real clients through a proxy whose plain requests go by the forwarder (docs/architecture.md#the-forwarder-plain-
requests-off-the-interpreter): everything arrives, in order, and the forwarder did serve. Through a virtual cluster
too (Kafka's own producer: Produce by topic id), where a right revoked stops a forwarded connection's very next
requests. Both with metrics on: /metrics counts every request the forwarder served, as the client counts them."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from benchmarks.bench_peers import parse_consumer
from proxy.auth.credentials import make_entry
from vcproxy_tools.kafka.tools import run_tool, tool_argv
from vcproxy_tools.process import ProxyProcess, proxy_config

from .hardening_attacks import login
from .ports import free_port, free_port_block
from .tenants import login_files, scram_conf
from .test_observability import metrics_port, read_spans, scrape, total
from .test_tenant_hardening import fetch as fetch_request
from .test_tenant_hardening import ready_topic

SERVED = re.compile(r"the forwarder served (\d+) requests \((\w[\w-]*)\)")


def _consume_by_key(conf: dict[str, Any], topic: str, want: int) -> tuple[int, dict[bytes, list[bytes]]]:
    """A fresh group's consumer of `topic` from the start, until `want` records or two minutes: how many it read, and
    the values of those with a key, per key, in the order read."""
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: dict[bytes, list[bytes]] = {}
    received = 0
    deadline = time.monotonic() + 120
    while received < want and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is None or message.error() is not None:
            continue
        received += 1
        if message.key() is not None:
            got.setdefault(message.key(), []).append(message.value())
    consumer.close()
    return received, got


def test_librdkafka_and_java_clients_are_served_by_the_forwarder_and_lose_nothing(kafka_cluster, tmp_path):
    # DEBUG: each time the forwarder hands a connection back, it says how many requests it served.
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        logging={"level": "DEBUG"},
        metrics={"enabled": True, "port": free_port()},  # counted by the forwarder itself (tracing off)
    )
    proxy = ProxyProcess(config, tmp_path).start()
    try:
        bootstrap = proxy.bootstrap
        topic = f"forwarded-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(timeout=60)

        sent = [f"m-{i}".encode() for i in range(3000)]
        # Small batches: a few hundred Produce requests.
        stats: list[str] = []
        producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0, "batch.num.messages": 10,
             "statistics.interval.ms": 100, "stats_cb": stats.append}
        )  # fmt: skip
        for i, value in enumerate(sent):
            producer.produce(topic, value, key=str(i % 7).encode())
            if i % 500 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        # librdkafka's own count of the Produce requests it sent (each answered once flush returned), against the
        # proxy's: one each, whichever path served it.
        seen = len(stats)
        while len(stats) < seen + 2:
            producer.poll(0.2)
        brokers = json.loads(stats[-1])["brokers"].values()
        sent_produce = sum(broker["req"].get("Produce", 0) for broker in brokers)
        samples = scrape(metrics_port(proxy))
        assert total(samples, "vcproxy_requests_total", api="Produce") == sent_produce >= 300
        assert total(samples, "vcproxy_request_duration_seconds_count", api="Produce") == sent_produce
        assert not total(samples, "vcproxy_request_errors_total", api="Produce")
        # A pipelining producer's connection goes to the forwarder only at a pause in its pipeline, which the machine's
        # pace decides. One at a time, nothing is outstanding between two: each Produce after the first is the
        # forwarder's (on the 2 or 3 connections that carry them).
        forwarded = total(samples, "vcproxy_forwarded_requests_total", api="Produce")
        steady = [f"s-{i}".encode() for i in range(100)]
        for i, value in enumerate(steady, start=len(sent)):
            producer.produce(topic, value, key=str(i % 7).encode())
            assert producer.flush(30) == 0
        sent += steady
        served_one_at_a_time = total(scrape(metrics_port(proxy)), "vcproxy_forwarded_requests_total", api="Produce")
        assert served_one_at_a_time - forwarded >= 90, (forwarded, served_one_at_a_time)
        # Kafka's own producer (Produce v13 by topic id: answers skipped to their tagged section) and consumer.
        run_tool(
            "kafka-producer-perf-test",
            ["--topic", topic, "--num-records", "2000", "--record-size", "100", "--throughput", "-1",
             "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=0"],
            timeout=180,
        )  # fmt: skip
        received, got = _consume_by_key({"bootstrap.servers": bootstrap}, topic, 5100)
        assert received == 5100
        for k in range(7):  # one key, one partition: in the order produced
            assert got[str(k).encode()] == [v for i, v in enumerate(sent) if i % 7 == k]
    finally:
        proxy.stop()
    log = proxy.log_path.read_text()
    served = [int(n) for n, _kind in SERVED.findall(log)]
    # About 330 of the producers' and the consumer's requests were the forwarder's in every run so far (the rest:
    # ApiVersions, Metadata, FindCoordinator..., and plain ones sent while an answer the Python path awaited was
    # outstanding). A third of that is a margin for a loaded machine, and far above none.
    assert sum(served) >= 100, log[-3000:]
    assert not re.search(r"closing: (ProtocolViolation|FrameError)|internal error|panicked", log), log[-3000:]


def test_tls_clients_are_served_by_the_forwarder_through_their_session(kafka_cluster, tmp_path):
    """TLS listeners on the compiled TLS (engine auto): librdkafka with a client certificate (its principal read from
    it) and Kafka's own producer with none (client_auth requested). Their plain requests are served by the forwarder,
    reading and writing through each connection's TLS session, and everything arrives, in order."""
    import trustme

    ca = trustme.CA()
    server, alice = ca.issue_cert("127.0.0.1", "localhost"), ca.issue_cert("alice", common_name="alice")
    files = {name: tmp_path / f"{name}.pem" for name in ("server", "ca", "alice", "alice-key")}
    server.private_key_and_cert_chain_pem.write_to_path(str(files["server"]))
    ca.cert_pem.write_to_path(str(files["ca"]))
    alice.cert_chain_pems[0].write_to_path(str(files["alice"]))
    alice.private_key_pem.write_to_path(str(files["alice-key"]))
    tls = {"certfile": str(files["server"]), "cafile": str(files["ca"]), "client_auth": "requested"}
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        listeners={"security_protocol": "SSL", "tls": tls},
        metrics={"enabled": True, "port": free_port()},
    )
    proxy = ProxyProcess(config, tmp_path).start()
    try:
        client = {
            "bootstrap.servers": proxy.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(files["ca"]),
            "ssl.certificate.location": str(files["alice"]),
            "ssl.key.location": str(files["alice-key"]),
        }
        topic = f"tls-forwarded-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(client)
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(timeout=60)
        sent = [f"s-{i}".encode() * (1 + i % 50) for i in range(2000)]
        producer = Producer({**client, "linger.ms": 0, "batch.num.messages": 10})
        for i, value in enumerate(sent):
            producer.produce(topic, value, key=str(i % 5).encode())
            if i % 200 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        # Then one request at a time: nothing outstanding between two, so the forwarder serves each after the first
        # (the pipelined ones above go to it only at a pause in the pipeline: how many depends on the machine's pace).
        before = total(scrape(metrics_port(proxy)), "vcproxy_forwarded_requests_total", api="Produce")
        for i in range(200):
            producer.produce(topic, f"q-{i}".encode(), key=b"one-by-one")
            assert producer.flush(30) == 0
        one_by_one = total(scrape(metrics_port(proxy)), "vcproxy_forwarded_requests_total", api="Produce") - before
        properties = tmp_path / "java-ssl.properties"
        properties.write_text(
            f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={files['ca']}\n"
        )
        perf = run_tool(
            "kafka-producer-perf-test",
            ["--topic", topic, "--num-records", "1000", "--record-size", "100", "--throughput", "-1",
             "--producer-props", f"bootstrap.servers={proxy.bootstrap}", "acks=all", "linger.ms=0",
             "--producer.config", str(properties)],
            timeout=180,
        )  # fmt: skip
        assert perf.returncode == 0, perf.stderr
        received, got = _consume_by_key(client, topic, 3200)
        samples = scrape(metrics_port(proxy))
    finally:
        proxy.stop()
    assert received == 3200
    for k in range(5):  # one key, one partition: in the order produced
        assert got[str(k).encode()] == [v for i, v in enumerate(sent) if i % 5 == k]
    assert got[b"one-by-one"] == [f"q-{i}".encode() for i in range(200)]
    assert one_by_one >= 190, one_by_one
    assert total(samples, "vcproxy_forwarded_requests_total", api="Fetch") >= 1, samples
    log = proxy.log_path.read_text()
    assert re.search(r"TLS client certificate 'CN=alice\b[^']*' -> principal User:CN=alice", log), log[-3000:]
    assert "TLS listeners on OpenSSL" not in log
    assert not re.search(r"closing: (ProtocolViolation|FrameError)|internal error|panicked", log), log[-3000:]


def test_a_traced_proxy_serves_on_the_forwarder_and_spans_what_the_sampler_keeps(kafka_cluster, tmp_path):
    """Tracing at a sample ratio of one half: the forwarder serves the requests, draws each one's trace id as the
    sampler would, and keeps a record of each sampled one, from which Python makes its span. So about half the Produce
    requests have a span (no request drawn twice), every span is one the sampler's rule keeps and names the topic
    and the client, and the connection span counts the requests the forwarder served too."""
    traces = tmp_path / "traces"
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        metrics={"enabled": True, "port": free_port()},
        tracing={"enabled": True, "sample_ratio": 0.5, "jsonl_dir": str(traces)},
    )
    proxy = ProxyProcess(config, tmp_path).start()
    client_id = f"sampled-{uuid.uuid4().hex[:8]}"
    try:
        bootstrap = {"bootstrap.servers": proxy.bootstrap, "client.id": client_id}
        topic = f"traced-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(bootstrap)
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=60)
        producer = Producer({**bootstrap, "linger.ms": 0, "acks": "all"})
        for i in range(400):  # one Produce request each
            producer.produce(topic, f"t-{i}".encode())
            assert producer.flush(30) == 0
        samples = scrape(metrics_port(proxy))
        del producer, admin
    finally:
        assert proxy.stop(timeout=60) == 0  # the exporters flushed
    produced = total(samples, "vcproxy_requests_total", api="Produce")
    forwarded = total(samples, "vcproxy_forwarded_requests_total", api="Produce")
    spans, _ = read_spans(traces)
    sampled = [s for s in spans if s["name"] == "Produce"]
    assert produced == 400
    # Binomial(400, 1/2): a standard deviation of 10; six of them either way (drawn twice: about 300 or 100).
    assert abs(len(sampled) - 200) <= 60, len(sampled)
    assert forwarded >= 300, forwarded  # sampled or not; the first is the session's (its grant, its version table)
    assert all(int(s["traceId"], 16) & (2**64 - 1) < 2**63 for s in sampled)  # TraceIdRatioBased(0.5)'s rule
    assert all(s["attrs"]["vcproxy.topics"] == [topic] for s in sampled)
    assert all(s["attrs"]["vcproxy.client_id"] == client_id for s in sampled)
    assert len({s["attrs"]["vcproxy.correlation_id"] for s in sampled}) == len(sampled)
    connections = [s for s in spans if s["name"] == "connection" and s["attrs"].get("vcproxy.client_id") == client_id]
    assert sum(s["attrs"]["vcproxy.requests"] for s in connections) >= produced


def test_a_share_consumer_is_served_by_the_forwarder(kafka_cluster, tmp_path):
    """Queues for Kafka (KIP-932, production-ready in Kafka 4.2) through a plain proxy: a share consumer's ShareFetch
    and ShareAcknowledge answers list leaders' endpoints in a regular field, after a NOT_LEADER_OR_FOLLOWER only;
    while that list is empty the forwarder serves them. Every record is delivered and accepted once."""
    config = proxy_config(kafka_cluster.bootstrap, free_port_block(), metrics={"enabled": True, "port": free_port()})
    proxy = ProxyProcess(config, tmp_path).start()
    try:
        conf = {"bootstrap.servers": proxy.bootstrap}
        _take_shared(conf, conf, f"queue-{uuid.uuid4().hex[:8]}", 300)
        _shared_on_the_forwarder(proxy, 300, {})
    finally:
        proxy.stop()
    assert not re.search(r"internal error|panicked|Traceback", proxy.log_path.read_text())


def test_a_vcs_share_consumer_is_served_by_the_forwarder(kafka_cluster, tmp_path):
    """A VC's share consumer (carol): its ShareFetch and ShareAcknowledge by topic id, its group renamed as the VC's,
    on the grant of the ids and the group the session let through (READ on both), as a Fetch's."""
    proxy = ProxyProcess(_team_a(kafka_cluster), tmp_path, name="share-vc").start(timeout=120)
    try:
        alice = scram_conf(proxy, "alice", USERS["alice"])
        carol = scram_conf(proxy, "carol", USERS["carol"])
        _take_shared(alice, carol, f"queue-{uuid.uuid4().hex[:8]}", 200)
        _shared_on_the_forwarder(proxy, 200, {"vc": "team-a"})
    finally:
        proxy.stop()
    assert not re.search(r"internal error|panicked|Traceback", proxy.log_path.read_text())


def _take_shared(admin_conf: dict, conf: dict, topic: str, n: int) -> None:
    """`n` records made in a new topic, then taken by a share consumer of a new group (earliest first, explicit mode),
    each acknowledged (accepted) and committed as it comes; then 10 long polls of the drained queue."""
    group = f"share-{topic}"
    admin = AdminClient(admin_conf)
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=60)
    earliest = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])
    admin.incremental_alter_configs([resource])[resource].result(60)
    producer = Producer({**conf, "acks": "all", "linger.ms": 0, "batch.num.messages": 10})
    sent = {f"q-{i}".encode() for i in range(n)}
    for value in sorted(sent):
        producer.produce(topic, value)
    assert producer.flush(60) == 0
    consumer = ShareConsumer({**conf, "group.id": group, "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 120
    try:
        while len(got) < len(sent):
            assert time.monotonic() < deadline, len(got)
            for msg in consumer.poll(0.5):
                assert not msg.error(), msg.error()
                got.append(msg.value())
                consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
                consumer.commit_sync()  # a ShareAcknowledge each
        for _ in range(10):  # long polls of a drained queue
            assert not consumer.poll(0.5)
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


def _shared_on_the_forwarder(proxy: ProxyProcess, n: int, labels: dict[str, str]) -> None:
    """One at a time (a poll's long poll, a commit's acknowledgement): each after the connection's first few is the
    forwarder's (all of them in the runs so far: 11 ShareFetch and 301 ShareAcknowledge for 300 records)."""
    samples = scrape(metrics_port(proxy))
    served = {api: total(samples, "vcproxy_forwarded_requests_total", api=api, **labels) for api in SHARE_APIS}
    asked = {api: total(samples, "vcproxy_requests_total", api=api, **labels) for api in SHARE_APIS}
    assert asked["ShareFetch"] >= 10 and asked["ShareAcknowledge"] >= n, asked
    assert all(served[api] >= asked[api] - 3 for api in SHARE_APIS), (served, asked)


SHARE_APIS = ("ShareFetch", "ShareAcknowledge")


def test_transactions_through_a_plain_proxy_commit_abort_and_carry_offsets(kafka_cluster, tmp_path):
    """A consume-transform-produce loop through a plain proxy (franz-go's TestTxnEtl runs this way in `make compat`
    only): a read_committed reader gets the committed transactions' records and none of the aborted one's, and the
    input offsets sent in each committed transaction are the group's."""
    config = proxy_config(kafka_cluster.bootstrap, free_port_block(), metrics={"enabled": True, "port": free_port()})
    proxy = ProxyProcess(config, tmp_path).start()
    try:
        bootstrap = {"bootstrap.servers": proxy.bootstrap}
        source, sink = f"txn-in-{uuid.uuid4().hex[:8]}", f"txn-out-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(bootstrap)
        for future in admin.create_topics([NewTopic(source, 2, 3), NewTopic(sink, 2, 3)]).values():
            future.result(timeout=60)
        feeder = Producer({**bootstrap, "enable.idempotence": True})
        for i in range(300):
            feeder.produce(source, f"in-{i}".encode(), key=str(i % 5).encode())
        assert feeder.flush(60) == 0

        group = f"etl-{source}"
        reader = Consumer({**bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                           "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
        reader.subscribe([source])
        writer = Producer({**bootstrap, "transactional.id": f"etl-{source}", "linger.ms": 5})
        writer.init_transactions(60)
        read, batch, committed, deadline = 0, 0, [], time.monotonic() + 120
        while read < 300 and time.monotonic() < deadline:
            messages = [m for m in reader.consume(100, 1) if m.error() is None]
            if not messages:
                continue
            batch += 1
            writer.begin_transaction()
            for m in messages:
                writer.produce(sink, m.value().replace(b"in-", b"out-"), key=m.key())
            if batch == 2:  # this one is aborted: its records never reach a read_committed reader
                # Written before the abort: librdkafka (2.x, issue 4849) counts an AddPartitionsToTxn the coordinator
                # refused with CONCURRENT_TRANSACTIONS (the last commit's markers still being written) as registered,
                # and the abort's EndTxn then fails fatally with INVALID_TXN_STATE.
                assert writer.flush(60) == 0
                writer.abort_transaction(60)
                reader.seek(TopicPartition(source, messages[0].partition(), messages[0].offset()))
                for other in {m.partition() for m in messages} - {messages[0].partition()}:
                    first = min(m.offset() for m in messages if m.partition() == other)
                    reader.seek(TopicPartition(source, other, first))
                continue
            writer.send_offsets_to_transaction(
                reader.position(reader.assignment()), reader.consumer_group_metadata(), 60
            )
            writer.commit_transaction(60)
            committed += [m.value() for m in messages]
            read += len(messages)
        reader.close()
        assert read == 300 and len(set(committed)) == 300 and batch >= 3  # the second batch aborted, read again

        check = Consumer({**bootstrap, "group.id": f"check-{sink}", "auto.offset.reset": "earliest",
                          "isolation.level": "read_committed"})  # fmt: skip
        check.subscribe([sink])
        out: list[bytes] = []
        deadline = time.monotonic() + 120
        while len(out) < 300 and time.monotonic() < deadline:
            out += [m.value() for m in check.consume(100, 1) if m.error() is None]
        check.close()
        assert sorted(out) == sorted(v.replace(b"in-", b"out-") for v in committed)  # each once, no aborted copy
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(60)
        ends = {p.partition: p.offset for p in offsets.topic_partitions}
        assert sum(ends.values()) == 300, ends  # the group's offsets: every input record, from the transactions
    finally:
        proxy.stop()
    assert not re.search(r"internal error|panicked|Traceback", proxy.log_path.read_text())


USERS = {"alice": "alice-secret", "carol": "carol-secret"}


def _team_a(kafka_cluster: Any, *mechanisms: str) -> dict:
    """A proxy with one VC, team-a (alice its admin, carol a member), over SASL SCRAM (and `mechanisms`), with DEBUG
    logs (the forwarder's counts) and metrics (what it served, per API)."""
    return proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        logging={"level": "DEBUG"},
        metrics={"enabled": True, "port": free_port()},
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["SCRAM-SHA-512", *mechanisms]},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        tenancy={
            "enabled": True,
            "state_topic": f"__vcproxy_state_fw_{uuid.uuid4().hex[:6]}",
            "virtual_clusters": [
                {"name": "team-a", "principals": ["User:alice", "User:carol"], "admins": ["User:alice"]}
            ],
        },
    )


def _deny_carol_write(admin: AdminClient, topic: str) -> None:
    """alice denies carol WRITE on `topic`. With an ACL on the topic, what none allows is refused
    (allow_everyone_if_no_acl covers none): carol keeps READ, for the consumers after."""
    deny = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*",
        AclOperation.WRITE, AclPermissionType.DENY,
    )  # fmt: skip
    read = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    for done in admin.create_acls([deny, read]).values():
        done.result(timeout=60)


def _end_offset(conf: dict, topic: str) -> int:
    consumer = Consumer({**conf, "group.id": f"w-{uuid.uuid4().hex[:6]}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


def _quota_held_on_the_forwarder(proxy: ProxyProcess, admin: AdminClient, carol: dict, topic: str) -> None:
    """Under a producer's byte rate and a request rate (alice sets carol's, per client id), a Produce goes by the
    forwarder within allowances the quota stage takes out of the meters: a producer well within its quotas is served
    there, and so is a consumer's Fetch within its consumer byte rate; a producer that sends more is held to its quota,
    not a byte or a request past it."""
    from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData

    def entry(client_id: str, rates: dict[str, float]) -> EntryData:
        user, client = ("user", "carol"), ("client-id", client_id)
        entity = tuple(EntityData(entity_type=kind, entity_name=name) for kind, name in (user, client))
        return EntryData(entity=entity, ops=tuple(OpData(key=k, value=v, remove=False) for k, v in rates.items()))

    bytes_keys = ("producer_byte_rate", "consumer_byte_rate")
    entries = (
        entry("roomy", {**dict.fromkeys(bytes_keys, 5e7), "request_rate": 1e5}),
        entry("held", dict.fromkeys(bytes_keys, 2e5)),
        entry("paced", {"request_rate": 20.0}),
    )
    with login(proxy.bootstrap, "alice", USERS["alice"]) as alice:
        _, answer = alice.request(49, 1, 7, AlterClientQuotasRequest(entries=entries, validate_only=False))
    assert [int(e.error_code) for e in answer.entries] == [0, 0, 0], answer
    metered = f"{topic}-q"
    admin.create_topics([NewTopic(metered, 1, 3)])[metered].result(timeout=60)
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err.name())

    before = _forwarded(proxy, "Produce")
    roomy = Producer({**carol, "client.id": "roomy", "linger.ms": 0, "acks": "all"})
    # One Produce each, far within 50 MB/s. The first ones are the session's: the meter starts empty, and a hand-over
    # needs a tenth of a second of the quota in it, however fast the requests come; the forwarder serves the rest.
    values: list[bytes] = []
    while _forwarded(proxy, "Produce") - before < 100 and len(values) < 2000:
        for _ in range(50):
            values.append(f"q-{len(values)}".encode())
            roomy.produce(metered, values[-1], on_delivery=delivered)
            roomy.flush(30)
    del roomy
    served = _forwarded(proxy, "Produce") - before
    assert served >= 100, f"{served} of {len(values)}"
    # Its consumer, under the same client id's consumer byte rate: its fetches go by the forwarder too, once the meter
    # holds a tenth of a second's worth; an answer is charged whole as it goes.
    before = _forwarded(proxy, "Fetch")
    consumer = Consumer({**carol, "client.id": "roomy", "group.id": f"q-{topic}", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(metered, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while (len(got) < len(values) or _forwarded(proxy, "Fetch") - before < 3) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == values
    assert _forwarded(proxy, "Fetch") - before >= 3  # long polls of an idle partition, most of them
    held = Producer({**carol, "client.id": "held", "linger.ms": 0, "acks": "all"})
    started = time.monotonic()
    for _ in range(100):  # 100 requests of 5 KB: 2.5 s at 200 KB/s from an empty meter
        held.produce(metered, b"h" * 5000, on_delivery=delivered)
        held.flush(30)
    elapsed = time.monotonic() - started
    del held
    assert not failures, failures
    assert elapsed >= 2.0, elapsed  # faster would be bytes past the meter
    paced = Producer({**carol, "client.id": "paced", "linger.ms": 0, "acks": "all"})
    started = time.monotonic()
    for _ in range(60):  # 60 requests (and the client's Metadata): 3 s at 20 a second from an empty meter
        paced.produce(metered, b"p", on_delivery=delivered)
        paced.flush(30)
    elapsed = time.monotonic() - started
    del paced
    assert not failures, failures
    assert elapsed >= 2.0, elapsed  # faster would be requests past the meter


def _group_member_on_the_forwarder(proxy: ProxyProcess, alice: dict, carol: dict) -> None:
    """carol's consumer in a group: its Heartbeats and offset commits go by the forwarder, the group renamed as
    team-a's, once the session has let the first of each through. Then alice denies carol READ on the group: the
    very next one is refused (GROUP_AUTHORIZATION_FAILED), although the coordinator's connection was forwarded."""
    topic, group = f"fwg-{uuid.uuid4().hex[:8]}", f"gm-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(alice)
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=60)
    producer = Producer({**carol, "linger.ms": 0})
    member = Consumer(
        {**carol, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
         "heartbeat.interval.ms": 200, "session.timeout.ms": 6000}
    )  # fmt: skip
    member.subscribe([topic])
    errors: list[int] = []
    hb, oc = _forwarded(proxy, "Heartbeat"), _forwarded(proxy, "OffsetCommit")
    deadline = time.monotonic() + 90
    commits = 0
    # A record, read, committed: an OffsetCommit each (the offset moves); Heartbeats every 200 ms meanwhile.
    while commits < 8 or _forwarded(proxy, "Heartbeat") - hb < 5:
        assert time.monotonic() < deadline, (commits, _forwarded(proxy, "Heartbeat") - hb)
        producer.produce(topic, f"m-{commits}".encode())
        producer.flush(30)
        msg = member.poll(1.0)
        if msg is not None and msg.error() is None:
            member.commit(msg, asynchronous=False)
            commits += 1
    assert _forwarded(proxy, "OffsetCommit") - oc >= 5  # the first is the session's (the grant), at a rebalance more
    deny = AclBinding(
        ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:carol", "*",
        AclOperation.READ, AclPermissionType.DENY,
    )  # fmt: skip
    for done in admin.create_acls([deny]).values():
        done.result(timeout=60)
    at_deny = _forwarded(proxy, "Heartbeat") + _forwarded(proxy, "OffsetCommit")
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        msg = member.poll(0.5)
        if msg is not None and msg.error() is not None:
            errors.append(msg.error().code())
    member.close()
    assert KafkaError.GROUP_AUTHORIZATION_FAILED in errors, errors
    # At most one already on its way when the ACL was applied; none after.
    assert _forwarded(proxy, "Heartbeat") + _forwarded(proxy, "OffsetCommit") - at_deny <= 1
    refused = total(scrape(metrics_port(proxy)), "vcproxy_request_errors_total", vc="team-a", error_code="30")
    assert refused >= 1


TXN_APIS = ("AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn")


def _forwarded(proxy: ProxyProcess, api: str) -> float:
    return total(scrape(metrics_port(proxy)), "vcproxy_forwarded_requests_total", api=api, vc="team-a")


def test_a_vcs_java_clients_are_served_by_the_forwarder_until_a_right_is_revoked(kafka_cluster, tmp_path):
    """carol (a member of team-a) produces with Kafka's own producer, whose Produce names topics by id: the
    forwarder serves it. Then alice (team-a's admin) denies carol WRITE on the topic while carol's producer is
    running: from then on its records are refused (TOPIC_AUTHORIZATION_FAILED), not one more lands beyond those
    already in flight, although its connection was on the forwarder when the right went. Then carol reads every
    record that landed with Kafka's own consumer, whose fetches (by topic id, in a fetch session) the forwarder
    serves too."""
    proxy = ProxyProcess(_team_a(kafka_cluster), tmp_path, name="forwarded-vc").start(timeout=120)
    records = 3000
    try:
        alice = scram_conf(proxy, "alice", USERS["alice"])
        topic = f"fw-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(alice)
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=60)
        login = login_files(tmp_path, USERS)["carol"]
        errors = (tmp_path / "perf.err").open("w")
        # 100 records a second for 30 s, each its own Produce request (linger.ms=0), one at a time: the connection is
        # handed to the forwarder at a moment with no answer outstanding, which one request in flight leaves after
        # every answer, however slow a loaded machine makes the broker (with five, a run beside the full suite had
        # none for 40 s).
        perf = subprocess.Popen(
            tool_argv(
                "kafka-producer-perf-test",
                ["--topic", topic, "--num-records", str(records), "--record-size", "100", "--throughput", "100",
                 "--producer.config", str(login), "--producer-props", f"bootstrap.servers={proxy.bootstrap}",
                 "acks=all", "linger.ms=0", "max.in.flight.requests.per.connection=1"],
            ),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            # A few seconds of producing, and the forwarder serving it (its count in /metrics) before the right goes:
            # it takes the connection once the session has granted the topic's id, which it learns from the broker.
            # Each look is a consumer's round trips.
            while _end_offset(alice, topic) < 500 or _forwarded(proxy, "Produce") < 100:
                assert perf.poll() is None and time.monotonic() < deadline, "carol's producer was not forwarded"
            _deny_carol_write(admin, topic)
            del admin  # its threads would go on reconnecting to the proxy once stopped, on stderr
            at_deny = _end_offset(alice, topic)
            out, _ = perf.communicate(timeout=180)
        finally:
            if perf.poll() is None:
                perf.kill()
            errors.close()
        landed = _end_offset(alice, topic)
        produced_log = len(proxy.log_path.read_text())
        # Small fetches (about 20 records each): a few dozen Fetch requests in the consumer's session.
        small = tmp_path / "small-fetches.properties"
        small.write_text(login.read_text() + "max.partition.fetch.bytes=2048\nfetch.max.bytes=2048\n")
        consumed = run_tool(
            "kafka-consumer-perf-test",
            ["--bootstrap-server", proxy.bootstrap, "--topic", topic, "--num-records", str(landed),
             "--group", f"g-{topic}", "--timeout", "60000", "--command-config", str(small)],
            timeout=180,
        )  # fmt: skip
        samples = scrape(metrics_port(proxy))
    finally:
        proxy.stop()
    # The VC's own counts: carol's Produce requests (most served by the forwarder) and the refusals after the ACL
    # (TOPIC_AUTHORIZATION_FAILED, 29, as the client got them: the broker said UNKNOWN_TOPIC_ID of the placeholder the
    # session sent instead), the consumer's fetches.
    forwarded = total(samples, "vcproxy_forwarded_requests_total", api="Produce", vc="team-a")
    assert 100 <= forwarded < total(samples, "vcproxy_requests_total", api="Produce", vc="team-a"), samples
    assert total(samples, "vcproxy_request_errors_total", api="Produce", vc="team-a", error_code="29") >= 1, samples
    assert not total(samples, "vcproxy_request_errors_total", api="Produce", vc="team-a", error_code="100"), samples
    assert total(samples, "vcproxy_forwarded_requests_total", api="Fetch", vc="team-a") >= 10, samples
    assert not total(samples, "vcproxy_forwarded_requests_total", vc="kafka-cluster")
    assert consumed.returncode == 0, consumed.stdout + consumed.stderr
    assert parse_consumer(consumed.stdout)["records"] == landed, consumed.stdout
    refused = (tmp_path / "perf.err").read_text(errors="replace")
    assert "TopicAuthorizationException" in refused, (out[-2000:], refused[-2000:])
    # At most the request already sent when the ACL was applied (one in flight, a record or a few at 100 records/s)
    # lands after it; what a retry of a refused one would need, a margin.
    assert landed - at_deny <= 25, (at_deny, landed)
    assert landed <= records - 1000, landed  # the rest of the 30 s was refused
    log = proxy.log_path.read_text()
    served = [int(n) for n, _kind in SERVED.findall(log[:produced_log])]
    # carol's Produce requests before the ACL: at least 100 of them the forwarder's (waited for above).
    assert sum(served) >= 100, log[-3000:]
    # The consumer's: a Fetch in the session it opened, one after the other while records come.
    fetches = [int(n) for n, _kind in SERVED.findall(log[produced_log:])]
    assert sum(fetches) >= 10, log[-3000:]
    assert not re.search(r"closing: (ProtocolViolation|FrameError)|internal error|panicked", log), log[-3000:]


def test_a_vcs_librdkafka_producer_is_renamed_by_the_forwarder_until_a_right_is_revoked(kafka_cluster, tmp_path):
    """librdkafka's Produce names topics by name (v10): the forwarder renames each to its physical name, on the grant
    of the names the session let through, and the answer's back; a transactional producer's id too, and its
    AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn, until alice denies it the id, and a consumer's
    ListOffsets. carol's records
    land intact and in order under her own name for the topic, the forwarder having served most of them, and only
    her committed transaction's are read; a consumer's Fetch v13 (Java's 3.1-3.4) in its own session is served too;
    once alice denies her WRITE, her very next record is refused, although her connection was on the forwarder. Then
    a group member's Heartbeats and commits, its group renamed (`_group_member_on_the_forwarder`)."""
    proxy = ProxyProcess(_team_a(kafka_cluster, "PLAIN"), tmp_path, name="renamed-vc").start(timeout=120)
    try:
        alice = scram_conf(proxy, "alice", USERS["alice"])
        carol = scram_conf(proxy, "carol", USERS["carol"])
        topic = f"fwn-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(alice)
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=60)
        sent = [f"r-{i}".encode() for i in range(300)]
        failures: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(err.name())

        producer = Producer({**carol, "linger.ms": 0, "acks": "all"})
        for value in sent:  # one Produce request each
            producer.produce(topic, value, on_delivery=delivered)
            producer.flush(30)
        assert not failures, failures
        forwarded = _forwarded(proxy, "Produce")
        assert forwarded >= 200, forwarded  # the first few are the session's, until it has granted the name
        _quota_held_on_the_forwarder(proxy, admin, carol, topic)
        forwarded = _forwarded(proxy, "Produce")
        # Transactional: its id renamed too. 20 transactions committed, each of 3 records (a Produce each) and the
        # offset of a group (its own name, renamed), then one aborted of 60 records.
        committed, aborted = [f"c-{i}".encode() for i in range(60)], [f"a-{i}".encode() for i in range(60)]
        txn = Producer({**carol, "transactional.id": f"tx-{topic}", "linger.ms": 0})
        txn.init_transactions(60)
        group = Consumer({**carol, "group.id": f"txg-{topic}"}).consumer_group_metadata()  # not a member: generation -1
        coordinated = {api: _forwarded(proxy, api) for api in TXN_APIS}
        for n in range(20):
            txn.begin_transaction()
            for value in committed[3 * n : 3 * n + 3]:
                txn.produce(topic, value, on_delivery=delivered)
                txn.flush(30)
            txn.send_offsets_to_transaction([TopicPartition(topic, 0, n + 1)], group, 60)
            txn.commit_transaction(60)
        txn.begin_transaction()
        for value in aborted:
            txn.produce(topic, value, on_delivery=delivered)
            txn.flush(30)
        txn.abort_transaction(60)
        assert not failures, failures
        in_txns = _forwarded(proxy, "Produce") - forwarded
        assert in_txns >= 60, in_txns
        # One at a time, each API's first request the session's (it grants the id, group and topics for that API):
        # nearly all the rest the forwarder's, renamed (the group's offset below is the transactions').
        coordinated = {api: _forwarded(proxy, api) - n for api, n in coordinated.items()}
        assert all(n >= 15 for n in coordinated.values()), coordinated
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(f"txg-{topic}")])
        assert [(p.topic, p.offset) for p in offsets[f"txg-{topic}"].result(60).topic_partitions] == [(topic, 20)]
        # alice denies carol her transactional id: the next transaction's first request (AddPartitionsToTxn, the
        # forwarder's until then) is refused, and the producer is fenced for good, as a broker's refusal leaves it.
        deny = AclBinding(
            ResourceType.TRANSACTIONAL_ID, f"tx-{topic}", ResourcePatternType.LITERAL, "User:carol", "*",
            AclOperation.WRITE, AclPermissionType.DENY,
        )  # fmt: skip
        admin.create_acls([deny])[deny].result(timeout=60)
        txn.begin_transaction()
        txn.produce(topic, b"denied")
        with pytest.raises(KafkaException) as refused:
            txn.commit_transaction(60)
        assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, refused.value
        del txn
        _deny_carol_write(admin, topic)
        producer.produce(topic, b"after the deny", on_delivery=delivered)
        producer.flush(30)
        assert failures == ["TOPIC_AUTHORIZATION_FAILED"], failures
        del producer

        consumer = Consumer({**carol, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(sent) + len(committed) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                assert msg.topic() == topic
                got.append(msg.value())
        consumer.close()
        assert got == sent + committed  # read_committed: the aborted transaction's records are skipped
        # A lag monitor's ListOffsets (librdkafka's watermarks: the earliest and the latest offset, a request each, on
        # a connection that carries nothing else), her name for the topic renamed both ways: after the first pair, the
        # forwarder's.
        before = _forwarded(proxy, "ListOffsets")
        monitor = Consumer({**carol, "group.id": f"lag-{topic}"})
        marks = {monitor.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False) for _ in range(20)}
        monitor.close()
        assert len(marks) == 1 and next(iter(marks))[0] == 0 and next(iter(marks))[1] > len(sent + committed), marks
        assert _forwarded(proxy, "ListOffsets") - before >= 30

        # Fetch v13, as Java consumers 3.1-3.4 send it (its replica id a regular field): a consumer's, in its own
        # fetch session, goes by the forwarder too; a follower's is refused.
        with login(proxy.bootstrap, "carol", USERS["carol"]) as raw:
            entry, leader = ready_topic(raw, topic)
        before = _forwarded(proxy, "Fetch")
        with login(leader, "carol", USERS["carol"]) as raw:
            _, opened = raw.request(1, 13, 10, fetch_request(0, 0, entry.topic_id))
            assert opened.error_code == 0 and opened.session_id != 0
            assert bytes(opened.responses[0].partitions[0].records or b"").count(b"r-") >= 1
            for epoch in range(1, 21):
                _, incremental = raw.request(1, 13, 10 + epoch, fetch_request(opened.session_id, epoch))
                assert incremental.error_code == 0 and incremental.session_id == opened.session_id
            _, follower = raw.request(
                1, 13, 40, dataclasses.replace(fetch_request(0, -1, entry.topic_id), replica_id=1)
            )
            assert follower.error_code == ErrorCode.cluster_authorization_failed
        assert _forwarded(proxy, "Fetch") - before >= 15

        # Fetch v12 by name (Java's before 3.1, sarama's): in its own session, her name for the topic renamed by the
        # forwarder to the broker's and back in each answer, which goes on whole.
        before = _forwarded(proxy, "Fetch")
        with login(leader, "carol", USERS["carol"]) as raw:
            _, opened = raw.request(1, 12, 50, fetch_request(0, 0, name=topic, version=12))
            assert opened.error_code == 0 and opened.session_id != 0
            for epoch in range(1, 21):
                _, answer = raw.request(
                    1, 12, 50 + epoch, fetch_request(opened.session_id, epoch, name=topic, version=12)
                )
                assert answer.error_code == 0 and answer.session_id == opened.session_id
                assert [t.topic for t in answer.responses] == [topic]
                # Every value sent is there (a count of b"r-" also counts the pair where a batch's CRC or
                # timestamp happens to hold it: once in a while).
                records = bytes(answer.responses[0].partitions[0].records or b"")
                assert all(value in records for value in sent)
        assert _forwarded(proxy, "Fetch") - before >= 15

        _group_member_on_the_forwarder(proxy, alice, carol)
    finally:
        proxy.stop()
    log = proxy.log_path.read_text()
    assert sum(int(n) for n, _kind in SERVED.findall(log)) >= 200, log[-3000:]
    assert not re.search(r"closing: (ProtocolViolation|FrameError)|internal error|panicked", log), log[-3000:]
