"""Where the identifiers are: derived from the entity types Kafka's schemas annotate (as kio types).

kio types annotated fields as `TopicName`, `GroupId` and `TransactionalId`; topic ids are uuid
fields named `topic_id`. `identifier_paths(cls)` lists every such field of a message class as a
path ("topics[].name", "group_id", "group_ids[]" for an array of strings, "assignment.x" for a
nested struct) with its kind. Unannotated identifiers (coordinator keys, config resource names,
consumer-protocol bytes, regexes) are declared by hand in rewrite_rules/tenant.yaml.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
import uuid

from kio.schema.types import GroupId, TopicName, TransactionalId

from ..protocol.entities import unwrap

KINDS = {TopicName: "topic", GroupId: "group", TransactionalId: "txn"}


def _kind(tp: typing.Any, name: str) -> str | None:
    if tp in KINDS:
        return KINDS[tp]
    if tp is uuid.UUID and name.endswith("topic_id"):
        return "topic_id"
    return None


@functools.cache
def identifier_paths(cls: type) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = unwrap(hints[f.name])[0]
        if typing.get_origin(tp) is tuple:
            inner = unwrap(typing.get_args(tp)[0])[0]
            if dataclasses.is_dataclass(inner):
                out += [(f"{f.name}[].{p}", k) for p, k in identifier_paths(inner)]  # type: ignore[arg-type]
            elif (kind := _kind(inner, f.name.rstrip("s"))) is not None:
                out.append((f"{f.name}[]", kind))
        elif dataclasses.is_dataclass(tp):
            out += [(f"{f.name}.{p}", k) for p, k in identifier_paths(tp)]  # type: ignore[arg-type]
        elif (kind := _kind(tp, f.name)) is not None:
            out.append((f.name, kind))
    return tuple(out)


DROP = object()  # returned by a transform function to remove an array element


def apply_path(obj: typing.Any, path: str, fn: typing.Callable[[typing.Any], typing.Any]) -> typing.Any:
    """`obj` with the value(s) at `path` replaced by fn(value); missing fields (other versions) are skipped."""
    if obj is None:
        return None
    head, dot, rest = path.partition(".")
    is_array = head.endswith("[]")
    name = head[:-2] if is_array else head
    if not hasattr(obj, name):
        return obj
    value = getattr(obj, name)
    if value is None:
        return obj
    if is_array:
        items = []
        for item in value:
            new = apply_path(item, rest, fn) if dot else fn(item)
            if new is not DROP:
                items.append(new)
        new_value: typing.Any = tuple(items)
    else:
        new_value = apply_path(value, rest, fn) if dot else fn(value)
    if new_value is DROP:
        new_value = None
    return dataclasses.replace(obj, **{name: new_value})
