"""`vcproxy kafka tool`: the tool table against the scripts of Kafka 4.2's bin/, and how each runs."""

from __future__ import annotations

import os
import time

import pytest

from vcproxy_tools.kafka import cds, tools
from vcproxy_tools.kafka.dist import BROKER_LOG4J, TOOLS_LOG4J, render_extras_pom
from vcproxy_tools.kafka.errors import KafkaLauncherError
from vcproxy_tools.kafka.tools import ALIASES, NOT_OFFERED, SPECS, TOOLS, main_class, spec, tool_names

# The scripts of the Apache Kafka 4.2.0 binary release's bin/ (bin/windows holds the .bat twins), and
# the main class each runs (`exec .../kafka-run-class.sh <class> "$@"`; trogdor.sh picks one per action).
KAFKA_42_BIN = {
    "connect-distributed.sh": "org.apache.kafka.connect.cli.ConnectDistributed",
    "connect-mirror-maker.sh": "org.apache.kafka.connect.mirror.MirrorMaker",
    "connect-plugin-path.sh": "org.apache.kafka.tools.ConnectPluginPath",
    "connect-standalone.sh": "org.apache.kafka.connect.cli.ConnectStandalone",
    "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
    "kafka-broker-api-versions.sh": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-client-metrics.sh": "org.apache.kafka.tools.ClientMetricsCommand",
    "kafka-cluster.sh": "org.apache.kafka.tools.ClusterTool",
    "kafka-configs.sh": "kafka.admin.ConfigCommand",
    "kafka-console-consumer.sh": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-producer.sh": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-share-consumer.sh": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-consumer-groups.sh": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-consumer-perf-test.sh": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-delegation-tokens.sh": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-delete-records.sh": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-dump-log.sh": "kafka.tools.DumpLogSegments",
    "kafka-e2e-latency.sh": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-features.sh": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets.sh": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-groups.sh": "org.apache.kafka.tools.GroupsCommand",
    "kafka-jmx.sh": "org.apache.kafka.tools.JmxTool",
    "kafka-leader-election.sh": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-log-dirs.sh": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-metadata-quorum.sh": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-metadata-shell.sh": "org.apache.kafka.shell.MetadataShell",
    "kafka-producer-perf-test.sh": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-reassign-partitions.sh": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-replica-verification.sh": "org.apache.kafka.tools.ReplicaVerificationTool",
    "kafka-run-class.sh": None,  # runs the class it is given
    "kafka-server-start.sh": "kafka.Kafka",
    "kafka-server-stop.sh": None,  # a ps | grep | kill script, no class
    "kafka-share-consumer-perf-test.sh": "org.apache.kafka.tools.ShareConsumerPerformance",
    "kafka-share-groups.sh": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-storage.sh": "kafka.tools.StorageTool",
    "kafka-streams-application-reset.sh": "org.apache.kafka.tools.StreamsResetter",
    "kafka-streams-groups.sh": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
    "kafka-transactions.sh": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-verifiable-consumer.sh": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-verifiable-producer.sh": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-share-consumer.sh": "org.apache.kafka.tools.VerifiableShareConsumer",
    "trogdor.sh": None,  # agent, coordinator, client, agent-client
}
TROGDOR_ACTIONS = {
    "agent": "org.apache.kafka.trogdor.agent.Agent",
    "coordinator": "org.apache.kafka.trogdor.coordinator.Coordinator",
    "client": "org.apache.kafka.trogdor.coordinator.CoordinatorClient",
    "agent-client": "org.apache.kafka.trogdor.agent.AgentClient",
}


@pytest.fixture
def fake_jvm(monkeypatch, tmp_path):
    """tool_argv without Java or Maven: the dist and extra libs are fixed paths."""
    monkeypatch.setattr(tools, "java_executable", lambda: "/usr/bin/java")
    monkeypatch.setattr(tools, "ensure_dist", lambda version: tmp_path / "dist")
    resolved = []

    def extra(artifacts, version):
        resolved.append(tuple(artifacts))
        return tmp_path / "extra"

    monkeypatch.setattr(tools, "ensure_extra_libs", extra)
    return resolved


def test_every_script_of_kafka_42_bin_is_offered_or_said_why_not():
    scripts = {name.removesuffix(".sh") for name in KAFKA_42_BIN}
    assert set(SPECS) | set(NOT_OFFERED) == scripts
    assert not set(SPECS) & set(NOT_OFFERED)
    assert tool_names() == sorted(scripts - set(NOT_OFFERED))


