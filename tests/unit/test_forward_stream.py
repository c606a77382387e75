"""A large Fetch answer through the forwarder (native/src/forward.rs): sent on as it arrives, its record batches
spliced from one socket to the other, and still byte for byte what the broker sent, or what Python's rewrite of
its leader hints makes of it, or the connection ends."""

from __future__ import annotations

import datetime
import os
import random
import socket
import uuid

import pytest
import trio
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import response as fetch12
from kio.schema.fetch.v17 import request as fq
from kio.schema.fetch.v17 import response as fs

from proxy.core import apiversions
from proxy.core.forward_table import entries_for
from proxy.net.forwarder import Forwarder, ForwarderLimits, Outcome
from proxy.observability.scan import scan
from proxy.protocol import native
from proxy.protocol.apikey import ApiKey
from proxy.protocol.headers import response_body_offset

from .wire import request_frame, response_frame

if native.module() is None:
    if os.environ.get("CI") == "true":  # CI builds it: missing there is a failure, not a skip
        raise ImportError("vcproxy_native is not built")
    pytest.skip("vcproxy_native is not built (make .venv/.installed-test builds it)", allow_module_level=True)

FORWARDER = Forwarder(native.module())
TABLE = native.module().ForwardTable(entries_for(tuple(sorted(apiversions.proxy_versions().items()))))
LIMITS = ForwarderLimits(max_in_flight=100, max_frame_bytes=8 << 20, buffer_bytes=1 << 20, idle_timeout=600.0)


