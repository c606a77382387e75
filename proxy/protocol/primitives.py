"""Kafka wire primitives the proxy reads and writes by hand.

Full messages go through kio; these helpers exist for the few places where the proxy must walk or
splice bytes without decoding everything (headers, tagged-field sections, record-carrying bodies).
"""

from __future__ import annotations

import struct

from ..errors import MalformedInput

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")


class TruncatedError(MalformedInput, ValueError):
    """The buffer ended in the middle of a field."""


class MalformedError(MalformedInput, ValueError):
    """A body that no Kafka peer may send: a length past the frame, a null where none is allowed."""


# What reading hostile bytes by hand can raise (bad UTF-8 is a ValueError; struct.error and
# IndexError come from reads past the end): a protocol error for the peer, never an internal one.
MALFORMED: tuple[type[Exception], ...] = (ValueError, struct.error, IndexError)


def read_int16(buf: memoryview | bytes, offset: int) -> tuple[int, int]:
    if offset + 2 > len(buf):
        raise TruncatedError("int16 past end of buffer")
    return INT16.unpack_from(buf, offset)[0], offset + 2


def read_int32(buf: memoryview | bytes, offset: int) -> tuple[int, int]:
    if offset + 4 > len(buf):
        raise TruncatedError("int32 past end of buffer")
    return INT32.unpack_from(buf, offset)[0], offset + 4


def read_uvarint(buf: memoryview | bytes, offset: int) -> tuple[int, int]:
    value = 0
    shift = 0
    end = len(buf)
    while True:
        if offset >= end:
            raise TruncatedError("unsigned varint past end of buffer")
        byte = buf[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 35:
            raise ValueError("unsigned varint longer than 5 bytes")


def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("unsigned varint cannot be negative")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_nullable_string(buf: memoryview | bytes, offset: int) -> tuple[str | None, int]:
    """A classic (int16-length) nullable string: used by request headers in every version."""
    length, offset = read_int16(buf, offset)
    if length < 0:
        return None, offset
    if offset + length > len(buf):
        raise TruncatedError("string past end of buffer")
    return bytes(buf[offset : offset + length]).decode("utf-8"), offset + length


def encode_nullable_string(value: str | None) -> bytes:
    if value is None:
        return INT16.pack(-1)
    raw = value.encode("utf-8")
    return INT16.pack(len(raw)) + raw


def skip_tagged_fields(buf: memoryview | bytes, offset: int) -> int:
    if offset < len(buf) and buf[offset] == 0:  # none: nearly every header and body a client or broker sends
        return offset + 1
    count, offset = read_uvarint(buf, offset)
    for _ in range(count):
        _tag, offset = read_uvarint(buf, offset)
        size, offset = read_uvarint(buf, offset)
        offset += size
        if offset > len(buf):
            raise TruncatedError("tagged field past end of buffer")
    return offset


def read_tagged_fields(buf: memoryview | bytes, offset: int) -> tuple[list[tuple[int, int, int]], int]:
    """Returns [(tag, data_start, data_end)] in wire order and the offset after the section."""
    count, offset = read_uvarint(buf, offset)
    fields = []
    for _ in range(count):
        tag, offset = read_uvarint(buf, offset)
        size, offset = read_uvarint(buf, offset)
        if offset + size > len(buf):
            raise TruncatedError("tagged field past end of buffer")
        fields.append((tag, offset, offset + size))
        offset += size
    return fields, offset
