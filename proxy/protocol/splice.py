"""Rewrite identifier fields of a record-carrying body without decoding the records.

Produce requests and Fetch/ShareFetch responses carry topic names (or ids) and transactional ids
next to record sets. To translate those the body is walked (as in walker.py) and each string or
uuid at a chosen path is re-encoded; everything between the edits stays a memoryview slice of the
original frame. A length change needs no other fix-up: arrays carry counts, records carry their own
length, and the only byte length covering the edits is the frame's size prefix, rewritten here.
"""

from __future__ import annotations

import functools
import typing
import uuid
from collections.abc import Callable

from . import native, plans
from .plans import MAX_STRING, Node, Paths
from .primitives import (
    INT16,
    MalformedError,
    TruncatedError,
    encode_uvarint,
    read_int16,
    read_int32,
    read_uvarint,
    skip_tagged_fields,
)
from .walker import Buf, pure_skipper

# fn(kind, value) -> new value; kind is the rule's entity kind ("topic", "txn", "topic_id", ...)
Translate = Callable[[str, typing.Any], typing.Any]
Edits = list[tuple[int, int, bytes]]  # (start, end, replacement) in frame offsets
Step = Callable[[Buf, int, Edits, Translate], int]


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


def _struct_step(flexible: bool, steps: list[Step]) -> Step:
    def run(buf: Buf, offset: int, edits: Edits, fn: Translate) -> int:
        for step in steps:
            offset = step(buf, offset, edits, fn)
        if flexible:
            offset = skip_tagged_fields(buf, offset)
        return offset

    return run


@functools.cache
def pure_step(node: Node) -> Step:
    """The pure-Python runner of a splice plan node (the reference)."""
    match node:
        case ("string", flexible, kind):
            return _string_step(flexible, kind)
        case ("uuid", kind):
            return _uuid_step(kind)
        case ("parray", flexible, item):
            return _array_step(flexible, pure_step(item))
        case ("pstruct", flexible, steps):
            return _struct_step(flexible, [pure_step(step) for step in steps])
    skip = pure_skipper(node)  # a field with nothing to translate below it
    return lambda buf, offset, edits, fn: skip(buf, offset)


@functools.cache
def _walk(cls: type, paths: Paths) -> Step:
    node = plans.splice_entity(cls, paths)
    return native.plan(node).splice if native.COMPILED else pure_step(node)


def rewrite_fields(
    cls: type, frame: memoryview, body_offset: int, paths: Paths, fn: Translate
) -> list[bytes | memoryview]:
    """The frame with each field at `paths` passed through `fn(kind, value)`.

    Paths are top-level names or "array[].field" chains of arrays of structs. Returns pieces: a new
    size prefix then original slices and replacements in order; with no change, the original view.
    """
    return apply(frame, edits_for(cls, frame, body_offset, paths, fn))


def edits_for(cls: type, frame: memoryview, body_offset: int, paths: Paths, fn: Translate) -> Edits:
    """The edits `rewrite_fields` makes, in frame order, for a caller that has more to splice in. A path
    the class lacks is a KeyError, from the walk's plan (made once per class and paths, checked then)."""
    edits: Edits = []
    if _walk(cls, paths)(frame, body_offset, edits, fn) > len(frame):
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
