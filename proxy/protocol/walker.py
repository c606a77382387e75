"""Walk a message body without decoding it, to find where its fields start and end.

Used for bodies that carry record batches (Produce, Fetch, ShareFetch): the proxy must reach a
field that sits after the records (e.g. the KIP-951 ``NodeEndpoints`` tagged field at the end of
a Fetch response) without decoding or copying the records. The walk is compiled once per kio
schema class into a chain of skip functions; each record set is skipped by its length prefix.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable

from ..errors import MalformedInput
from .entities import unwrap
from .primitives import TruncatedError, read_tagged_fields, read_uvarint, skip_tagged_fields

Buf = memoryview | bytes
Skip = Callable[[Buf, int], int]

_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}


def _check(buf: Buf, offset: int) -> int:
    if offset > len(buf):
        raise TruncatedError("field past end of buffer")
    return offset


class _Fixed:
    """Skips a fixed number of bytes; consecutive fixed-size fields merge into one step."""

    __slots__ = ("size",)

    def __init__(self, size: int):
        self.size = size

    def __call__(self, buf: Buf, offset: int) -> int:
        offset += self.size
        if offset > len(buf):
            raise TruncatedError("field past end of buffer")
        return offset


def _merge_fixed(steps: list[Skip]) -> list[Skip]:
    out: list[Skip] = []
    for step in steps:
        if isinstance(step, _Fixed) and out and isinstance(out[-1], _Fixed):
            out[-1] = _Fixed(out[-1].size + step.size)
        else:
            out.append(step)
    return out


def _length_prefixed(flexible: bool, prefix_bytes: int) -> Skip:
    if flexible:

        def skip(buf: Buf, offset: int) -> int:
            length, offset = read_uvarint(buf, offset)
            return _check(buf, offset + max(length - 1, 0))

    else:

        def skip(buf: Buf, offset: int) -> int:
            length = int.from_bytes(buf[offset : offset + prefix_bytes], "big", signed=True)
            offset = _check(buf, offset + prefix_bytes)
            return _check(buf, offset + max(length, 0))

    return skip


def _array(flexible: bool, item: Skip) -> Skip:
    def skip(buf: Buf, offset: int) -> int:
        if flexible:
            count, offset = read_uvarint(buf, offset)
            count -= 1
        else:
            count = int.from_bytes(buf[offset : offset + 4], "big", signed=True)
            offset = _check(buf, offset + 4)
        for _ in range(count):
            offset = item(buf, offset)
        return offset

    return skip


def _field_skip(field: dataclasses.Field, flexible: bool) -> Skip:
    kafka_type = field.metadata.get("kafka_type")
    tp, nullable = unwrap(field.type)
    if typing.get_origin(tp) is tuple:
        inner, _ = unwrap(typing.get_args(tp)[0])
        if dataclasses.is_dataclass(inner):
            return _array(flexible, entity_skipper(inner))  # type: ignore[arg-type]
        return _array(flexible, _scalar_skip(kafka_type, flexible))
    if dataclasses.is_dataclass(tp):
        inner_skip = entity_skipper(tp)  # type: ignore[arg-type]
        if nullable:
            # Nullable structs carry an int8 marker: -1 null, 1 present.
            def skip(buf: Buf, offset: int) -> int:
                marker = buf[_check(buf, offset + 1) - 1]
                offset += 1
                return offset if marker == 0xFF else inner_skip(buf, offset)

            return skip
        return inner_skip
    return _scalar_skip(kafka_type, flexible)


def _scalar_skip(kafka_type: str | None, flexible: bool) -> Skip:
    if kafka_type in _FIXED:
        return _Fixed(_FIXED[kafka_type])
    if kafka_type == "string":
        return _length_prefixed(flexible, 2)
    if kafka_type in ("bytes", "records"):
        return _length_prefixed(flexible, 4)
    raise ValueError(f"no skipper for kafka_type {kafka_type!r}")


def regular_fields(cls: type) -> list[dataclasses.Field]:
    """Fields in wire order, tagged fields excluded (they live in the trailing tag section)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue
        f.type = hints[f.name]
        out.append(f)
    return out


