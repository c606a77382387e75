"""Run Kafka's CLI tools (what ``bin/*.sh`` would run) straight from the resolved jars.

Every script of Kafka 4.2's ``bin/`` has an entry in ``SPECS``: its main class (as the script names it),
the Maven artifacts it needs beyond the dist (resolved on first use, see ``dist.ensure_extra_libs``) and,
for long-running services, the JVM settings of the script. ``kafka-server-stop`` is the one script not
offered: it signals every ``kafka.Kafka`` process of the machine; ``vcproxy kafka stop --dir DIR`` stops
exactly the brokers of one cluster.

``run_tool`` (and so ``vcproxy kafka tool``) gives each short-lived tool an AppCDS archive of the classes
it loads (see ``vcproxy_tools/kafka/cds.py`` and docs/kafka-launcher.md): its second call writes it, later calls
map it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vcproxy_tools.kafka import cds
from vcproxy_tools.kafka.dist import (
    BROKER_LOG4J,
    DEFAULT_KAFKA_VERSION,
    TOOLS_LOG4J,
    cache_root,
    ensure_dist,
    ensure_extra_libs,
    java_executable,
)
from vcproxy_tools.kafka.errors import KafkaLauncherError

# Kafka's tarball puts these in libs/; the Maven dist leaves them out (connect-runtime brings Jetty and
# Jersey), so the tools that need them resolve them on first use.
CONNECT_ARTIFACTS = (
    "connect-runtime",
    "connect-json",
    "connect-transforms",
    "connect-file",
    "connect-mirror",
    "connect-basic-auth-extension",
)
METADATA_SHELL_ARTIFACTS = ("kafka-shell",)
TROGDOR_ARTIFACTS = ("trogdor",)

# What kafka-run-class.sh adds for every JVM, besides the heap (service JVMs keep the full JIT).
SERVICE_JVM_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
# Short-lived JVMs: C1 only and the serial GC start faster and the tools never run hot.
TOOL_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


@dataclass(frozen=True)
class ToolSpec:
    """How ``bin/<name>.sh`` runs: its main class (or one per first argument, like trogdor.sh), the
    artifacts beyond the dist, and for services (a broker, a Connect worker, a Trogdor agent) the heap of
    the script and logging at INFO on stdout, as the script's own log4j2 config does."""

    main: str | None
    artifacts: tuple[str, ...] = ()
    actions: Mapping[str, str] = field(default_factory=dict)  # first argument -> main class
    service: bool = False
    heap: str | None = None  # None: the caller's (256m, as kafka-run-class.sh)
    min_heap: str | None = None


def _connect(main: str) -> ToolSpec:
    return ToolSpec(main, CONNECT_ARTIFACTS, service=True, heap="2g", min_heap="256m")


