"""vcproxy_tools.kafka without a running Kafka: config rendering, the port plan, errors, cache and PID handling."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vcproxy_tools.kafka import cli, dist
from vcproxy_tools.kafka.cluster import (
    BROKER_JVM_ENV,
    BROKER_JVM_FLAGS,
    _cmdline,
    broker_argv,
    broker_jvm_flags,
    check_ports_free,
    format_args,
    internal_topic_rf,
    load_cluster,
    new_cluster_id,
    node_properties,
    parse_list_endpoints,
    plan_nodes,
    render_properties,
    start_cluster,
    stop_cluster,
)
from vcproxy_tools.kafka.errors import KafkaLauncherError
from vcproxy_tools.kafka.tools import TOOLS, main_class, tool_argv


def props_for(brokers: int, racks: list[str] | None = None, sasl: bool = False, base: int = 19092):
    nodes = plan_nodes(brokers, racks, base, sasl)
    return [
        node_properties(n, brokers=brokers, controller_port=base + 1, data_dir=Path(f"/d/n{n.node_id}")) for n in nodes
    ]


# --- port plan and server.properties --------------------------------------------------------------


def test_plan_nodes_port_scheme():
    nodes = plan_nodes(3, ["r1", "r2"], 19092, sasl=True)
    assert [(n.node_id, n.port, n.sasl_port, n.controller_port, n.rack) for n in nodes] == [
        (1, 19092, 19094, 19093, "r1"),
        (2, 19102, 19104, None, "r2"),
        (3, 19112, 19114, None, "r1"),  # racks are assigned round-robin
    ]
    assert [p for p, _ in nodes[0].ports()] == [19092, 19094, 19093]


def test_plan_nodes_rejects_bad_input():
    with pytest.raises(KafkaLauncherError, match="at least 1"):
        plan_nodes(0, None, 19092, False)
    with pytest.raises(KafkaLauncherError, match="out of range"):
        plan_nodes(3, None, 65520, False)
    with pytest.raises(KafkaLauncherError, match="racks"):
        plan_nodes(1, ["r1", ""], 19092, False)


@pytest.mark.parametrize(("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (5, (3, 2))])
def test_internal_topic_rf(brokers, expected):
    assert internal_topic_rf(brokers) == expected


def test_single_combined_node():
    [p] = props_for(1)
    assert p["process.roles"] == "broker,controller"
    assert p["node.id"] == "1"
    assert p["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert p["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    assert p["inter.broker.listener.name"] == "PLAINTEXT"
    assert p["log.dirs"] == "/d/n1"
    assert "broker.rack" not in p
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
    ):
        assert p[key] == "1", key
    assert not any(k.startswith(("sasl.", "listener.name.")) for k in p)
    # No SASL users, no authorizer: the PLAINTEXT listener's clients may do anything.
    assert not {"authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found"} & set(p)


def test_three_brokers_one_controller():
    p1, p2, p3 = props_for(3, ["r1", "r2", "r3"])
    assert p1["process.roles"] == "broker,controller"
    assert p2["process.roles"] == p3["process.roles"] == "broker"
    assert {p["controller.quorum.voters"] for p in (p1, p2, p3)} == {"1@127.0.0.1:19093"}
    assert {p["controller.listener.names"] for p in (p1, p2, p3)} == {"CONTROLLER"}
    # A broker-only node must not listen on the controller listener.
    assert p2["listeners"] == "PLAINTEXT://127.0.0.1:19102"
    assert p3["listeners"] == "PLAINTEXT://127.0.0.1:19112"
    assert [p["broker.rack"] for p in (p1, p2, p3)] == ["r1", "r2", "r3"]
    for p in (p1, p2, p3):
        assert p["default.replication.factor"] == "3"
        assert p["offsets.topic.replication.factor"] == "3"
        assert p["transaction.state.log.min.isr"] == "2"
        assert p["share.coordinator.state.topic.min.isr"] == "2"
        assert p["offsets.topic.num.partitions"] == "3"
        assert p["num.partitions"] == "1"
        assert p["group.initial.rebalance.delay.ms"] == "0"
        assert p["group.consumer.session.timeout.ms"] == "6000"
        assert p["broker.session.timeout.ms"] == "4000"
        assert p["auto.create.topics.enable"] == "true"
        assert p["replica.selector.class"] == "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def test_sasl_listener_and_jaas():
    _, p2, _ = props_for(3, sasl=True)
    assert p2["listeners"] == "PLAINTEXT://127.0.0.1:19102,SASL_PLAINTEXT://127.0.0.1:19104"
    assert p2["advertised.listeners"] == p2["listeners"]
    assert (
        p2["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    )
    assert p2["inter.broker.listener.name"] == "PLAINTEXT"
    assert p2["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
    assert p2["listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    )
    plain = p2["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert plain.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ")
    assert plain.endswith(";")
    for user in ("admin", "vcproxy", "alice", "bob", "relayuser", "relaydenied"):
        assert f'user_{user}="{user}-secret"' in plain
    for mech in ("scram-sha-256", "scram-sha-512"):
        assert p2[f"listener.name.sasl_plaintext.{mech}.sasl.jaas.config"] == (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
    # Broker-side ACLs: the PLAINTEXT and controller listeners (User:ANONYMOUS) and the proxy's upstream user
    # are super users; every other SASL user gets only what ACLs grant it.
    assert p2["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert p2["super.users"] == "User:ANONYMOUS;User:vcproxy"
    assert p2["allow.everyone.if.no.acl.found"] == "false"
    p1 = props_for(1, sasl=True)[0]
    assert p1["authorizer.class.name"] == p2["authorizer.class.name"] and p1["super.users"] == p2["super.users"]
    assert p1["listeners"].endswith(",CONTROLLER://127.0.0.1:19093")
    assert "CONTROLLER" not in p1["advertised.listeners"]


def test_render_properties():
    text = render_properties({"a.b": "1", "log.dirs": "C:\\x"})
    assert text.splitlines()[1:] == ["a.b=1", "log.dirs=C:\\\\x"]
    assert text.startswith("#") and text.endswith("\n")


def test_format_args():
    args = format_args("abc", Path("/d/n1/server.properties"), "4.2.0", sasl=True)
    assert args[:5] == ["format", "-t", "abc", "-c", "/d/n1/server.properties"]
    assert not {"--standalone", "--initial-controllers", "--no-initial-controllers", "--feature"} & set(args)
    scram = [args[i + 1] for i, a in enumerate(args) if a == "--add-scram"]
    assert len(scram) == 12
    assert "SCRAM-SHA-512=[name=alice,password=alice-secret]" in scram
    assert "SCRAM-SHA-256=[name=vcproxy,password=vcproxy-secret]" in scram
    assert "--add-scram" not in format_args("abc", Path("/x"), "4.2.0", sasl=False)
    # 4.1 needs share groups switched on at format time.
    assert format_args("abc", Path("/x"), "4.1.1", sasl=False)[-2:] == ["--feature", "share.version=1"]


def test_broker_argv(monkeypatch):
    monkeypatch.delenv(BROKER_JVM_ENV, raising=False)
    argv = broker_argv("/usr/bin/java", Path("/libs"), Path("/d/n2"), "768m")
    assert argv[:3] == ["/usr/bin/java", "-Xms768m", "-Xmx768m"]
    assert set(BROKER_JVM_FLAGS) <= set(argv)
    assert argv[-4:] == ["-cp", "/libs/*", "kafka.Kafka", "/d/n2/server.properties"]


def test_a_short_lived_brokers_jvm_is_lean_when_asked(monkeypatch):
    """The suite's brokers (VCPROXY_KAFKA_BROKER_JVM=lean): C1 and the serial GC in place of the service flags;
    one garbage collector only, or the JVM refuses to start."""
    monkeypatch.setenv(BROKER_JVM_ENV, "lean")
    argv = broker_argv("/usr/bin/java", Path("/libs"), Path("/d/n2"), "768m")
    assert "-XX:TieredStopAtLevel=1" in argv and "-XX:+UseSerialGC" in argv
    assert not [
        flag for flag in argv if flag.startswith("-XX:+Use") and flag.endswith("GC") and flag != "-XX:+UseSerialGC"
    ]
    assert broker_jvm_flags({BROKER_JVM_ENV: "server"}) == BROKER_JVM_FLAGS


def test_new_cluster_id():
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    for cid in ids:
        assert len(cid) == 22 and set(cid) <= alphabet and not cid.startswith("-")


def test_parse_list_endpoints():
    text = (
        "ID         HOST      PORT       RACK STATE      ENDPOINT_TYPE  \n"
        "1          127.0.0.1 19092      r1 unfenced   broker         \n"
        "2          127.0.0.1 19102      null fenced   broker         \n"
    )
    assert parse_list_endpoints(text) == {1: ("r1", "unfenced"), 2: (None, "fenced")}
    assert parse_list_endpoints("Error: boom\n") == {}


# --- errors ---------------------------------------------------------------------------------------


def test_port_in_use(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(
            KafkaLauncherError, match=rf"port {port} is in use: stop the process using it or pass --base-port"
        ):
            check_ports_free([(port, "test")])
        # start_cluster checks ports before it resolves jars or writes anything.
        with pytest.raises(KafkaLauncherError, match=f"port {port} is in use"):
            start_cluster(tmp_path / "c", brokers=1, base_port=port)
        assert not (tmp_path / "c").exists()


def test_unknown_tool():
    with pytest.raises(KafkaLauncherError, match="unknown Kafka tool 'kafka-nope'") as exc:
        tool_argv("kafka-nope", [])
    assert "kafka-topics" in str(exc.value) and "kafka-console-consumer" in str(exc.value)


def test_tools_table():
    assert main_class("kafka-topics.sh") == "org.apache.kafka.tools.TopicCommand"
    assert TOOLS["kafka-e2e-latency"] == TOOLS["kafka-end-to-end-latency"]
    assert TOOLS["kafka-configs"] == "kafka.admin.ConfigCommand"
    assert TOOLS["kafka-storage"] == "kafka.tools.StorageTool"


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """A bin dir with a fake `java 17`; tests add a fake `mvn`. shutil.which only sees this dir."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "java", "echo 'openjdk version \"17.0.15\" 2025-04-15' >&2\n")

    def which(name, *args, **kwargs):
        candidate = bindir / name
        return str(candidate) if candidate.exists() else None

    monkeypatch.setattr(shutil, "which", which)
    monkeypatch.delenv("VCPROXY_KAFKA_CACHE", raising=False)
    return bindir


