"""Request and response headers.

Request header v1: api_key, api_version, correlation_id, client_id (int16-length string).
Request header v2 adds a tagged-field section; the API's first flexible version selects v2.
Response header v0 is the correlation id; v1 adds tagged fields. ApiVersions responses always
use v0 so that a client can parse them before it knows the broker's versions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .primitives import INT16, INT32, TruncatedError, read_nullable_string, skip_tagged_fields

_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    body_offset: int  # offset of the body within the frame, size prefix included


def peek_request(frame: memoryview | bytes) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: at fixed offsets in every header version."""
    if len(frame) < 12:
        raise ValueError("request shorter than its fixed header")
    return _FIXED.unpack_from(frame, 4)


def parse_request_header(frame: memoryview | bytes, header_version: int) -> RequestHeader:
    if len(frame) < 12:
        raise TruncatedError("request shorter than its fixed header")
    api_key, api_version, correlation_id = _FIXED.unpack_from(frame, 4)
    client_id, offset = read_nullable_string(frame, 12)
    if header_version >= 2:
        offset = skip_tagged_fields(frame, offset)
    return RequestHeader(api_key, api_version, correlation_id, client_id, header_version, offset)


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, header_version: int
) -> bytes:
    from .primitives import encode_nullable_string

    out = INT16.pack(api_key) + INT16.pack(api_version) + INT32.pack(correlation_id)
    out += encode_nullable_string(client_id)
    if header_version >= 2:
        out += b"\x00"
    return out


def response_body_offset(frame: memoryview | bytes, header_version: int) -> int:
    """Offset of the response body within the frame (size prefix included)."""
    offset = 8  # size + correlation id
    if header_version >= 1:
        offset = skip_tagged_fields(frame, offset)
    return offset


def response_correlation_id(frame: memoryview | bytes) -> int:
    return INT32.unpack_from(frame, 4)[0]


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    return INT32.pack(correlation_id) + (b"\x00" if header_version >= 1 else b"")