# Script name (without ".sh") -> how it runs, for every script in Kafka 4.2's bin/ (checked by
# tests/unit/test_kafka_tools.py against the list of scripts).
SPECS: dict[str, ToolSpec] = {
    "connect-distributed": _connect("org.apache.kafka.connect.cli.ConnectDistributed"),
    "connect-mirror-maker": _connect("org.apache.kafka.connect.mirror.MirrorMaker"),
    "connect-plugin-path": ToolSpec("org.apache.kafka.tools.ConnectPluginPath", CONNECT_ARTIFACTS, heap="2g"),
    "connect-standalone": _connect("org.apache.kafka.connect.cli.ConnectStandalone"),
    "kafka-acls": ToolSpec("org.apache.kafka.tools.AclCommand"),
    "kafka-broker-api-versions": ToolSpec("org.apache.kafka.tools.BrokerApiVersionsCommand"),
    "kafka-client-metrics": ToolSpec("org.apache.kafka.tools.ClientMetricsCommand"),
    "kafka-cluster": ToolSpec("org.apache.kafka.tools.ClusterTool"),
    "kafka-configs": ToolSpec("kafka.admin.ConfigCommand"),
    "kafka-console-consumer": ToolSpec("org.apache.kafka.tools.consumer.ConsoleConsumer"),
    "kafka-console-producer": ToolSpec("org.apache.kafka.tools.ConsoleProducer"),
    "kafka-console-share-consumer": ToolSpec("org.apache.kafka.tools.consumer.ConsoleShareConsumer"),
    "kafka-consumer-groups": ToolSpec("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"),
    "kafka-consumer-perf-test": ToolSpec("org.apache.kafka.tools.ConsumerPerformance"),
    "kafka-delegation-tokens": ToolSpec("org.apache.kafka.tools.DelegationTokenCommand"),
    "kafka-delete-records": ToolSpec("org.apache.kafka.tools.DeleteRecordsCommand"),
    "kafka-dump-log": ToolSpec("kafka.tools.DumpLogSegments"),
    "kafka-e2e-latency": ToolSpec("org.apache.kafka.tools.EndToEndLatency"),
    "kafka-features": ToolSpec("org.apache.kafka.tools.FeatureCommand"),
    "kafka-get-offsets": ToolSpec("org.apache.kafka.tools.GetOffsetShell"),
    "kafka-groups": ToolSpec("org.apache.kafka.tools.GroupsCommand"),
    "kafka-jmx": ToolSpec("org.apache.kafka.tools.JmxTool"),
    "kafka-leader-election": ToolSpec("org.apache.kafka.tools.LeaderElectionCommand"),
    "kafka-log-dirs": ToolSpec("org.apache.kafka.tools.LogDirsCommand"),
    "kafka-metadata-quorum": ToolSpec("org.apache.kafka.tools.MetadataQuorumCommand"),
    "kafka-metadata-shell": ToolSpec("org.apache.kafka.shell.MetadataShell", METADATA_SHELL_ARTIFACTS),
    "kafka-producer-perf-test": ToolSpec("org.apache.kafka.tools.ProducerPerformance"),
    "kafka-reassign-partitions": ToolSpec("org.apache.kafka.tools.reassign.ReassignPartitionsCommand"),
    "kafka-replica-verification": ToolSpec("org.apache.kafka.tools.ReplicaVerificationTool"),
    "kafka-run-class": ToolSpec(None),  # the first argument is the class, as with the script
    "kafka-server-start": ToolSpec("kafka.Kafka", service=True, heap="1g", min_heap="1g"),
    "kafka-share-consumer-perf-test": ToolSpec("org.apache.kafka.tools.ShareConsumerPerformance"),
    "kafka-share-groups": ToolSpec("org.apache.kafka.tools.consumer.group.ShareGroupCommand"),
    "kafka-storage": ToolSpec("kafka.tools.StorageTool"),
    "kafka-streams-application-reset": ToolSpec("org.apache.kafka.tools.StreamsResetter"),
    "kafka-streams-groups": ToolSpec("org.apache.kafka.tools.streams.StreamsGroupCommand"),
    "kafka-topics": ToolSpec("org.apache.kafka.tools.TopicCommand"),
    "kafka-transactions": ToolSpec("org.apache.kafka.tools.TransactionsCommand"),
    "kafka-verifiable-consumer": ToolSpec("org.apache.kafka.tools.VerifiableConsumer"),
    "kafka-verifiable-producer": ToolSpec("org.apache.kafka.tools.VerifiableProducer"),
    "kafka-verifiable-share-consumer": ToolSpec("org.apache.kafka.tools.VerifiableShareConsumer"),
    "trogdor": ToolSpec(
        None,
        TROGDOR_ARTIFACTS,
        actions={
            "agent": "org.apache.kafka.trogdor.agent.Agent",
            "coordinator": "org.apache.kafka.trogdor.coordinator.Coordinator",
            "client": "org.apache.kafka.trogdor.coordinator.CoordinatorClient",
            "agent-client": "org.apache.kafka.trogdor.agent.AgentClient",
        },
        service=True,
    ),
}
ALIASES = {"kafka-end-to-end-latency": "kafka-e2e-latency"}
NOT_OFFERED = {
    "kafka-server-stop": "it signals every kafka.Kafka process of the machine; "
    "`vcproxy kafka stop --dir DIR` stops exactly the brokers started in DIR",
}