def fetch(correlation: int, version: int = 17) -> bytes:
    body = fq.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        session_id=0,
        session_epoch=-1,
        topics=(
            fq.FetchTopic(
                topic_id=uuid.UUID(int=7),
                partitions=(fq.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
    )
    return request_frame(ApiKey.FETCH, version, correlation, body)


def fetched(correlation: int, records: list[list[bytes | None]], hosts: tuple[str, ...] = ()) -> bytes:
    """A Fetch v17 answer: one topic per list, one partition per item of it; leader hints for `hosts`."""
    topics = tuple(
        fs.FetchableTopicResponse(
            topic_id=uuid.UUID(int=t + 1),
            partitions=tuple(
                fs.PartitionData(
                    partition_index=p,
                    error_code=ErrorCode.none,
                    high_watermark=10,
                    aborted_transactions=None,
                    records=r,
                )
                for p, r in enumerate(parts)
            ),
        )
        for t, parts in enumerate(records)
    )
    endpoints = tuple(fs.NodeEndpoint(node_id=i + 1, host=h, port=9092) for i, h in enumerate(hosts))
    body = fs.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0, responses=topics,
        node_endpoints=endpoints,
    )  # fmt: skip
    return response_frame(ApiKey.FETCH, 17, correlation, body)


def _tcp_pair() -> tuple[trio.socket.SocketType, trio.socket.SocketType]:
    """Two connected loopback TCP sockets, as the proxy's are (splice(2) moves pages between TCP sockets)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    for sock in (near, far):
        sock.setblocking(False)
    return trio.socket.from_stdlib_socket(near), trio.socket.from_stdlib_socket(far)


STREAM_STEP = 16 * 1024  # native/src/forward.rs: new bytes of a large answer between two looks at what may go on


async def no_rewrite(*_: object) -> bytes:
    return b""


class Pair:
    """The proxy's two sockets (as trio streams) and the peers' ends: the client's and the broker's."""

    def __init__(self, kind: str = "tcp") -> None:
        make = _tcp_pair if kind == "tcp" else trio.socket.socketpair  # Unix sockets: copied, not spliced
        a, self.client = make()
        b, self.broker = make()
        self.proxy_client, self.proxy_broker = trio.SocketStream(a), trio.SocketStream(b)

    async def run(self, hook=None, started=lambda phase: None, sampling=None, spans=None) -> Outcome:
        with trio.fail_after(30):  # a hang fails the test, not the suite
            return await FORWARDER.serve(
                self.proxy_client,
                self.proxy_broker,
                TABLE,
                hook or no_rewrite,
                LIMITS,
                started,
                sampling=sampling,
                spans=spans,
            )

    @staticmethod
    async def send(sock: trio.socket.SocketType, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[await sock.send(view) :]

    @staticmethod
    async def read(sock: trio.socket.SocketType, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = await sock.recv(n - len(out))
            assert chunk, "end of stream"
            out += chunk
        return bytes(out)


def _blob(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


@pytest.mark.parametrize("kind", ["tcp", "unix"])
async def test_a_large_answer_reaches_the_client_before_the_broker_has_sent_all_of_it(kind):
    """Cut-through: the client reads most of the answer while the broker still holds its last bytes."""
    rng = random.Random(1)
    answer = fetched(1, [[_blob(rng, 600_000)]])
    pair = Pair(kind)
    await pair.send(pair.client, fetch(1))

    async def peers() -> None:
        assert await pair.read(pair.broker, len(fetch(1))) == fetch(1)
        await pair.send(pair.broker, answer[:-100])
        # Stored whole first, none of it would come before the rest is sent. Over Unix sockets (copied) the forwarder
        # looks at what has come each STREAM_STEP (16 KiB) of it: up to that much of the tail waits for the next look.
        with trio.fail_after(10):
            head = await pair.read(pair.client, len(answer) - 100 - STREAM_STEP)
        await pair.send(pair.broker, answer[-100:])
        assert head + await pair.read(pair.client, 100 + STREAM_STEP) == answer
        pair.client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run()
    assert (outcome.kind, outcome.requests, outcome.responses) == ("client-closed", 1, 1)


@pytest.mark.parametrize("kind", ["tcp", "unix"])
async def test_a_sampled_answer_still_goes_on_as_it_comes_and_its_record_keeps_a_sketch_of_it(kind):
    """Tracing: a sampled Fetch answer is sent on as it comes and its batches spliced like any other; the record its
    span is made from keeps a sketch of it (its batches left out, their lengths kept), whose scan says what the whole
    answer's does, and the size the client got."""
    rng = random.Random(2)
    answer = fetched(1, [[_blob(rng, 300_000), _blob(rng, 20)], [None]])
    pair = Pair(kind)
    await pair.send(pair.client, fetch(1))
    records: list = []

    async def peers() -> None:
        assert await pair.read(pair.broker, len(fetch(1))) == fetch(1)
        await pair.send(pair.broker, answer)
        assert await pair.read(pair.client, len(answer)) == answer
        pair.client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run(sampling=(2**64, None), spans=lambda taken, epoch: records.extend(taken))
    assert (outcome.kind, outcome.requests, outcome.responses) == ("client-closed", 1, 1)
    ((_, key, version, correlation, start, end, request, upstream, sent, size, elided),) = records
    assert (key, version, correlation, request, sent, size, elided) == (1, 17, 1, fetch(1), None, len(answer), True)
    assert upstream == TABLE.sketch(1, 17, answer) and len(upstream) < 1_000
    body = response_body_offset(answer, 1)
    whole, sketch = scan(fs.FetchResponse, answer, body), scan(fs.FetchResponse, upstream, body, elided=True)
    assert sketch == whole and sum(whole.topics.values()) > 300_000
    assert 0 < start <= end


@pytest.mark.parametrize("kind", ["tcp", "unix"])
@pytest.mark.parametrize("seed", range(6))
async def test_answers_in_any_pieces_pass_byte_for_byte_and_in_order(seed, kind):
    """Several topics and partitions, record batches of any size (none, small, large), answers back to back, the
    broker's bytes in pieces of any size: the client gets exactly what the broker sent."""
    rng = random.Random(seed)
    answers = []
    for c in range(1, 6):
        topics = [
            [rng.choice([None, b"", _blob(rng, rng.randint(1, 300)), _blob(rng, rng.randint(20_000, 400_000))])
             for _ in range(rng.randint(1, 3))]
            for _ in range(rng.randint(1, 3))
        ]  # fmt: skip
        answers.append(fetched(c, topics))
    requests = b"".join(fetch(c) for c in range(1, 6))
    wire = b"".join(answers)
    pair = Pair(kind)
    await pair.send(pair.client, requests)

    async def broker() -> None:
        assert await pair.read(pair.broker, len(requests)) == requests
        at = 0
        while at < len(wire):
            step = rng.choice([1, 7, 100, 4096, 65_536, 300_000])
            await pair.send(pair.broker, wire[at : at + step])
            at += step
            await trio.lowlevel.checkpoint()  # let the forwarder's thread see the pieces apart, as often as it will

    async def client() -> None:
        assert await pair.read(pair.client, len(wire)) == wire
        pair.client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker)
        nursery.start_soon(client)
        outcome = await pair.run()
    assert (outcome.kind, outcome.requests, outcome.responses) == ("client-closed", 5, 5)


