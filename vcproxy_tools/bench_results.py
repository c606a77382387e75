"""Pure parts of `vcproxy bench`: parsing Kafka 4.2 perf-tool output, the variants, medians, ratios,
verdicts, the table, and reading a results JSON back (including files written before variants existed).

Nothing here does I/O, so all of it is unit-tested with captured tool output.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIB = 1024 * 1024
GB = 1_000_000_000  # CPU cost is quoted per 10^9 record bytes

# Targets, as ratios/offsets against the direct (no proxy) median.
PRODUCER_MIN_RATIO = 0.9
CONSUMER_MIN_RATIO = 0.8
P99_MAX_EXTRA_MS = 2.0


class ParseError(ValueError):
    """Tool output without the summary we expected (usually: the tool failed)."""


# --------------------------------------------------------------------------------------------------
# Tool output


@dataclass(frozen=True)
class ProducerResult:
    records: int
    records_per_sec: float
    mb_per_sec: float  # MiB/s, as the tool prints it
    avg_ms: float
    max_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    steady_state: bool = False  # figures exclude the --warmup-records


# Final ProducerPerformance line; the periodic progress lines lack the percentiles. With
# --warmup-records, 4.2 prints a second such line for the steady state ("N steady state records sent").
_PRODUCER_FINAL = re.compile(
    r"(?P<records>\d+) (?P<steady>steady state )?records sent, "
    r"(?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>[\d.]+) ms 50th, (?P<p95>[\d.]+) ms 95th, (?P<p99>[\d.]+) ms 99th, (?P<p999>[\d.]+) ms 99\.9th"
)


def parse_producer_perf(stdout: str) -> ProducerResult:
    """The summary of ``kafka-producer-perf-test``: the last line carrying percentiles (the steady-state
    one when the run had warm-up records)."""
    matches = list(_PRODUCER_FINAL.finditer(stdout))
    if not matches:
        raise ParseError("no final summary line in producer perf output")
    m = matches[-1]
    return ProducerResult(
        records=int(m["records"]),
        records_per_sec=float(m["rps"]),
        mb_per_sec=float(m["mbps"]),
        avg_ms=float(m["avg"]),
        max_ms=float(m["max"]),
        p50_ms=float(m["p50"]),
        p95_ms=float(m["p95"]),
        p99_ms=float(m["p99"]),
        p999_ms=float(m["p999"]),
        steady_state=m["steady"] is not None,
    )


@dataclass(frozen=True)
class ConsumerResult:
    mb: float  # MiB consumed
    mb_per_sec: float  # over the whole run, group join included
    records: int
    records_per_sec: float
    rebalance_ms: float
    fetch_ms: float
    fetch_mb_per_sec: float  # after the group join: the data path alone
    fetch_records_per_sec: float

    @property
    def bytes(self) -> int:
        return round(self.mb * MIB)


_CONSUMER_FIELDS = {
    "data.consumed.in.MB": "mb",
    "MB.sec": "mb_per_sec",
    "data.consumed.in.nMsg": "records",
    "nMsg.sec": "records_per_sec",
    "rebalance.time.ms": "rebalance_ms",
    "fetch.time.ms": "fetch_ms",
    "fetch.MB.sec": "fetch_mb_per_sec",
    "fetch.nMsg.sec": "fetch_records_per_sec",
}


def parse_consumer_perf(stdout: str) -> ConsumerResult:
    """The CSV-like header and data row of ``kafka-consumer-perf-test`` (other lines are ignored)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if not line.startswith("start.time,"):
            continue
        header = [h.strip() for h in line.split(",")]
        for row in lines[i + 1 :]:
            cells = [c.strip() for c in row.split(",")]
            if len(cells) == len(header):
                values = dict(zip(header, cells, strict=True))
                break
        else:
            raise ParseError("consumer perf output has a header but no data row")
        missing = [k for k in _CONSUMER_FIELDS if k not in values]
        if missing:
            raise ParseError(f"consumer perf output lacks columns {missing}")
        try:
            kw = {attr: float(values[col]) for col, attr in _CONSUMER_FIELDS.items()}
        except ValueError as exc:
            raise ParseError(f"consumer perf data row is not numeric: {exc}") from None
        kw["records"] = int(kw["records"])
        return ConsumerResult(**kw)  # type: ignore[arg-type]
    raise ParseError("no header line (start.time, ...) in consumer perf output")


