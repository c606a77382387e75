"""The virtual-cluster state topic against the real cluster: create, write, replay, follow, two proxies."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid

import pytest
import trio
import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from proxy.config import VirtualClusterSeedConfig, parse_config
from proxy.state.service import client_config, open_tenancy
from proxy.state.store import Fenced, StateStore, StateStoreError, decision_of, decode
from proxy.tenancy.model import (
    TenancyImage,
    client_record,
    link_record,
    physical_topic_for,
    principal_record,
    topic_record,
    vc_delete,
    vc_record,
)
from vcproxy_tools.process import ProxyProcess, proxy_config
from vcproxy_tools.state import image_to_dict

from .polling import once_known, until
from .ports import free_port_block

PROPAGATION_LIMIT = 1.0  # seconds: the "see each other's changes within a second"


def _topic() -> str:
    return f"__vcproxy_state_test_{uuid.uuid4().hex[:8]}"


def _store(cluster, topic: str, **kwargs) -> StateStore:
    return StateStore({"bootstrap.servers": cluster.bootstrap}, topic, **kwargs)


def _replayed(cluster, topic: str) -> TenancyImage:
    image = TenancyImage()
    _store(cluster, topic).replay(image)
    return image


def _raw_records(cluster, topic: str) -> list[tuple[str, dict | None]]:
    """Every record in the topic, in order (what replay reads, without the model)."""
    store = _store(cluster, topic)
    _, high = store.end_offsets()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out = []
    try:
        while len(out) < high:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None, msg and msg.error()
            out.append(decode(msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def _describe(cluster, topic: str) -> tuple[int, int, dict[str, str]]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 5})
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = once_known(lambda: admin.describe_configs([resource])[resource].result(30))
    rf = len(meta.partitions[0].replicas)
    return len(meta.partitions), rf, {k: v.value for k, v in configs.items()}


def _create(cluster, topic: str, partitions: int = 1, replicas: list[int] | None = None, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 5})
    if replicas:  # the first replica is the preferred leader
        new = NewTopic(topic, 1, -1, replica_assignment=[replicas], config=dict(config))
    else:
        new = NewTopic(topic, partitions, 3, config=dict(config))
    admin.create_topics([new])[topic].result(30)


SAMPLE_PHYSICAL = physical_topic_for("orders")
SAMPLE_TOPIC_ID = uuid.uuid4()


def _sample_records() -> list[tuple[str, dict | None]]:
    return [
        vc_record("team-a"),
        vc_record("team-b"),
        principal_record("User:alice", "team-a"),
        client_record("billing", "team-b"),
        topic_record(SAMPLE_PHYSICAL, SAMPLE_TOPIC_ID),
        link_record("team-a", "orders", SAMPLE_PHYSICAL),
        link_record("team-b", "shared-orders", SAMPLE_PHYSICAL),
    ]


# -- the store --------------------------------------------------------------------------------------


def test_ensure_topic_creates_a_compacted_single_partition_topic(kafka_cluster):
    topic = _topic()
    store = _store(kafka_cluster, topic)
    assert not store.exists()
    store.ensure_topic()
    partitions, rf, config = _describe(kafka_cluster, topic)
    assert (partitions, rf) == (1, min(3, len(kafka_cluster.brokers)))
    assert config["cleanup.policy"] == "compact"
    if rf >= 3:
        assert config["min.insync.replicas"] == "2"
    store.ensure_topic()  # existing and fine: nothing to do
    assert store.exists()

    other = _topic()
    _store(kafka_cluster, other, replication_factor=1).ensure_topic()
    assert _describe(kafka_cluster, other)[1] == 1


def test_ensure_topic_refuses_a_topic_that_would_lose_state(kafka_cluster):
    deleting = _topic()
    _create(kafka_cluster, deleting, **{"cleanup.policy": "delete"})
    with pytest.raises(StateStoreError, match=r"cleanup\.policy=delete; it must be compact") as info:
        _store(kafka_cluster, deleting).ensure_topic()
    assert not info.value.retriable

    partitioned = _topic()
    _create(kafka_cluster, partitioned, partitions=3, **{"cleanup.policy": "compact"})
    with pytest.raises(StateStoreError, match="has 3 partitions; it needs exactly 1"):
        _store(kafka_cluster, partitioned).ensure_topic()

    both = _topic()
    _create(kafka_cluster, both, **{"cleanup.policy": "compact,delete"})
    _store(kafka_cluster, both).ensure_topic()  # compacted (and time-limited): accepted


def test_write_then_replay_in_a_fresh_store_gives_the_same_image(kafka_cluster):
    topic = _topic()
    store = _store(kafka_cluster, topic)
    store.ensure_topic()
    assert store.replay(TenancyImage()) == 0  # an empty topic
    assert store.replayed_offset == 0

    records = _sample_records()
    offsets = store.write(records)
    assert offsets == list(range(len(records)))  # one call keeps its order
    expected = TenancyImage()
    for key, value in records:
        expected.apply(key, value)

    image = TenancyImage()
    fresh = _store(kafka_cluster, topic)
    assert fresh.replay(image) == len(records)
    assert fresh.replayed_offset == len(records)
    assert image_to_dict(image) == image_to_dict(expected)
    assert image.vc_for("User:alice").name == "team-a"
    assert image.physical_for_id(SAMPLE_TOPIC_ID) == SAMPLE_PHYSICAL
    assert sorted(image.links_to(SAMPLE_PHYSICAL)) == [("team-a", "orders"), ("team-b", "shared-orders")]
    assert _raw_records(kafka_cluster, topic) == records

    # Tombstones remove.
    store.write([vc_delete("team-b"), link_record("team-a", "orders", None), topic_record(SAMPLE_PHYSICAL, None)])
    image = _replayed(kafka_cluster, topic)
    assert list(image.vcs) == ["team-a"]
    assert image.vcs["team-a"].links == {}
    assert image.client_ids == {}  # bound to the deleted VC
    assert image.topic_ids == {} and image.physical_for_id(SAMPLE_TOPIC_ID) is None
    assert image.principals == {"User:alice": "team-a"}
    store.close()


def test_write_fails_loudly_when_the_cluster_is_unreachable():
    store = StateStore({"bootstrap.servers": "127.0.0.1:1"}, "__vcproxy_state")
    started = time.monotonic()
    with pytest.raises(StateStoreError, match="not acknowledged within 2"):
        store.write([vc_record("a")], timeout=2)
    assert time.monotonic() - started < 30  # the 2 s write timeout is honoured, not a client default


def test_state_store_logs_in_over_sasl(kafka_cluster):
    user = "vcproxy"
    # Needs the local launcher's SASL listener and users: in other modes this fails, it never skips.
    assert kafka_cluster.sasl_bootstrap and user in kafka_cluster.sasl_users, "no SASL listener with test users"
    config = parse_config(
        {
            "upstream": {
                "bootstrap_servers": kafka_cluster.sasl_bootstrap.split(","),
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_username": user,
                "sasl_password": kafka_cluster.sasl_users[user],
            }
        }
    )
    topic = _topic()
    store = StateStore(client_config(config), topic)
    store.ensure_topic()
    store.write([vc_record("over-sasl")])
    image = TenancyImage()
    assert store.replay(image) == 1 and "over-sasl" in image.vcs
    store.close()


# -- two followers ----------------------------------------------------------------------------------


async def _until(predicate, timeout: float) -> float:
    """Seconds until predicate() holds (polled every ms); fails after `timeout`."""
    started = time.monotonic()
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.001)
    return time.monotonic() - started


async def test_two_services_see_each_others_writes_within_a_second(kafka_cluster):
    topic = _topic()
    latencies = []
    async with open_tenancy(_store(kafka_cluster, topic)) as a, open_tenancy(_store(kafka_cluster, topic)) as b:
        assert a.ready.is_set() and b.ready.is_set()
        # Each writer's first write to the new topic connects its producer and waits for the new partition's
        # replicas (acks=all): most of a second on a loaded machine, and not propagation. Harmless
        # tombstones first, as in the two-process test below.
        for service in (a, b):
            await service.write([client_record("warm-up", None)])
        for i in range(5):
            writer, reader = (a, b) if i % 2 == 0 else (b, a)
            name = f"team-{i}"
            started = time.monotonic()
            await writer.write([vc_record(name), principal_record(f"User:u{i}", name)])
            assert name in writer.image.vcs  # visible locally when write() returns
            await _until(lambda name=name, reader=reader: name in reader.image.principals.values(), 120)
            latencies.append(time.monotonic() - started)
            assert reader.image.vcs[name] == writer.image.vcs[name]
        await a.write([vc_delete("team-0")])
        await _until(lambda: "team-0" not in b.image.vcs, 120)
        # The offset a follower has applied up to is reported after the record itself: wait for it too.
        await _until(lambda: a.applied_offset == b.applied_offset == 13, 120)  # 2 warm-ups, 10 writes, 1 delete
        assert image_to_dict(a.image) == image_to_dict(b.image)
    print(f"state propagation between two services: {', '.join(f'{x * 1000:.0f} ms' for x in latencies)}")
    assert max(latencies) < PROPAGATION_LIMIT, latencies

    # A third replica starting later replays to the same image.
    async with open_tenancy(_store(kafka_cluster, topic)) as c:
        assert c.replayed_records == 13
        assert image_to_dict(c.image) == image_to_dict(b.image)


def test_decisions_take_turns_commit_whole_and_are_followed_as_one(kafka_cluster):
    topic = _topic()
    one, two = _store(kafka_cluster, topic), _store(kafka_cluster, topic)
    one.ensure_topic()
    one.begin_deciding()
    two.begin_deciding()  # the shared transactional.id: this init fences the first store
    with pytest.raises(Fenced):
        one.commit([vc_record("lost")])
    decided = [vc_record("won"), principal_record("User:w", "won")]
    offsets = two.commit(decided)
    assert len(offsets) == 2
    # The commit marker follows the records (written by the coordinator once the commit returned): the end
    # of the partition for read_committed readers is past it, at an offset no reader sees as a record.
    until(lambda: two.committed_end() == max(offsets) + 2, "the commit marker", 60)
    one.begin_deciding()  # fenced before: initialises again, fencing the second
    with pytest.raises(Fenced):
        two.commit([vc_record("late")])
    [last] = one.commit([client_record("c", "won")])
    # As above: the commit returns before its marker is written, and replay reads up to the marker.
    until(lambda: one.committed_end() == last + 2, "the last commit marker", 60)

    image = _replayed(kafka_cluster, topic)  # read_committed: nothing of the fenced decisions
    assert sorted(image.vcs) == ["won"] and image.principals == {"User:w": "won"} and image.client_ids

    batches: list = []
    stop = threading.Event()
    final = one.committed_end()

    def on_batch(records, next_offset) -> None:
        batches.append((records, next_offset))
        if next_offset >= final:
            stop.set()

    follower = _store(kafka_cluster, topic)
    give_up = threading.Timer(120, stop.set)  # the assertions below then say what did not arrive
    give_up.start()
    follower.follow(on_batch, stop, start_offset=0)
    give_up.cancel()
    assert (decided, max(offsets) + 1) in batches  # both records of the decision in one batch
    assert batches[-1][1] == final  # the end of the partition, past the last commit marker
    consumer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap, "group.id": "unused"})
    consumer.assign([TopicPartition(topic, 0, min(offsets))])
    msg = consumer.poll(30)
    consumer.close()
    assert decision_of(msg.headers())[1:] == (2, 0)
    for store in (one, two, follower):
        store.close()


def test_the_end_reader_tells_committed_records_from_markers_and_aborted_ones(kafka_cluster):
    # holds_records: whether a committed record lies between two offsets, read as a read_committed reader
    # reads the log. A decision asks it instead of waiting for the follower to report the end past a marker.
    from confluent_kafka import Producer

    topic = _topic()
    store = _store(kafka_cluster, topic)
    store.ensure_topic()
    store.begin_deciding()
    [decided] = store.commit([vc_record("decided")])
    end = until(lambda: (e := store.committed_end()) >= decided + 2 and e, "the commit marker", 60)
    assert store.holds_records(decided, end)  # the decision's record
    assert not store.holds_records(decided + 1, end)  # its marker alone
    [written] = store.write([vc_record("written")])  # an idempotent write, outside any transaction
    end = until(lambda: (e := store.committed_end()) > written and e, "the write", 60)
    assert store.holds_records(decided + 1, end) and not store.holds_records(written + 1, end)
    # An aborted transaction's records (a fenced replica's) are not there for a read_committed reader.
    aborted = Producer({"bootstrap.servers": kafka_cluster.bootstrap, "transactional.id": f"aborts-{topic}"})
    aborted.init_transactions(30)
    aborted.begin_transaction()
    aborted.produce(topic, key=b'["vc","lost"]', value=b"{}")
    aborted.flush(30)
    aborted.abort_transaction(30)
    end = until(lambda: (e := store.committed_end()) >= written + 3 and e, "the abort marker", 60)
    assert not store.holds_records(written + 1, end)
    assert not store.holds_records(end, end)  # an empty range
    store.close()


async def test_two_services_deciding_the_same_change_at_once_commit_it_once(kafka_cluster):
    topic = _topic()
    async with open_tenancy(_store(kafka_cluster, topic)) as a, open_tenancy(_store(kafka_cluster, topic)) as b:
        for round_ in range(5):
            name = f"once-{round_}"

            def create(service, name=name):
                def decision():  # what a management plane does: create it unless it exists
                    if name in service.image.vcs:
                        return b"exists", []
                    return b"created", [vc_record(name)]

                return decision

            answers = []

            async def decide(service, create=create, answers=answers) -> None:
                answers.append((await service.decide(create(service)))[0])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(decide, a)
                nursery.start_soon(decide, b)
            assert sorted(answers) == [b"created", b"exists"]
            await _until(lambda name=name: name in b.image.vcs and name in a.image.vcs, 120)
            assert a.image.vcs[name] == b.image.vcs[name]
        assert a.decisions + b.decisions == 5
    print(f"decisions fenced and made again: {a.fenced + b.fenced} of 5 races")


def _compacted(records: list[tuple[str, dict | None]]) -> TenancyImage:
    """The image a replay would build after compaction, which keeps only the last record per key."""
    image = TenancyImage()
    for key, value in dict(records).items():
        image.apply(key, value)
    return image


def _last_vc_id(cluster, topic: str, name: str) -> str | None:
    values = [v for k, v in _raw_records(cluster, topic) if json.loads(k) == ["vc", name]]
    return values[-1]["id"] if values and values[-1] is not None else None


async def _wait_last_vc_id(cluster, topic: str, name: str, vc_id: str, timeout: float = 120) -> None:
    with trio.fail_after(timeout):
        while await trio.to_thread.run_sync(_last_vc_id, cluster, topic, name) != vc_id:
            await trio.sleep(0.1)


async def test_a_vc_created_twice_is_repaired_so_compaction_keeps_the_first(kafka_cluster):
    topic = _topic()
    store = _store(kafka_cluster, topic)
    store.ensure_topic()
    first, second = vc_record("dup"), vc_record("dup")  # two replicas that both saw no "dup"
    store.write([first, principal_record("User:d", "dup"), second])
    store.close()
    assert _compacted(_raw_records(kafka_cluster, topic)).vcs["dup"].id == second[1]["id"]  # the problem
    async with open_tenancy(_store(kafka_cluster, topic)) as service:
        assert service.image.vcs["dup"].id == first[1]["id"]  # log order: the first one wins
        await _wait_last_vc_id(kafka_cluster, topic, "dup", first[1]["id"])
    assert _compacted(_raw_records(kafka_cluster, topic)).vcs["dup"] == service.image.vcs["dup"]


async def test_concurrent_seeding_converges_and_survives_compaction(kafka_cluster):
    """Two replicas seeding the same VC into an empty topic at once end with the same ids, and so
    does a replay after compaction."""
    topic = _topic()
    _store(kafka_cluster, topic).ensure_topic()
    seed = [VirtualClusterSeedConfig(name="team-s", principals=["User:s"], client_ids=["app-s"])]
    services = []
    async with trio.open_nursery() as nursery:

        async def open_one() -> None:
            async with open_tenancy(_store(kafka_cluster, topic), seed) as service:
                services.append(service)
                await trio.sleep_forever()

        nursery.start_soon(open_one)
        nursery.start_soon(open_one)
        await _until(lambda: len(services) == 2, 60)
        a, b = services
        await _wait_last_vc_id(kafka_cluster, topic, "team-s", a.image.vcs["team-s"].id)
        nursery.cancel_scope.cancel()
    assert a.image.vcs["team-s"] == b.image.vcs["team-s"]
    assert a.image.vc_for("User:s").name == b.image.vc_for(None, "app-s").name == "team-s"
    records = _raw_records(kafka_cluster, topic)
    assert image_to_dict(_replayed(kafka_cluster, topic)) == image_to_dict(a.image)
    assert image_to_dict(_compacted(records)) == image_to_dict(a.image)


async def test_follower_survives_a_broker_bounce(kafka_cluster):
    brokers = sorted(b.node_id for b in kafka_cluster.brokers)
    assert len(brokers) >= 3 and hasattr(kafka_cluster, "libs"), "needs the local 3-broker launcher"
    topic = _topic()
    # The partition leader is the first replica: a broker that is not the controller (node 1).
    victim = brokers[-1]
    _create(
        kafka_cluster, topic, replicas=[victim, *[n for n in brokers if n != victim]], **{"cleanup.policy": "compact"}
    )
    async with open_tenancy(_store(kafka_cluster, topic)) as a, open_tenancy(_store(kafka_cluster, topic)) as b:
        await a.write([vc_record("before")])
        await _until(lambda: "before" in b.image.vcs, 120)
        await trio.to_thread.run_sync(lambda: kafka_cluster.stop_broker(victim, hard=True))  # the leader dies
        try:
            started = time.monotonic()
            await a.write([vc_record("during")], timeout=60)  # the leader moves to a surviving replica
            await _until(lambda: "during" in b.image.vcs, 120)
            during = time.monotonic() - started
        finally:
            await trio.to_thread.run_sync(kafka_cluster.start_broker, victim)
        started = time.monotonic()
        await a.write([vc_record("after")], timeout=60)
        await _until(lambda: "after" in b.image.vcs, 120)
        print(f"broker {victim} down: change seen after {during:.2f} s; back up: {time.monotonic() - started:.2f} s")
        assert image_to_dict(a.image) == image_to_dict(b.image)


# -- two real proxy processes ------------------------------------------------------------------------


def test_two_proxy_processes_replay_seed_and_follow_the_state_topic(kafka_cluster, tmp_path, capsys):
    topic = _topic()
    tenancy = {
        "enabled": True,
        "state_topic": topic,
        "virtual_clusters": [{"name": "seeded", "principals": ["User:seed"], "client_ids": ["seed-app"]}],
    }
    procs = [
        ProxyProcess(proxy_config(kafka_cluster.bootstrap, free_port_block(), tenancy=tenancy), tmp_path, name=name)
        for name in ("proxy-1", "proxy-2")
    ]
    try:
        for proc in procs:
            proc.start(timeout=120)
        logs = [proc.log_path.read_text() for proc in procs]
        for text in logs:
            # Replayed (and seeded) before the proxy said it was ready.
            assert text.index("replayed ") < text.index("proxy ready:")
            assert re.search(r"virtual cluster seeded cluster id \S+", text)
        assert "seeded 4 state record(s)" in logs[0]  # the VC, its two bindings, and what was seeded
        assert not re.search(r"seeded \d+ state record", logs[1])  # same YAML: nothing to write
        seeded_ids = {re.search(r"virtual cluster seeded cluster id (\S+)", text).group(1) for text in logs}
        assert len(seeded_ids) == 1

        store = _store(kafka_cluster, topic)
        store.write([client_record("warm-up", None)])  # a harmless tombstone: the producer is connected now
        key, value = vc_record("team-x")
        started = time.monotonic()
        store.write([(key, value), principal_record("User:x", "team-x")])
        line = f"virtual cluster team-x cluster id {value['cluster_id']} (id {value['id']})"
        deadline = started + 120  # the bound asserted below is PROPAGATION_LIMIT
        seen: dict[int, float] = {}
        while len(seen) < len(procs) and time.monotonic() < deadline:
            for i, proc in enumerate(procs):
                if i not in seen and line in proc.log_path.read_text():
                    seen[i] = time.monotonic() - started
            time.sleep(0.005)
        store.close()
        assert len(seen) == len(procs), [p.log_tail() for p in procs]
        with capsys.disabled():
            print(f"state propagation to two proxy processes: {', '.join(f'{s * 1000:.0f} ms' for s in seen.values())}")
        assert max(seen.values()) < PROPAGATION_LIMIT, seen
        for proc in procs:
            assert proc.proc is not None and proc.proc.poll() is None, proc.log_tail()

        # `vcproxy state dump` shows the same state.
        from vcproxy_tools.cli import main

        capsys.readouterr()
        assert main(["state", "dump", "--config", str(procs[0].config_path)]) == 0
        dump = yaml.safe_load(capsys.readouterr().out)
        assert dump["state_topic"] == topic and dump["records"] == 7  # 4 seeded, the tombstone, team-x, its principal
        assert dump["virtual_clusters"]["team-x"]["cluster_id"] == value["cluster_id"]
        assert dump["virtual_clusters"]["team-x"]["principals"] == ["User:x"]
        assert dump["virtual_clusters"]["seeded"]["cluster_id"] in seeded_ids
        assert dump["virtual_clusters"]["seeded"]["client_ids"] == ["seed-app"]
    finally:
        for proc in procs:
            assert proc.stop(timeout=60) == 0, proc.log_tail()
