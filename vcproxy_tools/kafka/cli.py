"""``vcproxy kafka {start,stop,tool,dist}``: argparse wiring for the local Kafka launcher.

``register(subparsers)`` adds the ``kafka`` subcommand to the main ``vcproxy`` parser; every leaf sets
``args.func(args) -> int`` (the exit code).
"""

from __future__ import annotations

import argparse
import functools
import logging
import signal
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vcproxy_tools.kafka.cluster import has_cluster, restart_cluster, start_cluster, stop_cluster
from vcproxy_tools.kafka.dist import DEFAULT_KAFKA_VERSION, ensure_dist, ensure_streams_libs
from vcproxy_tools.kafka.errors import KafkaLauncherError
from vcproxy_tools.kafka.tools import NOT_OFFERED, run_tool, tool_names

ERROR_EXIT = 2

Handler = Callable[[argparse.Namespace], int]


def _guarded(fn: Handler) -> Handler:
    """Launcher errors become one readable line on stderr and exit code 2, not a traceback."""

    @functools.wraps(fn)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except KafkaLauncherError as exc:
            print(f"vcproxy kafka: error: {exc}", file=sys.stderr)
            return ERROR_EXIT

    return wrapper


def _progress_to_stderr() -> None:
    log = logging.getLogger("vcproxy_tools.kafka")
    log.setLevel(logging.INFO)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("kafka: %(message)s"))
        log.addHandler(handler)


def _racks(text: str) -> list[str]:
    racks = [r.strip() for r in text.split(",")]
    if not all(racks):
        raise argparse.ArgumentTypeError(f"expected comma-separated rack names, got {text!r}")
    return racks