@pytest.mark.parametrize("script", sorted(KAFKA_42_BIN))
def test_main_class_is_the_scripts(script):
    name = script.removesuffix(".sh")
    if name in NOT_OFFERED:
        with pytest.raises(KafkaLauncherError, match=f"{name} is not offered: .*vcproxy kafka stop"):
            spec(name)
        return
    assert spec(script).main == KAFKA_42_BIN[script]  # a trailing .sh is accepted
    if KAFKA_42_BIN[script] is not None:
        assert main_class(name) == TOOLS[name] == KAFKA_42_BIN[script]


def test_the_tools_the_issue_missed_are_there():
    for name in (
        "kafka-delete-records",
        "kafka-leader-election",
        "kafka-log-dirs",
        "kafka-reassign-partitions",
        "kafka-delegation-tokens",
        "kafka-client-metrics",
    ):
        assert name in TOOLS


def test_aliases():
    assert ALIASES == {"kafka-end-to-end-latency": "kafka-e2e-latency"}
    assert TOOLS["kafka-end-to-end-latency"] == TOOLS["kafka-e2e-latency"]


def test_unknown_tool_lists_the_known_ones():
    with pytest.raises(KafkaLauncherError, match="unknown Kafka tool 'kafka-nope'") as exc:
        spec("kafka-nope")
    assert "kafka-delete-records" in str(exc.value) and "trogdor" in str(exc.value)


def test_a_tool_runs_from_the_dist_quietly(fake_jvm, tmp_path):
    argv = tools.tool_argv("kafka-delete-records", ["--bootstrap-server", "b:1"])
    main = argv.index("org.apache.kafka.tools.DeleteRecordsCommand")
    assert argv[main + 1 :] == ["--bootstrap-server", "b:1"]
    assert argv[argv.index("-cp") + 1] == f"{tmp_path / 'dist'}/*"
    assert f"-Dlog4j2.configurationFile={TOOLS_LOG4J}" in argv and "-XX:TieredStopAtLevel=1" in argv
    assert "-Xmx256m" in argv and fake_jvm == []


def test_connect_resolves_its_artifacts_and_runs_as_a_service(fake_jvm, tmp_path):
    argv = tools.tool_argv("connect-standalone", ["worker.properties", "file-source.properties"])
    assert fake_jvm == [tools.CONNECT_ARTIFACTS]
    assert argv[argv.index("-cp") + 1] == f"{tmp_path / 'dist'}/*:{tmp_path / 'extra'}/*"
    assert f"-Dlog4j2.configurationFile={BROKER_LOG4J}" in argv  # INFO on stdout, like connect-log4j2.yaml
    assert "-XX:TieredStopAtLevel=1" not in argv and "-XX:+UseG1GC" in argv
    assert [a for a in argv if a.startswith(("-Xms", "-Xmx"))] == ["-Xms256m", "-Xmx2g"]
    with pytest.raises(KafkaLauncherError, match="-daemon is not supported"):
        tools.tool_argv("connect-standalone", ["-daemon", "worker.properties"])


def test_trogdor_takes_its_action_first(fake_jvm):
    for action, main in TROGDOR_ACTIONS.items():
        argv = tools.tool_argv("trogdor", [action, "--agent.config", "c.json", "--node-name", "n1"])
        assert argv[argv.index(main) + 1 :] == ["--agent.config", "c.json", "--node-name", "n1"]
    assert fake_jvm[0] == ("trogdor",)
    with pytest.raises(KafkaLauncherError, match=r"trogdor needs an action first \(agent, coordinator"):
        tools.tool_argv("trogdor", ["--help"])


def test_kafka_run_class_takes_the_class_first(fake_jvm):
    argv = tools.tool_argv("kafka-run-class", ["kafka.tools.DumpLogSegments", "--files", "x.log"])
    assert argv[-3:] == ["kafka.tools.DumpLogSegments", "--files", "x.log"]
    with pytest.raises(KafkaLauncherError, match="needs a main class first"):
        tools.tool_argv("kafka-run-class", ["--help"])


def test_server_start_runs_a_broker_in_the_foreground(fake_jvm):
    argv = tools.tool_argv("kafka-server-start", ["server.properties", "--override", "node.id=1"])
    assert argv[-4:] == ["kafka.Kafka", "server.properties", "--override", "node.id=1"]
    assert [a for a in argv if a.startswith(("-Xms", "-Xmx"))] == ["-Xms1g", "-Xmx1g"]


def test_metadata_shell_needs_kafka_shell(fake_jvm):
    tools.tool_argv("kafka-metadata-shell", ["--snapshot", "x.log"])
    assert fake_jvm == [("kafka-shell",)]


def test_extras_pom_leaves_clients_and_logging_to_the_dist():
    pom = render_extras_pom(["kafka-shell", "trogdor"], "4.2.0")
    assert pom.count("<dependency>") == 2
    assert "<artifactId>kafka-shell</artifactId><version>4.2.0</version>" in pom
    for excluded in ("<artifactId>kafka-clients</artifactId>", "<groupId>org.slf4j</groupId>"):
        assert pom.count(excluded) == 2


