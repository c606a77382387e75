"""KIP-1313: request header v3 and the RPC versions that use it, translated for brokers without it.

Header v3 is header v2 with a ClientInstanceId (uuid) between ClientId and the tagged fields. The
KIP gives every RPC but SaslHandshake one new version that uses it; its body is the body of the
version before, except for three RPCs:

* OffsetDelete v1 is the API's first flexible version (compact encodings, tagged fields, response
  header v1);
* GetTelemetrySubscriptions v1 and PushTelemetry v1 drop the ClientInstanceId from the request body
  (it is in the header), and GetTelemetrySubscriptions v1 drops it from the response too.

The proxy numbers the KIP's version as one past the newest version in its schema set (kio), so a
request at that version is the previous version plus a header field: ``downgrade`` turns it into
that previous version with header v1/v2, which every stock broker understands.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .apikey import ApiKey
from .apis import ApiInfo
from .headers import encode_request_header
from .primitives import (
    INT16,
    INT32,
    TruncatedError,
    encode_nullable_string,
    encode_uvarint,
    read_int16,
    read_int32,
    read_nullable_string,
    read_uvarint,
    skip_tagged_fields,
)

CONVERTED_RESPONSES = frozenset({ApiKey.OFFSET_DELETE, ApiKey.GET_TELEMETRY_SUBSCRIPTIONS})
# Kafka after 4.2 already uses the version after the proxy's newest for real (different bodies,
# header v2) on these APIs, and clients send them (franz-go 1.22: ApiVersions v5, TxnOffsetCommit
# v6, DeleteGroups v3, StreamsGroupHeartbeat/Describe v1). Offering header v3 there would misread
# those clients, so these APIs get no header-v3 version.
TAKEN_BY_NEWER_KAFKA = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.DELETE_GROUPS,
        ApiKey.STREAMS_GROUP_HEARTBEAT,
        ApiKey.STREAMS_GROUP_DESCRIBE,
    }
)
# franz-go 1.22 sends SaslAuthenticate at the broker's advertised maximum, not clamped to its own.
CLIENTS_USE_ADVERTISED = frozenset({ApiKey.SASL_AUTHENTICATE})
ZERO = bytes(16)


def header_v3_version(info: ApiInfo) -> int | None:
    """The version of this API that carries request header v3, or None (SaslHandshake, and APIs
    whose next version newer Kafka already uses)."""
    # SaslHandshake is never bumped: clients negotiated its versions wrongly in the past.
    if info.key == ApiKey.SASL_HANDSHAKE or info.key in TAKEN_BY_NEWER_KAFKA or info.key in CLIENTS_USE_ADVERTISED:
        return None
    return info.max_version + 1


def uses_header_v3(info: ApiInfo, version: int) -> bool:
    return version == info.max_version + 1 and header_v3_version(info) is not None


def advertised(
    table: dict[int, tuple[int, int]],
    known: dict[int, ApiInfo],
    upstream: dict[int, tuple[int, int]] | None = None,
) -> dict[int, tuple[int, int]]:
    """Add the header-v3 version to every API whose previous version both sides support: the proxy
    can then translate it. Not where the broker lacks that version, nor where it has newer ones than
    the proxy's schemas: there the next number is a real version the proxy cannot read."""
    out = {}
    for key, (low, high) in table.items():
        info = known.get(key)
        broker_newer = upstream is not None and upstream.get(key, (0, -1))[1] > high
        if info is not None and high == info.max_version and header_v3_version(info) is not None and not broker_newer:
            high += 1
        out[key] = (low, high)
    return out


@dataclass(slots=True)
class HeaderV3:
    client_id: str | None
    instance_id: bytes  # 16 bytes as on the wire; all zeros if the client sent the nil uuid
    body_offset: int  # within the frame, size prefix included

    @property
    def instance_uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.instance_id)


def parse_header_v3(frame: memoryview | bytes) -> HeaderV3:
    offset = 12  # size, api key, api version, correlation id
    client_id, offset = read_nullable_string(frame, offset)
    if offset + 16 > len(frame):
        raise TruncatedError("ClientInstanceId past end of request")
    instance_id = bytes(frame[offset : offset + 16])
    return HeaderV3(client_id, instance_id, skip_tagged_fields(frame, offset + 16))


def encode_header_v3(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, instance_id: bytes
) -> bytes:
    """Request header v3 (used by tests and by the proxy's own clients of KIP-1313 brokers)."""
    head = encode_request_header(api_key, api_version, correlation_id, client_id, 1)
    return head + instance_id + b"\x00"


