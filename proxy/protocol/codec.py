"""Full decode/encode of message bodies through kio, and locally built error responses."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import Any

from kio.serial import entity_reader, entity_writer

from ..errors import CodecError
from . import entities, walker
from .apis import response_type
from .headers import encode_response_header


@functools.cache
def _reader(cls: type) -> Callable[[Any, int], tuple[Any, int]]:
    return entity_reader(cls)


@functools.cache
def _writer(cls: type) -> Callable[[io.BytesIO, Any], None]:
    return entity_writer(cls)


def decode(cls: type, buf: memoryview | bytes, offset: int = 0) -> tuple[Any, int]:
    """(entity, offset after it). kio raises on unknown tagged fields; that is a CodecError here.

    The body is validated first (walker.validate): kio's native reader trusts length prefixes, and a
    hostile count makes it abort the process; validation bounds each by the bytes left.
    """
    if isinstance(buf, memoryview) and not buf.readonly:
        buf = buf.toreadonly()  # kio's native reader insists on read-only buffers (no copy made)
    try:
        walker.validate(cls, buf, offset)
        entity, size = _reader(cls)(buf, offset)
    except Exception as exc:  # kio raises several types; the caller only needs "cannot decode"
        raise CodecError(f"cannot decode {cls.__qualname__} v{cls.__version__}: {exc}") from exc  # type: ignore[attr-defined]
    return entity, offset + size


def prepare(cls: type) -> None:
    """Build `cls`'s reader, writer and validator now (a tool does this before it connects: on a busy
    machine it is most of the work, and a proxy gives a login only so long)."""
    _reader(cls)
    _writer(cls)
    walker.entity_validator(cls)


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    try:
        _writer(type(entity))(buf, entity)
    except Exception as exc:
        raise CodecError(f"cannot encode {type(entity).__qualname__}: {exc}") from exc
    return buf.getvalue()


_zero, _empty = entities.zero, entities.empty  # the codec's names for them, kept for its callers


@functools.lru_cache(maxsize=4096)  # refusals are answered locally, often by the thousand: build each once
def error_response_body(api_key: int, version: int, error_code: int) -> bytes | None:
    """An empty response for this API with ``error_code`` in its top-level error field.

    Returns None when the response has no top-level error code: such a request cannot be refused
    in-band and the caller closes the connection, as Kafka brokers do for requests they cannot serve.
    """
    cls = response_type(api_key, version)
    if "error_code" not in entities.field_names(cls):
        return None
    from kio.schema.errors import ErrorCode

    return encode(_empty(cls, error_code=ErrorCode(error_code)))


def response_frame(correlation_id: int, header_version: int, body: bytes) -> bytes:
    payload = encode_response_header(correlation_id, header_version) + body
    return len(payload).to_bytes(4, "big") + payload


# Error codes the proxy itself answers with (Kafka's Errors.java).
CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."  # Kafka's message for it (Errors)
