"""Kafka frames in and out of a Trio stream, with as few system calls and scheduling points as the work allows.

On plain TCP the reader receives straight into the decoder's reused buffer (``os.readv``, no copy) and
hands out every frame that one receive brought before it receives again; the writer sends a frame's
pieces (or several frames) with one ``os.writev``. Trio's socket calls each end with a scheduling point
(a pass through its run loop: an ``epoll_wait`` and a task switch) even when the kernel had the bytes or
the room; here a receive waits for readiness only when the last one drained the socket, a send waits only
when the kernel's buffer is full, and a reader yields once per receive (and every FRAMES_PER_YIELD frames
taken from one), never per frame. Back-pressure is the kernel's, as before: a send does not return until
every byte is in the socket buffer, so a slow reader still stalls whoever writes to it.

Other streams (TLS) use ``receive_some``/``send_all``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import trio

from ..protocol.framing import FrameDecoder, FrameError
from .native_tls import NativeTlsStream

# Frames handed out from buffered bytes before the reader lets other tasks run: a client pipelining small
# requests into a 1 MiB buffer must not hold the event loop for the whole of it.
FRAMES_PER_YIELD = 16
IOV_MAX = 1024  # os.writev's limit on pieces per call (Linux UIO_MAXIOV)


def _plain_socket(
    stream: trio.abc.Stream | trio.abc.ReceiveStream | trio.abc.SendStream,
) -> trio.socket.SocketType | None:
    return stream.socket if isinstance(stream, trio.SocketStream) else None


class FrameReader:
    def __init__(
        self, stream: trio.abc.ReceiveStream, max_frame_bytes: int, buffer_size: int, initial_size: int | None = None
    ):
        self.stream = stream
        self.decoder = FrameDecoder(max_frame_bytes, buffer_size, initial_size)
        self._socket = _plain_socket(stream)
        self.bytes_read = 0
        # The last receive left room in the buffer, so the kernel had no more: wait for readiness rather than
        # try a receive that would fail with EAGAIN. True at first: the peer has not necessarily sent yet.
        self._drained = True
        self._unyielded = 0  # frames handed out since this reader last let other tasks run

    def frame_ready(self) -> bool:
        """A whole frame is buffered: next_frame() returns it without a system call."""
        return self.decoder.frame_ready()

    async def fill(self) -> None:
        """Until a whole frame is buffered, or the stream ends (next_frame then says which); takes nothing."""
        while not self.decoder.frame_ready():
            n = await (self._receive_socket() if self._socket is not None else self._receive_stream())
            if not n:
                return
            self.bytes_read += n

    async def next_frame(self) -> memoryview | None:
        """The next frame, or None at a clean end of stream. The previous frame is invalid after this."""
        while True:
            if self._unyielded >= FRAMES_PER_YIELD and self.decoder.frame_ready():
                # Before the frame is taken: a task cancelled here (a drain) loses no frame it was handed.
                self._unyielded = 0
                await trio.lowlevel.checkpoint()
            frame = self.decoder.next_frame()
            if frame is not None:
                self._unyielded += 1
                return frame
            n = await (self._receive_socket() if self._socket is not None else self._receive_stream())
            if not n:
                if self.decoder.buffered:
                    raise FrameError(f"connection closed in the middle of a frame ({self.decoder.buffered} bytes)")
                return None
            self.bytes_read += n

    async def _receive_socket(self) -> int:
        sock = self._socket
        assert sock is not None
        self._unyielded = 0
        try:
            if self._drained:
                await trio.lowlevel.wait_readable(sock)
            else:
                await trio.lowlevel.checkpoint()  # one scheduling point per receive
            while True:
                target = self.decoder.write_buffer()
                room = len(target)
                try:
                    n = os.readv(sock.fileno(), [target])
                except BlockingIOError:
                    n = -1
                finally:
                    del target  # release the export so the decoder may compact its buffer
                if n >= 0:
                    break
                await trio.lowlevel.wait_readable(sock)
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc
        if n:
            self.decoder.commit(n)
        self._drained = n < room
        return n

    async def _receive_stream(self) -> int:
        data = await self.stream.receive_some(self.decoder.buffer_limit)
        if data:
            self.decoder.receive_data(data)
        return len(data)


def _writev(fd: int, pieces: Sequence[bytes | bytearray | memoryview]) -> int:
    """Bytes the kernel took now (0 when its buffer is full)."""
    try:
        return os.writev(fd, pieces)
    except BlockingIOError:
        return 0


class FrameWriter:
    """Sends pieces of frames in order, all of them before it returns."""

    def __init__(self, stream: trio.abc.SendStream):
        self.stream = stream
        self._socket = _plain_socket(stream)

    async def send(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        """All of `pieces` (bytes, bytearrays, or memoryviews of bytes: format "B"), in order."""
        sock = self._socket
        if isinstance(self.stream, NativeTlsStream):
            await self.stream.send_pieces(pieces)  # one record run and one send for them all
            return
        if sock is None:
            for piece in pieces:
                await self.stream.send_all(piece)
            return
        try:
            # The usual case: every piece in one call, and the kernel takes them all (nothing to slice).
            tried = len(pieces) <= IOV_MAX
            n = _writev(sock.fileno(), pieces) if tried else 0
            if tried and n == sum(map(len, pieces)):  # pieces are of bytes (a memoryview's len is its bytes)
                return
            views = [memoryview(p).cast("B") for p in pieces]
            while True:
                # Drop what was sent: whole pieces, then the front of the first one left.
                i = 0
                while i < len(views) and n >= len(views[i]):
                    n -= len(views[i])
                    i += 1
                del views[:i]
                if not views:
                    return
                if n:
                    views[0] = views[0][n:]
                elif tried:
                    await trio.lowlevel.wait_writable(sock)  # the kernel's buffer is full: the peer reads slowly
                n, tried = _writev(sock.fileno(), views[:IOV_MAX]), True
        except OSError as exc:
            raise trio.BrokenResourceError(str(exc)) from exc
