"""Kafka's admin tools in one warm JVM per test process (java/ToolServer.java), for the many calls the suite makes.

A cold tool JVM costs about 1.5 s of CPU before the tool's first request, a class-data archive included; the suite
made some 240 such calls a run (6 of its 47 minutes of CPU, 2026-11-27). ``run_tool`` here takes the same
arguments as vcproxy_tools.kafka.tools.run_tool and gives the same result: the tool's own main class with the same
arguments, its exit code, stdout and stderr. Calls the warm JVM cannot stand in for go to a process of their own as
before: a tool that reads stdin or runs for long (console and perf clients), a call with its own environment or
streams, another Kafka version, and any call while ``VCPROXY_TOOL_JVM=0``. The tools' own behaviour as commands
(class-data archives, exit codes of a real process) is tested with vcproxy_tools.kafka.tools.run_tool itself.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from vcproxy_tools.kafka.dist import DEFAULT_KAFKA_VERSION, ensure_dist, java_executable
from vcproxy_tools.kafka.tools import DEFAULT_TOOL_TIMEOUT, TOOL_JVM_FLAGS, main_class
from vcproxy_tools.kafka.tools import run_tool as run_tool_process

ENV = "VCPROXY_TOOL_JVM"
SOURCE = Path(__file__).parent / "java" / "ToolServer.java"
LOG4J = Path(__file__).resolve().parents[2] / "vcproxy_tools" / "kafka" / "tools-log4j2.properties"

# The admin tools: each call sends its requests and exits. Console and perf clients stay processes of their own
# (they read stdin, install shutdown hooks or run until stopped).
WARM = frozenset(
    {
        "kafka-acls",
        "kafka-broker-api-versions",
        "kafka-client-metrics",
        "kafka-cluster",
        "kafka-configs",
        "kafka-consumer-groups",
        "kafka-delegation-tokens",
        "kafka-delete-records",
        "kafka-features",
        "kafka-get-offsets",
        "kafka-groups",
        "kafka-leader-election",
        "kafka-log-dirs",
        "kafka-metadata-quorum",
        "kafka-share-groups",
        "kafka-streams-groups",
        "kafka-topics",
        "kafka-transactions",
    }
)
RESTART_EVERY = 100  # calls
# A call that is not one of these keyword arguments keeps its own process (stdout/stderr/stdin/env/cwd...).
_WARM_KW = frozenset({"heap"})


class ToolJvm:
    """One ToolServer process; calls are serialised (a tool owns the JVM's standard streams while it runs)."""

    def __init__(self, workdir: Path, version: str | None = None):
        self.workdir = workdir
        self.version = version or DEFAULT_KAFKA_VERSION
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.calls = 0

    def _start(self) -> subprocess.Popen[bytes]:
        libs = ensure_dist(self.version)
        java = java_executable()
        classes = self.workdir / "classes"
        if not (classes / "ToolServer.class").exists():
            javac = shutil.which("javac", path=str(Path(java).resolve().parent)) or shutil.which("javac")
            assert javac, "no javac next to java or on PATH: the suite needs a JDK 17+"
            classes.mkdir(parents=True, exist_ok=True)
            subprocess.run([javac, "-d", str(classes), "-cp", f"{libs}/*", str(SOURCE)], check=True, timeout=300)
        argv = [
            java,
            "-Xmx512m",
            *TOOL_JVM_FLAGS,  # C1 only: the calls are many and short, and C2's compiles cost more than they win
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={LOG4J}",
            "-cp",
            f"{classes}:{libs}/*",
            "ToolServer",
        ]
        log = (self.workdir / "tool-jvm.log").open("ab")
        try:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        finally:
            log.close()

    def run(self, name: str, args: Sequence[str], timeout: float | None) -> subprocess.CompletedProcess[str]:
        return self.run_main(main_class(name), args, timeout, name)

    def run_main(
        self, main: str, args: Sequence[str], timeout: float | None, name: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """Run class ``main`` (on the dist's or the server's own class path) as a tool."""
        name = name or main
        request = struct.pack(">i", len(args)) + _string(main) + b"".join(_string(arg) for arg in args)
        with self.lock:
            if self.calls and self.calls % RESTART_EVERY == 0:
                self.stop()  # threads or state a tool may leave behind do not pile up over a session
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()
            proc = self.proc
            assert proc.stdin is not None and proc.stdout is not None
            reply: list[Any] = []
            reader = threading.Thread(target=_read_reply, args=(proc.stdout, reply), daemon=True)
            proc.stdin.write(request)
            proc.stdin.flush()
            reader.start()
            reader.join(timeout)
            if reader.is_alive() or not reply:
                timed_out = reader.is_alive()
                self.stop()  # a tool that does not end takes the JVM with it, as a killed process would
                if timed_out:
                    raise subprocess.TimeoutExpired([name, *args], timeout or 0)
                raise RuntimeError(f"the tool JVM ended during {name}: see {self.workdir / 'tool-jvm.log'}")
            self.calls += 1
            code, out, err, settled = reply
            if not settled:
                self.stop()  # a thread the tool left running would have died with its process: so does this JVM
        return subprocess.CompletedProcess([name, *args], code, out, err)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">i", len(data)) + data


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _read_reply(stream: IO[bytes], reply: list[Any]) -> None:
    try:
        (code,) = struct.unpack(">i", _read_exact(stream, 4))
        out = _read_exact(stream, struct.unpack(">i", _read_exact(stream, 4))[0])
        err = _read_exact(stream, struct.unpack(">i", _read_exact(stream, 4))[0])
        settled = _read_exact(stream, 1) != b"\x00"
    except (EOFError, OSError):
        return
    reply.extend((code, out.decode(errors="replace"), err.decode(errors="replace"), settled))


_jvm: ToolJvm | None = None


def use(jvm: ToolJvm | None) -> None:
    """The session's warm JVM (tests/conftest.py), or None."""
    global _jvm
    _jvm = jvm


def enabled(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return env.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def run_tool(
    name: str,
    args: Sequence[str],
    *,
    version: str = DEFAULT_KAFKA_VERSION,
    input: str | None = None,
    timeout: float | None = DEFAULT_TOOL_TIMEOUT,
    check: bool = False,
    use_cds: bool | None = None,
    **kw: Any,
) -> subprocess.CompletedProcess[str]:
    """vcproxy_tools.kafka.tools.run_tool, in the session's warm JVM where it can stand in (module docstring)."""
    jvm = _jvm
    warm = (
        jvm is not None
        and name in WARM
        and input is None
        and use_cds is None
        and version == jvm.version
        and set(kw) <= _WARM_KW
    )
    if not warm:
        return run_tool_process(
            name, args, version=version, input=input, timeout=timeout, check=check, use_cds=use_cds, **kw
        )
    assert jvm is not None
    result = jvm.run(name, [str(arg) for arg in args], timeout)
    if check:
        result.check_returncode()
    return result
