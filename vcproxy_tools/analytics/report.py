"""The job's report: one self-contained HTML page (inline CSS and SVG charts; no scripts, nothing fetched).

`render` takes plain Python rows (the collected tables), so it is testable without Spark. Every piece of text that
came from the spans (tenant, principal, client and topic names) is escaped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from html import escape
from typing import Any

Row = dict[str, Any]
# Okabe-Ito: distinguishable with the common kinds of colour blindness (yellow left out: too pale on white).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#999999")  # last: "others"
PHYSICAL = "(physical)"
MAX_POINTS = 720  # longer time series are bucketed so the page stays light
WIDTH, PLOT_HEIGHT = 500, 150  # two charts side by side on a laptop screen
MARGIN_L, MARGIN_R, MARGIN_B = 64, 14, 34
OVERVIEW_SERIES = 7  # tenants drawn one by one in the overview charts; the rest are summed as "others"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:20px;margin:36px 0 8px;border-bottom:2px solid #dde1e7;padding-bottom:4px}
h3{font-size:15px;margin:20px 0 6px;color:#394150}
.meta{color:#5b6472;margin:0 0 12px}nav a{margin-right:12px}
.tiles{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.tile{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:8px 14px;min-width:120px}
.tile b{display:block;font-size:20px}.tile span{color:#5b6472;font-size:12px}
table{border-collapse:collapse;background:#fff;margin:6px 0 12px;font-size:13px;width:100%}
th,td{border:1px solid #e3e6eb;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.warn{background:#fff4d6}td.bad{background:#fde2e0;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0 0 8px;width:fit-content;max-width:100%;overflow-x:auto;background:#fff;border:1px solid #dde1e7;
border-radius:6px;padding:6px}
svg text{font:11px system-ui,sans-serif;fill:#394150}svg .title{font-size:13px;font-weight:600}
.none{color:#5b6472;font-style:italic}.note{color:#5b6472;font-size:12px}
code{background:#eef0f4;padding:0 3px;border-radius:3px}
"""


# ---------------------------------------------------------------- formatting


def fmt_int(n: Any) -> str:
    return "—" if n is None else f"{int(n):,}"


def fmt_bytes(n: Any) -> str:
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def fmt_rate(n: Any, unit: str = "/s") -> str:
    if n is None:
        return "—"
    n = float(n)
    if n == 0:
        return f"0{unit}"
    if abs(n) >= 100:
        return f"{n:,.0f}{unit}"
    return f"{n:.3g}{unit}"


def fmt_byte_rate(n: Any) -> str:
    return "—" if n is None else fmt_bytes(n) + "/s"


def fmt_ms(n: Any) -> str:
    if n is None:
        return "—"
    n = float(n)
    return f"{n:.0f} ms" if n >= 100 else f"{n:.3g} ms"


def fmt_pct(n: Any) -> str:
    if n is None:
        return "—"
    n = float(n) * 100
    return "0%" if n == 0 else f"{n:.3g}%"


def fmt_text(v: Any) -> str:
    return "—" if v is None or v == "" else str(v)


def fmt_time(epoch: float | None, with_date: bool = True) -> str:
    if epoch is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M" if with_date else "%H:%M", time.gmtime(epoch))


def _error_class(rate: Any) -> str:
    if not rate:
        return "n"
    return "n bad" if rate >= 0.01 else "n warn"


# ---------------------------------------------------------------- tables


Column = tuple[str, str, Callable[[Any], str], str]  # header, key, formatter, css class ("n" = numeric)


