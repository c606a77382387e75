"""The PySpark job behind `vcproxy traces aggregate`: per-tenant tables and an HTML report from exported spans.

One pass parses every input line with `otlp.scan_lines` (spans, bad lines and per-partition line counts come out
of the same pass and are cached); every table is then an aggregation over the cached request spans. Each table is
written as Parquet (`<output>/<table>/`) and as one CSV file with a header (`<output>/<table>.csv`); the report is
`<output>/report.html`. All file access goes through Hadoop's FileSystem, so the input and output may be local
paths (local mode) or any URI the cluster can reach (hdfs://, s3a://, ...).

Also runnable as ``spark-submit vcproxy_tools/analytics/aggregate.py --input DIR --output DIR``.
"""

from __future__ import annotations

import csv
import heapq
import io
import os
import re
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # pyspark is imported when the job runs, so `vcproxy --help` works without it
    from pyspark.sql import Column, DataFrame, SparkSession

TABLES = ("vc_summary", "requests_by_api", "requests_by_client", "top_clients", "topic_showback", "per_minute")
BAD_LINES_TABLE = "bad_lines"
PERCENTILE_ACCURACY = 10_000  # percentile_approx is exact for groups of up to this many requests
BAD_LINES_SHOWN = 5
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass
class Options:
    input: str
    output: str
    master: str | None = None  # None: spark-submit's master, or local[*] when run as a plain command
    app_name: str = "vcproxy-traces-aggregate"
    top: int = 10  # top_clients keeps this many clients per virtual cluster
    conf: dict[str, str] = field(default_factory=dict)
    progress: Callable[[str], None] | None = None


class InputFile(NamedTuple):
    path: str  # as Hadoop names it (file:/..., hdfs://...)
    name: str  # relative to the input directory, for messages
    size: int


@dataclass
class JobResult:
    files: int
    lines: int
    blank_lines: int
    bad_lines: int
    spans: int
    request_spans: int
    bad_examples: list[tuple[str, int, str]]  # (file, line number, reason), the first few
    table_rows: dict[str, int]
    report: str


def wanted_input(name: str) -> bool:
    """Span files: JSON Lines, including rotated (`spans.jsonl.1`) and compressed (`.jsonl.gz`) ones."""
    if name.startswith((".", "_")):  # checksums, _SUCCESS markers, editor droppings
        return False
    return ".jsonl" in name or name.endswith((".json", ".json.gz"))


def is_uri(path: str) -> bool:
    return bool(_URI.match(path)) and not re.match(r"^[A-Za-z]:[\\/]", path)  # not a Windows drive letter


def under_spark_submit() -> bool:
    # spark-submit starts the JVM first and hands the Python driver its gateway port.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def find_local_inputs(input_dir: str) -> list[Path]:
    """The span files under a local directory (or the file itself); AnalyticsError when there are none."""
    from vcproxy_tools.analytics import AnalyticsError

    root = Path(input_dir)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise AnalyticsError(f"input directory {input_dir} does not exist")
    files = sorted(p for p in root.rglob("*") if p.is_file() and wanted_input(p.name))
    if not files:
        raise AnalyticsError(
            f"no span files in {input_dir}: expected OTLP JSON Lines files named *.jsonl (or *.jsonl.N, *.json)"
        )
    return files


def run(opts: Options, spark: SparkSession | None = None) -> JobResult:
    """Run the whole job; raises AnalyticsError for input the user must fix. Stops Spark only if it started it."""
    from vcproxy_tools.analytics import AnalyticsError

    say = opts.progress or (lambda _msg: None)
    master = opts.master or (None if under_spark_submit() else "local[*]")
    local = master is not None and master.startswith("local")
    if spark is None and local and not is_uri(opts.input):
        find_local_inputs(opts.input)  # fail fast, before a Spark start that takes seconds
    own_session = spark is None
    shipped: Path | None = None
    if spark is None:
        say(f"starting Spark ({master or 'master from spark-submit'})")
        spark = _start_spark(opts, master, local)
    try:
        sc = spark.sparkContext
        local = sc.master.startswith("local")
        if local:
            # On one machine the default 200 shuffle partitions, and adaptive execution's extra planning and jobs
            # per shuffle, cost more than they save: a small input took twice as long with them.
            if "spark.sql.shuffle.partitions" not in opts.conf:
                spark.conf.set("spark.sql.shuffle.partitions", str(max(4, 2 * sc.defaultParallelism)))
            if "spark.sql.adaptive.enabled" not in opts.conf:
                spark.conf.set("spark.sql.adaptive.enabled", "false")
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        shipped = _ship_package(sc)
        input_uri = _qualify(opts.input, local)
        output_uri = _qualify(opts.output, local)
        fs = _FileSystem(spark)
        files = fs.list_inputs(input_uri)
        if not files:
            raise AnalyticsError(f"no span files in {opts.input}: expected OTLP JSON Lines files named *.jsonl")
        say(f"reading {len(files)} file(s), {_mib(sum(f.size for f in files))} from {opts.input}")
        result = _aggregate(spark, fs, files, output_uri, opts, say)
    finally:
        if own_session:
            spark.stop()
            if shipped is not None:
                shutil.rmtree(shipped, ignore_errors=True)
    return result


