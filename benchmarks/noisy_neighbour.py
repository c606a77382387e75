"""The noisy-neighbour check (issue 56): one tenant at full flood, another's latency measured beside it.

Run (starts its own one-broker Kafka with a TLS listener, and the proxies; about 14 minutes a round):
    PYTHONPATH=. .venv/bin/python benchmarks/noisy_neighbour.py --markdown noisy.md
Quicker: `--floods produce-2,handoff --tls tls --seconds 5`. `--kafka-dir DIR` keeps that broker running in DIR for
the next run (`python -m vcproxy_tools kafka stop --dir DIR` stops it). `--bootstrap HOST:PORT` uses another
cluster: its direct arm of a TLS flood is then the same flood in plaintext, and nothing bounds what the floods
leave on its disk (our broker drops a flood's records within seconds). `--pin 0/1` gives every proxy a CPU of its own
and the broker, the floods and the victim the other, in every arm (the proxy's CPU its own, as a gateway's is).

alice (client id `alice-app`, virtual cluster team-a) floods; bob (`bob-app`, team-b) is the victim: every
`--interval` he sends one Produce (acks=1, one record) and then one Fetch of that record in his fetch session
(incremental after the first), each on its own connection to the partition's leader, and times both. The victim's
latency is every one of those round trips: p50, p99, max, and stalls (round trips over 100 ms).

Arms, each flood run in each (rotating order per round, so the machine's drift hits all alike):
  on       through the proxy, the forwarder on (the default)
  off      through the proxy, VCPROXY_FORWARDER=0: each connection its own Trio task
  direct   flood and victim straight to the broker: as busy a broker, no proxy

Floods (alice's raw protocol clients, in a process of their own, bounded by `--seconds` and by count, 127.0.0.1
only), each over plaintext and over TLS (`--tls`):
  idle          no flood: the victim alone
  produce       one connection of pipelined acks=0 Produce, 256 KiB batches
  produce-2     the same on two connections
  fetch         two connections, each with 100 Fetch requests in flight (1 MiB each, of an 8 MiB topic)
  connections   64 connections, each with 4 small acks=1 Produce requests in flight
  churn         4 connections each opening an incremental fetch session every 10 ms (used twice, left open)
  handoff       answers handed to Python: 3 connections whose Fetch answers open sessions, 3 looping Metadata
                for all topics (alice's VC holds 20 topics)

The table gives each arm's victim p50/p99/max, stalls, and its p99 against the forwarder-off arm's and the direct
arm's; the issue's targets are p99(on) <= 1.5 x p99(off) + 5 ms and p99(on) <= 1.5 x p99(direct). It also says
how much the flood got done in each arm (MB/s or requests/s): a flood slowed by the proxy is a gentler flood.
`--markdown FILE` writes the table for docs/performance.md; `--json FILE` every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import io
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.fetch.v13.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i8, i16, i32, i64

from benchmarks.bench_peers import BenchError, parse_pin, pin_threads
from proxy.protocol import codec
from proxy.protocol.apis import api_info, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, response_body_offset
from vcproxy_tools.process import children_of

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # every connection of this check, floods included, goes to loopback only
ATTACKER, VICTIM = "alice-app", "bob-app"  # client ids: each binds its own virtual cluster
VIRTUAL_CLUSTERS = [{"name": "team-a", "client_ids": [ATTACKER]}, {"name": "team-b", "client_ids": [VICTIM]}]
PRODUCE, FETCH, METADATA, CREATE_TOPICS, DELETE_TOPICS = 0, 1, 3, 19, 20
VERSIONS = {PRODUCE: 9, FETCH: 13, METADATA: 12, CREATE_TOPICS: 7, DELETE_TOPICS: 6}
STALL = 0.1  # a victim round trip longer than this is a stall
ARMS = ("on", "off", "direct")
METADATA_TOPICS = 20  # alice's VC, for the handoff flood's Metadata of every topic
FETCH_PRELOAD = 32  # 256 KiB batches: the fetch floods' 8 MiB topic
FLOOD_CAP_BYTES = 8 << 30  # no flood process writes more than this, however fast the machine (3 GiB: 10 s here)
FLOOD_CAP_REQUESTS = 2_000_000  # nor sends more requests than this


# -- the wire: one blocking connection, plain or TLS -----------------------------------------------


class Wire:
    """A raw Kafka connection to 127.0.0.1: whole frames out, whole frames in; TLS when `cafile` is given."""

    def __init__(self, address: str, cafile: str | None, client_id: str, timeout: float = 30):
        host, _, port = address.rpartition(":")
        if host != HOST:
            raise ValueError(f"the noisy-neighbour check connects to {HOST} only, not {host}")
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if cafile is not None:
            sock = ssl.create_default_context(cafile=cafile).wrap_socket(sock, server_hostname=host)
        self.sock, self.client_id, self.correlation_id = sock, client_id, 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode(self, key: int, body: Any) -> bytes:
        self.correlation_id += 1
        version = VERSIONS[key]
        header = encode_request_header(
            key, version, self.correlation_id, self.client_id, api_info(key).request_header_version(version)
        )
        return frame(header + codec.encode(body))

    def read_frame(self) -> bytes:
        size = int.from_bytes(self._exactly(4), "big")
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(min(n - len(out), 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the peer")
            out += chunk
        return bytes(out)

    def ask(self, key: int, body: Any) -> Any:
        self.sock.sendall(self.encode(key, body))
        return decode(key, self.read_frame())


def decode(key: int, payload: bytes) -> Any:
    """A response's body (`payload`: the frame without its size)."""
    version = VERSIONS[key]
    raw = len(payload).to_bytes(4, "big") + payload
    body, _ = codec.decode(
        response_type(key, version), raw, response_body_offset(raw, api_info(key).response_header_version(version))
    )
    return body


