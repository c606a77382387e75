"""Setting a response's `throttle_time_ms` without decoding what the proxy never decodes, sans-I/O.

Most responses open with the throttle time: it is overwritten in place, 4 bytes at the body's start,
whatever pieces the frame is in (a spliced Fetch stays memoryviews of the receive buffer). Produce has
it after its `responses` array: that array is walked (walker.py, no records in a Produce response) to
find it. A body some stage already decoded gets it on the entity instead, so that its edits survive.
The broker's own throttle is kept when it is the larger (Kafka: the max of all quotas' throttles).
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import timedelta
from typing import Any

from kio.static.primitive import i32Timedelta

from ..protocol.apis import response_type
from ..protocol.headers import response_body_offset
from ..protocol.plans import regular_fields
from ..protocol.primitives import INT32
from ..protocol.walker import layout

_MAX_MS = 2**31 - 1


@functools.cache
def throttle_field(api_key: int, version: int) -> tuple[str, int] | None:
    """(field name, index among the top-level fields) of the response's throttle time, or None."""
    for index, f in enumerate(regular_fields(response_type(api_key, version))):
        if f.name.startswith("throttle_time") and f.metadata.get("kafka_type") in ("int32", "timedelta_i32"):
            return f.name, index
    return None


def set_throttle(msg: Any, api_key: int, version: int, ms: int) -> None:
    """Make the response `msg` (a proxy.core.exchange.ResponseMessage) say at least `ms` ms of throttle."""
    where = throttle_field(api_key, version)
    if where is None:
        return  # too old a version to say it (Produce v0, Fetch v0): the mute alone applies
    name, index = where
    ms = min(ms, _MAX_MS)
    if msg.decoded:  # decoded by a stage: edit the entity, keep their edits
        entity = msg.entity()
        old = getattr(entity, name)
        old_ms = int(old.total_seconds() * 1000) if isinstance(old, timedelta) else int(old)
        if ms > old_ms:
            value = i32Timedelta.parse(timedelta(milliseconds=ms)) if isinstance(old, timedelta) else ms
            msg.set_entity(dataclasses.replace(entity, **{name: value}))
        return
    if index == 0:
        offset = msg.body_offset
    else:  # Produce: after the responses array
        frame = msg.frame
        offset = layout(response_type(api_key, version), frame, msg.body_offset).fields[name][0]
    msg.replace(_patched(msg.pieces, offset, ms))


def _patched(pieces: list[bytes | memoryview], offset: int, ms: int) -> list[bytes | memoryview]:
    """`pieces` with the int32 at frame offset `offset` raised to `ms`, the rest untouched."""
    position = 0
    for i, piece in enumerate(pieces):
        if position <= offset and offset + 4 <= position + len(piece):
            local = offset - position
            old = INT32.unpack_from(piece, local)[0]
            if old >= ms:
                return pieces
            return [*pieces[:i], piece[:local], INT32.pack(ms), piece[local + 4 :], *pieces[i + 1 :]]
        position += len(piece)
    joined = b"".join(bytes(p) for p in pieces)  # the field straddles two pieces: rare, and small then
    return _patched([joined], offset, ms)


def read_throttle(pieces: list[bytes | memoryview], api_key: int, version: int, header_version: int) -> int | None:
    """The throttle time a response frame (in pieces) says, or None if its version has none. Reads the
    first bytes only, except for Produce (a small body: joined and walked)."""
    where = throttle_field(api_key, version)
    if where is None:
        return None
    name, index = where
    if index == 0:
        head = bytearray()
        for piece in pieces:  # the header and the field sit in the first few dozen bytes
            head += piece[: 64 - len(head)]
            if len(head) >= 64:
                break
        offset = response_body_offset(head, header_version)
    else:
        head = bytearray(b"".join(bytes(p) for p in pieces))
        offset = layout(response_type(api_key, version), head, response_body_offset(head, header_version))
        offset = offset.fields[name][0]
    return int(INT32.unpack_from(head, offset)[0])
