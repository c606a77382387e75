"""Turns Kafka-style JSON message definitions into kio-shaped classes: the management RPCs' schemas.

The definitions (proxy/protocol/messages/*.json) are written as Kafka writes its own
(clients/src/main/resources/common/message/*.json: `validVersions`, `flexibleVersions`, `versions`,
`nullableVersions`, `taggedVersions`/`tag`, `default`, nested `fields`); the classes come out shaped as kio
generates Kafka's (frozen dataclasses with `kafka_type` and `tag` metadata), so proxy.protocol.codec reads,
validates and writes them exactly like Kafka's own messages. kio's own generator is not in its PyPI package
and writes into kio's package tree, hence this small one.

Run `make messages` (`python -m proxy.protocol.message_gen`) after editing a definition and check in the
output, proxy/protocol/management_messages.py; tests/unit/test_management_messages.py fails while it differs.
The API key in each definition must be the catalogue's (proxy/protocol/apikey.py) for the message's name.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import InternalFault

HERE = Path(__file__).parent
DEFINITIONS = HERE / "messages"
OUTPUT = HERE / "management_messages.py"

_INTS = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint16": "u16"}
_PYTHON = {**_INTS, "bool": "bool", "string": "str", "bytes": "bytes", "float64": "f64"}


class DefinitionError(InternalFault, ValueError):
    """A definition the generator cannot turn into classes: vcproxy's own fault, found at build time."""


@dataclass(frozen=True)
class Versions:
    low: int
    high: int | None  # None: no upper bound ("3+")

    @classmethod
    def parse(cls, text: str | None, where: str) -> Versions | None:
        if text is None or text == "none":
            return None
        if m := re.fullmatch(r"(\d+)\+", text):
            return cls(int(m[1]), None)
        if m := re.fullmatch(r"(\d+)(?:-(\d+))?", text):
            return cls(int(m[1]), int(m[2] or m[1]))
        raise DefinitionError(f"{where}: bad versions {text!r}")

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)


