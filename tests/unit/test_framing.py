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