def record_batch(count: int, size: int) -> bytes:
    records = tuple(
        Record(attributes=i8(0), timestamp=datetime.datetime.now(datetime.UTC), offset=i64(n), key=None,
               value=os.urandom(size), headers=())
        for n in range(count)
    )  # fmt: skip
    batch = NewRecordBatch(
        producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1), records=records, attributes=i16(0)
    )
    buffer = io.BytesIO()
    write_new_batch(buffer, batch)
    return buffer.getvalue()


def produce(topic: str, records: bytes, acks: int) -> ProduceRequest:
    data = codec._empty(PartitionProduceData, index=i32(0), records=records)
    return codec._empty(
        ProduceRequest,
        transactional_id=None,
        acks=i16(acks),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(codec._empty(TopicProduceData, name=topic, partition_data=(data,)),),
    )


def fetch(session: int, epoch: int, topic_id: uuid.UUID | None, offset: int = 0, max_wait_ms: int = 0) -> FetchRequest:
    """Partition 0 of `topic_id` from `offset` (none: an incremental Fetch with nothing changed)."""
    topics = ()
    if topic_id is not None:
        partition = codec._empty(
            FetchPartition, partition=0, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=-1,
            last_fetched_epoch=-1, log_start_offset=-1,
        )  # fmt: skip
        topics = (codec._empty(FetchTopic, topic_id=topic_id, partitions=(partition,)),)
    return codec._empty(
        FetchRequest,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1 if max_wait_ms else 0,
        max_bytes=1 << 20,
        session_id=session,
        session_epoch=epoch,
        topics=topics,
    )


def metadata(*names: str) -> MetadataRequest:
    """Of `names`, or of every topic when none is named."""
    topics = tuple(MetadataRequestTopic(name=n, topic_id=uuid.UUID(int=0)) for n in names) if names else None
    return MetadataRequest(topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


# -- topics -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where clients connect: a bootstrap on 127.0.0.1, TLS when `cafile` is set."""

    bootstrap: str
    cafile: str | None = None


@dataclasses.dataclass(frozen=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    leader: str  # host:port of partition 0's leader, as this endpoint advertises it


def create_topic(endpoint: Endpoint, client_id: str, name: str, deadline: float = 90) -> Topic:
    """A 1-partition topic (replicated as the cluster allows), once its leader serves it."""
    end = time.monotonic() + deadline
    with Wire(endpoint.bootstrap, endpoint.cafile, client_id) as wire:
        replicas = min(3, len(wire.ask(METADATA, metadata()).brokers))
        while True:
            request = codec._empty(
                CreateTopicsRequest,
                topics=(codec._empty(CreatableTopic, name=name, num_partitions=1, replication_factor=replicas),),
                timeout=datetime.timedelta(seconds=30),
            )
            (result,) = wire.ask(CREATE_TOPICS, request).topics
            if int(result.error_code) in (0, 36):  # created, or already there (TOPIC_ALREADY_EXISTS)
                break
            if time.monotonic() > end:
                raise RuntimeError(f"cannot create {name}: error {int(result.error_code)} {result.error_message}")
            time.sleep(0.5)
        while True:
            body = wire.ask(METADATA, metadata(name))
            (topic,) = body.topics
            if int(topic.error_code) == 0 and topic.partitions and int(topic.partitions[0].leader_id) >= 0:
                brokers = {int(b.node_id): f"{b.host}:{b.port}" for b in body.brokers}
                return Topic(name, topic.topic_id, brokers[int(topic.partitions[0].leader_id)])
            if time.monotonic() > end:
                raise RuntimeError(f"{name} has no leader: error {int(topic.error_code)}")
            time.sleep(0.2)


def delete_topics(endpoint: Endpoint, client_id: str, names: list[str]) -> None:
    states = tuple(DeleteTopicState(name=n, topic_id=uuid.UUID(int=0)) for n in names)
    with Wire(endpoint.bootstrap, endpoint.cafile, client_id) as wire:
        wire.ask(DELETE_TOPICS, DeleteTopicsRequest(topics=states, timeout=datetime.timedelta(seconds=30)))


def settled_produce(topic: Topic, endpoint: Endpoint, client_id: str, records: bytes) -> int:
    """One acks=1 Produce, retried while the new leader does not know it leads yet: its base offset."""
    deadline = time.monotonic() + 60
    with Wire(topic.leader, endpoint.cafile, client_id) as wire:
        while True:
            answer = wire.ask(PRODUCE, produce(topic.name, records, acks=1))
            partition = answer.responses[0].partition_responses[0]
            if int(partition.error_code) == 0:
                return int(partition.base_offset)
            if time.monotonic() > deadline:
                raise RuntimeError(f"Produce to {topic.name}: error {int(partition.error_code)}")
            time.sleep(0.2)


# -- floods (run in a process of their own: `python -m benchmarks.noisy_neighbour flood SPEC`) -------------


@dataclasses.dataclass
class Tally:
    """What one flood got done: requests sent, answers read, bytes both ways, fetch sessions it was given,
    connections that failed."""

    sent: int = 0
    answers: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    sessions: int = 0
    errors: int = 0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, count in counts.items():
                setattr(self, name, getattr(self, name) + count)

    def summary(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("sent", "answers", "bytes_out", "bytes_in", "sessions", "errors")}


@dataclasses.dataclass(frozen=True)
class FloodSpec:
    endpoint: Endpoint
    topic: Topic  # alice's flood topic (preloaded with 8 MiB for the Fetch floods)
    start_at: float  # time.monotonic() (CLOCK_MONOTONIC, one clock for every process)
    end_at: float

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), default=str)

    @staticmethod
    def from_json(text: str) -> FloodSpec:
        raw = json.loads(text)
        topic = raw["topic"]
        return FloodSpec(
            Endpoint(**raw["endpoint"]),
            Topic(topic["name"], uuid.UUID(topic["topic_id"]), topic["leader"]),
            raw["start_at"],
            raw["end_at"],
        )


