"""`vcproxy demo` (what `make run` runs) as a newcomer meets it, as real processes.

* the commands of the banner work in the order printed (the kcat ones only where kcat is installed);
* the cluster is kept across runs: same cluster id, the virtual cluster's topic and records, the same
  VC cluster id; `--fresh` starts over with a new, empty cluster;
* SIGHUP (the terminal closing), SIGTERM and SIGINT each stop the proxy and every broker: no JVM of the
  demo's directory is left.

The demo runs on free ports (tests/integration/ports.py); ``VCPROXY_DEMO_KAFKA_BASE_PORT`` pins its Kafka.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from vcproxy_tools.demo import banner_commands
from vcproxy_tools.kafka.cluster import load_cluster, running_pids

from .ports import free_kafka_base_port, free_port, free_port_block
from .processes import java_processes_mentioning
from .tenants import own

ROOT = Path(__file__).resolve().parents[2]
BANNER_END = "Ctrl-C (or closing the terminal) stops the proxy and the brokers."
START_TIMEOUT = 300  # a cold machine resolves Kafka first; the demo's own brokers wait up to 120 s


@dataclass
class Demo:
    """One `vcproxy demo` process in ``work`` (its --dir is ``work/demo``)."""

    work: Path
    config: Path
    kafka_base_port: int
    bootstrap: str
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0

    @property
    def kafka_dir(self) -> Path:
        return self.work / "demo" / "kafka"

    def start(self, *args: str) -> str:
        """Start the demo and return its banner (printed once the proxy is ready)."""
        self.runs += 1
        self.out = self.work / f"run{self.runs}.out"
        self.err = self.work / f"run{self.runs}.err"
        argv = [sys.executable, "-m", "vcproxy_tools", "demo", "--config", str(self.config), "--dir", "demo"]
        argv += ["--kafka-base-port", str(self.kafka_base_port), *args]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            # A session of its own, as a terminal's job: signals reach only the demo.
            self.proc = subprocess.Popen(
                argv, cwd=self.work, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT
        while BANNER_END not in (text := self.out.read_text(errors="replace")):
            assert self.proc.poll() is None, f"the demo exited ({self.proc.returncode}):\n{self.log_tail()}"
            assert time.monotonic() < deadline, f"no banner after {START_TIMEOUT}s:\n{self.log_tail()}"
            time.sleep(0.2)
        return text

    def stop(self, sig: signal.Signals) -> int:
        """Send ``sig`` to the demo, wait for it to exit and check it left no broker running."""
        assert self.proc is not None
        pids = running_pids(self.kafka_dir)
        assert len(pids) == 3, pids
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"the demo did not exit after {sig.name}:\n{self.log_tail()}")
        assert running_pids(self.kafka_dir) == []
        assert java_processes_mentioning(self.kafka_dir) == [], f"brokers left after {sig.name}"
        assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in pids)
        return code

    def log_tail(self) -> str:
        return self.err.read_text(errors="replace")[-5000:]

    def kill(self) -> None:
        """Whatever a failed test left: the demo, then its brokers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if (self.kafka_dir / "cluster.json").exists():
            from vcproxy_tools.kafka.cluster import stop_cluster

            stop_cluster(self.kafka_dir, hard=True)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def _unheard(signum: int, frame: object) -> None:
    """Handles a signal this pytest ignores, so that it stays ignored here but not in the children."""


@pytest.fixture(scope="module")
def terminal_signals() -> Iterator[None]:
    """SIGINT and SIGHUP reach the demo and its tools at their defaults, as from a terminal, even when this
    pytest runs under nohup (SIGHUP ignored) or as a script's background job (SIGINT ignored): an ignored
    signal stays ignored across exec, while a handled one is reset to the default. Ignored here still."""
    ignored = [sig for sig in (signal.SIGINT, signal.SIGHUP) if signal.getsignal(sig) is signal.SIG_IGN]
    for sig in ignored:
        signal.signal(sig, _unheard)
    try:
        yield
    finally:
        for sig in ignored:
            signal.signal(sig, signal.SIG_IGN)


@pytest.fixture(scope="module")
def demo(tmp_path_factory, terminal_signals) -> Iterator[Demo]:
    work = tmp_path_factory.mktemp("demo")
    config = yaml.safe_load((ROOT / "config" / "demo.yaml").read_text())
    port = free_port_block()
    config["listeners"]["bootstrap_port"] = port
    config["listeners"]["broker_port_base"] = port + 1
    config["metrics"]["port"] = free_port()
    config["tracing"]["jsonl_dir"] = str(work / "traces")
    (work / "demo.yaml").write_text(yaml.safe_dump(config))
    base = os.environ.get("VCPROXY_DEMO_KAFKA_BASE_PORT")
    kafka_base = int(base) if base else free_kafka_base_port(brokers=3)
    running = Demo(work, work / "demo.yaml", kafka_base, f"127.0.0.1:{port}")
    try:
        yield running
    finally:
        running.kill()


def _alice(demo: Demo) -> dict[str, str]:
    return {
        "bootstrap.servers": demo.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }


def _run(demo: Demo, command: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=demo.work, capture_output=True, text=True, **kw)


