"""What the proxy knows about each Kafka API: names, versions it can parse, header versions.

The version ranges come from kio, which is generated from Kafka's own JSON schemas: a version
kio does not know is a version the proxy cannot parse, so it is never advertised (fail closed).
The proxy's own APIs (the KIP-1134 management RPCs, proxy/protocol/management.py) are listed beside
Kafka's, so that every layer parses, validates and refuses them like any other API.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map

from . import management
from .apikey import ApiKey


@dataclass(frozen=True, slots=True)
class ApiInfo:
    key: int
    name: str  # kio's snake_case name, e.g. "find_coordinator"
    min_version: int
    max_version: int
    first_flexible: int | None  # first version with compact encodings and header v2

    def request_header_version(self, version: int) -> int:
        return 2 if self.first_flexible is not None and version >= self.first_flexible else 1

    def response_header_version(self, version: int) -> int:
        if self.key == ApiKey.API_VERSIONS:
            return 0
        return 1 if self.first_flexible is not None and version >= self.first_flexible else 0


@functools.cache
def known_apis() -> dict[int, ApiInfo]:
    """Every API: the server's table (it loads every kio request schema, about 1.6 k classes, once at
    start). A command-line tool asks `api_info` for the few it uses instead."""
    apis = {key: info for key in api_key_map if (info := api_info(key)) is not None}
    for key in management.REQUESTS:
        apis[key] = _api_info(key)
    return apis


def api_info(key: int) -> ApiInfo | None:
    """One API's versions, loading only that API's request schemas."""
    if key not in api_key_map and key not in management.REQUESTS:
        return None
    return _api_info(key)


@functools.cache
def _api_info(key: int) -> ApiInfo:
    if key in management.REQUESTS:
        by_version = management.REQUEST_VERSIONS[key]
        flexible = [v for v, cls in sorted(by_version.items()) if cls.__flexible__]
        return ApiInfo(key, management.SNAKE_NAMES[key], min(by_version), max(by_version), (flexible or [None])[0])
    name = api_key_map[key]
    versions = sorted(schema_name_map[name])
    flexible = [v for v in versions if load_request_schema(key, v).__flexible__]
    return ApiInfo(key, name, versions[0], versions[-1], flexible[0] if flexible else None)


@functools.cache
def request_type(key: int, version: int) -> type:
    if key in management.REQUESTS:
        return management.REQUEST_VERSIONS[key][version]
    return load_request_schema(key, version)


@functools.cache
def response_type(key: int, version: int) -> type:
    if key in management.RESPONSES:
        return management.RESPONSE_VERSIONS[key][version]
    return load_response_schema(key, version)