def _wire(spec: FloodSpec, address: str | None = None) -> Wire:
    return Wire(address or spec.topic.leader, spec.endpoint.cafile, ATTACKER, timeout=10)


def _until_start(spec: FloodSpec) -> None:
    time.sleep(max(0.0, spec.start_at - time.monotonic()))


def pipelined_produce(spec: FloodSpec, tally: Tally) -> None:
    """acks=0 Produce of 256 KiB batches, as fast as the socket takes them (no answer comes back)."""
    with _wire(spec) as wire:
        request = wire.encode(PRODUCE, produce(spec.topic.name, record_batch(256, 1024), acks=0))
        _until_start(spec)
        while time.monotonic() < spec.end_at and tally.bytes_out < FLOOD_CAP_BYTES:
            wire.sock.sendall(request)  # the same correlation id each time: acks=0 has no answer to match
            tally.add(sent=1, bytes_out=len(request))


def _window(wire: Wire, spec: FloodSpec, tally: Tally, depth: int, next_request: Callable[[], bytes]) -> None:
    """Keep `depth` requests in flight until the flood ends: one sent for each answer read."""
    _until_start(spec)
    for _ in range(depth):
        request = next_request()
        wire.sock.sendall(request)
        tally.add(sent=1, bytes_out=len(request))
    while time.monotonic() < spec.end_at and tally.sent < FLOOD_CAP_REQUESTS:
        answer = wire.read_frame()
        request = next_request()
        wire.sock.sendall(request)
        tally.add(sent=1, answers=1, bytes_out=len(request), bytes_in=len(answer) + 4)


def pipelined_fetch(spec: FloodSpec, tally: Tally) -> None:
    """Sessionless Fetch (1 MiB) from the start of an 8 MiB partition, 100 in flight."""
    with _wire(spec) as wire:
        _window(wire, spec, tally, 100, lambda: wire.encode(FETCH, fetch(0, -1, spec.topic.topic_id)))


def small_produce(spec: FloodSpec, tally: Tally) -> None:
    """acks=1 Produce of one 1 KiB record, 4 in flight."""
    with _wire(spec) as wire:
        body = produce(spec.topic.name, record_batch(1, 1024), acks=1)
        _window(wire, spec, tally, 4, lambda: wire.encode(PRODUCE, body))


