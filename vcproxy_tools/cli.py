"""The `vcproxy` command: `serve` (the proxy, proxy/serve.py) and the tools beside it."""

from __future__ import annotations

import argparse
import sys

from proxy import __version__, serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vcproxy", description="A virtual-cluster proxy for Apache Kafka.")
    parser.add_argument("--version", action="version", version=f"vcproxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve.register(sub)  # the proxy itself (proxy/serve.py)

    try:
        from vcproxy_tools.kafka import cli as kafka_cli
    except ImportError:  # the launcher is optional for a proxy-only install
        kafka_cli = None
    if kafka_cli is not None and hasattr(kafka_cli, "register"):
        kafka_cli.register(sub)
    from vcproxy_tools import demo

    demo.register(sub)
    from vcproxy_tools import users as auth_cli

    auth_cli.register(sub)
    from vcproxy_tools import state as state_cli

    state_cli.register(sub)
    from vcproxy_tools import virtual_clusters as management_cli

    management_cli.register(sub)
    from vcproxy_tools import acls as acl_cli

    acl_cli.register(sub)
    from vcproxy_tools import quotas as quotas_cli

    quotas_cli.register(sub)
    from vcproxy_tools import probe

    probe.register(sub)
    from vcproxy_tools.analytics import cli as analytics_cli

    analytics_cli.register(sub)
    try:
        from vcproxy_tools import bench
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


def main(argv: list[str] | None = None) -> int:
    serve.without_test_tools()
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
