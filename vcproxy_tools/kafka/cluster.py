"""Start and stop a local Apache Kafka KRaft cluster (1..N brokers on 127.0.0.1) for tests and demos.

Layout: node 1 is a combined broker+controller and the only voter of a static quorum; nodes 2..N are
broker-only. Port scheme, for ``base_port`` B and node n (1-based)::

    client (PLAINTEXT)        B + 10*(n-1)        19092, 19102, 19112, ...
    controller (node 1 only)  B + 1               19093
    SASL_PLAINTEXT (sasl)     B + 10*(n-1) + 2    19094, 19104, 19114, ...

Everything lives under one directory DIR: ``DIR/nN/{server.properties,server.log,data/}``,
``DIR/cluster.json`` (PIDs, ports, racks, cluster id, ...) and ``DIR/bootstrap.txt``. The brokers run in
their own sessions, so they outlive the Python process that started them; ``stop_cluster(DIR)`` stops
them later from any process. The data stays: ``restart_cluster(DIR)`` starts the same cluster again
(no format: same cluster id, topics and records).

The pure parts (port plan, property rendering, StorageTool arguments) are separate functions so that
they can be tested without starting anything.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from vcproxy_tools.kafka.dist import (
    BROKER_LOG4J,
    DEFAULT_KAFKA_VERSION,
    ensure_dist,
    java_executable,
    parse_version,
)
from vcproxy_tools.kafka.errors import KafkaLauncherError
from vcproxy_tools.kafka.progress import Progress, elapsed
from vcproxy_tools.kafka.tools import SERVICE_JVM_FLAGS, TOOLS, java_tool_argv

log = logging.getLogger("vcproxy_tools.kafka")

HOST = "127.0.0.1"
PORT_STRIDE = 10
CONTROLLER_PORT_OFFSET = 1
SASL_PORT_OFFSET = 2
CONTROLLER_NODE_ID = 1
READY_LINE = "Kafka Server started"
PROBE_TOPIC = "__vcproxy_probe"
STATE_FILE = "cluster.json"
BOOTSTRAP_FILE = "bootstrap.txt"
LOG_TAIL_LINES = 30

SASL_LISTENER = "SASL_PLAINTEXT"
# OAUTHBEARER with Kafka's unsecured tokens (signature "none", the principal is the `sub` claim): test use
# only, for relaying tokens through the proxy (tests/integration/test_relay.py).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_USERS: dict[str, str] = {
    "admin": "admin-secret",
    "vcproxy": "vcproxy-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    # Not super users: what the broker's ACLs allow them is all they get (relay tests: tests/integration/test_relay.py).
    "relayuser": "relayuser-secret",
    "relaydenied": "relaydenied-secret",
}
# The user the proxy logs in as in tests (upstream.sasl_username): a super user, like the PLAINTEXT and
# controller listeners' User:ANONYMOUS, so every test that goes through the proxy or the PLAINTEXT
# listener has all rights while the other SASL users get only what ACLs grant.
PROXY_UPSTREAM_USER = "vcproxy"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# What kafka-server-start.sh / kafka-run-class.sh add, minus the 1G heap: the same as for Kafka's services.
BROKER_JVM_FLAGS = SERVICE_JVM_FLAGS
# A broker that lives minutes (a test suite's): C1 only and the serial GC. C2 compiled for a quarter of the brokers'
# CPU in a run of franz-go's suite; franz-go's TestClient_Produce (20,000 acks=all produces, RF 3) measured 34 s of
# broker CPU and 36 s this way against 72 s and 55 s with the service flags (docs/performance.md).
LEAN_BROKER_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
BROKER_JVM_ENV = "VCPROXY_KAFKA_BROKER_JVM"  # "lean": LEAN_BROKER_JVM_FLAGS; anything else: the service flags


def broker_jvm_flags(env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    return LEAN_BROKER_JVM_FLAGS if env.get(BROKER_JVM_ENV, "").strip().lower() == "lean" else BROKER_JVM_FLAGS


class BrokerInfo(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class NodeSpec:
    """One node of the plan; ``controller_port`` is set only on the combined broker+controller node."""

    node_id: int
    port: int
    sasl_port: int | None
    controller_port: int | None
    rack: str | None

    @property
    def is_controller(self) -> bool:
        return self.controller_port is not None

    def ports(self) -> list[tuple[int, str]]:
        """(port, role) pairs this node binds."""
        out = [(self.port, f"node {self.node_id} PLAINTEXT listener")]
        if self.sasl_port is not None:
            out.append((self.sasl_port, f"node {self.node_id} SASL_PLAINTEXT listener"))
        if self.controller_port is not None:
            out.append((self.controller_port, f"node {self.node_id} CONTROLLER listener"))
        return out


@dataclass
class ClusterInfo:
    dir: Path
    version: str
    cluster_id: str
    bootstrap: str
    sasl_bootstrap: str | None
    brokers: list[BrokerInfo]
    libs: Path
    controller_bootstrap: str
    sasl_users: dict[str, str] = field(default_factory=dict)

    def stop_broker(self, node_id: int, hard: bool = False) -> None:
        stop_broker(self.dir, node_id, hard=hard)

    def start_broker(self, node_id: int, timeout: float = 60) -> None:
        start_broker(self.dir, node_id, timeout=timeout)

    def stop(self, timeout: float = 30) -> None:
        stop_cluster(self.dir, timeout=timeout)


# ---------------------------------------------------------------------------------------------------
# Pure planning and rendering


def plan_nodes(brokers: int, racks: Sequence[str] | None, base_port: int, sasl: bool) -> list[NodeSpec]:
    if brokers < 1:
        raise KafkaLauncherError(f"--brokers must be at least 1, got {brokers}")
    if racks is not None and (not racks or any(not r or r != r.strip() or "," in r for r in racks)):
        raise KafkaLauncherError(f"racks must be non-empty names without commas or spaces, got {racks!r}")
    top = base_port + PORT_STRIDE * (brokers - 1) + SASL_PORT_OFFSET
    if base_port < 1024 or top > 65535:
        raise KafkaLauncherError(
            f"ports {base_port}..{top} are out of range: pick --base-port between 1024 and {65535 - top + base_port}"
        )
    nodes = []
    for i in range(brokers):
        port = base_port + PORT_STRIDE * i
        node_id = i + 1
        nodes.append(
            NodeSpec(
                node_id=node_id,
                port=port,
                sasl_port=port + SASL_PORT_OFFSET if sasl else None,
                controller_port=base_port + CONTROLLER_PORT_OFFSET if node_id == CONTROLLER_NODE_ID else None,
                rack=racks[i % len(racks)] if racks else None,
            )
        )
    return nodes


def internal_topic_rf(brokers: int) -> tuple[int, int]:
    """(replication factor, min ISR) for internal and default topics on an N-broker cluster."""
    rf = min(3, brokers)
    return rf, 2 if brokers >= 3 else 1


def _jaas_plain(users: dict[str, str]) -> str:
    creds = " ".join(f'user_{name}="{pw}"' for name, pw in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {creds};"


def node_properties(node: NodeSpec, *, brokers: int, controller_port: int, data_dir: Path) -> dict[str, str]:
    """server.properties of one node (pure)."""
    rf, min_isr = internal_topic_rf(brokers)
    advertised = [f"PLAINTEXT://{HOST}:{node.port}"]
    if node.sasl_port is not None:
        advertised.append(f"{SASL_LISTENER}://{HOST}:{node.sasl_port}")
    listeners = list(advertised)
    if node.controller_port is not None:
        listeners.append(f"CONTROLLER://{HOST}:{node.controller_port}")
    # Always spelled out: Kafka's implicit CONTROLLER mapping disappears once a SASL listener exists.
    protocol_map = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
    if node.sasl_port is not None:
        protocol_map.append(f"{SASL_LISTENER}:{SASL_LISTENER}")
    props = {
        "process.roles": "broker,controller" if node.is_controller else "broker",
        "node.id": str(node.node_id),
        "controller.quorum.voters": f"{CONTROLLER_NODE_ID}@{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "listener.security.protocol.map": ",".join(protocol_map),
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir),
        # Same on every node: controllers apply them to CreateTopics, brokers to auto-created topics.
        "num.partitions": "1",
        "default.replication.factor": str(rf),
        "auto.create.topics.enable": "true",
        "offsets.topic.replication.factor": str(rf),
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "3",
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "share.coordinator.state.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        # KIP-848 defaults (5 s heartbeat, 45 s session) make group tests crawl.
        "group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.session.timeout.ms": "6000",
        "group.consumer.session.timeout.ms": "6000",
        # KIP-1071 streams groups: the same (defaults 5 s / 45 s). The streams protocol is on by default in 4.2.
        "group.streams.min.heartbeat.interval.ms": "500",
        "group.streams.heartbeat.interval.ms": "500",
        "group.streams.min.session.timeout.ms": "6000",
        "group.streams.session.timeout.ms": "6000",
        # The 128 MiB default is allocated on the heap; too much for a 512m broker.
        "log.cleaner.dedupe.buffer.size": "33554432",
        "num.network.threads": "2",
        "num.io.threads": "4",
        # Fence a killed broker within seconds instead of 9 s (fault tests).
        "broker.session.timeout.ms": "4000",
        "broker.heartbeat.interval.ms": "1000",
        # KIP-392: consumers with client.rack fetch from a replica in their rack (a follower).
        "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    }
    if node.rack is not None:
        props["broker.rack"] = node.rack
    if node.sasl_port is not None:
        props["sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
        prefix = f"listener.name.{SASL_LISTENER.lower()}"
        props[f"{prefix}.plain.sasl.jaas.config"] = _jaas_plain(SASL_USERS)
        for mech in SCRAM_MECHANISMS:
            props[f"{prefix}.{mech.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        # No callback handler: Kafka's unsecured validator (OAuthBearerUnsecuredValidatorCallbackHandler).
        props[f"{prefix}.oauthbearer.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        )
        # Broker-side ACLs for the SASL users (relayed principals are authorized by the broker itself).
        props["authorizer.class.name"] = AUTHORIZER
        props["super.users"] = f"User:ANONYMOUS;User:{PROXY_UPSTREAM_USER}"
        props["allow.everyone.if.no.acl.found"] = "false"
    return props


def render_properties(props: dict[str, str]) -> str:
    """Java .properties text; backslashes escaped so paths survive."""
    lines = ["# Written by vcproxy_tools.kafka.cluster; regenerated on every start (start_cluster, restart_cluster)."]
    lines += [f"{k}={v.replace(chr(92), chr(92) * 2)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def format_args(cluster_id: str, config: Path, version: str, sasl: bool) -> list[str]:
    """StorageTool arguments for one node (static quorum, so no --standalone/--initial-controllers)."""
    args = ["format", "-t", cluster_id, "-c", str(config)]
    if parse_version(version) < (4, 2):
        args += ["--feature", "share.version=1"]  # share groups are GA (on by default) only from 4.2
    if sasl:
        for mech in SCRAM_MECHANISMS:
            for name, pw in SASL_USERS.items():
                args += ["--add-scram", f"{mech}=[name={name},password={pw}]"]
    return args


def new_cluster_id() -> str:
    """22-char URL-safe base64 of a random UUID, like ``kafka-storage random-uuid``."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):  # StorageTool's argparse would take it for a flag
            return cid