# Name -> main class of the tools with one fixed main class (the table most callers need).
TOOLS: dict[str, str] = {
    name: spec.main for name, spec in {**SPECS, **{a: SPECS[t] for a, t in ALIASES.items()}}.items() if spec.main
}

DEFAULT_TOOL_TIMEOUT = 120.0


def tool_names() -> list[str]:
    """Every name `vcproxy kafka tool` accepts (without aliases), sorted."""
    return sorted(SPECS)


def spec(name: str) -> ToolSpec:
    """The spec of tool ``name``; a trailing ``.sh`` is accepted."""
    key = name.removesuffix(".sh")
    key = ALIASES.get(key, key)
    if key in NOT_OFFERED:
        raise KafkaLauncherError(f"{key} is not offered: {NOT_OFFERED[key]}")
    try:
        return SPECS[key]
    except KeyError:
        raise KafkaLauncherError(f"unknown Kafka tool {name!r}; known tools: {', '.join(tool_names())}") from None


def main_class(name: str) -> str:
    """Main class for a tool name with a fixed main class; a trailing ``.sh`` is accepted."""
    main = spec(name).main
    if main is None:
        raise KafkaLauncherError(f"{name} picks its main class from its first argument")
    return main


def _resolve_main(name: str, tool: ToolSpec, args: Sequence[str]) -> tuple[str, list[str]]:
    """(main class, remaining args): trogdor's action and kafka-run-class's class come first in ``args``."""
    if tool.main is not None:
        return tool.main, list(args)
    if tool.actions:
        actions = ", ".join(tool.actions)
        if not args or args[0] not in tool.actions:
            got = f"{args[0]!r}" if args else "nothing"
            raise KafkaLauncherError(f"{name} needs an action first ({actions}), got {got}")
        return tool.actions[args[0]], list(args[1:])
    if not args or args[0].startswith("-"):
        raise KafkaLauncherError(f"{name} needs a main class first, e.g. `{name} kafka.tools.DumpLogSegments --help`")
    return args[0], list(args[1:])


def java_tool_argv(
    libs: Path,
    main: str,
    args: Sequence[str],
    heap: str = "256m",
    *,
    extra_libs: Sequence[Path] = (),
    service: bool = False,
    min_heap: str | None = None,
    jvm_flags: Sequence[str] = (),
) -> list[str]:
    """``java`` argv for a Kafka JVM. A tool logs WARN and above to stderr so stdout carries only data;
    a service (broker, Connect worker) logs at INFO on stdout and keeps the full JIT. ``jvm_flags`` come
    after the launcher's own (a tool's class-data archive)."""
    return [
        *_jvm(heap, service=service, min_heap=min_heap),
        *jvm_flags,
        f"-Dlog4j2.configurationFile={BROKER_LOG4J if service else TOOLS_LOG4J}",
        "-cp",
        _classpath(libs, extra_libs),
        main,
        *args,
    ]


def _jvm(heap: str, *, service: bool = False, min_heap: str | None = None) -> list[str]:
    return [
        java_executable(),
        *([f"-Xms{min_heap}"] if min_heap else []),
        f"-Xmx{heap}",
        *(SERVICE_JVM_FLAGS if service else TOOL_JVM_FLAGS),
    ]


def _classpath(libs: Path, extra_libs: Sequence[Path] = ()) -> str:
    return ":".join(f"{p}/*" for p in (libs, *extra_libs))


