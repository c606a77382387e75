"""The forwarder (native/src/forward.rs through proxy/net/forwarder.py) on socket pairs: what it moves, where it
stops, and how it ends, with the reasons the Python path gives for the same bytes."""

from __future__ import annotations

import datetime
import os

import pytest
import trio
from kio.schema.produce.v9 import request as produce9
from kio.schema.produce.v10 import response as produce10
from kio.static.primitive import i16, i32

from proxy.core import apiversions
from proxy.core.endpoints import ListenerLayout
from proxy.core.forward_table import entries_for
from proxy.core.session import ProtocolViolation, ProxySession
from proxy.net.forwarder import Forwarder, ForwarderLimits, Outcome
from proxy.protocol import native
from proxy.protocol.framing import FrameDecoder, FrameError

from .wire import request_frame, response_frame

if native.module() is None:
    if os.environ.get("CI") == "true":  # CI builds it: missing there is a failure, not a skip
        raise ImportError("vcproxy_native is not built")
    pytest.skip("vcproxy_native is not built (make .venv/.installed-test builds it)", allow_module_level=True)

FORWARDER = Forwarder(native.module())
TABLE = native.module().ForwardTable(entries_for(tuple(sorted(apiversions.proxy_versions().items()))))
LIMITS = ForwarderLimits(max_in_flight=100, max_frame_bytes=1 << 20, buffer_bytes=1 << 20, idle_timeout=600.0)


def produce(correlation: int, acks: int = 1) -> bytes:
    body = produce9.ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=datetime.timedelta(seconds=1),
        topic_data=(),
    )
    return request_frame(0, 9, correlation, body)


def produced(correlation: int) -> bytes:
    return response_frame(0, 9, correlation, b"\x01" + b"\x00" + b"\x00\x00\x00\x00" + b"\x00")


API_VERSIONS = request_frame(18, 3, 99, b"\x00\x00\x00")  # answered by the proxy: not the forwarder's


