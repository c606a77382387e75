"""`vcproxy bench` with several variants (direct, proxy with tracing off, proxy with tracing on):
the variant list, the rotation, the ratios, the table, and reading results files old and new."""

import json
import math

import pytest

from vcproxy_tools.bench import Bench, report_file, trace_output, tracing_section
from vcproxy_tools.bench_results import (
    DEFAULT_VARIANTS,
    Variant,
    comparisons,
    count_spans,
    format_variant_table,
    mode_order,
    parse_variants,
    rows_from_doc,
    summarize,
    summarize_variants,
    summary_json,
    variants_of,
    verdicts,
)

ALL3 = ("direct", "proxy", "proxy-traced")


def test_parse_variants_default_and_ratios():
    assert parse_variants(DEFAULT_VARIANTS) == (
        Variant("direct"),
        Variant("proxy"),
        Variant("proxy-traced", 1.0),
    )
    v = parse_variants(" proxy-traced-0.01 , direct,proxy-traced-.5")
    assert [(x.name, x.sample_ratio) for x in v] == [
        ("proxy-traced-0.01", 0.01),
        ("direct", None),
        ("proxy-traced-.5", 0.5),
    ]
    assert [x.proxied for x in v] == [True, False, True]
    (m,) = parse_variants("proxy-metrics")
    assert (m.metrics, m.sample_ratio, m.proxied) == (True, None, True)
    assert not any(x.metrics for x in parse_variants(DEFAULT_VARIANTS))


@pytest.mark.parametrize(
    "text",
    [
        "",
        " , ",
        "direct,direct",
        "proxy-metrics-0.1",
        "proxy-tracing",
        "proxy-traced-0",
        "proxy-traced-1.5",
        "proxy-traced-x",
        "kafka",
    ],
)
def test_parse_variants_rejects(text):
    with pytest.raises(ValueError):
        parse_variants(text)


def test_rotation_puts_each_variant_in_each_position_once():
    orders = [mode_order(r, ALL3) for r in (1, 2, 3)]
    assert orders[0] == ALL3
    assert orders == [ALL3, ("proxy", "proxy-traced", "direct"), ("proxy-traced", "direct", "proxy")]
    for position in range(3):
        assert {o[position] for o in orders} == set(ALL3)
    assert mode_order(4, ALL3) == ALL3
    # two variants: the old alternation
    assert mode_order(2, ("direct", "proxy")) == ("proxy", "direct")
    assert mode_order(1, ("direct",)) == ("direct",)


def test_comparisons():
    labels = [c.label for c in comparisons([*ALL3, "proxy-traced-0.1"])]
    assert labels == [
        "proxy/direct",
        "proxy-traced/direct",
        "proxy-traced-0.1/direct",
        "proxy-traced/proxy",
        "proxy-traced-0.1/proxy",
    ]
    assert [c.label for c in comparisons(["proxy", "proxy-traced"])] == ["proxy-traced/proxy"]
    assert [c.label for c in comparisons(["direct", "proxy-traced"])] == ["proxy-traced/direct"]
    assert comparisons(["direct"]) == []
    assert [c.label for c in comparisons(["direct", "proxy", "proxy-metrics"])] == [
        "proxy/direct",
        "proxy-metrics/direct",
        "proxy-metrics/proxy",
    ]


def _run(round_no, mode, **metrics):
    return {"round": round_no, "mode": mode, **metrics}


RUNS = [
    _run(1, "direct", producer_mb_s=100.0, fixed_p99_ms=8.0),
    _run(1, "proxy", producer_mb_s=80.0, fixed_p99_ms=9.0, proxy_cpu_s_per_gb_produce=2.0),
    _run(1, "proxy-traced", producer_mb_s=60.0, fixed_p99_ms=10.0, proxy_cpu_s_per_gb_produce=4.0),
    _run(2, "proxy", producer_mb_s=90.0, fixed_p99_ms=9.0, proxy_cpu_s_per_gb_produce=2.2),
    _run(2, "proxy-traced", producer_mb_s=81.0, fixed_p99_ms=12.0, proxy_cpu_s_per_gb_produce=4.4),
    _run(2, "direct", producer_mb_s=120.0, fixed_p99_ms=6.0),
    _run(3, "proxy-traced", producer_mb_s=70.0, fixed_p99_ms=11.0, proxy_cpu_s_per_gb_produce=math.nan),
    _run(3, "direct", producer_mb_s=110.0, fixed_p99_ms=7.0),
    _run(3, "proxy", producer_mb_s=70.0, fixed_p99_ms=10.0, proxy_cpu_s_per_gb_produce=2.1),
]


