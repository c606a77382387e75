"""One /metrics for an instance of N workers (proxy/net/workers.py): each worker's exposition, parsed with
prometheus-client's own parser, every sample labelled `worker`, one family per name. A family is typed
and described by the first worker that has it; the same program gives every worker the same."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

WORKER_LABEL = "worker"


def merge(texts: Mapping[str, str], own: Iterable[Metric] = ()) -> bytes:
    """`texts`: worker label -> that worker's text exposition; `own`: the parent's families. A worker whose
    text does not parse is left out (its `vcproxy_worker_up` then says 0)."""
    families: dict[str, Metric] = {}
    up: dict[str, float] = {}
    for worker, text in sorted(texts.items()):
        try:
            parsed = list(text_string_to_metric_families(text))
        except ValueError:
            up[worker] = 0.0
            continue
        up[worker] = 1.0
        for family in parsed:
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            elif merged.type != family.type:
                continue
            for s in family.samples:
                labels = {**s.labels, WORKER_LABEL: worker}
                merged.samples.append(Sample(s.name, labels, s.value, s.timestamp, s.exemplar))
    workers = Metric("vcproxy_worker_up", "1 when the worker answered this scrape, 0 when it did not", "gauge")
    for worker, value in sorted(up.items()):
        workers.samples.append(Sample("vcproxy_worker_up", {WORKER_LABEL: worker}, value, None, None))
    families[workers.name] = workers
    for family in own:
        families[family.name] = family
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(families.values())))  # type: ignore[arg-type]
    return generate_latest(registry)


class _Fixed:
    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)