@dataclass(frozen=True)
class E2EResult:
    avg_ms: float
    p50_ms: float
    p99_ms: float
    p999_ms: float


_E2E_AVG = re.compile(r"Avg latency: (?P<avg>[\d.]+) ms")
_E2E_PCT = re.compile(r"Percentiles: 50th = (?P<p50>[\d.]+), 99th = (?P<p99>[\d.]+), 99\.9th = (?P<p999>[\d.]+)")


def parse_e2e_latency(stdout: str) -> E2EResult:
    """``Avg latency`` and ``Percentiles`` lines of ``kafka-e2e-latency``."""
    avg = _E2E_AVG.search(stdout)
    pct = _E2E_PCT.search(stdout)
    if avg is None or pct is None:
        raise ParseError("no 'Avg latency' / 'Percentiles' lines in e2e latency output")
    return E2EResult(float(avg["avg"]), float(pct["p50"]), float(pct["p99"]), float(pct["p999"]))


def parse_proc_stat_times(stat: str) -> tuple[int, int]:
    """(utime, stime) in clock ticks from the text of /proc/PID/stat.

    The command name (field 2) may contain spaces and parentheses, so fields are counted after the
    last ')': there, utime and stime are the 12th and 13th (fields 14 and 15 of the whole line).
    """
    _, paren, rest = stat.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 13:
        raise ParseError(f"not a /proc/PID/stat line: {stat[:80]!r}")
    return int(fields[11]), int(fields[12])


def parse_proc_stat_ticks(stat: str) -> int:
    """utime + stime (clock ticks) from the text of /proc/PID/stat."""
    return sum(parse_proc_stat_times(stat))


def parse_system_busy_ticks(stat: str) -> int:
    """Non-idle clock ticks of all CPUs from the text of /proc/stat (its first, ``cpu``, line).

    Busy is user + nice + system + irq + softirq + steal; guest time is already inside user.
    """
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu" and len(fields) >= 8:
            user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[1:8])
            steal = int(fields[8]) if len(fields) > 8 else 0
            return user + nice + system + irq + softirq + steal
    raise ParseError("no aggregate 'cpu' line in /proc/stat text")


def parse_proc_status_kib(status: str, key: str) -> int | None:
    """A ``kB`` value such as VmHWM from the text of /proc/PID/status."""
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name == key:
            parts = value.split()
            return int(parts[0]) if parts else None
    return None


def count_spans(jsonl_text: str) -> int:
    """Spans in OTLP JSON Lines text (each span has one ``"spanId"``; parents are ``parentSpanId``)."""
    return jsonl_text.count('"spanId":')


def cpu_seconds_per_gb(cpu_seconds: float, nbytes: int) -> float:
    return cpu_seconds / (nbytes / GB) if nbytes > 0 else math.nan


# --------------------------------------------------------------------------------------------------
# Variants: what one round measures

DIRECT = "direct"
PROXY = "proxy"
TRACED = "proxy-traced"
METRICS_ON = "proxy-metrics"
DEFAULT_VARIANTS = f"{DIRECT},{PROXY},{TRACED}"
_TRACED_NAME = re.compile(rf"^{TRACED}(?:-(?P<ratio>\d*\.?\d+))?$")


@dataclass(frozen=True)
class Variant:
    """``direct``: the broker itself. ``proxy``: the proxy, tracing off (its default configuration).
    ``proxy-traced``: tracing on at sample ratio 1.0, JSON Lines exporter; ``proxy-traced-R``: ratio R.
    ``proxy-metrics``: the Prometheus metrics on, tracing off."""

    name: str
    sample_ratio: float | None = None  # tracing on at this ratio; None: off (or direct)
    metrics: bool = False

    @property
    def proxied(self) -> bool:
        return self.name != DIRECT