def broker_argv(java: str, libs: Path, node_dir: Path, heap: str, extra_classpath: Sequence[Path] = ()) -> list[str]:
    classpath = ":".join([f"{libs}/*", *(str(Path(p).resolve()) for p in extra_classpath)])
    return [
        java,
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *broker_jvm_flags(),
        f"-Dlog4j2.configurationFile={BROKER_LOG4J}",
        f"-Dkafka.logs.dir={node_dir / 'logs'}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(node_dir / "server.properties"),
    ]


def parse_list_endpoints(text: str) -> dict[int, tuple[str | None, str]]:
    """``kafka-cluster list-endpoints`` table -> {node id: (rack or None, state)}."""
    out: dict[int, tuple[str | None, str]] = {}
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    if not lines or lines[0][:1] != ["ID"]:
        return out
    header = lines[0]
    for row in lines[1:]:
        if len(row) != len(header) or not row[0].isdigit():
            continue
        rec = dict(zip(header, row, strict=True))
        rack = rec.get("RACK")
        out[int(row[0])] = (None if rack in (None, "null") else rack, rec.get("STATE", "unfenced"))
    return out


# ---------------------------------------------------------------------------------------------------
# Processes

# Popen objects of brokers this Python process started: keeps them reaped (no zombies that would look
# alive) and lets startup notice an exit at once.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def check_ports_free(ports: Iterable[tuple[int, str]]) -> None:
    for port, role in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # Same as the JVM's server sockets: TIME_WAIT leftovers of a previous run do not count as "in use".
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((HOST, port))
            except OSError:
                raise KafkaLauncherError(
                    f"port {port} is in use: stop the process using it or pass --base-port (it would be the {role})"
                ) from None


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return None
        # No procfs (macOS): ask ps; spaces inside arguments do not matter for the checks below.
        out = subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True)
        return out.stdout.split() or None
    except (ProcessLookupError, PermissionError):
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a] or None


