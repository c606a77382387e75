"""The management RPCs' messages: generated from their JSON definitions, on the wire as aiven/inkless puts them,
read and written by the codec like Kafka's own (proxy/protocol/message_gen.py, proxy/protocol/management.py)."""

from __future__ import annotations

import dataclasses
import types
import typing

import pytest
from kio.index import KioIndexError
from kio.static.primitive import i8, i16, i32, i64, u16

from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession
from proxy.errors import CodecError
from proxy.protocol import codec, kafka_versions, kafka_versions_gen, management, message_gen
from proxy.protocol import management as m
from proxy.protocol.apikey import RETIRED, ApiKey
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header

# -- the generator -----------------------------------------------------------------------------------------


def test_the_checked_in_classes_are_what_the_generator_makes_now():
    assert message_gen.OUTPUT.read_text() == message_gen.current(), "run `make messages` and check in the output"


def test_every_definition_names_its_catalogue_key():
    bad = {**message_gen.load(message_gen.definitions()[0]), "apiKey": 7}
    path = message_gen.DEFINITIONS / "x.json"
    with pytest.raises(message_gen.DefinitionError, match="is not ApiKey"):
        message_gen._Writer(bad, path.name, {k.name: int(k) for k in ApiKey})


def test_fields_follow_their_versions_nullability_and_tags():
    definition = {
        "apiKey": 501,
        "type": "request",
        "name": "CreateVirtualClustersRequest",
        "validVersions": "0-2",
        "flexibleVersions": "1+",
        "fields": [
            {"name": "A", "type": "int32", "versions": "0+"},
            {"name": "B", "type": "string", "versions": "1+", "nullableVersions": "2+"},
            {"name": "C", "type": "[]string", "versions": "2+", "taggedVersions": "2+", "tag": 0},
        ],
    }
    writer = message_gen._Writer(definition, "t.json", {"CREATE_VIRTUAL_CLUSTERS": 501})
    v0, v1, v2 = (writer.classes(v)[-1] for v in range(3))
    assert "b:" not in v0 and "RequestHeaderV1" in v0 and "__flexible__: ClassVar[bool] = False" in v0
    assert '    b: str = field(metadata={"kafka_type": "string"})\n' in v1 + "\n" and "RequestHeaderV2" in v1
    assert (
        "b: str | None = field(" in v2
        and 'c: tuple[str, ...] = field(metadata={"kafka_type": "string", "tag": 0}' in v2
    )


# -- the codec reads and writes them like Kafka's own -------------------------------------------------------

_SAMPLES: dict[object, object] = {
    i8: i8(-3),
    i16: i16(300),
    i32: i32(70000),
    i64: i64(1 << 40),
    u16: u16(9),
    bool: True,
}


