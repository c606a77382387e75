"""The forwarder (native/src/forward.rs through proxy/net/forwarder.py) on socket pairs: what it moves, where it
stops, and how it ends, with the reasons the Python path gives for the same bytes."""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import os
import random
import struct
import termios
from collections.abc import Callable
from typing import Any

import pytest
import trio
from kio.schema.produce.v9 import request as produce9
from kio.schema.produce.v10 import response as produce10
from kio.static.primitive import i16, i32

from proxy.core import apiversions
from proxy.core.endpoints import ListenerLayout
from proxy.core.forward_table import METERED_ANSWER, METERED_REQUEST, entries_for
from proxy.core.session import ProtocolViolation, ProxySession
from proxy.net.forwarder import Forwarder, ForwarderLimits, Outcome
from proxy.protocol import codec, native
from proxy.protocol.apis import api_info, request_type
from proxy.protocol.framing import FrameDecoder, FrameError
from proxy.protocol.headers import parse_request_header
from proxy.quotas import fetch_bound

from .wire import request_frame, response_frame

if native.module() is None:
    if os.environ.get("CI") == "true":  # CI builds it: missing there is a failure, not a skip
        raise ImportError("vcproxy_native is not built")
    pytest.skip("vcproxy_native is not built (make .venv/.installed-test builds it)", allow_module_level=True)

FORWARDER = Forwarder(native.module())
TABLE = native.module().ForwardTable(entries_for(tuple(sorted(apiversions.proxy_versions().items()))))
LIMITS = ForwarderLimits(max_in_flight=100, max_frame_bytes=1 << 20, buffer_bytes=1 << 20, idle_timeout=600.0)