def test_missing_java(fake_bin, tmp_path):
    (fake_bin / "java").unlink()
    with pytest.raises(KafkaLauncherError, match=r"no `java` on PATH.*Java 17"):
        dist.ensure_dist(cache_dir=tmp_path / "cache")


def test_old_java(fake_bin, tmp_path):
    _script(fake_bin / "java", "echo 'java version \"1.8.0_292\"' >&2\n")
    with pytest.raises(KafkaLauncherError, match=r"is Java 8; Kafka 4.x needs Java 17"):
        dist.ensure_dist(cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025', 17),
        ('java version "1.8.0_292"', 8),
        ('openjdk version "21-ea"', 21),
        ("?", None),
    ],
)
def test_parse_java_major(text, major):
    assert dist.parse_java_major(text) == major


def test_missing_mvn(fake_bin, tmp_path):
    with pytest.raises(KafkaLauncherError, match=r"no `mvn` on PATH"):
        dist.ensure_dist(cache_dir=tmp_path / "cache")


def test_maven_cannot_reach_central(fake_bin, tmp_path):
    _script(
        fake_bin / "mvn",
        "echo '[ERROR] Failed to execute goal: Could not transfer artifact org.apache.kafka:kafka_2.13:pom:4.2.0 "
        "from/to central (https://repo.maven.apache.org/maven2): Connect to repo.maven.apache.org:443 failed: "
        "Connection refused -> [Help 1]'\nexit 1\n",
    )
    with pytest.raises(KafkaLauncherError) as exc:
        dist.ensure_dist(cache_dir=tmp_path / "cache")
    msg = str(exc.value)
    assert "Maven could not download" in msg and "from Maven Central" in msg
    assert "check network/proxy settings in ~/.m2/settings.xml" in msg
    assert "Connection refused" in msg  # the tail of Maven's output
    assert not (tmp_path / "cache" / "4.2.0" / ".complete").exists()