def _sample(cls: type, seed: int = 0) -> object:
    """An instance with every field set away from its default (nested entities and arrays included)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        values[f.name] = _value(hints[f.name], f.name, seed)
    return cls(**values)


def _value(tp: object, name: str, seed: int) -> object:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):  # X | None: a value, not null
        return _value(args[0], name, seed)
    if typing.get_origin(tp) is tuple:
        return tuple(_value(args[0], name, seed + i) for i in range(2))
    if tp is str:
        return f"{name}-{seed}-é"  # not ASCII: lengths are bytes
    if dataclasses.is_dataclass(tp):
        return _sample(tp, seed)
    return _SAMPLES[tp]


MESSAGES = [
    (key, version, direction)
    for key in management.KEYS
    for version in range(api_info(key).min_version, api_info(key).max_version + 1)
    for direction in ("request", "response")
]


@pytest.mark.parametrize(("key", "version", "direction"), MESSAGES, ids=lambda x: str(x))
def test_each_message_round_trips_through_the_codec_at_every_version(key, version, direction):
    cls = (request_type if direction == "request" else response_type)(key, version)
    assert int(cls.__api_key__) == key and int(cls.__version__) == version
    for entity in (_sample(cls), cls(**{f.name: v for f, v in _required(cls)})):
        raw = codec.encode(entity)
        decoded, end = codec.decode(cls, raw)
        assert decoded == entity and end == len(raw)
        if raw[:-1]:
            with pytest.raises(CodecError):  # validated first: a cut body is refused, not half read
                codec.decode(cls, raw[:-1])


def _required(cls: type) -> list[tuple[dataclasses.Field, object]]:
    hints = typing.get_type_hints(cls)
    missing = dataclasses.MISSING
    return [
        (f, _value(hints[f.name], f.name, 0))
        for f in dataclasses.fields(cls)
        if f.default is missing and f.default_factory is missing
    ]


# -- on the wire as aiven/inkless puts them ----------------------------------------------------------------
# Read from aiven/inkless' KIP-1134 branch, clients/src/main/resources/common/message/*VirtualClusters*.json
# (commit 1e14a2d6234330f3fc9c12f82719a3657bb7260e): the api keys, and AlterVirtualClustersRequest's
# ResourceType ("0=user, 1=topic link, 2=consumer group, 3=transactional id, 4=client id") and
# ResourceOperation ("0=add, 1=remove").
INKLESS_KEYS = {
    "CreateVirtualClusters": 501,
    "AlterVirtualClusters": 502,
    "DeleteVirtualClusters": 503,
    "ListVirtualClusters": 504,
    "DescribeVirtualClusters": 505,
}
INKLESS_RESOURCE_TYPES = {"USER": 0, "TOPIC": 1, "GROUP": 2, "TRANSACTIONAL_ID": 3, "CLIENT": 4}
INKLESS_RESOURCE_OPERATIONS = {"ADD": 0, "REMOVE": 1}


def test_wire_keys_and_alter_codes_are_inkless():
    assert {ApiKey[k].title: int(ApiKey[k]) for k in ApiKey.__members__ if ApiKey[k].title in INKLESS_KEYS} == (
        INKLESS_KEYS
    )
    assert {t.name: int(t) for t in m.ResourceType if t.name in INKLESS_RESOURCE_TYPES} == INKLESS_RESOURCE_TYPES
    assert set(m.ResourceType) - {m.ResourceType[n] for n in INKLESS_RESOURCE_TYPES} == {m.ResourceType.ADMIN}
    assert m.ResourceType.ADMIN not in range(5)  # vcproxy's own code, outside inkless' range
    assert {o.name: int(o) for o in m.ResourceOperation} == INKLESS_RESOURCE_OPERATIONS
    for key in INKLESS_KEYS.values():  # version 0 only, flexible: request header v2, response header v1
        info = api_info(key)
        assert (info.min_version, info.max_version, info.first_flexible) == (0, 0, 0)


def _compact(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def test_an_alter_request_in_inkless_layout_is_read_field_for_field():
    # Written byte by byte from inkless' AlterVirtualClustersRequest.json: VirtualClusters[Name,
    # Resources[ResourceType, ResourceOperation, ResourceName, PhysicalTopicName]], timeoutMs, validateOnly.
    raw = (
        b"\x02" + _compact("team-a")  # one virtual cluster
        + b"\x03"  # two resources
        + b"\x01\x00" + _compact("orders") + _compact("phys.orders") + b"\x00"  # add topic link orders
        + b"\x00\x01" + _compact("User:bob") + _compact(None) + b"\x00"  # remove user
        + b"\x00"  # the virtual cluster's tagged fields
        + (30000).to_bytes(4, "big") + b"\x01" + b"\x00"
    )  # fmt: skip
    request, end = codec.decode(m.AlterVirtualClustersRequest, raw)
    assert end == len(raw)
    (vc,) = request.virtual_clusters
    link, user = vc.resources
    assert (vc.name, request.timeout_ms, request.validate_only, vc.configs) == ("team-a", 30000, True, ())
    assert (link.resource_type, link.resource_operation, link.resource_name, link.physical_topic_name) == (
        m.ResourceType.TOPIC,
        m.ResourceOperation.ADD,
        "orders",
        "phys.orders",
    )
    assert (user.resource_type, user.resource_operation, user.resource_name, user.physical_topic_name) == (
        m.ResourceType.USER,
        m.ResourceOperation.REMOVE,
        "User:bob",
        None,
    )
    assert codec.encode(request) == raw  # and written back the same


def test_what_vcproxy_adds_is_tagged_so_inkless_layout_is_unchanged_without_it():
    plain = m.DeleteVirtualClustersRequest(virtual_clusters=(m.DeletableVirtualCluster(name="a"),))
    forced = m.DeleteVirtualClustersRequest(virtual_clusters=(m.DeletableVirtualCluster(name="a"),), force=True)
    raw, raw_forced = codec.encode(plain), codec.encode(forced)
    assert raw == b"\x02" + _compact("a") + b"\x00" + (60000).to_bytes(4, "big") + b"\x00" + b"\x00"
    assert raw_forced[: len(raw) - 1] == raw[:-1] and raw_forced[len(raw) - 1 :] == b"\x01\x00\x01\x01"


# -- the keys served before: closed with a reason that names the new one -----------------------------------


@pytest.mark.parametrize("old", sorted(RETIRED))
def test_a_request_on_a_retired_key_is_closed_naming_its_new_key(old: int):
    new = RETIRED[old]
    header = encode_request_header(old, 0, 5, "old-cli", 2)
    decision = ProxySession(ListenerLayout("proxy.example", 9192, 9193)).on_request(
        memoryview(bytearray(frame(header + codec.encode(request_type(new, 0)()))))
    )
    assert decision.action is Action.CLOSE
    assert f"API key {old} is retired" in decision.reason and f"{new.title} under key {int(new)}" in decision.reason


def test_the_checked_in_kafka_versions_are_what_kio_knows_now():
    assert kafka_versions_gen.OUTPUT.read_text() == kafka_versions_gen.current(), "run `make messages`"


def test_the_version_table_fails_closed_on_a_version_kio_cannot_parse():
    for key, (name, low, high, flexible) in kafka_versions.VERSIONS.items():
        info = api_info(key)
        assert info is not None and (info.name, info.min_version, info.max_version) == (name, low, high)
        for version in range(low, high + 1):
            assert request_type(key, version).__flexible__ == (flexible is not None and version >= flexible)
        with pytest.raises(KioIndexError):
            request_type(key, high + 1)
