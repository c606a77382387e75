import pytest

from proxy.protocol.framing import FrameDecoder, FrameError, frame

FRAMES = [frame(b"a" * n) for n in (0, 1, 7, 100, 5000)]
STREAM = b"".join(FRAMES)


def drain(decoder: FrameDecoder) -> list[bytes]:
    out = []
    while (f := decoder.next_frame()) is not None:
        out.append(bytes(f))
    return out


def test_FrameDecoder_whole_buffer():
    d = FrameDecoder(buffer_size=64 * 1024)
    d.receive_data(STREAM)
    assert drain(d) == FRAMES
    assert d.buffered == 0


def test_FrameDecoder_one_byte_at_a_time():
    d = FrameDecoder(buffer_size=64)  # forces compaction and dedicated big-frame buffers
    got = []
    for i in range(len(STREAM)):
        d.receive_data(STREAM[i : i + 1])
        got += drain(d)
    assert got == FRAMES


def test_FrameDecoder_leaves_partial_frame():
    d = FrameDecoder()
    d.receive_data(STREAM + b"\x00\x00\x00\x05ab")
    assert drain(d) == FRAMES
    assert d.buffered == 6


def test_FrameDecoder_recv_into_path_zero_copy():
    d = FrameDecoder(buffer_size=256)
    pos = 0
    got = []
    while pos < len(STREAM):
        target = d.write_buffer()
        n = min(len(target), 37, len(STREAM) - pos)
        target[:n] = STREAM[pos : pos + n]
        del target
        d.commit(n)
        pos += n
        got += drain(d)
    assert got == FRAMES


def test_FrameDecoder_frame_views_point_into_buffer():
    d = FrameDecoder()
    d.receive_data(FRAMES[3])
    view = d.next_frame()
    assert isinstance(view, memoryview)
    assert view.obj is d._buf  # no copy for a frame that fits the shared buffer