def test_maven_unknown_version(fake_bin, tmp_path):
    _script(
        fake_bin / "mvn",
        "echo '[ERROR] Could not find artifact org.apache.kafka:kafka_2.13:jar:4.9.7 in central'\nexit 1\n",
    )
    with pytest.raises(KafkaLauncherError, match=r"Kafka 4.9.7 is not on Maven Central"):
        dist.ensure_dist("4.9.7", cache_dir=tmp_path / "cache")


def test_unsupported_version():
    with pytest.raises(KafkaLauncherError, match=r"4\.1 or newer"):
        dist.ensure_dist("3.9.0")
    assert dist.log4j_version("4.1.1") == "2.24.3"
    assert dist.log4j_version("4.2.0") == "2.25.3"


def test_dist_cache_reused_and_interrupted_run_redone(fake_bin, tmp_path):
    calls = tmp_path / "calls"
    # A fake mvn that "copies" the three jars the launcher checks for into -DoutputDirectory.
    V = dist.DEFAULT_KAFKA_VERSION
    _script(
        fake_bin / "mvn",
        f"""echo run >> {calls}
for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${{a#-DoutputDirectory=}}";; esac; done
mkdir -p "$out" && touch "$out/kafka_2.13-{V}.jar" "$out/kafka-tools-{V}.jar" "$out/log4j-slf4j-impl-2.25.3.jar"
""",
    )
    cache = tmp_path / "cache"
    libs = dist.ensure_dist(cache_dir=cache)
    assert libs == cache / V / "libs"
    assert (libs / f"kafka_2.13-{V}.jar").exists()
    assert f"<version>{V}</version>" not in (cache / V / "pom.xml").read_text()  # our own pom
    assert f"<kafka.version>{V}</kafka.version>" in (cache / V / "pom.xml").read_text()
    assert "<log4j.version>2.25.3</log4j.version>" in (cache / V / "pom.xml").read_text()
    assert dist.ensure_dist(cache_dir=cache) == libs
    assert calls.read_text().count("run") == 1
    (cache / V / ".complete").unlink()  # as if the first run had been interrupted
    assert dist.ensure_dist(cache_dir=cache) == libs
    assert calls.read_text().count("run") == 2