@functools.cache
def entity_skipper(cls: type) -> Skip:
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    steps = _merge_fixed([_field_skip(f, flexible) for f in regular_fields(cls)])

    def skip(buf: Buf, offset: int) -> int:
        for step in steps:
            offset = step(buf, offset)
        if flexible:
            # Almost every struct has an empty tag section: a single zero byte.
            offset = offset + 1 if offset < len(buf) and buf[offset] == 0 else skip_tagged_fields(buf, offset)
        return offset

    return skip


@functools.cache
def _top_level_steps(cls: type) -> tuple[tuple[str, Skip], ...]:
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    return tuple((f.name, _field_skip(f, flexible)) for f in regular_fields(cls))


@functools.cache
def tag_of(cls: type, name: str) -> int:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return int(f.metadata["tag"])
    raise KeyError(name)


@dataclasses.dataclass(slots=True)
class Layout:
    """Where the top-level fields of a body sit: name -> (start, end), plus tagged fields."""

    fields: dict[str, tuple[int, int]]
    tags: dict[int, tuple[int, int]]  # tag -> (data start, data end)
    tags_start: int  # offset of the tagged-field count, or -1 for non-flexible bodies
    end: int


def layout(cls: type, buf: Buf, offset: int) -> Layout:
    fields = {}
    for name, step in _top_level_steps(cls):
        start = offset
        offset = step(buf, offset)
        fields[name] = (start, offset)
    tags: dict[int, tuple[int, int]] = {}
    tags_start = -1
    if cls.__flexible__:  # type: ignore[attr-defined]
        tags_start = offset
        entries, offset = read_tagged_fields(buf, offset)
        tags = {tag: (start, end) for tag, start, end in entries}
    return Layout(fields, tags, tags_start, offset)


# -- strict validation, before kio decodes -------------------------------------------------------------
#
# kio's native reader trusts length prefixes: a 7-byte Metadata request whose compact array claims
# 2^32-2 entries makes it reserve 34 GB, and the Rust abort ends the process (no `except` catches it).
# So every body is walked first, compiled once per schema class like the skippers above, with every
# count and length bounded by the bytes left (a count by its items' minimum wire size) and the content
# of the known tagged fields walked too (kio decodes those; unknown tags it refuses by itself).

Check = Callable[[Buf, int, int], int]  # (buf, offset, end) -> offset after the field

MAX_STRING = 0x7FFF  # Kafka's readers refuse longer strings, compact ones included


class MalformedError(MalformedInput, ValueError):
    """A body that no Kafka peer may send: a length past the frame, a null where none is allowed."""


