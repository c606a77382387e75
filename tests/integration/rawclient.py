"""A raw Kafka protocol client for tests that need exact bytes on the wire."""

from __future__ import annotations

import socket
from typing import Any

from proxy.protocol import codec
from proxy.protocol.apis import api_info, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, response_body_offset


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 60, source: str | None = None):
        """`source`: the local address to connect from (127.0.0.2 ... stand for other hosts on loopback)."""
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection(
            (host, int(port)), timeout=timeout, source_address=(source, 0) if source else None
        )

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def encode(api_key: int, version: int, correlation_id: int, body: Any, client_id: str = "raw") -> bytes:
        header = encode_request_header(
            api_key, version, correlation_id, client_id, api_info(api_key).request_header_version(version)
        )
        return frame(header + (body if isinstance(body, bytes) else codec.encode(body)))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = int.from_bytes(self._read_exactly(4), "big")
        return size.to_bytes(4, "big") + self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the proxy")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def is_closed(self, timeout: float = 30) -> bool:
        """True if the peer closes the connection (EOF or reset) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def request(self, api_key: int, version: int, correlation_id: int, body: Any) -> tuple[int, Any]:
        self.send_raw(self.encode(api_key, version, correlation_id, body))
        return self.decode(api_key, version, self.read_frame())

    def login_plain(self, user: str, password: str, client_id: str = "raw") -> None:
        """SASL PLAIN, as a client does it: SaslHandshake v1, then SaslAuthenticate v2 (raises if refused)."""
        from proxy.protocol.apis import request_type

        handshake = codec._empty(request_type(17, 1), mechanism="PLAIN")
        self.send_raw(self.encode(17, 1, 90001, handshake, client_id))
        _, answer = self.decode(17, 1, self.read_frame())
        assert int(answer.error_code) == 0, answer
        token = b"\0" + user.encode() + b"\0" + password.encode()
        self.send_raw(self.encode(36, 2, 90002, codec._empty(request_type(36, 2), auth_bytes=token), client_id))
        _, done = self.decode(36, 2, self.read_frame())
        assert int(done.error_code) == 0, done

    @staticmethod
    def decode(api_key: int, version: int, raw: bytes) -> tuple[int, Any]:
        correlation_id = int.from_bytes(raw[4:8], "big", signed=True)
        offset = response_body_offset(raw, api_info(api_key).response_header_version(version))
        body, _ = codec.decode(response_type(api_key, version), raw, offset)
        return correlation_id, body
