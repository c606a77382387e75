"""The warm tool JVM (tool_jvm.py) answers as the tool's own process does: same exit code, same stdout, the same
stderr but for log timestamps and the JVM's own frames in a stack trace; and it hands everything it cannot stand in
for to a process of its own."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest

from vcproxy_tools.kafka.tools import run_tool as run_tool_process

from . import tool_jvm

TIMESTAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] ", re.MULTILINE)
# The warm JVM's own frames at the bottom of a trace the tool prints (ToolServer's, and reflection's if any).
OWN_FRAMES = re.compile(
    r"^\tat (java\.base/)?(jdk\.internal\.reflect\.|java\.lang\.reflect\.|java\.lang\.Thread\.run|ToolServer\.).*\n",
    re.MULTILINE,
)
PLACEMENT = re.compile(r"(TopicId|Leader|Replicas|Isr): [\w,-]+")  # two topics, each placed and named by the cluster


def _comparable(result: subprocess.CompletedProcess[str], names: dict[str, str]) -> tuple[int, str, str]:
    out, err = result.stdout, result.stderr
    for name, placeholder in names.items():
        out, err = out.replace(name, placeholder), err.replace(name, placeholder)
    return result.returncode, PLACEMENT.sub(r"\1: _", out), OWN_FRAMES.sub("", TIMESTAMP.sub("", err))


def test_a_warm_call_answers_as_the_tools_own_process(kafka_cluster) -> None:
    jvm = tool_jvm._jvm
    assert jvm is not None, "the session's warm tool JVM is not registered (tests/integration/conftest.py)"
    b = ["--bootstrap-server", kafka_cluster.bootstrap]
    warm, cold = f"warm-{uuid.uuid4().hex[:8]}", f"cold-{uuid.uuid4().hex[:8]}"
    names = {warm: "TOPIC", cold: "TOPIC"}
    create = [*b, "--create", "--partitions", "2", "--replication-factor", "1", "--topic"]
    calls = [
        ("kafka-topics", [*create, "{}"]),  # created
        ("kafka-topics", [*create, "{}"]),  # exists already: exit 1, the tool's message
        ("kafka-topics", [*b, "--describe", "--topic", "{}"]),
        ("kafka-topics", [*b, "--describe", "--topic", "{}-missing"]),  # exit 1 with a stack trace
        ("kafka-topics", [*b, "--no-such-flag"]),  # exit 1 from the option parser, through Exit.exit
        ("kafka-configs", [*b, "--entity-type", "topics", "--entity-name", "{}", "--describe"]),
    ]
    for _ in range(20):  # a JVM that has served many calls (reflection once changed its frames after 15 calls)
        tool_jvm.run_tool("kafka-topics", [*b, "--list"], timeout=120, check=True)
    before = jvm.calls
    first = None
    for tool, args in calls:
        by_jvm = tool_jvm.run_tool(tool, [a.format(warm) for a in args], timeout=120)
        by_process = run_tool_process(tool, [a.format(cold) for a in args], timeout=120)
        assert _comparable(by_jvm, names) == _comparable(by_process, names), (tool, args)
        first = first or by_jvm
    assert jvm.calls == before + len(calls)
    assert first is not None and first.returncode == 0 and f"Created topic {warm}" in first.stdout


def test_what_the_warm_jvm_cannot_stand_in_for_runs_as_a_process(kafka_cluster) -> None:
    jvm = tool_jvm._jvm
    assert jvm is not None
    before = jvm.calls
    b = ["--bootstrap-server", kafka_cluster.bootstrap]
    topic = f"warm-stdin-{uuid.uuid4().hex[:8]}"
    tool_jvm.run_tool("kafka-topics", [*b, "--create", "--topic", topic], timeout=120, check=True)
    # stdin, another environment, and a tool outside the admin set each get a process of their own
    tool_jvm.run_tool("kafka-console-producer", [*b, "--topic", topic], input="a\nb\n", timeout=120, check=True)
    listed = tool_jvm.run_tool("kafka-topics", [*b, "--list"], timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert topic in listed.stdout.split()
    assert jvm.calls == before + 1


def test_a_call_that_does_not_end_is_stopped_at_its_timeout(kafka_cluster) -> None:
    jvm = tool_jvm._jvm
    assert jvm is not None
    # nothing listens on port 1: the tool retries until its own 30 s timeout, past this call's 2 s
    with pytest.raises(subprocess.TimeoutExpired):
        tool_jvm.run_tool("kafka-topics", ["--bootstrap-server", "127.0.0.1:1", "--list"], timeout=2)
    assert jvm.proc is None  # the JVM went with it; the next call starts another
    listed = tool_jvm.run_tool("kafka-topics", ["--bootstrap-server", kafka_cluster.bootstrap, "--list"], timeout=120)
    assert listed.returncode == 0


LEAKY = """
public final class Leaky {
    public static void main(String[] args) {
        Thread left = new Thread(() -> {
            try { Thread.sleep(1500); } catch (InterruptedException e) { return; }
            System.err.println("a thread of an earlier call");
        });
        left.start();  // not joined: a process would run it to its end, or lose it at an exit
        System.out.println("started");
    }
}
"""


def test_a_call_that_leaves_a_thread_running_takes_the_jvm_with_it(kafka_cluster) -> None:
    """A tool that leaves a thread running (an admin client not closed on an error path): the reply says so and the
    JVM goes, so the thread never writes into a later call's output, nor lingers."""
    jvm = tool_jvm._jvm
    assert jvm is not None
    b = ["--bootstrap-server", kafka_cluster.bootstrap]
    tool_jvm.run_tool("kafka-topics", [*b, "--list"], timeout=120, check=True)  # the server and its classes exist
    source = jvm.workdir / "Leaky.java"
    source.write_text(LEAKY)
    subprocess.run(["javac", "-d", str(jvm.workdir / "classes"), str(source)], check=True, timeout=300)
    leaked = jvm.run_main("Leaky", [], timeout=120)
    assert (leaked.returncode, leaked.stdout) == (0, "started\n")
    assert jvm.proc is None, "the call left a thread running and the JVM was kept"
    listed = tool_jvm.run_tool("kafka-topics", [*b, "--list"], timeout=120)
    assert listed.returncode == 0 and listed.stderr == ""
