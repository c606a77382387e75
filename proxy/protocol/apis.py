"""What the proxy knows about each Kafka API: names, versions it can parse, header versions.

The version ranges come from kio, which is generated from Kafka's own JSON schemas: a version
kio does not know is a version the proxy cannot parse, so it is never advertised (fail closed). They are
read from kafka_versions.py, generated from kio's schemas and compared with them by a unit test, so that a
start does not load every schema to learn them; each schema is loaded at its first use.
The proxy's own APIs (the KIP-1134 management RPCs, proxy/protocol/management.py) are listed beside
Kafka's, so that every layer parses, validates and refuses them like any other API.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from kio.index import load_request_schema, load_response_schema

from . import management
from .apikey import ApiKey
from .kafka_versions import VERSIONS


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
    """Every API: the server's table."""
    apis = {key: _api_info(key) for key in VERSIONS}
    for key in management.REQUESTS:
        apis[key] = _api_info(key)
    return apis


def api_info(key: int) -> ApiInfo | None:
    """One API's versions."""
    if key not in VERSIONS and key not in management.REQUESTS:
        return None
    return _api_info(key)


@functools.cache
def _api_info(key: int) -> ApiInfo:
    if key in management.REQUESTS:
        by_version = management.REQUEST_VERSIONS[key]
        flexible = [v for v, cls in sorted(by_version.items()) if cls.__flexible__]
        return ApiInfo(key, management.SNAKE_NAMES[key], min(by_version), max(by_version), (flexible or [None])[0])
    return ApiInfo(key, *VERSIONS[key])


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
