"""The Helm chart (charts/vcproxy): lint, every mode and example rendered, every manifest decoded strictly
into its Kubernetes API type, and what the rendered objects must agree on (ports, probes, checksums,
security), plus the values the schema and the chart refuse."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from proxy.config import parse_config

from .render import CHART, EXAMPLES, Helm, container, find, proxy_config

SIDECAR_APP = {"sidecar.app.image": '"registry.example/app:1"'}
MODES = {
    "gateway-defaults": ((), {}),
    "sidecar-defaults": ((), {"mode": '"sidecar"', **SIDECAR_APP}),
    **{f"example-{p.stem}": ((p,), {}) for p in EXAMPLES},
}


def test_lint_strict(helm):
    for values in (None, *EXAMPLES):
        argv = ["lint", "--strict", str(CHART), *(["-f", str(values)] if values else [])]
        out = helm.run(*argv)
        assert out.returncode == 0 and "0 chart(s) failed" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("mode", list(MODES))
def test_every_manifest_is_a_valid_kubernetes_object(helm, validator, mode):
    values, sets = MODES[mode]
    text = helm.template_text(*values, sets=sets)
    checked = subprocess.run([str(validator)], input=text, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    objects = helm.template(*values, sets=sets)
    assert checked.stdout.count("\nok ") + checked.stdout.startswith("ok ") == len(objects)


def test_the_validator_refuses_what_kubernetes_would(helm, validator):
    text = helm.template_text()
    for broken in (
        text.replace("terminationGracePeriodSeconds:", "terminationGracePeriodSecond:"),  # misspelt field
        text.replace("containerPort: 9404", 'containerPort: "9404x"'),  # wrong type
        text.replace("kind: Deployment", "kind: Deploymint"),  # unknown kind
        text.replace("mountPath: /tmp", "mountPath: /tmp\n              readOnlyy: true"),
    ):
        assert broken != text
        checked = subprocess.run([str(validator)], input=broken, capture_output=True, text=True, timeout=60)
        assert checked.returncode == 1 and "k8s-validate:" in checked.stderr, checked.stdout


@pytest.mark.parametrize("mode", list(MODES))
def test_the_rendered_config_is_one_the_proxy_accepts(helm, mode, tmp_path):
    values, sets = MODES[mode]
    objects = helm.template(*values, sets=sets)
    config = proxy_config(objects)
    _mount_files(config, tmp_path)
    parsed = parse_config(config, "config.yaml", tmp_path)
    assert parsed.metrics.enabled and parsed.metrics.host == "0.0.0.0"


def _mount_files(config: dict, root: Path) -> None:
    """Stand-ins for the Secrets the pod would mount: each /etc/vcproxy/... file under `root`."""
    from proxy.auth.credentials import make_entry

    def place(path: str, content: str) -> str:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return str(target)

    credentials = config.get("credentials", {})
    if "users_file" in credentials:
        import yaml

        users = {"alice": make_entry("alice-secret", 4096, ["SCRAM-SHA-512"])}
        credentials["users_file"] = place(credentials["users_file"], yaml.safe_dump(users))
    upstream = config["upstream"]
    if "sasl_password_file" in upstream:
        upstream["sasl_password_file"] = place(upstream["sasl_password_file"], "secret\n")
    upstream.pop("tls", None)  # a CA bundle of the image's; not this machine's concern
    if upstream.get("security_protocol") == "SASL_SSL":
        upstream["security_protocol"] = "SASL_PLAINTEXT"
    tls = config["listeners"].get("tls")
    if tls:
        import trustme

        cert = trustme.CA().issue_cert("bootstrap.kafka.example.com", "*.kafka.example.com")
        tls["certfile"] = place(tls["certfile"], cert.cert_chain_pems[0].bytes().decode())
        tls["keyfile"] = place(tls["keyfile"], cert.private_key_pem.bytes().decode())


def test_ports_of_config_pod_and_service_agree(helm):
    objects = helm.template(
        sets={"listener.brokerPortBase": "9300", "listener.nodeIds": '{"first": 1, "last": 4}', "metrics.port": "9500"}
    )
    config, proxy = proxy_config(objects), container(objects)
    ports = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    listeners = config["listeners"]
    assert ports == {
        "bootstrap": listeners["bootstrap_port"],
        **{f"broker-{n}": listeners["broker_port_base"] + n for n in range(1, 5)},
        "metrics": config["metrics"]["port"],
    }
    assert listeners["broker_port_base"] == 9300 and config["metrics"]["port"] == 9500
    service = find(objects, "Service")
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        name: (port, name) for name, port in ports.items()
    }
    assert (
        service["spec"]["selector"].items()
        <= find(objects, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    )
    assert proxy["args"] == ["serve", "--config", "/etc/vcproxy/config/config.yaml", "--workers", "auto"]
    mounts = {m["name"]: m["mountPath"] for m in proxy["volumeMounts"]}
    assert mounts["config"] == "/etc/vcproxy/config"


def test_sni_mode_has_one_port_and_the_pattern(helm):
    (sni,) = [p for p in EXAMPLES if p.stem == "gateway-sni"]
    objects = helm.template(sni)
    config, proxy = proxy_config(objects), container(objects)
    assert config["listeners"]["sni"] == {
        "broker_host_pattern": "broker-$(nodeId).kafka.example.com",
        "bootstrap_host": "bootstrap.kafka.example.com",
        "advertised_port": 443,
    }
    assert "broker_port_base" not in config["listeners"]
    assert [p["name"] for p in proxy["ports"]] == ["bootstrap", "metrics"]
    assert [p["name"] for p in find(objects, "Service")["spec"]["ports"]] == ["bootstrap", "metrics"]
    test_pod = find(objects, "Pod")
    assert "--server-name=bootstrap.kafka.example.com" in test_pod["spec"]["containers"][0]["args"]


def test_probes_hit_the_paths_the_proxy_serves(helm):
    from proxy.observability import http

    proxy = container(helm.template())
    assert proxy["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert proxy["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert proxy["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    source = Path(http.__file__).read_text()
    assert 'path == "/healthz"' in source and 'path == "/readyz"' in source


def test_a_config_change_rolls_the_pods_a_reloadable_secret_does_not(helm):
    def rendered(**sets: str) -> list[dict]:
        users = {"credentials.users": '{"alice": {"SCRAM-SHA-512": {"salt": "x"}}}'}
        return helm.template(sets={"listener.securityProtocol": '"SASL_PLAINTEXT"', **users, **sets})

    def annotations(objects: list[dict]) -> dict[str, str]:
        return find(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]

    base = annotations(rendered())
    logging = annotations(rendered(**{"config.logging": '{"level": "DEBUG"}'}))
    bob = rendered(**{"credentials.users": '{"bob": {"SCRAM-SHA-512": {"salt": "y"}}}'})
    assert base["checksum/config"] != logging["checksum/config"]
    # The users file is reloaded by the proxy when the kubelet updates the Secret: no restart for it.
    assert "bob" in find(bob, "Secret")["stringData"]["users.yaml"]
    assert annotations(bob) == base
    # Mounted whole, not by subPath: a subPath mount never sees the kubelet's update of a Secret.
    assert not any("subPath" in mount for mount in container(bob)["volumeMounts"])
    assert [k for k in base if k.startswith("checksum/")] == ["checksum/config"]
    assert base == annotations(rendered())  # and nothing else moves them


def test_secure_pod_defaults(helm):
    objects = helm.template()
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    proxy = container(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert proxy["securityContext"]["readOnlyRootFilesystem"] is True
    assert proxy["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert proxy["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["automountServiceAccountToken"] is False
    drain = proxy_config(objects)["limits"]["drain_timeout_seconds"]
    assert pod["terminationGracePeriodSeconds"] > drain
    assert find(objects, "Deployment")["spec"]["replicas"] >= 2
    assert find(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }


def test_sidecar_mode_is_an_application_pod_on_localhost(helm):
    (sidecar,) = [p for p in EXAMPLES if p.stem == "sidecar"]
    objects = helm.template(sidecar)
    assert {o["kind"] for o in objects} == {"ConfigMap", "ServiceAccount", "Deployment"}  # no Service, PDB, test
    config = proxy_config(objects)
    assert config["listeners"]["host"] == "127.0.0.1" and config["listeners"]["advertised_host"] == "localhost"
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    app, proxy = pod["containers"]
    assert app["name"] == "payments" and proxy["name"] == "vcproxy"
    assert {"name": "KAFKA_BOOTSTRAP_SERVERS", "value": "localhost:9192"} in app["env"]


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        ({"replicaCount": "-1"}, "replicaCount"),
        ({"mode": '"daemonset"'}, "mode"),
        ({"bogus": "1"}, "bogus"),
        ({"listener.bootstrapPort": "70000"}, "bootstrapPort"),
        ({"listener.sni.brokerHostPattern": '"broker.example.com"'}, "brokerHostPattern"),
        ({"config.upstream.bootstrap_servers": "[]"}, "bootstrap_servers"),
        ({"config.metrics": '{"port": 1}'}, "metrics"),
        ({"listener.sni.enabled": "true"}, "sni.enabled needs tls.enabled"),
        ({"listener.securityProtocol": '"SASL_PLAINTEXT"'}, "needs credentials.users or credentials.existingSecret"),
        ({"terminationGracePeriodSeconds": "12"}, "must exceed config.limits.drain_timeout_seconds"),
        ({"listener.nodeIds": '{"first": 5, "last": 2}'}, "nodeIds.first must not be above"),
        ({"workers": "0"}, "workers"),
        ({"workers": '"all"'}, "workers"),
    ],
)
def test_bad_values_are_refused(helm: Helm, sets, expected):
    assert expected in helm.refuses(sets=sets)


@pytest.mark.parametrize(
    ("sets", "replicas"),
    [
        ({"replicaCount": "3"}, 3),
        ({"autoscaling.enabled": "true", "autoscaling.maxReplicas": "7"}, 7),
        ({"config.tenancy.quota_sharing.replicas": "5"}, 5),
    ],
)
def test_gateway_replicas_know_how_many_share_each_quota(helm, sets, replicas, tmp_path):
    """With tenancy, the gateway's replicas share each quota's use; while the usage topic is down each holds
    its clients to 1/N, N the most replicas that may run (or what the config says)."""
    objects = helm.template(sets={"config.tenancy.enabled": "true", **sets})
    config = proxy_config(objects)
    assert config["tenancy"]["quota_sharing"]["replicas"] == replicas
    _mount_files(config, tmp_path)
    assert parse_config(config, "config.yaml", tmp_path).tenancy.quota_sharing.replicas == replicas
    assert "tenancy" not in proxy_config(helm.template(sets={"replicaCount": "3"}))  # tenancy off: untouched


@pytest.mark.parametrize(("sets", "expected"), [({}, "auto"), ({"workers": "3"}, "3")])
def test_the_proxy_serves_from_the_workers_the_values_say(helm, sets, expected):
    """`workers` becomes `serve --workers`, in both modes, and the proxy's own parser takes it."""
    import argparse

    from proxy import serve

    for mode in ("gateway", "sidecar"):
        extra = SIDECAR_APP if mode == "sidecar" else {}
        objects = helm.template(sets={"mode": f'"{mode}"', **extra, **sets})
        containers = find(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
        (proxy,) = [c for c in containers if c["name"] == "vcproxy"]
        assert proxy["args"][-2:] == ["--workers", expected]
        parser = argparse.ArgumentParser()
        serve.register(parser.add_subparsers())
        assert parser.parse_args(proxy["args"]).workers >= 1
