"""The launcher's status line (terminals only) and restarting a kept cluster, without a Kafka."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from vcproxy_tools.kafka import cluster
from vcproxy_tools.kafka.errors import KafkaLauncherError
from vcproxy_tools.kafka.progress import CLEAR_LINE, Progress, progress_wanted


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_quiet_when_not_a_terminal(monkeypatch):
    monkeypatch.delenv("VCPROXY_PROGRESS", raising=False)
    stream = io.StringIO()
    progress = Progress(stream)
    progress.update("kafka: starting 3 broker(s): 1/3 ready", force=True)
    progress.clear()
    assert not progress.enabled and stream.getvalue() == ""


def test_a_terminal_gets_a_line_redrawn_in_place(monkeypatch):
    monkeypatch.delenv("VCPROXY_PROGRESS", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    stream = _Tty()
    progress = Progress(stream, interval=0)
    progress.update("one")
    progress.update("two")
    progress.clear()
    assert stream.getvalue() == f"{CLEAR_LINE}one{CLEAR_LINE}two{CLEAR_LINE}"


@pytest.mark.parametrize(("value", "wanted"), [("1", True), ("0", False)])
def test_forced_by_the_environment(monkeypatch, value, wanted):
    monkeypatch.setenv("VCPROXY_PROGRESS", value)
    assert progress_wanted(_Tty() if not wanted else io.StringIO()) is wanted


def test_log_lines_never_start_inside_the_status_line(monkeypatch):
    monkeypatch.setenv("VCPROXY_PROGRESS", "1")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("vcproxy_tools.kafka")
    logger.addHandler(handler)
    try:
        with Progress(stream, interval=0) as progress:
            progress.update("kafka: resolving Kafka 4.2.0: 3 files downloaded")
            logger.warning("node 1 ready after 3.8s")
        assert stream.getvalue() == (
            f"{CLEAR_LINE}kafka: resolving Kafka 4.2.0: 3 files downloaded{CLEAR_LINE}node 1 ready after 3.8s\n"
        )
        assert handler.filters == []  # removed on exit
    finally:
        logger.removeHandler(handler)


def _recorded(tmp_path: Path, formatted: set[int]) -> Path:
    """A cluster.json as start_cluster writes it (stopped), with storage formatted on `formatted` nodes."""
    nodes = cluster.plan_nodes(3, ["r1", "r2", "r3"], 21092, sasl=True)
    state = cluster._prepare(
        tmp_path,
        nodes,
        cluster_id="oMCDYLXcThqZ_jpcCV7QXw",
        version="4.2.0",
        libs=tmp_path / "libs",
        java="/usr/bin/java",
        heap="512m",
        sasl=True,
        base_port=21092,
        extra_classpath=(),
        extra_properties={},
    )
    cluster._write_state(tmp_path, state)
    for node in state["nodes"]:
        if node["node_id"] in formatted:
            (Path(node["dir"]) / "data" / "meta.properties").write_text("cluster.id=oMCDYLXcThqZ_jpcCV7QXw\n")
    return tmp_path


def test_has_cluster(tmp_path):
    assert not cluster.has_cluster(tmp_path / "nothing")
    assert not cluster.has_cluster(_recorded(tmp_path / "half", {1, 2}))
    assert cluster.has_cluster(_recorded(tmp_path / "kept", {1, 2, 3}))
    assert cluster.running_pids(tmp_path / "kept") == [] and cluster.running_pids(tmp_path / "nothing") == []


def test_restart_refuses_a_cluster_that_was_never_formatted(tmp_path):
    kept = _recorded(tmp_path, {1})
    with pytest.raises(KafkaLauncherError, match=r"cannot be restarted \(node\(s\) \[2, 3\] have no formatted"):
        cluster.restart_cluster(kept)


def test_restart_renders_the_configs_again_on_the_new_ports(tmp_path, monkeypatch):
    kept = _recorded(tmp_path, {1, 2, 3})
    booted = []
    monkeypatch.setattr(cluster, "ensure_dist", lambda version: tmp_path / "libs")
    monkeypatch.setattr(cluster, "java_executable", lambda: "/usr/bin/java")
    monkeypatch.setattr(cluster, "check_ports_free", lambda ports: list(ports))
    monkeypatch.setattr(cluster, "_boot", lambda dir, state, *a: booted.append(state))
    info = cluster.restart_cluster(kept, base_port=22092)
    assert info.cluster_id == "oMCDYLXcThqZ_jpcCV7QXw"  # no format: the same cluster
    assert info.bootstrap == "127.0.0.1:22092,127.0.0.1:22102,127.0.0.1:22112"
    assert info.sasl_bootstrap == "127.0.0.1:22094,127.0.0.1:22104,127.0.0.1:22114"
    assert [b.rack for b in info.brokers] == ["r1", "r2", "r3"]
    props = (kept / "n1" / "server.properties").read_text()
    assert "controller.quorum.voters=1@127.0.0.1:22093" in props and "broker.rack=r1" in props
    assert json.loads((kept / "cluster.json").read_text())["base_port"] == 22092
    assert len(booted) == 1