def _property(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip() or key != key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (a broker property), got {text!r}")
    return key, value


class _Given(argparse.Action):
    """Store the value and note that it was given: a restart keeps the recorded base port, version and
    heap unless told otherwise, where a fresh start takes the defaults."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


def _cmd_start(args: argparse.Namespace) -> int:
    _progress_to_stderr()
    if args.keep_data and has_cluster(args.dir):
        if args.property:
            raise KafkaLauncherError("--property applies to a fresh cluster; --keep-data keeps the recorded ones")
        given = getattr(args, "given", set())
        info = restart_cluster(
            args.dir,
            base_port=args.base_port if "base_port" in given else None,
            version=args.version if "version" in given else None,
            heap=args.heap if "heap" in given else None,
            timeout=args.timeout,
        )
    else:
        info = start_cluster(
            args.dir,
            brokers=args.brokers,
            racks=args.racks,
            version=args.version,
            base_port=args.base_port,
            heap=args.heap,
            sasl=args.sasl,
            timeout=args.timeout,
            extra_properties=dict(args.property),
        )
    print(f"kafka: cluster {info.cluster_id} (Kafka {info.version}) running; state in {info.dir}", file=sys.stderr)
    if info.sasl_bootstrap:
        users = ", ".join(f"{u}/{p}" for u, p in info.sasl_users.items())
        print(f"kafka: SASL_PLAINTEXT bootstrap {info.sasl_bootstrap} (users {users})", file=sys.stderr)
    print(f"kafka: stop with `vcproxy kafka stop --dir {info.dir}`", file=sys.stderr)
    print(info.bootstrap, flush=True)  # last stdout line: scripts take it with `| tail -n 1`
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    _progress_to_stderr()
    stop_cluster(args.dir, timeout=args.timeout)
    return 0


def _cmd_dist(args: argparse.Namespace) -> int:
    _progress_to_stderr()
    print(ensure_dist(args.version))
    if args.streams:
        print(ensure_streams_libs(args.version))
    return 0


def _cmd_tool(args: argparse.Namespace) -> int:
    try:
        proc = run_tool(args.name, args.args, version=args.version, timeout=None, stdin=None, stdout=None, stderr=None)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N, as a shell reports it


def _paragraphs(*texts: str) -> str:
    """Wrapped for --help without splitting tool names at their hyphens."""
    return "\n\n".join(textwrap.fill(t, width=88, break_on_hyphens=False, break_long_words=False) for t in texts)


def register(subparsers: Any) -> None:
    """Add ``kafka`` (with ``start``, ``stop``, ``tool``, ``dist``) to an argparse subparsers object."""
    kafka = subparsers.add_parser(
        "kafka",
        help="run a local Apache Kafka (KRaft) cluster and Kafka's CLI tools from Maven Central jars",
        description="Run a local Apache Kafka (KRaft) cluster and Kafka's CLI tools (see docs/kafka-launcher.md).",
    )
    sub = kafka.add_subparsers(dest="kafka_command", required=True, metavar="{start,stop,tool,dist}")

    start = sub.add_parser(
        "start",
        help="format and start a cluster in the background",
        description="Format and start a fresh cluster in DIR (or, with --keep-data, start the stopped cluster "
        "in DIR again on its data). Progress goes to stderr; the last stdout line is the bootstrap servers. "
        "Brokers keep running after this command exits; `vcproxy kafka stop --dir DIR` stops them.",
    )
    start.add_argument("--dir", required=True, type=Path, help="state, configs, data and logs of the cluster")
    start.add_argument("--brokers", type=int, default=1, help="number of brokers (node 1 is also the controller)")
    start.add_argument("--racks", type=_racks, default=None, help="comma-separated racks, assigned round-robin")
    start.add_argument(
        "--version",
        action=_Given,
        default=DEFAULT_KAFKA_VERSION,
        help="Kafka version (default %(default)s; with --keep-data, the recorded one)",
    )
    start.add_argument(
        "--base-port",
        action=_Given,
        type=int,
        default=19092,
        help="node n listens on BASE+10*(n-1) (default %(default)s; with --keep-data, the recorded one)",
    )
    start.add_argument(
        "--heap",
        action=_Given,
        default="512m",
        help="JVM heap per broker (default %(default)s; with --keep-data, the recorded one; docs/kafka-launcher.md)",
    )
    start.add_argument("--sasl", action="store_true", help="add a SASL_PLAINTEXT listener (port+2) with test users")
    start.add_argument("--timeout", type=float, default=120, help="seconds to wait for the cluster to serve")
    start.add_argument(
        "--property",
        type=_property,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker property over the launcher's, on every node (repeatable; e.g. a bench's extra listener)",
    )
    start.add_argument(
        "--keep-data",
        action="store_true",
        help="if DIR holds a stopped cluster, start it again with its data (same cluster id, topics and "
        "records; its brokers, racks and SASL setting) instead of formatting a new one",
    )
    start.set_defaults(func=_guarded(_cmd_start))

    stop = sub.add_parser(
        "stop",
        help="stop the cluster recorded in DIR/cluster.json",
        description="Stop exactly the brokers recorded in DIR/cluster.json: SIGTERM (a controlled shutdown), "
        "broker-only nodes first, then SIGKILL for any still alive after --timeout seconds. A PID is signalled "
        "only while it is a java process of DIR. The data stays in DIR (`kafka start --keep-data` starts it "
        "again); stopping twice, or a DIR without a cluster, does nothing.",
    )
    stop.add_argument("--dir", required=True, type=Path, help="the directory given to `vcproxy kafka start`")
    stop.add_argument("--timeout", type=float, default=30, help="seconds to wait before SIGKILL")
    stop.set_defaults(func=_guarded(_cmd_stop))

    not_offered = "; ".join(f"{name}: {why}" for name, why in NOT_OFFERED.items())
    tool = sub.add_parser(
        "tool",
        help="run a Kafka CLI tool, e.g. `kafka tool kafka-topics --bootstrap-server B --list`",
        description=_paragraphs(
            "Run one of the tools of Kafka's bin/ with the given arguments passed through verbatim, from the "
            "jars in the cache (tools that need more, such as Connect, resolve it on first use).",
            f"Tools: {', '.join(tool_names())}.",
            f"Not offered: {not_offered}.",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tool.add_argument("--version", default=DEFAULT_KAFKA_VERSION, help="Kafka version (default %(default)s)")
    tool.add_argument("name", help="tool name as in Kafka's bin/ without .sh, e.g. kafka-topics")
    tool.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the tool")
    tool.set_defaults(func=_guarded(_cmd_tool))

    dist = sub.add_parser(
        "dist",
        help="resolve Kafka's jars from Maven Central into the cache and print the libs directory",
        description="Resolve the jars of a Kafka release (broker, StorageTool and the CLI tools) from Maven "
        "Central into the cache (~/.cache/vcproxy/kafka, or $VCPROXY_KAFKA_CACHE) once, and print the libs "
        "directory. Later runs are a cache hit. On a terminal it shows what is being downloaded.",
    )
    dist.add_argument("--version", default=DEFAULT_KAFKA_VERSION, help="Kafka version (default %(default)s)")
    dist.add_argument("--streams", action="store_true", help="also Kafka Streams (the tests' Streams application)")
    dist.set_defaults(func=_guarded(_cmd_dist))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vcproxy")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