def session_churn(spec: FloodSpec, tally: Tally) -> None:
    """A new incremental fetch session every 10 ms, used twice, then left open: the session tables fill steadily
    (unpaced, four connections would take every slot a broker has in seconds, and leave the next arm none)."""
    with _wire(spec) as wire:
        _until_start(spec)
        tick = time.monotonic()
        while time.monotonic() < spec.end_at and tally.sent < FLOOD_CAP_REQUESTS:
            tick += 0.01
            time.sleep(max(0.0, tick - time.monotonic()))
            opened = wire.ask(FETCH, fetch(0, 0, spec.topic.topic_id, offset=FETCH_PRELOAD * 256))  # its end
            session = int(opened.session_id)
            tally.add(sent=1, answers=1, sessions=session != 0)  # the broker's table full: none given
            for epoch in (1, 2):
                if session == 0:
                    break
                wire.ask(FETCH, fetch(session, epoch, None))
                tally.add(sent=1, answers=1)


def session_opening_fetch(spec: FloodSpec, tally: Tally) -> None:
    """Fetch answers that open a session (1 MiB of records each): each goes to the Python path."""
    with _wire(spec) as wire:
        _window(wire, spec, tally, 1, lambda: wire.encode(FETCH, fetch(0, 0, spec.topic.topic_id)))


def metadata_of_everything(spec: FloodSpec, tally: Tally) -> None:
    """Metadata for all topics, one after another (answered by the Python path)."""
    with _wire(spec, spec.endpoint.bootstrap) as wire:
        _window(wire, spec, tally, 1, lambda: wire.encode(METADATA, metadata()))


@dataclasses.dataclass(frozen=True)
class Flood:
    """Connections, each running one of the functions above, for the flood's time."""

    doc: str
    connections: tuple[tuple[Callable[[FloodSpec, Tally], None], int], ...]
    preload: bool = False  # the topic needs FETCH_PRELOAD batches before the flood
    unit: str = "MB/s"  # how its rate is reported: bytes both ways per second, or answers per second


FLOODS: dict[str, Flood] = {
    "idle": Flood("no flood", ()),
    "produce": Flood("pipelined acks=0 Produce, 256 KiB batches, 1 connection", ((pipelined_produce, 1),)),
    "produce-2": Flood("pipelined acks=0 Produce, 256 KiB batches, 2 connections", ((pipelined_produce, 2),)),
    "fetch": Flood("100 Fetch in flight on each of 2 connections", ((pipelined_fetch, 2),), preload=True),
    "connections": Flood("64 connections, 4 small Produce in flight each", ((small_produce, 64),), unit="req/s"),
    "churn": Flood("4 connections, a fetch session each 10 ms", ((session_churn, 4),), preload=True, unit="req/s"),
    "handoff": Flood(
        "3 connections of session-opening Fetch, 3 of Metadata for all topics",
        ((session_opening_fetch, 3), (metadata_of_everything, 3)),
        preload=True,
        unit="req/s",
    ),
}


def run_flood(name: str, spec: FloodSpec) -> dict[str, int]:
    """In the flood's process: every connection a thread (sockets release the GIL), until the flood ends."""
    tally = Tally()

    def connection(work: Callable[[FloodSpec, Tally], None]) -> None:
        try:
            work(spec, tally)
        except (OSError, ConnectionError, ValueError):
            tally.add(errors=1)

    threads = [
        threading.Thread(target=connection, args=(work,), daemon=True)
        for work, count in FLOODS[name].connections
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, spec.end_at - time.monotonic()) + 15)
    return tally.summary()


# -- the victim -----------------------------------------------------------------------------------------


@dataclasses.dataclass
class Victim:
    """bob's round trips: each Produce and each Fetch, in seconds."""

    produce: list[float] = dataclasses.field(default_factory=list)
    fetch: list[float] = dataclasses.field(default_factory=list)
    ticks: int = 0  # rounds the pace asked for
    errors: int = 0  # error codes, or a Fetch without the record just produced
    sessions_lost: int = 0  # FETCH_SESSION_ID_NOT_FOUND: the session was evicted

    @property
    def all(self) -> list[float]:
        return self.produce + self.fetch


def victim(endpoint: Endpoint, topic: Topic, start_at: float, seconds: float, interval: float) -> Victim:
    """One Produce then one Fetch of it every `interval` from `start_at` for `seconds` (a round late skips the
    ticks it missed: a stalled victim does fewer rounds, it does not burst to catch up)."""
    seen = Victim()
    value = record_batch(1, 200)
    with (
        Wire(topic.leader, endpoint.cafile, VICTIM, timeout=60) as producer,
        Wire(topic.leader, endpoint.cafile, VICTIM, timeout=60) as consumer,
    ):
        session, epoch = 0, 0
        time.sleep(max(0.0, start_at - time.monotonic()))
        end = start_at + seconds
        tick = start_at
        while tick < end:
            started = time.perf_counter()
            answer = producer.ask(PRODUCE, produce(topic.name, value, acks=1))
            seen.produce.append(time.perf_counter() - started)
            partition = answer.responses[0].partition_responses[0]
            if int(partition.error_code) != 0:
                seen.errors += 1
            else:
                started = time.perf_counter()
                got = consumer.ask(FETCH, fetch(session, epoch, topic.topic_id, int(partition.base_offset), 500))
                seen.fetch.append(time.perf_counter() - started)
                if int(got.error_code) == 70:  # FETCH_SESSION_ID_NOT_FOUND: open another
                    seen.sessions_lost += 1
                    session, epoch = 0, 0
                elif int(got.error_code) != 0 or not got.responses or not got.responses[0].partitions[0].records:
                    seen.errors += 1
                else:  # the next in the session, or (none given) another full Fetch
                    session, epoch = int(got.session_id), (epoch + 1 if got.session_id else 0)
            seen.ticks += 1
            tick += interval
            now = time.monotonic()
            if tick < now:
                tick += (now - tick) // interval * interval + interval
            time.sleep(max(0.0, tick - time.monotonic()))
    return seen


