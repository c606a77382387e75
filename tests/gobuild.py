"""Go programs the tests build (the franz-go client, the manifest validator): `go build`, never skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def go_build(source: Path, binary: Path) -> Path:
    """Build the Go module in `source` into `binary`; modules come from the Go module proxy."""
    go = shutil.which("go")
    assert go, f"no go on PATH: {source.name} is built with Go (the Go module proxy reachable)"
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    built = subprocess.run(
        [go, "build", "-o", str(binary), "."], cwd=source, env=env, capture_output=True, text=True, timeout=900
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return binary
