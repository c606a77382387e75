"""`vcproxy --help`: every subcommand says what it does, and every option what it means."""

from __future__ import annotations

import argparse

import pytest

from vcproxy_tools.cli import _subparsers, build_parser


def _all_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out, todo = [], [("vcproxy", build_parser())]
    while todo:
        path, parser = todo.pop()
        out.append((path, parser))
        todo += [(f"{path} {name}", sub) for name, _, sub in _subparsers(parser)]
    return out


PARSERS = _all_parsers()


def test_the_commands_are_all_there():
    paths = {path for path, _ in PARSERS}
    for expected in (
        "vcproxy serve",
        "vcproxy demo",
        "vcproxy state dump",
        "vcproxy kafka stop",
        "vcproxy kafka tool",
        "vcproxy kafka dist",
        "vcproxy credentials add",
        "vcproxy traces aggregate",
        "vcproxy bench",
    ):
        assert expected in paths


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=[p for p, _ in PARSERS])
def test_every_subcommand_has_a_description(path, parser):
    assert parser.description, f"`{path} --help` has no description"
    assert parser.format_help().count("\n\n") >= 2  # usage, description, arguments


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=[p for p, _ in PARSERS])
def test_every_option_has_help(path, parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.dest in ("help", "version"):
            continue
        assert action.help, f"{path}: {'/'.join(action.option_strings) or action.dest} has no help text"


def test_the_ones_the_issue_named():
    help_of = dict(PARSERS)
    assert "SIGTERM" in help_of["vcproxy serve"].description
    assert "--fresh" in help_of["vcproxy demo"].description
    assert "YAML" in help_of["vcproxy state dump"].description
    assert "DIR/cluster.json" in help_of["vcproxy kafka stop"].description
    demo = {a.dest: a.help for a in help_of["vcproxy demo"]._actions}
    assert "configuration" in demo["config"] and "BASE+10*(n-1)" in demo["kafka_base_port"]