@dataclass(frozen=True)
class ToolCommand:
    """A tool's argv and, for a short-lived tool with archives on, how it uses its class-data archive
    (``cds.finish`` is called with the run's exit code)."""

    argv: list[str]
    cds: cds.Plan | None = None
    jvm: tuple[str, ...] = ()  # java and the JVM flags the archive was written with
    classpath: str = ""

    def finish(self, returncode: int | None) -> None:
        cds.finish(self.cds, returncode, self.jvm, self.classpath)


def tool_command(
    name: str,
    args: Sequence[str],
    version: str = DEFAULT_KAFKA_VERSION,
    heap: str = "256m",
    *,
    use_cds: bool | None = None,
) -> ToolCommand:
    """The command for Kafka tool ``name``, resolving jars if needed. ``use_cds`` (default: unless
    ``VCPROXY_KAFKA_TOOL_CDS=0``) gives a short-lived tool its class-data archive; services never get one."""
    tool = spec(name)  # before ensure_dist: a typo should not cost a Maven run
    main, rest = _resolve_main(name.removesuffix(".sh"), tool, args)
    if rest and rest[0] == "-daemon" and tool.service:
        raise KafkaLauncherError(
            f"{name}: -daemon is not supported here; run it in the foreground (or `vcproxy kafka start` for brokers)"
        )
    libs = ensure_dist(version)
    extra = [ensure_extra_libs(tool.artifacts, version)] if tool.artifacts else []
    heap = tool.heap or heap
    plan = None
    if not tool.service and (cds.enabled() if use_cds is None else use_cds):
        archive = _archive(version, main, [libs, *extra])
        plan = cds.plan(archive) if archive else None
    argv = java_tool_argv(
        libs,
        main,
        rest,
        heap,
        extra_libs=extra,
        service=tool.service,
        min_heap=tool.min_heap,
        jvm_flags=plan.flags if plan else (),
    )
    if plan is None:
        return ToolCommand(argv)
    jvm = _jvm(heap, min_heap=tool.min_heap)
    return ToolCommand(argv, plan, tuple(jvm), _classpath(libs, extra))


def cds_archive(name: str, args: Sequence[str] = (), version: str = DEFAULT_KAFKA_VERSION) -> Path | None:
    """Where the class-data archive of tool ``name`` (with these jars and this JDK) is or will be; None
    for a service, or while the jars cannot be read."""
    tool = spec(name)
    if tool.service:
        return None
    main, _ = _resolve_main(name.removesuffix(".sh"), tool, args)
    extra = [ensure_extra_libs(tool.artifacts, version)] if tool.artifacts else []
    return _archive(version, main, [ensure_dist(version), *extra])


def _archive(version: str, main: str, lib_dirs: Sequence[Path]) -> Path | None:
    try:
        key = cds.fingerprint(java_executable(), lib_dirs, main)
    except OSError:  # the jars are being swapped for a newer resolution: this run goes without
        return None
    return cds.archive_path(cds.archive_dir(cache_root() / version / "cds"), main, key)


def tool_argv(name: str, args: Sequence[str], version: str = DEFAULT_KAFKA_VERSION, heap: str = "256m") -> list[str]:
    """The full argv for Kafka tool ``name`` (e.g. ``kafka-topics``), resolving jars if needed; without a
    class-data archive (``run_tool`` gives one), for callers that run the argv their own way."""
    return tool_command(name, args, version, heap, use_cds=False).argv


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
    """Run a Kafka tool to completion; stdout/stderr are captured as text unless given in ``kw``.

    stdin is /dev/null unless ``input`` (or ``stdin``) is given, so tools reading stdin never hang. A
    short-lived tool maps its class-data archive, or writes it on its second clean run (``use_cds``).
    """
    command = tool_command(name, args, version=version, heap=kw.pop("heap", "256m"), use_cds=use_cds)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    if input is None:
        kw.setdefault("stdin", subprocess.DEVNULL)
    try:
        result = subprocess.run(command.argv, input=input, timeout=timeout, check=False, text=True, **kw)
    except BaseException:
        command.finish(None)
        raise
    command.finish(result.returncode)
    if check:
        result.check_returncode()
    return result