def _is_ours(pid: int | None, dir: Path) -> bool:
    """True if ``pid`` is alive and is a java process of the cluster in ``dir`` (never a recycled PID)."""
    if not pid:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:
        # Our own child: trust Popen (right after fork, /proc still shows Python's cmdline).
        if child.poll() is None:
            return True
        del _CHILDREN[pid]
        return False
    argv = _cmdline(pid)  # a zombie has an empty cmdline, so it counts as gone
    if not argv or "java" not in Path(argv[0]).name:
        return False
    needle = f"{dir}{os.sep}"
    return any(needle in a for a in argv[1:])


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(pids: Iterable[int], dir: Path, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = [p for p in pids if _is_ours(p, dir)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if _is_ours(p, dir)]
    return left


def _terminate(pids: Sequence[int], dir: Path, timeout: float, hard: bool = False) -> None:
    """SIGTERM (or SIGKILL if hard) the pids that are ours, wait, then SIGKILL stragglers."""
    pids = [p for p in pids if _is_ours(p, dir)]
    for pid in pids:
        _signal(pid, signal.SIGKILL if hard else signal.SIGTERM)
    left = _wait_gone(pids, dir, timeout)
    if left:
        log.warning("pids %s did not stop within %.0fs; killing them", left, timeout)
        for pid in left:
            _signal(pid, signal.SIGKILL)
        left = _wait_gone(left, dir, 10)
        if left:
            raise KafkaLauncherError(f"could not kill pids {left} of the cluster in {dir}")


def _tail(path: Path, offset: int = 0, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    text = data.decode(errors="replace").splitlines()[-lines:]
    return "\n".join(text) if text else "(log is empty)"


def _log_contains(path: Path, offset: int, needle: str) -> bool:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return needle.encode() in fh.read()
    except OSError:
        return False


@dataclass
class _Launch:
    node_id: int
    pid: int
    port: int
    log: Path
    offset: int


def _launch(node: dict[str, Any]) -> _Launch:
    node_dir = Path(node["dir"])
    log_path = node_dir / "server.log"
    with log_path.open("ab") as fh:
        offset = fh.tell()
        proc = subprocess.Popen(
            node["argv"],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=node_dir,
            start_new_session=True,  # survive the launching process and its Ctrl-C
        )
    _CHILDREN[proc.pid] = proc
    node["pid"] = proc.pid
    log.info("started node %d (pid %d), log %s", node["node_id"], proc.pid, log_path)
    return _Launch(node["node_id"], proc.pid, node["port"], log_path, offset)


def _wait_ready(
    launches: list[_Launch], dir: Path, deadline: float, status: Callable[[list[_Launch]], None] | None = None
) -> None:
    """Wait until every node's client port accepts TCP and its log (since launch) says it started;
    ``status`` is told which nodes are still pending at every poll."""
    pending = list(launches)
    t0 = time.monotonic()
    while pending:
        if status is not None:
            status(pending)
        for ln in list(pending):
            if not _is_ours(ln.pid, dir):
                raise KafkaLauncherError(
                    f"Kafka node {ln.node_id} (pid {ln.pid}) exited during startup; "
                    f"last {LOG_TAIL_LINES} lines of {ln.log}:\n{_tail(ln.log, ln.offset)}"
                )
            # The data-plane port opens only once the broker is unfenced; the log line follows shortly.
            if _port_open(ln.port) and _log_contains(ln.log, ln.offset, READY_LINE):
                log.info("node %d ready after %.1fs", ln.node_id, time.monotonic() - t0)
                pending.remove(ln)
        if not pending:
            return
        if time.monotonic() > deadline:
            ln = pending[0]
            raise KafkaLauncherError(
                f"Kafka node {ln.node_id} (pid {ln.pid}) was not ready in time (port {ln.port} open and "
                f"{READY_LINE!r} in its log); last {LOG_TAIL_LINES} lines of {ln.log}:\n{_tail(ln.log, ln.offset)}"
            )
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------------
# State file


def _state_path(dir: Path) -> Path:
    return Path(dir) / STATE_FILE


def _read_state(dir: Path) -> dict[str, Any]:
    path = _state_path(dir)
    try:
        state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KafkaLauncherError(
            f"no {STATE_FILE} in {dir}: no cluster was started there (start one with `vcproxy kafka start --dir {dir}`)"
        ) from None
    except (OSError, ValueError) as exc:
        raise KafkaLauncherError(f"cannot read {path}: {exc}") from None
    return state


def _write_state(dir: Path, state: dict[str, Any]) -> None:
    path = _state_path(dir)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _info(state: dict[str, Any]) -> ClusterInfo:
    return ClusterInfo(
        dir=Path(state["dir"]),
        version=state["version"],
        cluster_id=state["cluster_id"],
        bootstrap=state["bootstrap"],
        sasl_bootstrap=state["sasl_bootstrap"],
        brokers=[BrokerInfo(n["node_id"], n["host"], n["port"], n["rack"]) for n in state["nodes"]],
        libs=Path(state["libs"]),
        controller_bootstrap=state["controller_bootstrap"],
        sasl_users=dict(state["sasl"]["users"]) if state["sasl"] else {},
    )


def load_cluster(dir: Path) -> ClusterInfo:
    """ClusterInfo of the cluster recorded in ``DIR/cluster.json`` (running or not)."""
    return _info(_read_state(Path(dir).resolve()))


def _node(state: dict[str, Any], node_id: int) -> dict[str, Any]:
    for n in state["nodes"]:
        if n["node_id"] == node_id:
            return n
    known = [n["node_id"] for n in state["nodes"]]
    raise KafkaLauncherError(f"no node {node_id} in the cluster in {state['dir']}; its nodes are {known}")


# ---------------------------------------------------------------------------------------------------
# Public operations


def _format_nodes(
    java: str, libs: Path, cluster_id: str, nodes: list[dict[str, Any]], version: str, sasl: bool, timeout: float
) -> None:
    # One JVM per node, in parallel: each is a couple of seconds of JVM start and KafkaConfig validation.
    procs = []
    for n in nodes:
        args = format_args(cluster_id, Path(n["dir"]) / "server.properties", version, sasl)
        argv = java_tool_argv(libs, TOOLS["kafka-storage"], args)
        procs.append(
            (
                n,
                subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                ),
            )
        )
    errors = []
    for n, proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            errors.append(f"node {n['node_id']}: StorageTool format timed out after {timeout:.0f}s\n{out}")
            continue
        if proc.returncode != 0:
            errors.append(f"node {n['node_id']}: StorageTool format exited {proc.returncode}:\n{out.strip()}")
    if errors:
        raise KafkaLauncherError("formatting the Kafka storage failed:\n" + "\n".join(errors))


def _confluent_admin() -> Any | None:
    """confluent_kafka.admin if installed (test extra): a check in ~0.1 s instead of three tool JVMs."""
    try:
        import confluent_kafka.admin
    except ImportError:
        return None
    return confluent_kafka.admin


def _verify(libs: Path, state: dict[str, Any], deadline: float) -> None:
    """All brokers registered and unfenced with their racks, and a topic with RF=min(3,N) can be created.

    The probe topic is deleted again so that tests listing topics see only their own.
    """
    expected = {n["node_id"]: (n["rack"], "unfenced") for n in state["nodes"]}
    rf = internal_topic_rf(len(expected))[0]
    admin = _confluent_admin()
    if admin is not None:
        _verify_with_admin_client(admin, state["bootstrap"], expected, rf, deadline)
    else:
        _verify_with_tools(libs, state["bootstrap"], expected, rf, deadline)


def _cluster_timeout(expected: dict[int, tuple[str | None, str]], seen: object) -> KafkaLauncherError:
    want = {k: r for k, (r, _) in expected.items()}
    return KafkaLauncherError(
        f"the cluster did not show all brokers {want} (node id: rack) unfenced in time; it showed: {seen}"
    )


def _verify_with_admin_client(
    admin: Any, bootstrap: str, expected: dict[int, tuple[str | None, str]], rf: int, deadline: float
) -> None:
    client = admin.AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    while True:
        try:
            desc = client.describe_cluster(request_timeout=10).result(timeout=15)
            # DescribeCluster lists only live (unfenced) brokers.
            seen: object = {n.id: (n.rack, "unfenced") for n in desc.nodes}
        except Exception as exc:  # KafkaException, or a timeout of the future
            seen = exc
        if seen == expected:
            break
        if time.monotonic() > deadline:
            raise _cluster_timeout(expected, seen)
        time.sleep(0.5)
    try:
        topic = admin.NewTopic(PROBE_TOPIC, num_partitions=1, replication_factor=rf)
        client.create_topics([topic], operation_timeout=30)[PROBE_TOPIC].result(timeout=60)
        client.delete_topics([PROBE_TOPIC], operation_timeout=30)[PROBE_TOPIC].result(timeout=60)
    except Exception as exc:
        raise KafkaLauncherError(
            f"the cluster is up but creating/deleting probe topic {PROBE_TOPIC} failed: {exc}"
        ) from exc


def _verify_with_tools(
    libs: Path, bootstrap: str, expected: dict[int, tuple[str | None, str]], rf: int, deadline: float
) -> None:
    def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
        argv = java_tool_argv(libs, TOOLS[name], args)
        remaining = max(10.0, deadline - time.monotonic())
        out = subprocess.run(argv, capture_output=True, text=True, timeout=remaining, stdin=subprocess.DEVNULL)
        if out.returncode != 0 and "usage:" in out.stdout + out.stderr:  # our bug, not a slow cluster
            raise KafkaLauncherError(f"`{name} {' '.join(args)}` was rejected:\n{out.stdout}{out.stderr}")
        return out

    while True:
        out = tool("kafka-cluster", "list-endpoints", "--bootstrap-server", bootstrap, "--include-fenced-brokers")
        seen = parse_list_endpoints(out.stdout)
        if out.returncode == 0 and seen == expected:
            break
        if time.monotonic() > deadline:
            raise _cluster_timeout(expected, out.stdout + out.stderr)
        time.sleep(1)
    for args in (
        ["--create", "--if-not-exists", "--topic", PROBE_TOPIC, "--partitions", "1", "--replication-factor", str(rf)],
        ["--delete", "--topic", PROBE_TOPIC],
    ):
        out = tool("kafka-topics", "--bootstrap-server", bootstrap, *args)
        if out.returncode != 0:
            raise KafkaLauncherError(
                f"the cluster is up but `kafka-topics {' '.join(args)}` failed (exit {out.returncode}):\n"
                f"{out.stdout}{out.stderr}"
            )


def _prepare(
    dir: Path,
    nodes: list[NodeSpec],
    *,
    cluster_id: str,
    version: str,
    libs: Path,
    java: str,
    heap: str,
    sasl: bool,
    base_port: int,
    extra_classpath: Sequence[Path],
    extra_properties: dict[str, str],
) -> dict[str, Any]:
    """Write every node's server.properties (data dirs are created, never touched) and return the state
    to record in cluster.json."""
    brokers = len(nodes)
    controller_port = base_port + CONTROLLER_PORT_OFFSET
    node_states = []
    for spec in nodes:
        node_dir = dir / f"n{spec.node_id}"
        (node_dir / "data").mkdir(parents=True, exist_ok=True)
        props = node_properties(spec, brokers=brokers, controller_port=controller_port, data_dir=node_dir / "data")
        props.update(extra_properties)
        (node_dir / "server.properties").write_text(render_properties(props), encoding="utf-8")
        node_states.append(
            {
                "node_id": spec.node_id,
                "roles": props["process.roles"].split(","),
                "host": HOST,
                "port": spec.port,
                "sasl_port": spec.sasl_port,
                "controller_port": spec.controller_port,
                "rack": spec.rack,
                "dir": str(node_dir),
                "argv": broker_argv(java, libs, node_dir, heap, extra_classpath),
                "pid": None,
            }
        )
    sasl_info = {"listener": SASL_LISTENER, "mechanisms": list(SASL_MECHANISMS), "users": dict(SASL_USERS)}
    return {
        "dir": str(dir),
        "version": version,
        "cluster_id": cluster_id,
        "bootstrap": ",".join(f"{HOST}:{n.port}" for n in nodes),
        "sasl_bootstrap": ",".join(f"{HOST}:{n.sasl_port}" for n in nodes) if sasl else None,
        "controller_bootstrap": f"{HOST}:{controller_port}",
        "base_port": base_port,
        "heap": heap,
        "libs": str(libs),
        "sasl": sasl_info if sasl else None,
        "extra_classpath": [str(Path(p).resolve()) for p in extra_classpath],
        "extra_properties": dict(extra_properties),
        "nodes": node_states,
    }


def _boot(dir: Path, state: dict[str, Any], libs: Path, t0: float, deadline: float, progress: Progress) -> None:
    """Launch node 1 (the controller), then the others in parallel, wait until all serve and check the
    cluster. On failure every process started here is killed (the logs stay) and the error re-raised."""
    node_states = state["nodes"]
    total = len(node_states)

    def status(pending: list[_Launch]) -> None:
        ready = total - len(pending) - sum(1 for n in node_states if n["pid"] is None)
        waiting = ", ".join(str(ln.node_id) for ln in pending)
        progress.update(
            f"kafka: starting {total} broker(s): {ready}/{total} ready, waiting for node {waiting} ({elapsed(t0)})"
        )

    try:
        first = _launch(node_states[0])
        _write_state(dir, state)
        _wait_ready([first], dir, deadline, status)
        rest = [_launch(n) for n in node_states[1:]]
        _write_state(dir, state)
        _wait_ready(rest, dir, deadline, status)
        progress.update(f"kafka: all {total} broker(s) up; checking the cluster ({elapsed(t0)})", force=True)
        log.info("all %d node(s) up; checking the cluster", total)
        _verify(libs, state, deadline)
    except BaseException:
        started = [n["pid"] for n in node_states if n["pid"]]
        _terminate(started, dir, timeout=10, hard=True)
        for n in node_states:
            n["pid"] = None
        _write_state(dir, state)
        raise
    (dir / BOOTSTRAP_FILE).write_text(state["bootstrap"] + "\n", encoding="utf-8")


def _refuse_if_running(dir: Path) -> None:
    if _state_path(dir).exists():
        old = _read_state(dir)
        running = [n["pid"] for n in old["nodes"] if _is_ours(n.get("pid"), dir)]
        if running:
            raise KafkaLauncherError(
                f"a Kafka cluster is already running in {dir} (pids {running}); "
                f"stop it first with `vcproxy kafka stop --dir {dir}`"
            )


def start_cluster(
    dir: Path,
    brokers: int = 1,
    racks: list[str] | None = None,
    version: str = DEFAULT_KAFKA_VERSION,
    base_port: int = 19092,
    heap: str = "512m",
    sasl: bool = False,
    timeout: float = 120,
    extra_classpath: Sequence[Path] = (),
    extra_properties: dict[str, str] | None = None,
) -> ClusterInfo:
    """Format and start a fresh cluster in ``dir`` and return once it serves requests.

    ``extra_classpath`` and ``extra_properties`` go to every broker: plugins such as a metrics
    reporter (tests use one to make Kafka offer KIP-714 telemetry).

    Anything left in ``dir`` by an earlier (stopped) cluster is wiped; ``restart_cluster`` starts such a
    cluster again with its data instead. On failure every process this call started is killed and the
    logs stay in ``dir/nN/server.log``.
    """
    dir = Path(dir).expanduser().resolve()
    parse_version(version)
    nodes = plan_nodes(brokers, racks, base_port, sasl)
    _refuse_if_running(dir)
    check_ports_free(p for n in nodes for p in n.ports())
    libs = ensure_dist(version)
    java = java_executable()
    t0 = time.monotonic()
    deadline = t0 + timeout

    dir.mkdir(parents=True, exist_ok=True)
    # Only what an earlier start wrote here: DIR may be a directory the user also keeps other things in.
    for node_dir in dir.glob("n[0-9]*"):
        if node_dir.name[1:].isdigit() and (node_dir / "server.properties").is_file():
            shutil.rmtree(node_dir)
    for name in (STATE_FILE, BOOTSTRAP_FILE):
        (dir / name).unlink(missing_ok=True)

    cluster_id = new_cluster_id()
    state = _prepare(
        dir,
        nodes,
        cluster_id=cluster_id,
        version=version,
        libs=libs,
        java=java,
        heap=heap,
        sasl=sasl,
        base_port=base_port,
        extra_classpath=extra_classpath,
        extra_properties=extra_properties or {},
    )
    with Progress() as progress:
        progress.update(f"kafka: formatting the storage of {brokers} node(s)", force=True)
        log.info("formatting %d node(s) of Kafka %s cluster %s in %s", brokers, version, cluster_id, dir)
        _format_nodes(
            java, libs, cluster_id, state["nodes"], version, sasl, timeout=max(30.0, deadline - time.monotonic())
        )
        _write_state(dir, state)
        _boot(dir, state, libs, t0, deadline, progress)
    log.info("Kafka %s cluster up in %.1fs: bootstrap %s", version, time.monotonic() - t0, state["bootstrap"])
    return _info(state)


def running_pids(dir: Path) -> list[int]:
    """PIDs recorded in ``DIR/cluster.json`` that are still brokers of that cluster (none if nothing is
    recorded)."""
    dir = Path(dir).expanduser().resolve()
    try:
        state = _read_state(dir)
    except KafkaLauncherError:
        return []
    return [n["pid"] for n in state.get("nodes", []) if _is_ours(n.get("pid"), dir)]


def has_cluster(dir: Path) -> bool:
    """True if ``dir`` holds a cluster that ``restart_cluster`` can start again: recorded in
    cluster.json, with every node's storage formatted."""
    dir = Path(dir).expanduser().resolve()
    try:
        state = _read_state(dir)
        nodes = state["nodes"]
    except (KafkaLauncherError, KeyError, TypeError):
        return False
    return bool(nodes) and all((Path(n["dir"]) / "data" / "meta.properties").is_file() for n in nodes)


def restart_cluster(
    dir: Path,
    *,
    base_port: int | None = None,
    version: str | None = None,
    heap: str | None = None,
    timeout: float = 120,
) -> ClusterInfo:
    """Start the stopped cluster recorded in ``dir`` again on its data: no format, so the same cluster
    id, topics, records, groups and SCRAM users. The brokers, racks and SASL listener are the recorded
    ones; ``base_port``, ``version`` and ``heap`` default to the recorded ones too (a new base port
    rewrites the listeners). Every node's server.properties is rendered again by this launcher.
    """
    dir = Path(dir).expanduser().resolve()
    state = _read_state(dir)
    _refuse_if_running(dir)
    old_nodes = sorted(state["nodes"], key=lambda n: n["node_id"])
    unformatted = [n["node_id"] for n in old_nodes if not (Path(n["dir"]) / "data" / "meta.properties").is_file()]
    if unformatted or [n["node_id"] for n in old_nodes] != list(range(1, len(old_nodes) + 1)):
        raise KafkaLauncherError(
            f"the cluster in {dir} cannot be restarted (node(s) {unformatted or 'missing'} have no formatted "
            f"storage); start a fresh one with `vcproxy kafka start --dir {dir}`"
        )
    version = version or state["version"]
    parse_version(version)
    racks = [n["rack"] for n in old_nodes]
    sasl = state.get("sasl") is not None
    base_port = base_port or state["base_port"]
    nodes = plan_nodes(len(old_nodes), None if None in racks else racks, base_port, sasl)
    check_ports_free(p for n in nodes for p in n.ports())
    libs = ensure_dist(version)
    java = java_executable()
    t0 = time.monotonic()
    deadline = t0 + timeout
    new_state = _prepare(
        dir,
        nodes,
        cluster_id=state["cluster_id"],
        version=version,
        libs=libs,
        java=java,
        heap=heap or state.get("heap", "512m"),
        sasl=sasl,
        base_port=base_port,
        extra_classpath=[Path(p) for p in state.get("extra_classpath", [])],
        extra_properties=state.get("extra_properties", {}),
    )
    (dir / BOOTSTRAP_FILE).unlink(missing_ok=True)
    _write_state(dir, new_state)
    log.info("restarting Kafka %s cluster %s in %s (kept data)", version, new_state["cluster_id"], dir)
    with Progress() as progress:
        _boot(dir, new_state, libs, t0, deadline, progress)
    log.info("Kafka %s cluster up in %.1fs: bootstrap %s", version, time.monotonic() - t0, new_state["bootstrap"])
    return _info(new_state)


def stop_cluster(dir: Path, timeout: float = 30, hard: bool = False) -> None:
    """Stop exactly the processes recorded in ``DIR/cluster.json``; safe to call repeatedly (a no-op
    when nothing is recorded or running). The data stays: ``restart_cluster(DIR)`` starts it again.

    Broker-only nodes go first: their controlled shutdown needs the controller on node 1. With ``hard``
    every node gets SIGKILL at once (no controlled shutdown; the next start recovers the logs).
    """
    dir = Path(dir).expanduser().resolve()
    if not _state_path(dir).exists():
        # Nothing recorded (a start that failed before launching anything, or a wrong dir): nothing to stop.
        log.warning("no %s in %s: no cluster recorded there, nothing to stop", STATE_FILE, dir)
        return
    state = _read_state(dir)
    for group in (
        [n for n in state["nodes"] if "controller" not in n["roles"]],
        [n for n in state["nodes"] if "controller" in n["roles"]],
    ):
        _terminate([n["pid"] for n in group if n.get("pid")], dir, timeout, hard=hard)
    for n in state["nodes"]:
        n["pid"] = None
    _write_state(dir, state)
    log.info("stopped the Kafka cluster in %s", dir)


def stop_broker(dir: Path, node_id: int, hard: bool = False) -> None:
    """Stop one node: SIGTERM (controlled shutdown) or, with ``hard``, SIGKILL. No-op if not running."""
    dir = Path(dir).expanduser().resolve()
    state = _read_state(dir)
    node = _node(state, node_id)
    if node.get("pid"):
        _terminate([node["pid"]], dir, timeout=30, hard=hard)
    node["pid"] = None
    _write_state(dir, state)


def start_broker(dir: Path, node_id: int, timeout: float = 60) -> None:
    """Restart a stopped node with its existing data (no re-format) and wait until it is ready."""
    dir = Path(dir).expanduser().resolve()
    state = _read_state(dir)
    node = _node(state, node_id)
    if _is_ours(node.get("pid"), dir):
        raise KafkaLauncherError(f"node {node_id} of the cluster in {dir} is already running (pid {node['pid']})")
    spec = NodeSpec(node_id, node["port"], node["sasl_port"], node["controller_port"], node["rack"])
    check_ports_free(spec.ports())
    launch = _launch(node)
    _write_state(dir, state)
    try:
        _wait_ready([launch], dir, time.monotonic() + timeout)
    except BaseException:
        _terminate([launch.pid], dir, timeout=10, hard=True)
        node["pid"] = None
        _write_state(dir, state)
        raise
