"""`vcproxy serve`: the proxy's own entry point (`python -m proxy serve --config FILE`). The `vcproxy`
command (vcproxy_tools/cli.py) registers the same subcommand beside the tools."""

from __future__ import annotations

import argparse
import sys

from . import __version__


def _serve(args: argparse.Namespace) -> int:
    import trio

    from .config import load_for_command
    from .net.server import serve

    if args.worker:  # one of the processes of `--workers N`, started by the parent (proxy/net/workers.py)
        from .net.worker_link import WorkerLink, parse_worker_arg

        index, count, handoff_fd, control_fd = parse_worker_arg(args.worker)
        config = load_for_command(args.config, args.log_level, f"worker-{index}")
        if config is None:
            return 2
        trio.run(serve, config, args.config, args.log_level, WorkerLink(index, count, handoff_fd, control_fd))
        return 0
    config = load_for_command(args.config, args.log_level)
    if config is None:
        return 2
    _say_walker()
    if args.workers > 1:
        from .net.workers import serve_workers

        return trio.run(serve_workers, config, args.config, args.log_level, args.workers)
    trio.run(serve, config, args.config, args.log_level)
    return 0


def _say_walker() -> None:
    """Once per instance (workers load the same module and say nothing): which path walks bodies."""
    import logging

    from .protocol import native

    logging.getLogger("proxy.serve").log(logging.INFO if native.COMPILED else logging.WARNING, native.describe())


def _workers(value: str) -> int:
    from .core.handoff import worker_count

    try:
        return worker_count(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the proxy",
        description="Run the proxy with a YAML configuration (every key is in config/example.yaml): its "
        "listeners, the upstream Kafka cluster, authentication, virtual clusters, limits, tracing and metrics. "
        "It runs in the foreground until SIGINT or SIGTERM, then stops accepting, lets in-flight requests "
        "finish (limits.drain_timeout_seconds) and exits. A configuration that cannot be used is refused "
        "at start with the file, the key and the reason (exit code 2). Certificates, the users and the other "
        "reloadable keys are reloaded when their files change and on SIGHUP (docs/security.md#reloading).",
    )
    serve.add_argument("--config", required=True, help="YAML configuration file (see config/example.yaml)")
    serve.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="override logging.level")
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="serve from N worker processes, one instance for clients (listeners, connection limits, quotas, "
        "/metrics and health are the instance's); auto: one per CPU this process may use (default 1)",
    )
    serve.add_argument("--worker", help=argparse.SUPPRESS)  # the parent's, for each worker it starts
    serve.set_defaults(func=_serve)


def without_test_tools() -> None:
    """kio imports hypothesis when it is installed (a test dependency, not a runtime one) only to
    register strategies for its types: ~0.7 s of CPU before a tool's first byte, about as much as the
    rest of its start. No `vcproxy` command uses it, so a process that has not imported it never will
    (a None entry makes the import fail, and kio goes without)."""
    if "hypothesis" not in sys.modules and "pytest" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    """The proxy alone, without the tools: `serve` is its one subcommand."""
    without_test_tools()
    parser = argparse.ArgumentParser(prog="vcproxy", description="A virtual-cluster proxy for Apache Kafka.")
    parser.add_argument("--version", action="version", version=f"vcproxy {__version__}")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)
