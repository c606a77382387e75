"""Full decode/encode of message bodies through kio, and locally built error responses."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import typing
import uuid
from collections.abc import Callable
from types import UnionType
from typing import Any

from kio.serial import entity_reader, entity_writer

from . import walker
from .apis import response_type
from .headers import encode_response_header


class CodecError(Exception):
    """A body the proxy must rewrite could not be decoded or encoded."""


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


def _zero(tp: Any) -> Any:
    tp_origin = typing.get_origin(tp)
    if tp_origin in (UnionType, typing.Union):
        return None  # nullable: null is always valid
    if tp_origin is tuple:
        return ()
    if dataclasses.is_dataclass(tp):
        return _empty(tp)  # type: ignore[arg-type]
    base = getattr(tp, "__supertype__", tp)
    for candidate in (tp, base):
        if isinstance(candidate, type):
            if issubclass(candidate, bool):
                return candidate(False)
            if issubclass(candidate, int):
                return candidate(0)
            if issubclass(candidate, float):
                return candidate(0.0)
            if issubclass(candidate, str):
                return candidate("")
            if issubclass(candidate, bytes):
                return candidate(b"")
            if issubclass(candidate, datetime.timedelta):
                return datetime.timedelta(0)
            if issubclass(candidate, datetime.datetime):
                return datetime.datetime.fromtimestamp(0, datetime.UTC)
            if issubclass(candidate, uuid.UUID):
                return uuid.UUID(int=0)
    raise CodecError(f"no zero value for {tp!r}")


_hints = functools.cache(typing.get_type_hints)  # introspection cost ~100 µs per class: once per process


def _empty(cls: type, **overrides: Any) -> Any:
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in overrides:
            kwargs[f.name] = overrides[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _zero(hints[f.name])
    return cls(**kwargs)


@functools.lru_cache(maxsize=4096)  # refusals are answered locally, often by the thousand: build each once
def error_response_body(api_key: int, version: int, error_code: int) -> bytes | None:
    """An empty response for this API with ``error_code`` in its top-level error field.

    Returns None when the response has no top-level error code: such a request cannot be refused
    in-band and the caller closes the connection, as Kafka brokers do for requests they cannot serve.
    """
    cls = response_type(api_key, version)
    names = {f.name for f in dataclasses.fields(cls)}
    if "error_code" not in names:
        return None
    from kio.schema.errors import ErrorCode

    return encode(_empty(cls, error_code=ErrorCode(error_code)))


def response_frame(correlation_id: int, header_version: int, body: bytes) -> bytes:
    payload = encode_response_header(correlation_id, header_version) + body
    return len(payload).to_bytes(4, "big") + payload


# Error codes the proxy itself answers with (Kafka's Errors.java).
CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."  # Kafka's message for it (Errors)