async def no_rewrite(*_: object) -> bytes:
    return b""


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

    async def run(
        self,
        limits: ForwarderLimits = LIMITS,
        hook=None,
        started=lambda phase: None,
        table=TABLE,
        allowances=None,
        initial=b"",
        sampling=None,
        spans=None,
    ) -> Outcome:
        with trio.fail_after(30):  # a hang fails the test, not the suite
            return await FORWARDER.serve(
                self.proxy_client,
                self.proxy_broker,
                table,
                hook or no_rewrite,
                limits,
                started,
                initial,
                allowances=allowances,
                sampling=sampling,
                spans=spans,
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
    tail = API_VERSIONS + b"\x00\x00\x00\x30partial"

    async def peers() -> None:
        for c in (1, 2, 3):
            await pair.client.send(produce(c))
            assert await pair.read(pair.broker, len(produce(c))) == produce(c)
            await pair.broker.send(produced(c))
            assert await pair.read(pair.client, len(produced(c))) == produced(c)
        await pair.client.send(tail)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run()
    assert (outcome.kind, outcome.requests, outcome.responses, outcome.in_flight) == ("yield", 3, 3, ())
    assert outcome.leftover == tail and outcome.broker_leftover == b""  # read first by the Python path


async def unread_none(stream: trio.SocketStream) -> None:
    """Until the proxy's end of a socket holds nothing unread: the forwarder has taken what was sent."""
    with trio.fail_after(10):
        while struct.unpack("i", fcntl.ioctl(stream.socket.fileno(), termios.FIONREAD, b"\0" * 4))[0]:
            await trio.sleep(0.001)


async def test_a_receive_that_empties_the_socket_waits_for_the_next_bytes_and_a_hang_up_is_read_to_its_end():
    """The forwarder makes no receive after one that took less than it had room for (the socket held no more) with
    nothing else owed from that side: bytes that come later, an answer's rest or the client's next request, or its
    end of stream right behind a request, must each still be read."""
    pair = Pair()

    async def peers() -> None:
        for c in (1, 2):
            await pair.client.send(produce(c))
            assert await pair.read(pair.broker, len(produce(c))) == produce(c)
            answer = produced(c)
            await pair.broker.send(answer[:5])  # the answer's start alone, then its rest once the first is read
            await unread_none(pair.proxy_broker)
            await pair.broker.send(answer[5:])
            assert await pair.read(pair.client, len(answer)) == answer
        await pair.client.send(produce(3))
        pair.client.shutdown(trio.socket.SHUT_WR)  # its end of stream right behind its last request
        assert await pair.read(pair.broker, len(produce(3))) == produce(3)
        await pair.broker.send(produced(3))
        assert await pair.read(pair.client, len(produced(3))) == produced(3)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run()
    assert (outcome.kind, outcome.requests, outcome.responses) == ("client-closed", 3, 3)


async def test_it_hands_back_at_once_with_the_answers_still_to_come():
    """A request that is not plain does not wait behind a long poll: the requests sent before it go back to
    Python unanswered, with the part of an answer already read."""
    pair = Pair()
    await pair.broker.send(produced(1) + produced(2)[:5])  # read with the requests, in the first pump
    await pair.client.send(produce(1) + produce(2) + API_VERSIONS)
    outcome = await pair.run()
    assert (outcome.kind, outcome.requests, outcome.responses) == ("yield", 2, 1)
    assert [item[:5] for item in outcome.in_flight] == [(2, 0, 9, None, len(produce(2)))]  # and ns since it was read
    assert outcome.broker_leftover == produced(2)[:5] and outcome.leftover == API_VERSIONS
    assert await pair.read(pair.broker, 2 * len(produce(1))) == produce(1) + produce(2)
    assert await pair.read(pair.client, len(produced(1))) == produced(1)


# Produce's size metered, as a VC's is under a producer's byte rate, and Fetch answers', as under a consumer's
# (proxy/core/forward_table.py, `tenant_entries_for`).
METERED = native.module().ForwardTable(
    [
        (*entry[:9], {0: METERED_REQUEST, 1: METERED_ANSWER}.get(entry[0], 0))
        for entry in entries_for(tuple(sorted(apiversions.proxy_versions().items())))
    ]
)


@dataclasses.dataclass
class Held:
    """What proxy/net/allowances.py's `Allowances` gives the forwarder, its renewal a test's own."""

    request: Any = None
    answer: Any = None
    count: Any = None
    renew: Any = None

    def tick(self) -> tuple[float, Any] | None:
        return (0.01, self.renew) if self.renew is not None else None


@pytest.mark.parametrize(
    ("allowance", "served"),
    [
        pytest.param(2 * len(produce(1)) + 3, 2, id="two fit"),
        pytest.param(10 * len(produce(1)), 3, id="all fit"),
        pytest.param(len(produce(1)) - 1, 0, id="none fits"),
        pytest.param(None, 0, id="no allowance"),
    ],
)
async def test_a_metered_request_is_served_only_within_the_allowance(allowance, served):
    """The first metered request that does not fit goes back to the session (which charges it), with those after it;
    what was served is what the allowance says was spent."""
    pair = Pair()
    size = len(produce(1))
    requests = produce(1) + produce(2) + produce(3)
    await pair.broker.send(b"".join(produced(c) for c in range(1, served + 1)))
    await pair.client.send(requests + API_VERSIONS)
    given = native.module().Allowance(allowance) if allowance is not None else None
    outcome = await pair.run(table=METERED, allowances=Held(request=given))
    assert (outcome.kind, outcome.requests) == ("yield", served)
    assert outcome.leftover == requests[served * size :] + API_VERSIONS
    assert await pair.read(pair.broker, served * size) == requests[: served * size]
    if given is not None:
        assert (given.drain(), given.left()) == (served * size, allowance - served * size)


@pytest.mark.parametrize(
    ("count", "bytes_left", "served"),
    [
        pytest.param(2, None, 2, id="two of three counted"),
        pytest.param(5, None, 3, id="all counted"),
        pytest.param(0, None, 0, id="none left"),
        pytest.param(5, len(produce(1)) + 3, 1, id="the bytes run out first"),
    ],
)
async def test_under_a_request_rate_a_request_is_served_only_while_the_count_has_one_left(count, bytes_left, served):
    """A request rate counts every request, whatever its API: the forwarder serves one only while the count lent it
    has one left, and counts only what it served (a request that goes back to the session, for its count or for its
    bytes, is the session's to charge)."""
    pair = Pair()
    size = len(produce(1))
    requests = produce(1) + produce(2) + produce(3)
    await pair.broker.send(b"".join(produced(c) for c in range(1, served + 1)))
    await pair.client.send(requests + API_VERSIONS)  # not the forwarder's: the phase ends there at the latest
    counted = native.module().Allowance(count)
    spent = native.module().Allowance(bytes_left) if bytes_left is not None else None
    table = METERED if spent is not None else TABLE
    outcome = await pair.run(table=table, allowances=Held(request=spent, count=counted))
    assert (outcome.kind, outcome.requests) == ("yield", served)
    assert outcome.leftover == requests[served * size :] + API_VERSIONS
    assert await pair.read(pair.broker, served * size) == requests[: served * size]
    assert (counted.drain(), counted.left()) == (served, count - served)
    if spent is not None:
        assert spent.drain() == served * size


LAST = 2**64 - 1


@pytest.mark.parametrize(
    ("sampling", "served", "drawn"),
    [
        pytest.param((0, None), 3, None, id="none sampled: all served, the other request not drawn"),
        pytest.param((2**62, 5), 0, 5, id="the first request sampled by the draw Python made: handed back with it"),
        pytest.param((LAST, LAST), 1, "sampled", id="its draw not under the bound: served; the next one drawn in"),
    ],
)
async def test_a_request_the_sampler_keeps_goes_back_with_its_draw(sampling, served, drawn):
    """Tracing: a request the forwarder would serve is drawn as the sampler draws a trace id's low 64 bits; one drawn
    under the bound is handed back with its draw (Python makes its span, with that draw: no request is drawn twice)."""
    pair = Pair()
    size = len(produce(1))
    requests = produce(1) + produce(2) + produce(3)
    await pair.broker.send(b"".join(produced(c) for c in range(1, served + 1)))
    await pair.client.send(requests + API_VERSIONS)
    outcome = await pair.run(sampling=sampling)
    assert (outcome.kind, outcome.requests) == ("yield", served)
    assert outcome.leftover == requests[served * size :] + API_VERSIONS
    if drawn == "sampled":
        assert outcome.drawn is not None and outcome.drawn < sampling[0]
    else:
        assert outcome.drawn == drawn


async def test_a_request_handed_back_for_another_reason_keeps_its_draw():
    """Drawn and not sampled, but not served (its quota's allowance has nothing left; or the phase ended before the
    forwarder had it whole): its draw goes back with it, for the Python path to use."""
    pair = Pair()
    await pair.client.send(produce(1) + produce(2))
    outcome = await pair.run(table=METERED, allowances=Held(request=native.module().Allowance(0)), sampling=(0, 7))
    assert (outcome.requests, outcome.leftover, outcome.drawn) == (0, produce(1) + produce(2), 7)
    held = Pair()
    part = produce(1)[:10]  # never whole: a drain ends the phase before the forwarder looks at it
    outcome = await held.run(started=lambda phase: phase.hold(), initial=part, sampling=(0, 9))
    assert (outcome.requests, outcome.leftover, outcome.drawn) == (0, part, 9)


async def test_a_sampled_request_is_served_and_its_spans_record_kept_for_python():
    """With a place for spans, a sampled request is the forwarder's too: it keeps a record of it (its draw, the request
    and the answer as the client and the broker had them) that Python makes the span from, once a second and at the
    end; an acks=0 Produce's has no answer. Sent back with requests outstanding, a sampled one's draw and copy go
    with it (the session answers it, and makes its span)."""
    pair = Pair()
    requests = produce(1) + produce(2, acks=0) + produce(3)
    await pair.broker.send(produced(1) + produced(3))
    await pair.client.send(requests + API_VERSIONS)
    records: list = []
    outcome = await pair.run(sampling=(2**64, 5), spans=lambda taken, epoch: records.extend(taken))
    assert (outcome.kind, outcome.requests, outcome.responses) == ("yield", 3, 2)
    records.sort(key=lambda r: r[3])  # an acks=0 Produce's is kept once it went on, before the answers came
    assert [(r[1], r[2], r[3], r[6], r[7], r[8]) for r in records] == [
        (0, 9, 1, produce(1), produced(1), None),
        (0, 9, 2, produce(2, acks=0), None, None),
        (0, 9, 3, produce(3), produced(3), None),
    ]
    assert records[0][0] == 5 and all(r[4] <= r[5] for r in records)  # the first request's draw is Python's
    assert await pair.read(pair.client, len(produced(1) + produced(3))) == produced(1) + produced(3)

    outstanding = Pair()
    await outstanding.client.send(produce(1) + produce(2) + API_VERSIONS)  # no answer comes before the hand-back
    outcome = await outstanding.run(sampling=(2**64, 8), spans=lambda taken, epoch: None)
    assert (outcome.kind, outcome.requests) == ("yield", 2)
    assert outcome.in_flight[0][6] == (8, produce(1))
    assert outcome.in_flight[1][6][1] == produce(2)
    unsampled = Pair()
    await unsampled.client.send(produce(1) + API_VERSIONS)
    outcome = await unsampled.run(sampling=(0, None), spans=lambda taken, epoch: None)
    assert [item[6] for item in outcome.in_flight] == [None]


async def test_span_records_reach_python_while_the_phase_lasts():
    """The forwarder says when records wait (no timer per connection): Python takes them then, not only at the end."""
    pair = Pair()
    records: list = []
    taken = [trio.Event(), trio.Event()]

    def spans(batch: list, epoch_ns: int) -> None:
        records.extend(batch)
        taken[len(records) - 1].set()

    async def peers() -> None:
        for c in (1, 2):
            await pair.client.send(produce(c))
            assert await pair.read(pair.broker, len(produce(c))) == produce(c)
            await pair.broker.send(produced(c))
            assert await pair.read(pair.client, len(produced(c))) == produced(c)
            await taken[c - 1].wait()  # before the phase ends
        pair.client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run(sampling=(2**64, None), spans=spans)
    assert (outcome.kind, [r[3] for r in records]) == ("client-closed", [1, 2])


def test_an_allowance_is_spent_whole_requests_at_a_time_and_kept_up_from_outside():
    allowance = native.module().Allowance(10)
    assert [allowance.spend(4), allowance.spend(7), allowance.spend(6), allowance.spend(1)] == [
        True,
        False,
        True,
        False,
    ]
    assert (allowance.drain(), allowance.drain(), allowance.left()) == (10, 0, 0)
    allowance.grant(5)
    assert allowance.spend(5) and allowance.left() == 0 and allowance.drain() == 5
    allowance.grant(8)
    assert allowance.revoke() == 8 and not allowance.spend(1)
    allowance.grant(3)  # an answer's size is spent whole: past what is left, the rest is a debt
    assert not allowance.spend_over(5) and allowance.left() == 0 and allowance.drain() == 5
    assert allowance.overdrawn() == 2 and allowance.overdrawn() == 0


async def test_the_tick_runs_while_the_phase_lasts_and_the_allowance_it_tops_up_is_spent():
    """Python keeps the allowance up while the forwarder has the connection (proxy/net/allowances.py, `renew`): a
    request that would not have fitted in the first allowance is served once a tick has granted more."""
    pair = Pair()
    size = len(produce(1))
    allowance = native.module().Allowance(size)
    ticks: list[float] = []
    granted, ticked = trio.Event(), trio.Event()

    def tick() -> float:
        ticks.append(trio.current_time())
        allowance.grant(size if len(ticks) == 1 else 0)
        granted.set()
        if len(ticks) >= 5:
            ticked.set()
        return 0.01

    async def peers() -> None:
        for c in (1, 2):
            if c == 2:
                await granted.wait()  # the second request only once the tick has granted room for it
            await pair.client.send(produce(c))
            assert await pair.read(pair.broker, size) == produce(c)
            await pair.broker.send(produced(c))
            assert await pair.read(pair.client, len(produced(c))) == produced(c)
        await ticked.wait()
        pair.client.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run(table=METERED, allowances=Held(request=allowance, renew=tick))
    assert (outcome.kind, outcome.requests) == ("client-closed", 2)
    assert len(ticks) >= 5 and allowance.drain() == 2 * size


def fetch(correlation: int, max_bytes: int = 0) -> bytes:
    body = bytes(4) + bytes(4) + bytes(4) + max_bytes.to_bytes(4, "big") + b"\x00" + bytes(4)
    return request_frame(1, 4, correlation, body)


def fetched(correlation: int, size: int) -> bytes:
    """An answer to `fetch`, `size` bytes in all: the forwarder reads no more of a small one than its header."""
    return response_frame(1, 4, correlation, bytes(size - 8))


@pytest.mark.parametrize(
    ("left", "answered"),
    [
        pytest.param(10_000, 2, id="both answers fit"),
        pytest.param(150, 1, id="the first answer takes more than is left"),
        pytest.param(0, 0, id="nothing left"),
        pytest.param(None, 0, id="no allowance"),
    ],
)
async def test_a_metered_answer_is_charged_whole_and_the_connection_goes_back_past_what_was_left(left, answered):
    """A Fetch is sent on while its allowance has anything left, and only once the answer of the one before it was
    charged; its answer goes on whole and is spent whole, and one that takes more than was left sends the connection
    back once it has gone (the session mutes it then), the Fetch after it not sent (the session charges it)."""
    pair = Pair()
    answers = [fetched(1, 200), fetched(2, 200)]
    given = native.module().Allowance(left) if left is not None else None
    await pair.client.send(fetch(1) + fetch(2))
    async with trio.open_nursery() as nursery:

        async def peers() -> None:
            for c in range(answered):
                # One at a time: the next Fetch comes only once this one's answer has been charged.
                assert await pair.read(pair.broker, len(fetch(1))) == fetch(c + 1)
                await pair.broker.send(answers[c])
                assert await pair.read(pair.client, 200) == answers[c]
            if answered == 2:
                pair.client.close()

        nursery.start_soon(peers)
        outcome = await pair.run(table=METERED, allowances=Held(answer=given))
    assert (outcome.requests, outcome.responses) == (answered, answered)
    assert outcome.kind == ("client-closed" if answered == 2 else "yield")
    assert not outcome.in_flight
    if answered < 2:
        assert outcome.leftover == (fetch(1) if answered == 0 else b"") + fetch(2)
    if given is not None:
        assert given.drain() == 200 * answered and given.left() == max(0, left - 200 * answered)
        assert given.overdrawn() == max(0, 200 * answered - left)  # a debt to the meters: the session mutes for it


async def test_pipelined_fetches_go_one_at_a_time_each_bounded_by_what_is_left():
    """A consumer that pipelines Fetches under a byte rate cannot run ahead of it: each Fetch goes once the answer
    before it was charged, its max_bytes lowered to what the allowance then holds (the broker's answer is no larger,
    but for a first record batch larger still, KIP-74); one that asks for less keeps what it asked for."""
    pair = Pair()
    given = native.module().Allowance(1000)
    await pair.client.send(fetch(1, 1 << 20) + fetch(2, 1 << 20) + fetch(3, 100))
    async with trio.open_nursery() as nursery:

        async def peers() -> None:
            for c, bound, size in ((1, 1000, 300), (2, 700, 500), (3, 100, 100)):
                assert await pair.read(pair.broker, len(fetch(c))) == fetch(c, bound)
                with trio.move_on_after(0.2):  # nothing more is sent until its answer came
                    await pair.broker.recv(1)
                    raise AssertionError("a Fetch sent before the answer of the one before")
                await pair.broker.send(fetched(c, size))
                assert await pair.read(pair.client, size) == fetched(c, size)
            pair.client.close()

        nursery.start_soon(peers)
        outcome = await pair.run(table=METERED, allowances=Held(answer=given))
    assert (outcome.kind, outcome.requests, outcome.responses) == ("client-closed", 3, 3)
    assert (given.drain(), given.left(), given.overdrawn()) == (900, 100, 0)


@pytest.mark.parametrize("version", [4, 11, 12, 14, 15, 17])
def test_the_forwarder_lowers_max_bytes_where_the_quota_stage_does(version):
    """The two engines bound a Fetch at the same offset (proxy/quotas/fetch_bound.py, native `fetch_max_bytes_at`)."""
    body = codec._empty(request_type(1, version), max_bytes=i32(1 << 20))
    frame = request_frame(1, version, 7, body, client_id="a-client")
    header_version = api_info(1).request_header_version(version)
    offset = parse_request_header(memoryview(frame), header_version).body_offset
    assert fetch_bound.asked(frame, offset, version) == 1 << 20
    lowered = native.module().Allowance(4321).bounded(frame, header_version >= 2)
    assert lowered == fetch_bound.lowered(frame, offset, version, 4321)
    assert fetch_bound.asked(lowered, offset, version) == 4321
    assert native.module().Allowance(1 << 21).bounded(frame, header_version >= 2) is None  # within what is left


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


async def test_a_drain_hands_the_connection_back_with_what_is_outstanding():
    pair = Pair()
    phases = []
    await pair.client.send(produce(1))

    async def peers() -> None:
        await pair.read(pair.broker, len(produce(1)))
        phases[0].hold()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(peers)
        outcome = await pair.run(started=phases.append)
    assert (outcome.kind, outcome.requests, outcome.responses) == ("yield", 1, 0)
    assert [item[:5] for item in outcome.in_flight] == [(1, 0, 9, None, len(produce(1)))]
    await pair.broker.send(produced(1))  # the Python path reads it now, from its own socket
    assert await pair.proxy_broker.receive_some(len(produced(1))) == produced(1)


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

    async def hook(api_key: int, version: int, frame: bytes, note: object) -> bytes:
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

    async def hook(*_: object) -> bytes:
        raise ValueError("no")

    await pair.client.send(request)
    await pair.broker.send(_hinted_answer(4))
    outcome = await pair.run(hook=hook)
    assert (outcome.kind, outcome.reason) == ("protocol", "cannot rewrite response to api 0 v10: ValueError: no")


# -- a whole connection: the pumps, the forwarder, and back -----------------------------------------------


def _metadata_request(correlation: int) -> bytes:
    from kio.schema.metadata.v12.request import MetadataRequest

    body = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    return request_frame(3, 12, correlation, body)


def _metadata_answer(correlation: int) -> bytes:
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseBroker

    body = MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(MetadataResponseBroker(node_id=i32(1), host="kafka-1.internal", port=i32(9092), rack=None),),
        cluster_id="phys",
        controller_id=i32(1),
        topics=(),
    )
    return response_frame(3, 12, correlation, body)


