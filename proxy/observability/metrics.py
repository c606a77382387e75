"""Prometheus metrics, kept as plain counters on the hot path and rendered at scrape time.

Every update happens on the Trio thread (connections, discovery), and so does the scrape (the
/metrics handler in http.py), so the counters are plain dict entries: a request costs a few dict
increments, no lock and no prometheus-client object. A custom collector turns them into metric
families when /metrics is read.

The requests the forwarder serves (proxy/net/forwarder.py) are counted on its own thread, in a native `Tally`
per (virtual cluster, cluster id) with the same buckets and error readings (proxy/core/forward_table.py); the
collector folds them into these counters first, so a scrape shows every request whichever path served it.

Label `vc` is the virtual cluster's name, or ``kafka-cluster`` (KIP-1134's name for the physical
cluster) for principals bound to none; `cluster_id` is that cluster's KIP-78 cluster id.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

PHYSICAL_VC = "kafka-cluster"
# Request latency buckets (seconds): sub-millisecond local answers up to long-polling fetches.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _Histogram:
    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0


class Metrics:
    def __init__(self) -> None:
        self.connections: defaultdict[tuple[str, str], int] = defaultdict(int)  # (listener, vc)
        self.connections_accepted: defaultdict[str, int] = defaultdict(int)  # listener
        self.requests: defaultdict[tuple[str, str, str], int] = defaultdict(int)  # (api, vc, cluster_id)
        self.errors: defaultdict[tuple[str, str, str, str], int] = defaultdict(int)  # + error_code
        self.local_answers: defaultdict[tuple[str, str, str], int] = defaultdict(int)  # (api, vc, error_code)
        self.durations: dict[tuple[str, str], _Histogram] = {}  # (api, vc)
        self.bytes_in: defaultdict[tuple[str, str], int] = defaultdict(int)  # (vc, cluster_id)
        self.bytes_out: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.auth_failures: defaultdict[str, int] = defaultdict(int)  # mechanism
        self.upstream_connected: dict[str, int] = {}  # node id -> 1 reachable / 0 not (last attempt)
        self.upstream_connections: defaultdict[str, int] = defaultdict(int)  # node id -> open connections
        self.readiness: Callable[[], tuple[bool, str]] | None = None  # set by the server (vcproxy_ready)
        self.quotas: Any = None  # the quota book (proxy/quotas/model.py), set by the first tenancy connection
        self.forwarded: defaultdict[tuple[str, str], int] = defaultdict(int)  # (api, vc): of `requests`
        self.tallies: dict[tuple[str, str], Any] = {}  # (vc, cluster_id) -> the forwarder's vcproxy_native.Tally
        self.api_names: dict[int, str] = {}  # set by Telemetry
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))  # type: ignore[arg-type]

    # -- updates (hot path) ---------------------------------------------------------------------

    def request(
        self, api: str, vc: str, cluster_id: str, seconds: float, bytes_in: int, bytes_out: int, errors: list[int]
    ) -> None:
        key = (api, vc, cluster_id)
        self.requests[key] += 1
        if errors:
            for code in set(errors):
                self.errors[(api, vc, cluster_id, str(code))] += 1
        histogram = self.durations.get((api, vc))
        if histogram is None:
            histogram = self.durations[(api, vc)] = _Histogram()
        histogram.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        histogram.sum += seconds
        vc_key = (vc, cluster_id)
        self.bytes_in[vc_key] += bytes_in
        self.bytes_out[vc_key] += bytes_out

    def tally(self, module: Any, vc: str, cluster_id: str) -> Any:
        """The native tally the forwarder counts a connection's requests in, for its labels now (one per label pair:
        few, as the VCs are)."""
        tally = self.tallies.get((vc, cluster_id))
        if tally is None:
            tally = self.tallies[(vc, cluster_id)] = module.Tally(BUCKETS)
        return tally

    def fold(self) -> None:
        """The forwarder's counts since the last fold, into the counters (at each scrape)."""
        for (vc, cluster_id), tally in self.tallies.items():
            apis, bytes_in, bytes_out = tally.drain()
            for key, requests, buckets, seconds, errors in apis:
                api = self.api_names.get(key) or str(key)
                self.requests[(api, vc, cluster_id)] += requests
                self.forwarded[(api, vc)] += requests
                for code, n in errors:
                    self.errors[(api, vc, cluster_id, str(code))] += n
                histogram = self.durations.get((api, vc))
                if histogram is None:
                    histogram = self.durations[(api, vc)] = _Histogram()
                histogram.counts = [a + b for a, b in zip(histogram.counts, buckets, strict=True)]
                histogram.sum += seconds
            if bytes_in or bytes_out:
                self.bytes_in[(vc, cluster_id)] += bytes_in
                self.bytes_out[(vc, cluster_id)] += bytes_out

    def local_answer(self, api: str, vc: str, error_code: str) -> None:
        """A request the proxy answered itself (never sent to a broker)."""
        self.local_answers[(api, vc, error_code)] += 1

    def connection_moved(self, listener: str, old_vc: str | None, new_vc: str | None) -> None:
        """A connection opened (old None), closed (new None) or was bound to a virtual cluster."""
        if old_vc is not None:
            key = (listener, old_vc)
            self.connections[key] -= 1
            if not self.connections[key]:
                del self.connections[key]
        else:
            self.connections_accepted[listener] += 1
        if new_vc is not None:
            self.connections[(listener, new_vc)] += 1

    def connection_routed(self, old_listener: str, new_listener: str, vc: str) -> None:
        """SNI: the TLS server name moved an open connection from the listener that accepted it (and
        keeps it in its accepted count: a counter never goes down) to a broker's."""
        self.connection_moved(old_listener, vc, None)
        self.connections[(new_listener, vc)] += 1

    def auth_failed(self, mechanism: str) -> None:
        self.auth_failures[mechanism] += 1

    def upstream_attempt(self, node_id: int, ok: bool) -> None:
        self.upstream_connected[str(node_id)] = int(ok)

    def upstream_open(self, node_id: int, delta: int) -> None:
        self.upstream_connections[str(node_id)] += delta

    # -- exposition -----------------------------------------------------------------------------

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Collector:
    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        m.fold()
        g = GaugeMetricFamily("vcproxy_connections", "Open client connections", labels=["listener", "vc"])
        for (listener, vc), n in sorted(m.connections.items()):
            g.add_metric([listener, vc], n)
        yield g
        c = CounterMetricFamily("vcproxy_connections_accepted", "Client connections accepted", labels=["listener"])
        for listener, n in sorted(m.connections_accepted.items()):
            c.add_metric([listener], n)
        yield c
        c = CounterMetricFamily(
            "vcproxy_requests", "Requests answered, by Kafka API and cluster", labels=["api", "vc", "cluster_id"]
        )
        for labels, n in sorted(m.requests.items()):
            c.add_metric(list(labels), n)
        yield c
        c = CounterMetricFamily(
            "vcproxy_forwarded_requests",
            "Of vcproxy_requests: those the forwarder served, off the interpreter (docs/architecture.md)",
            labels=["api", "vc"],
        )
        for labels, n in sorted(m.forwarded.items()):
            c.add_metric(list(labels), n)
        yield c
        c = CounterMetricFamily(
            "vcproxy_request_errors",
            "Responses carrying a non-zero Kafka error code (once per code per response)",
            labels=["api", "vc", "cluster_id", "error_code"],
        )
        for labels, n in sorted(m.errors.items()):
            c.add_metric(list(labels), n)
        yield c
        c = CounterMetricFamily(
            "vcproxy_local_answers",
            "Requests the proxy answered itself, never sent to a broker, by the answer's first error code "
            "(0: none); a client looping on a local answer shows here",
            labels=["api", "vc", "error_code"],
        )
        for labels, n in sorted(m.local_answers.items()):
            c.add_metric(list(labels), n)
        yield c
        h = HistogramMetricFamily(
            "vcproxy_request_duration_seconds",
            "Request frame read to response written, by Kafka API",
            labels=["api", "vc"],
        )
        for (api, vc), hist in sorted(m.durations.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*BUCKETS, float("inf")), hist.counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            h.add_metric([api, vc], buckets, hist.sum)
        yield h
        for name, doc, data in (
            ("vcproxy_bytes_in", "Request bytes from clients (frames)", m.bytes_in),
            ("vcproxy_bytes_out", "Response bytes to clients (frames)", m.bytes_out),
        ):
            c = CounterMetricFamily(name, doc, labels=["vc", "cluster_id"])
            for labels, n in sorted(data.items()):
                c.add_metric(list(labels), n)
            yield c
        c = CounterMetricFamily("vcproxy_auth_failures", "Failed client authentications", labels=["mechanism"])
        for mechanism, n in sorted(m.auth_failures.items()):
            c.add_metric([mechanism], n)
        yield c
        g = GaugeMetricFamily(
            "vcproxy_upstream_connected",
            "1 if the last connection attempt to this broker succeeded (node_id -1: bootstrap servers)",
            labels=["node_id"],
        )
        for node, ok in sorted(m.upstream_connected.items(), key=lambda kv: int(kv[0])):
            g.add_metric([node], ok)
        yield g
        g = GaugeMetricFamily(
            "vcproxy_upstream_connections", "Open upstream connections (node_id -1: bootstrap)", labels=["node_id"]
        )
        for node, n in sorted(m.upstream_connections.items(), key=lambda kv: int(kv[0])):
            g.add_metric([node], n)
        yield g
        if m.quotas is not None:
            yield from _quota_metrics(m.quotas.meters)
        ready = m.readiness()[0] if m.readiness is not None else False
        yield GaugeMetricFamily("vcproxy_ready", "1 when /readyz answers 200", value=int(ready))