class Pair:
    """The proxy's two sockets (as trio streams) and the peers' ends: the client's and the broker's."""

    def __init__(self) -> None:
        a, self.client = trio.socket.socketpair()
        b, self.broker = trio.socket.socketpair()
        self.proxy_client, self.proxy_broker = trio.SocketStream(a), trio.SocketStream(b)

    async def run(self, limits: ForwarderLimits = LIMITS, hook=None, started=lambda phase: None) -> Outcome:
        return await FORWARDER.serve(
            self.proxy_client, self.proxy_broker, TABLE, hook or (lambda *_: b""), limits, started
        )

    async def read(self, sock: trio.socket.SocketType, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = await sock.recv(n - len(out))
            assert chunk, "end of stream"
            out += chunk
        return out


async def test_plain_requests_and_their_answers_pass_byte_for_byte_and_the_next_other_request_comes_back():
    pair = Pair()
    requests = [produce(c) for c in (1, 2, 3)]
    tail = API_VERSIONS + b"\x00\x00\x00\x30partial"

    async def peers() -> None:
        await pair.client.send(b"".join(requests) + tail)
        assert await pair.read(pair.broker, sum(map(len, requests))) == b"".join(requests)
        answers = b"".join(produced(c) for c in (1, 2, 3))
        await pair.broker.send(answers)
        assert await pair.read(pair.client, len(answers)) == answers

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run()
    assert (outcome.kind, outcome.requests, outcome.responses) == ("yield", 3, 3)
    assert outcome.leftover == tail  # read first by the Python path


async def test_an_acks_0_produce_expects_no_answer():
    pair = Pair()
    await pair.client.send(produce(5, acks=0))
    async with trio.open_nursery() as nursery:

        async def peers() -> None:
            assert await pair.read(pair.broker, len(produce(5, acks=0))) == produce(5, acks=0)
            pair.client.close()  # nothing outstanding: the client's end ends the phase

        nursery.start_soon(peers)
        outcome = await pair.run()
    assert (outcome.kind, outcome.requests, outcome.responses) == ("client-closed", 1, 0)


def _python_frame_error(data: bytes, max_frame: int) -> str:
    decoder = FrameDecoder(max_frame)
    decoder.receive_data(data)
    with pytest.raises(FrameError) as raised:
        decoder.next_frame()
    return str(raised.value)


@pytest.mark.parametrize(
    "data",
    [b"\xff\xff\xff\xfb", (5000).to_bytes(4, "big") + b"x" * 10],
    ids=["negative size", "too large"],
)
async def test_a_frame_the_python_path_refuses_ends_the_connection_with_its_reason(data):
    pair = Pair()
    await pair.client.send(data)
    outcome = await pair.run(ForwarderLimits(100, 1000, 1 << 20, 600.0))
    assert outcome.kind == "frame"
    assert outcome.reason == _python_frame_error(data, 1000)


async def test_an_end_of_stream_in_a_frame_is_refused():
    pair = Pair()
    await pair.client.send(produce(1)[:20])
    pair.client.close()
    outcome = await pair.run()
    assert (outcome.kind, outcome.reason) == ("frame", "connection closed in the middle of a frame (20 bytes)")


def _python_answer_error(request: bytes, answer: bytes) -> str:
    session = ProxySession(ListenerLayout("proxy.example", 9192, 9193))
    if request:
        session.on_request(memoryview(request))
    with pytest.raises(ProtocolViolation) as raised:
        session.on_response(memoryview(answer))
    return str(raised.value)


@pytest.mark.parametrize(
    ("request_", "answer"),
    [(produce(7), produced(9)), (b"", produced(9))],
    ids=["another request's answer", "an answer to nothing"],
)
async def test_an_answer_out_of_turn_ends_the_connection_with_the_sessions_reason(request_, answer):
    pair = Pair()
    await pair.client.send(request_)
    await pair.broker.send(answer)
    outcome = await pair.run()
    assert outcome.kind == "protocol"
    assert outcome.reason == _python_answer_error(request_, answer)


async def test_the_broker_closing_ends_the_connection():
    pair = Pair()
    await pair.client.send(produce(1))
    pair.broker.close()
    outcome = await pair.run()
    assert (outcome.kind, outcome.reason) == ("broker-closed", "upstream broker closed the connection")


async def test_no_more_than_max_in_flight_requests_are_read_ahead_of_their_answers():
    pair = Pair()
    requests = [produce(c) for c in (1, 2, 3)]
    await pair.client.send(b"".join(requests))

    async def peers() -> None:
        assert await pair.read(pair.broker, 2 * len(requests[0])) == requests[0] + requests[1]
        with trio.move_on_after(0.3):  # the third waits for room (a long time for a loopback send)
            await pair.broker.recv(1)
            raise AssertionError("a third request was forwarded with two outstanding")
        await pair.broker.send(produced(1))
        assert await pair.read(pair.broker, len(requests[2])) == requests[2]
        await pair.broker.send(produced(2) + produced(3))
        await pair.read(pair.client, 3 * len(produced(1)))
        pair.client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run(ForwarderLimits(2, 1 << 20, 1 << 20, 600.0))
    assert (outcome.kind, outcome.requests, outcome.responses) == ("client-closed", 3, 3)


async def test_a_drain_lets_what_was_read_be_answered_then_hands_the_connection_back():
    pair = Pair()
    phases = []
    await pair.client.send(produce(1))

    async def peers() -> None:
        await pair.read(pair.broker, len(produce(1)))
        phases[0].hold()
        await pair.client.send(produce(2))  # after the drain began: not read by the forwarder
        await pair.broker.send(produced(1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run(started=phases.append)
    assert (outcome.kind, outcome.requests, outcome.responses) == ("yield", 1, 1)
    assert await pair.read(pair.client, len(produced(1))) == produced(1)


async def test_cancelled_it_gives_the_sockets_back_open():
    pair = Pair()
    with trio.move_on_after(0.2):
        await pair.run()
    await pair.client.send(b"after")  # the forwarder's duplicates are closed; Python's sockets are not
    assert await pair.proxy_client.receive_some(5) == b"after"


async def test_an_idle_connection_is_closed_after_connections_max_idle_ms():
    pair = Pair()
    outcome = await pair.run(ForwarderLimits(100, 1 << 20, 1 << 20, 0.05))
    assert outcome.kind == "idle"
    assert outcome.reason == "idle for 0.05 s (connections_max_idle_ms)"


def _hinted_answer(correlation: int) -> bytes:
    body = produce10.ProduceResponse(
        responses=(),
        throttle_time=datetime.timedelta(0),
        node_endpoints=(produce10.NodeEndpoint(node_id=i32(2), host="kafka-2.internal", port=i32(9092), rack=None),),
    )
    return response_frame(0, 10, correlation, body)


async def test_an_answer_with_leader_hints_is_rewritten_by_python():
    pair = Pair()
    request = request_frame(
        0,
        10,
        4,
        produce9.ProduceRequest(
            transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=1), topic_data=()
        ),
    )  # same body in v10
    seen = []

    def hook(api_key: int, version: int, frame: bytes) -> bytes:
        seen.append((api_key, version, frame))
        return b"rewritten"

    await pair.client.send(request)
    await pair.broker.send(_hinted_answer(4) + produced(5))
    await pair.client.send(produce(5))
    async with trio.open_nursery() as nursery:

        async def peers() -> None:
            assert await pair.read(pair.client, len(b"rewritten") + len(produced(5))) == b"rewritten" + produced(5)
            pair.client.close()

        nursery.start_soon(peers)
        outcome = await pair.run(hook=hook)
    assert seen == [(0, 10, _hinted_answer(4))]
    assert (outcome.kind, outcome.responses) == ("client-closed", 2)


async def test_a_failing_rewrite_ends_the_connection():
    pair = Pair()
    request = request_frame(
        0,
        10,
        4,
        produce9.ProduceRequest(
            transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=1), topic_data=()
        ),
    )

    def hook(*_: object) -> bytes:
        raise ValueError("no")

    await pair.client.send(request)
    await pair.broker.send(_hinted_answer(4))
    outcome = await pair.run(hook=hook)
    assert (outcome.kind, outcome.reason) == ("protocol", "cannot rewrite response to api 0 v10: ValueError: no")