# -- one measurement: a flood beside the victim ------------------------------------------------------------


def quantile(times: list[float], q: float) -> float:
    if len(times) < 2:
        return times[0] if times else float("nan")
    return statistics.quantiles(times, n=1000, method="inclusive")[round(q * 1000) - 1]


@dataclasses.dataclass
class Measured:
    arm: str
    flood: str
    tls: bool
    p50: float
    p99: float
    max: float
    stalls: int
    stalled_seconds: float  # the time spent in round trips over STALL
    requests: int
    ticks: int
    expected_ticks: int
    errors: int
    sessions_lost: int
    flood_rate: float  # MB/s or answers/s, as the flood's unit says
    tally: dict[str, int]  # the flood's own

    @property
    def label(self) -> str:
        return f"{self.flood}{' (TLS)' if self.tls else ''}"


class Flooding:
    """One flood's processes, started ahead of `start_at` (connected and waiting) and ended by `end_at`."""

    def __init__(self, name: str, spec: FloodSpec):
        self.procs = [] if not FLOODS[name].connections else [
            subprocess.Popen(
                [sys.executable, "-m", "benchmarks.noisy_neighbour", "flood", name, spec.to_json()],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=subprocess.PIPE,
                text=True,
            )
        ]  # fmt: skip
        self.spec = spec

    def results(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for proc in self.procs:
            try:
                out, _ = proc.communicate(timeout=max(0.0, self.spec.end_at - time.monotonic()) + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            lines = out.strip().splitlines()
            tally = json.loads(lines[-1]) if proc.returncode == 0 and lines else {"errors": 1, "failed": 1}
            for key, value in tally.items():
                total[key] = total.get(key, 0) + value
        return total

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def measure(
    name: str,
    arm: str,
    endpoint: Endpoint,
    victim_topic: Topic,
    seconds: float,
    interval: float,
    warmup: float = 1.0,
    lead: float = 3.0,
) -> Measured:
    """`name` flooded through `endpoint` by alice (on a topic of its own, deleted after) beside bob's victim: the
    flood's processes get `lead` seconds to start and connect, then `warmup` of flood before bob is timed."""
    flood = FLOODS[name]
    topic = None
    if flood.connections:
        topic = create_topic(endpoint, ATTACKER, f"noisy-{name}-{uuid.uuid4().hex[:6]}")
        if flood.preload:
            batch = record_batch(256, 1024)
            for _ in range(FETCH_PRELOAD):
                settled_produce(topic, endpoint, ATTACKER, batch)
    start_at = time.monotonic() + lead
    spec = FloodSpec(endpoint, topic or victim_topic, start_at, start_at + warmup + seconds + 0.5)
    flooding = Flooding(name, spec)
    try:
        seen = victim(endpoint, victim_topic, start_at + warmup, seconds, interval)
        tally = flooding.results()
    finally:
        flooding.kill()
        if topic is not None:
            with contextlib.suppress(OSError, RuntimeError):
                delete_topics(endpoint, ATTACKER, [topic.name])
    times = seen.all
    span = spec.end_at - spec.start_at
    rate = (
        (tally.get("bytes_out", 0) + tally.get("bytes_in", 0)) / 1e6
        if flood.unit == "MB/s"
        else tally.get("answers", 0)
    )
    return Measured(
        arm=arm,
        flood=name,
        tls=endpoint.cafile is not None,
        p50=quantile(times, 0.5),
        p99=quantile(times, 0.99),
        max=max(times, default=float("nan")),
        stalls=sum(t > STALL for t in times),
        stalled_seconds=sum(t for t in times if t > STALL),
        requests=len(times),
        ticks=seen.ticks,
        expected_ticks=int(seconds / interval),
        errors=seen.errors,
        sessions_lost=seen.sessions_lost,
        flood_rate=rate / span,
        tally=tally,
    )


# -- the arms: proxies and the broker ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Certificates:
    server: str  # certificate chain and key, one PEM file
    cafile: str
    keystore: str  # for the broker's TLS listener: the same, key first, as Kafka's PEM keystore takes it


def make_certificates(directory: Path) -> Certificates:
    """A CA and a certificate for 127.0.0.1 in `directory` (those already there, if any: a kept broker's)."""
    import trustme
    from cryptography.hazmat.primitives import serialization

    paths = Certificates(*(str(directory / n) for n in ("server.pem", "ca.pem", "keystore.pem")))
    if Path(paths.keystore).exists():
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert(HOST, "localhost")
    server.private_key_and_cert_chain_pem.write_to_path(paths.server)
    ca.cert_pem.write_to_path(paths.cafile)
    # Kafka's PEM keystore reads PKCS#8 keys only.
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    Path(paths.keystore).write_bytes(key + b"".join(c.bytes() for c in server.cert_chain_pems))
    return paths


def proxy_settings(upstream: str, port: int, certificates: Certificates | None) -> dict[str, Any]:
    """A tenancy proxy with alice's and bob's virtual clusters, plain or TLS (no client certificate)."""
    from vcproxy_tools.process import proxy_config

    listeners: dict[str, Any] = {}
    if certificates is not None:
        listeners = {"security_protocol": "SSL", "tls": {"certfile": certificates.server}}
    tenancy = {
        "enabled": True,
        "state_topic": f"__vcproxy_state_noisy_{uuid.uuid4().hex[:6]}",
        "virtual_clusters": VIRTUAL_CLUSTERS,
    }
    return proxy_config(upstream, port, listeners=listeners, tenancy=tenancy)


@contextlib.contextmanager
def forwarder(on: bool) -> Iterator[None]:
    """VCPROXY_FORWARDER=0 for the proxies started within, when `on` is false."""
    from proxy.protocol.native import FORWARDER_ENV

    before = os.environ.get(FORWARDER_ENV)
    if not on:
        os.environ[FORWARDER_ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FORWARDER_ENV, None)
        else:
            os.environ[FORWARDER_ENV] = before


def start_proxy(settings: dict[str, Any], workdir: Path, name: str, on: bool, workers: int = 1) -> Any:
    """A `vcproxy serve` with the forwarder on or off, checked by what its start log says."""
    from vcproxy_tools.process import ProxyProcess

    extra = ["--workers", str(workers)] if workers > 1 else []
    proxy = ProxyProcess(settings, workdir, name=name, extra_args=extra)
    try:
        with forwarder(on):
            proxy.start(timeout=180)
    except BaseException:  # interrupted while it starts: not left behind
        proxy.stop()
        raise
    said = proxy.log_path.read_text(errors="replace")
    wanted = "the forwarder for plain passthrough" if on else "the forwarder is off"
    if wanted not in said:
        proxy.stop()
        raise RuntimeError(f"{name}: its start log does not say '{wanted}':\n{proxy.log_tail()}")
    return proxy


def prepare(endpoint: Endpoint, metadata_topics: int = METADATA_TOPICS) -> Topic:
    """alice's Metadata topics and bob's victim topic behind `endpoint` (once per endpoint)."""
    for i in range(metadata_topics):
        create_topic(endpoint, ATTACKER, f"noisy-meta-{i}")
    topic = create_topic(endpoint, VICTIM, "noisy-victim")
    settled_produce(topic, endpoint, VICTIM, record_batch(1, 200))
    return topic


def ratios(results: list[Measured]) -> dict[tuple[str, bool, str], tuple[float, float]]:
    """Per (flood, tls, arm): its median p99 over the forwarder-off arm's and over the direct arm's."""
    p99 = {
        key: statistics.median(r.p99 for r in results if (r.flood, r.tls, r.arm) == key)
        for key in {(r.flood, r.tls, r.arm) for r in results}
    }
    out = {}
    for flood, tls, arm in p99:
        off, direct = p99.get((flood, tls, "off")), p99.get((flood, tls, "direct"))
        mine = p99[(flood, tls, arm)]
        out[(flood, tls, arm)] = (mine / off if off else float("nan"), mine / direct if direct else float("nan"))
    return out


def meets_targets(results: list[Measured], flood: str, tls: bool) -> str:
    """The issue's two targets for the forwarder-on arm: p99 <= 1.5 x off + 5 ms, and <= 1.5 x direct."""

    def median_p99(arm: str) -> float | None:
        values = [r.p99 for r in results if (r.flood, r.tls, r.arm) == (flood, tls, arm)]
        return statistics.median(values) if values else None

    on, off, direct = median_p99("on"), median_p99("off"), median_p99("direct")
    if on is None:
        return ""
    verdicts = []
    if off is not None:
        verdicts.append("off: " + ("met" if on <= 1.5 * off + 0.005 else "MISSED"))
    if direct is not None:
        verdicts.append("direct: " + ("met" if on <= 1.5 * direct else "MISSED"))
    return ", ".join(verdicts)


def ratio(value: float) -> str:
    return "" if value != value else f"{value:.2f}"  # NaN: that arm was not run


def table(results: list[Measured], markdown: bool = False) -> str:
    """Medians over rounds of each (flood, tls, arm)."""
    groups: dict[tuple[str, bool, str], list[Measured]] = {}
    for r in results:
        groups.setdefault((r.flood, r.tls, r.arm), []).append(r)
    rel = ratios(results)
    head = ["flood", "arm", "p50 ms", "p99 ms", "max ms", "stalls > 100 ms", "victim rounds", "÷ off p99",
            "÷ direct p99", "flood rate", "targets (on)"]  # fmt: skip
    rows = []
    order = {name: i for i, name in enumerate(FLOODS)}
    for flood, tls, arm in sorted(groups, key=lambda k: (k[1], order[k[0]], ARMS.index(k[2]))):
        runs = groups[(flood, tls, arm)]

        def med(get: Callable[[Measured], float], runs: list[Measured] = runs) -> float:
            return statistics.median(get(r) for r in runs)

        by_off, by_direct = rel[(flood, tls, arm)]
        rows.append([
            runs[0].label, arm, f"{med(lambda r: r.p50) * 1e3:.1f}", f"{med(lambda r: r.p99) * 1e3:.1f}",
            f"{med(lambda r: r.max) * 1e3:.0f}",
            f"{med(lambda r: r.stalls):.0f} ({med(lambda r: r.stalled_seconds):.1f} s)",
            f"{med(lambda r: r.ticks):.0f}/{runs[0].expected_ticks}",
            ratio(by_off), ratio(by_direct),
            f"{med(lambda r: r.flood_rate):,.0f} {FLOODS[flood].unit}" if FLOODS[flood].connections else "",
            meets_targets(results, flood, tls) if arm == "on" else "",
        ])  # fmt: skip
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in column) for column in zip(head, *rows, strict=True)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)) for row in [head, *rows])


