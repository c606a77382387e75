"""Micro benchmark: CPU cost of passing a Fetch v16 response through the session (walk + forward).

Run: .venv/bin/python benchmarks/walk_fetch.py [partitions] [record_bytes_per_partition]
"""

from __future__ import annotations

import datetime
import sys
import time
import uuid

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v16.response import FetchableTopicResponse, FetchResponse, PartitionData
from kio.static.primitive import i32, i64

from proxy.core.endpoints import ListenerLayout
from proxy.core.session import ProxySession
from proxy.protocol import codec
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, encode_response_header


def main() -> None:
    partitions = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    record_bytes = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    parts = tuple(
        PartitionData(
            partition_index=i32(i),
            error_code=ErrorCode.none,
            high_watermark=i64(10),
            aborted_transactions=None,
            records=b"x" * record_bytes,
        )
        for i in range(partitions)
    )
    body = FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=i32(1),
        responses=(FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=parts),),
    )
    response = bytearray(frame(encode_response_header(42, 1) + codec.encode(body)))
    request = memoryview(frame(encode_request_header(1, 16, 42, "bench", 2) + b"\x00" * 8))
    session = ProxySession(ListenerLayout("127.0.0.1", 9192, 9193))
    rounds = 2000
    start = time.perf_counter()
    for _ in range(rounds):
        session.on_request(request)
        session.on_response(memoryview(response))
    per = (time.perf_counter() - start) / rounds
    print(
        f"{partitions} partitions, {len(response) / 1e6:.2f} MB response: {per * 1e6:.1f} us per response "
        f"({per * 1e6 / partitions:.1f} us per partition)"
    )


if __name__ == "__main__":
    main()