# -- class-data archives (vcproxy_tools/kafka/cds.py) --------------------------------------------------------


def _script(path, code: int):
    """A stand-in for `java` that exits with ``code`` (what cds.finish's check of an archive sees)."""
    path.write_text(f"#!/bin/sh\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def cds_jvm(monkeypatch, tmp_path):
    """tool_command with a stand-in java (exit 0), a dist of one jar and the cache in tmp_path."""
    java = _script(tmp_path / "java", 0)
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "kafka-tools-4.2.2.jar").write_bytes(b"jar")
    monkeypatch.setattr(tools, "java_executable", lambda: java)
    monkeypatch.setattr(tools, "ensure_dist", lambda version: dist)
    monkeypatch.setattr(tools, "ensure_extra_libs", lambda artifacts, version: tmp_path / "extra")
    monkeypatch.setenv("VCPROXY_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(cds.ENV, raising=False)
    monkeypatch.delenv(cds.DIR_ENV, raising=False)
    return tmp_path


def _flags(argv):
    return [a for a in argv if a.startswith(("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare", "-Xlog"))]


def _writing(name, args):
    """The command of a tool's second run, the one that writes its archive (the first leaves a marker)."""
    tools.tool_command(name, args)
    return tools.tool_command(name, args)


def test_a_tools_second_run_writes_its_archive_and_later_runs_map_it(cds_jvm):
    args = ["--bootstrap-server", "b:1", "--list"]
    once = tools.tool_command("kafka-topics", args)  # a tool run once never pays for writing one
    assert once.cds is None and _flags(once.argv) == [] and once.argv == tools.tool_argv("kafka-topics", args)
    once.finish(0)
    first = tools.tool_command("kafka-topics", args)
    archive = first.cds.archive
    assert archive.with_name(archive.name + ".seen").exists()
    assert archive.parent == cds_jvm / "cache" / "4.2.2" / "cds"
    assert archive.name.startswith("org.apache.kafka.tools.TopicCommand-") and archive.suffix == ".jsa"
    tmp = first.cds.writing
    assert tmp.parent == archive.parent and tmp.name.endswith(".tmp")
    assert _flags(first.argv) == [f"-XX:ArchiveClassesAtExit={tmp}", cds.QUIET]
    # The JVM flags come before the class path and the main class; the tool's arguments are untouched.
    assert first.argv.index(cds.QUIET) < first.argv.index("-cp")
    assert first.argv[-4:] == ["org.apache.kafka.tools.TopicCommand", *args]

    tmp.write_bytes(b"archive")  # what the JVM writes at exit
    first.finish(0)  # the stand-in java maps it: renamed into place
    assert archive.read_bytes() == b"archive" and not tmp.exists()

    second = tools.tool_command("kafka-topics", args)
    assert second.cds.writing is None
    assert _flags(second.argv) == [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", cds.QUIET]
    # Without the archive flags, the same command line.
    assert [a for a in second.argv if a not in _flags(second.argv)] == tools.tool_argv("kafka-topics", args)


def test_a_failed_or_killed_run_leaves_no_archive(cds_jvm):
    for returncode in (1, None, -9):
        command = _writing("kafka-acls", ["--list"])
        command.cds.writing.write_bytes(b"partial")
        command.finish(returncode)
        assert not command.cds.writing.exists() and not command.cds.archive.exists()
    assert tools.tool_command("kafka-acls", ["--list"]).cds.writing is not None  # the next run tries again


def test_an_archive_the_jvm_refuses_is_dropped_with_one_line_and_not_written_again(cds_jvm, caplog, monkeypatch):
    java = _script(cds_jvm / "java-refuses", 1)
    monkeypatch.setattr(tools, "java_executable", lambda: java)
    command = _writing("kafka-acls", ["--list"])
    command.cds.writing.write_bytes(b"truncated")
    with caplog.at_level("WARNING", logger="vcproxy_tools.kafka"):
        command.finish(0)
    assert not command.cds.archive.exists() and not command.cds.writing.exists()
    assert len(caplog.records) == 1 and "a JVM refused it" in caplog.records[0].getMessage()
    again = tools.tool_command("kafka-acls", ["--list"])
    assert again.cds is None and _flags(again.argv) == []


def test_archives_off_by_env_for_services_and_for_tool_argv(cds_jvm, monkeypatch):
    tools.tool_command("kafka-topics", ["--list"])  # the first run: the next ones would write
    assert tools.tool_command("kafka-topics", ["--list"], use_cds=False).cds is None
    tools.tool_command("kafka-server-start", ["server.properties"])
    assert tools.tool_command("kafka-server-start", ["server.properties"]).cds is None  # a broker runs for long
    assert _flags(tools.tool_argv("kafka-topics", ["--list"])) == []
    for off in ("0", "false", "off", "NO"):
        monkeypatch.setenv(cds.ENV, off)
        assert tools.tool_command("kafka-topics", ["--list"]).cds is None
    monkeypatch.setenv(cds.ENV, "1")
    assert tools.tool_command("kafka-topics", ["--list"]).cds is not None


def test_an_archive_is_named_for_the_jars_the_java_and_the_main_class(cds_jvm):
    dist, java = cds_jvm / "dist", str(cds_jvm / "java")
    key = cds.fingerprint(java, [dist], "org.apache.kafka.tools.TopicCommand")
    assert key == cds.fingerprint(java, [dist], "org.apache.kafka.tools.TopicCommand")
    assert key != cds.fingerprint(java, [dist], "org.apache.kafka.tools.AclCommand")
    (dist / "kafka-tools-4.2.2.jar").write_bytes(b"a rebuilt jar")
    assert key != (rebuilt := cds.fingerprint(java, [dist], "org.apache.kafka.tools.TopicCommand"))
    (dist / "extra-1.0.jar").write_bytes(b"jar")
    assert rebuilt != cds.fingerprint(java, [dist], "org.apache.kafka.tools.TopicCommand")
    other_java = _script(cds_jvm / "java2", 0)
    assert rebuilt != cds.fingerprint(other_java, [dist], "org.apache.kafka.tools.TopicCommand")


def test_a_new_archive_replaces_the_tools_older_ones(cds_jvm):
    cache = cds_jvm / "cache" / "4.2.2" / "cds"
    cache.mkdir(parents=True)
    old = cache / "org.apache.kafka.tools.TopicCommand-0000000000000000.jsa"
    refused = cache / "org.apache.kafka.tools.TopicCommand-1111111111111111.jsa.refused"
    other = cache / "org.apache.kafka.tools.TopicCommandX-0000000000000000.jsa"
    left = cache / "org.apache.kafka.tools.TopicCommand-0000000000000000.jsa.1-00000000.tmp"  # a killed caller's
    running = cache / "org.apache.kafka.tools.TopicCommand-0000000000000000.jsa.2-00000000.tmp"  # being written
    for f in (old, refused, other, left, running):
        f.write_bytes(b"x")
    two_hours_ago = time.time() - 7200
    os.utime(left, (two_hours_ago, two_hours_ago))
    command = _writing("kafka-topics", ["--list"])
    command.cds.writing.write_bytes(b"archive")
    command.finish(0)
    assert sorted(p.name for p in cache.iterdir()) == sorted([command.cds.archive.name, other.name, running.name])


def test_two_first_runs_at_once_each_write_their_own_file_and_one_wins(cds_jvm):
    tools.tool_command("kafka-configs", ["--describe"])  # the first run
    a, b = (tools.tool_command("kafka-configs", ["--describe"]) for _ in range(2))
    assert a.cds.archive == b.cds.archive and a.cds.writing != b.cds.writing
    a.cds.writing.write_bytes(b"a")
    b.cds.writing.write_bytes(b"b")
    b.finish(0)
    a.finish(0)
    assert a.cds.archive.read_bytes() == b"a"  # the last rename wins; either is a whole archive
    assert sorted(p.name for p in a.cds.archive.parent.iterdir()) == [a.cds.archive.name]


def test_a_class_path_that_cannot_be_read_runs_without_an_archive(cds_jvm, monkeypatch):
    gone = str(cds_jvm / "gone" / "java")  # as a jar removed while the dist is swapped for a newer one
    monkeypatch.setattr(tools, "java_executable", lambda: gone)
    command = tools.tool_command("kafka-topics", ["--list"])
    assert command.cds is None and _flags(command.argv) == []


def test_the_archives_directory_can_be_one_of_its_own(cds_jvm, monkeypatch):
    shared = tools.cds_archive("kafka-topics")
    assert shared is not None and shared.parent == cds_jvm / "cache" / "4.2.2" / "cds"
    monkeypatch.setenv(cds.DIR_ENV, str(cds_jvm / "own"))
    own = tools.cds_archive("kafka-topics")
    assert own == cds_jvm / "own" / shared.name
    assert _writing("kafka-topics", ["--list"]).cds.archive == own and not shared.parent.exists()


def test_cds_archive_names_the_archive_a_tools_runs_use(cds_jvm):
    archive = tools.cds_archive("kafka-topics")
    assert archive == _writing("kafka-topics", ["--list"]).cds.archive
    assert tools.cds_archive("kafka-run-class", ["kafka.tools.DumpLogSegments"]).name.startswith(
        "kafka.tools.DumpLogSegments-"
    )
    assert tools.cds_archive("kafka-server-start") is None
