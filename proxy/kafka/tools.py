"""Run Kafka's CLI tools (what ``bin/kafka-*.sh`` would run) straight from the resolved jars."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxy.kafka.dist import DEFAULT_KAFKA_VERSION, TOOLS_LOG4J, ensure_dist, java_executable
from proxy.kafka.errors import KafkaLauncherError

# Script name (without ".sh") -> main class, as in Kafka 4.1/4.2's bin/*.sh.
TOOLS: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-streams-application-reset": "org.apache.kafka.tools.StreamsResetter",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-verifiable-share-consumer": "org.apache.kafka.tools.VerifiableShareConsumer",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-end-to-end-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-dump-log": "kafka.tools.DumpLogSegments",
    "kafka-storage": "kafka.tools.StorageTool",
}

DEFAULT_TOOL_TIMEOUT = 120.0


def main_class(name: str) -> str:
    """Main class for a tool name; a trailing ``.sh`` is accepted."""
    key = name.removesuffix(".sh")
    try:
        return TOOLS[key]
    except KeyError:
        known = ", ".join(sorted(TOOLS))
        raise KafkaLauncherError(f"unknown Kafka tool {name!r}; known tools: {known}") from None


def java_tool_argv(libs: Path, main: str, args: Sequence[str], heap: str = "256m") -> list[str]:
    """``java`` argv for a short-lived Kafka JVM; logging goes to stderr so stdout carries only data."""
    return [
        java_executable(),
        f"-Xmx{heap}",
        # Short-lived JVMs: C1 only and the serial GC start faster and the tools never run hot.
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
        "-cp",
        f"{libs}/*",
        main,
        *args,
    ]


def tool_argv(name: str, args: Sequence[str], version: str = DEFAULT_KAFKA_VERSION, heap: str = "256m") -> list[str]:
    """The full argv for Kafka tool ``name`` (e.g. ``kafka-topics``), resolving jars if needed."""
    main = main_class(name)  # before ensure_dist: a typo should not cost a Maven run
    return java_tool_argv(ensure_dist(version), main, args, heap)


def run_tool(
    name: str,
    args: Sequence[str],
    *,
    version: str = DEFAULT_KAFKA_VERSION,
    input: str | None = None,
    timeout: float | None = DEFAULT_TOOL_TIMEOUT,
    check: bool = False,
    **kw: Any,
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool to completion; stdout/stderr are captured as text unless given in ``kw``.

    stdin is /dev/null unless ``input`` (or ``stdin``) is given, so tools reading stdin never hang.
    """
    argv = tool_argv(name, args, version=version, heap=kw.pop("heap", "256m"))
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    if input is None:
        kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(argv, input=input, timeout=timeout, check=check, text=True, **kw)
