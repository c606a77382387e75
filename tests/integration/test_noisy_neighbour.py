"""The standing noisy-neighbour check (issue 56), the suite's share of it: one tenant's TLS flood beside another
tenant's steady producer and consumer, through the real proxy in front of the session's Kafka, with the forwarder on
and, in the same test, off (each connection its own Trio task).

The floods are the two the issue found worst on the forwarder: two connections of pipelined acks=0 Produce (256
KiB batches), and answers handed to the Python path (session-opening Fetch and Metadata of every topic). What the
suite asserts is what a loaded 2-core machine cannot blur: the victim is served right and keeps going, no round
trip stalls for seconds, and its p99 stays within a wide bound of the forwarder-off arm's. The issue's tight
targets (1.5x) are the benchmark's to report: benchmarks/noisy_neighbour.py, docs/performance.md."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.noisy_neighbour import (
    Endpoint,
    Measured,
    Topic,
    make_certificates,
    measure,
    prepare,
    proxy_settings,
    start_proxy,
)

from .ports import free_port_block
from .tenants import assert_clean_log

SECONDS, INTERVAL = 3.0, 0.01  # the victim's measured time per arm, and its pace (one Produce and one Fetch)


@pytest.fixture(scope="module")
def arms(kafka_cluster, tmp_path_factory) -> Iterator[dict[str, tuple[Endpoint, Topic]]]:
    """Two TLS proxies with alice's (team-a) and bob's (team-b) virtual clusters: the forwarder on, and off."""
    work = tmp_path_factory.mktemp("noisy")
    certificates = make_certificates(work / "certs")
    proxies, out = [], {}
    try:
        for arm in ("off", "on"):
            port = free_port_block()
            proxies.append(
                start_proxy(proxy_settings(kafka_cluster.bootstrap, port, certificates), work, arm, on=arm == "on")
            )
            endpoint = Endpoint(f"127.0.0.1:{port}", certificates.cafile)
            out[arm] = (endpoint, prepare(endpoint, metadata_topics=3))
        yield out
    finally:
        for proxy in proxies:
            proxy.stop()
    for proxy in proxies:  # a flood is no reason for a traceback or an ERROR
        assert_clean_log(proxy)


def describe(r: Measured) -> str:
    return (
        f"{r.arm}: p50 {r.p50 * 1e3:.1f} ms, p99 {r.p99 * 1e3:.1f} ms, max {r.max * 1e3:.0f} ms, "
        f"{r.stalls} stalls, {r.ticks}/{r.expected_ticks} rounds; flood {r.tally}"
    )


@pytest.mark.parametrize(
    ("flood", "least"),
    [("produce-2", {"bytes_out": 20 << 20}), ("handoff", {"answers": 50})],
)
def test_a_tls_flood_leaves_another_tenant_served(arms, flood, least):
    seen = {arm: measure(flood, arm, *arms[arm], SECONDS, INTERVAL, lead=2.0) for arm in ("off", "on")}
    report = "\n".join(describe(r) for r in seen.values())
    print(f"{flood} (TLS), bob's round trips:\n{report}")
    for r in seen.values():
        # The flood flooded, in both arms: no connection of it failed and it got real work done.
        assert r.tally.get("errors") == 0 and all(r.tally.get(k, 0) >= v for k, v in least.items()), report
        # Every one of bob's Produce was acknowledged and every Fetch returned the record just produced.
        assert r.errors == 0 and r.sessions_lost == 0, report
    on, off = seen["on"], seen["off"]
    # Not starved: the victim kept a good part of the pace it kept with the forwarder off (a halt keeps none).
    assert on.ticks >= 0.25 * off.ticks, report
    # No round trip of bob's stalls for seconds (unless the machine stalled the forwarder-off arm as long).
    assert on.max < max(2.0, 2 * off.max), report
    # Far from the forwarder-off arm's p99 is a regression whatever the machine's load; within 1.5x is the target
    # the benchmark reports.
    assert on.p99 < max(4 * off.p99, off.p99 + 0.3), report
