import math

import pytest

from vcproxy_tools.bench_results import (
    METRICS,
    ParseError,
    Row,
    cpu_seconds_per_gb,
    format_table,
    format_verdicts,
    mode_order,
    parse_consumer_perf,
    parse_e2e_latency,
    parse_proc_stat_ticks,
    parse_proc_stat_times,
    parse_proc_status_kib,
    parse_producer_perf,
    parse_system_busy_ticks,
    round_ratios,
    summarize,
    verdicts,
)

# Captured from Kafka 4.2.0 tools (ProducerPerformance, ConsumerPerformance, EndToEndLatency).
PRODUCER_OUT = """\
31321 records sent, 6261.7 records/sec (6.11 MB/sec), 1546.0 ms avg latency, 1942.0 ms max latency.
50000 records sent, 8025.682183 records/sec (7.84 MB/sec), 1708.99 ms avg latency, 2159.00 ms max latency, \
1776 ms 50th, 2121 ms 95th, 2146 ms 99th, 2155 ms 99.9th.
"""

PRODUCER_WARMUP_OUT = """\
Warmup first 1000 records. Steady state results will print after the complete test summary.
In steady state.
4991 records sent, 997.8 records/sec (0.97 MB/sec), 7.2 ms avg latency, 45.0 ms max latency.
6000 records sent, 995.850622 records/sec (0.97 MB/sec), 48.14 ms avg latency, 766.00 ms max latency, \
7 ms 50th, 357 ms 95th, 387 ms 99th, 423 ms 99.9th.
5000 steady state records sent, 994.233446 records/sec (0.97 MB/sec), 7.23 ms avg latency, 45.00 ms max latency, \
7 ms 50th, 14 ms 95th, 34 ms 99th, 44 ms 99.9th.
"""