def parse_variants(text: str) -> tuple[Variant, ...]:
    """``direct,proxy,proxy-traced,proxy-traced-0.1`` -> variants, in the given order."""
    out: list[Variant] = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if name in (DIRECT, PROXY):
            variant = Variant(name)
        elif name == METRICS_ON:
            variant = Variant(name, metrics=True)
        elif m := _TRACED_NAME.match(name):
            ratio = float(m["ratio"]) if m["ratio"] is not None else 1.0
            if not 0 < ratio <= 1:
                raise ValueError(f"{name}: the sample ratio must be in (0, 1]")
            variant = Variant(name, ratio)
        else:
            raise ValueError(
                f"unknown variant {name!r}: use {DIRECT}, {PROXY}, {TRACED}, {TRACED}-RATIO or {METRICS_ON}"
            )
        if any(v.name == name for v in out):
            raise ValueError(f"variant {name} given twice")
        out.append(variant)
    if not out:
        raise ValueError("no variants")
    return tuple(out)


def mode_order(round_no: int, variants: Sequence[str] = (DIRECT, PROXY)) -> tuple[str, ...]:
    """The variants rotated by one place per round (round 1 in the given order), so drift (page cache,
    JIT, other load) hits all of them: over N rounds, each of N variants runs once in each position.
    With two variants: direct first on odd rounds, proxy first on even ones."""
    k = (round_no - 1) % len(variants)
    return (*variants[k:], *variants[:k])


@dataclass(frozen=True)
class Comparison:
    """A ratio column: numerator/denominator, both variant names."""

    numerator: str
    denominator: str

    @property
    def label(self) -> str:
        return f"{self.numerator}/{self.denominator}"


def comparisons(variants: Sequence[str]) -> list[Comparison]:
    """Every proxied variant against direct, then every instrumented variant (traced, metrics) against
    the plain proxy."""
    out = [Comparison(v, DIRECT) for v in variants if v != DIRECT and DIRECT in variants]
    out += [Comparison(v, PROXY) for v in variants if v not in (DIRECT, PROXY) and PROXY in variants]
    return out


# --------------------------------------------------------------------------------------------------
# Summary


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    higher_is_better: bool
    decimals: int = 1


# Table rows, in order; every run dict holds (a subset of) these keys.
METRICS: tuple[Metric, ...] = (
    Metric("producer_mb_s", "producer MB/s", True),
    Metric("producer_rec_s", "producer records/s", True, 0),
    Metric("producer_avg_ms", "producer avg latency ms (saturated)", False),
    Metric("producer_p99_ms", "producer p99 latency ms (saturated)", False),
    Metric("fixed_avg_ms", "produce avg latency ms (fixed rate)", False, 2),
    Metric("fixed_p50_ms", "produce p50 latency ms (fixed rate)", False),
    Metric("fixed_p99_ms", "produce p99 latency ms (fixed rate)", False),
    Metric("consumer_mb_s", "consumer MB/s (fetch)", True),
    Metric("consumer_rec_s", "consumer records/s (fetch)", True, 0),
    Metric("consumer_total_mb_s", "consumer MB/s (incl. group join)", True),
    Metric("e2e_avg_ms", "e2e avg latency ms", False, 2),
    Metric("e2e_p99_ms", "e2e p99 latency ms", False),
    Metric("proxy_cpu_s_per_gb_produce", "proxy CPU s/GB, producer", False, 2),
    Metric("proxy_cpu_s_per_gb_consume", "proxy CPU s/GB, consumer", False, 2),
    Metric("proxy_core_util_produce", "proxy CPU % of a core, producer", False, 0),
    Metric("proxy_core_util_consume", "proxy CPU % of a core, consumer", False, 0),
    Metric("proxy_kernel_pct_produce", "proxy CPU % in kernel, producer", False, 0),
    Metric("proxy_kernel_pct_consume", "proxy CPU % in kernel, consumer", False, 0),
    Metric("broker_cpu_s_per_gb_produce", "broker CPU s/GB, producer", False, 2),
    Metric("broker_cpu_s_per_gb_consume", "broker CPU s/GB, consumer", False, 2),
    Metric("machine_cores_produce", "machine CPU cores busy, producer run", False, 2),
    Metric("machine_cores_consume", "machine CPU cores busy, consumer run", False, 2),
    # Machine CPU not charged to the broker, the proxy or the tool: other load, steal, softirq.
    Metric("background_cores_produce", "unattributed CPU cores, producer run", False, 2),
    Metric("background_cores_consume", "unattributed CPU cores, consumer run", False, 2),
)


