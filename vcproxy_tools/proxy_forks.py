"""Many `vcproxy serve` processes for the price of one start: a fork server that imports the proxy once and forks
each proxy from there.

Of the 1.0 s of CPU a proxy spends before it listens, about 0.8 s is Python importing its modules and building
their classes (docs/performance.md, "The test suite's CPU"). The test suite starts some two hundred proxies; forked
from a process that imported them once, each pays only its own start. A forked proxy is the same code run by the
same `main` with the same arguments, config file, log, working directory and environment: what it shares is the
interpreter's start, nothing a proxy does (the server has no thread, no event loop, no socket and no client when it
forks). `vcproxy_tools.process.launch_with` registers it; tests/conftest.py does, the product (the demo, the
benchmarks, which measure a start) does not.

The protocol, one JSON object per line: the client writes ``{"argv", "cwd", "env", "log"}`` on the server's stdin
and reads ``{"pid"}`` (or ``{"error"}``) back on its stdout; ``{"exit": pid, "code", "cpu"}`` follows whenever a
child ends (``code`` as `subprocess.Popen.returncode` gives it; ``cpu``: the child's user+system seconds). The
server ends when its stdin closes, and sends its children still running SIGTERM.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

# -- the server (python -m vcproxy_tools.proxy_forks) --


def _preload() -> None:
    """Import what a proxy imports before it listens: every module of the proxy but its generators and its
    `__main__` (which would run it), the libraries they use, and what is built from every API's schema (a
    function of the code alone, cached)."""
    from proxy.serve import without_test_tools

    without_test_tools()
    import proxy

    for module in pkgutil.walk_packages(proxy.__path__, "proxy."):
        if not module.name.endswith(("_gen", "__main__")):
            importlib.import_module(module.name)
    import confluent_kafka  # noqa: F401  (the state topic's and telemetry's clients)
    import trio  # noqa: F401

    from proxy.net.server import build_tables

    # What a proxy builds before it listens from every API's schema (seconds), cached.
    build_tables(tenancy=False)
    build_tables(tenancy=True)


def _child(request: dict[str, Any], wake: tuple[int, int]) -> None:
    """In the forked child: become the proxy the request describes. Ends by raising SystemExit, so the
    interpreter exits as `python -m proxy` does (exit handlers run, non-daemon threads are joined)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in wake:
        os.close(fd)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["vcproxy", *request["argv"]]
    from proxy.serve import main

    raise SystemExit(main(request["argv"]))


def _send(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def serve_forks() -> None:
    _preload()
    wake = os.pipe()
    os.set_blocking(wake[1], False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake select() through the pipe
    children: set[int] = set()
    pending = b""
    while True:
        try:
            readable, _, _ = select.select([0, wake[0]], [], [])
        except InterruptedError:
            continue
        if wake[0] in readable:
            os.read(wake[0], 4096)
        while children:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            _send({"exit": pid, "code": code, "cpu": usage.ru_utime + usage.ru_stime})
        if 0 not in readable:
            continue
        data = os.read(0, 65536)
        if not data:  # the client is gone
            for pid in children:
                os.kill(pid, signal.SIGTERM)
            return
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            try:
                request = json.loads(line)
                pid = os.fork()
            except Exception as exc:  # a bad request or no fork: the client says so; the server goes on
                _send({"error": f"{type(exc).__name__}: {exc}"})
                continue
            if pid == 0:
                _child(request, wake)
            children.add(pid)
            _send({"pid": pid})


# -- the client: what the tests hold --


class ForkServer:
    """One fork server, started at the first spawn; each spawn returns a `Forked` (a Popen's interface)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one spawn at a time: its answer is the next non-exit line
        self._changed = threading.Condition()
        self._answers: list[dict[str, Any]] = []
        self._exits: dict[int, int] = {}
        self._server: subprocess.Popen[bytes] | None = None
        self._gone = False
        self.children_cpu = 0.0  # seconds of the children that have ended (tests/cpu_profile.py adds it)

    def _start(self) -> subprocess.Popen[bytes]:
        if self._server is None or self._gone:
            self._gone = False
            self._server = subprocess.Popen(
                [sys.executable, "-u", "-m", "vcproxy_tools.proxy_forks"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            assert self._server.stdout is not None
            threading.Thread(target=self._read, args=(self._server.stdout,), daemon=True).start()
        return self._server

    def _read(self, out: IO[bytes]) -> None:
        for line in out:
            message = json.loads(line)
            with self._changed:
                if "exit" in message:
                    self._exits[message["exit"]] = message["code"]
                    self.children_cpu += message["cpu"]
                else:
                    self._answers.append(message)
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()

    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> Forked:
        with self._lock:
            server = self._start()
            assert server.stdin is not None
            request = {"argv": argv, "cwd": str(cwd), "env": env, "log": str(log)}
            server.stdin.write((json.dumps(request) + "\n").encode())
            server.stdin.flush()
            with self._changed:
                if not self._changed.wait_for(lambda: self._answers or self._gone, timeout=60):
                    raise RuntimeError("the proxy fork server did not answer in 60 s")
                if not self._answers:
                    raise RuntimeError(f"the proxy fork server exited ({server.poll()})")
                answer = self._answers.pop(0)
        if "error" in answer:
            raise RuntimeError(f"the proxy fork server could not start a proxy: {answer['error']}")
        return Forked(answer["pid"], self)

    def returncode(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._gone, timeout=timeout)
            if pid in self._exits:
                return self._exits[pid]
        if self._gone and not _alive(pid):
            return -signal.SIGKILL  # the server was killed, and the child with it or after it: no status left
        return None

    def close(self) -> None:
        if self._server is not None and self._server.stdin is not None:
            self._server.stdin.close()
            self._server.wait(30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Forked:
    """A forked proxy, with the part of `subprocess.Popen`'s interface the tests use."""

    def __init__(self, pid: int, server: ForkServer) -> None:
        self.pid = pid
        self._server = server
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.returncode(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.returncode(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"proxy {self.pid}", timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    serve_forks()
