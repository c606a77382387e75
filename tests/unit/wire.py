"""Builders for request/response frames in unit tests (kio does the encoding)."""

from __future__ import annotations

from typing import Any

from proxy.protocol import codec
from proxy.protocol.apis import api_info, known_apis, request_type, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, encode_response_header


def request_frame(api_key: int, version: int, correlation_id: int, body: Any | bytes, client_id: str = "t") -> bytes:
    header = encode_request_header(
        api_key, version, correlation_id, client_id, api_info(api_key).request_header_version(version)
    )
    raw = body if isinstance(body, bytes) else codec.encode(body)
    return frame(header + raw)


def response_frame(api_key: int, version: int, correlation_id: int, body: Any | bytes) -> bytes:
    raw = body if isinstance(body, bytes) else codec.encode(body)
    return frame(encode_response_header(correlation_id, api_info(api_key).response_header_version(version)) + raw)


def every_schema() -> list[type]:
    """The request and response class of every API and version the catalogue knows."""
    out = []
    for key, info in sorted(known_apis().items()):
        for version in range(info.min_version, info.max_version + 1):
            out += [request_type(key, version), response_type(key, version)]
    return out
