"""Micro benchmark: CPU cost of the state-topic guard for one request of a principal in no VC.

Run: .venv/bin/python benchmarks/state_guard.py [iterations]
"""

from __future__ import annotations

import datetime
import sys
import time
import uuid

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from proxy.protocol import codec
from proxy.protocol.apis import api_info
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, parse_request_header
from proxy.tenancy.guard import StateTopicGuard, check


def request(key: int, version: int, body: object) -> tuple[memoryview, int]:
    hv = api_info(key).request_header_version(version)
    raw = memoryview(frame(encode_request_header(key, version, 1, "bench", hv) + codec.encode(body)))
    return raw, parse_request_header(raw, hv).body_offset


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    guard = StateTopicGuard("__vcproxy_state", frozenset(), uuid.uuid4())
    produce = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=tuple(
            TopicProduceData(name=f"t{i}", partition_data=(PartitionProduceData(index=0, records=b"x" * 100_000),))
            for i in range(10)
        ),
    )
    fetch = codec._empty(
        FetchRequest,
        topics=tuple(
            codec._empty(
                FetchTopic,
                topic=f"t{i}",
                partitions=tuple(codec._empty(FetchPartition, partition=j) for j in range(10)),
            )
            for i in range(10)
        ),
    )
    metadata = codec._empty(
        MetadataRequest, topics=tuple(codec._empty(MetadataRequestTopic, name=f"t{i}") for i in range(10))
    )
    cases = [
        ("Produce v9, 10 topics x 100 KB", 0, 9, produce),
        ("Fetch v12, 10 topics x 10 partitions", 1, 12, fetch),
        ("Metadata v12, 10 topics named", 3, 12, metadata),
    ]
    for name, key, version, body in cases:
        raw, offset = request(key, version, body)
        started = time.perf_counter()
        for _ in range(n):
            check(guard, "User:admin", key, version, raw, offset)
        print(f"{name}: {(time.perf_counter() - started) / n * 1e6:.1f} us per request ({n} requests)")


if __name__ == "__main__":
    main()