def html_table(columns: Sequence[Column], rows: Iterable[Row], empty: str = "no rows") -> str:
    rows = list(rows)
    if not rows:
        return f'<p class="none">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h, *_ in columns)
    body = []
    for row in rows:
        cells = []
        for _, key, fmt, cls in columns:
            value = row.get(key)
            css = _error_class(value) if cls == "rate" else cls
            attr = f' class="{css}"' if css else ""
            cells.append(f"<td{attr}>{escape(fmt(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


LATENCY_COLUMNS: list[Column] = [
    ("p50", "latency_p50_ms", fmt_ms, "n"),
    ("p95", "latency_p95_ms", fmt_ms, "n"),
    ("p99", "latency_p99_ms", fmt_ms, "n"),
]
TRAFFIC_COLUMNS: list[Column] = [
    ("requests", "requests", fmt_int, "n"),
    ("errors", "errors", fmt_int, "n"),
    ("error rate", "error_rate", fmt_pct, "rate"),
    ("bytes in", "bytes_in", fmt_bytes, "n"),
    ("bytes out", "bytes_out", fmt_bytes, "n"),
]


# ---------------------------------------------------------------- charts


def _nice_step(span: float, ticks: int = 4) -> float:
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag  # pragma: no cover


_TIME_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def _legend(items: Sequence[tuple[str, str]], x0: float, y0: float, right: float) -> tuple[list[str], float]:
    """Legend entries (name, colour) in rows from (x0, y0), wrapping at `right`; returns the SVG and the next y."""
    out: list[str] = []
    x, y = x0, y0
    for name, colour in items:
        width = 22 + 6.2 * len(name)
        if x > x0 and x + width > right:
            x, y = x0, y + 15
        out.append(f'<rect x="{x:.0f}" y="{y - 9:.0f}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14:.0f}" y="{y:.0f}">{escape(name)}</text>')
        x += width
    return out, (y + 15 if items else y)


def _svg_open(title: str, width: int, height: float) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
        f'viewBox="0 0 {width} {height:.0f}" role="img" aria-label="{escape(title)}">'
        f'<text class="title" x="4" y="16">{escape(title)}</text>'
    )


def line_chart(
    title: str,
    x: Sequence[float],
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    fmt_y: Callable[[float], str],
) -> str:
    """A time-series chart: x in epoch seconds; each series (name, colour, values aligned with x, None = gap)."""
    legend, top = _legend([(name, colour) for name, colour, _ in series], MARGIN_L, 33, WIDTH - MARGIN_R)
    top += 4
    plot_w = WIDTH - MARGIN_L - MARGIN_R
    plot_h = PLOT_HEIGHT
    height = top + plot_h + MARGIN_B
    base = top + plot_h
    values = [v for _, _, vs in series for v in vs if v is not None]
    out = [_svg_open(title, WIDTH, height), *legend]
    if not x or not values:
        out.append(f'<text x="{MARGIN_L}" y="{top + plot_h / 2}">no data</text></svg>')
        return "".join(out)
    x0, x1 = min(x), max(x)
    if x1 == x0:  # one minute: give it some width
        x0, x1 = x0 - 60, x1 + 60
    step = _nice_step(max(values))
    y_max = max(step, math.ceil(max(values) / step) * step)

    def px(t: float) -> float:
        return MARGIN_L + (t - x0) / (x1 - x0) * plot_w

    def py(v: float) -> float:
        return base - v / y_max * plot_h

    v = 0.0
    while v <= y_max + 1e-9:  # horizontal grid with labels
        y = py(v)
        out.append(f'<line x1="{MARGIN_L}" y1="{y:.1f}" x2="{WIDTH - MARGIN_R}" y2="{y:.1f}" stroke="#e3e6eb"/>')
        out.append(f'<text x="{MARGIN_L - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt_y(v))}</text>')
        v += step
    t_step = next((s for s in _TIME_STEPS if (x1 - x0) / s <= 5), _TIME_STEPS[-1])
    multi_day = time.gmtime(x0).tm_yday != time.gmtime(x1).tm_yday
    t = math.ceil(x0 / t_step) * t_step
    while t <= x1:  # time ticks on round minutes/hours/days
        xt = px(t)
        label = time.strftime("%m-%d %H:%M" if multi_day else "%H:%M", time.gmtime(t))
        out.append(f'<line x1="{xt:.1f}" y1="{base}" x2="{xt:.1f}" y2="{base + 4}" stroke="#999"/>')
        anchor = "end" if xt > WIDTH - MARGIN_R - 18 else "middle"  # the last label must not run off the edge
        out.append(f'<text x="{xt:.1f}" y="{base + 16}" text-anchor="{anchor}">{escape(label)}</text>')
        t += t_step
    out.append(f'<text x="{WIDTH - MARGIN_R}" y="{height - 3:.0f}" text-anchor="end">UTC</text>')
    out.append(f'<line x1="{MARGIN_L}" y1="{base}" x2="{WIDTH - MARGIN_R}" y2="{base}" stroke="#999"/>')
    for name, colour, vs in series:  # lines broken at gaps; dots with a tooltip when there are few points
        segments: list[list[str]] = [[]]
        for tx, val in zip(x, vs, strict=True):
            if val is None:
                segments.append([])
            else:
                segments[-1].append(f"{px(tx):.1f},{py(val):.1f}")
        for seg in segments:
            if len(seg) > 1:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" points="{" ".join(seg)}"/>')
        if len(x) <= 120:
            for tx, val in zip(x, vs, strict=True):
                if val is not None:
                    tip = f"{name} {fmt_time(tx)}: {fmt_y(val)}"
                    out.append(
                        f'<circle cx="{px(tx):.1f}" cy="{py(val):.1f}" r="2.6" fill="{colour}">'
                        f"<title>{escape(tip)}</title></circle>"
                    )
    out.append("</svg>")
    return "".join(out)


