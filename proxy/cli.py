"""The `vcproxy` command."""

from __future__ import annotations

import argparse
import sys

from . import __version__


def _serve(args: argparse.Namespace) -> int:
    import trio

    from .config import load_for_command
    from .net.server import serve

    config = load_for_command(args.config, args.log_level)
    if config is None:
        return 2
    trio.run(serve, config)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vcproxy", description="A virtual-cluster proxy for Apache Kafka.")
    parser.add_argument("--version", action="version", version=f"vcproxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", required=True, help="YAML configuration file")
    serve.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="override logging.level")
    serve.set_defaults(func=_serve)

    try:
        from .kafka import cli as kafka_cli
    except ImportError:  # the launcher is optional for a proxy-only install
        kafka_cli = None
    if kafka_cli is not None and hasattr(kafka_cli, "register"):
        kafka_cli.register(sub)
    from . import demo

    demo.register(sub)
    from .auth import cli as auth_cli

    auth_cli.register(sub)
    from .state import cli as state_cli

    state_cli.register(sub)
    from .analytics import cli as analytics_cli

    analytics_cli.register(sub)
    try:
        from . import bench
    except ImportError:
        bench = None
    if bench is not None and hasattr(bench, "register"):
        bench.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
