"""CreateTopics in a VC creates exactly one physical topic per link (issue 8, class 8).

Two proxy replicas share one state topic, in front of the session's real Kafka. Creators are real
clients (confluent-kafka AdminClient threads, Kafka's Java producer) and hand-built frames for what
clients refuse to send (a name twice in one request). Every outcome is checked on the physical cluster
and in the state topic, replayed independently of the proxies.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from proxy.protocol.apis import request_type
from tests.integration.rawclient import RawClient
from tests.integration.test_fail_closed import build
from vcproxy_tools.process import ProxyProcess

from .polling import until
from .ports import free_port_block
from .tenants import by_client_id, replayed, tenancy_config
from .tool_jvm import run_tool

TENANTS = ("team-a", "team-b")
VC_TOPIC = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.(.+)$")


@pytest.fixture(scope="module")
def replicas(kafka_cluster, tmp_path_factory) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    workdir = tmp_path_factory.mktemp("create-race")
    vcs = by_client_id(TENANTS)
    vcs[0]["delete_physical_topics"] = True  # team-a opts in: its deletes leave no orphan behind
    config = tenancy_config(kafka_cluster, free_port_block(), vcs)
    first = ProxyProcess(config, workdir, name="race-1").start(timeout=120)
    second_config = copy.deepcopy(config)
    second_config["listeners"]["bootstrap_port"] = free_port_block()
    second = ProxyProcess(second_config, workdir, name="race-2").start(timeout=120)
    yield first, second
    second.stop()
    first.stop()


def physical(kafka_cluster, link: str) -> set[str]:
    """Every physical VC topic on the cluster for this link name."""
    topics = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap}).list_topics(timeout=10).topics
    return {t for t in topics if (m := VC_TOPIC.match(t)) and m.group(1) == link}


def create_once(proxy: ProxyProcess, name: str, start: threading.Barrier) -> int:
    """One creator: its own client, released with the others; the error code it got (0: created)."""
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, "client.id": "team-a-app"})
    admin.list_topics(timeout=10)  # connected before the race starts
    start.wait()
    try:
        admin.create_topics([NewTopic(name, 1, 3)], operation_timeout=30)[name].result(60)
        return 0
    except KafkaException as exc:
        return exc.args[0].code()


def race(proxies: list[ProxyProcess], name: str, creators: int = 8) -> list[int]:
    start = threading.Barrier(creators)
    with ThreadPoolExecutor(creators) as pool:
        futures = [pool.submit(create_once, proxies[i % len(proxies)], name, start) for i in range(creators)]
        return sorted(f.result() for f in futures)


def delete(proxy: ProxyProcess, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, "client.id": "team-a-app"})
    admin.delete_topics([name], operation_timeout=30)[name].result(60)


def assert_one_winner(kafka_cluster, proxy: ProxyProcess, name: str, codes: list[int]) -> str:
    assert codes == [0] + [KafkaError.TOPIC_ALREADY_EXISTS] * (len(codes) - 1), codes
    [topic] = physical(kafka_cluster, name)
    assert replayed(kafka_cluster, proxy).vcs["team-a"].links[name] == topic
    return topic


@pytest.mark.parametrize("spread", ["one replica", "two replicas"])
def test_concurrent_creators_get_one_topic_and_one_success(kafka_cluster, replicas, spread):
    proxies = list(replicas) if spread == "two replicas" else [replicas[0]]
    name = f"race-{uuid.uuid4().hex[:8]}"
    topic = assert_one_winner(kafka_cluster, replicas[0], name, race(proxies, name))
    delete(proxies[-1], name)
    until(lambda: not physical(kafka_cluster, name), f"{topic} deleted")  # no orphan left behind
    assert name not in replayed(kafka_cluster, replicas[0]).vcs["team-a"].links
    # Created again: a new physical topic (never the old one, which may still be being deleted).
    again = assert_one_winner(kafka_cluster, replicas[0], name, race(proxies, name))
    assert again != topic


def test_a_name_twice_in_one_request_is_invalid_request(kafka_cluster, replicas):
    dup, single = f"dup-{uuid.uuid4().hex[:8]}", f"single-{uuid.uuid4().hex[:8]}"
    topics = [{"name": n, "num_partitions": 1, "replication_factor": 3} for n in (dup, single, dup)]
    with RawClient(replicas[0].bootstrap) as client:
        client.send_raw(RawClient.encode(19, 7, 1, build(request_type(19, 7), topics=topics), "team-a-app"))
        _, response = RawClient.decode(19, 7, client.read_frame())
    results = {t.name: t for t in response.topics}
    assert set(results) == {dup, single}
    assert results[dup].error_code == ErrorCode.invalid_request
    assert results[dup].error_message == "Duplicate topic name."
    assert results[single].error_code == ErrorCode.none
    assert not physical(kafka_cluster, dup)
    assert len(physical(kafka_cluster, single)) == 1


def test_producers_racing_with_the_creation_never_see_a_foreign_or_zero_topic_id(kafka_cluster, replicas):
    """Kafka's Java producer (Produce v13: topic ids) starts before the topic exists and keeps producing
    while eight creators race; every record is acknowledged."""
    name = f"busy-{uuid.uuid4().hex[:8]}"
    records = 3000
    args = ["--topic", name, "--num-records", str(records), "--record-size", "100", "--throughput", "2000",
            "--producer-props", f"bootstrap.servers={replicas[0].bootstrap}", "client.id=team-a-app", "acks=all",
            "linger.ms=0", "max.block.ms=60000"]  # fmt: skip
    with ThreadPoolExecutor(1) as pool:
        producing = pool.submit(run_tool, "kafka-producer-perf-test", args, timeout=240)
        codes = race(list(replicas), name)
        result = producing.result()
    out, err = result.stdout, result.stderr
    assert_one_winner(kafka_cluster, replicas[0], name, codes)
    assert result.returncode == 0, err[-3000:]
    assert f"{records} records sent" in out, out[-2000:]
    for symptom in ("IllegalStateException", "AAAAAAAAAAAAAAAAAAAAAA", "UNKNOWN_TOPIC_ID", "UnknownTopicIdException"):
        assert symptom not in out + err, (out + err)[-3000:]


def orphans(proxy: ProxyProcess, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vcproxy_tools", "state", "orphans", "--config", str(proxy.config_path), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_orphans_command_lists_then_deletes_a_planted_orphan_and_a_dangling_link(kafka_cluster, replicas):
    proxy = replicas[0]
    broker = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    planted = f"{uuid.uuid4()}.planted-{uuid.uuid4().hex[:6]}"
    broker.create_topics([NewTopic(planted, 1, 1)])[planted].result(30)
    dangling = f"gone-{uuid.uuid4().hex[:8]}"
    assert race([proxy], dangling, creators=1) == [0]
    [dangling_topic] = physical(kafka_cluster, dangling)
    broker.delete_topics([dangling_topic])[dangling_topic].result(30)  # behind the proxy's back
    until(lambda: not physical(kafka_cluster, dangling), "the physical topic gone")

    dry = orphans(proxy)
    assert dry.returncode == 0, dry.stderr
    assert planted in dry.stdout and dangling_topic in dry.stdout
    assert "dry run" in dry.stderr
    assert planted in physical(kafka_cluster, planted.partition(".")[2])  # nothing deleted
    assert dangling in replayed(kafka_cluster, proxy).vcs["team-a"].links

    done = orphans(proxy, "--delete")
    assert done.returncode == 0, done.stderr
    until(lambda: not physical(kafka_cluster, planted.partition(".")[2]), "the planted orphan deleted")
    assert dangling not in replayed(kafka_cluster, proxy).vcs["team-a"].links
    again = orphans(proxy)
    assert planted not in again.stdout and dangling_topic not in again.stdout
    # The tenant can create the name again, under a new generation.
    assert race([proxy], dangling, creators=2) == [0, KafkaError.TOPIC_ALREADY_EXISTS]
    assert physical(kafka_cluster, dangling) - {dangling_topic}


def test_no_tool_reports_a_traceback(replicas):
    for proxy in replicas:
        log = proxy.log_path.read_text(errors="replace")
        assert "Traceback" not in log, proxy.log_tail(lines=80)
