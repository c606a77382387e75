"""Reads Kafka frames from a Trio stream into a FrameDecoder.

Plain TCP streams are read with ``recv_into`` straight into the decoder's buffer (no copy);
other streams (TLS) fall back to ``receive_some``.
"""

from __future__ import annotations

import trio

from ..protocol.framing import FrameDecoder, FrameError


class FrameReader:
    def __init__(
        self, stream: trio.abc.ReceiveStream, max_frame_bytes: int, buffer_size: int, initial_size: int | None = None
    ):
        self.stream = stream
        self.decoder = FrameDecoder(max_frame_bytes, buffer_size, initial_size)
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self.bytes_read = 0

    async def next_frame(self) -> memoryview | None:
        """The next frame, or None at a clean end of stream. The previous frame is invalid after this."""
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            if self._socket is not None:
                target = self.decoder.write_buffer()
                try:
                    n = await self._socket.recv_into(target)
                except OSError as exc:
                    raise trio.BrokenResourceError(str(exc)) from exc
                finally:
                    del target  # release the export so the decoder may compact its buffer
                if n:
                    self.decoder.commit(n)
            else:
                data = await self.stream.receive_some(self.decoder.buffer_limit)
                n = len(data)
                if n:
                    self.decoder.receive_data(data)
            if not n:
                if self.decoder.buffered:
                    raise FrameError(f"connection closed in the middle of a frame ({self.decoder.buffered} bytes)")
                return None
            self.bytes_read += n
