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
    trio.run(serve, config, args.config, args.log_level)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vcproxy", description="A virtual-cluster proxy for Apache Kafka.")
    parser.add_argument("--version", action="version", version=f"vcproxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

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
    from .management import cli as management_cli

    management_cli.register(sub)
    from .acl import cli as acl_cli

    acl_cli.register(sub)
    from .quotas import cli as quotas_cli

    quotas_cli.register(sub)
    from . import probe

    probe.register(sub)
    from .analytics import cli as analytics_cli

    analytics_cli.register(sub)
    try:
        from . import bench
    except ImportError:
        bench = None
    if bench is not None and hasattr(bench, "register"):
        bench.register(sub)
    _describe_all(parser)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, str | None, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of the direct subcommands of ``parser``."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            out += [(name, helps.get(name), sub) for name, sub in action.choices.items()]
    return out


def _describe_all(parser: argparse.ArgumentParser) -> None:
    """Every subcommand's --help opens with a description: its own, else its one-line help."""
    for _, help_text, sub in _subparsers(parser):
        if not sub.description and help_text:
            sub.description = help_text[0].upper() + help_text[1:] + "."
        _describe_all(sub)


def _without_test_tools() -> None:
    """kio imports hypothesis when it is installed (a test dependency, not a runtime one) only to
    register strategies for its types: ~0.7 s of CPU before a tool's first byte, about as much as the
    rest of its start. No `vcproxy` command uses it, so a process that has not imported it never will
    (a None entry makes the import fail, and kio goes without)."""
    if "hypothesis" not in sys.modules and "pytest" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    _without_test_tools()
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
