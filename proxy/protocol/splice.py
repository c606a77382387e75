"""Rewrite identifier fields of a record-carrying body without decoding the records.

Produce requests and Fetch/ShareFetch responses carry topic names (or ids) and transactional ids
next to record sets. To translate those the body is walked (as in walker.py) and each string or
uuid at a chosen path is re-encoded; everything between the edits stays a memoryview slice of the
original frame. A length change needs no other fix-up: arrays carry counts, records carry their own
length, and the only byte length covering the edits is the frame's size prefix, rewritten here.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
import uuid
from collections.abc import Callable

from .entities import unwrap
from .primitives import INT16, TruncatedError, encode_uvarint, read_int16, read_int32, read_uvarint, skip_tagged_fields
from .walker import MAX_STRING, Buf, MalformedError, _field_skip, regular_fields

# fn(kind, value) -> new value; kind is the rule's entity kind ("topic", "txn", "topic_id", ...)
Translate = Callable[[str, typing.Any], typing.Any]
Edits = list[tuple[int, int, bytes]]  # (start, end, replacement) in frame offsets
Step = Callable[[Buf, int, Edits, Translate], int]
Paths = frozenset[tuple[str, str]]  # {(path, kind)}


def read_string(buf: Buf, offset: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        length, offset = read_uvarint(buf, offset)
        length -= 1
    else:
        length, offset = read_int16(buf, offset)
    if length < 0:
        return None, offset
    if offset + length > len(buf):
        raise TruncatedError("string past end of buffer")
    return bytes(buf[offset : offset + length]).decode("utf-8"), offset + length


def encode_string(value: str, flexible: bool) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > MAX_STRING:  # e.g. a client's 32,767-byte name once prefixed: no Kafka peer reads it
        raise MalformedError(f"string of {len(raw)} bytes (at most {MAX_STRING})")
    return (encode_uvarint(len(raw) + 1) if flexible else INT16.pack(len(raw))) + raw


def _string_step(flexible: bool, kind: str) -> Step:
    def step(buf: Buf, offset: int, edits: Edits, fn: Translate) -> int:
        start = offset
        value, offset = read_string(buf, offset, flexible)
        if value is not None:
            new = fn(kind, value)
            if new != value:
                edits.append((start, offset, encode_string(new, flexible)))
        return offset

    return step


def _uuid_step(kind: str) -> Step:
    def step(buf: Buf, offset: int, edits: Edits, fn: Translate) -> int:
        if offset + 16 > len(buf):
            raise TruncatedError("uuid past end of buffer")
        value = uuid.UUID(bytes=bytes(buf[offset : offset + 16]))
        new = fn(kind, value)
        if new != value:
            edits.append((offset, offset + 16, new.bytes))
        return offset + 16

    return step


def _array_step(flexible: bool, item: Step) -> Step:
    def step(buf: Buf, offset: int, edits: Edits, fn: Translate) -> int:
        if flexible:
            count, offset = read_uvarint(buf, offset)
            count -= 1
        else:
            count, offset = read_int32(buf, offset)
        if count > len(buf) - offset:  # every item takes at least a byte: no long loop for a hostile count
            raise MalformedError(f"array of {count} items cannot fit in {len(buf) - offset} bytes")
        for _ in range(count):
            offset = item(buf, offset, edits, fn)
        return offset

    return step


@functools.cache
def _compiled(cls: type, paths: Paths) -> Step:
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    here = {path: kind for path, kind in paths if "[]." not in path}
    steps: list[Step] = []
    for f in regular_fields(cls):
        if f.name in here:
            is_uuid = f.metadata.get("kafka_type") == "uuid"
            steps.append(_uuid_step(here[f.name]) if is_uuid else _string_step(flexible, here[f.name]))
            continue
        nested = frozenset((p[len(f.name) + 3 :], k) for p, k in paths if p.startswith(f"{f.name}[]."))
        if nested:
            inner, _ = unwrap(typing.get_args(unwrap(f.type)[0])[0])
            steps.append(_array_step(flexible, _compiled(inner, nested)))  # type: ignore[arg-type]
        else:
            skip = _field_skip(f, flexible)
            steps.append(lambda buf, offset, edits, fn, skip=skip: skip(buf, offset))

    def run(buf: Buf, offset: int, edits: Edits, fn: Translate) -> int:
        for step in steps:
            offset = step(buf, offset, edits, fn)
        if flexible:
            offset = skip_tagged_fields(buf, offset)
        return offset

    return run


def rewrite_fields(
    cls: type, frame: memoryview, body_offset: int, paths: Paths, fn: Translate
) -> list[bytes | memoryview]:
    """The frame with each field at `paths` passed through `fn(kind, value)`.

    Paths are top-level names or "array[].field" chains of arrays of structs. Returns pieces: a new
    size prefix then original slices and replacements in order; with no change, the original view.
    """
    return apply(frame, edits_for(cls, frame, body_offset, paths, fn))


def edits_for(cls: type, frame: memoryview, body_offset: int, paths: Paths, fn: Translate) -> Edits:
    """The edits `rewrite_fields` makes, in frame order, for a caller that has more to splice in."""
    for path, _ in paths:
        _check_path(cls, path)
    edits: Edits = []
    if _compiled(cls, paths)(frame, body_offset, edits, fn) > len(frame):
        raise TruncatedError(f"{cls.__qualname__} body past end of frame")
    return edits


def apply(frame: bytes | memoryview, edits: Edits) -> list[bytes | memoryview]:
    """The frame with `edits` (in frame order, none overlapping) spliced in: a new size prefix, then
    original slices and replacements; with no edit, the original view. One pass, whatever the edits' source."""
    if not edits:
        return [frame]
    pieces: list[bytes | memoryview] = []
    position = 4
    size = len(frame) - 4
    for start, end, replacement in edits:
        if start < position:
            raise ValueError(f"overlapping splice edits at offset {start}")
        pieces.append(frame[position:start])
        pieces.append(replacement)
        size += len(replacement) - (end - start)
        position = end
    pieces.append(frame[position:])
    return [size.to_bytes(4, "big"), *pieces]


@functools.cache
def _check_path(cls: type, path: str) -> None:
    head, _, rest = path.partition("[].")
    names = {f.name for f in dataclasses.fields(cls)}
    if head not in names:
        raise KeyError(f"{cls.__qualname__} has no field {head!r}")
    if rest:
        hint = typing.get_type_hints(cls)[head]
        inner, _ = unwrap(typing.get_args(unwrap(hint)[0])[0])
        _check_path(inner, rest)  # type: ignore[arg-type]
