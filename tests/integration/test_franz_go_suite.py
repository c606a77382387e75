"""franz-go's own integration tests, three ways against the session's cluster: directly, through the proxy
without tenancy, and through a virtual cluster (client id `kgo`, franz-go's default, bound to a VC).

A test (or subtest) that passes directly must pass through the proxy and through the VC: a failure, a
skip (the proxy hid a feature) or a hang (the per-test limit in tests/integration/franz_go.py) fails this
test with the log's tail. `make compat` runs this module alone and prints the table of docs/compatibility.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from vcproxy_tools.process import ProxyProcess, proxy_config

from . import franz_go
from .ports import free_port_block
from .tenants import tenancy_config

WAYS = franz_go.WAYS
# Every way at once for `make compat` (its table shows all three); else the proxy ways, and the direct one only where
# they do not match franz_go.REFERENCE.
ALWAYS_DIRECT = bool(os.environ.get(franz_go.ALWAYS_DIRECT_ENV))
QUEUED = WAYS if ALWAYS_DIRECT else [way for way in WAYS if way != "direct"]


def queued(test: str) -> list[str]:
    """The ways `test` runs in this session (franz_go.VC_ONLY: the VC way alone, but in `make compat`)."""
    return [way for way in QUEUED if ALWAYS_DIRECT or test not in franz_go.VC_ONLY or way != "proxy"]


# Two lanes of franz-go test processes. The heavy tests (franz_go.HEAVY: thousands of records, dozens of clients)
# run one process at a time: their three ways at once kept both cores saturated for minutes, group members went
# unheard past their session timeouts, and each way ran slower than the three in a row do. The light tests (mostly
# waiting on timers) run two at a time beside them.
LIGHT_WORKERS = 2


@pytest.fixture(scope="module")
def kgo_binary() -> Path:
    return franz_go.built()


# franz-go's ETL tests open about 650 connections each, all from 127.0.0.1 here: more than the proxy's
# per-address default (limits.max_connections_per_ip, 1000) once two run at once. A broker has no such
# default; an operator whose clients share one address raises it as these proxies do.
LIMITS = {"max_connections_per_ip": 20000}


@pytest.fixture(scope="module")
def kgo_proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    config = proxy_config(kafka_cluster.bootstrap, free_port_block(), limits=LIMITS)
    process = ProxyProcess(config, tmp_path_factory.mktemp("kgo-proxy"), name="kgo-proxy").start(timeout=120)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def kgo_vc_proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    vcs = [{"name": "kgo", "client_ids": ["kgo"]}]
    config = tenancy_config(kafka_cluster, free_port_block(), vcs, limits=LIMITS)
    process = ProxyProcess(config, tmp_path_factory.mktemp("kgo-vc"), name="kgo-vc").start(timeout=120)
    yield process
    process.stop()


@dataclass
class Suite:
    binary: Path
    seeds: dict[str, str]  # way -> bootstrap
    logdir: Path
    runs: dict[tuple[str, str], Future[franz_go.Run]]  # (test, way) -> its run

    def rerun(self, test: str, way: str, why: str) -> franz_go.Run:
        again = franz_go.run(self.binary, test, way, self.seeds[way], self.logdir, attempt=2)
        again.note = f"run 2, after {why}"
        return again


@pytest.fixture(scope="module")
def suite(kafka_cluster, kgo_proxy, kgo_vc_proxy, kgo_binary, tmp_path_factory) -> Iterator[Suite]:
    """Every (test, way) run, queued at once in two lanes, longest tests first: the heavy ones one after
    another, the light ones beside them (each process has its own time limit, so a hang ends in minutes)."""
    seeds = {"direct": kafka_cluster.bootstrap, "proxy": kgo_proxy.bootstrap, "virtual cluster": kgo_vc_proxy.bootstrap}
    logdir = tmp_path_factory.mktemp("kgo-logs")
    order = sorted(franz_go.TESTS, key=lambda t: -franz_go.TESTS[t])
    with ThreadPoolExecutor(1) as heavy, ThreadPoolExecutor(LIGHT_WORKERS) as light:
        runs = {
            (test, way): (heavy if test in franz_go.HEAVY else light).submit(
                franz_go.run, kgo_binary, test, way, seeds[way], logdir
            )
            for test in order
            for way in queued(test)
        }
        yield Suite(kgo_binary, seeds, logdir, runs)


@pytest.mark.parametrize("test", list(franz_go.TESTS))
def test_franz_go(test, suite, kgo_proxy, kgo_vc_proxy, request):
    by_way = {way: suite.runs[test, way].result() for way in queued(test)}
    try:
        _verdict(test, by_way, suite, kgo_proxy, kgo_vc_proxy)
    finally:  # the row, reruns included, for the table (tests/conftest.py), whatever the verdict; not through
        # record_property, which warns (an error here) under --junitxml's default family, xunit2
        request.node.user_properties.append(franz_go.row_property(test, by_way))


def _verdict(
    test: str, by_way: dict[str, franz_go.Run], suite: Suite, kgo_proxy: ProxyProcess, kgo_vc_proxy: ProxyProcess
) -> None:
    if "direct" not in by_way:
        expected = franz_go.reference(test)
        if not any(franz_go.differences(expected, by_way[way]) for way in by_way):
            by_way["direct"] = expected
            return
        # A proxy way did not pass as the reference says: the direct run decides whose the failure is.
        by_way["direct"] = franz_go.run(suite.binary, test, "direct", suite.seeds["direct"], suite.logdir)
    elif by_way["direct"].status in ("PASS", "SKIP"):  # make compat: the reference still holds
        off = franz_go.off_reference(test, by_way["direct"])
        assert not off, f"the direct run of {test}:\n" + "\n".join(off)
    direct = by_way["direct"]
    if direct.status not in ("PASS", "SKIP"):
        # franz-go's own timing can fail a test on a loaded machine, directly: the baseline gets one more
        # try (alone). The other ways only after a race franz-go's tests name (franz_go.KNOWN_RACES): an
        # intermittent failure through the proxy is what we hunt.
        direct = by_way["direct"] = suite.rerun(test, "direct", f"{direct.status}")
    assert direct.status in ("PASS", "SKIP"), f"{test} does not pass directly, twice:\n{direct.tail()}"
    problems = []
    for way, process in (("proxy", kgo_proxy), ("virtual cluster", kgo_vc_proxy)):
        if way not in by_way:  # not run this session (franz_go.VC_ONLY)
            continue
        if franz_go.differences(direct, by_way[way]) and (race := by_way[way].known_race()):
            by_way[way] = suite.rerun(test, way, race)
        found = franz_go.differences(direct, by_way[way])
        if found:
            problems.append("\n".join(found) + f"\n--- {way} log:\n{by_way[way].tail()}\n--- proxy log:\n")
            problems.append(process.log_tail(lines=30))
    assert not problems, "\n".join(problems)