def start_kafka(directory: Path, port: int, certificates: Certificates) -> tuple[str, str]:
    """A one-broker cluster with a TLS listener beside its plaintext one: (plain bootstrap, TLS bootstrap). One
    already running in `directory` (a kept one) is used as it is."""
    if (directory / "cluster.json").exists():
        port = int(json.loads((directory / "cluster.json").read_text())["bootstrap"].rpartition(":")[2])
        print(f"using the broker running in {directory}", flush=True)
        return f"{HOST}:{port}", f"{HOST}:{port + 5}"
    print(f"starting a one-broker Kafka on {HOST}:{port} ...", flush=True)
    tls_port = port + 5
    props = {
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{port + 1},SSL://{HOST}:{tls_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port},SSL://{HOST}:{tls_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": certificates.keystore,
        # The floods write gigabytes a minute: what a flood's topic holds, and what a deleted one leaves behind, is
        # removed within seconds, so the disk (a shared one, on the development machine) never fills.
        "log.retention.bytes": str(256 << 20),
        "log.segment.bytes": str(32 << 20),
        "log.retention.check.interval.ms": "2000",
        "file.delete.delay.ms": "1000",
        # The churn flood opens 400 sessions a second: with the default 1,000 slots it would be given none after
        # its first seconds (a slot is taken from another session only once that one is 2 minutes idle).
        "max.incremental.fetch.session.cache.slots": "60000",
    }
    argv = [sys.executable, "-m", "vcproxy_tools", "kafka", "start", "--dir", str(directory), "--brokers", "1",
            "--base-port", str(port), *(x for k, v in props.items() for x in ("--property", f"{k}={v}"))]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"kafka start failed:\n{done.stderr[-3000:]}{done.stdout[-2000:]}")
    return f"{HOST}:{port}", f"{HOST}:{tls_port}"


