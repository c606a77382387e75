"""Run `vcproxy serve` as a child process: used by the tests, the benchmark and the demo."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import yaml

READY_LINE = "proxy ready:"


class Child(Protocol):
    """What ProxyProcess needs of a started proxy: `subprocess.Popen`'s interface, in part."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


# Starts `vcproxy serve ARGS` with its output appended to LOG: (args, log) -> the child.
Launcher = Callable[[list[str], Path], Child]


def _popen(args: list[str], log_path: Path) -> Child:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "proxy", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


_launch: Launcher = _popen


def wait_ready(proc: Child, log_path: Path, timeout: float, what: str) -> None:
    """Until a proxy started from a script's own argv (a benchmark's: a profiler, another checkout) logs that it
    is ready; if it ends or the timeout passes first, it is killed and the script exits naming its log."""
    deadline = time.monotonic() + timeout
    while READY_LINE.encode() not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"{what} did not start: see {log_path}")
        time.sleep(0.2)


def launch_with(launcher: Launcher | None) -> None:
    """How ProxyProcess starts its proxies from now on (None: a process of its own, the default). The test
    suite registers a fork server (vcproxy_tools/proxy_forks.py)."""
    global _launch
    _launch = launcher or _popen


class ProxyProcess:
    def __init__(self, config: dict[str, Any], workdir: Path, name: str = "proxy", extra_args: list[str] | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.config_path = self.workdir / f"{name}.yaml"
        self.log_path = self.workdir / f"{name}.log"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.extra_args = extra_args or []
        self.proc: Child | None = None

    @property
    def bootstrap(self) -> str:
        listeners = self.config.get("listeners", {})
        return (
            f"{listeners.get('advertised_host') or listeners.get('host', '127.0.0.1')}:"
            f"{listeners.get('bootstrap_port', 9192)}"
        )

    def start(self, timeout: float = 30) -> ProxyProcess:
        self.log_path.touch()
        offset = self.log_path.stat().st_size
        self.proc = _launch(["serve", "--config", str(self.config_path), *self.extra_args], self.log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"proxy exited with {self.proc.returncode}:\n{self.log_tail(offset)}")
            if READY_LINE in self.log_path.read_text(errors="replace")[offset:]:
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"proxy not ready after {timeout}s:\n{self.log_tail(offset)}")

    def log_tail(self, offset: int = 0, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace")[offset:]
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM (graceful drain), then SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid


def proxy_config(upstream_bootstrap: str, bootstrap_port: int, host: str = "127.0.0.1", **sections: Any) -> dict:
    config: dict[str, Any] = {
        "listeners": {"host": host, "bootstrap_port": bootstrap_port},
        "upstream": {"bootstrap_servers": upstream_bootstrap.split(","), "metadata_refresh_seconds": 5},
        # A loaded machine starts a client's interpreter or JVM slowly: the 10 s default login deadline
        # would close a healthy client mid-login (tests of the deadline set their own).
        "limits": {"authentication_timeout_ms": 60000},
    }
    for key, value in sections.items():
        config.setdefault(key, {}).update(value)
    return config


def children_of(pid: int) -> list[int]:
    """A process's live children (a `serve --workers N` parent's workers), by each process's parent pid. Not
    /proc/PID/task/TID/children: a child is listed under the thread that started it (trio starts processes
    from a worker thread) and moves to another when that thread ends, so a reading there can miss it."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
            if int(ppid) == pid and state != "Z":
                children.append(int(stat.parent.name))
    return children