@pytest.mark.parametrize("prefix", [b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff"])
def test_FrameDecoder_rejects_negative_and_oversized(prefix):
    d = FrameDecoder(max_frame_bytes=1024)
    d.receive_data(prefix + b"xx")
    with pytest.raises(FrameError):
        d.next_frame()


def feed(d: FrameDecoder, data: bytes, chunk: int = 100) -> list[memoryview]:
    """recv_into-style feeding; returns the frame views as they come (valid until the next call)."""
    out = []
    view = memoryview(data)
    while view:
        target = d.write_buffer()
        n = min(len(target), len(view), chunk)
        target[:n] = view[:n]
        del target
        d.commit(n)
        view = view[n:]
        while (f := d.next_frame()) is not None:
            out.append(bytes(f))
    return out


def test_big_frame_buffer_reused_for_the_next_big_frame():
    d = FrameDecoder(buffer_size=64)
    first, second, small = frame(b"x" * 3000), frame(b"y" * 2000), frame(b"z")
    assert feed(d, first) == [first]
    spare = d._spare
    assert spare is not None and len(spare) == len(first)
    assert feed(d, small + second) == [small, second]  # shorter: fits the spare, no stale bytes leak
    assert d._spare is spare
    assert feed(d, frame(b"w" * 4000)) == [frame(b"w" * 4000)]  # longer: a new, larger spare
    assert len(d._spare) == 4004


def test_huge_frames_are_not_kept(monkeypatch):
    import proxy.protocol.framing as framing

    monkeypatch.setattr(framing, "SPARE_LIMIT", 1000)
    d = FrameDecoder(buffer_size=64)
    assert feed(d, frame(b"h" * 5000)) == [frame(b"h" * 5000)]
    assert d._spare is None


def _recv_into(decoder: FrameDecoder, data: bytes) -> int:
    """What the shell's recv_into does: fill as much of the offered room as there is data."""
    target = decoder.write_buffer()
    n = min(len(target), len(data))
    target[:n] = data[:n]
    del target
    decoder.commit(n)
    return n


def test_buffer_starts_small_and_grows_with_traffic_up_to_the_limit():
    d = FrameDecoder(max_frame_bytes=1 << 20, buffer_size=256 * 1024, initial_size=1024)
    assert d.buffer_size == 1024
    stream = b"".join(frame(b"x" * 100) for _ in range(5000))  # pipelined small frames, 520 kB
    got, offset = 0, 0
    while offset < len(stream):
        offset += _recv_into(d, stream[offset:])
        got += len(drain(d))
    assert got == 5000
    assert d.buffer_size == 256 * 1024  # each full receive quadrupled it, up to buffer_size


def test_a_frame_larger_than_the_buffer_grows_it_when_within_the_limit():
    d = FrameDecoder(max_frame_bytes=1 << 20, buffer_size=64 * 1024, initial_size=1024)
    big = frame(b"y" * 10_000)
    offset = 0
    frames: list[bytes] = []
    while offset < len(big):
        offset += _recv_into(d, big[offset:])
        frames += drain(d)
    assert frames == [big] and 10_004 <= d.buffer_size <= 64 * 1024


def test_parked_it_holds_no_buffer_and_the_next_receive_starts_at_the_initial_size():
    d = FrameDecoder(max_frame_bytes=1 << 20, buffer_size=4096, initial_size=1024)
    stream = b"".join(frame(b"x" * 100) for _ in range(50)) + frame(b"b" * 10_000)
    offset = 0
    while offset < len(stream):
        offset += _recv_into(d, stream[offset:])
        drain(d)
    assert d.buffer_size > 1024 and d._spare is not None  # grown by traffic, a big frame's room kept
    d.park()  # the forwarder has the connection
    assert d.buffer_size == 0 and d._spare is None and not d.frame_ready() and d.peek_frame() is None
    d.receive_data(frame(b"after"))  # the forwarder's leftover, handed back
    assert d.buffer_size == 1024 and drain(d) == [frame(b"after")]
    _recv_into(d, frame(b"x" * 100)[:10])
    with pytest.raises(ValueError):
        d.park()  # part of a frame is buffered: not the forwarder's to take


def test_limits_before_login_are_small_and_change_after():
    d = FrameDecoder(max_frame_bytes=100 << 20, buffer_size=1 << 20, initial_size=4096)
    d.set_limits(512 * 1024, 4096, keep_spare=False)
    d.receive_data((600 * 1024).to_bytes(4, "big"))
    with pytest.raises(FrameError, match="exceeds the limit of 524288"):
        d.next_frame()
    d = FrameDecoder(max_frame_bytes=100 << 20, buffer_size=1 << 20, initial_size=4096)
    d.set_limits(512 * 1024, 4096, keep_spare=False)
    payload = frame(b"z" * 200_000)  # allowed, but read into a buffer of its own that is not kept
    offset, got = 0, []
    while offset < len(payload):
        offset += _recv_into(d, payload[offset:])
        got += drain(d)
    assert got == [payload]
    assert d.buffer_size <= 4096 * 4 and d._spare is None
    d.set_limits(100 << 20, 1 << 20)
    d.receive_data(frame(b"w" * 2_000_000))
    assert len(drain(d)) == 1


def test_bytes_after_a_big_frame_in_the_same_receive_are_kept():
    # The TLS path: a stranger's frame larger than its 16 KiB buffer, then the next frame in one read. The
    # decoder once looped forever here (the big frame's buffer was full and nothing took the rest).
    d = FrameDecoder(512 * 1024, 16 * 1024, 16 * 1024)
    stream = frame(b"x" * 20000) + frame(b"y") + frame(b"z")[:3]
    d.receive_data(stream[:16384])
    assert d.next_frame() is None
    d.receive_data(stream[16384:])
    assert d.buffered == 20004 + 5 + 3
    assert bytes(d.next_frame()) == frame(b"x" * 20000)
    assert bytes(d.next_frame()) == frame(b"y")
    assert d.next_frame() is None and d.buffered == 3