def stop_kafka(directory: Path) -> None:
    subprocess.run([sys.executable, "-m", "vcproxy_tools", "kafka", "stop", "--dir", str(directory)], cwd=ROOT,
                   capture_output=True, timeout=300)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = "; ".join(f"{name}: {flood.doc}" for name, flood in FLOODS.items())
    parser.add_argument("--floods", default=",".join(FLOODS), help=f"comma-separated, of: {kinds}")
    parser.add_argument("--tls", default="plain,tls", help="plain, tls or both (plain,tls)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of: {', '.join(ARMS)}")
    parser.add_argument("--seconds", type=float, default=10.0, help="the victim's measured time per run")
    parser.add_argument("--interval", type=float, default=0.01, help="the victim's pace (s)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1, help="the proxy's workers (vcproxy serve --workers)")
    parser.add_argument("--bootstrap", help="a running cluster's (its direct arm of a TLS flood is then plaintext)")
    parser.add_argument("--kafka-dir", help="keep our broker here, running, for the next run (else a temporary one)")
    parser.add_argument("--base-port", type=int, default=29400, help="our broker's port (TLS: +5)")
    parser.add_argument("--proxy-port", type=int, default=29500, help="the first proxy's; each next one +100")
    parser.add_argument("--markdown", help="write the table as markdown to this file")
    parser.add_argument("--json", help="write every run's figures to this file")
    pin_help = "KAFKA/PROXY CPU lists, e.g. 0/1: the broker, floods and victim on the first, proxies on the other"
    parser.add_argument("--pin", help=pin_help)
    args = parser.parse_args()
    pin = None
    if args.pin:
        try:
            pin = parse_pin(args.pin)
        except BenchError as exc:
            parser.error(str(exc))
        os.sched_setaffinity(0, pin[0])  # this process (the victim), the floods and the broker it starts inherit it
    floods = args.floods.split(",")
    modes = [mode == "tls" for mode in args.tls.split(",")]
    arms = args.arms.split(",")
    for name in floods:
        if name not in FLOODS:
            parser.error(f"unknown flood {name}")
    results: list[Measured] = []
    loads = [os.getloadavg()[0]]  # the machine's load: what its figures were measured beside
    with tempfile.TemporaryDirectory(prefix="vcnoisy-") as tmp:
        work = Path(tmp)
        kafka_dir = Path(args.kafka_dir).resolve() if args.kafka_dir else work / "kafka"
        certificates = make_certificates(kafka_dir / "certs")
        proxies: list[Any] = []
        try:
            if args.bootstrap:
                plain, tls = args.bootstrap, None
            else:
                plain, tls = start_kafka(kafka_dir, args.base_port, certificates)
            endpoints: dict[tuple[str, bool], Endpoint] = {}
            port = args.proxy_port
            for secure in modes:
                for arm in arms:
                    if arm == "direct":
                        direct = tls if secure and tls else plain
                        endpoints[(arm, secure)] = Endpoint(direct, certificates.cafile if secure and tls else None)
                        continue
                    settings = proxy_settings(plain, port, certificates if secure else None)
                    name = f"{arm}-{'tls' if secure else 'plain'}"
                    proxies.append(start_proxy(settings, work, name, on=arm == "on", workers=args.workers))
                    if pin is not None:
                        for pid in [proxies[-1].pid, *children_of(proxies[-1].pid)]:
                            pin_threads(pid, pin[1])
                    endpoints[(arm, secure)] = Endpoint(f"{HOST}:{port}", certificates.cafile if secure else None)
                    port += 100
            victims = {key: prepare(endpoint) for key, endpoint in endpoints.items()}
            for round_no in range(args.rounds):
                for secure in modes:
                    for name in floods:
                        order = arms[round_no % len(arms) :] + arms[: round_no % len(arms)]
                        for arm in order:
                            key = (arm, secure)
                            try:
                                r = measure(name, arm, endpoints[key], victims[key], args.seconds, args.interval)
                            except (OSError, RuntimeError) as exc:  # reported; the other runs go on
                                print(f"round {round_no + 1} {name} {key}: FAILED: {exc!r}", flush=True)
                                for proxy in proxies:
                                    print(f"{proxy.log_path.name}:\n{proxy.log_tail(lines=10)}", flush=True)
                                continue
                            results.append(r)
                            if args.json:  # as it goes: a run cut short keeps what it measured
                                Path(args.json).write_text(json.dumps([dataclasses.asdict(r) for r in results]))
                            print(f"round {round_no + 1} {r.label:<20} {arm:<7} p50 {r.p50 * 1e3:6.1f} ms  "
                                  f"p99 {r.p99 * 1e3:7.1f} ms  max {r.max * 1e3:7.0f} ms  stalls {r.stalls:3d}  "
                                  f"rounds {r.ticks}/{r.expected_ticks}  errors {r.errors}  "
                                  f"sessions lost {r.sessions_lost}  flood {r.tally}", flush=True)  # fmt: skip
        finally:
            for proxy in proxies:
                proxy.stop()
            if not args.bootstrap and not args.kafka_dir:
                stop_kafka(kafka_dir)
    loads.append(os.getloadavg()[0])
    said = f"load average (1 min) {loads[0]:.1f} at the start, {loads[1]:.1f} at the end"
    if pin is not None:
        said += f"; pinned: the broker, the floods and the victim on CPUs {pin[0]}, every proxy on {pin[1]}"
    print(f"\n{table(results)}\n{said}")
    if args.markdown:
        Path(args.markdown).write_text(f"{table(results, markdown=True)}\n\n{said}\n")
    if args.json:
        Path(args.json).write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "flood":
        print(json.dumps(run_flood(sys.argv[2], FloodSpec.from_json(sys.argv[3]))), flush=True)
    else:
        main()
