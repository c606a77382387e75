"""``vcproxy kafka {start,stop,tool}``: argparse wiring for the local Kafka launcher.

``register(subparsers)`` adds the ``kafka`` subcommand to the main ``vcproxy`` parser; every leaf sets
``args.func(args) -> int`` (the exit code). ``python -m proxy.kafka.cli`` runs it stand-alone.
"""

from __future__ import annotations

import argparse
import functools
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from proxy.kafka.cluster import start_cluster, stop_cluster
from proxy.kafka.dist import DEFAULT_KAFKA_VERSION
from proxy.kafka.errors import KafkaLauncherError
from proxy.kafka.tools import TOOLS, run_tool

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
    log = logging.getLogger("proxy.kafka")
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


def _cmd_start(args: argparse.Namespace) -> int:
    _progress_to_stderr()
    info = start_cluster(
        args.dir,
        brokers=args.brokers,
        racks=args.racks,
        version=args.version,
        base_port=args.base_port,
        heap=args.heap,
        sasl=args.sasl,
        timeout=args.timeout,
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


def _cmd_tool(args: argparse.Namespace) -> int:
    try:
        proc = run_tool(args.name, args.args, version=args.version, timeout=None, stdin=None, stdout=None, stderr=None)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N, as a shell reports it


def register(subparsers: Any) -> None:
    """Add ``kafka`` (with ``start``, ``stop``, ``tool``) to an argparse subparsers object."""
    kafka = subparsers.add_parser(
        "kafka",
        help="run a local Apache Kafka (KRaft) cluster and Kafka's CLI tools from Maven Central jars",
        description="Run a local Apache Kafka (KRaft) cluster and Kafka's CLI tools (see docs/kafka-launcher.md).",
    )
    sub = kafka.add_subparsers(dest="kafka_command", required=True, metavar="{start,stop,tool}")

    start = sub.add_parser(
        "start",
        help="format and start a cluster in the background",
        description="Format and start a fresh cluster in DIR. Progress goes to stderr; the last stdout line is "
        "the bootstrap servers. Brokers keep running after this command exits.",
    )
    start.add_argument("--dir", required=True, type=Path, help="state, configs, data and logs of the cluster")
    start.add_argument("--brokers", type=int, default=1, help="number of brokers (node 1 is also the controller)")
    start.add_argument("--racks", type=_racks, default=None, help="comma-separated racks, assigned round-robin")
    start.add_argument("--version", default=DEFAULT_KAFKA_VERSION, help="Kafka version (default %(default)s)")
    start.add_argument("--base-port", type=int, default=19092, help="node n listens on BASE+10*(n-1)")
    start.add_argument("--heap", default="512m", help="JVM heap per broker (default %(default)s)")
    start.add_argument("--sasl", action="store_true", help="add a SASL_PLAINTEXT listener (port+2) with test users")
    start.add_argument("--timeout", type=float, default=120, help="seconds to wait for the cluster to serve")
    start.set_defaults(func=_guarded(_cmd_start))

    stop = sub.add_parser("stop", help="stop the cluster recorded in DIR/cluster.json")
    stop.add_argument("--dir", required=True, type=Path)
    stop.add_argument("--timeout", type=float, default=30, help="seconds to wait before SIGKILL")
    stop.set_defaults(func=_guarded(_cmd_stop))

    tool = sub.add_parser(
        "tool",
        help="run a Kafka CLI tool, e.g. `kafka tool kafka-topics --bootstrap-server B --list`",
        description="Run a Kafka CLI tool with the given arguments passed through verbatim. Tools: "
        + ", ".join(sorted(TOOLS)),
    )
    tool.add_argument("--version", default=DEFAULT_KAFKA_VERSION, help="Kafka version (default %(default)s)")
    tool.add_argument("name", help="tool name as in Kafka's bin/ without .sh, e.g. kafka-topics")
    tool.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the tool")
    tool.set_defaults(func=_guarded(_cmd_tool))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vcproxy")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
