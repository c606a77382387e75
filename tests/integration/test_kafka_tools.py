"""`vcproxy kafka tool` with the tools it gained (the ones of Kafka's bin/ it lacked), against real Kafka."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from vcproxy_tools.kafka import cds, cli
from vcproxy_tools.kafka.dist import DEFAULT_KAFKA_VERSION, ensure_dist, ensure_extra_libs
from vcproxy_tools.kafka.tools import SPECS, cds_archive, run_tool, tool_command


def _ok(result) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


@pytest.fixture
def topic(kafka_cluster) -> str:
    """A 3-partition topic with records 0..4 in partition 0."""
    name = f"tools-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    admin.create_topics([NewTopic(name, 3, 3)], operation_timeout=30)[name].result(60)
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap})
    for i in range(5):
        producer.produce(name, str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    return name


def _classes(libs: list[Path]) -> set[str]:
    names: set[str] = set()
    for lib in libs:
        for jar in lib.glob("*.jar"):
            with zipfile.ZipFile(jar) as z:
                names.update(n[: -len(".class")].replace("/", ".") for n in z.namelist() if n.endswith(".class"))
    return names


def test_every_tool_main_class_is_in_the_jars_it_runs_with(kafka_cluster):
    """Each tool's main class (for trogdor, each action's) is on the classpath `kafka tool` gives it:
    the dist, plus the artifacts it resolves on first use (Connect, kafka-shell, trogdor)."""
    version = kafka_cluster.version or DEFAULT_KAFKA_VERSION
    dist = ensure_dist(version)
    classes = {(): _classes([dist])}
    for name, spec in sorted(SPECS.items()):
        if spec.artifacts not in classes:
            classes[spec.artifacts] = classes[()] | _classes([ensure_extra_libs(spec.artifacts, version)])
        mains = [spec.main] if spec.main else list(spec.actions.values())
        for main in mains:
            assert main in classes[spec.artifacts], f"{name}: {main} is not in its jars"


def test_kafka_delete_records(kafka_cluster, topic, tmp_path):
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 3}]}))
    out = _ok(
        run_tool(
            "kafka-delete-records",
            ["--bootstrap-server", kafka_cluster.bootstrap, "--offset-json-file", str(offsets)],
            version=kafka_cluster.version or DEFAULT_KAFKA_VERSION,
        )
    )
    assert f"partition: {topic}-0\tlow_watermark: 3" in out
    consumer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap, "group.id": "tools"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20) == (3, 5)
    finally:
        consumer.close()


def test_kafka_log_dirs(kafka_cluster, topic):
    out = _ok(
        run_tool(
            "kafka-log-dirs",
            ["--bootstrap-server", kafka_cluster.bootstrap, "--describe", "--topic-list", topic],
            version=kafka_cluster.version or DEFAULT_KAFKA_VERSION,
        )
    )
    report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    partitions = [p["partition"] for b in report["brokers"] for d in b["logDirs"] for p in d["partitions"]]
    replicas = [p for p in partitions if p.startswith(f"{topic}-")]
    assert sorted(replicas) == sorted(f"{topic}-{p}" for p in range(3) for _ in range(3))


def test_kafka_leader_election_through_the_cli(kafka_cluster, topic, capfd):
    args = ["--bootstrap-server", kafka_cluster.bootstrap, "--election-type", "PREFERRED"]
    code = cli.main(["kafka", "tool", "kafka-leader-election", *args, "--topic", topic, "--partition", "0"])
    out = capfd.readouterr().out
    assert code == 0, out
    # A fresh topic's leader is its preferred replica already.
    assert f"Valid replica already elected for partitions {topic}-0" in out


def test_kafka_metadata_shell_reads_the_metadata_log(kafka_cluster, topic, tmp_path):
    """kafka-shell is resolved on first use. The shell refuses a live broker's log dir (it takes the
    dir's lock), so it reads a copy; a batch cut off at the copy's end is not read, and the topic's
    records were committed before the copy."""
    # Fails, never skips, outside the local launcher (as stop_broker does): CI always uses it.
    assert kafka_cluster.dir is not None, "needs the local launcher's node directories (VCPROXY_KAFKA_MODE=local)"
    live = Path(kafka_cluster.dir) / "n1" / "data" / "__cluster_metadata-0" / "00000000000000000000.log"
    log = tmp_path / "__cluster_metadata-0" / live.name
    log.parent.mkdir()
    # The copy can end in a batch being written (other tests create topics meanwhile), and the shell stops
    # at the first incomplete batch: copy again until the topic's committed records are in a complete prefix.
    deadline = time.monotonic() + 120
    while True:
        shutil.copyfile(live, log)
        out = _ok(
            run_tool(
                "kafka-metadata-shell",
                ["--snapshot", str(log), "ls", "/image/topics/byName"],
                version=kafka_cluster.version or DEFAULT_KAFKA_VERSION,
            )
        )
        if topic in out.split() or time.monotonic() > deadline:
            break
    assert topic in out.split()


def test_a_third_call_maps_the_tools_class_data_archive_and_prints_the_same(
    kafka_cluster, topic, tmp_path, monkeypatch
):
    """A tool's first call leaves a marker, its second writes its AppCDS archive, the next maps it (its
    classes come from the "shared objects file"); stdout is what the tool prints without one. A JVM that
    cannot use an archive (another class path) runs without it and says nothing about it where tests read."""
    # Archives of its own: in the shared cache another test process's kafka-topics could leave the marker
    # or write the archive between these calls (it did, with two workers).
    monkeypatch.setenv(cds.DIR_ENV, str(tmp_path / "cds"))
    version = kafka_cluster.version or DEFAULT_KAFKA_VERSION
    args = ["--bootstrap-server", kafka_cluster.bootstrap, "--describe", "--topic", topic]
    archive = cds_archive("kafka-topics", args, version)
    assert archive is not None and archive.parent == tmp_path / "cds" and not archive.parent.exists()
    plain = _ok(run_tool("kafka-topics", args, version=version, use_cds=False))
    assert f"Topic: {topic}\t" in plain and not archive.exists()

    first = run_tool("kafka-topics", args, version=version, use_cds=True)
    assert _ok(first) == plain and "[cds" not in first.stderr
    assert not archive.exists(), "a tool's first call wrote its archive"
    writing = run_tool("kafka-topics", args, version=version, use_cds=True)
    assert _ok(writing) == plain and "[cds" not in writing.stderr
    assert archive.is_file(), "the second clean call wrote no archive"

    second = tool_command("kafka-topics", args, version=version, use_cds=True)
    assert f"-XX:SharedArchiveFile={archive}" in second.argv
    loads = tmp_path / "class-load.log"
    mapped = _with_jvm_flag(second.argv, f"-Xlog:class+load=info:file={loads}")
    result = subprocess.run(mapped, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert _ok(result) == plain and "[cds" not in result.stderr
    lines = loads.read_text().splitlines()
    assert any("org.apache.kafka.tools.TopicCommand source: shared objects file" in ln for ln in lines)
    assert any("org.apache.kafka.clients.admin.KafkaAdminClient source: shared objects file" in ln for ln in lines)

    # The same archive with a class path it was not written for: refused, silently.
    other = list(second.argv)
    cp = other.index("-cp") + 1
    other[cp] = f"{tmp_path}:{other[cp]}"
    refused = subprocess.run(other, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert _ok(refused) == plain and "[cds" not in refused.stderr and "shared archive" not in refused.stderr


def _with_jvm_flag(argv: list[str], flag: str) -> list[str]:
    return [argv[0], flag, *argv[1:]]
