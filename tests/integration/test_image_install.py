"""The image's install steps, as the Dockerfile runs them, in a clean virtualenv (no container runs on
this machine: docs/deploy.md#the-image says why): the pinned, hashed runtime requirements, then the
wheel without dependencies, and the compiled walker's wheel. The installed `vcproxy` says it walks
compiled, serves real clients with the chart-style config, its HEALTHCHECK command answers, and nothing
of PySpark, pyarrow or the test tools came along."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import yaml

from vcproxy_tools.process import READY_LINE, proxy_config

from .ports import free_port, free_port_block

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
LEAN = ("pyspark", "pyarrow", "pytest", "hypothesis", "ruff", "trustme")


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, **kw)
    assert out.returncode == 0, f"{argv}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def test_the_lock_pins_every_runtime_dependency_and_nothing_else():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pinned = dict(re.findall(r"^([a-z0-9_.-]+)==(\S+) \\$", (ROOT / "requirements/runtime.txt").read_text(), re.M))
    for requirement in pyproject["project"]["dependencies"]:
        name = re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, f"{name} is a runtime dependency but not in requirements/runtime.txt (pip-compile)"
    assert not [name for name in pinned if name in LEAN]
    assert "--require-hashes" in DOCKERFILE and "requirements/runtime.txt" in DOCKERFILE


def test_a_plain_build_gives_the_proxy_not_analytics():
    """`docker build .` builds the last stage: it must be the proxy, without PySpark and Java."""
    stages = re.findall(r"^FROM (\S+)(?: AS (\S+))?$", DOCKERFILE, re.M)
    names = [name for _, name in stages]
    assert names[-1] == "runtime" and "analytics" in names, stages
    runtime = DOCKERFILE[DOCKERFILE.rindex("FROM ") :]
    assert "analytics" not in runtime.split("\n", 1)[1] and "openjdk" not in runtime


def test_the_build_context_holds_everything_the_dockerfile_copies():
    """.dockerignore excludes everything but what the COPY lines take: a source it does not admit fails the build
    (vcproxy_tools once was, after the tools moved out of the runtime package)."""
    admitted = [
        line[1:].strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    sources = [
        source
        for line in DOCKERFILE.splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for source in line.split()[1:-1]
    ]
    assert sources, "no COPY from the build context?"
    for source in sources:
        assert (ROOT / source).exists(), source
        assert any(source == a or source.startswith(a + "/") for a in admitted), f"{source} is not in the build context"


def test_installed_as_the_image_installs_it(kafka_cluster, tmp_path):
    venv = tmp_path / "opt-vcproxy"
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check"]
    _run([*pip, "--require-hashes", "--only-binary", ":all:", "-r", str(ROOT / "requirements/runtime.txt")])
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), str(ROOT)])
    (wheel,) = wheels.glob("vcproxy-*.whl")
    _run([*pip, "--no-deps", str(wheel)])
    # The compiled walker's wheel, as `make image` builds it for the Dockerfile (native/wheels).
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), str(ROOT / "native")])
    (native_wheel,) = wheels.glob("vcproxy_native-*.whl")
    _run([*pip, "--no-deps", str(native_wheel)])
    assert "native/wheels" in DOCKERFILE and "!native/wheels/" in (ROOT / ".dockerignore").read_text()
    installed = _run([str(venv / "bin" / "pip"), "list", "--format=freeze"]).stdout.lower()
    assert not [name for name in LEAN if f"{name}==" in installed], installed

    port, metrics_port = free_port_block(), free_port()
    config = proxy_config(
        kafka_cluster.bootstrap,
        port,
        host="0.0.0.0",
        listeners={"advertised_host": "127.0.0.1"},
        metrics={"enabled": True, "host": "0.0.0.0", "port": metrics_port},
        tenancy={
            "enabled": True,
            "state_topic": f"__vcproxy_state_image_{uuid.uuid4().hex[:6]}",
            "virtual_clusters": [{"name": "team-a", "client_ids": ["image-probe"]}],  # everyone is somewhere
        },
    )
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    vcproxy = str(venv / "bin" / "vcproxy")
    log = tmp_path / "serve.log"
    # The image's entrypoint and command, run from /tmp (its WORKDIR) with nothing else writable.
    with log.open("wb") as out:
        serve = subprocess.Popen([vcproxy, "serve", "--config", str(config_file)], cwd="/tmp", stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 120
        while READY_LINE not in log.read_text():
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        assert "compiled walker: vcproxy_native" in log.read_text()  # said once at start
        healthcheck = re.search(r'HEALTHCHECK .*CMD \["vcproxy", "probe", "([^"]+)"\]', DOCKERFILE)
        assert healthcheck is not None
        url = healthcheck.group(1).replace(":9404", f":{metrics_port}")
        _run([vcproxy, "probe", url])
        assert "ApiVersions answered" in _run([vcproxy, "probe", f"127.0.0.1:{port}"]).stdout
        # A real client through the installed proxy: the broker list comes back rewritten to the proxy.
        from confluent_kafka.admin import AdminClient

        client = {"bootstrap.servers": f"127.0.0.1:{port}", "client.id": "image-probe"}
        brokers = AdminClient(client).list_topics(timeout=30).brokers
        assert {(b.host, b.port) for b in brokers.values()} == {("127.0.0.1", port + 1 + n) for n in brokers}
    finally:
        serve.terminate()
        assert serve.wait(timeout=60) == 0, log.read_text()[-3000:]
