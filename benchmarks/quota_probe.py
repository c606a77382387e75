"""The pipelining probe of a client quota: one user keeps `--depth` requests in flight on each of `--connections`
raw connections for `--seconds`, then a fresh connection of the same user does the same for `--fresh` seconds; what
the user got in all (Fetch answers' bytes, Produce requests' bytes acknowledged, or requests answered) against its
quota x (time + one window). Kafka's broker holds this by muting a channel after a throttled answer; the proxy by
bounding each Fetch by what the quota holds and by waiting out a debt in full (docs/quotas.md).

The kinds: `fetch` (consumer_byte_rate; Fetch v13 from offset 0 of a 1-partition topic, max_bytes 1 MiB), `produce`
(producer_byte_rate; Produce v9 of one 16 KB record batch, acks=1), `request` (request_rate; Metadata v12).

Run against a running Kafka (`vcproxy kafka start --dir D --brokers 1 --base-port 29092`): it starts the proxy itself,
with 2 workers, the forwarder on and (`--forwarder off`) off:
    PYTHONPATH=. .venv/bin/python benchmarks/quota_probe.py --bootstrap 127.0.0.1:29092 --seconds 60 \\
        --kinds fetch,produce,request --connections 1,4 --forwarder on,off
tests/integration/test_quota_probe.py runs the same probe, shorter.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import i8, i16, i32, i64

from proxy.auth.credentials import make_entry
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, response_body_offset
from vcproxy_tools import process
from vcproxy_tools.process import ProxyProcess, proxy_config

PASSWORD = "probe-secret"
ADMIN = "vcadmin"  # the VC's admin: sets the quotas, fills the topic (no quota of its own)
QUOTAS = {"fetch": ("consumer_byte_rate", 200_000.0), "produce": ("producer_byte_rate", 200_000.0),
          "request": ("request_rate", 50.0)}  # fmt: skip
WINDOW = 1.0  # seconds: one quota window (quota.window.size.seconds)
FETCH, PRODUCE, METADATA = 1, 0, 3
BATCH = 16 * 1024  # a Produce request's record batch, and the topic's


def config(kafka_bootstrap: str, port: int, metrics_port: int, users: list[str]) -> dict[str, Any]:
    """A proxy with one VC, `probe`, whose admin is ADMIN and whose members are `users`."""
    return proxy_config(
        kafka_bootstrap,
        port,
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["PLAIN"]},
        credentials={"users": {u: make_entry(PASSWORD, 4096) for u in [ADMIN, *users]}},
        tenancy={
            "enabled": True,
            "state_topic": f"__vcproxy_state_probe_{uuid.uuid4().hex[:6]}",
            "virtual_clusters": [
                {"name": "probe", "principals": [f"User:{u}" for u in [ADMIN, *users]], "admins": [f"User:{ADMIN}"]}
            ],
        },
        metrics={"enabled": True, "port": metrics_port},
    )


def start(config: dict[str, Any], workdir: Path, name: str, forwarder: bool) -> ProxyProcess:
    """The proxy with 2 workers, in a process of its own when the forwarder is off (VCPROXY_FORWARDER=0 is read when
    the proxy imports its modules: a fork server's proxies inherit its choice)."""
    saved = process._launch
    env = {} if forwarder else {"VCPROXY_FORWARDER": "0"}
    try:
        if not forwarder:
            process.launch_with(None)
        with mock.patch.dict(os.environ, env):
            return ProxyProcess(config, workdir, name=name, extra_args=["--workers", "2"]).start(timeout=180)
    finally:
        process._launch = saved


# -- a raw connection --------------------------------------------------------------------------------------------


class Conn:
    def __init__(self, address: str, user: str, timeout: float = 120):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.ask(18, 3, entity(18, 3, client_software_name="probe", client_software_version="1"))
        handshake = self.ask(17, 1, entity(17, 1, mechanism="PLAIN"))
        assert int(handshake.error_code) == 0, handshake
        auth = self.ask(36, 2, entity(36, 2, auth_bytes=f"\0{user}\0{PASSWORD}".encode()))
        assert int(auth.error_code) == 0, auth.error_message

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> bytes:
        size = int.from_bytes(self._exactly(4), "big")
        return size.to_bytes(4, "big") + self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the proxy")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def ask(self, key: int, version: int, body: Any) -> Any:
        self.send(request(key, version, 0, body))
        return decode(key, version, self.read())


def entity(key: int, version: int, **fields: Any) -> Any:
    return codec._empty(request_type(key, version), **fields)


def request(key: int, version: int, correlation: int, body: Any) -> bytes:
    header = encode_request_header(key, version, correlation, "probe", api_info(key).request_header_version(version))
    return frame(header + (body if isinstance(body, bytes) else codec.encode(body)))


def decode(key: int, version: int, raw: bytes) -> Any:
    info = api_info(key)
    assert info is not None
    offset = response_body_offset(memoryview(raw), info.response_header_version(version))
    return codec.decode(response_type(key, version), memoryview(raw), offset)[0]


def record_batch(size: int) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    values = [os.urandom(1000) for _ in range(max(1, size // 1000))]
    records = tuple(
        Record(attributes=i8(0), timestamp=now, offset=i64(n), key=None, value=v, headers=())
        for n, v in enumerate(values)
    )
    batch = NewRecordBatch(
        producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1), records=records, attributes=i16(0)
    )
    out = io.BytesIO()
    write_new_batch(out, batch)
    return out.getvalue()


# -- the requests of each kind ----------------------------------------------------------------------------------


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    leader: str  # host:port of partition 0's leader at the proxy


def requests_of(kind: str, topic: Topic) -> tuple[int, int, bytes, str]:
    """(api key, version, the body every request of the probe carries, the address it goes to)."""
    if kind == "fetch":
        from kio.schema.fetch.v13 import request as fq

        partition = codec._empty(
            fq.FetchPartition, partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1,
            last_fetched_epoch=-1, log_start_offset=-1,
        )  # fmt: skip
        body = codec._empty(
            fq.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=0,
            max_bytes=1 << 20, session_id=0, session_epoch=-1,
            topics=(codec._empty(fq.FetchTopic, topic_id=topic.topic_id, partitions=(partition,)),),
        )  # fmt: skip
        return FETCH, 13, codec.encode(body), topic.leader
    if kind == "produce":
        from kio.schema.produce.v9 import request as pq

        data = pq.PartitionProduceData(index=i32(0), records=record_batch(BATCH))
        body = pq.ProduceRequest(
            transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=30),
            topic_data=(pq.TopicProduceData(name=topic.name, partition_data=(data,)),),
        )  # fmt: skip
        return PRODUCE, 9, codec.encode(body), topic.leader
    from kio.schema.metadata.v12 import request as mq

    body = mq.MetadataRequest(
        topics=(mq.MetadataRequestTopic(name=topic.name, topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )  # fmt: skip
    return METADATA, 12, codec.encode(body), topic.leader


# -- the probe ---------------------------------------------------------------------------------------------------


@dataclass
class Flow:
    """What one connection got: (when, amount) per answer, and the largest throttle time it was told."""

    got: list[tuple[float, float]] = field(default_factory=list)
    throttle_ms: int = 0
    first_throttle_ms: int | None = None
    errors: list[str] = field(default_factory=list)


def _throttle(key: int, version: int, raw: bytes) -> int:
    if key == PRODUCE:  # after the responses array: decoded (a Produce answer is small)
        return int(decode(key, version, raw).throttle_time.total_seconds() * 1000)
    # Fetch v13 and Metadata v12: response header v1 (a correlation id, no tagged field), then throttle_time_ms.
    assert raw[8] == 0
    return int.from_bytes(raw[9:13], "big", signed=True)


def pipeline(kind: str, topic: Topic, user: str, until: float, depth: int, flow: Flow) -> None:
    """One connection keeping `depth` requests in flight until `until` (time.monotonic()), the answers counted (from
    its first answer on: the first request goes alone)."""
    key, version, body, address = requests_of(kind, topic)
    conn = Conn(address, user)
    try:
        sent: dict[int, int] = {}
        correlation = 0

        def send() -> None:
            nonlocal correlation
            correlation += 1
            data = request(key, version, correlation, body)
            sent[correlation] = len(data)
            conn.send(data)

        send()  # one alone first, as a client starts: the connection is quiet once it is answered (the forwarder may
        # take it then, with what the quota holds), and from its answer on `depth` are kept in flight
        while time.monotonic() < until:
            raw = conn.read()
            now = time.monotonic()
            answered = int.from_bytes(raw[4:8], "big", signed=True)
            size = sent.pop(answered)
            amount = {"fetch": float(len(raw)), "produce": float(size), "request": 1.0}[kind]
            throttle = _throttle(key, version, raw)
            if flow.first_throttle_ms is None:
                flow.first_throttle_ms = throttle
            flow.throttle_ms = max(flow.throttle_ms, throttle)
            if now < until:
                flow.got.append((now, amount))
                while len(sent) < depth:
                    send()
    except (OSError, ConnectionError, AssertionError) as exc:
        flow.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


@dataclass
class Result:
    kind: str
    connections: int
    seconds: float  # the flood's, then the fresh connection's
    quota: float
    got: float  # in all, the fresh connection's included
    fresh_got: float
    fresh_first_throttle_ms: int | None
    throttle_ms: int
    errors: list[str]

    @property
    def bound(self) -> float:
        """quota x (time + one window): what a client pipelining as fast as it can may get."""
        return self.quota * (self.seconds + WINDOW)

    def line(self) -> str:
        return (
            f"{self.kind:8} {self.connections} conn  {self.got:>12,.0f} in {self.seconds:.0f} s = "
            f"{self.got / self.bound:.3f} x quota x (time + 1 window); fresh connection: {self.fresh_got:,.0f}, "
            f"first throttle {self.fresh_first_throttle_ms} ms; largest throttle told {self.throttle_ms} ms"
        )


def probe(kind: str, topic: Topic, user: str, connections: int, seconds: float, fresh: float,
          depth: int = 100) -> Result:  # fmt: skip
    """`connections` connections of `user` pipelining `depth` requests each for `seconds`, then a fresh one for
    `fresh` seconds."""
    start = time.monotonic()
    flows = [Flow() for _ in range(connections)]
    threads = [
        threading.Thread(target=pipeline, args=(kind, topic, user, start + seconds, depth, flow), daemon=True)
        for flow in flows
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    after = Flow()
    pipeline(kind, topic, user, time.monotonic() + fresh, depth, after)
    end = time.monotonic()
    total = sum(amount for flow in [*flows, after] for _, amount in flow.got)
    return Result(
        kind,
        connections,
        end - start,
        QUOTAS[kind][1],
        total,
        sum(amount for _, amount in after.got),
        after.first_throttle_ms,
        max(flow.throttle_ms for flow in [*flows, after]),
        [e for flow in [*flows, after] for e in flow.errors],
    )


# -- setting up --------------------------------------------------------------------------------------------------


def set_quota(bootstrap: str, user: str, key: str, value: float) -> None:
    """AlterClientQuotas as the VC's admin (kafka-configs does the same)."""
    from kio.schema.alter_client_quotas.v1 import request as aq

    entry = aq.EntryData(
        entity=(aq.EntityData(entity_type="user", entity_name=user),),
        ops=(aq.OpData(key=key, value=value, remove=False),),
    )
    admin = Conn(bootstrap, ADMIN)
    try:
        answer = admin.ask(49, 1, aq.AlterClientQuotasRequest(entries=(entry,), validate_only=False))
    finally:
        admin.close()
    assert [int(e.error_code) for e in answer.entries] == [0], answer


def wait_for_quota(bootstrap: str, user: str, key: str, timeout: float = 60) -> None:
    """Until both workers answer DescribeClientQuotas with `user`'s quota (two connections open at once go to both)."""
    from kio.schema.describe_client_quotas.v1 import request as dq

    component = dq.ComponentData(entity_type="user", match_type=i8(0), match=user)
    ask = dq.DescribeClientQuotasRequest(components=(component,), strict=False)
    deadline = time.monotonic() + timeout
    while True:
        admins = [Conn(bootstrap, ADMIN) for _ in range(4)]
        try:
            seen = [any(v.key == key for e in a.ask(48, 1, ask).entries for v in e.values) for a in admins]
        finally:
            for a in admins:
                a.close()
        if all(seen):
            return
        assert time.monotonic() < deadline, f"{user}'s {key} not seen by every worker: {seen}"
        time.sleep(0.1)


def make_topic(bootstrap: str, size: int) -> Topic:
    """A 1-partition topic in the VC holding `size` bytes in BATCH-sized record batches (written by the admin)."""
    from kio.schema.create_topics.v7 import request as cq
    from kio.schema.metadata.v12 import request as mq
    from kio.schema.produce.v9 import request as pq

    name = f"probe-{uuid.uuid4().hex[:6]}"
    admin = Conn(bootstrap, ADMIN)
    try:
        topic = cq.CreatableTopic(
            name=name, num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=()
        )
        created = admin.ask(19, 7, cq.CreateTopicsRequest(
            topics=(topic,), timeout=datetime.timedelta(seconds=30), validate_only=False))  # fmt: skip
        assert int(created.topics[0].error_code) == 0, created
        deadline = time.monotonic() + 60
        while True:
            meta = admin.ask(METADATA, 12, mq.MetadataRequest(
                topics=(mq.MetadataRequestTopic(name=name, topic_id=uuid.UUID(int=0)),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))  # fmt: skip
            (entry,) = meta.topics
            if int(entry.error_code) == 0 and entry.partitions and int(entry.partitions[0].leader_id) >= 0:
                leader = {b.node_id: f"{b.host}:{b.port}" for b in meta.brokers}[entry.partitions[0].leader_id]
                break
            assert time.monotonic() < deadline, entry
            time.sleep(0.2)
    finally:
        admin.close()
    found = Topic(name, entry.topic_id, leader)
    writer = Conn(leader, ADMIN)
    try:
        batch, written = record_batch(BATCH), 0
        while written < size:
            data = pq.PartitionProduceData(index=i32(0), records=batch)
            body = pq.ProduceRequest(
                transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=30),
                topic_data=(pq.TopicProduceData(name=name, partition_data=(data,)),),
            )  # fmt: skip
            answer = writer.ask(PRODUCE, 9, body)
            code = int(answer.responses[0].partition_responses[0].error_code)
            if code == 0:
                written += len(batch)
            else:
                assert time.monotonic() < deadline + 60, code
                time.sleep(0.2)
    finally:
        writer.close()
    return found


@contextlib.contextmanager
def _proxy(bootstrap: str, forwarder: bool, users: list[str], port: int, metrics_port: int) -> Iterator[ProxyProcess]:
    with tempfile.TemporaryDirectory() as workdir:
        proxy = start(config(bootstrap, port, metrics_port, users), Path(workdir), "probe", forwarder)
        try:
            yield proxy
        finally:
            proxy.stop(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True, help="the Kafka cluster's")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--fresh", type=float, default=5.0, help="seconds of the fresh connection after the flood")
    parser.add_argument("--kinds", default="fetch,produce,request")
    parser.add_argument("--connections", default="1,4")
    parser.add_argument("--forwarder", default="on,off")
    parser.add_argument("--port", type=int, default=29600, help="the proxy's bootstrap port (and the 8 after it)")
    parser.add_argument("--metrics-port", type=int, default=29590)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    kinds, counts = args.kinds.split(","), [int(c) for c in args.connections.split(",")]
    for engine in args.forwarder.split(","):
        users = [f"{kind}{n}" for kind in kinds for n in counts]
        with _proxy(args.bootstrap, engine == "on", users, args.port, args.metrics_port) as proxy:
            topic = make_topic(proxy.bootstrap, 8 << 20)
            for kind in kinds:
                for n in counts:
                    user = f"{kind}{n}"
                    set_quota(proxy.bootstrap, user, *QUOTAS[kind])
                    wait_for_quota(proxy.bootstrap, user, QUOTAS[kind][0])
                    result = probe(kind, topic, user, n, args.seconds, args.fresh)
                    print(json.dumps(result.__dict__) if args.json else f"forwarder {engine:3} {result.line()}",
                          flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
