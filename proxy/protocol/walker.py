"""Walk a message body without decoding it, to find where its fields start and end.

Used for bodies that carry record batches (Produce, Fetch, ShareFetch): the proxy must reach a
field that sits after the records (e.g. the KIP-951 ``NodeEndpoints`` tagged field at the end of
a Fetch response) without decoding or copying the records. Each kio schema class is read once into a
plan (plans.py), run here by a chain of closures (the pure path, the reference) or by the compiled
walker (native.py); each record set is skipped by its length prefix.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from . import native, plans
from .plans import Node
from .primitives import MalformedError, TruncatedError, read_tagged_fields, read_uvarint, skip_tagged_fields

Buf = memoryview | bytes
Skip = Callable[[Buf, int], int]


def _check(buf: Buf, offset: int) -> int:
    if offset > len(buf):
        raise TruncatedError("field past end of buffer")
    return offset


class _Fixed:
    """Skips a fixed number of bytes; consecutive fixed-size fields merge into one step (plans.merge_fixed)."""

    __slots__ = ("size",)

    def __init__(self, size: int):
        self.size = size

    def __call__(self, buf: Buf, offset: int) -> int:
        offset += self.size
        if offset > len(buf):
            raise TruncatedError("field past end of buffer")
        return offset


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


def _struct(flexible: bool, steps: list[Skip]) -> Skip:
    def skip(buf: Buf, offset: int) -> int:
        for step in steps:
            offset = step(buf, offset)
        if flexible:
            # Almost every struct has an empty tag section: a single zero byte.
            offset = offset + 1 if offset < len(buf) and buf[offset] == 0 else skip_tagged_fields(buf, offset)
        return offset

    return skip


def _nullable_struct(inner_skip: Skip) -> Skip:
    # Nullable structs carry an int8 marker: -1 null, 1 present.
    def skip(buf: Buf, offset: int) -> int:
        marker = buf[_check(buf, offset + 1) - 1]
        offset += 1
        return offset if marker == 0xFF else inner_skip(buf, offset)

    return skip


def _empty_list(buf: Buf, offset: int) -> int:
    """A compact array skipped when it is (count 1) or null (0); else the walk stops at its count."""
    count, after = read_uvarint(buf, offset)
    return after if count <= 1 else offset


@functools.cache
def pure_skipper(node: Node) -> Skip:
    """The pure-Python runner of a lenient plan node (the reference)."""
    match node:
        case ("fixed", size):
            return _Fixed(size)
        case ("sized", flexible, prefix):
            return _length_prefixed(flexible, prefix)
        case ("array", flexible, item):
            return _array(flexible, pure_skipper(item))
        case ("struct", flexible, steps):
            return _struct(flexible, [pure_skipper(step) for step in steps])
        case ("nstruct", inner):
            return _nullable_struct(pure_skipper(inner))
        case ("empty",):
            return _empty_list
    raise ValueError(f"not a skip plan: {node[0]!r}")


@functools.cache
def skipper(node: Node) -> Skip:
    """The runner of a lenient plan node: compiled where vcproxy_native is built, else pure."""
    return native.plan(node).skip if native.COMPILED else pure_skipper(node)


def entity_skipper(cls: type) -> Skip:
    return skipper(plans.skip_entity(cls))


@functools.cache
def _top_level_steps(cls: type) -> tuple[tuple[str, Skip], ...]:
    return tuple((name, skipper(node)) for name, node in plans.top_level(cls))


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


@functools.cache
def _fields_skipper(cls: type) -> Skip:
    _, _, steps = plans.skip_entity(cls)
    return skipper(("struct", False, steps))  # the regular fields only: no tagged section after them


@functools.cache
def regular_names(cls: type) -> frozenset[str]:
    return frozenset(name for name, _ in plans.top_level(cls))


def tags_start(cls: type, buf: Buf, offset: int) -> int:
    """Where a flexible body's tagged section begins: one skip over its regular fields, for a caller that
    wants only a tagged field and is usually told "none" by the section's first byte (a zero count)."""
    return _fields_skipper(cls)(buf, offset)


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


def _v_nullable_struct(inner_check: Check) -> Check:
    def check(buf: Buf, offset: int, end: int) -> int:
        if offset >= end:
            raise MalformedError("struct marker past end of frame")
        marker = buf[offset]
        return offset + 1 if marker == 0xFF else inner_check(buf, offset + 1, end)

    return check


def _v_struct(flexible: bool, steps: list[Check], tagged: dict[int, Check], name: str) -> Check:
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
                raise MalformedError(f"unknown tagged field {tag} in {name}")
            check(buf, offset, offset + size)
            offset += size
        return offset

    return validate


@functools.cache
def pure_checker(node: Node) -> Check:
    """The pure-Python runner of a strict plan node (the reference)."""
    match node:
        case ("vfixed", size):
            return _VFixed(size)
        case ("vsized", flexible, size, nullable, limit, what):
            return _v_sized(flexible, size, nullable, limit, what)
        case ("varray", flexible, nullable, item, item_min):
            return _v_array(flexible, nullable, pure_checker(item), item_min)
        case ("vstruct", flexible, steps, tagged, name):
            checks = [pure_checker(step) for step in steps]
            return _v_struct(flexible, checks, {tag: pure_checker(n) for tag, n in tagged}, name)
        case ("vnstruct", inner):
            return _v_nullable_struct(pure_checker(inner))
    raise ValueError(f"not a validation plan: {node[0]!r}")


@functools.cache
def checker(node: Node) -> Check:
    """The runner of a strict plan node: compiled where vcproxy_native is built, else pure."""
    return native.plan(node).validate if native.COMPILED else pure_checker(node)


@functools.cache
def entity_validator(cls: type) -> tuple[Check, int]:
    """(check, minimum wire size) for one entity of `cls`: raises MalformedError for a body kio must not see."""
    node, minimum = plans.check_entity(cls)
    return checker(node), minimum


def validate(cls: type, buf: Buf, offset: int) -> int:
    """The offset after one valid `cls` at `offset`; MalformedError if kio must not decode it."""
    return entity_validator(cls)[0](buf, offset, len(buf))
