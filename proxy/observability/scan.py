"""Facts about a message body for telemetry, read without decoding it.

One walk per body collects what spans and metrics need: the non-zero error codes at any depth, the
top-level throttle time, the topics the body names (names, or ids where the API uses topic ids) and
the record bytes under each topic (Produce requests, Fetch/ShareFetch responses). Record sets are
skipped by their length prefix, never read or copied.

The walk is generated once per kio schema class as Python source (one function, loops inlined, no
call per field) from the same field metadata plans.py reads, so it costs a fraction of a decode.
Tagged fields are skipped, not read.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
import uuid
from collections.abc import Callable

from kio.schema.types import TopicName

from ..protocol.entities import unwrap
from ..protocol.plans import FIXED, regular_fields, top_error_offset
from ..protocol.primitives import INT16, INT32, read_uvarint, skip_tagged_fields
from ..protocol.walker import Buf

TopicKey = str | uuid.UUID
_ZERO_UUID_BYTES = bytes(16)


@dataclasses.dataclass(slots=True)
class Facts:
    error_codes: list[int] = dataclasses.field(default_factory=list)  # non-zero, in wire order, repeats kept
    throttle_ms: int | None = None
    topics: dict[TopicKey, int] = dataclasses.field(default_factory=dict)  # name or id -> record bytes
    named_ids: list[tuple[str, uuid.UUID]] = dataclasses.field(default_factory=list)  # (name, id) side by side
    current: TopicKey | None = None  # the topic records are counted against
    top_error: int | None = None  # the top-level error code alone (set by `top_error`-only reads)


Scanner = Callable[[Buf, int, Facts], int]


def scan(cls: type, buf: Buf, body_offset: int, elided: bool = False) -> Facts:
    """The facts of the body of type `cls` starting at `body_offset`; raises if it is malformed. `elided`: a sketch
    (the forwarder's copy of an answer for its span: the bytes of each bytes or records field left out, their length
    kept), whose record bytes are counted from those lengths."""
    facts = Facts()
    end = compile_scanner(cls, elided)(buf, body_offset, facts)
    if end > len(buf):
        raise ValueError(f"{cls.__qualname__} body ends past the frame")
    return facts


def top_error(cls: type, buf: Buf, body_offset: int) -> Facts:
    """Only the top-level error code: what a large body costs when nothing else is wanted."""
    offset = top_error_offset(cls)
    code = INT16.unpack_from(buf, body_offset + offset)[0] if offset is not None else 0
    return Facts(error_codes=[code] if code else [], top_error=code)


# -- code generation ----------------------------------------------------------------------------------


def _is_topic_name(f: dataclasses.Field) -> bool:
    return unwrap(f.type)[0] is TopicName and f.metadata.get("kafka_type") == "string"


def _is_topic_id(f: dataclasses.Field) -> bool:
    return f.metadata.get("kafka_type") == "uuid" and f.name.endswith("topic_id")


def _array_item(f: dataclasses.Field) -> typing.Any:
    tp, _ = unwrap(f.type)
    if typing.get_origin(tp) is tuple:
        return unwrap(typing.get_args(tp)[0])[0]
    return None


class _Gen:
    def __init__(self, elided: bool = False) -> None:
        self.elided = elided  # bytes and records fields have their length and not their bytes (`scan`)
        self.lines: list[str] = []
        self.indent = 1
        self.pending_skip = 0  # fixed bytes to skip, emitted lazily so runs merge into one add
        self.names = 0

    def var(self, stem: str) -> str:
        self.names += 1
        return f"{stem}{self.names}"

    def emit(self, line: str) -> None:
        self.flush()
        self.lines.append("    " * self.indent + line)

    def flush(self) -> None:
        if self.pending_skip:
            skip, self.pending_skip = self.pending_skip, 0
            self.lines.append("    " * self.indent + f"o += {skip}")

    def block(self) -> _Block:
        return _Block(self)

    def uvarint(self, target: str) -> None:
        self.emit(f"{target} = b[o]")
        self.emit(f"if {target} < 128:")
        self.emit("    o += 1")
        self.emit("else:")
        self.emit(f"    {target}, o = _uv(b, o)")

    def length(self, target: str, flexible: bool, prefix: int) -> None:
        """A length (strings: int16, bytes/records/arrays: int32; compact: uvarint - 1); -1 is null."""
        if flexible:
            self.uvarint(target)
            self.emit(f"{target} -= 1")
        else:
            self.emit(f"{target} = {'_i16' if prefix == 2 else '_i32'}(b, o)[0]")
            self.emit(f"o += {prefix}")

    def tags(self) -> None:
        self.emit("if b[o] == 0:")
        self.emit("    o += 1")
        self.emit("else:")
        self.emit("    o = _tags(b, o)")


class _Block:
    def __init__(self, gen: _Gen):
        self.gen = gen

    def __enter__(self) -> None:
        self.gen.flush()
        self.gen.indent += 1

    def __exit__(self, *exc: object) -> None:
        self.gen.flush()
        self.gen.indent -= 1


def _scalar(gen: _Gen, kafka_type: str | None, flexible: bool) -> None:
    """Skip one scalar."""
    if kafka_type in FIXED:
        gen.pending_skip += FIXED[kafka_type]
        return
    prefix = 2 if kafka_type == "string" else 4
    if kafka_type not in ("string", "bytes", "records"):
        raise ValueError(f"no scanner for kafka_type {kafka_type!r}")
    n = gen.var("n")
    gen.length(n, flexible, prefix)
    if prefix == 4 and gen.elided:
        return
    gen.emit(f"if {n} > 0:")
    gen.emit(f"    o += {n}")


def _read_string(gen: _Gen, target: str, flexible: bool) -> None:
    n = gen.var("n")
    gen.length(n, flexible, 2)
    gen.emit(f"if {n} >= 0:")
    gen.emit(f"    {target} = bytes(b[o:o + {n}]).decode('utf-8', 'replace')")
    gen.emit(f"    o += {n}")
    gen.emit("else:")
    gen.emit(f"    {target} = None")


def _set_topic(gen: _Gen, value: str) -> None:
    gen.emit(f"f.current = {value}")
    gen.emit(f"if {value} not in f.topics:")
    gen.emit(f"    f.topics[{value}] = 0")


def _struct(gen: _Gen, cls: type, top: bool) -> None:
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    fields = regular_fields(cls)
    has_name = any(_is_topic_name(f) for f in fields)
    has_id = any(_is_topic_id(f) for f in fields)
    paired = has_name and has_id
    scoped = has_name or has_id
    outer = name_var = id_var = ""
    if scoped:
        outer = gen.var("outer")
        gen.emit(f"{outer} = f.current")
    if paired:
        name_var, id_var = gen.var("name"), gen.var("tid")
        gen.emit(f"{name_var} = {id_var} = None")
    for f in fields:
        kafka_type = f.metadata.get("kafka_type")
        item = _array_item(f)
        nested, nullable = unwrap(f.type)
        if kafka_type == "error_code":
            c = gen.var("c")
            gen.emit(f"{c} = _i16(b, o)[0]")
            gen.emit("o += 2")
            gen.emit(f"if {c}:")
            gen.emit(f"    f.error_codes.append({c})")
        elif top and f.name.startswith("throttle_time") and kafka_type in ("int32", "timedelta_i32"):
            gen.emit("f.throttle_ms = _i32(b, o)[0]")
            gen.emit("o += 4")
        elif _is_topic_name(f):
            s = gen.var("s")
            _read_string(gen, s, flexible)
            gen.emit(f"if {s} is not None:")
            with gen.block():
                _set_topic(gen, s)
                if paired:
                    gen.emit(f"{name_var} = {s}")
        elif _is_topic_id(f):
            raw = gen.var("raw")
            gen.emit(f"{raw} = bytes(b[o:o + 16])")
            gen.emit("o += 16")
            gen.emit(f"if {raw} != _ZERO:")
            with gen.block():
                if paired:
                    gen.emit(f"{id_var} = _UUID(bytes={raw})")
                else:
                    u = gen.var("u")
                    gen.emit(f"{u} = _UUID(bytes={raw})")
                    _set_topic(gen, u)
        elif kafka_type == "records":
            n = gen.var("n")
            gen.length(n, flexible, 4)
            gen.emit(f"if {n} > 0:")
            if not gen.elided:
                gen.emit(f"    o += {n}")
            gen.emit("    if f.current is not None:")
            gen.emit(f"        f.topics[f.current] += {n}")
        elif item is not None:
            count = gen.var("count")
            gen.length(count, flexible, 4)
            # Every item takes a byte at least: a count the rest of the frame cannot hold is refused here, before a
            # loop over skips that read nothing would run for billions of items (a hostile frame's array count).
            gen.emit(f"if {count} > len(b) - o:")
            gen.emit(f"    raise ValueError(f'array of {{{count}}} items past the end of the frame')")
            gen.emit(f"for _ in range({count}):")
            with gen.block():
                if item is TopicName:
                    s = gen.var("s")
                    _read_string(gen, s, flexible)
                    gen.emit(f"if {s} is not None:")
                    with gen.block():
                        _set_topic(gen, s)
                elif dataclasses.is_dataclass(item):
                    _struct(gen, item, False)  # type: ignore[arg-type]
                else:
                    _scalar(gen, kafka_type, flexible)
        elif dataclasses.is_dataclass(nested):
            if nullable:
                gen.emit("if b[o] == 255:")
                gen.emit("    o += 1")
                gen.emit("else:")
                with gen.block():
                    gen.pending_skip += 1
                    _struct(gen, nested, False)  # type: ignore[arg-type]
            else:
                _struct(gen, nested, False)  # type: ignore[arg-type]
        else:
            _scalar(gen, kafka_type, flexible)
    if flexible:
        gen.tags()
    if paired:
        gen.emit(f"if {name_var} is not None and {id_var} is not None:")
        gen.emit(f"    f.named_ids.append(({name_var}, {id_var}))")
        gen.emit(f"elif {id_var} is not None:")
        with gen.block():
            _set_topic(gen, id_var)
    if scoped:
        gen.emit(f"f.current = {outer}")


@functools.cache
def compile_scanner(cls: type, elided: bool = False) -> Scanner:
    gen = _Gen(elided)
    _struct(gen, cls, True)
    gen.emit("return o")
    source = "def scanner(b, o, f):\n" + "\n".join(gen.lines) + "\n"
    namespace: dict[str, typing.Any] = {
        "_i16": INT16.unpack_from,
        "_i32": INT32.unpack_from,
        "_uv": read_uvarint,
        "_tags": skip_tagged_fields,
        "_UUID": uuid.UUID,
        "_ZERO": _ZERO_UUID_BYTES,
    }
    exec(compile(source, f"<scanner {cls.__module__}.{cls.__qualname__}>", "exec"), namespace)
    scanner: Scanner = namespace["scanner"]
    scanner.__doc__ = source  # for debugging: print(compile_scanner(cls).__doc__)
    return scanner
