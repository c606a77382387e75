"""Length-prefixed Kafka frames, sans-I/O.

The decoder owns one receive buffer that the shell fills either with ``receive_data`` (any stream,
e.g. TLS) or zero-copy through ``write_buffer``/``commit`` (``socket.recv_into``). Frames come out
as memoryviews *into that buffer*, 4-byte size prefix included, so a frame that needs no rewriting
is forwarded without ever being copied. The price: a frame view is valid only while the bytes stay
put, that is until ``next_frame`` returns None (it may compact the buffer then) or the next
``write_buffer``/``receive_data``; the shell sends the frames it holds before it reads more
(``frame_ready`` tells, without moving anything, whether ``next_frame`` has another).
Frames too large for the shared buffer get a buffer of their own, sized exactly.
"""

from __future__ import annotations

from ..errors import MalformedInput
from .primitives import INT32

DEFAULT_BUFFER_SIZE = 1 << 20  # Trio's 64 KiB default halves bulk throughput (measured, see docs)
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
SPARE_LIMIT = 16 * 1024 * 1024  # big-frame buffers up to this size are kept for the next big frame


class FrameError(MalformedInput):
    """The peer sent something that is not a valid Kafka frame: close that connection."""


class FrameDecoder:
    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        initial_size: int | None = None,
    ):
        if buffer_size < 16 or (initial_size is not None and initial_size < 16):
            raise ValueError("buffer_size too small")
        self.max_frame_bytes = max_frame_bytes
        # The buffer starts small and grows towards buffer_limit with traffic: an idle or unauthenticated
        # connection must cost kilobytes, a bulk consumer needs the large buffer (see docs/architecture.md).
        self.buffer_limit = buffer_size
        self._initial_size = min(initial_size or buffer_size, buffer_size)
        self._buf = bytearray(self._initial_size)
        self._start = 0  # first unconsumed byte
        self._end = 0  # one past the last received byte
        self._filled = False  # the last receive filled all the room it was given: grow before the next one
        self._big: memoryview | None = None  # dedicated buffer for a frame larger than _buf
        self._big_filled = 0
        # The last big-frame buffer, reused: a consumer's multi-MB Fetch responses come one after the
        # other, and zero-filling a fresh bytearray for each cost ~6% of the proxy's CPU (profiled).
        self._spare: bytearray | None = None
        self.keep_spare = True

    def set_limits(self, max_frame_bytes: int, buffer_limit: int, keep_spare: bool = True) -> None:
        """Change what the peer may send (e.g. once it has logged in)."""
        self.max_frame_bytes = max_frame_bytes
        self.buffer_limit = max(buffer_limit, 16)
        self.keep_spare = keep_spare
        if not keep_spare:
            self._spare = None

    @property
    def buffer_size(self) -> int:
        return len(self._buf)

    def _resize(self, size: int) -> None:
        """A new main buffer of `size` bytes holding the unconsumed bytes; no frame view is alive by contract."""
        pending = self._end - self._start
        new = bytearray(max(size, pending))
        new[:pending] = self._buf[self._start : self._end]
        self._buf, self._start, self._end = new, 0, pending

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return (self._big_filled if self._big is not None else 0) + self._end - self._start

    def _filling_big(self) -> bool:
        """Received bytes go to the big frame's own buffer (once it is whole, what follows goes to the main one)."""
        return self._big is not None and self._big_filled < len(self._big)

    def park(self) -> None:
        """Let the buffers go while the stream is another reader's (the forwarder's), with nothing buffered: an idle
        connection there costs none of them. The next receive takes a buffer of the initial size again."""
        if self.buffered:
            raise ValueError("bytes are buffered")
        self._buf, self._start, self._end, self._filled, self._spare = bytearray(), 0, 0, False, None

    def write_buffer(self) -> memoryview:
        """Where the next received bytes go; call ``commit(n)`` after writing n bytes into it."""
        if self._filling_big():
            assert self._big is not None
            return self._big[self._big_filled :]
        if not self._buf:  # parked
            self._buf = bytearray(self._initial_size)
        if self._filled:
            self._filled = False
            if len(self._buf) < self.buffer_limit:
                self._resize(min(self.buffer_limit, len(self._buf) * 4))
        if self._start == self._end:
            self._start = self._end = 0
        elif self._start and len(self._buf) - self._end < len(self._buf) // 4:
            # Move the partial frame to the front; no frame view is alive by contract.
            pending = self._end - self._start
            self._buf[:pending] = self._buf[self._start : self._end]
            self._start, self._end = 0, pending
        return memoryview(self._buf)[self._end :]

    def commit(self, n: int) -> None:
        if self._filling_big():
            self._big_filled += n
        else:
            self._end += n
            self._filled = self._end == len(self._buf)

    def receive_data(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            target = self.write_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            self.commit(n)
            view = view[n:]
            if view and not self._filling_big() and len(self._buf) - self._end == 0:
                # Buffer full with a complete frame still unread: caller must drain frames first.
                self._grow_for(len(view))

    def _grow_for(self, extra: int) -> None:
        # Only reachable through receive_data with more data than fits; keep it simple and safe.
        self._resize(max(len(self._buf) * 2, self._end - self._start + extra))

    def frame_ready(self) -> bool:
        """A whole frame (or an invalid size prefix) is buffered. Unlike next_frame, it moves no bytes: views of
        frames already returned stay valid, so the shell may send several of them at once."""
        if self._big is not None:
            return self._big_filled == len(self._big)
        if self._end - self._start < 4:
            return False
        size = INT32.unpack_from(self._buf, self._start)[0]
        return size < 0 or size > self.max_frame_bytes or self._end - self._start >= 4 + size

    def peek_frame(self) -> memoryview | None:
        """The next whole frame, not taken: None when there is none, when it is in a big frame's own buffer, or
        when its size is one next_frame refuses. The view must be released before anything else is asked."""
        if self._big is not None or self._end - self._start < 4:
            return None
        size = INT32.unpack_from(self._buf, self._start)[0]
        if size < 0 or size > self.max_frame_bytes or self._end - self._start < 4 + size:
            return None
        return memoryview(self._buf)[self._start : self._start + 4 + size]

    def take_buffered(self) -> bytes:
        """Every byte received and not taken, leaving the decoder empty (not for a big frame's buffer)."""
        if self._big is not None:
            raise ValueError("a big frame is being received")
        data = bytes(self._buf[self._start : self._end])
        self._start = self._end = 0
        return data

    def next_frame(self) -> memoryview | None:
        """The next complete frame (size prefix included), or None if more bytes are needed."""
        if self._big is not None:
            if self._big_filled < len(self._big):
                return None
            frame = self._big
            self._big = None
            self._big_filled = 0
            return frame
        available = self._end - self._start
        if available < 4:
            return None
        size = INT32.unpack_from(self._buf, self._start)[0]
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameError(f"frame of {size} bytes exceeds the limit of {self.max_frame_bytes}")
        total = 4 + size
        if available >= total:
            frame = memoryview(self._buf)[self._start : self._start + total]
            self._start += total
            return frame
        if total > len(self._buf) and total <= self.buffer_limit:
            self._resize(min(self.buffer_limit, max(total, len(self._buf) * 4)))
        elif total > len(self._buf):
            spare = self._spare
            if spare is None or len(spare) < total:
                spare = bytearray(total)
                self._spare = spare if total <= SPARE_LIMIT and self.keep_spare else None
            big = memoryview(spare)[:total]
            big[:available] = self._buf[self._start : self._end]
            self._big, self._big_filled = big, available
            self._start = self._end = 0
        elif self._start + total > len(self._buf):
            pending = self._end - self._start
            self._buf[:pending] = self._buf[self._start : self._end]
            self._start, self._end = 0, pending
        return None


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its size."""
    return INT32.pack(len(payload)) + payload


def join(pieces: list[bytes | memoryview]) -> bytes:
    """Frame pieces as one buffer (a copy: for a reader that needs the whole message)."""
    return b"".join(bytes(p) for p in pieces)


def with_body(frame: bytes | memoryview, body_offset: int, body: bytes) -> list[bytes | memoryview]:
    """The frame rebuilt with a new body after the same header: size prefix, header, body. Every
    message the proxy re-encodes goes back on the wire through here."""
    head = frame[4:body_offset]
    return [INT32.pack(len(head) + len(body)), head, body]