def _quota_metrics(meters: Any) -> Iterator[Metric]:
    """Quota use and throttle time per metered entity (proxy/quotas/meter.py). Bounded like the meters:
    one series per entity that has a quota (VC, user, client id as the quota's level names them: a
    `users/<default>` quota is metered per user, not per client id) and per VC cap, at most
    MAX_METERS of them, least recently used dropped first."""
    labels = ["quota", "scope", "vc", "user", "client_id"]  # scope: "vc" (the VC's cap) or "client"
    use = GaugeMetricFamily(
        "vcproxy_quota_usage_ratio", "Measured rate over the quota (1 = at the quota), per quota entity", labels=labels
    )
    rate = GaugeMetricFamily("vcproxy_quota_rate", "Measured rate (bytes, requests or mutations per s)", labels=labels)
    throttle = CounterMetricFamily(
        "vcproxy_quota_throttle_seconds", "Throttle time given to clients over their quota", labels=labels
    )
    now = meters.clock()
    for key, meter in meters.items():
        # A VC cap's meter is (key, "vc", vc); a client's (key, vc, user, client id).
        values = [key[0], "vc", key[2], "", ""] if len(key) == 3 else [key[0], "client", *key[1:]]
        measured = meter.rate.rate(now)
        rate.add_metric(values, measured)
        if meter.quota:
            use.add_metric(values, measured / meter.quota)
        throttle.add_metric(values, meter.throttled)
    yield use
    yield rate
    yield throttle
    fleet = getattr(meters, "fleet", None)
    if fleet is not None:  # replicas share each quota (proxy/quotas/fleet.py)
        yield GaugeMetricFamily(
            "vcproxy_quota_share",
            "Part of each quota this replica's clients may use: 1 while the other replicas' use is in sight "
            "(it is charged to the meters, which then measure the fleet), 1/N while the usage topic is away",
            value=fleet.share(now),
        )