def test_summarize_variants_medians_and_ratios():
    rows = {r.metric.key: r for r in summarize_variants(RUNS, ALL3)}
    assert list(rows) == ["producer_mb_s", "fixed_p99_ms", "proxy_cpu_s_per_gb_produce"]
    mb = rows["producer_mb_s"]
    assert dict(mb.values) == {"direct": 110.0, "proxy": 80.0, "proxy-traced": 70.0}
    assert mb.ratios["proxy/direct"].value == pytest.approx(80 / 110)
    assert mb.ratios["proxy-traced/direct"].value == pytest.approx(70 / 110)
    assert mb.ratios["proxy-traced/proxy"].value == pytest.approx(70 / 80)
    # per round, in the order of the numerator's runs
    assert mb.ratios["proxy-traced/proxy"].round_ratios == pytest.approx((60 / 80, 81 / 90, 70 / 70))
    cpu = rows["proxy_cpu_s_per_gb_produce"]
    assert cpu.values["direct"] is None
    assert cpu.values["proxy-traced"] == pytest.approx(4.2)  # the NaN run is left out
    assert cpu.ratios["proxy/direct"].value is None
    assert cpu.ratios["proxy-traced/proxy"].value == pytest.approx(4.2 / 2.1)
    assert cpu.ratios["proxy-traced/proxy"].round_ratios == pytest.approx((2.0, 2.0))


def test_pair_matches_the_two_variant_summary():
    """The verdicts and the old JSON fields still compare the untraced proxy with direct."""
    two = summarize([r for r in RUNS if r["mode"] == "direct"], [r for r in RUNS if r["mode"] == "proxy"])
    many = [r.pair() for r in summarize_variants(RUNS, ALL3)]
    assert many == two
    assert [v.passed for v in verdicts(many)] == [False, None, True]


def test_variant_table():
    lines = format_variant_table(summarize_variants(RUNS, ALL3), ALL3).splitlines()
    assert lines[0].split() == [
        "metric",
        "(median",
        "of",
        "rounds)",
        "direct",
        "proxy",
        "proxy-traced",
        "proxy/direct",
        "proxy-traced/direct",
        "proxy-traced/proxy",
    ]
    assert len({len(line) for line in lines[:2]}) == 1
    assert lines[2].split() == [
        "producer",
        "MB/s",
        "110.0",
        "80.0",
        "70.0",
        "0.73",
        "(0.64-0.80)",
        "0.64",
        "(0.60-0.68)",
        "0.88",
        "(0.75-1.00)",
    ]
    assert lines[4].split()[-7:] == ["-", "2.10", "4.20", "-", "-", "2.00", "(2.00-2.00)"]


def test_summary_json_keeps_the_old_fields():
    doc = summary_json(summarize_variants(RUNS, ALL3))
    first = doc[0]
    assert first["metric"] == "producer_mb_s"
    assert (first["direct"], first["proxy"]) == (110.0, 80.0)
    assert first["ratio"] == pytest.approx(80 / 110)
    assert first["round_ratios"] == pytest.approx([0.8, 0.75, 70 / 110])
    assert first["values"]["proxy-traced"] == 70.0
    assert first["ratios"]["proxy-traced/proxy"]["ratio"] == pytest.approx(70 / 80)
    json.dumps(doc)  # serializable


OLD_DOC = {  # the shape `vcproxy bench --output` wrote before variants (abridged)
    "options": {"rounds": 2},
    "summary": [{"metric": "producer_mb_s", "direct": 110.0, "proxy": 85.0, "ratio": 0.77, "round_ratios": []}],
    "runs": [
        {"round": 1, "mode": "direct", "producer_mb_s": 100.0, "consumer_mb_s": 300.0},
        {"round": 1, "mode": "proxy", "producer_mb_s": 80.0, "consumer_mb_s": 250.0},
        {"round": 2, "mode": "proxy", "producer_mb_s": 90.0, "consumer_mb_s": 240.0},
        {"round": 2, "mode": "direct", "producer_mb_s": 120.0, "consumer_mb_s": 320.0},
    ],
}