class _Connection:
    """A ClientConnection on socket pairs: a passthrough session (or `session`), a broker that answers every request
    (as `answer(api_key, version, correlation)` says, if given; with a `gate`, only once it is set, `held` set when a
    request waits for it); `telemetry` its recorder, `forwarder` None for the Python path alone."""

    def __init__(
        self,
        nursery: trio.Nursery,
        session: ProxySession | None = None,
        answer=None,
        telemetry=None,
        forwarder: Forwarder | None = FORWARDER,
        idle_timeout: float = 600.0,
        streams: tuple[trio.abc.Stream, trio.abc.Stream] | None = None,
    ):
        """`streams`: the proxy's end and the client's (a TLS connection's), else a socket pair's."""
        from proxy.net.connection import ClientConnection, ConnectionLimits
        from proxy.net.frames import FrameReader

        self.nursery = nursery
        self.brokers_seen: list[object] = []
        if streams is None:
            a, b = trio.socket.socketpair()
            streams = trio.SocketStream(a), trio.SocketStream(b)
        self.client = streams[1]
        self.connection = ClientConnection(
            streams[0],
            self._connect,
            session or ProxySession(ListenerLayout("proxy.example", 9192, 9193)),
            limits=ConnectionLimits(max_frame_bytes=1 << 20, buffer_size=1 << 16, idle_timeout=idle_timeout),
            on_brokers=self._on_brokers,
            name="t",
            telemetry=telemetry,
            forwarder=forwarder,
        )
        self.answer = answer
        self.gate: trio.Event | None = None
        self.held = trio.Event()
        self.done = trio.Event()
        self.answers = FrameReader(self.client, 1 << 20, 1 << 16)
        nursery.start_soon(self._run)

    async def _run(self) -> None:
        await self.connection.run()
        self.done.set()

    async def _on_brokers(self, seen: list[object], _full: bool) -> None:
        self.brokers_seen += seen

    async def _broker(self, stream: trio.SocketStream) -> None:
        from proxy.net.frames import FrameReader
        from proxy.protocol.headers import peek_request

        reader = FrameReader(stream, 1 << 20, 1 << 16)
        while (frame := await reader.next_frame()) is not None:
            api_key, version, correlation = peek_request(frame)
            if self.gate is not None:
                self.held.set()
                await self.gate.wait()
            if self.answer is not None:
                answer = self.answer(api_key, version, correlation)
            elif api_key == 3:
                answer = _metadata_answer(correlation)
            else:
                answer = _hinted_answer(correlation) if version == 10 else produced(correlation)
            await stream.send_all(answer)

    async def _connect(self, _login: bool) -> trio.SocketStream:
        a, b = trio.socket.socketpair()
        self.nursery.start_soon(self._broker, trio.SocketStream(b))
        return trio.SocketStream(a)

    async def exchange(self, *requests: bytes) -> list[tuple[int, bytes]]:
        await self.client.send_all(b"".join(requests))
        out = []
        for _ in requests:
            frame = await self.answers.next_frame()
            assert frame is not None
            out.append((int.from_bytes(frame[4:8], "big"), bytes(frame)))
        return out

    async def random_batches(
        self, seed: int, correlation: int, batches: int, most: int, pick: Callable[[float, int], bytes]
    ) -> int:
        """`batches` pipelined batches of 1 to `most` requests (`pick(a random draw, correlation id)` makes each, from
        `correlation` on): every hand-over point, both ways. Each answer comes, in order (a Fetch's whole); the last
        correlation id."""
        rng = random.Random(seed)
        for _ in range(batches):
            batch = []
            for _ in range(rng.randint(1, most)):
                correlation += 1
                batch.append(pick(rng.random(), correlation))
            got = await self.exchange(*batch)
            assert [c for c, _ in got] == [int.from_bytes(r[8:12], "big") for r in batch]
            for (c, frame), request in zip(got, batch, strict=True):
                if request[4:6] == b"\x00\x01" and self.answer is not None:  # a Fetch: the answer the broker gave
                    assert frame == self.answer(1, int.from_bytes(request[6:8], "big"), c)
        return correlation

    async def close(self) -> None:
        await self.client.aclose()
        with trio.fail_after(5):
            await self.done.wait()