def downgrade(frame: memoryview | bytes, info: ApiInfo, header: HeaderV3, client_id: str | None) -> memoryview:
    """The request at the version before, with header v1/v2 and `client_id`: the frame a broker
    without KIP-1313 takes. The body is shared with `frame` (rewritten in place, in front of the
    body, when the receive buffer allows it), so a large Produce is not copied."""
    version = info.max_version
    api_key, correlation_id = INT16.unpack_from(frame, 4)[0], INT32.unpack_from(frame, 8)[0]
    head = encode_request_header(api_key, version, correlation_id, client_id, info.request_header_version(version))
    body = frame[header.body_offset :]
    convert = _REQUEST_BODIES.get(api_key)
    if convert is not None:
        payload = head + convert(body, header.instance_id)
        return memoryview(INT32.pack(len(payload)) + payload)
    start = header.body_offset - len(head) - 4
    if start >= 0 and isinstance(frame, memoryview) and not frame.readonly:
        frame[start + 4 : header.body_offset] = head
        INT32.pack_into(frame, start, len(frame) - start - 4)
        return frame[start:]
    payload = head + bytes(body)
    return memoryview(INT32.pack(len(payload)) + payload)


def upgrade_response(api_key: int, frame: bytes | memoryview) -> bytes:
    """A response of the previous version as the header-v3 version's response (same correlation id)."""
    correlation_id = frame[4:8]
    if api_key == ApiKey.OFFSET_DELETE:  # response header v0 -> v1, body -> flexible
        return _framed(bytes(correlation_id) + b"\x00" + _offset_delete_response_flexible(frame, 8))
    if api_key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS:  # header v1 (empty tags) kept; drop ClientInstanceId
        offset = skip_tagged_fields(frame, 8)
        body = bytes(frame[offset:])
        if len(body) < 22:
            raise TruncatedError("GetTelemetrySubscriptions response too short")
        return _framed(bytes(frame[4:offset]) + body[:6] + body[22:])
    return bytes(frame)


def _framed(payload: bytes) -> bytes:
    return INT32.pack(len(payload)) + payload


# -- request bodies ----------------------------------------------------------------------------------


def _telemetry_request(body: memoryview | bytes, instance_id: bytes) -> bytes:
    # v0 opens with the ClientInstanceId that v1 moved into the header; the rest is identical.
    return instance_id + bytes(body)


def _offset_delete_request(body: memoryview | bytes, _instance_id: bytes) -> bytes:
    """OffsetDelete v1 (flexible) -> v0: group id, then topics of (name, partitions of index)."""
    out = bytearray()
    group, offset = _compact_string(body, 0)
    out += encode_nullable_string(group)
    topics, offset = _compact_length(body, offset)
    out += INT32.pack(topics)
    for _ in range(max(topics, 0)):
        name, offset = _compact_string(body, offset)
        out += encode_nullable_string(name)
        partitions, offset = _compact_length(body, offset)
        out += INT32.pack(partitions)
        for _ in range(max(partitions, 0)):
            index, offset = read_int32(body, offset)
            out += INT32.pack(index)
            offset = skip_tagged_fields(body, offset)
        offset = skip_tagged_fields(body, offset)
    skip_tagged_fields(body, offset)
    return bytes(out)


_REQUEST_BODIES = {
    ApiKey.OFFSET_DELETE: _offset_delete_request,
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: _telemetry_request,
    ApiKey.PUSH_TELEMETRY: _telemetry_request,
}


def _offset_delete_response_flexible(frame: bytes | memoryview, offset: int) -> bytes:
    """OffsetDelete v0 response body -> v1: error, throttle, topics of (name, partitions of (index, error))."""
    out = bytearray()
    error, offset = read_int16(frame, offset)
    throttle, offset = read_int32(frame, offset)
    out += INT16.pack(error) + INT32.pack(throttle)
    topics, offset = read_int32(frame, offset)
    out += encode_uvarint(max(topics, -1) + 1)
    for _ in range(max(topics, 0)):
        name, offset = read_nullable_string(frame, offset)
        out += _compact(name)
        partitions, offset = read_int32(frame, offset)
        out += encode_uvarint(max(partitions, -1) + 1)
        for _ in range(max(partitions, 0)):
            index, offset = read_int32(frame, offset)
            perror, offset = read_int16(frame, offset)
            out += INT32.pack(index) + INT16.pack(perror) + b"\x00"
        out += b"\x00"
    out += b"\x00"
    return bytes(out)


def _compact_length(buf: memoryview | bytes, offset: int) -> tuple[int, int]:
    n, offset = read_uvarint(buf, offset)
    return n - 1, offset  # -1: null


def _compact_string(buf: memoryview | bytes, offset: int) -> tuple[str | None, int]:
    n, offset = _compact_length(buf, offset)
    if n < 0:
        return None, offset
    if offset + n > len(buf):
        raise TruncatedError("compact string past end of buffer")
    return bytes(buf[offset : offset + n]).decode("utf-8"), offset + n


def _compact(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode("utf-8")
    return encode_uvarint(len(raw) + 1) + raw
