"""A real Kafka Streams application (KIP-1071 streams rebalance protocol) in two virtual clusters.

Both tenants run the same word count (tests/integration/java/StreamsWordCount.java, compiled here
against the launcher's jars) with the same application.id and the same topic names, through one
real proxy, at the same time. Each must get exactly its own counts; the internal topics the group
coordinator creates on the broker must exist physically under the VC's derived names and be visible
to their own VC only; Kafka's kafka-streams-groups tool must show the group in the VC's terms.

Tenants are told apart by client id, as in test_tenancy.py: Kafka Streams derives its clients' ids
from `client.id`, and those are bound. A connection whose client id is bound to no VC is closed
(everyone is somewhere), so a Streams client that escaped its VC would fail, not pass.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from proxy.tenancy.model import TenancyImage, derived_topic_for
from vcproxy_tools.kafka.dist import DEFAULT_KAFKA_VERSION, ensure_dist, ensure_streams_libs, java_executable
from vcproxy_tools.process import ProxyProcess

from .ports import free_port_block
from .tenants import own, replayed, tap_bytes, tenancy_config
from .test_tenancy import create, produce
from .tool_jvm import run_tool

TENANTS = ("team-a", "team-b")
APP_ID = "wordcount"
INPUT, OUTPUT = "text-input", "word-counts"
INTERNAL = (f"{APP_ID}-words-repartition", f"{APP_ID}-counts-changelog")
JAVA_DIR = Path(__file__).resolve().parent / "java"
JAVA_SOURCE = JAVA_DIR / "StreamsWordCount.java"
# Kafka Streams names its clients after client.id (one stream thread): these are bound to the VC.
STREAMS_CLIENTS = (
    "-StreamThread-1-consumer",
    "-StreamThread-1-producer",
    "-StateUpdater-1-restore-consumer",  # the state updater thread restores (Kafka Streams 4.x)
    "-admin",
)
LINES = {
    "team-a": ["alpha beta alpha"] * 30,
    "team-b": ["beta gamma"] * 20 + ["delta"] * 5,
}
EXPECTED = {
    "team-a": {"alpha": 60, "beta": 30},
    "team-b": {"beta": 20, "gamma": 20, "delta": 5},
}


def client_ids(tenant: str) -> list[str]:
    return [f"{tenant}-app", f"{tenant}-admin"] + [f"{tenant}-streams{suffix}" for suffix in STREAMS_CLIENTS]


@pytest.fixture(scope="module")
def streams_proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("streams-proxy")
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        [{"name": t, "client_ids": client_ids(t)} for t in TENANTS],
        debug={"tap_dir": str(workdir / "tap")},
    )
    process = ProxyProcess(config, workdir, name="streams").start(timeout=120)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def classpath(kafka_cluster, tmp_path_factory) -> str:
    """The word count compiled against the dist's and Kafka Streams' jars (fails, never skips)."""
    version = getattr(kafka_cluster, "version", None) or DEFAULT_KAFKA_VERSION
    libs, streams_libs = ensure_dist(version), ensure_streams_libs(version)
    javac = shutil.which("javac", path=str(Path(java_executable()).resolve().parent)) or shutil.which("javac")
    assert javac, "no javac next to java or on PATH: the Streams test needs a JDK 17+"
    classes = tmp_path_factory.mktemp("streams-classes")
    jars = f"{libs}/*:{streams_libs}/*"
    subprocess.run([javac, "-d", str(classes), "-cp", jars, str(JAVA_SOURCE)], check=True, timeout=180)
    return f"{jars}:{classes}"


class StreamsApp:
    """One JVM running StreamsWordCount for a tenant; stdout+stderr in a log file."""

    def __init__(
        self,
        classpath: str,
        workdir: Path,
        tenant: str,
        bootstrap: str,
        login: str = "",
        extra: tuple[str, ...] | None = None,
    ):
        """`login`: client properties to log in with (a SASL user's); `extra`: properties beside the word
        count's own (default: a client id of the tenant's and quick commits)."""
        if extra is None:
            extra = (f"client.id={tenant}-streams", "commit.interval.ms=500", "statestore.cache.max.bytes=0")
        self.log = workdir / f"{tenant}.log"
        props = workdir / f"{tenant}.properties"
        props.write_text(
            login
            + "\n".join(
                [
                    f"application.id={APP_ID}",
                    f"bootstrap.servers={bootstrap}",
                    *extra,
                    "group.protocol=streams",
                    f"state.dir={workdir / tenant}",
                    "num.stream.threads=1",
                    "default.key.serde=org.apache.kafka.common.serialization.Serdes$StringSerde",
                    "default.value.serde=org.apache.kafka.common.serialization.Serdes$StringSerde",
                    f"wordcount.input={INPUT}",
                    f"wordcount.output={OUTPUT}",
                ]
            )
            + "\n"
        )
        argv = [
            java_executable(),
            "-Xmx256m",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2.properties'}",
            "-cp",
            classpath,
            "StreamsWordCount",
            str(props),
        ]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_running(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"Streams app exited:\n{self.text()[-4000:]}"
            if "STATE RUNNING" in self.text():
                return
            time.sleep(0.5)
        raise AssertionError(f"Streams app not RUNNING after {timeout}s:\n{self.text()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def conf(proxy: ProxyProcess, tenant: str, **extra) -> dict:
    return {"bootstrap.servers": proxy.bootstrap, "client.id": f"{tenant}-app", **extra}


def latest_counts(config: dict, expected: dict[str, int], timeout: float = 300) -> dict[str, int]:
    """The last count per word in OUTPUT, read until it equals `expected` (or the time is up)."""
    consumer = Consumer(
        {**config, "group.id": f"check-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
        | {"enable.auto.commit": False}
    )
    consumer.subscribe([OUTPUT])
    counts: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while counts != expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1):
                if msg.error():
                    raise KafkaException(msg.error())
                counts[msg.key().decode()] = int(msg.value().decode())
    finally:
        consumer.close()
    return counts


def replay(kafka_cluster, proxy: ProxyProcess) -> TenancyImage:
    return replayed(kafka_cluster, proxy)


def streams_groups_tool(proxy: ProxyProcess, tenant: str, workdir: Path, *args: str) -> str:
    config = workdir / f"{tenant}-admin.properties"
    config.write_text(f"client.id={tenant}-admin\n")
    result = run_tool(
        "kafka-streams-groups", ["--bootstrap-server", proxy.bootstrap, "--command-config", str(config), *args]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_two_vcs_run_the_same_streams_application_in_isolation(
    kafka_cluster, streams_proxy, classpath, tmp_path_factory
):
    workdir = tmp_path_factory.mktemp("streams-apps")
    for tenant in TENANTS:
        admin = AdminClient(conf(streams_proxy, tenant))
        for topic in (INPUT, OUTPUT):
            create(admin, topic)
        del admin  # closes its connections: the leak oracle below reads the tap once every one is closed
        produce(conf(streams_proxy, tenant), INPUT, LINES[tenant])

    apps = {t: StreamsApp(classpath, workdir, t, streams_proxy.bootstrap) for t in TENANTS}
    try:
        for app in apps.values():
            app.wait_running()
        for tenant in TENANTS:  # each VC counts its own words only
            assert latest_counts(conf(streams_proxy, tenant), EXPECTED[tenant]) == EXPECTED[tenant]

        # The group coordinator created the internal topics under the VCs' derived physical names,
        # and each VC links its own.
        image = replay(kafka_cluster, streams_proxy)
        physical_admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
        physical_topics = set(physical_admin.list_topics(timeout=10).topics)
        expected_physical = set()
        for tenant in TENANTS:
            vc = image.vcs[tenant]
            for name in INTERNAL:
                physical = derived_topic_for(vc.id, name)
                assert vc.links[name] == physical
                expected_physical.add(physical)
        assert expected_physical <= physical_topics, sorted(physical_topics)
        assert not any(t.startswith(INTERNAL) for t in physical_topics), "an internal topic without VC prefix"

        # Each VC sees its own topics, by their names, and nothing else.
        for tenant in TENANTS:
            topics = AdminClient(conf(streams_proxy, tenant)).list_topics(timeout=10).topics
            assert own(topics) == {INPUT, OUTPUT, *INTERNAL}, sorted(topics)

        # Kafka's own tool, as each tenant: the group with the VC's names only.
        for tenant in TENANTS:
            listed = streams_groups_tool(streams_proxy, tenant, workdir, "--list")
            assert listed.split() == [APP_ID], listed
            described = streams_groups_tool(streams_proxy, tenant, workdir, "--describe", "--group", APP_ID)
            members = streams_groups_tool(
                streams_proxy, tenant, workdir, "--describe", "--group", APP_ID, "--members", "--verbose"
            )
            offsets = streams_groups_tool(streams_proxy, tenant, workdir, "--describe", "--group", APP_ID, "--offsets")
            text = described + members + offsets
            assert APP_ID in described and INPUT in offsets, text
            for vc in image.vcs.values():
                assert vc.id not in text, text
            assert ".text-input" not in text and ".wordcount-" not in text, text  # no physical name

        # The unbound view: two physical streams groups, one per VC.
        listed = run_tool("kafka-streams-groups", ["--bootstrap-server", kafka_cluster.bootstrap, "--list"])
        assert {f"{image.vcs[t].id}.{APP_ID}" for t in TENANTS} <= set(listed.stdout.split()), listed
    finally:
        for app in apps.values():
            app.stop()
    for tenant, app in apps.items():
        assert "STATE ERROR" not in app.text(), f"{tenant}:\n{app.text()[-4000:]}"

    # DeleteGroups: team-a deletes its (now empty) group; team-b's group of the same name stays.
    wait_empty = time.monotonic() + 180
    while "Empty" not in streams_groups_tool(
        streams_proxy, "team-a", workdir, "--describe", "--group", APP_ID, "--state"
    ):
        assert time.monotonic() < wait_empty, "team-a's group never became empty"
        time.sleep(1)
    streams_groups_tool(streams_proxy, "team-a", workdir, "--delete", "--group", APP_ID)
    assert streams_groups_tool(streams_proxy, "team-a", workdir, "--list").split() == []
    assert streams_groups_tool(streams_proxy, "team-b", workdir, "--list").split() == [APP_ID]

    # Leak oracle: nothing of team-b's ever went to team-a's connections.
    a_bytes, b_bytes = tap_bytes(streams_proxy, "team-a"), tap_bytes(streams_proxy, "team-b")
    vc_a, vc_b = image.vcs["team-a"], image.vcs["team-b"]
    assert a_bytes and b_bytes, "the tap recorded nothing"
    secrets = [vc_b.id, vc_b.cluster_id, kafka_cluster.cluster_id, *vc_b.physical_links, *vc_a.physical_links]
    leaked = [s for s in secrets if s.encode() in a_bytes]
    assert not leaked, leaked