def _uvarint(buf: Buf, offset: int, end: int) -> tuple[int, int]:
    value = 0
    for shift in (0, 7, 14, 21, 28):
        if offset >= end:
            raise MalformedError("unsigned varint past end of frame")
        byte = buf[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
    raise MalformedError("unsigned varint longer than 5 bytes")


def _prefix(buf: Buf, offset: int, end: int, flexible: bool, size: int) -> tuple[int, int]:
    """A length or count prefix; -1 means null."""
    if flexible:
        value, offset = _uvarint(buf, offset, end)
        return value - 1, offset
    if offset + size > end:
        raise MalformedError("length past end of frame")
    return int.from_bytes(buf[offset : offset + size], "big", signed=True), offset + size


def _v_fixed(size: int) -> Check:
    def check(buf: Buf, offset: int, end: int) -> int:
        offset += size
        if offset > end:
            raise MalformedError("field past end of frame")
        return offset

    return check


def _v_sized(flexible: bool, size: int, nullable: bool, limit: int | None, what: str) -> Check:
    def check(buf: Buf, offset: int, end: int) -> int:
        length, offset = _prefix(buf, offset, end, flexible, size)
        if length < 0:
            if not nullable:
                raise MalformedError(f"null {what} where the schema allows none")
            return offset
        if limit is not None and length > limit:
            raise MalformedError(f"{what} of {length} bytes (at most {limit})")
        offset += length
        if offset > end:
            raise MalformedError(f"{what} of {length} bytes past end of frame")
        return offset

    return check


def _v_array(flexible: bool, nullable: bool, item: Check, item_min: int) -> Check:
    fixed = item.size if isinstance(item, _VFixed) else None  # fixed-size items: no walk

    def check(buf: Buf, offset: int, end: int) -> int:
        count, offset = _prefix(buf, offset, end, flexible, 4)
        if count < 0:
            if not nullable:
                raise MalformedError("null array where the schema allows none")
            return offset
        if count * item_min > end - offset:
            raise MalformedError(f"array of {count} items cannot fit in {end - offset} bytes")
        if fixed is not None:
            return offset + count * fixed
        for _ in range(count):
            offset = item(buf, offset, end)
        return offset

    return check


class _VFixed:
    __slots__ = ("size",)

    def __init__(self, size: int):
        self.size = size

    def __call__(self, buf: Buf, offset: int, end: int) -> int:
        offset += self.size
        if offset > end:
            raise MalformedError("field past end of frame")
        return offset


def _v_scalar(kafka_type: str | None, flexible: bool, nullable: bool) -> tuple[Check, int]:
    if kafka_type in _FIXED:
        return _VFixed(_FIXED[kafka_type]), _FIXED[kafka_type]
    minimum = 1 if flexible else 2
    if kafka_type == "string":
        return _v_sized(flexible, 2, nullable, MAX_STRING, "string"), minimum
    if kafka_type in ("bytes", "records"):
        return _v_sized(flexible, 4, nullable, None, kafka_type), 1 if flexible else 4
    raise ValueError(f"no validator for kafka_type {kafka_type!r}")


def _v_field(tp: object, kafka_type: str | None, flexible: bool) -> tuple[Check, int]:
    """The check for a field of type `tp` and its minimum wire size."""
    tp, nullable = unwrap(tp)
    if typing.get_origin(tp) is tuple:
        inner, inner_nullable = unwrap(typing.get_args(tp)[0])
        if dataclasses.is_dataclass(inner):
            item, item_min = entity_validator(inner)  # type: ignore[arg-type]
        else:
            item, item_min = _v_scalar(kafka_type, flexible, inner_nullable)
        return _v_array(flexible, nullable, item, max(item_min, 1)), 1 if flexible else 4
    if dataclasses.is_dataclass(tp):
        inner_check, inner_min = entity_validator(tp)  # type: ignore[arg-type]
        if not nullable:
            return inner_check, inner_min

        def check(buf: Buf, offset: int, end: int) -> int:
            if offset >= end:
                raise MalformedError("struct marker past end of frame")
            marker = buf[offset]
            return offset + 1 if marker == 0xFF else inner_check(buf, offset + 1, end)

        return check, 1
    return _v_scalar(kafka_type, flexible, nullable)


@functools.cache
def entity_validator(cls: type) -> tuple[Check, int]:
    """(check, minimum wire size) for one entity of `cls`: raises MalformedError for a body kio must not see."""
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    hints = typing.get_type_hints(cls)
    steps: list[Check] = []
    tagged: dict[int, Check] = {}
    minimum = 1 if flexible else 0
    for f in dataclasses.fields(cls):
        check, size = _v_field(hints[f.name], f.metadata.get("kafka_type"), flexible)
        if "tag" in f.metadata:
            tagged[int(f.metadata["tag"])] = check
            continue
        minimum += size
        if isinstance(check, _VFixed) and steps and isinstance(steps[-1], _VFixed):
            steps[-1] = _VFixed(steps[-1].size + check.size)  # consecutive fixed fields: one bound check
        else:
            steps.append(check)
    if not flexible and all(isinstance(step, _VFixed) for step in steps):
        return _VFixed(minimum), max(minimum, 1)  # arrays of these need no walk, only count * size

    def validate(buf: Buf, offset: int, end: int) -> int:
        for step in steps:
            offset = step(buf, offset, end)
        if not flexible:
            return offset
        if offset < end and buf[offset] == 0:  # the usual empty tag section
            return offset + 1
        count, offset = _uvarint(buf, offset, end)
        if count * 2 > end - offset:
            raise MalformedError(f"{count} tagged fields cannot fit in {end - offset} bytes")
        for _ in range(count):
            tag, offset = _uvarint(buf, offset, end)
            size, offset = _uvarint(buf, offset, end)
            if offset + size > end:
                raise MalformedError("tagged field past end of frame")
            check = tagged.get(tag)
            if check is None:  # a field the broker may know and read, unseen by the proxy: never forwarded unread
                raise MalformedError(f"unknown tagged field {tag} in {cls.__qualname__}")
            check(buf, offset, offset + size)
            offset += size
        return offset

    return validate, max(minimum, 1)


def validate(cls: type, buf: Buf, offset: int) -> int:
    """The offset after one valid `cls` at `offset`; MalformedError if kio must not decode it."""
    return entity_validator(cls)[0](buf, offset, len(buf))