def snake(name: str) -> str:
    """Kafka's field name as kio spells it: ThrottleTimeMs, throttleTimeMs -> throttle_time_ms."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def api_key_member(message_name: str) -> str:
    """CreateVirtualClustersRequest -> CREATE_VIRTUAL_CLUSTERS (the catalogue's name of the key)."""
    return snake(re.sub(r"(Request|Response)$", "", message_name)).upper()


def load(path: Path) -> dict:
    """A definition: JSON with Kafka's whole-line `//` comments."""
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
    return json.loads(text)


def _in(versions: Versions | None, version: int) -> bool:
    return versions is not None and version in versions


class _Writer:
    def __init__(self, definition: dict, where: str, api_keys: dict[str, int]) -> None:
        self.d, self.where = definition, where
        self.name = definition["name"]
        kind = definition["type"]
        if kind not in ("request", "response"):
            raise DefinitionError(f"{where}: type {kind!r} is not request or response")
        self.request = kind == "request"
        member = api_key_member(self.name)
        if api_keys.get(member) != definition["apiKey"]:
            raise DefinitionError(f"{where}: apiKey {definition['apiKey']} is not ApiKey.{member}")
        self.member = member
        valid = Versions.parse(definition["validVersions"], where)
        if valid is None or valid.high is None:
            raise DefinitionError(f"{where}: validVersions must be a closed range")
        self.versions = range(valid.low, valid.high + 1)
        self.flexible = Versions.parse(definition.get("flexibleVersions"), where)
        self.headers: set[str] = set()
        self.primitives: set[str] = set()

    def class_name(self, name: str, version: int) -> str:
        return name if len(self.versions) == 1 else f"{name}V{version}"

    def header(self, version: int) -> str:
        flexible = _in(self.flexible, version)
        if self.request:
            header = "RequestHeaderV2" if flexible else "RequestHeaderV1"
        else:
            header = "ResponseHeaderV1" if flexible else "ResponseHeaderV0"
        self.headers.add(header)
        return header

    def classes(self, version: int) -> list[str]:
        out: list[str] = []
        self._entity(self.name, self.d.get("about"), self.d["fields"], version, True, out)
        return out

    def _entity(self, name: str, about: str | None, fields: list, version: int, top: bool, out: list[str]) -> str:
        cls = self.class_name(name, version)
        header = self.header(version)
        self.primitives.add("i16")
        lines = ["@dataclass(frozen=True, slots=True, kw_only=True)", f"class {cls}:"]
        if about:
            lines.append(f'    """{_doc(about, self.where)}"""')
            lines.append("")
        kind = ("request" if self.request else "response") if top else "nested"
        lines += [
            f"    __type__: ClassVar = EntityType.{kind}",
            f"    __version__: ClassVar[i16] = i16({version})",
            f"    __flexible__: ClassVar[bool] = {_in(self.flexible, version)}",
            f"    __api_key__: ClassVar[i16] = i16(ApiKey.{self.member})",
            f"    __header_schema__: ClassVar[type[{header}]] = {header}",
        ]
        tags: set[int] = set()
        for f in fields:
            where = f"{self.where}: {name}.{f['name']}"
            if not _in(Versions.parse(f.get("versions"), where), version):
                continue
            lines += self._field(f, version, where, tags, out)
        out.append("\n".join(lines))
        return cls

    def _field(self, f: dict, version: int, where: str, tags: set[int], out: list[str]) -> list[str]:
        kafka = f["type"]
        array = kafka.startswith("[]")
        item = kafka[2:] if array else kafka
        nullable = _in(Versions.parse(f.get("nullableVersions"), where), version)
        metadata: dict[str, object] = {}
        if "fields" in f:
            if not array:
                raise DefinitionError(f"{where}: only arrays of structs are supported")
            item_type = self._entity(item, None, f["fields"], version, False, out)
        elif item in _PYTHON:
            item_type = _PYTHON[item]
            metadata["kafka_type"] = item
            if item in _INTS or item == "float64":
                self.primitives.add(item_type)
        else:
            raise DefinitionError(f"{where}: type {item!r} is not supported")
        if _in(Versions.parse(f.get("taggedVersions"), where), version):
            tag = int(f["tag"])
            if tag in tags:
                raise DefinitionError(f"{where}: tag {tag} used twice")
            tags.add(tag)
            metadata["tag"] = tag
        elif "tag" in f and "taggedVersions" not in f:
            raise DefinitionError(f"{where}: a tag needs taggedVersions")
        annotation = f"tuple[{item_type}, ...]" if array else item_type
        if nullable:
            annotation += " | None"
        default = _default(f, item, array, nullable, "tag" in metadata, where)
        args = [f"metadata={_literal(metadata)}"] if metadata else []
        if default is not None:
            args.append(f"default={default}")
        line = f"    {snake(f['name'])}: {annotation}" + (f" = field({', '.join(args)})" if args else "")
        doc = [f'    """{_doc(f["about"], where)}"""'] if f.get("about") else []
        return [line, *doc]

    def imports(self) -> set[str]:
        return self.headers


def _default(f: dict, item: str, array: bool, nullable: bool, tagged: bool, where: str) -> str | None:
    """The Python default: the definition's, else null, empty, zero or false; a plain string or bytes field
    that is not tagged has none (the writer must give it)."""
    given = f.get("default")
    if array:
        if given is not None:
            raise DefinitionError(f"{where}: an array takes no default")
        return "None" if nullable else "()"
    if given is not None:
        if given == "null":
            if not nullable:
                raise DefinitionError(f"{where}: default null on a field that is not nullable")
            return "None"
        if item in _INTS:
            return f"{_INTS[item]}({int(given, 0)})"
        if item == "bool":
            if given not in ("true", "false"):
                raise DefinitionError(f"{where}: bad bool default {given!r}")
            return str(given == "true")
        if item == "string":
            return json.dumps(given)
        raise DefinitionError(f"{where}: no default for {item}")
    if nullable:
        return "None"
    if item in _INTS:
        return f"{_INTS[item]}(0)"
    if item == "bool":
        return "False"
    if item == "float64":
        return "f64(0.0)"
    if tagged:
        return '""' if item == "string" else 'b""'
    return None


def _literal(metadata: dict[str, object]) -> str:
    return "{" + ", ".join(f'"{k}": {json.dumps(v)}' for k, v in metadata.items()) + "}"


def _doc(text: str, where: str) -> str:
    if '"' in text or "\\" in text:
        raise DefinitionError(f"{where}: keep quotes and backslashes out of `about`")
    return text


_HEADERS = {
    "RequestHeaderV1": "from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1",
    "RequestHeaderV2": "from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2",
    "ResponseHeaderV0": "from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0",
    "ResponseHeaderV1": "from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1",
}


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def generate(paths: list[Path], api_keys: dict[str, int]) -> str:
    """The module's source for these definitions (in the order given)."""
    bodies: list[str] = []
    tops: list[str] = []
    headers: set[str] = set()
    primitives: set[str] = set()
    seen: dict[str, str] = {}
    for path in paths:
        writer = _Writer(load(path), path.name, api_keys)
        for version in writer.versions:
            classes = writer.classes(version)
            for source in classes:
                cls = source.split("class ", 1)[1].split(":", 1)[0]
                if cls in seen:
                    raise DefinitionError(f"{path.name}: class {cls} is also defined by {seen[cls]}")
                seen[cls] = path.name
            bodies += classes
            tops.append(writer.class_name(writer.name, version))
            if len(writer.versions) > 1 and version == writer.versions[-1]:
                bodies.append(f"{writer.name} = {tops[-1]}")
        headers |= writer.imports()
        primitives |= writer.primitives
    head = [
        "# Generated by proxy/protocol/message_gen.py from proxy/protocol/messages/: do not edit, run `make messages`.",
        '"""The management RPCs\' messages (docs/management.md), as kio shapes Kafka\'s own."""',
        "",
        "from dataclasses import dataclass, field",
        "from typing import ClassVar",
        "",
        *(_HEADERS[h] for h in sorted(headers)),
        "from kio.static.constants import EntityType",
        f"from kio.static.primitive import {', '.join(sorted(primitives, key=_natural))}",
        "",
        "from .apikey import ApiKey",
    ]
    listing = ["MESSAGES: tuple[type, ...] = (", *(f"    {t}," for t in tops), ")"]
    return "\n".join(head) + "\n\n\n" + "\n\n\n".join([*bodies, "\n".join(listing)]) + "\n"


def definitions() -> list[Path]:
    return sorted(DEFINITIONS.glob("*.json"))


def current() -> str:
    from .apikey import ApiKey

    return generate(definitions(), {k.name: int(k) for k in ApiKey})


def main() -> int:
    """`make messages`: the management RPCs' classes, and Kafka's API versions as kio knows them."""
    from . import kafka_versions_gen

    for output, text in ((OUTPUT, current()), (kafka_versions_gen.OUTPUT, kafka_versions_gen.current())):
        output.write_text(text)
        print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
