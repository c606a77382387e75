"""What a message class says about itself: one place that reads kio's dataclasses (sans-I/O).

kio generates one frozen dataclass per API version and nested struct; fields differ between versions and
arrays are typed `tuple[Item, ...]` (nullable ones `tuple[...] | None`). Stages that build or edit messages
ask here instead of reading type hints themselves: the item type of an array field, optional unwrapping,
an entity built from the values its version has, an error set on an item and everything nested in it.
Each answer about a class is computed once per process.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import typing
import uuid
from types import NoneType, UnionType
from typing import Any

from kio.schema.errors import ErrorCode

from ..errors import CodecError

hints = functools.cache(typing.get_type_hints)  # introspection cost ~100 µs per class: once per process


def unwrap(tp: Any) -> tuple[Any, bool]:
    """(inner type, nullable) for `X | None`; (tp, False) otherwise."""
    if typing.get_origin(tp) in (UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        return args[0], True
    return tp, False


@functools.cache
def field_names(cls: type) -> frozenset[str]:
    """The fields this version of the message has."""
    return frozenset(f.name for f in dataclasses.fields(cls))


@functools.cache
def item_type(cls: type, field_name: str) -> Any:
    """The item type of an array field (nullable array and nullable items unwrapped); a field that is no
    array gives its own type, unwrapped."""
    tp, _ = unwrap(hints(cls)[field_name])
    if typing.get_origin(tp) is tuple:
        tp, _ = unwrap(typing.get_args(tp)[0])
    return tp


def zero(tp: Any) -> Any:
    """Kafka's default of a field of this type: null, empty, zero."""
    tp_origin = typing.get_origin(tp)
    if tp_origin in (UnionType, typing.Union):
        return None  # nullable: null is always valid
    if tp_origin is tuple:
        return ()
    if dataclasses.is_dataclass(tp):
        return empty(tp)  # type: ignore[arg-type]
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


def empty(cls: type, **overrides: Any) -> Any:
    """An entity of `cls`: the given values, every other field without a default at its zero."""
    types = hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in overrides:
            kwargs[f.name] = overrides[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = zero(types[f.name])
    return cls(**kwargs)


def build(cls: type, **values: Any) -> Any:
    """An entity of `cls` from the values its version has (the others are dropped: fields differ between
    versions), the rest at their zero."""
    names = field_names(cls)
    return empty(cls, **{k: v for k, v in values.items() if k in names})


def with_error(item: Any, error: int, message: str | None = None) -> Any:
    """An item, and every item nested in it (e.g. DeleteRecords' partitions), answered with `error`; its
    `error_message`, where the version has one, set to `message`."""
    if not dataclasses.is_dataclass(item):
        return item
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(item):
        value = getattr(item, f.name)
        if f.name == "error_code":
            changes[f.name] = ErrorCode(error)
        elif f.name == "error_message":
            changes[f.name] = message
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            changes[f.name] = tuple(with_error(v, error, message) for v in value)
    return dataclasses.replace(item, **changes)  # type: ignore[type-var]
