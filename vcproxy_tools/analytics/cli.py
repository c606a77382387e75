"""`vcproxy traces aggregate`: the per-tenant analytics job over exported spans (see docs/observability.md)."""

from __future__ import annotations

import argparse
import sys

from vcproxy_tools.analytics import AnalyticsError

PROG = "vcproxy traces aggregate"
DEFAULT_APP_NAME = "vcproxy-traces-aggregate"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="directory of OTLP JSON Lines span files (*.jsonl, *.jsonl.N)")
    parser.add_argument("--output", required=True, help="directory for the Parquet tables, CSV files and report.html")
    parser.add_argument(
        "--master", help="Spark master URL (default: local[*], or the one spark-submit was given)", default=None
    )
    parser.add_argument("--app-name", default=DEFAULT_APP_NAME, help="Spark application name")
    parser.add_argument("--top", type=int, default=10, help="clients per virtual cluster in top_clients (default 10)")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration, repeatable (e.g. spark.driver.memory=4g)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    traces = sub.add_parser("traces", help="analyse the spans the proxy exported")
    traces_sub = traces.add_subparsers(dest="traces_command", required=True)
    aggregate = traces_sub.add_parser(
        "aggregate",
        help="per-tenant tables (Parquet, CSV) and an HTML report from exported spans, with PySpark",
        description="Reads OTLP JSON Lines spans with PySpark and writes per-tenant tables and report.html.",
    )
    add_arguments(aggregate)
    aggregate.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    conf: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            return _fail(f"--conf expects KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    if args.top < 1:
        return _fail("--top must be at least 1")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return _fail("pyspark is not installed; install the analytics extra: pip install 'vcproxy[analytics]'")
    from vcproxy_tools.analytics import aggregate

    say = aggregate.stderr_progress()
    opts = aggregate.Options(
        input=args.input,
        output=args.output,
        master=args.master,
        app_name=args.app_name,
        top=args.top,
        conf=conf,
        progress=say,
    )
    try:
        result = aggregate.run(opts)
    except AnalyticsError as exc:
        return _fail(str(exc))
    say(
        f"done: {result.request_spans} request span(s) from {result.files} file(s), "
        f"{result.bad_lines} bad line(s); tables and report in {args.output}"
    )
    return 0


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point for `spark-submit vcproxy_tools/analytics/job.py --input DIR --output DIR`."""
    parser = argparse.ArgumentParser(prog="job.py", description="vcproxy per-tenant analytics over spans")
    add_arguments(parser)
    return run(parser.parse_args(argv))