def bar_chart(
    title: str,
    rows: Sequence[tuple[str, Sequence[float]]],
    parts: Sequence[tuple[str, str]],
    fmt: Callable[[float], str],
) -> str:
    """Horizontal stacked bars: rows of (label, one value per part); parts are (name, colour)."""
    label_w, bar_h, gap = 190, 16, 6
    legend, top = _legend(parts, label_w, 33, WIDTH - MARGIN_R)
    height = top + len(rows) * (bar_h + gap) + 4
    plot_w = WIDTH - label_w - 80
    out = [_svg_open(title, WIDTH, height), *legend]
    biggest = max((sum(vs) for _, vs in rows), default=0) or 1
    for i, (label, vs) in enumerate(rows):
        y = top + i * (bar_h + gap)
        shown = label if len(label) <= 30 else label[:29] + "…"
        out.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{escape(shown)}')
        out.append(f"<title>{escape(label)}</title></text>")
        x = float(label_w)
        for (name, colour), v in zip(parts, vs, strict=True):
            w = v / biggest * plot_w
            if w > 0:
                tip = f"{label} {name}: {fmt(v)}"
                out.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{max(w, 1):.1f}" height="{bar_h}" fill="{colour}">'
                    f"<title>{escape(tip)}</title></rect>"
                )
            x += w
        out.append(f'<text x="{x + 6:.1f}" y="{y + 12}">{escape(fmt(sum(vs)))}</text>')
    out.append("</svg>")
    return "".join(out)