async def test_an_older_fetch_answer_streams_too():
    """Fetch v12 (flexible, topics by name, no leader hints): the same."""
    rng = random.Random(3)
    partition = fetch12.PartitionData(
        partition_index=0,
        error_code=ErrorCode.none,
        high_watermark=1,
        aborted_transactions=None,
        records=_blob(rng, 300_000),
    )
    body = fetch12.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
        responses=(fetch12.FetchableTopicResponse(topic="orders", partitions=(partition,)),),
    )  # fmt: skip
    answer = response_frame(ApiKey.FETCH, 12, 9, body)
    pair = Pair()
    await pair.send(pair.client, fetch(9, version=12))

    async def peers() -> None:
        await pair.read(pair.broker, len(fetch(9, version=12)))
        await pair.send(pair.broker, answer[:-10])
        with trio.fail_after(10):
            head = await pair.read(pair.client, len(answer) - 20)
        await pair.send(pair.broker, answer[-10:])
        assert head + await pair.read(pair.client, 20) == answer
        pair.client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run()
    assert (outcome.kind, outcome.responses) == ("client-closed", 1)


async def test_leader_hints_rewritten_to_the_same_length_end_the_answer_that_went_on_as_it_came():
    """The hints are the answer's tagged section, held back until the answer is whole; Python's rewrite gets the
    whole answer and its tail goes on."""
    rng = random.Random(4)
    answer = fetched(2, [[_blob(rng, 500_000)]], hosts=("kafka-1.internal",))
    expected = answer.replace(b"kafka-1.internal", b"proxy-1.example!")
    seen = []

    async def hook(api_key: int, version: int, frame: bytes, note: object) -> bytes:
        seen.append((api_key, version, len(frame)))
        return frame.replace(b"kafka-1.internal", b"proxy-1.example!")

    pair = Pair()
    await pair.send(pair.client, fetch(2))

    async def peers() -> None:
        await pair.read(pair.broker, len(fetch(2)))
        await pair.send(pair.broker, answer)
        assert await pair.read(pair.client, len(expected)) == expected
        pair.client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run(hook=hook)
    assert seen == [(ApiKey.FETCH, 17, len(answer))]
    assert (outcome.kind, outcome.responses) == ("client-closed", 1)


async def test_a_rewrite_of_another_length_after_the_answer_went_on_ends_the_connection():
    """The size the answer started with has gone: the client cannot be given the rewrite, so the connection ends
    (the client fetches again on a new one) rather than a frame that lies about its size."""
    rng = random.Random(5)
    answer = fetched(3, [[_blob(rng, 500_000)]], hosts=("kafka-1.internal",))
    pair = Pair()
    await pair.send(pair.client, fetch(3))

    async def broker() -> None:
        await pair.read(pair.broker, len(fetch(3)))
        await pair.send(pair.broker, answer)

    async def client() -> None:
        while await pair.client.recv(1 << 16):
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker)
        nursery.start_soon(client)

        async def hook(_k: int, _v: int, frame: bytes, _n: object) -> bytes:
            return frame.replace(b"kafka-1.internal", b"p")

        outcome = await pair.run(hook=hook)
        nursery.cancel_scope.cancel()
    assert outcome.kind == "protocol"
    assert outcome.reason.startswith("cannot rewrite response to api 1 v17: ")
    assert outcome.reason.endswith("bytes of it were sent on before the rewrite")


