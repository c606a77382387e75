"""Micro benchmark: what a VC's ACLs cost per request in the sans-I/O session.

A Produce v9 to 3 topics (spliced, never decoded) and a Metadata v12 for 3 topics, through a tenant
session whose VC has no ACLs (the open fast path), 10 ACLs, and 1,000 ACLs (900 literal on other
topics, 100 prefixed). Modes alternate in rounds, so machine load hits them alike; best round reported.

Run: PYTHONPATH=. .venv/bin/python benchmarks/acl_cost.py [rounds]
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import time
import uuid

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.core.endpoints import ListenerLayout
from proxy.core.session import ProxySession
from proxy.protocol import codec
from proxy.protocol.headers import encode_request_header
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import TenancyImage, link_record, principal_record, vc_record

TOPICS = ("orders", "payments", "audit")


@dataclasses.dataclass
class Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


def image(acls: int) -> TenancyImage:
    img = TenancyImage()
    img.apply(*vc_record("team-a"))
    img.apply(*principal_record("User:carol", "team-a"))
    for t in TOPICS:
        img.apply(*link_record("team-a", t, f"{uuid.uuid4()}.{t}"))
    bindings = [AclBinding(ResourceType.TOPIC, t, PatternType.LITERAL, "User:carol", "*", op, Permission.ALLOW)
                for t in TOPICS for op in (Operation.WRITE, Operation.DESCRIBE)]  # fmt: skip
    for i in range(max(acls - len(bindings), 0)):
        pattern = PatternType.PREFIXED if i % 10 == 0 else PatternType.LITERAL
        bindings.append(
            AclBinding(ResourceType.TOPIC, f"other-{i}", pattern, f"User:u{i}", "*", Operation.READ, Permission.ALLOW)
        )
    for b in bindings[:acls] if acls else ():
        img.apply(*acl_record("team-a", b, True))
    return img


def frame(api_key: int, version: int, body: object) -> memoryview:
    raw = encode_request_header(api_key, version, 1, "bench", 2) + codec.encode(body)
    return memoryview(bytearray(len(raw).to_bytes(4, "big") + raw))


PRODUCE = frame(
    0,
    9,
    ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=tuple(
            TopicProduceData(
                name=TopicName(t), partition_data=(PartitionProduceData(index=i32(0), records=b"x" * 1024),)
            )
            for t in TOPICS
        ),
    ),
)
METADATA = frame(
    3,
    12,
    MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in TOPICS),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    ),
)


def per_request_us(img: TenancyImage, request: memoryview, n: int = 2000) -> float:
    session = ProxySession(ListenerLayout("127.0.0.1", 9192, 9193), tenancy=Tenancy(img), principal="User:carol")
    start = time.perf_counter()
    for _ in range(n):
        session.on_request(request)
        session.in_flight.clear()
    return (time.perf_counter() - start) / n * 1e6


def main(rounds: int) -> None:
    images = {"no ACLs": image(0), "10 ACLs": image(10), "1,000 ACLs": image(1000)}
    for name, request in (("Produce v9, 3 topics", PRODUCE), ("Metadata v12, 3 topics", METADATA)):
        best = {mode: float("inf") for mode in images}
        for _ in range(rounds):
            for mode, img in images.items():
                best[mode] = min(best[mode], per_request_us(img, request))
        print(f"{name}: " + ", ".join(f"{mode} {us:.1f} µs" for mode, us in best.items()))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