def _time_axis(minutes: Iterable[float]) -> tuple[list[float], int]:
    """Every minute from the first to the last (gaps are real zeros), bucketed when too long; and the bucket."""
    ms = [float(m) for m in minutes]
    if not ms:
        return [], 60
    first, last = min(ms), max(ms)
    count = int((last - first) // 60) + 1
    bucket = 60 * max(1, math.ceil(count / MAX_POINTS))
    return [first + i * bucket for i in range(int((last - first) // bucket) + 1)], bucket


def _bucketed(
    rows: Iterable[Row], key: str, axis: Sequence[float], bucket: int, mean: bool = True
) -> list[float | None]:
    """Per-minute values onto the axis: the mean over each bucket's minutes (absent minutes count as 0), or the max
    (for latencies, where an absent minute is a gap)."""
    if not axis:
        return []
    sums: dict[int, float] = {}
    for r in rows:
        v = r.get(key)
        if v is None:
            continue
        i = int((float(r["minute"]) - axis[0]) // bucket)
        sums[i] = sums.get(i, 0.0) + float(v) if mean else max(sums.get(i, 0.0), float(v))
    per = bucket / 60
    return [(sums.get(i, 0.0) / per) if mean else sums.get(i) for i in range(len(axis))]


# ---------------------------------------------------------------- the page


def _tiles(items: Iterable[tuple[str, str]]) -> str:
    return (
        '<div class="tiles">'
        + "".join(f'<div class="tile"><b>{escape(v)}</b><span>{escape(k)}</span></div>' for k, v in items)
        + "</div>"
    )


def _anchor(vc: str) -> str:
    return "vc-" + "".join(c if c.isalnum() or c in "-_" else f"_{ord(c):x}" for c in vc)


def render(summary: dict[str, Any], tables: dict[str, list[Row]]) -> str:
    """The whole page. summary: the job's counts; tables: collected rows by table name (minute in epoch seconds)."""
    # Tenants by name, the physical cluster last; a tenant keeps its colour in every overview chart.
    vcs = sorted(tables.get("vc_summary", []), key=lambda r: (r["virtual_cluster"] == PHYSICAL, r["virtual_cluster"]))
    names = [r["virtual_cluster"] for r in vcs]
    # The overview charts draw the busiest tenants one by one (each its own colour) and sum the rest.
    busiest = sorted(names, key=lambda vc: -next(r["requests"] for r in vcs if r["virtual_cluster"] == vc))
    drawn = set(busiest[:OVERVIEW_SERIES] if len(names) > OVERVIEW_SERIES + 1 else names)
    colour = {vc: PALETTE[i] for i, vc in enumerate(vc for vc in names if vc in drawn)}
    per_minute = tables.get("per_minute", [])
    axis, bucket = _time_axis(r["minute"] for r in per_minute)
    by_vc: dict[str, list[Row]] = {}
    for r in per_minute:
        by_vc.setdefault(r["virtual_cluster"], []).append(r)

    total_requests = sum(r["requests"] for r in vcs)
    total_errors = sum(r["errors"] for r in vcs)
    period = (
        f"{fmt_time(min(r['first_seen'] for r in vcs))} to {fmt_time(max(r['last_seen'] for r in vcs))} UTC"
        if vcs
        else "no requests"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>vcproxy per-tenant traffic report</title>",
        f"<style>{CSS}</style></head><body><main>",
        "<h1>Per-tenant traffic</h1>",
        f'<p class="meta">{escape(period)} · {fmt_int(summary.get("spans"))} spans from '
        f"{fmt_int(summary.get('files'))} file(s) in <code>{escape(str(summary.get('input', '')))}</code> · "
        f"generated {escape(fmt_time(summary.get('generated_at')))} UTC</p>",
    ]
    if names:
        parts.append("<nav>" + "".join(f'<a href="#{_anchor(vc)}">{escape(vc)}</a>' for vc in names) + "</nav>")
    parts.append(_bad_lines_section(summary, tables.get("bad_lines", [])))

    # ---- all tenants
    parts.append('<h2 id="overview">All virtual clusters</h2>')
    parts.append(
        _tiles(
            [
                ("virtual clusters", fmt_int(len(vcs))),
                ("requests", fmt_int(total_requests)),
                ("error rate", fmt_pct(total_errors / total_requests if total_requests else None)),
                ("bytes in", fmt_bytes(sum(r["bytes_in"] for r in vcs))),
                ("bytes out", fmt_bytes(sum(r["bytes_out"] for r in vcs))),
                ("produced", fmt_bytes(sum(r["bytes_produced"] for r in vcs))),
                ("fetched", fmt_bytes(sum(r["bytes_fetched"] for r in vcs))),
            ]
        )
    )
    parts.append(
        html_table(
            [
                ("virtual cluster", "virtual_cluster", fmt_text, ""),
                *TRAFFIC_COLUMNS,
                ("produced", "bytes_produced", fmt_bytes, "n"),
                ("fetched", "bytes_fetched", fmt_bytes, "n"),
                *LATENCY_COLUMNS,
                ("principals", "principals", fmt_int, "n"),
                ("client ids", "client_ids", fmt_int, "n"),
            ],
            vcs,
            "no request spans",
        )
    )
    if names:
        bucket_note = "" if bucket == 60 else f" (mean over {bucket // 60}-minute buckets)"
        parts.append('<div class="charts">')
        for title, key, fmt in (
            ("Requests per second", "requests_per_sec", fmt_rate),
            ("Bytes per second, in + out", "_bytes_per_sec", fmt_byte_rate),
            ("Errors per second", "errors_per_sec", fmt_rate),
        ):
            chart = line_chart(title + bucket_note, axis, _vc_series(names, colour, by_vc, key, axis, bucket), fmt)
            parts.append(f"<figure>{chart}</figure>")
        parts.append(
            "<figure>"
            + bar_chart(
                "Showback: bytes produced and fetched",
                [
                    (vc, [float(r["bytes_produced"]), float(r["bytes_fetched"])])
                    for vc, r in zip(names, vcs, strict=True)
                ],
                [("produced", PALETTE[0]), ("fetched", PALETTE[1])],
                fmt_bytes,
            )
            + "</figure>"
        )
        parts.append("</div>")

    # ---- one section per tenant
    for vc_row in vcs:
        parts.append(_vc_section(vc_row, tables, by_vc.get(vc_row["virtual_cluster"], []), axis, bucket, summary))
    parts.append(
        '<p class="note">Latency is span end minus start as seen by the proxy; percentiles are per group. '
        "Rates are per-minute counts divided by 60. Produced/fetched bytes are record bytes of Produce and "
        "Fetch/ShareFetch requests per topic. The full tables are the CSV and Parquet files beside this page.</p>"
    )
    parts.append("</main></body></html>")
    return "\n".join(parts)


def _vc_series(
    names: Sequence[str],
    colour: dict[str, str],
    by_vc: dict[str, list[Row]],
    key: str,
    axis: Sequence[float],
    bucket: int,
) -> list[tuple[str, str, list[float | None]]]:
    """One series per drawn tenant (those with a colour) for an overview chart, and one for all the others."""

    def points(vcs: Iterable[str]) -> list[Row]:
        rows = [r for vc in vcs for r in by_vc.get(vc, [])]
        if key == "_bytes_per_sec":
            return [
                {"minute": r["minute"], key: (r["bytes_in_per_sec"] or 0) + (r["bytes_out_per_sec"] or 0)} for r in rows
            ]
        return rows

    out: list[tuple[str, str, list[float | None]]] = [
        (vc, colour[vc], _bucketed(points([vc]), key, axis, bucket)) for vc in names if vc in colour
    ]
    others = [vc for vc in names if vc not in colour]
    if others:
        out.append((f"{len(others)} others", PALETTE[-1], _bucketed(points(others), key, axis, bucket)))
    return out


def _vc_section(
    vc_row: Row,
    tables: dict[str, list[Row]],
    minutes: list[Row],
    axis: list[float],
    bucket: int,
    summary: dict[str, Any],
) -> str:
    vc = vc_row["virtual_cluster"]

    def mine(table: str) -> list[Row]:
        return [r for r in tables.get(table, []) if r["virtual_cluster"] == vc]

    vc_id = vc_row.get("virtual_cluster_id")
    parts = [f'<h2 id="{_anchor(vc)}">{escape(vc)}' + (f" <small>({escape(vc_id)})</small>" if vc_id else "") + "</h2>"]
    parts.append(
        _tiles(
            [
                ("requests", fmt_int(vc_row["requests"])),
                ("error rate", fmt_pct(vc_row["error_rate"])),
                ("p99 latency", fmt_ms(vc_row["latency_p99_ms"])),
                ("bytes in", fmt_bytes(vc_row["bytes_in"])),
                ("bytes out", fmt_bytes(vc_row["bytes_out"])),
                ("produced", fmt_bytes(vc_row["bytes_produced"])),
                ("fetched", fmt_bytes(vc_row["bytes_fetched"])),
                ("principals", fmt_int(vc_row["principals"])),
            ]
        )
    )
    if minutes:
        parts.append('<div class="charts">')
        parts.append(
            "<figure>"
            + line_chart(
                "Requests and errors per second",
                axis,
                [
                    ("requests", PALETTE[0], _bucketed(minutes, "requests_per_sec", axis, bucket)),
                    ("errors", PALETTE[3], _bucketed(minutes, "errors_per_sec", axis, bucket)),
                ],
                fmt_rate,
            )
            + "</figure>"
        )
        parts.append(
            "<figure>"
            + line_chart(
                "Bytes per second",
                axis,
                [
                    ("in", PALETTE[2], _bucketed(minutes, "bytes_in_per_sec", axis, bucket)),
                    ("out", PALETTE[1], _bucketed(minutes, "bytes_out_per_sec", axis, bucket)),
                ],
                fmt_byte_rate,
            )
            + "</figure>"
        )
        parts.append(
            "<figure>"
            + line_chart(
                "Latency p99 per minute" + ("" if bucket == 60 else f" (worst of each {bucket // 60} minutes)"),
                axis,
                [("p99", PALETTE[4], _bucketed(minutes, "latency_p99_ms", axis, bucket, mean=False))],
                fmt_ms,
            )
            + "</figure>"
        )
        parts.append("</div>")

    parts.append("<h3>By API</h3>")
    parts.append(
        html_table([("API", "api", fmt_text, ""), *TRAFFIC_COLUMNS, *LATENCY_COLUMNS], mine("requests_by_api"))
    )

    top = mine("top_clients")
    parts.append(f"<h3>Top clients (by bytes in + out, up to {escape(str(summary.get('top', '')))})</h3>")
    if top:
        parts.append(
            "<figure>"
            + bar_chart(
                "Bytes by client",
                [(_client_label(r), [float(r["bytes_in"]), float(r["bytes_out"])]) for r in top],
                [("in", PALETTE[2]), ("out", PALETTE[1])],
                fmt_bytes,
            )
            + "</figure>"
        )
    parts.append(
        html_table(
            [
                ("#", "rank", fmt_int, "n"),
                ("principal", "principal", fmt_text, ""),
                ("client id", "client_id", fmt_text, ""),
                ("instances", "instances", fmt_int, "n"),
                *TRAFFIC_COLUMNS,
                ("produced", "bytes_produced", fmt_bytes, "n"),
                ("fetched", "bytes_fetched", fmt_bytes, "n"),
                ("p99", "latency_p99_ms", fmt_ms, "n"),
            ],
            top,
        )
    )

    topics = mine("topic_showback")
    parts.append("<h3>Topics (showback)</h3>")
    if topics:
        parts.append(
            "<figure>"
            + bar_chart(
                "Bytes per topic",
                [(r["topic"], [float(r["bytes_produced"]), float(r["bytes_fetched"])]) for r in topics[:15]],
                [("produced", PALETTE[0]), ("fetched", PALETTE[1])],
                fmt_bytes,
            )
            + "</figure>"
        )
    parts.append(
        html_table(
            [
                ("topic", "topic", fmt_text, ""),
                ("produced", "bytes_produced", fmt_bytes, "n"),
                ("fetched", "bytes_fetched", fmt_bytes, "n"),
                ("produce requests", "produce_requests", fmt_int, "n"),
                ("fetch requests", "fetch_requests", fmt_int, "n"),
            ],
            topics,
            "no Produce or Fetch traffic",
        )
    )

    parts.append("<h3>By principal, client and API (busiest rows)</h3>")
    parts.append(
        html_table(
            [
                ("principal", "principal", fmt_text, ""),
                ("client id", "client_id", fmt_text, ""),
                ("instance id", "client_instance_id", fmt_text, ""),
                ("API", "api", fmt_text, ""),
                *TRAFFIC_COLUMNS,
                *LATENCY_COLUMNS,
            ],
            mine("requests_by_client"),
        )
    )
    return "\n".join(parts)


def _client_label(r: Row) -> str:
    return f"{r.get('principal') or '—'} / {r.get('client_id') or '—'}"


def _bad_lines_section(summary: dict[str, Any], rows: list[Row]) -> str:
    n = int(summary.get("bad_lines") or 0)
    if not n:
        return f'<p class="meta">All {fmt_int(summary.get("lines"))} input lines parsed.</p>'
    head = (
        f'<h2 id="bad-lines">Bad input lines: {fmt_int(n)}</h2><p>These lines of the '
        f"{fmt_int(summary.get('lines'))} read could not be used and are left out of every table "
        "(all of them are in <code>bad_lines.csv</code>).</p>"
    )
    return head + html_table(
        [("file", "file", fmt_text, ""), ("line", "line", fmt_int, "n"), ("reason", "reason", fmt_text, "")], rows
    )
