"""helm and the manifest validator for the chart tests: found or built once per session, never skipped.

helm comes from the Go module proxy (`make helm` puts it in .venv/bin); the validator
(tools/k8s-validate) is built with Go like the tests' franz-go client."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from ..gobuild import go_build

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "vcproxy"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
VALIDATOR_SOURCE = ROOT / "tools" / "k8s-validate"
KUBE_VERSION = "1.31.0"


def helm_binary() -> str:
    for candidate in (ROOT / ".venv" / "bin" / "helm", shutil.which("helm")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    raise AssertionError("no helm: `make helm` installs it from the Go module proxy into .venv/bin")


def build_validator(out: Path) -> Path:
    return go_build(VALIDATOR_SOURCE, out / "k8s-validate")


class Helm:
    def __init__(self, binary: str):
        self.binary = binary

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=120)

    def template_text(self, *values: Path, sets: dict[str, str] | None = None, release: str = "rel") -> str:
        argv = ["template", release, str(CHART), "--namespace", "kafka", "--kube-version", KUBE_VERSION]
        for path in values:
            argv += ["-f", str(path)]
        for key, value in (sets or {}).items():
            argv += ["--set-json", f"{key}={value}"]
        out = self.run(*argv)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def template(self, *values: Path, sets: dict[str, str] | None = None) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(self.template_text(*values, sets=sets)) if d]

    def refuses(self, *values: Path, sets: dict[str, str] | None = None) -> str:
        argv = ["template", "rel", str(CHART), "--kube-version", KUBE_VERSION]
        for path in values:
            argv += ["-f", str(path)]
        for key, value in (sets or {}).items():
            argv += ["--set-json", f"{key}={value}"]
        out = self.run(*argv)
        assert out.returncode != 0, f"rendered, but should have been refused:\n{out.stdout[:2000]}"
        return out.stderr


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, [(o["kind"], o["metadata"]["name"]) for o in objects]
    return found[0]


def proxy_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(find(objects, "ConfigMap")["data"]["config.yaml"])


def container(objects: list[dict[str, Any]], name: str = "vcproxy") -> dict[str, Any]:
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == name)
