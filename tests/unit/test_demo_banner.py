"""What `vcproxy demo` prints: steps that work top to bottom, and what happens to the cluster."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from proxy.config import load_config
from vcproxy_tools import demo
from vcproxy_tools.kafka.cluster import BrokerInfo, ClusterInfo

ROOT = Path(__file__).resolve().parents[2]


def _cluster() -> ClusterInfo:
    brokers = [BrokerInfo(n, "127.0.0.1", 29082 + 10 * n, f"r{n}") for n in (1, 2, 3)]
    return ClusterInfo(Path("/k"), "4.2.0", "oMCDYLXcThqZ_jpcCV7QXw", "b", None, brokers, Path("/libs"), "c")


@pytest.fixture
def banner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(ROOT / "config" / "demo.yaml")
    properties = demo.write_client_properties(config, demo._demo_dir(Path(".vcproxy/demo")))

    def render(kept: bool) -> str:
        return demo._instructions(config, properties, _cluster(), kept, Path(".vcproxy/demo/kafka"))

    return render


def test_the_topic_is_created_before_anything_produces_or_consumes(banner):
    commands = demo.banner_commands(banner(kept=False))
    create = next(i for i, c in enumerate(commands) if "--create" in c)
    uses = [i for i, c in enumerate(commands) if " -P" in c or " -C" in c or "console-" in c]
    assert uses and create < min(uses)
    assert "--if-not-exists" in commands[create]  # the second run's cluster has it already


def test_commands_are_whole_shell_lines(banner):
    commands = demo.banner_commands(banner(kept=False))
    assert len(commands) == 18
    for command in commands:
        lines = command.splitlines()
        assert all(line.endswith(" \\") for line in lines[:-1]) and not lines[-1].endswith("\\")
    assert commands[2].startswith("kcat -b 127.0.0.1:9192 -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=PLAIN")
    assert commands[3] == "echo hello | kcat -F .vcproxy/demo/alice.librdkafka.conf -t demo -P"
    # The management plane, as the super-admin the demo config names.
    manage = [c for c in commands if "virtual-clusters" in c]
    assert [c.split("virtual-clusters")[1].split()[0] for c in manage] == ["list", "describe", "describe"]
    assert all("--command-config .vcproxy/demo/admin.properties" in c for c in manage[:2])
    # Rights are ACLs: admin grants carol DESCRIBE_VIRTUAL_CLUSTER on team-a, and carol describes it.
    rights = [c for c in commands if " acls " in c]
    assert len(rights) == 2 and "--virtual-cluster kafka-cluster" in rights[0] and "User:carol" in rights[0]
    assert "DescribeVirtualCluster --cluster-name team-a" in rights[0] and "carol.properties" in manage[2]
    # ACLs inside team-a: alice (its admin) grants carol READ, lists, and carol reads.
    acl = [c for c in commands if "kafka-acls" in c]
    assert len(acl) == 2 and all("alice.properties" in c for c in acl) and "User:carol" in acl[0]
    assert any("console-consumer" in c and "carol.properties" in c for c in commands)
    # ...and a quota for carol, with kafka-configs
    configs = [c for c in commands if "kafka-configs" in c]
    assert len(configs) == 2 and "producer_byte_rate=1048576" in configs[0] and "--describe" in configs[1]


def test_the_banner_says_what_happens_to_the_cluster(banner):
    new, kept = banner(kept=False), banner(kept=True)
    assert "cluster oMCDYLXcThqZ_jpcCV7QXw (3 brokers, racks r1, r2, r3) in .vcproxy/demo/kafka" in new
    assert "new and empty" in new and "as the last run left it" in kept
    for text in (new, kept):
        assert "`vcproxy demo --fresh` (or `make clean`)" in text
        assert "closing the terminal" in text


@pytest.fixture
def sighup():
    """SIGHUP at its default for the test (the suite may run under nohup), restored afterwards."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, previous)


def test_sighup_stops_the_demo_unless_nohup_ignores_it(sighup):
    assert demo.stop_signals() == (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    assert demo.stop_signals() == (signal.SIGINT, signal.SIGTERM)


def test_a_signal_while_brokers_start_unwinds(sighup):
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    sigint = signal.getsignal(signal.SIGINT)
    with pytest.raises(demo._Stopped, match="SIGHUP"), demo._signals(demo._raise_stopped, stops):
        signal.raise_signal(signal.SIGHUP)
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL  # restored
    assert signal.getsignal(signal.SIGINT) is sigint  # Ctrl-C stays KeyboardInterrupt


def test_one_demo_per_directory(tmp_path):
    with demo._exclusive(tmp_path) as first:
        assert first is None
        with demo._exclusive(tmp_path) as second:
            assert second == str(os.getpid())  # the pid of the demo holding it
    with demo._exclusive(tmp_path) as again:
        assert again is None
