"""ApiVersions: advertise only what both the upstream broker and the proxy can handle."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from ..catalogue import spec
from ..protocol import codec, entities
from ..protocol.apikey import ApiKey
from ..protocol.apis import known_apis, response_type
from ..rules import api_rules, tenant_rules

VersionTable = dict[int, tuple[int, int]]


@functools.cache
def proxy_versions() -> VersionTable:
    """What the proxy can parse (kio's schemas) for every API it does not reject."""
    table = {}
    for key, info in known_apis().items():
        rule = api_rules().get(key)
        if rule is None or rule.physical == "reject":
            continue  # `refuse` APIs are advertised, as a broker does, and refused in their own shape
        table[key] = (info.min_version, info.max_version)
    return table


@functools.cache
def tenant_versions() -> VersionTable:
    """What a proxy with virtual clusters advertises: only APIs the tenant rules cover, and for
    denied APIs only versions whose response can carry the refusal (a top-level error code).

    ApiVersions comes before authentication, so this applies to every client of such a proxy. Checked in
    (proxy/core/forward_plans.py, `make messages`): deriving it loads every denied API's answer schemas (0.2-0.3 s
    of CPU at every start); a unit test compares it with `derive_tenant_versions()`.
    """
    from .forward_plans import TENANT_VERSIONS

    return dict(TENANT_VERSIONS)


def derive_tenant_versions() -> VersionTable:
    """`tenant_versions()` from the schemas and the rules."""
    table = {}
    for key, (low, high) in proxy_versions().items():
        rule = tenant_rules().get(key)
        if rule is None:
            continue
        if rule.versions is not None:  # tenant.yaml narrows what the tenant may use
            low = max(low, rule.versions.low)
            high = high if rule.versions.high is None else min(high, rule.versions.high)
        api = spec(key)
        if rule.action == "deny" and (api is None or api.refuse_items is None):
            usable = [v for v in range(low, high + 1) if "error_code" in response_type(key, v).__dataclass_fields__]
            if not usable:
                continue
            low = usable[0]
        if low <= high:
            table[key] = (low, high)
    return table


def intersect(upstream: VersionTable, ours: VersionTable) -> VersionTable:
    out = {}
    for key, (lo, hi) in upstream.items():
        if key not in ours:
            continue
        low, high = max(lo, ours[key][0]), min(hi, ours[key][1])
        if low <= high:
            out[key] = (low, high)
    return out


def decode_response(version: int, body: memoryview | bytes) -> Any:
    # A broker answers a too-new ApiVersions request with a v0 body (KIP-511): check the error first.
    error = int.from_bytes(body[:2], "big", signed=True)
    if error == ErrorCode.unsupported_version:
        version = 0
    entity, _ = codec.decode(response_type(ApiKey.API_VERSIONS, version), body)
    return entity


def table_of(response: Any) -> VersionTable:
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


def with_table(response: Any, table: VersionTable) -> Any:
    item_cls = entities.item_type(type(response), "api_keys")
    keys = tuple(
        item_cls(api_key=i16(key), min_version=i16(low), max_version=i16(high))
        for key, (low, high) in sorted(table.items())
    )
    return dataclasses.replace(response, api_keys=keys)


def unsupported_version_body(table: VersionTable) -> bytes:
    """The v0 response a broker sends for an ApiVersions version it does not know."""
    cls = response_type(ApiKey.API_VERSIONS, 0)
    body = codec._empty(cls, error_code=ErrorCode.unsupported_version)
    return codec.encode(with_table(body, table))


class UpstreamVersions:
    """One broker's last ApiVersions answers by request version (its bytes), so that a client that has not logged in
    can be answered without the proxy opening a broker connection for it. Entries are kept for `ttl`
    seconds; after that the next client's request goes upstream and refreshes them (broker upgrades)."""

    def __init__(self, ttl: float, clock: Callable[[], float]):
        self.ttl = ttl
        self.clock = clock
        self._answers: dict[int, tuple[float, bytes]] = {}

    def get(self, version: int) -> bytes | None:
        """The broker's answer's body, until the entry expires."""
        entry = self._answers.get(version)
        if entry is None or self.clock() - entry[0] > self.ttl:
            return None
        return entry[1]

    def put(self, version: int, body: bytes) -> None:
        if int.from_bytes(body[:2], "big", signed=True) == 0:  # its error code: only an answer without one is kept
            self._answers[version] = (self.clock(), body)