def test_old_results_file_is_readable():
    assert variants_of(OLD_DOC) == ["direct", "proxy"]
    variants, rows = rows_from_doc(OLD_DOC)
    assert variants == ["direct", "proxy"]
    mb = rows[0]
    assert (mb.metric.key, mb.values["direct"], mb.values["proxy"]) == ("producer_mb_s", 110.0, 85.0)
    assert mb.ratios["proxy/direct"].round_ratios == pytest.approx((0.8, 0.75))


def test_variants_of_prefers_the_recorded_list_and_orders_old_runs_direct_first():
    assert variants_of({"variants": [{"name": "proxy", "sample_ratio": None}, {"name": "direct"}]}) == [
        "proxy",
        "direct",
    ]
    assert variants_of({"runs": [{"mode": "proxy"}, {"mode": "direct"}]}) == ["direct", "proxy"]


def test_results_file_round_trip(tmp_path):
    runs = [{**r, "missing": None} for r in RUNS]  # NaN and None survive json
    doc = {"variants": [{"name": n} for n in ALL3], "runs": runs}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    text = report_file(path)
    assert "proxy-traced/proxy" in text.splitlines()[0]
    assert "MISS  producer throughput >= 0.9x direct: 0.73x (80.0 vs 110.0 MB/s)" in text
    with pytest.raises(ValueError):
        rows_from_doc({"runs": []})


def test_count_spans_ignores_parent_ids():
    line = (
        '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"ab","spanId":"01","parentSpanId":"02"},'
        '{"traceId":"cd","spanId":"03"}]}]}]}'
    )
    assert count_spans(line) == 2
    assert count_spans("") == 0


def test_trace_output_counts_rotated_files(tmp_path):
    (tmp_path / "traces.jsonl").write_text('{"spanId":"a"}\n{"spanId":"b"}\n')
    (tmp_path / "traces.jsonl.1").write_text('{"spanId":"c"}\n')
    (tmp_path / "other.txt").write_text('{"spanId":"d"}\n')
    out = trace_output(tmp_path)
    assert out["spans"] == 3
    assert out["files"] == 2
    assert out["bytes"] == len('{"spanId":"a"}\n{"spanId":"b"}\n') + len('{"spanId":"c"}\n')


def test_tracing_section_is_a_valid_proxy_config(tmp_path):
    from proxy.config import TracingConfig

    section = tracing_section(Variant("proxy-traced-0.1", 0.1), tmp_path)
    cfg = TracingConfig(**section)
    assert cfg.enabled
    assert cfg.sample_ratio == 0.1
    assert cfg.jsonl_dir == str(tmp_path)
    assert cfg.otlp_endpoint is None


@pytest.mark.parametrize("mode", ["proxy", "proxy-traced", "proxy-traced-0.1"])
def test_cpu_metrics_for_every_proxied_variant(mode):
    used = {"wall": 10.0, "system": 15.0, "tool": 6.0, "broker": 5.0, "proxy": 2.0, "proxy_kernel": 0.5}
    used["proxies"] = 2.5  # the idle proxies of the other variants took 0.5 s
    res: dict[str, float] = {}
    Bench._cpu_metrics(res, used, mode, "produce", 500_000_000, 4.0)
    assert res["proxy_cpu_s_per_gb_produce"] == pytest.approx(4.0)
    assert res["proxy_core_util_produce"] == pytest.approx(50.0)
    assert res["proxy_kernel_pct_produce"] == pytest.approx(25.0)
    assert res["background_cores_produce"] == pytest.approx((15.0 - 5.0 - 2.5 - 6.0) / 10.0)


def test_cpu_metrics_direct_has_no_proxy_figures():
    used = {"wall": 10.0, "system": 12.0, "tool": 6.0, "broker": 5.0, "proxies": 0.0}
    res: dict[str, float] = {}
    Bench._cpu_metrics(res, used, "direct", "consume", 500_000_000, 4.0)
    assert not [k for k in res if k.startswith("proxy_")]
    assert res["broker_cpu_s_per_gb_consume"] == pytest.approx(10.0)
