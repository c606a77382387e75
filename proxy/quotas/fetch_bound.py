"""A Fetch's answer bounded by what its consumer's quota holds, sans-I/O: the request's max_bytes lowered in place.

Kafka bounds a throttled consumer's Fetch the same way (a broker caps `max_bytes` at one quota window's worth). The
broker reads the lowered request as the client meant it: max_bytes is a soft bound (KIP-74: the first record batch
comes whole however large), so the client gets what it asked for, in more answers. The forwarder lowers it at the same
offset (native/src/forward.rs, `fetch_max_bytes_at`); `tests/unit/test_quota_stage.py` holds the two to each other.
"""

from __future__ import annotations

import functools

from ..protocol.apikey import ApiKey
from ..protocol.apis import request_type
from ..protocol.plans import regular_fields
from ..protocol.primitives import INT32


@functools.cache
def max_bytes_offset(version: int) -> int | None:
    """Where a Fetch request's max_bytes sits from the body's start: after the int32 fields before it (replica_id
    before v15, max_wait_ms, min_bytes); None for a version without it."""
    offset = 0
    for f in regular_fields(request_type(ApiKey.FETCH, version)):
        if f.name == "max_bytes":
            return offset
        if f.metadata.get("kafka_type") not in ("int32", "timedelta_i32"):
            return None
        offset += 4
    return None


def asked(frame: bytes | memoryview, body_offset: int, version: int) -> int | None:
    """The max_bytes a Fetch request asks for, or None when its version has none or the frame is too short to hold it
    (a malformed request: the stage that decodes it closes the connection)."""
    at = max_bytes_offset(version)
    if at is None or len(frame) < body_offset + at + 4:
        return None
    return int(INT32.unpack_from(frame, body_offset + at)[0])


def lowered(frame: bytes | memoryview, body_offset: int, version: int, most: int) -> bytes:
    """The Fetch request `frame` with its max_bytes `most` (the caller knows it asked for more)."""
    at = max_bytes_offset(version)
    assert at is not None
    out = bytearray(frame)
    INT32.pack_into(out, body_offset + at, most)
    return bytes(out)