def median_of(runs: Iterable[Mapping[str, float]], key: str) -> float | None:
    values = [r[key] for r in runs if _usable(r, key)]
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class Row:
    metric: Metric
    direct: float | None
    proxy: float | None
    round_ratios: tuple[float, ...] = ()
    """proxy/direct within each round: the two ran minutes apart, so this shows the noise."""

    @property
    def ratio(self) -> float | None:
        if self.direct is None or self.proxy is None or self.direct == 0:
            return None
        return self.proxy / self.direct


def _usable(run: Mapping[str, float], key: str) -> bool:
    return key in run and not math.isnan(run[key])


def round_ratios(
    direct: Sequence[Mapping[str, float]], proxied: Sequence[Mapping[str, float]], key: str
) -> tuple[float, ...]:
    """proxy/direct per round, for the rounds where both modes measured ``key`` (runs carry a ``round``)."""
    by_round = {d["round"]: d[key] for d in direct if "round" in d and _usable(d, key)}
    out = []
    for p in proxied:
        base = by_round.get(p.get("round", math.nan))
        if base and _usable(p, key):
            out.append(p[key] / base)
    return tuple(out)


def summarize(direct: Sequence[Mapping[str, float]], proxied: Sequence[Mapping[str, float]]) -> list[Row]:
    """Per metric, the median over rounds of each mode (rows with no data at all are dropped)."""
    rows = [
        Row(m, median_of(direct, m.key), median_of(proxied, m.key), round_ratios(direct, proxied, m.key))
        for m in METRICS
    ]
    return [r for r in rows if r.direct is not None or r.proxy is not None]


@dataclass(frozen=True)
class Verdict:
    target: str
    passed: bool | None  # None: not measured
    detail: str


def verdicts(rows: Sequence[Row]) -> list[Verdict]:
    by_key = {r.metric.key: r for r in rows}

    def ratio_target(key: str, minimum: float, name: str) -> Verdict:
        row = by_key.get(key)
        target = f"{name} >= {minimum:.1f}x direct"
        if row is None or row.ratio is None:
            return Verdict(target, None, "not measured")
        return Verdict(target, row.ratio >= minimum, f"{row.ratio:.2f}x ({row.proxy:.1f} vs {row.direct:.1f} MB/s)")

    out = [
        ratio_target("producer_mb_s", PRODUCER_MIN_RATIO, "producer throughput"),
        ratio_target("consumer_mb_s", CONSUMER_MIN_RATIO, "consumer throughput"),
    ]
    row = by_key.get("fixed_p99_ms")
    target = f"p99 produce latency <= direct + {P99_MAX_EXTRA_MS:g} ms"
    if row is None or row.direct is None or row.proxy is None:
        out.append(Verdict(target, None, "not measured"))
    else:
        extra = row.proxy - row.direct
        out.append(
            Verdict(
                target,
                extra <= P99_MAX_EXTRA_MS,
                f"{row.proxy:g} vs {row.direct:g} ms ({extra:+g} ms, fixed-rate run)",
            )
        )
    return out


def _fmt(value: float | None, decimals: int) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.{decimals}f}"


def format_table(rows: Sequence[Row]) -> str:
    header = ("metric (median of rounds)", "direct", "proxy", "proxy/direct", "per round")
    body = [
        (
            r.metric.label,
            _fmt(r.direct, r.metric.decimals),
            _fmt(r.proxy, r.metric.decimals),
            "-" if r.ratio is None else f"{r.ratio:.2f}",
            f"{min(r.round_ratios):.2f}..{max(r.round_ratios):.2f}" if len(r.round_ratios) > 1 else "",
        )
        for r in rows
    ]
    if not any(b[-1] for b in body):
        header, body = header[:-1], [b[:-1] for b in body]
    return _table(header, body)


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """Plain-text columns: the first left-aligned, the rest right-aligned, a dashed rule under the header."""
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            [cells[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))]
        ).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep, *(line(b) for b in body)])


def format_verdicts(items: Sequence[Verdict]) -> str:
    word = {True: "PASS", False: "MISS", None: "n/a "}
    return "\n".join(f"{word[v.passed]}  {v.target}: {v.detail}" for v in items)


# --------------------------------------------------------------------------------------------------
# Several variants


