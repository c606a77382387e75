"""SNI mode with real TLS clients: one proxy port for the bootstrap and every broker, the broker picked by
the TLS server name. The clients resolve the brokers' names with the test's own table (Java's
`jdk.net.hosts.file`, the Go client's dialer), so nothing of the machine's resolver is changed.

Every record goes to a partition led by some broker, with acks=all: were a connection routed to any other
broker, the client would be told NOT_LEADER_OR_FOLLOWER until it gave up. The metrics show an upstream
connection to every broker, made for the server name that asked for it."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from proxy.auth.credentials import make_entry
from vcproxy_tools.process import ProxyProcess

from .ports import free_port_block
from .tenants import tenancy_config
from .tool_jvm import run_tool

DOMAIN = "kafka.test"
BOOTSTRAP = f"bootstrap.{DOMAIN}"
PATTERN = f"broker-$(nodeId).{DOMAIN}"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
PARTITIONS = 6
MESSAGES = 120


@dataclass
class Sni:
    proxy: ProxyProcess
    port: int
    metrics_port: int
    ca: Path
    hosts: Path  # the name table the clients use
    workdir: Path

    @property
    def bootstrap(self) -> str:
        return f"{BOOTSTRAP}:{self.port}"


@pytest.fixture(scope="module")
def sni(kafka_cluster, tmp_path_factory) -> Iterator[Sni]:
    workdir = tmp_path_factory.mktemp("sni")
    ca = trustme.CA(organization_name="vcproxy SNI test CA")
    server = ca.issue_cert(BOOTSTRAP, f"*.{DOMAIN}")
    ca.cert_pem.write_to_path(str(workdir / "ca.pem"))
    server.private_key_and_cert_chain_pem.write_to_path(str(workdir / "server.pem"))
    names = [BOOTSTRAP, *(PATTERN.replace("$(nodeId)", str(b.node_id)) for b in kafka_cluster.brokers)]
    hosts = workdir / "hosts"
    hosts.write_text(f"127.0.0.1 localhost {' '.join(names)}\n")
    port, metrics_port = free_port_block(), free_port_block()
    config = tenancy_config(
        kafka_cluster,
        port,
        [{"name": "team-a", "principals": ["User:alice"]}, {"name": "team-b", "principals": ["User:bob"]}],
        listeners={
            "security_protocol": "SASL_SSL",
            "sasl_mechanisms": ["PLAIN", "SCRAM-SHA-512"],
            "tls": {"certfile": str(workdir / "server.pem")},
            "sni": {"bootstrap_host": BOOTSTRAP, "broker_host_pattern": PATTERN},
        },
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        metrics={"enabled": True, "port": metrics_port},
    )
    proxy = ProxyProcess(config, workdir, name="sni").start(timeout=120)
    try:
        yield Sni(proxy, port, metrics_port, workdir / "ca.pem", hosts, workdir)
    finally:
        assert proxy.stop(timeout=60) == 0, proxy.log_tail()


def _java_config(sni: Sni, user: str) -> Path:
    path = sni.workdir / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{USERS[user]}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={sni.ca}\n"
    )
    return path


def _java(sni: Sni, tool: str, args: list[str], **kw) -> str:
    env = {**os.environ, "JAVA_TOOL_OPTIONS": f"-Djdk.net.hosts.file={sni.hosts}"}
    out = run_tool(tool, args, env=env, timeout=180, **kw)
    assert out.returncode == 0, f"{tool}: {out.stderr[-3000:]}\nproxy log:\n{sni.proxy.log_tail()}"
    return out.stdout


def _upstream_nodes(sni: Sni) -> dict[int, float]:
    """vcproxy_upstream_connected by node id: which brokers the proxy opened connections to for clients."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{sni.metrics_port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("vcproxy_upstream_connected{"):
            labels, _, value = line.rpartition(" ")
            out[int(labels.split('node_id="')[1].split('"')[0])] = float(value)
    return out


def test_java_clients_reach_every_broker_through_one_port(sni, kafka_cluster):
    topic = f"sni-{uuid.uuid4().hex[:8]}"
    b = ["--bootstrap-server", sni.bootstrap, "--command-config", str(_java_config(sni, "alice"))]
    _java(sni, "kafka-topics", [*b, "--create", "--topic", topic, "--partitions", str(PARTITIONS)])
    described = _java(sni, "kafka-topics", [*b, "--describe", "--topic", topic])
    leaders = {int(line.split("Leader:")[1].split()[0]) for line in described.splitlines() if "Leader:" in line}
    assert leaders == {broker.node_id for broker in kafka_cluster.brokers}, described  # every broker leads one

    lines = [f"{i % PARTITIONS}:m{i}" for i in range(MESSAGES)]
    config = str(_java_config(sni, "alice"))
    producer = ["--bootstrap-server", sni.bootstrap, "--command-config", config, "--topic", topic]
    keyed = ["--property", "parse.key=true", "--property", "key.separator=:", "--producer-property", "acks=all"]
    _java(sni, "kafka-console-producer", [*producer, *keyed], input="\n".join(lines) + "\n")
    consumer = ["--bootstrap-server", sni.bootstrap, "--command-config", config, "--topic", topic]
    out = _java(
        sni,
        "kafka-console-consumer",
        [*consumer, "--from-beginning", "--max-messages", str(MESSAGES), "--timeout-ms", "120000"],
    )
    assert sorted(out.split()) == sorted(line.split(":")[1] for line in lines)
    # The advertised names are the pattern's; the tenant sees its own topic name, not the physical one.
    assert topic in _java(sni, "kafka-topics", [*b, "--list"]).split()
    assert {n: 1.0 for n in leaders}.items() <= _upstream_nodes(sni).items()


def test_franz_go_over_sni(sni, go_client):
    topic = f"sni-go-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "TLS_CA_FILE": str(sni.ca), "DIAL_ADDRESS": "127.0.0.1"}
    out = subprocess.run(
        [str(go_client), sni.bootstrap, "bob", USERS["bob"], topic, "sni-group", "100"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert out.returncode == 0, f"{out.stderr}\nproxy log:\n{sni.proxy.log_tail()}"
    result = json.loads(out.stdout)
    assert sorted(result["consumed"]) == sorted(f"bob-{i}" for i in range(100))
    assert topic in result["topics"] and "sni-group" in result["groups"]


def _handshake(port: int, server_name: str | None, ca: Path) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(ca))
    if server_name is None:
        context.check_hostname = False  # a client that connects by address sends no server name
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        return context.wrap_socket(raw, server_hostname=server_name)
    except BaseException:
        raw.close()
        raise


def _wait_for_log(sni: Sni, text: str, deadline: float = 30) -> str:
    end = time.monotonic() + deadline
    log = sni.proxy.log_path.read_text()
    while text not in log and time.monotonic() < end:
        time.sleep(0.05)
        log = sni.proxy.log_path.read_text()
    return log


def test_unknown_and_missing_server_names_are_refused(sni):
    other = f"evil.{DOMAIN}"  # the wildcard certificate covers it: only the proxy's routing refuses it
    with pytest.raises(ssl.SSLError):  # the handshake fails: no broker is ever reached for it
        _handshake(sni.port, other, sni.ca).close()
    refused = f"TLS handshake failed: server name '{other}' is neither the bootstrap nor a broker"
    assert refused in _wait_for_log(sni, refused)
    with pytest.raises(ssl.SSLError):
        _handshake(sni.port, None, sni.ca).close()
    missing = "TLS handshake failed: no server name (SNI) sent, and bootstrap_host is set"
    assert missing in _wait_for_log(sni, missing)
    # Both refusals cost their own connection only: the bootstrap name still works.
    with _handshake(sni.port, BOOTSTRAP, sni.ca) as sock:
        assert sock.server_hostname == BOOTSTRAP
    assert sni.proxy.proc is not None and sni.proxy.proc.poll() is None