def test_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("VCPROXY_KAFKA_CACHE", str(tmp_path))
    assert dist.cache_root() == tmp_path
    monkeypatch.delenv("VCPROXY_KAFKA_CACHE")
    assert dist.cache_root() == Path.home() / ".cache" / "vcproxy" / "kafka"


# --- PID ownership: stop_cluster never kills a process that is not the cluster's java --------------


def _state(dir: Path, pids: list[int]) -> None:
    nodes = [
        {"node_id": i + 1, "roles": ["broker"], "host": "127.0.0.1", "port": 1, "sasl_port": None,
         "controller_port": None, "rack": None, "dir": str(dir / f"n{i + 1}"), "argv": [], "pid": pid}
        for i, pid in enumerate(pids)
    ]  # fmt: skip
    state = {"dir": str(dir), "version": "4.2.0", "cluster_id": "x", "bootstrap": "127.0.0.1:1",
             "sasl_bootstrap": None, "controller_bootstrap": "127.0.0.1:2", "libs": "/l", "sasl": None,
             "nodes": nodes}  # fmt: skip
    (dir / "cluster.json").write_text(json.dumps(state))


def test_stop_cluster_only_kills_its_own_java(tmp_path):
    cdir = tmp_path / "cluster"
    cdir.mkdir()
    java = tmp_path / "bin" / "java"  # a "java" that is really Python: the name is what the check reads
    java.parent.mkdir()
    java.symlink_to(sys.executable)
    sleep = ["-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen([str(java), *sleep, f"{cdir}/n1/server.properties"])
    not_java = subprocess.Popen([sys.executable, *sleep, f"{cdir}/n2/server.properties"])
    other_dir = subprocess.Popen([str(java), *sleep, f"{tmp_path}/elsewhere/n1/server.properties"])
    try:
        deadline = time.monotonic() + 60  # until each one has exec'd: the check reads its own command line
        for child in (ours, not_java, other_dir):
            while (_cmdline(child.pid) or [""])[-1] != child.args[-1]:
                assert time.monotonic() < deadline, f"{child.args} never showed its command line"
                time.sleep(0.01)
        _state(cdir, [ours.pid, not_java.pid, other_dir.pid])
        stop_cluster(cdir, timeout=10)
        assert ours.wait(5) == -15
        assert not_java.poll() is None and other_dir.poll() is None
        assert all(n["pid"] is None for n in json.loads((cdir / "cluster.json").read_text())["nodes"])
        stop_cluster(cdir)  # idempotent
        stop_cluster(tmp_path / "never-started")  # nothing recorded: nothing to do
    finally:
        for p in (ours, not_java, other_dir):
            p.kill()
            p.wait()


def test_load_cluster(tmp_path):
    _state(tmp_path, [None])
    info = load_cluster(tmp_path)
    assert info.bootstrap == "127.0.0.1:1" and info.sasl_bootstrap is None
    assert info.brokers == [(1, "127.0.0.1", 1, None)]
    with pytest.raises(KafkaLauncherError, match=r"no cluster\.json"):
        load_cluster(tmp_path / "nope")


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_parses_start(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        ["kafka", "start", "--dir", str(tmp_path), "--brokers", "3", "--racks", "r1,r2,r3", "--sasl"]
    )
    assert (args.brokers, args.racks, args.sasl, args.base_port, args.heap) == (
        3,
        ["r1", "r2", "r3"],
        True,
        19092,
        "512m",
    )
    args = parser.parse_args(["kafka", "tool", "kafka-topics", "--bootstrap-server", "b:1", "--list", "--version"])
    assert args.name == "kafka-topics" and args.args == ["--bootstrap-server", "b:1", "--list", "--version"]


def test_cli_error_exit_code(capsys):
    assert cli.main(["kafka", "tool", "kafka-nope", "--list"]) == 2
    err = capsys.readouterr().err
    assert "unknown Kafka tool 'kafka-nope'" in err and "Traceback" not in err


def test_cli_start_port_in_use(capsys, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["kafka", "start", "--dir", str(tmp_path), "--base-port", str(port)]) == 2
    captured = capsys.readouterr()
    assert f"port {port} is in use" in captured.err and captured.out == ""


def test_cli_module_runs():
    out = subprocess.run(
        [sys.executable, "-m", "vcproxy_tools.kafka.cli", "kafka", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        timeout=60,
    )
    assert out.returncode == 0 and "start" in out.stdout and "tool" in out.stdout


def test_cli_keep_data_restarts_on_the_recorded_ports(capsys, tmp_path):
    """`kafka start --keep-data` without --base-port starts the stopped cluster on its recorded ports,
    not the default ones: the recorded broker port is busy here, and that is the port refused."""
    node_dir = tmp_path / "n1"
    (node_dir / "data").mkdir(parents=True)
    (node_dir / "data" / "meta.properties").write_text("cluster.id=x\nnode.id=1\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        state = {
            "dir": str(tmp_path),
            "version": dist.DEFAULT_KAFKA_VERSION,
            "cluster_id": "x",
            "base_port": port,
            "heap": "768m",
            "sasl": None,
            "nodes": [{"node_id": 1, "dir": str(node_dir), "rack": None, "pid": None}],
        }
        (tmp_path / "cluster.json").write_text(json.dumps(state))
        assert cli.main(["kafka", "start", "--dir", str(tmp_path), "--keep-data"]) == 2
    assert f"port {port} is in use" in capsys.readouterr().err


def test_cli_notes_which_start_options_were_given():
    import argparse

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["kafka", "start", "--dir", "d", "--keep-data"])
    assert getattr(args, "given", set()) == set() and args.base_port == 19092  # the default, for a fresh start
    args = parser.parse_args(["kafka", "start", "--dir", "d", "--keep-data", "--base-port", "29092", "--heap", "1g"])
    assert args.given == {"base_port", "heap"} and (args.base_port, args.heap) == (29092, "1g")


def test_cli_properties_are_key_value_pairs(capsys):
    import argparse

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["kafka", "start", "--dir", "d", "--property", "a.b=1", "--property", "l=X://h:1,Y=2"])
    assert args.property == [("a.b", "1"), ("l", "X://h:1,Y=2")]  # the first "=" splits
    assert parser.parse_args(["kafka", "start", "--dir", "d"]).property == []
    for bad in ("novalue", "=1", " a=1"):
        with pytest.raises(SystemExit):
            parser.parse_args(["kafka", "start", "--dir", "d", "--property", bad])
        assert "expected KEY=VALUE" in capsys.readouterr().err


def test_cli_properties_are_refused_on_a_kept_cluster(capsys, tmp_path):
    """A restart keeps the recorded properties: one given with --keep-data would be silently dropped."""
    node_dir = tmp_path / "n1"
    (node_dir / "data").mkdir(parents=True)
    (node_dir / "data" / "meta.properties").write_text("cluster.id=x\nnode.id=1\n")
    node = {"node_id": 1, "dir": str(node_dir), "rack": None, "pid": None}
    state = {"dir": str(tmp_path), "version": dist.DEFAULT_KAFKA_VERSION, "cluster_id": "x", "base_port": 19092,
             "heap": "512m", "sasl": None, "nodes": [node]}  # fmt: skip
    (tmp_path / "cluster.json").write_text(json.dumps(state))
    assert cli.main(["kafka", "start", "--dir", str(tmp_path), "--keep-data", "--property", "a=1"]) == 2
    assert "--property applies to a fresh cluster" in capsys.readouterr().err
