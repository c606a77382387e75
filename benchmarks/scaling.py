"""Cost as the work grows (issue 27, point 5): per-request CPU and memory of the sans-I/O session, smallest
case against largest, for each dimension that grows with a deployment.

Every row is session-level: a `ProxySession` as the shell builds one for a tenant (principal known, as after
a login), fed request frames and the answers of a synthetic upstream (`Upstream`: the response a broker
gives to exactly the request the session forwarded, encoded once). No sockets, no Trio, no Kafka: the shell's
own cost per frame (docs/performance.md) comes on top and does not depend on these sizes. The state replay row
decodes and applies state records as `StateStore.replay` does, without the consumer.

CPU is `time.process_time` over enough calls for ~0.015 s per measurement; the cases of a row alternate for
`--rounds` rounds (machine load hits them alike) and the best round is reported: on a loaded
machine single rounds vary by 2x, short rounds and the minimum are what stays steady.

Run: PYTHONPATH=. nice -n 19 .venv/bin/python benchmarks/scaling.py [--vcs 1000] [--acls 10000] ...
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import acl_cost  # beside this file: run as benchmarks/scaling.py
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.produce.v9.request import ProduceRequest
from kio.schema.produce.v9.response import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i32, i64

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.core.endpoints import ListenerLayout
from proxy.core.session import ProxySession
from proxy.protocol import codec
from proxy.protocol.entities import empty
from proxy.protocol.headers import encode_response_header
from proxy.state.store import decode, encode_value
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import (
    TenancyImage,
    client_record,
    link_record,
    partitions_record,
    principal_record,
    setting_record,
    topic_record,
    vc_record,
)
from proxy.tenancy.rights import Rights

TOPICS = acl_cost.TOPICS
PRINCIPAL = "User:carol"
VC = "team-a"
Record = tuple[str, dict[str, Any] | None]


@dataclasses.dataclass
class Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


# -- the state: records a state topic would hold --------------------------------------------------------


def vc_records(vc: str, principal: str, links: Iterable[str], known: bool = True) -> list[Record]:
    """A VC, its member and its links; `known`: each link's topic id and partition count learned (as after a
    Metadata), three records per link like a state topic that has served the VC."""
    records: list[Record] = [vc_record(vc), principal_record(principal, vc)]
    for link in links:
        physical = f"{uuid.uuid4()}.{link}"
        records.append(link_record(vc, link, physical))
        if known:
            records += [topic_record(physical, uuid.uuid4()), partitions_record(physical, 1)]
    return records


def acl_records(acls: int) -> list[Record]:
    """`acls` bindings in the VC: WRITE and DESCRIBE on its three topics for the caller, the rest READ on other
    names for other principals, one in ten of them prefixed (acl_cost.py's mix)."""
    bindings = [
        AclBinding(ResourceType.TOPIC, t, PatternType.LITERAL, PRINCIPAL, "*", op, Permission.ALLOW)
        for t in TOPICS
        for op in (Operation.WRITE, Operation.DESCRIBE)
    ]
    for i in range(max(acls - len(bindings), 0)):
        pattern = PatternType.PREFIXED if i % 10 == 0 else PatternType.LITERAL
        bindings.append(
            AclBinding(ResourceType.TOPIC, f"other-{i}", pattern, f"User:u{i}", "*", Operation.READ, Permission.ALLOW)
        )
    return [acl_record(VC, b, True) for b in bindings[:acls]]


@functools.cache
def caller_records(links: int) -> tuple[Record, ...]:
    """The caller's VC with `links` links, the three it uses first (built once per size: the replay row reuses
    the links row's)."""
    extra = (f"l{i}" for i in range(max(links - len(TOPICS), 0)))
    return tuple(vc_records(VC, PRINCIPAL, (*TOPICS, *extra)))


def image_of(vcs: int = 1, links: int = 3, acls: int = 0, physical: int = 0) -> TenancyImage:
    """The caller's VC with `links` links (the three it uses first) and `acls` ACLs; `vcs - 1` other VCs of
    three links each; `physical - 3` more physical topics, linked by one other VC (what the image knows of
    the cluster's topics is what VCs link)."""
    img = TenancyImage()
    records = list(caller_records(links))
    for i in range(1, vcs):
        records += vc_records(f"vc-{i}", f"User:member-{i}", TOPICS)
    if physical > len(TOPICS):
        records += vc_records("team-b", "User:bob", (f"p{i}" for i in range(physical - len(TOPICS))))
    records += acl_records(acls)
    for key, value in records:
        img.apply(key, value)
    return img


# -- requests and a synthetic upstream ------------------------------------------------------------------


# The same Produce and named Metadata as acl_cost.py measures (its three topics), so the rows compare.
PRODUCE, METADATA_NAMED = acl_cost.PRODUCE, acl_cost.METADATA
request = acl_cost.frame
METADATA_ALL = request(
    3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
)


def forwarded(decision: Any) -> bytes:
    pieces = decision.pieces if decision.pieces is not None else [decision.frame or decision.exchange.frame]
    return b"".join(bytes(p) for p in pieces)


class Upstream:
    """A broker's answer to exactly the request the session forwarded: the topics it names, one partition each,
    with the topic ids the image knows (a broker answers a Metadata naming topics with those topics only)."""

    def __init__(self, image: TenancyImage):
        self.image = image

    def answer(self, frame: bytes) -> memoryview:
        api_key = int.from_bytes(frame[4:6], "big")
        offset = 4 + 2 + 2 + 4
        client_len = int.from_bytes(frame[offset : offset + 2], "big")
        offset += 2 + max(client_len, 0) + 1  # client id, empty tagged fields (header v2)
        if api_key == 0:
            req, _ = codec.decode(ProduceRequest, memoryview(frame), offset)
            body: Any = empty(
                ProduceResponse,
                responses=tuple(
                    empty(
                        TopicProduceResponse,
                        name=t.name,
                        partition_responses=(empty(PartitionProduceResponse, index=i32(0), base_offset=i64(42)),),
                    )
                    for t in req.topic_data
                ),
            )
        else:
            req, _ = codec.decode(MetadataRequest, memoryview(frame), offset)
            body = empty(
                MetadataResponse,
                brokers=(empty(MetadataResponseBroker, node_id=BrokerId(0), host="127.0.0.1", port=i32(9092)),),
                cluster_id="physical",
                controller_id=BrokerId(0),
                topics=tuple(self._topic(t.name) for t in req.topics or ()),
            )
        raw = encode_response_header(1, 1) + codec.encode(body)  # Produce v9 and Metadata v12: flexible
        return memoryview(bytearray(len(raw).to_bytes(4, "big") + raw))

    def _topic(self, name: str) -> MetadataResponseTopic:
        topic_id = self.image.topic_ids.get(name)
        if topic_id is None and "." not in name:  # an internal topic of Kafka's, as the broker has it
            topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        if topic_id is None:
            return empty(MetadataResponseTopic, name=name, error_code=i16(3))  # UNKNOWN_TOPIC_OR_PARTITION
        partition = empty(
            MetadataResponsePartition, partition_index=i32(0), leader_id=BrokerId(0), replica_nodes=(BrokerId(0),)
        )
        return empty(MetadataResponseTopic, name=name, topic_id=topic_id, partitions=(partition,))


def session_of(image: TenancyImage) -> ProxySession:
    return ProxySession(ListenerLayout("127.0.0.1", 9192, 9193), tenancy=Tenancy(image), principal=PRINCIPAL)


def exchange(image: TenancyImage, frame: memoryview) -> Callable[[], None]:
    """One request through a session and the upstream's answer back: a callable for the timer."""
    session = session_of(image)
    response = Upstream(image).answer(forwarded(session.on_request(frame)))
    session.on_response(response)

    def once() -> None:
        session.on_request(frame)
        session.on_response(response)

    once()
    return once


# -- measuring ----------------------------------------------------------------------------------------


def cpu_us(fn: Callable[[], None], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n * 1e6


def calibrate(fn: Callable[[], None], budget: float) -> int:
    """Calls that take about `budget` s of CPU."""
    n = 1
    while True:
        start = time.process_time()
        for _ in range(n):
            fn()
        spent = time.process_time() - start
        if spent >= budget / 4 or n >= 1_000_000:
            return max(int(n * budget / max(spent, 1e-9)), 1)
        n *= 4


def compare(small: Callable[[], None], large: Callable[[], None], rounds: int, budget: float) -> tuple[float, float]:
    n = calibrate(small, budget)
    gc.collect()  # once: what the images left behind is not the requests' cost
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, fn in enumerate((small, large)):
            best[i] = min(best[i], cpu_us(fn, n))
    return best[0], best[1]


@dataclasses.dataclass
class Row:
    name: str
    small: str
    large: str
    small_value: float
    large_value: float
    unit: str

    @property
    def ratio(self) -> float:
        return self.large_value / self.small_value if self.small_value else float("inf")


def request_rows(args: argparse.Namespace) -> Iterable[Row]:
    r, b = args.rounds, args.budget
    base = image_of()

    def row(
        name: str, small_case: str, large_case: str, small_img: TenancyImage, large_img: TenancyImage, frame: memoryview
    ) -> Row:
        s, lg = compare(exchange(small_img, frame), exchange(large_img, frame), r, b)
        return Row(name, small_case, large_case, s, lg, "µs CPU/request")

    vcs = image_of(vcs=args.vcs)
    yield row("virtual clusters: Produce v9, 3 topics", "1 VC", f"{args.vcs:,} VCs", base, vcs, PRODUCE)
    yield row("virtual clusters: Metadata v12, all (3) topics", "1 VC", f"{args.vcs:,} VCs", base, vcs, METADATA_ALL)
    few, many = image_of(acls=10), image_of(acls=args.acls)
    yield row("ACLs: Produce v9, 3 topics", "0 ACLs", f"{args.acls:,} ACLs", base, many, PRODUCE)
    yield row("ACLs: Produce v9, 3 topics", "10 ACLs", f"{args.acls:,} ACLs", few, many, PRODUCE)
    yield row("ACLs: Metadata v12, 3 named topics", "10 ACLs", f"{args.acls:,} ACLs", few, many, METADATA_NAMED)
    links = image_of(links=args.links)
    yield row("links in the VC: Produce v9, 3 topics", "3 links", f"{args.links:,} links", base, links, PRODUCE)
    yield row(
        "links in the VC: Metadata v12, 3 named topics",
        "3 links",
        f"{args.links:,} links",
        base,
        links,
        METADATA_NAMED,
    )
    cluster = image_of(physical=args.topics)
    yield row(
        "physical topics: the VC's Metadata v12, all (3) topics",
        "3 topics",
        f"{args.topics:,} topics",
        base,
        cluster,
        METADATA_ALL,
    )


def owner_rows(args: argparse.Namespace) -> Iterable[Row]:
    """Who owns a physical topic, asked once per topic before a DeleteRecords, CreatePartitions or config
    alter reaches the broker, and who links it (kafka-cluster's DeleteTopics, the orphan sweep): the three
    topics of the caller's VC, with 1 VC and with many (`TenancyImage.topic_owner` and `links_to` alone,
    not a whole request: the synthetic upstream answers Produce and Metadata only)."""
    small, large = image_of(), image_of(vcs=args.vcs)

    def asks(image: TenancyImage) -> Callable[[], None]:
        vc = image.vcs[VC]
        physical = [vc.links[t] for t in TOPICS]

        def once() -> None:
            for topic in physical:
                image.owns(vc, topic)
                image.links_to(topic)

        return once

    s, lg = compare(asks(small), asks(large), args.rounds, args.budget)
    yield Row("virtual clusters: owner and links of 3 topics", "1 VC", f"{args.vcs:,} VCs", s, lg, "µs CPU")

    # A connection bound by client id asks whether its principal holds a right (then no client id places it)
    # at every change of the image, when the shell re-checks every connection's binding: one change, then
    # the question for each of 1,000 such connections (per connection: the figure times 1,000).
    def rechecks(image: TenancyImage) -> Callable[[], None]:
        image.apply(*client_record("bound-by-id", VC))
        rights = Rights(image, frozenset())
        seen = [0]

        def once() -> None:
            seen[0] += 1
            image.apply(*setting_record(VC, "bench.change", seen[0]))  # any record changes the image
            for _ in range(1000):
                rights.placement("User:ANONYMOUS", "bound-by-id")

        return once

    # A login the broker is to authenticate (relayed) is refused if the image names its user anywhere: asked
    # per login, under each name the login could be read as (ProxySession._may_relay); the image unchanged.
    def relays(image: TenancyImage) -> Callable[[], None]:
        session = session_of(image)

        def once() -> None:
            for _ in range(100):
                session._may_relay("User:nobody")  # the guard itself, without a SASL exchange

        return once

    s, lg = compare(rechecks(image_of()), rechecks(image_of(vcs=args.vcs)), args.rounds, args.budget)
    yield Row(
        "virtual clusters: 1,000 client-id-bound connections re-checked after a change",
        "1 VC",
        f"{args.vcs:,} VCs",
        s,
        lg,
        "µs CPU",
    )
    s, lg = compare(relays(image_of()), relays(image_of(vcs=args.vcs)), args.rounds, args.budget)
    yield Row("virtual clusters: 100 relayed logins' guard", "1 VC", f"{args.vcs:,} VCs", s, lg, "µs CPU")


def connection_rows(args: argparse.Namespace) -> Iterable[Row]:
    """Idle connections: sessions logged in, bound (one Metadata each) and left open; the CPU of a Produce on
    one more, and the memory each holds (tracemalloc: the session's objects, not the shell's socket buffers)."""
    image = image_of()
    upstream = Upstream(image)
    answer = upstream.answer(forwarded(session_of(image).on_request(METADATA_NAMED)))

    def open_idle(n: int) -> tuple[list[ProxySession], float]:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        sessions = []
        for _ in range(n):
            s = session_of(image)
            s.on_request(METADATA_NAMED)
            s.on_response(answer)
            sessions.append(s)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        return sessions, used / n / 1024

    alone = exchange(image, PRODUCE)
    n = calibrate(alone, args.budget)
    s = min(cpu_us(alone, n) for _ in range(args.rounds))
    few, few_kib = open_idle(10)
    del few
    many, many_kib = open_idle(args.connections)
    yield Row("idle connections: memory per connection", "10", f"{args.connections:,}", few_kib, many_kib, "KiB")
    lg = min(cpu_us(alone, n) for _ in range(args.rounds))  # the same session, the idle ones alive now
    del many
    gc.collect()
    s = min(s, *(cpu_us(alone, n) for _ in range(args.rounds)))  # and once they are gone: load varies
    yield Row(
        "idle connections: Produce v9 on one more", "0 idle", f"{args.connections:,} idle", s, lg, "µs CPU/request"
    )


def replay_rows(args: argparse.Namespace) -> Iterable[Row]:
    """The state topic's records as bytes (key, value), decoded and applied as `StateStore.replay` does
    (without the consumer's fetches): a VC's links, each with its topic id and partition count."""

    def encoded(links: int) -> list[tuple[bytes, bytes | None]]:
        return [(k.encode(), encode_value(v)) for k, v in caller_records(links)]

    def replay(log: list[tuple[bytes, bytes | None]], chunk: int) -> list[float]:
        """CPU seconds of each `chunk` records applied, in log order."""
        gc.collect()
        img = TenancyImage()
        spent = []
        for at in range(0, len(log), chunk):
            start = time.process_time()
            for key, value in log[at : at + chunk]:
                img.apply(*decode(key, value))
            spent.append(time.process_time() - start)
        return spent

    small_log, large_log = encoded(args.replay_small), encoded(args.links)
    chunk = len(small_log)
    best_small = min(sum(replay(small_log, chunk)) for _ in range(max(args.rounds // 5, 1)))
    large = replay(large_log, chunk)  # seconds long: once
    # Per record, within that one replay (alike load): the best of its first ten chunks (into an almost empty
    # image) against the best of its last ten (into an image of almost `links` links).
    first, last = min(large[:10]), min(large[-11:-1]) if len(large) > 11 else large[-1]
    ten = 10 * args.replay_small
    yield Row(
        "state replay: per record (link, topic id, partitions)",
        f"links 0-{ten:,}",
        f"links {args.links - ten:,}-{args.links:,}",
        first / chunk * 1e6,
        last / chunk * 1e6,
        "µs CPU/record",
    )
    yield Row(
        "state replay: whole topic",
        f"{args.replay_small:,} links",
        f"{args.links:,} links",
        best_small,
        sum(large),
        f"s CPU ({len(large_log):,} records)",
    )


def show(rows: Iterable[Row], markdown: bool) -> None:
    header = ("row", "smallest case", "largest case", "ratio", "unit")
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print(f"{header[0]:56} {header[1]:>20} {header[2]:>24} {header[3]:>7}  {header[4]}")
    for row in rows:
        small = f"{row.small}: {fmt(row.small_value)}"
        large = f"{row.large}: {fmt(row.large_value)}"
        cells = (row.name, small, large, f"{row.ratio:.2f}x", row.unit)
        if markdown:
            print("| " + " | ".join(cells) + " |", flush=True)
        else:
            print(f"{cells[0]:56} {cells[1]:>20} {cells[2]:>24} {cells[3]:>7}  {cells[4]}", flush=True)


def fmt(value: float) -> str:
    return f"{value:,.2f}" if value < 10 else f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vcs", type=int, default=1000, help="virtual clusters in the largest case")
    p.add_argument("--acls", type=int, default=10_000, help="ACLs in the VC in the largest case")
    p.add_argument("--links", type=int, default=100_000, help="links in the VC (and replayed) in the largest case")
    p.add_argument("--topics", type=int, default=10_000, help="physical topics in the largest case")
    p.add_argument("--connections", type=int, default=10_000, help="idle connections in the largest case")
    p.add_argument("--replay-small", type=int, default=1000, help="links replayed in the smallest case")
    p.add_argument("--rounds", type=int, default=25, help="alternating rounds per row (best kept)")
    p.add_argument("--budget", type=float, default=0.015, help="s of CPU per measurement")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--only", choices=("requests", "owners", "connections", "replay"), help="one group of rows")
    args = p.parse_args()
    groups = {"requests": request_rows, "owners": owner_rows, "connections": connection_rows, "replay": replay_rows}
    started = time.monotonic()

    def rows() -> Iterable[Row]:
        for name, fn in groups.items():
            if args.only in (None, name):
                yield from fn(args)

    show(rows(), args.markdown)
    print(
        f"({time.monotonic() - started:.0f} s; {json.dumps({k: v for k, v in vars(args).items() if k != 'markdown'})})"
    )


if __name__ == "__main__":
    main()