async def test_a_drain_waits_for_the_answer_going_on_and_hands_back_after_it():
    """Python would send a half-sent answer again whole: the hand-back comes once it has gone on."""
    rng = random.Random(6)
    answer = fetched(4, [[_blob(rng, 400_000)]])
    phases = []
    pair = Pair()
    await pair.send(pair.client, fetch(4))

    async def peers() -> None:
        await pair.read(pair.broker, len(fetch(4)))
        await pair.send(pair.broker, answer[:-50])
        head = await pair.read(pair.client, 300_000)  # it is going on
        phases[0].hold()
        await pair.send(pair.broker, answer[-50:])
        assert head + await pair.read(pair.client, len(answer) - len(head)) == answer

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run(started=phases.append)
    assert (outcome.kind, outcome.responses, outcome.in_flight, outcome.broker_leftover) == ("yield", 1, (), b"")


async def test_the_broker_closing_in_the_middle_of_an_answer_ends_the_connection():
    rng = random.Random(7)
    answer = fetched(5, [[_blob(rng, 400_000)]])
    pair = Pair()
    await pair.send(pair.client, fetch(5))

    async def peers() -> None:
        await pair.read(pair.broker, len(fetch(5)))
        await pair.send(pair.broker, answer[:200_000])
        await pair.read(pair.client, 150_000)
        pair.broker.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run()
    assert outcome.kind == "broker-closed"


async def test_a_pipe_full_of_pieces_before_it_is_full_of_bytes_still_takes_all_the_broker_sent():
    """A pipe holds a number of pieces, whatever their size: here one. The client reads only once the broker has sent
    every answer, and its socket is small, so the pipe waits full of a piece smaller than a page while the broker's
    socket, which will not signal again, holds the rest: the forwarder must still move every byte."""
    small = Forwarder(native.module(), pipe_bytes=4096)
    rng = random.Random(8)
    answers = [fetched(c, [[_blob(rng, 90_000)], [_blob(rng, 70_000)]]) for c in range(6, 9)]
    requests = b"".join(fetch(c) for c in range(6, 9))
    pair = Pair()
    pair.client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    pair.proxy_client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    await pair.send(pair.client, requests)

    async def peers() -> None:
        await pair.read(pair.broker, len(requests))
        await pair.send(pair.broker, b"".join(answers))
        # The state is set up (every answer sent on by the broker): the client now reads with a larger buffer, as a
        # 4 KiB window drains at a few KiB per delayed acknowledgement.
        pair.client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        assert await pair.read(pair.client, sum(map(len, answers))) == b"".join(answers)
        pair.client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        with trio.fail_after(30):
            outcome = await small.serve(
                pair.proxy_client, pair.proxy_broker, TABLE, no_rewrite, LIMITS, lambda phase: None
            )
    assert (outcome.kind, outcome.responses) == ("client-closed", 3)


async def test_record_batches_that_claim_more_than_their_answer_never_take_the_next_answers_bytes():
    """An answer cut short (its record batches run past its own size) is malformed: the connection ends, and the
    client gets nothing of the answer after it."""
    rng = random.Random(9)
    whole = fetched(10, [[_blob(rng, 300_000)]])
    cut = 200_000
    short = (cut - 4).to_bytes(4, "big") + whole[4:cut]
    after = fetched(11, [[_blob(rng, 100_000)]])
    pair = Pair()
    await pair.send(pair.client, fetch(10) + fetch(11))
    received = bytearray()

    async def peers() -> None:
        await pair.read(pair.broker, 2 * len(fetch(10)))
        await pair.send(pair.broker, short + after)

    async def client() -> None:
        while chunk := await pair.client.recv(1 << 16):
            received.extend(chunk)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        nursery.start_soon(client)
        outcome = await pair.run()
        nursery.cancel_scope.cancel()
    assert outcome.kind == "protocol" and outcome.reason.startswith("cannot rewrite response to api 1 v17: ")
    assert len(received) <= len(short) and bytes(received) == short[: len(received)]
