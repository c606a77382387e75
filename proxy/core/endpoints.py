"""Broker endpoints: the proxy's listener layout and the rewriting of endpoint fields.

Port per broker: the proxy has one bootstrap port plus one port per upstream broker, at
``broker_port_base + node_id``. The mapping is a pure function of the node id, so every proxy
replica (and every client that cached a port) agrees on it without coordination, and a broker
that joins later gets a predictable port with no config change.

SNI: one TLS port for all; broker N is advertised as a host name made from a pattern, and a
connection's TLS server name says which broker it is for. Also a pure function of the node id.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any

from ..errors import Refusal
from ..protocol import codec, entities, splice, walker
from ..protocol.apis import response_type
from ..protocol.framing import with_body
from ..protocol.primitives import encode_uvarint, read_uvarint
from ..rules import EndpointRule, api_rules, endpoint_rules


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


NODE_ID = "$(nodeId)"
MAX_NODE_ID = 2**31 - 1


class UnknownServerName(Refusal, ValueError):
    """A TLS server name that names neither the bootstrap nor a broker."""


@dataclass(frozen=True, slots=True)
class SniRouting:
    """Which broker a TLS server name is for, and the name each broker is advertised under."""

    broker_host_pattern: str  # e.g. broker-$(nodeId).kafka.example.com
    bootstrap_host: str | None
    advertised_port: int

    def host(self, node_id: int) -> str:
        return self.broker_host_pattern.replace(NODE_ID, str(node_id))

    def route(self, server_name: str | None) -> int | None:
        """The node id a server name is for; None for the bootstrap. DNS names compare without case."""
        if server_name is None:
            if self.bootstrap_host is None:
                return None
            raise UnknownServerName("no server name (SNI) sent, and bootstrap_host is set")
        name = server_name.lower().rstrip(".")
        if self.bootstrap_host is not None and name == self.bootstrap_host.lower():
            return None
        match = _pattern_regex(self.broker_host_pattern).fullmatch(name)
        if match is not None and int(match.group(1)) <= MAX_NODE_ID:
            return int(match.group(1))
        if self.bootstrap_host is None:
            return None
        raise UnknownServerName(f"server name {server_name[:255]!r} is neither the bootstrap nor a broker")


@functools.cache
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    before, _, after = pattern.lower().partition(NODE_ID.lower())
    return re.compile(re.escape(before) + r"(0|[1-9][0-9]{0,9})" + re.escape(after))


@dataclass(frozen=True, slots=True)
class ListenerLayout:
    advertised_host: str
    bootstrap_port: int
    broker_port_base: int
    sni: SniRouting | None = None

    def advertised(self, node_id: int) -> tuple[str, int]:
        """The address clients are told for broker ``node_id``."""
        if self.sni is not None:
            return self.sni.host(node_id), self.sni.advertised_port
        return self.advertised_host, self.broker_port(node_id)

    def broker_port(self, node_id: int) -> int:
        port = self.broker_port_base + node_id
        if node_id < 0 or not 0 < port < 65536:
            raise ValueError(f"node id {node_id} maps to port {port}, outside 1-65535: lower broker_port_base")
        return port

    def node_for_port(self, port: int) -> int | None:
        node = port - self.broker_port_base
        return node if node >= 0 and port != self.bootstrap_port else None


@functools.cache
def rules_for(api_key: int, version: int) -> EndpointRule | None:
    """The endpoint rule for this API version (including `keep` rules), or None."""
    name = api_rules()[api_key].name if api_key in api_rules() else None
    for rule in endpoint_rules():
        if rule.api == name and version in rule.versions:
            return rule
    return None


class EndpointRewriter:
    """Rewrites endpoint fields of responses; reports the upstream endpoints it saw."""

    def __init__(self, layout: ListenerLayout):
        self.layout = layout

    def _swap(self, item: Any, seen: list[BrokerEndpoint], id_field: str = "node_id") -> Any:
        node_id = int(getattr(item, id_field))
        if node_id < 0:
            return item
        seen.append(BrokerEndpoint(node_id, item.host, int(item.port), getattr(item, "rack", None)))
        host, port = self.layout.advertised(node_id)
        return dataclasses.replace(item, host=host, port=type(item.port)(port))

    def rewrite_entity(self, rule: EndpointRule, body: Any, seen: list[BrokerEndpoint]) -> Any:
        for name, value in rule.only_if:
            if int(getattr(body, name, value)) != value:
                return body
        if rule.path == ".":
            return self._swap(body, seen, rule.id_field)
        items = getattr(body, rule.path)
        if rule.kind == "single":
            return dataclasses.replace(body, **{rule.path: self._swap(items, seen, rule.id_field)})
        return dataclasses.replace(body, **{rule.path: tuple(self._swap(i, seen, rule.id_field) for i in items)})

    def rewrite_body(
        self, rule: EndpointRule, api_key: int, version: int, frame: memoryview, body_offset: int
    ) -> tuple[list[bytes | memoryview], list[BrokerEndpoint]]:
        """New frame pieces (size prefix first) and the upstream endpoints found."""
        seen: list[BrokerEndpoint] = []
        cls = response_type(api_key, version)
        if rule.mode == "decode":
            body, _ = codec.decode(cls, frame, body_offset)
            return with_body(frame, body_offset, codec.encode(self.rewrite_entity(rule, body, seen))), seen
        return splice.apply(frame, self.splice_edits(rule, api_key, version, frame, body_offset, seen)), seen

    def nothing_to_splice(
        self, rule: EndpointRule, api_key: int, version: int, frame: bytes | memoryview, body_offset: int
    ) -> bool:
        """An answer whose endpoints are a tagged field (Produce, Fetch: KIP-951) and that has no tagged field
        at all, the usual case: one compiled skip says so."""
        cls = response_type(api_key, version)
        return rule.path not in walker.regular_names(cls) and frame[walker.tags_start(cls, frame, body_offset)] == 0

    def splice_edits(
        self,
        rule: EndpointRule,
        api_key: int,
        version: int,
        frame: bytes | memoryview,
        body_offset: int,
        seen: list[BrokerEndpoint],
    ) -> splice.Edits:
        """The endpoint array re-encoded, as an edit of the frame (none if it has no endpoint)."""
        if self.nothing_to_splice(rule, api_key, version, frame, body_offset):
            return []
        cls = response_type(api_key, version)
        lay = walker.layout(cls, frame, body_offset)
        item_cls = entities.item_type(cls, rule.path)
        if rule.path in lay.fields:
            start, end = lay.fields[rule.path]
            new_field = self._rewrite_array(item_cls, frame[start:end], seen)
            return [] if new_field is None else [(start, end, new_field)]
        tag = walker.tag_of(cls, rule.path)
        if tag not in lay.tags:
            return []
        start, end = lay.tags[tag]
        new_field = self._rewrite_array(item_cls, frame[start:end], seen)
        if new_field is None:
            return []
        # Re-encode the (small) trailing tagged section with the new field in place.
        section = bytearray(encode_uvarint(len(lay.tags)))
        for t, (s, e) in sorted(lay.tags.items()):
            data = new_field if t == tag else frame[s:e]
            section += encode_uvarint(t) + encode_uvarint(len(data)) + bytes(data)
        return [(lay.tags_start, lay.end, bytes(section))]

    def _rewrite_array(self, item_cls: type, data: memoryview, seen: list[BrokerEndpoint]) -> bytes | None:
        count, offset = read_uvarint(data, 0)
        if count <= 1:  # null or empty: nothing to rewrite
            return None
        out = bytearray(encode_uvarint(count))
        for _ in range(count - 1):
            item, offset = codec.decode(item_cls, data, offset)
            out += codec.encode(self._swap(item, seen))
        return bytes(out)