@dataclass(frozen=True)
class Ratio:
    value: float | None  # median(numerator) / median(denominator)
    round_ratios: tuple[float, ...]  # numerator/denominator within each round


@dataclass(frozen=True)
class VariantRow:
    metric: Metric
    values: Mapping[str, float | None]  # variant -> median over rounds
    ratios: Mapping[str, Ratio]  # Comparison.label -> ratio

    def pair(self, numerator: str = PROXY, denominator: str = DIRECT) -> Row:
        """The two-variant row (for the verdicts, and the old JSON fields)."""
        return Row(
            self.metric,
            self.values.get(denominator),
            self.values.get(numerator),
            self.ratios[f"{numerator}/{denominator}"].round_ratios
            if f"{numerator}/{denominator}" in self.ratios
            else (),
        )


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def summarize_variants(runs: Sequence[Mapping[str, Any]], variants: Sequence[str]) -> list[VariantRow]:
    """Per metric, the median over rounds of each variant (``run["mode"]``) and the ratios of
    ``comparisons(variants)``; metrics no variant measured are dropped."""
    by_variant = {v: [r for r in runs if r.get("mode") == v] for v in variants}
    cmps = comparisons(variants)
    rows = []
    for m in METRICS:
        values = {v: median_of(by_variant[v], m.key) for v in variants}
        if all(x is None for x in values.values()):
            continue
        ratios = {
            c.label: Ratio(
                _ratio(values[c.numerator], values[c.denominator]),
                round_ratios(by_variant[c.denominator], by_variant[c.numerator], m.key),
            )
            for c in cmps
        }
        rows.append(VariantRow(m, values, ratios))
    return rows


def _fmt_ratio(r: Ratio) -> str:
    if r.value is None:
        return "-"
    if len(r.round_ratios) > 1:
        return f"{r.value:.2f} ({min(r.round_ratios):.2f}-{max(r.round_ratios):.2f})"
    return f"{r.value:.2f}"


def format_variant_table(rows: Sequence[VariantRow], variants: Sequence[str]) -> str:
    """Medians per variant, then each ratio with, in parentheses, its range over the rounds."""
    cmps = comparisons(variants)
    header = ("metric (median of rounds)", *variants, *(c.label for c in cmps))
    body = [
        (
            r.metric.label,
            *(_fmt(r.values.get(v), r.metric.decimals) for v in variants),
            *(_fmt_ratio(r.ratios[c.label]) for c in cmps),
        )
        for r in rows
    ]
    return _table(header, body)


def summary_json(rows: Sequence[VariantRow]) -> list[dict[str, Any]]:
    """The ``summary`` of the results JSON. ``direct``, ``proxy``, ``ratio`` and ``round_ratios`` keep
    their old meaning (proxy with tracing off against direct); ``values`` and ``ratios`` hold all."""
    out = []
    for r in rows:
        pair = r.pair()
        out.append(
            {
                "metric": r.metric.key,
                "label": r.metric.label,
                "direct": pair.direct,
                "proxy": pair.proxy,
                "ratio": pair.ratio,
                "round_ratios": list(pair.round_ratios),
                "values": dict(r.values),
                "ratios": {k: {"ratio": v.value, "round_ratios": list(v.round_ratios)} for k, v in r.ratios.items()},
            }
        )
    return out


def variants_of(doc: Mapping[str, Any]) -> list[str]:
    """The variants of a results JSON: its ``variants``, or (files from before variants existed, whose
    runs are ``direct`` and ``proxy``) the modes of its runs, direct first."""
    if doc.get("variants"):
        return [v if isinstance(v, str) else v["name"] for v in doc["variants"]]
    seen: list[str] = []
    for run in doc.get("runs", []):
        if run.get("mode") not in seen:
            seen.append(run["mode"])
    return sorted(seen, key=lambda v: (v != DIRECT, v != PROXY))


def rows_from_doc(doc: Mapping[str, Any]) -> tuple[list[str], list[VariantRow]]:
    """Recompute the table from the per-run figures of a results JSON (old or new)."""
    if not isinstance(doc.get("runs"), list) or not doc["runs"]:
        raise ParseError("results JSON without runs")
    runs = [{k: (math.nan if v is None else v) for k, v in run.items()} for run in doc["runs"]]
    variants = variants_of(doc)
    return variants, summarize_variants(runs, variants)