def _start_spark(opts: Options, master: str | None, local: bool) -> SparkSession:
    from pyspark.sql import SparkSession

    if local:
        # A local run must not depend on how the host name resolves, and its Python workers must be this
        # interpreter (the default `python3` on PATH may lack the package).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(opts.app_name)
    if master:
        builder = builder.master(master)
    defaults = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": str(sys.stderr.isatty()).lower(),  # a progress bar only on a terminal
    }
    if local:
        defaults["spark.driver.host"] = "127.0.0.1"
        defaults["spark.driver.bindAddress"] = "127.0.0.1"
        # A local run is short and its heavy part is parsing in Python: the JIT's second tier and whole-stage
        # code generation cost more CPU time than they save (a small input ran in half the time without them;
        # percentile_approx's aggregate is not code-generated anyway). --conf overrides either.
        defaults["spark.driver.extraJavaOptions"] = "-XX:TieredStopAtLevel=1"
        defaults["spark.sql.codegen.wholeStage"] = "false"
    for key, value in {**defaults, **opts.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _ship_package(sc: Any) -> Path:
    """Zip the few files executors need to parse lines and add them to the job; returns the temporary directory.

    So neither a vcproxy install on every executor nor --py-files is needed (both are harmless when present).
    """
    pkg = Path(__file__).resolve().parent
    tmp = Path(tempfile.mkdtemp(prefix="vcproxy-analytics-"))
    with zipfile.ZipFile(tmp / "vcproxy_analytics.zip", "w") as z:
        z.write(pkg.parent / "__init__.py", "vcproxy_tools/__init__.py")
        for f in sorted(pkg.glob("*.py")):
            z.write(f, f"vcproxy_tools/analytics/{f.name}")
    sc.addPyFile(str(tmp / "vcproxy_analytics.zip"))
    return tmp


def _qualify(path: str, local: bool) -> str:
    # In local mode a plain path is a local file even if a Hadoop config names another default file system.
    if is_uri(path) or not local:
        return path
    return Path(path).resolve().as_uri()


class _FileSystem:
    """The few Hadoop FileSystem calls the driver makes: listing the input, writing the CSV files and the report."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, path: str) -> tuple[Any, Any]:
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self._conf), p

    def list_inputs(self, root: str) -> list[InputFile]:
        """Span files under root (recursively), named relative to it for messages."""
        from vcproxy_tools.analytics import AnalyticsError

        fs, p = self._fs(root)
        if not fs.exists(p):
            raise AnalyticsError(f"input directory {root} does not exist")
        status = fs.getFileStatus(p)
        if status.isFile():
            return [InputFile(status.getPath().toString(), status.getPath().getName(), status.getLen())]
        prefix = status.getPath().toString().rstrip("/") + "/"
        files = []
        it = fs.listFiles(p, True)
        while it.hasNext():
            st = it.next()
            path = st.getPath().toString()
            if wanted_input(st.getPath().getName()):
                name = path[len(prefix) :] if path.startswith(prefix) else st.getPath().getName()
                files.append(InputFile(path, name, st.getLen()))
        return sorted(files)

    def write_text(self, path: str, text: str) -> None:
        with self.create_text(path) as out:
            out.write(text)

    def create_text(self, path: str) -> _TextSink:
        fs, p = self._fs(path)
        fs.setWriteChecksum(False)  # no .report.html.crc beside the files people open (local file system only)
        return _TextSink(fs.create(p, True))


class _TextSink:
    """UTF-8 text into a Hadoop output stream, in large chunks (each write is a call into the JVM)."""

    CHUNK = 1 << 20

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._buf = io.StringIO()

    def write(self, text: str) -> int:
        self._buf.write(text)
        if self._buf.tell() >= self.CHUNK:
            self._flush()
        return len(text)

    def _flush(self) -> None:
        data = self._buf.getvalue().encode("utf-8")
        if data:
            self._stream.write(bytearray(data))
        self._buf = io.StringIO()

    def __enter__(self) -> _TextSink:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._flush()
        finally:
            self._stream.close()


def _join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name


def _schema() -> Any:
    from pyspark.sql import types as T

    from vcproxy_tools.analytics import otlp

    simple = {
        "string": T.StringType(),
        "long": T.LongType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
    }
    arrays = {"array<string>": T.ArrayType(T.StringType(), False), "array<long>": T.ArrayType(T.LongType(), False)}
    columns = {**otlp.META_COLUMNS, **otlp.COLUMN_TYPES}
    return T.StructType([T.StructField(name, simple.get(t) or arrays[t], True) for name, t in columns.items()])


def _aggregate(
    spark: SparkSession,
    fs: _FileSystem,
    files: list[InputFile],
    output_uri: str,
    opts: Options,
    say: Callable[[str], None],
) -> JobResult:
    from pyspark.sql import functions as F

    from vcproxy_tools.analytics import AnalyticsError, otlp, report

    sc = spark.sparkContext
    # One RDD per file, so each partition knows its file and index: bad lines get real line numbers.
    parts = [
        sc.textFile(f.path, minPartitions=1).mapPartitionsWithIndex(partial(otlp.scan_lines, file=f.name))
        for f in files
    ]
    rdd = parts[0] if len(parts) == 1 else sc.union(parts)
    parsed = spark.createDataFrame(rdd, _schema(), verifySchema=False).cache()

    say("parsing spans")
    # The per-partition rows carry every count; collecting them also fills the cache with the parsed spans.
    part_rows = [
        r.asDict()
        for r in parsed.where(F.col("_rec") == "part")
        .select("_file", "_part", "_line", "_blank", "_spans", "_requests", "_bad")
        .collect()
    ]
    lines, blank, n_spans, n_requests, n_bad = (
        sum(int(r[k]) for r in part_rows) for k in ("_line", "_blank", "_spans", "_requests", "_bad")
    )
    say(f"parsed {lines} line(s): {n_spans} span(s), {n_requests} request span(s), {n_bad} bad line(s)")

    bad_lines = _bad_lines_table(spark, parsed, part_rows)
    if n_spans == 0:
        parsed.unpersist()
        what = f"{lines} line(s) in {len(files)} file(s)"
        if n_bad:
            shown = _bad_summary([r.asDict() for r in bad_lines.limit(BAD_LINES_SHOWN).collect()], n_bad)
            raise AnalyticsError(f"no valid spans in {what}: all {n_bad} non-blank line(s) are bad: {shown}")
        raise AnalyticsError(f"no spans in {what}: the input is empty")
    if n_requests == 0:
        say("warning: no request spans (spans with vcproxy.api.key): the request tables will be empty")

    spans = parsed.where(F.col("_rec") == "span").select(*otlp.COLUMN_TYPES)
    requests = spans.where(F.col("api_key").isNotNull())
    tables = {BAD_LINES_TABLE: bad_lines, **build_tables(requests, opts.top)}

    collected: dict[str, list[dict[str, Any]]] = {}
    table_rows: dict[str, int] = {}
    for name, df in tables.items():
        df = df.cache()  # written as Parquet, then streamed into the CSV file and the report
        df.write.mode("overwrite").parquet(_join(output_uri, name))
        keep = _ReportRows(name)
        with fs.create_text(_join(output_uri, f"{name}.csv")) as out:
            table_rows[name] = write_csv(out, df, keep.add)
        collected[name] = keep.rows
        df.unpersist()
        say(f"wrote {name}: {table_rows[name]} row(s)")
        if name == BAD_LINES_TABLE and n_bad:
            say(f"{n_bad} bad line(s) skipped: {_bad_summary(keep.rows[:BAD_LINES_SHOWN], n_bad)}")
    parsed.unpersist()
    bad_examples = [(r["file"], int(r["line"]), r["reason"]) for r in collected[BAD_LINES_TABLE][:BAD_LINES_SHOWN]]

    summary = {
        "input": opts.input,
        "files": len(files),
        "bytes": sum(f.size for f in files),
        "lines": lines,
        "blank_lines": blank,
        "bad_lines": n_bad,
        "spans": n_spans,
        "request_spans": n_requests,
        "bad_examples": bad_examples,
        "generated_at": time.time(),
        "top": opts.top,
    }
    report_path = _join(output_uri, "report.html")
    fs.write_text(report_path, report.render(summary, collected))
    say(f"report: {report_path}")
    return JobResult(
        files=len(files),
        lines=lines,
        blank_lines=blank,
        bad_lines=n_bad,
        spans=n_spans,
        request_spans=n_requests,
        bad_examples=bad_examples,
        table_rows=table_rows,
        report=report_path,
    )


def _bad_lines_table(spark: SparkSession, parsed: DataFrame, part_rows: list[dict[str, Any]]) -> DataFrame:
    """file, line (1-based), reason, excerpt: line numbers from the line counts of the partitions before."""
    from pyspark.sql import functions as F

    if not any(r["_bad"] for r in part_rows):
        return spark.createDataFrame([], "file string, line long, reason string, excerpt string")
    first_line: dict[str, int] = {}  # "file\0part" -> lines of the file before the partition
    seen: dict[str, int] = {}
    for r in sorted(part_rows, key=lambda r: (r["_file"], r["_part"])):  # a file's partitions are in file order
        first_line[f"{r['_file']}\0{r['_part']}"] = seen.get(r["_file"], 0)
        seen[r["_file"]] = seen.get(r["_file"], 0) + int(r["_line"])
    # A literal map rather than a join: partitions are few, and it needs no extra job.
    offsets = F.create_map(*[F.lit(x) for kv in first_line.items() for x in kv])
    key = F.concat_ws("\0", F.col("_file"), F.col("_part").cast("string"))
    return (
        parsed.where(F.col("_rec") == "bad")
        .select(
            F.col("_file").alias("file"),
            (offsets[key] + F.col("_line") + 1).alias("line"),
            F.col("_reason").alias("reason"),
            F.col("_text").alias("excerpt"),
        )
        .transform(_one_sorted_partition, "file", "line")
    )


def _one_sorted_partition(df: DataFrame, *order: Any) -> DataFrame:
    # Output tables are aggregates: one sorted partition gives one Parquet file and lets the driver stream the CSV
    # in a single job, without the sampling job and range shuffle that a global orderBy costs.
    return df.repartition(1).sortWithinPartitions(*order)


def _metrics() -> list[Column]:
    from pyspark.sql import functions as F

    return [
        F.count(F.lit(1)).alias("requests"),
        F.sum(F.col("is_error").cast("long")).alias("errors"),
        F.sum("bytes_in").alias("bytes_in"),
        F.sum("bytes_out").alias("bytes_out"),
        F.avg("latency_ms").alias("latency_avg_ms"),
        F.percentile_approx("latency_ms", [0.5, 0.95, 0.99], PERCENTILE_ACCURACY).alias("_latency"),
        F.max("latency_ms").alias("latency_max_ms"),
        F.sum("throttle_ms").alias("throttle_ms"),
    ]


def _finish(df: DataFrame, keys: list[str]) -> DataFrame:
    """The metric columns in a fixed order after the keys: error rate and the percentiles split out."""
    from pyspark.sql import functions as F

    extra = [c for c in df.columns if c not in keys and c not in _METRIC_NAMES and c != "_latency"]
    return df.select(
        *keys,
        "requests",
        "errors",
        (F.col("errors") / F.col("requests")).alias("error_rate"),
        "bytes_in",
        "bytes_out",
        *extra,
        F.col("latency_avg_ms"),
        F.col("_latency")[0].alias("latency_p50_ms"),
        F.col("_latency")[1].alias("latency_p95_ms"),
        F.col("_latency")[2].alias("latency_p99_ms"),
        "latency_max_ms",
        "throttle_ms",
    )


_METRIC_NAMES = ("requests", "errors", "bytes_in", "bytes_out", "latency_avg_ms", "latency_max_ms", "throttle_ms")


def build_tables(requests: DataFrame, top: int) -> dict[str, DataFrame]:
    """Every output table from the request spans (one row per span with an api_key)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from vcproxy_tools.analytics.otlp import FETCH_KEYS, PRODUCE_KEY

    record_bytes = F.aggregate("topic_bytes", F.lit(0).cast("long"), lambda acc, b: acc + b)
    produced = F.sum(F.when(F.col("api_key") == PRODUCE_KEY, record_bytes).otherwise(0)).alias("bytes_produced")
    fetched = F.sum(F.when(F.col("api_key").isin(*FETCH_KEYS), record_bytes).otherwise(0)).alias("bytes_fetched")
    requests = requests.withColumnRenamed("api_name", "api")
    client = ["principal", "client_id", "client_instance_id"]

    vc_summary = _finish(
        requests.groupBy("virtual_cluster").agg(
            F.max("virtual_cluster_id").alias("virtual_cluster_id"),
            *_metrics(),
            produced,
            fetched,
            F.countDistinct("principal").alias("principals"),
            F.countDistinct("client_id").alias("client_ids"),
            F.expr("timestamp_micros(min(start_ns) div 1000)").alias("first_seen"),
            F.expr("timestamp_micros(max(end_ns) div 1000)").alias("last_seen"),
        ),
        ["virtual_cluster", "virtual_cluster_id"],
    ).transform(_one_sorted_partition, "virtual_cluster")

    by_api_keys = ["virtual_cluster", "api", "api_key"]
    requests_by_api = _finish(requests.groupBy(*by_api_keys).agg(*_metrics()), by_api_keys).transform(
        _one_sorted_partition, "virtual_cluster", F.desc("requests"), "api"
    )

    by_client_keys = ["virtual_cluster", *client, "api"]
    requests_by_client = _finish(requests.groupBy(*by_client_keys).agg(*_metrics()), by_client_keys).transform(
        _one_sorted_partition, *by_client_keys
    )

    # Top clients: a client is a principal's client id (its instance ids change with every restart, and are
    # per connection until clients send their own); per virtual cluster, ranked by bytes in + out, then requests.
    who = ["principal", "client_id"]
    clients = _finish(
        requests.groupBy("virtual_cluster", *who).agg(
            *_metrics(),
            produced,
            fetched,
            F.countDistinct("client_instance_id").alias("instances"),
            F.countDistinct("client_address").alias("addresses"),
            F.countDistinct("api").alias("apis"),
        ),
        ["virtual_cluster", *who],
    ).withColumn("bytes_total", F.col("bytes_in") + F.col("bytes_out"))
    rank = Window.partitionBy("virtual_cluster").orderBy(
        F.desc("bytes_total"), F.desc("requests"), *[F.asc_nulls_first(c) for c in who]
    )
    top_clients = (
        clients.withColumn("rank", F.row_number().over(rank))
        .where(F.col("rank") <= top)
        .select("virtual_cluster", "rank", *[c for c in clients.columns if c != "virtual_cluster"])
        .transform(_one_sorted_partition, "virtual_cluster", "rank")
    )

    # Showback: record bytes per topic, from Produce (produced) and Fetch/ShareFetch (fetched) spans.
    is_produce = F.col("api_key") == PRODUCE_KEY
    is_fetch = F.col("api_key").isin(*FETCH_KEYS)
    per_topic = (
        requests.where(is_produce | is_fetch)
        .select("virtual_cluster", "api_key", F.explode(F.arrays_zip("topics", "topic_bytes")).alias("t"))
        .select("virtual_cluster", "api_key", F.col("t.topics").alias("topic"), F.col("t.topic_bytes").alias("b"))
    )
    topic_showback = (
        per_topic.groupBy("virtual_cluster", "topic")
        .agg(
            F.sum(F.when(is_produce, F.col("b")).otherwise(0)).alias("bytes_produced"),
            F.sum(F.when(is_fetch, F.col("b")).otherwise(0)).alias("bytes_fetched"),
            F.sum(is_produce.cast("long")).alias("produce_requests"),
            F.sum(is_fetch.cast("long")).alias("fetch_requests"),
        )
        .withColumn("bytes_total", F.col("bytes_produced") + F.col("bytes_fetched"))
        .transform(_one_sorted_partition, "virtual_cluster", F.desc("bytes_total"), "topic")
    )

    minute = F.expr("timestamp_seconds((start_ns div 60000000000) * 60)").alias("minute")
    per_minute = (
        requests.groupBy("virtual_cluster", minute)
        .agg(*_metrics(), produced, fetched)
        .transform(lambda df: _finish(df, ["virtual_cluster", "minute"]))
        .select(
            "*",
            (F.col("requests") / 60).alias("requests_per_sec"),
            (F.col("errors") / 60).alias("errors_per_sec"),
            (F.col("bytes_in") / 60).alias("bytes_in_per_sec"),
            (F.col("bytes_out") / 60).alias("bytes_out_per_sec"),
        )
        .transform(_one_sorted_partition, "minute", "virtual_cluster")
    )
    return {
        "vc_summary": vc_summary,
        "requests_by_api": requests_by_api,
        "requests_by_client": requests_by_client,
        "top_clients": top_clients,
        "topic_showback": topic_showback,
        "per_minute": per_minute,
    }


def _bad_summary(rows: list[dict[str, Any]], total: int) -> str:
    shown = "; ".join(f"{r['file']}:{r['line']}: {r['reason']}" for r in rows)
    return shown + (f" (and {total - len(rows)} more in {BAD_LINES_TABLE}.csv)" if total > len(rows) else "")


def write_csv(out: Any, df: DataFrame, each: Callable[[dict[str, Any]], None]) -> int:
    """The table as CSV (RFC 4180 quoting, a header, UTC timestamps like 2024-05-01T10:00:00.250Z), streamed to the
    driver a partition at a time; `each` sees every row (timestamps as epoch seconds). Returns the row count."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    stamps = {f.name for f in df.schema.fields if isinstance(f.dataType, TimestampType)}
    # Collected timestamps would be naive datetimes in the driver's local zone: fetch epoch microseconds instead.
    local = df.select(*[F.unix_micros(F.col(c)).alias(c) if c in stamps else F.col(c) for c in df.columns])
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(df.columns)
    n = 0
    for row in local.toLocalIterator(prefetchPartitions=True):
        values = [_csv_timestamp(row[c]) if c in stamps else _csv_value(row[c]) for c in df.columns]
        writer.writerow(values)
        d = row.asDict()
        for c in stamps:
            d[c] = None if d[c] is None else d[c] / 1e6
        each(d)
        n += 1
    return n


def _csv_value(v: Any) -> str:
    if v is None:
        return ""
    return repr(v) if isinstance(v, float) else str(v)


def _csv_timestamp(micros: int | None) -> str:
    if micros is None:
        return ""
    seconds, rest = divmod(micros, 1_000_000)
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{whole}.{rest // 1000:03d}Z" if rest >= 1000 else f"{whole}Z"


REPORT_CLIENT_ROWS = 20  # requests_by_client rows per virtual cluster in the report (the CSV has them all)
REPORT_BAD_LINES = 50


class _ReportRows:
    """The rows of one table that the report shows: all of them, except for the long tables."""

    def __init__(self, table: str) -> None:
        self.table = table
        self._rows: list[dict[str, Any]] = []
        self._seen = 0
        self._per_vc: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}

    def add(self, row: dict[str, Any]) -> None:
        self._seen += 1
        if self.table == "requests_by_client":  # each tenant's busiest rows, first come first kept on ties
            heap = self._per_vc.setdefault(row["virtual_cluster"], [])
            item = (row["requests"], -self._seen, row)
            if len(heap) < REPORT_CLIENT_ROWS:
                heapq.heappush(heap, item)
            else:
                heapq.heappushpop(heap, item)
        elif self.table != BAD_LINES_TABLE or len(self._rows) < REPORT_BAD_LINES:
            self._rows.append(row)

    @property
    def rows(self) -> list[dict[str, Any]]:
        if self.table == "requests_by_client":
            return [r for heap in self._per_vc.values() for _, _, r in sorted(heap, key=lambda i: i[:2], reverse=True)]
        return self._rows


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def stderr_progress(prefix: str = "vcproxy traces") -> Callable[[str], None]:
    """A progress printer for stderr: elapsed seconds and the message."""
    start = time.monotonic()

    def say(msg: str) -> None:
        print(f"[{prefix} {time.monotonic() - start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    return say