CONSUMER_OUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, \
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-22 00:41:16:294, 2026-11-22 00:41:18:440, 195.6152, 91.1534, 200310, 93341.0997, 743, 1403, 139.4264, \
142772.6301
"""

E2E_OUT = """\
0\t235.126901
1000\t1.434424
Avg latency: 3.8863 ms
Percentiles: 50th = 1, 99th = 28, 99.9th = 57
"""

PROC_STAT = (
    "4537 (vcproxy serve) S 4530 4530 7032 0 -1 4194304 9123 0 0 0 1234 567 0 0 20 0 1 0 100051 "
    "79148000 17921 18446744073709551615 1 1 0 0 0 0 0 16781312 16386 0 0 0 17 1 0 0 0 0 0"
)


def test_producer_final_line_wins_over_progress_lines():
    r = parse_producer_perf(PRODUCER_OUT)
    assert r.records == 50000
    assert r.records_per_sec == pytest.approx(8025.682183)
    assert r.mb_per_sec == pytest.approx(7.84)
    assert (r.avg_ms, r.max_ms) == (pytest.approx(1708.99), 2159.0)
    assert (r.p50_ms, r.p95_ms, r.p99_ms, r.p999_ms) == (1776, 2121, 2146, 2155)


def test_producer_steady_state_line_wins_after_warmup():
    r = parse_producer_perf(PRODUCER_WARMUP_OUT)
    assert r.steady_state
    assert r.records == 5000
    assert r.avg_ms == pytest.approx(7.23)
    assert (r.p50_ms, r.p95_ms, r.p99_ms, r.p999_ms) == (7, 14, 34, 44)
    assert not parse_producer_perf(PRODUCER_OUT).steady_state


def test_producer_ignores_surrounding_noise():
    noisy = "WARNING: something deprecated\n" + PRODUCER_OUT + "\nsome metrics line\n"
    assert parse_producer_perf(noisy).records == 50000


def test_producer_without_summary_is_an_error():
    with pytest.raises(ParseError):
        parse_producer_perf(PRODUCER_OUT.splitlines()[0])
    with pytest.raises(ParseError):
        parse_producer_perf("")


def test_consumer_row():
    r = parse_consumer_perf(CONSUMER_OUT)
    assert r.mb == pytest.approx(195.6152)
    assert r.mb_per_sec == pytest.approx(91.1534)
    assert r.records == 200310
    assert r.records_per_sec == pytest.approx(93341.0997)
    assert (r.rebalance_ms, r.fetch_ms) == (743, 1403)
    assert r.fetch_mb_per_sec == pytest.approx(139.4264)
    assert r.fetch_records_per_sec == pytest.approx(142772.6301)
    assert r.bytes == round(195.6152 * 1024 * 1024)


def test_consumer_with_log_lines_and_nan():
    text = "[2026-11-22 00:41:16] WARN noise, with, commas\n" + CONSUMER_OUT.replace("139.4264", "NaN")
    r = parse_consumer_perf(text)
    assert math.isnan(r.fetch_mb_per_sec)
    assert r.records == 200310


@pytest.mark.parametrize(
    "text",
    [
        "",
        "start.time, end.time, data.consumed.in.MB\n",
        CONSUMER_OUT.splitlines()[0],
        "2026-11-22 00:41:16:294, 1, 2\n",
    ],
)
def test_consumer_bad_output(text):
    with pytest.raises(ParseError):
        parse_consumer_perf(text)


def test_e2e():
    r = parse_e2e_latency(E2E_OUT)
    assert r.avg_ms == pytest.approx(3.8863)
    assert (r.p50_ms, r.p99_ms, r.p999_ms) == (1, 28, 57)


def test_e2e_missing_percentiles():
    with pytest.raises(ParseError):
        parse_e2e_latency("Avg latency: 3.8863 ms\n")


def test_proc_stat_ticks():
    assert parse_proc_stat_ticks(PROC_STAT) == 1234 + 567
    assert parse_proc_stat_times(PROC_STAT) == (1234, 567)
    # a command name with spaces and parentheses must not shift the fields
    tricky = PROC_STAT.replace("(vcproxy serve)", "(a) b (c))")
    assert parse_proc_stat_ticks(tricky) == 1234 + 567
    with pytest.raises(ParseError):
        parse_proc_stat_ticks("garbage")


def test_proc_status():
    status = "Name:\tpython3\nVmPeak:\t  200000 kB\nVmHWM:\t   89012 kB\nThreads:\t1\n"
    assert parse_proc_status_kib(status, "VmHWM") == 89012
    assert parse_proc_status_kib(status, "VmRSS") is None


def test_cpu_per_gb():
    assert cpu_seconds_per_gb(2.0, 500_000_000) == pytest.approx(4.0)
    assert math.isnan(cpu_seconds_per_gb(1.0, 0))


def test_mode_order_alternates():
    assert [mode_order(r) for r in (1, 2, 3, 4)] == [
        ("direct", "proxy"),
        ("proxy", "direct"),
        ("direct", "proxy"),
        ("proxy", "direct"),
    ]


def _runs(**metrics: list[float]) -> list[dict[str, float]]:
    n = len(next(iter(metrics.values())))
    return [{k: v[i] for k, v in metrics.items()} for i in range(n)]


def test_summarize_uses_medians_and_drops_empty_rows():
    direct = _runs(producer_mb_s=[100.0, 80.0, 120.0], fixed_p99_ms=[5.0, 9.0, 6.0])
    proxied = _runs(
        producer_mb_s=[95.0, 50.0, 99.0], fixed_p99_ms=[7.0, 8.0, 30.0], proxy_cpu_s_per_gb_produce=[3.0, 5.0, 4.0]
    )
    rows = {r.metric.key: r for r in summarize(direct, proxied)}
    assert set(rows) == {"producer_mb_s", "fixed_p99_ms", "proxy_cpu_s_per_gb_produce"}
    assert (rows["producer_mb_s"].direct, rows["producer_mb_s"].proxy) == (100.0, 95.0)
    assert rows["producer_mb_s"].ratio == pytest.approx(0.95)
    assert rows["proxy_cpu_s_per_gb_produce"].direct is None
    assert rows["proxy_cpu_s_per_gb_produce"].ratio is None
    # order follows METRICS
    keys = [m.key for m in METRICS]
    assert list(rows) == sorted(rows, key=keys.index)


def test_verdicts():
    direct = _runs(producer_mb_s=[100.0], consumer_mb_s=[200.0], fixed_p99_ms=[6.0])
    proxied = _runs(producer_mb_s=[90.0], consumer_mb_s=[150.0], fixed_p99_ms=[8.5])
    result = verdicts(summarize(direct, proxied))
    assert [v.passed for v in result] == [True, False, False]
    text = format_verdicts(result)
    assert text.splitlines()[0].startswith("PASS  producer throughput >= 0.9x direct: 0.90x")
    assert "MISS  consumer throughput >= 0.8x direct: 0.75x" in text
    assert "+2.5 ms" in text


def test_verdicts_not_measured():
    assert [v.passed for v in verdicts([])] == [None, None, None]


def test_format_table_aligns_and_marks_missing():
    direct = _runs(producer_mb_s=[100.0], producer_rec_s=[102400.0])
    proxied = _runs(producer_mb_s=[90.0], producer_rec_s=[92160.0], proxy_cpu_s_per_gb_produce=[4.2])
    table = format_table(summarize(direct, proxied)).splitlines()
    assert table[0].startswith("metric")
    assert len({len(line) for line in table[:2]}) == 1
    assert table[2].split() == ["producer", "MB/s", "100.0", "90.0", "0.90"]
    assert table[3].split() == ["producer", "records/s", "102,400", "92,160", "0.90"]
    assert table[4].split()[-3:] == ["-", "4.20", "-"]


def test_row_ratio_with_zero_direct():
    assert Row(METRICS[0], 0.0, 1.0).ratio is None


def test_system_busy_ticks():
    stat = "cpu  163846 7 15391 116550 665 3 1224 5682 0 0\ncpu0 81923 0 7695 58275 332 0 612 2841 0 0\n"
    assert parse_system_busy_ticks(stat) == 163846 + 7 + 15391 + 3 + 1224 + 5682
    with pytest.raises(ParseError):
        parse_system_busy_ticks("intr 1 2 3\n")


def test_round_ratios_pair_runs_of_the_same_round():
    direct = [{"round": 1, "x": 100.0}, {"round": 2, "x": 50.0}, {"round": 3, "x": 0.0}]
    proxied = [{"round": 2, "x": 45.0}, {"round": 1, "x": 110.0}, {"round": 3, "x": 1.0}, {"round": 4, "x": 9.0}]
    assert round_ratios(direct, proxied, "x") == pytest.approx((0.9, 1.1))
    assert round_ratios(direct, proxied, "missing") == ()


def test_format_table_shows_per_round_range():
    direct = [{"round": 1, "producer_mb_s": 100.0}, {"round": 2, "producer_mb_s": 80.0}]
    proxied = [{"round": 1, "producer_mb_s": 90.0}, {"round": 2, "producer_mb_s": 84.0}]
    table = format_table(summarize(direct, proxied)).splitlines()
    assert table[0].split()[-2:] == ["per", "round"]
    assert table[2].split()[-1] == "0.90..1.05"