def metadata_or_produce(draw: float, correlation: int) -> bytes:
    return _metadata_request(correlation) if draw < 0.3 else produce(correlation)


def _rewritten(frame: bytes) -> bool:
    from kio.schema.metadata.v12.response import MetadataResponse

    from proxy.protocol import codec
    from proxy.protocol.headers import response_body_offset

    body, _ = codec.decode(MetadataResponse, frame, response_body_offset(frame, 1))
    return [(b.host, int(b.port)) for b in body.brokers] == [("proxy.example", 9194)]


async def test_a_connection_goes_to_the_forwarder_and_back_with_every_answer_in_order(nursery):
    peer = _Connection(nursery)
    connection, exchange = peer.connection, peer.exchange
    assert await exchange(produce(1)) == [(1, produced(1))]  # the Python path opens the broker connection
    assert await exchange(produce(2)) == [(2, produced(2))]  # then the forwarder takes it
    assert connection._phase is not None  # the forwarder has it
    assert connection.client_reader.decoder.buffer_size == 0  # and the Python path's buffers are let go meanwhile
    assert connection.upstream_reader is not None and connection.upstream_reader.decoder.buffer_size == 0
    got = await exchange(_metadata_request(3))  # not plain: back to the pumps, rewritten
    assert got[0][0] == 3 and _rewritten(got[0][1])
    pipelined = [produce(c) for c in (4, 5, 6)] + [_metadata_request(7)] + [produce(c) for c in (8, 9)]
    got = await exchange(*pipelined)
    assert [c for c, _ in got] == [4, 5, 6, 7, 8, 9]
    assert [f for c, f in got if c != 7] == [produced(c) for c in (4, 5, 6, 8, 9)]
    assert _rewritten(dict(got)[7])
    assert await exchange(produce(10)) == [(10, produced(10))]
    correlation = await peer.random_batches(4242, 10, 60, 6, metadata_or_produce)
    await peer.close()
    assert connection.requests == correlation and connection.forwarded >= 30
    assert connection.close_reason == "client closed the connection"


