"""The proxy started exactly as the chart's pod would start it: the rendered ConfigMap and Secrets placed
where the pod mounts them (under a temporary root instead of /), the rendered container args and env, the
real Kafka as upstream; then the rendered probes, real clients through it, the `helm test` pod's command,
and SIGTERM within the pod's grace period."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.auth.credentials import make_entry
from tests.chart.render import Helm, find, helm_binary

from .ports import free_port, free_port_block
from .test_tenancy_sasl import consume, produce

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
MOUNT_ROOT = "/etc/vcproxy"


def _values(kafka_cluster: Any, port: int, metrics_port: int) -> dict[str, Any]:
    node_ids = sorted(b.node_id for b in kafka_cluster.brokers)
    return {
        "listener": {
            "advertisedHost": "127.0.0.1",
            "bootstrapPort": port,
            "brokerPortBase": port + 1,
            "nodeIds": {"first": node_ids[0], "last": node_ids[-1]},
            "securityProtocol": "SASL_PLAINTEXT",
        },
        "credentials": {"users": {u: make_entry(p, 4096, ["SCRAM-SHA-512"]) for u, p in USERS.items()}},
        "metrics": {"port": metrics_port},
        "config": {
            "upstream": {"bootstrap_servers": kafka_cluster.bootstrap.split(",")},
            "tenancy": {
                "enabled": True,
                "state_topic": f"__vcproxy_state_chart_{uuid.uuid4().hex[:6]}",
                "virtual_clusters": [
                    {"name": "team-a", "principals": ["User:alice"]},
                    {"name": "team-b", "principals": ["User:bob"]},
                ],
            },
        },
    }


def _place(objects: list[dict[str, Any]], pod: dict[str, Any], root: Path) -> None:
    """Write what the pod's volumes hold where its container mounts them, under `root`."""
    (proxy,) = [c for c in pod["containers"] if c["name"] == "vcproxy"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in proxy["volumeMounts"]:
        volume = volumes[mount["name"]]
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            data = find(objects, "ConfigMap", volume["configMap"]["name"])["data"]
        elif "secret" in volume:
            data = find(objects, "Secret", volume["secret"]["secretName"])["stringData"]
        else:
            continue  # emptyDir
        for key, text in data.items():
            # The files name each other by their in-pod paths: the same paths, under the root.
            (target / key).write_text(text.replace(MOUNT_ROOT, f"{root}{MOUNT_ROOT}"))


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _probe_url(container: dict[str, Any], probe: str) -> str:
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    get = container[probe]["httpGet"]
    return f"http://127.0.0.1:{ports[get['port']]}{get['path']}"


@pytest.fixture(scope="module")
def helm() -> Helm:
    return Helm(helm_binary())


def test_the_rendered_pod_serves_clients(kafka_cluster, helm, tmp_path):
    port, metrics_port = free_port_block(), free_port()
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(_values(kafka_cluster, port, metrics_port)))
    objects = helm.template(values)
    deployment = find(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (proxy,) = [c for c in pod["containers"] if c["name"] == "vcproxy"]
    root = tmp_path / "pod"
    _place(objects, pod, root)

    args = [a.replace(MOUNT_ROOT, f"{root}{MOUNT_ROOT}") for a in proxy["args"]]
    env = {**os.environ, **{e["name"]: e["value"] for e in proxy.get("env", [])}}
    log = (tmp_path / "proxy.log").open("wb")
    # The image's entrypoint is `vcproxy`: the same command, from this checkout.
    process = subprocess.Popen(
        [sys.executable, "-m", "vcproxy_tools", *args], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    try:
        deadline = time.monotonic() + 120
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            url = _probe_url(proxy, probe)
            while True:
                assert process.poll() is None, (tmp_path / "proxy.log").read_text()
                try:
                    status, body = _get(url)
                except OSError:
                    status, body = 0, "not listening yet"
                if status == 200:
                    break
                assert time.monotonic() < deadline, f"{probe} {url}: {status} {body}"
                time.sleep(0.2)

        # Real clients, as tenants, through the rendered listener.
        conf = {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": USERS["alice"],
        }
        topic = f"chart-{uuid.uuid4().hex[:6]}"
        values_sent = [f"v{i}" for i in range(50)]
        admin = AdminClient(conf)  # kept until the creation's result is in
        admin.create_topics([NewTopic(topic, 3, 3)], operation_timeout=30)[topic].result(60)
        produce(conf, topic, values_sent)
        assert sorted(consume(conf, topic, "chart-readers", len(values_sent))) == sorted(values_sent)

        # `helm test`: the test pod's command, with the Service's name resolved to this machine.
        test_pod = find(objects, "Pod")["spec"]["containers"][0]
        service = f"rel-vcproxy.kafka.svc:{port}"
        argv = [a.replace(service, f"127.0.0.1:{port}") for a in test_pod["args"]]
        assert test_pod["command"] == ["vcproxy", "probe"]
        checked = subprocess.run(
            [sys.executable, "-m", "vcproxy_tools", "probe", *argv], capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 0 and "ApiVersions answered" in checked.stdout, checked.stderr

        # Kubernetes stops a pod with SIGTERM, then SIGKILL after the grace period.
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=pod["terminationGracePeriodSeconds"]) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
    text = (tmp_path / "proxy.log").read_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