@dataclass
class FirstRun:
    banner: str
    startup_log: str
    outputs: dict[str, str]  # command -> its stdout, in the banner's order
    consumed: str
    exit_code: int


@pytest.fixture(scope="module")
def first_run(demo) -> FirstRun:
    """A fresh demo; every command of its banner run in order, as printed; then SIGHUP."""
    banner = demo.start("--fresh")
    startup_log = demo.err.read_text(errors="replace")
    commands = banner_commands(banner[banner.index("vcproxy is ready") :])
    kcat = shutil.which("kcat") is not None
    consumer = next(c for c in commands if "kafka-console-consumer" in c)
    outputs = {}
    for command in commands:
        if command.startswith(("kcat", "echo hello | kcat")) and not kcat:
            continue
        if command == consumer:
            continue  # runs until Ctrl-C: below
        result = _run(demo, command, timeout=300)
        assert result.returncode == 0, f"{command}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        outputs[command] = result.stdout
    expected = {"hi", "hello"} if kcat else {"hi"}
    # The console consumer prints every record and waits for more: what it printed, then Ctrl-C.
    printed = demo.work / "consumer.out"
    with printed.open("w") as out:
        reader = subprocess.Popen(
            ["bash", "-c", consumer], cwd=demo.work, stdout=out, stderr=subprocess.DEVNULL, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 300  # a JVM's start on a loaded 2-core machine
        while not expected <= set(printed.read_text().split()):
            assert reader.poll() is None and time.monotonic() < deadline, printed.read_text()
            time.sleep(0.2)
    finally:
        reader.send_signal(signal.SIGINT)
        try:
            reader.wait(timeout=120)
        except subprocess.TimeoutExpired:  # what it printed is what counts; leave neither it nor its JVM behind
            os.killpg(reader.pid, signal.SIGKILL)
            reader.wait()
    return FirstRun(banner, startup_log, outputs, printed.read_text(), demo.stop(signal.SIGHUP))


def test_the_banner_works_top_to_bottom(first_run):
    assert "new and empty" in first_run.banner
    commands = list(first_run.outputs)
    assert "--create" in commands[0] and "--list" in commands[1]
    assert own(first_run.outputs[commands[1]].split()) == {"demo"}
    assert "hi" in first_run.consumed.split()
    if shutil.which("kcat"):
        assert any(c.startswith("kcat") and c.endswith(" -L") for c in commands)
        assert "hello" in first_run.consumed.split()
    # admin, a super-admin, manages virtual clusters while the proxy runs.
    listing = next(c for c in commands if "virtual-clusters list" in c)
    assert first_run.outputs[listing].split() == ["team-a", "team-b"]
    described = next(c for c in commands if "virtual-clusters describe" in c)
    assert "User:alice" in first_run.outputs[described]
    # alice, team-a's admin, grants carol READ on demo with kafka-acls; carol then reads it.
    listed = next(c for c in commands if "kafka-acls" in c and "--list" in c)
    assert "User:carol" in first_run.outputs[listed] and "READ" in first_run.outputs[listed]
    carol = next(c for c in commands if "kafka-console-consumer" in c and "carol" in c)
    assert first_run.outputs[carol].split()[:1] in (["hi"], ["hello"])
    # ...and sets carol's produce quota with kafka-configs
    described = next(c for c in commands if "kafka-configs" in c and "--describe" in c)
    assert "producer_byte_rate=1048576" in first_run.outputs[described]


def test_a_fresh_start_logs_no_warning(first_run):
    # A new user takes a WARNING for a fault: a first start has nothing to warn about.
    noisy = [line for line in first_run.startup_log.splitlines() if " WARNING " in line or " ERROR " in line]
    assert not noisy, noisy


def test_sighup_stops_the_proxy_and_every_broker(first_run):
    assert first_run.exit_code == 0  # and Demo.stop found no broker left


def test_the_next_run_keeps_the_cluster_and_sigterm_stops_everything(demo, first_run):
    kept = load_cluster(demo.kafka_dir)
    banner = demo.start()
    assert f"Kafka: cluster {kept.cluster_id} " in banner and "as the last run left it" in banner
    metadata = AdminClient(_alice(demo)).list_topics(timeout=20)
    assert own(metadata.topics) == {"demo"}  # alice's topic from the first run, in her virtual cluster
    assert load_cluster(demo.kafka_dir).cluster_id == kept.cluster_id
    physical = AdminClient({"bootstrap.servers": kept.bootstrap}).list_topics(timeout=20)
    assert physical.cluster_id == kept.cluster_id
    assert demo.stop(signal.SIGTERM) == 0


def test_fresh_starts_over_and_sigint_stops_everything(demo, first_run):
    kept = load_cluster(demo.kafka_dir)
    banner = demo.start("--fresh")
    fresh = load_cluster(demo.kafka_dir)
    assert fresh.cluster_id != kept.cluster_id
    assert f"Kafka: cluster {fresh.cluster_id} " in banner and "new and empty" in banner
    assert own(AdminClient(_alice(demo)).list_topics(timeout=20).topics) == set()
    assert demo.stop(signal.SIGINT) == 0
