"""The shell's frame I/O: any chunking yields the same frames, batched frames stay valid, sends keep
order and back-pressure, and a reader with many frames buffered still lets other tasks run."""

from __future__ import annotations

import array
import itertools
import socket

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.net.frames import FRAMES_PER_YIELD, FrameReader, FrameWriter
from proxy.protocol.framing import FrameDecoder, FrameError, frame

payloads = st.lists(st.binary(max_size=300), max_size=12)


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300, deadline=None)
@given(payloads, st.lists(st.integers(min_value=0), max_size=20), st.integers(min_value=16, max_value=600))
def test_any_chunking_yields_the_same_frames(bodies, cuts, buffer_size):
    frames = [frame(b) for b in bodies]
    stream = b"".join(frames)
    for zero_copy in (False, True):
        d = FrameDecoder(buffer_size=buffer_size, initial_size=16)
        got: list[bytes] = []
        for chunk in cut(stream, cuts):
            view = memoryview(chunk)
            while view:
                if zero_copy:  # the socket path: write_buffer/commit
                    target = d.write_buffer()
                    n = min(len(target), len(view))
                    target[:n] = view[:n]
                    del target
                    d.commit(n)
                    view = view[n:]
                else:
                    d.receive_data(view)
                    view = view[:0]
                # Batch like the shell: take every ready frame, keep the views, read them once no frame is
                # ready (a next_frame() that returns None may move the bytes: the views are used before it).
                held = []
                while d.frame_ready():
                    f = d.next_frame()
                    assert f is not None
                    held.append(f)
                got += [bytes(f) for f in held]
                del held
                assert d.next_frame() is None
        assert got == frames
        assert d.buffered == 0


@settings(deadline=None)  # a loaded machine is not a failure
@given(st.binary(min_size=4, max_size=4))
def test_frame_ready_reports_a_bad_size_so_next_frame_raises_it(prefix):
    d = FrameDecoder(max_frame_bytes=1000)
    d.receive_data(prefix)
    size = int.from_bytes(prefix, "big", signed=True)
    bad = size < 0 or size > 1000
    assert d.frame_ready() == (bad or size == 0)
    if bad:
        try:
            d.next_frame()
        except FrameError:
            return
        raise AssertionError("no FrameError")


async def pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


@settings(max_examples=30, deadline=None)
@given(payloads, st.lists(st.integers(min_value=0), max_size=10))
def test_reader_over_a_socket_yields_each_frame_once_in_order(bodies, cuts):
    frames = [frame(b) for b in bodies]
    stream = b"".join(frames)

    async def main() -> None:
        left, right = await pair()
        got: list[bytes] = []

        async def read() -> None:
            reader = FrameReader(right, 10_000, 64, initial_size=16)
            while (f := await reader.next_frame()) is not None:
                got.append(bytes(f))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            for chunk in cut(stream, cuts):
                await left.send_all(chunk)
                await trio.testing.wait_all_tasks_blocked()
            await left.send_eof()
        assert got == frames

    trio.run(main)


async def test_reader_raises_at_an_end_in_the_middle_of_a_frame():
    left, right = await pair()
    await left.send_all(frame(b"whole") + frame(b"cut short")[:7])
    await left.send_eof()
    reader = FrameReader(right, 1000, 64)
    assert bytes(await reader.next_frame()) == frame(b"whole")
    try:
        await reader.next_frame()
    except FrameError:
        return
    raise AssertionError("no FrameError")


def _many_pieces() -> list[bytes | bytearray | memoryview]:
    """More pieces than one writev takes (IOV_MAX), of every kind a pump sends, some of them empty."""
    words = memoryview(array.array("I", range(250))).cast("B")  # a buffer's bytes, as the decoder's frames are
    kinds = [bytes(range(256)) * 7, bytearray(b"y" * 999), memoryview(b"z" * 1_500)[3:], b"", words]
    pieces = [kinds[i % len(kinds)] for i in range(3_000)]
    return pieces


@pytest.mark.parametrize("many", [False, True], ids=["large-pieces", "more-than-iov-max"])
async def test_writer_sends_pieces_in_order_and_waits_for_a_slow_reader(many):
    left, right = await pair()
    # Either way, far more than the socket buffers hold
    pieces = _many_pieces() if many else [bytes([i]) * 100_000 for i in range(40)]
    total = sum(memoryview(p).nbytes for p in pieces)
    assert total > 3_000_000
    sent = trio.Event()

    async def write() -> None:
        await FrameWriter(left).send(pieces)
        sent.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        await trio.testing.wait_all_tasks_blocked()
        assert not sent.is_set()  # back-pressure: the writer waits while nobody reads
        received = bytearray()
        while len(received) < total:
            received += await right.receive_some(1 << 16)
    assert sent.is_set()
    assert received == b"".join(pieces)


async def test_writer_over_any_stream_and_with_nothing_to_send():
    send, receive = trio.testing.memory_stream_pair()
    await FrameWriter(send).send([b"ab", memoryview(b"cd"), b""])
    assert await receive.receive_some() == b"abcd"
    left, right = await pair()
    await FrameWriter(left).send([])
    await FrameWriter(left).send([b"", b"x"])
    assert await right.receive_some() == b"x"


async def test_a_reader_with_many_frames_buffered_lets_other_tasks_run():
    left, right = await pair()
    count = 4 * FRAMES_PER_YIELD
    await left.send_all(b"".join(frame(b"x") for _ in range(count)))
    reader = FrameReader(right, 1000, 1 << 16)
    ticks = 0

    async def other() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        for _ in range(count):
            assert bytes(await reader.next_frame()) == frame(b"x")
        assert ticks >= count // FRAMES_PER_YIELD - 1  # one receive, yet the other task ran every few frames
        nursery.cancel_scope.cancel()


async def test_a_reader_cancelled_where_it_yields_loses_no_frame():
    """The reader yields every FRAMES_PER_YIELD frames; a task cancelled there (a drain stopping the request pump)
    must not lose a frame: the yield comes before the next frame is taken, so reading on gets every frame."""
    left, right = await pair()
    sent = [frame(bytes([i])) for i in range(3 * FRAMES_PER_YIELD)]
    await left.send_all(b"".join(sent))
    reader = FrameReader(right, 1000, 1 << 16)
    got: list[bytes] = []
    with trio.CancelScope() as scope:
        while len(got) < len(sent):
            got.append(bytes(await reader.next_frame()))
            if len(got) == FRAMES_PER_YIELD:
                scope.cancel()  # delivered at the reader's next scheduling point
    assert len(got) == FRAMES_PER_YIELD  # it was cancelled, at its yield
    left.socket.shutdown(socket.SHUT_WR)  # a lost frame shows as the end coming early, not as a wait
    while (next_frame := await reader.next_frame()) is not None:
        got.append(bytes(next_frame))
    assert got == sent