async def test_a_forwarded_connection_busy_past_connections_max_idle_ms_stays_open_then_idle_closes(nursery):
    peer = _Connection(nursery, idle_timeout=1.5)
    await peer.exchange(produce(1))
    end = trio.current_time() + 4.0  # more than two idle timeouts of requests, all the forwarder's
    correlation = 1
    while trio.current_time() < end:
        correlation += 1
        assert await peer.exchange(produce(correlation)) == [(correlation, produced(correlation))]
        await trio.sleep(0.05)  # the client's pace: far less than the idle timeout between requests
    assert not peer.done.is_set() and peer.connection._phase is not None
    with trio.fail_after(10):
        await peer.done.wait()
    assert peer.connection.close_reason == "idle for 1.5 s (connections_max_idle_ms)"
    assert peer.connection.forwarded == correlation - 1


async def test_a_drain_while_the_forwarder_has_the_connection_answers_what_is_outstanding_and_ends(nursery):
    peer = _Connection(nursery)
    await peer.exchange(produce(1))
    await peer.exchange(produce(2))
    assert peer.connection._phase is not None
    peer.gate = trio.Event()
    await peer.client.send_all(produce(3))
    with trio.fail_after(5):
        await peer.held.wait()  # the broker has it, unanswered
    peer.connection.stop_reading()
    peer.gate.set()
    with trio.fail_after(5):
        frame = await peer.answers.next_frame()
        await peer.done.wait()
    assert frame is not None and bytes(frame) == produced(3)
    assert peer.connection.close_reason == "proxy draining"
    assert (peer.connection.requests, peer.connection.forwarded) == (3, 2)


async def test_leader_hints_in_a_forwarded_answer_point_at_the_proxy_once_its_listeners_know_them(nursery):
    from kio.schema.produce.v10 import response as produce10

    from proxy.protocol import codec
    from proxy.protocol.headers import response_body_offset

    peer = _Connection(nursery)
    await peer.exchange(produce(1))
    await peer.exchange(produce(2))
    assert peer.connection._phase is not None
    v10 = request_frame(
        0,
        10,
        3,
        produce9.ProduceRequest(
            transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=1), topic_data=()
        ),
    )
    [(correlation, frame)] = await peer.exchange(v10)
    body, _ = codec.decode(produce10.ProduceResponse, frame, response_body_offset(frame, 1))
    assert correlation == 3
    assert [(e.node_id, e.host, int(e.port)) for e in body.node_endpoints] == [(2, "proxy.example", 9195)]
    assert [(b.node_id, b.host, b.port) for b in peer.brokers_seen] == [(2, "kafka-2.internal", 9092)]
    assert peer.connection._phase is not None  # still forwarded: the hint was the only thing Python did
    await peer.close()
