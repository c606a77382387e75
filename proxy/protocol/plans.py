"""What a walk of one kio schema class does, as data: a plan read once per class.

Two backends run a plan: the closures of walker.py and splice.py (pure Python, the reference) and
``vcproxy_native.Plan`` (compiled from native/, proxy/protocol/native.py). Reading the schema here,
once, is what keeps the two from reading a class differently. Nodes are tuples: hashable, so each
backend builds one runner per node, and handed to Rust as they are.

Lenient skips (the layout and splice walks: a short buffer is a TruncatedError)::

    ("fixed", size)  ("sized", flexible, prefix_bytes)  ("array", flexible, item)
    ("struct", flexible, steps)  ("nstruct", inner)          # a nullable struct: int8 marker first
    ("empty",)   # a compact array skipped when empty or null; else the walk stops at its count

Strict checks (before kio decodes: bounded by the frame's end, everything a MalformedError)::

    ("vfixed", size)  ("vsized", flexible, prefix_bytes, nullable, limit | None, what)
    ("varray", flexible, nullable, item, item_min)  ("vstruct", flexible, steps, ((tag, node), ...), name)
    ("vnstruct", inner)

Splice walks (each captured field goes through the translation; other fields are lenient skips)::

    ("string", flexible, kind)  ("uuid", kind)  ("parray", flexible, item)  ("pstruct", flexible, steps)

The forwarder's count of an answer's error codes (the metrics' reading, proxy/observability/scan.py)::

    ("error",)  in ("parray", ...) and ("pstruct", ...) as above
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable

from .entities import unwrap

Node = tuple  # see the module docstring
Paths = frozenset[tuple[str, str]]  # {(path, kind)}: "name" or "array[].field" chains

MAX_STRING = 0x7FFF  # Kafka's readers refuse longer strings, compact ones included

FIXED = {
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


# -- lenient skips ------------------------------------------------------------------------------------


def skip_scalar(kafka_type: str | None, flexible: bool) -> Node:
    if kafka_type in FIXED:
        return ("fixed", FIXED[kafka_type])
    if kafka_type == "string":
        return ("sized", flexible, 2)
    if kafka_type in ("bytes", "records"):
        return ("sized", flexible, 4)
    raise ValueError(f"no skipper for kafka_type {kafka_type!r}")


def skip_field(field: dataclasses.Field, flexible: bool) -> Node:
    kafka_type = field.metadata.get("kafka_type")
    tp, nullable = unwrap(field.type)
    if typing.get_origin(tp) is tuple:
        inner, _ = unwrap(typing.get_args(tp)[0])
        if dataclasses.is_dataclass(inner):
            return ("array", flexible, skip_entity(inner))  # type: ignore[arg-type]
        return ("array", flexible, skip_scalar(kafka_type, flexible))
    if dataclasses.is_dataclass(tp):
        inner_node = skip_entity(tp)  # type: ignore[arg-type]
        return ("nstruct", inner_node) if nullable else inner_node
    return skip_scalar(kafka_type, flexible)


def merge_fixed(steps: list[Node], kind: str) -> list[Node]:
    """Consecutive fixed-size fields as one step: one bound check instead of several."""
    out: list[Node] = []
    for step in steps:
        if step[0] == kind and out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + step[1])
        else:
            out.append(step)
    return out


@functools.cache
def skip_entity(cls: type) -> Node:
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    return ("struct", flexible, tuple(merge_fixed([skip_field(f, flexible) for f in regular_fields(cls)], "fixed")))


@functools.cache
def but_last_empty(cls: type) -> Node:
    """A flexible answer's regular fields but the last, which must be an empty (or null) compact array: a walk that
    ends at the tagged section when it is, and at the array's count (not zero) when it is not. The forwarder's check
    of a list of broker endpoints in a regular field (KIP-932's node_endpoints, proxy/core/forward_table.py)."""
    fields = regular_fields(cls)
    steps = merge_fixed([skip_field(f, True) for f in fields[:-1]], "fixed")
    return ("struct", False, (*steps, ("empty",)))


@functools.cache
def top_level(cls: type) -> tuple[tuple[str, Node], ...]:
    """(name, skip) per top-level field, for a layout of where each one sits."""
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    return tuple((f.name, skip_field(f, flexible)) for f in regular_fields(cls))


# -- strict checks ------------------------------------------------------------------------------------


def check_scalar(kafka_type: str | None, flexible: bool, nullable: bool) -> tuple[Node, int]:
    """(node, minimum wire size)."""
    if kafka_type in FIXED:
        return ("vfixed", FIXED[kafka_type]), FIXED[kafka_type]
    minimum = 1 if flexible else 2
    if kafka_type == "string":
        return ("vsized", flexible, 2, nullable, MAX_STRING, "string"), minimum
    if kafka_type in ("bytes", "records"):
        return ("vsized", flexible, 4, nullable, None, kafka_type), 1 if flexible else 4
    raise ValueError(f"no validator for kafka_type {kafka_type!r}")


def check_field(tp: object, kafka_type: str | None, flexible: bool) -> tuple[Node, int]:
    """The check for a field of type `tp` and its minimum wire size."""
    tp, nullable = unwrap(tp)
    if typing.get_origin(tp) is tuple:
        inner, inner_nullable = unwrap(typing.get_args(tp)[0])
        if dataclasses.is_dataclass(inner):
            item, item_min = check_entity(inner)  # type: ignore[arg-type]
        else:
            item, item_min = check_scalar(kafka_type, flexible, inner_nullable)
        return ("varray", flexible, nullable, item, max(item_min, 1)), 1 if flexible else 4
    if dataclasses.is_dataclass(tp):
        inner_node, inner_min = check_entity(tp)  # type: ignore[arg-type]
        return (("vnstruct", inner_node), 1) if nullable else (inner_node, inner_min)
    return check_scalar(kafka_type, flexible, nullable)


@functools.cache
def check_entity(cls: type) -> tuple[Node, int]:
    """(node, minimum wire size) for one entity of `cls`."""
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    hints = typing.get_type_hints(cls)
    steps: list[Node] = []
    tagged: list[tuple[int, Node]] = []
    minimum = 1 if flexible else 0
    for f in dataclasses.fields(cls):
        node, size = check_field(hints[f.name], f.metadata.get("kafka_type"), flexible)
        if "tag" in f.metadata:
            tagged.append((int(f.metadata["tag"]), node))
            continue
        minimum += size
        steps.append(node)
    steps = merge_fixed(steps, "vfixed")
    if not flexible and all(step[0] == "vfixed" for step in steps):
        return ("vfixed", minimum), max(minimum, 1)  # arrays of these need no walk, only count * size
    return ("vstruct", flexible, tuple(steps), tuple(tagged), cls.__qualname__), max(minimum, 1)


# -- splice walks -------------------------------------------------------------------------------------


@functools.cache
def splice_entity(cls: type, paths: Paths) -> Node:
    """The walk of `cls` that passes each field at `paths` through the translation."""
    for path, _ in paths:
        _check_path(cls, path)
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    here = {path: kind for path, kind in paths if "[]." not in path}
    steps: list[Node] = []
    for f in regular_fields(cls):
        if f.name in here:
            is_uuid = f.metadata.get("kafka_type") == "uuid"
            steps.append(("uuid", here[f.name]) if is_uuid else ("string", flexible, here[f.name]))
            continue
        nested = frozenset((p[len(f.name) + 3 :], k) for p, k in paths if p.startswith(f"{f.name}[]."))
        if nested:
            inner, _ = unwrap(typing.get_args(unwrap(f.type)[0])[0])
            steps.append(("parray", flexible, splice_entity(inner, nested)))  # type: ignore[arg-type]
        else:
            steps.append(skip_field(f, flexible))
    return ("pstruct", flexible, tuple(steps))


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


# -- error codes ----------------------------------------------------------------------------------------


@functools.cache
def top_error_offset(cls: type) -> int | None:
    """Where the top-level error code sits in a body of type `cls`, if only fixed-width fields precede
    it (Fetch, ShareFetch: after the throttle time); else None."""
    return fixed_offset(cls, lambda f: f.metadata.get("kafka_type") == "error_code")


def field_offset(cls: type, name: str) -> int | None:
    """Where the regular field `name` sits in a body of type `cls`, if only fixed-width fields precede it; else
    None (and None when it has no such field)."""
    return fixed_offset(cls, lambda f: f.name == name)


def fixed_offset(cls: type, found: Callable[[dataclasses.Field], bool]) -> int | None:
    """Where the first regular field `found` accepts sits in a body of type `cls`, if only fixed-width fields
    precede it; else None."""
    offset = 0
    for f in regular_fields(cls):
        kafka_type = f.metadata.get("kafka_type")
        if found(f):
            return offset
        if kafka_type not in FIXED:
            return None
        offset += FIXED[kafka_type]
    return None


def _errors_in(cls: type) -> bool:
    return errors_entity(cls) != skip_entity(cls)


@functools.cache
def errors_entity(cls: type) -> Node:
    """The walk of `cls` that reads every error code in its regular fields, at any depth (tagged fields are
    skipped, as the metrics' scan skips them); a plain skip where there is none. A nullable struct with error
    codes in it has no such walk (ValueError): no response has one."""
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    steps: list[Node] = []
    found = False
    for f in regular_fields(cls):
        tp, nullable = unwrap(f.type)
        inner = unwrap(typing.get_args(tp)[0])[0] if typing.get_origin(tp) is tuple else None
        if f.metadata.get("kafka_type") == "error_code" and inner is None:
            steps.append(("error",))
            found = True
        elif dataclasses.is_dataclass(inner) and _errors_in(inner):  # type: ignore[arg-type]
            steps.append(("parray", flexible, errors_entity(inner)))  # type: ignore[arg-type]
            found = True
        elif inner is None and dataclasses.is_dataclass(tp) and _errors_in(tp):  # type: ignore[arg-type]
            if nullable:
                raise ValueError(f"{cls.__qualname__}.{f.name}: error codes in a nullable struct")
            steps.append(errors_entity(tp))  # type: ignore[arg-type]
            found = True
        else:
            steps.append(skip_field(f, flexible))
    if not found:
        return skip_entity(cls)
    return ("pstruct", flexible, tuple(merge_fixed(steps, "fixed")))
