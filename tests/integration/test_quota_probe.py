"""Quotas that hold against any client: the pipelining probe (benchmarks/quota_probe.py) through the real proxy (2
workers, the forwarder on and off) in front of the real Kafka, with raw protocol clients.

One user keeps 100 requests in flight on each of 1 or 4 connections, then a fresh connection of the same user does
the same: Fetch under a consumer_byte_rate (max_bytes 1 MiB), Produce under a producer_byte_rate, Metadata under a
request_rate. What the user got in all is within 10% of quota x (time + one window), and the fresh connection gets no
fresh budget. The issue asks for 60 s; here the flood lasts SECONDS and the fresh connection FRESH (the bound is
still one window against 14, where the escape it guards against measured 17-21 times the quota);
`benchmarks/quota_probe.py --seconds 60` runs the full probe (docs/quotas.md has its figures).
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks import quota_probe
from benchmarks.quota_probe import QUOTAS, ProxyProcess, Topic

from .ports import free_port, free_port_block
from .tenants import assert_clean_log

SECONDS, FRESH = 10.0, 3.0
KINDS = ("fetch", "produce", "request")
COUNTS = (1, 4)


@pytest.fixture(scope="module", params=["forwarder on", "forwarder off"])
def proxy(request, kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    forwarder = request.param == "forwarder on"
    users = [f"{kind}{n}" for kind in KINDS for n in COUNTS] + ["credited"]
    config = quota_probe.config(kafka_cluster.bootstrap, free_port_block(), free_port(), users)
    workdir = tmp_path_factory.mktemp("quota-probe")
    process = quota_probe.start(config, workdir, "probe-on" if forwarder else "probe-off", forwarder)
    yield process
    assert process.stop(timeout=60) == 0, process.log_tail(lines=60)
    assert_clean_log(process)


@pytest.fixture(scope="module")
def topic(proxy) -> Topic:
    return quota_probe.make_topic(proxy.bootstrap, 4 << 20)


def forwarded(proxy: ProxyProcess) -> dict[str, float]:
    """vcproxy_forwarded_requests by API, both workers together."""
    port = proxy.config["metrics"]["port"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out: dict[str, float] = {}
    for api, value in re.findall(r'^vcproxy_forwarded_requests_total\{[^}]*api="(\w+)"[^}]*\} ([0-9.e+]+)', text, re.M):
        out[api] = out.get(api, 0.0) + float(value)
    return out


@pytest.mark.parametrize("connections", COUNTS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_pipelining_client_gets_its_quota_and_no_more(proxy: Any, topic: Topic, kind: str, connections: int):
    user = f"{kind}{connections}"
    key, quota = QUOTAS[kind]
    quota_probe.set_quota(proxy.bootstrap, user, key, quota)
    quota_probe.wait_for_quota(proxy.bootstrap, user, key)
    before = forwarded(proxy)
    result = quota_probe.probe(kind, topic, user, connections, SECONDS, FRESH)
    after = forwarded(proxy)
    print(f"{proxy.log_path.stem}: {result.line()}; forwarded { ({k: after[k] - before.get(k, 0) for k in after}) }")
    assert not result.errors, result.errors
    # Held: within 10% of the quota over the whole time, plus one window (what the first requests may take).
    assert result.got <= 1.1 * result.bound, result.line()
    # And served: the quota is given, not withheld (a loaded machine may leave it somewhat short).
    assert result.got >= 0.6 * quota * result.seconds, result.line()
    # A fresh connection of the same user gets no budget of its own: what it got is the quota's, not more.
    assert result.fresh_got <= 1.1 * quota * (FRESH + quota_probe.WINDOW), result.line()
    # The client is told (KIP-219): the throttle time in the answers.
    assert result.throttle_ms > 0, result.line()


CREDIT = 3.0  # seconds of the quota a consumer idle that long may spend at once (its bucket fills up to 11 s)


def test_a_consumer_with_credit_pipelining_on_the_forwarder_is_held_too(proxy: Any, topic: Topic):
    """A consumer whose quota holds credit goes to the forwarder (with the forwarder on) with an allowance; pipelining
    100 Fetches there, it gets no more than on the Python path: each Fetch goes once the answer before it was charged,
    bounded by what the allowance holds (it once sent all 100 while anything was left)."""
    key, quota = QUOTAS["fetch"]
    quota_probe.set_quota(proxy.bootstrap, "credited", key, quota)
    quota_probe.wait_for_quota(proxy.bootstrap, "credited", key)
    first = quota_probe.Flow()
    quota_probe.pipeline("fetch", topic, "credited", time.monotonic() + 0.5, 1, first)  # its meter, on both workers
    quota_probe.pipeline("fetch", topic, "credited", time.monotonic() + 0.5, 1, first)
    assert first.got and not first.errors, first
    time.sleep(CREDIT)  # idle: the credit this test is about
    before = forwarded(proxy)
    result = quota_probe.probe("fetch", topic, "credited", 1, SECONDS, FRESH)
    fetches = forwarded(proxy).get("Fetch", 0.0) - before.get("Fetch", 0.0)
    print(f"{proxy.log_path.stem}: {result.line()}; Fetch requests forwarded {fetches:.0f}")
    assert not result.errors, result.errors
    assert result.got <= 1.1 * quota * (result.seconds + CREDIT + quota_probe.WINDOW), result.line()
    if proxy.log_path.stem == "probe-on":
        assert fetches > 0  # the forwarder served some of them
