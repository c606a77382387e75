"""Micro benchmark: what validating a body before kio decodes it (walker.validate) costs per request.

Typical control messages of a tenant connection (Metadata v12 with 3 topics, JoinGroup v9 with two
protocols, OffsetCommit v9 with 10 partitions), each timed three ways: walker.validate alone, kio's
decode alone (the path before the fix), and the whole tenant session `on_request` with and without
the validation. Modes alternate in rounds, so machine load hits them alike; best round reported.

Run: .venv/bin/python benchmarks/validate_cost.py [rounds]
"""

from __future__ import annotations

import datetime
import sys
import time
import uuid
from collections.abc import Callable

from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from benchmarks.fuzz_session import SESSIONS
from proxy.core.session import Action
from proxy.protocol import codec, walker
from proxy.protocol.headers import encode_request_header

REQUESTS = {
    "Metadata v12": (
        3,
        12,
        MetadataRequest(
            topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in ("orders", "a", "b")),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    ),
    "JoinGroup v9": (
        11,
        9,
        JoinGroupRequest(
            group_id=GroupId("group-1"),
            session_timeout=datetime.timedelta(seconds=45),
            rebalance_timeout=datetime.timedelta(seconds=300),
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=tuple(JoinGroupRequestProtocol(name=n, metadata=b"m" * 100) for n in ("range", "cooperative")),
            reason=None,
        ),
    ),
    "OffsetCommit v9": (
        8,
        9,
        OffsetCommitRequest(
            group_id=GroupId("group-1"),
            generation_id_or_member_epoch=i32(3),
            member_id=str(uuid.uuid4()),
            group_instance_id=None,
            topics=(
                OffsetCommitRequestTopic(
                    name=TopicName("orders"),
                    partitions=tuple(
                        OffsetCommitRequestPartition(
                            partition_index=i32(p),
                            committed_offset=i64(1000 + p),
                            committed_leader_epoch=i32(1),
                            committed_metadata="",
                        )
                        for p in range(10)
                    ),
                ),
            ),
        ),
    ),
}


def best_us(fn: Callable[[], object], rounds: int, per_round: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(per_round):
            fn()
        best = min(best, (time.perf_counter() - began) / per_round)
    return best * 1e6


def measure(key: int, version: int, entity: object, rounds: int) -> tuple[int, float, float, float, float]:
    """(body bytes, validate µs, kio decode µs, session µs before the fix, session µs after)."""
    body = codec.encode(entity)
    cls = type(entity)
    header = encode_request_header(key, version, 1, "client", 2)
    frame = memoryview((len(header) + len(body)).to_bytes(4, "big") + header + body)
    session = SESSIONS["tenant"]()

    def through_session() -> None:
        decision = session.on_request(frame)
        assert decision.action is not Action.CLOSE, decision.reason
        session.in_flight.clear()

    real_validate = walker.validate
    validate = best_us(lambda: real_validate(cls, body, 0), rounds, 2000)
    decode = best_us(lambda: codec._reader(cls)(body, 0), rounds, 2000)
    before = after = float("inf")
    for _ in range(rounds):  # alternate, so load on the machine hits both alike
        walker.validate = lambda cls, buf, offset: offset  # the path before the fix
        before = min(before, best_us(through_session, 1, 500))
        walker.validate = real_validate
        after = min(after, best_us(through_session, 1, 500))
    return len(body), validate, decode, before, after


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    print(f"{'request':16} {'bytes':>5} {'validate':>9} {'kio decode':>10} {'session before':>14} {'after':>8}")
    for name, (key, version, entity) in REQUESTS.items():
        size, validate, decode, before, after = measure(key, version, entity, rounds)
        print(f"{name:16} {size:5d} {validate:8.1f}µ {decode:9.1f}µ {before:13.1f}µ {after:7.1f}µ")


if __name__ == "__main__":
    main()
