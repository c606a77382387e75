"""The version gate: ApiVersions is answered with what both the broker and this proxy can handle, and
a request outside what was agreed, or for an API no client may use, is refused with the API's error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol import codec, kip1313, management, name_rules
from ...protocol.apikey import ApiKey
from ...protocol.apis import known_apis
from ...protocol.codec import CodecError
from ...protocol.primitives import MALFORMED
from ...rules import api_rules
from .. import apiversions
from ..exchange import Exchange, RequestDecision, ResponseMessage, answer, forward, refuse
from .authenticate import AuthenticationStage
from .context import ConnectionState
from .management import refuse_all

# The proxy's own APIs this caller may use now (management RPCs), advertised beside the broker's.
ExtraVersions = Callable[[], apiversions.VersionTable]

# A broker's ApiVersions answer as this proxy passes it on, by what it is built from: the answer's bytes, its version,
# the proxy's table, header v3 and the caller's own APIs. Decoding and encoding one costs 0.8 ms, and every
# connection's answer, forwarded or from the cache before login, is the same few hundred bytes from a given broker. A
# handful of entries (brokers' versions during an upgrade, a few kinds of caller), cleared whole when full.
Built = tuple[bytes, apiversions.VersionTable, set[int]]  # body, versions, v3 keys
_BUILT: dict[tuple[Any, ...], Built] = {}
_BUILT_MOST = 64


class VersionStage:
    def __init__(
        self,
        ctx: ConnectionState,
        auth: AuthenticationStage,
        header_v3: bool,
        upstream_versions: apiversions.UpstreamVersions | None,
        extra: ExtraVersions | None = None,
    ):
        self.ctx = ctx
        self.auth = auth
        self.header_v3 = header_v3
        self.upstream_versions = upstream_versions  # the broker's ApiVersions answers, for clients not logged in
        self.extra = extra
        self._too_new_reply: bytes | None = None  # the body for ApiVersions versions above ours, built once

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        if ex.api_key == ApiKey.API_VERSIONS:
            return self._api_versions(ex)
        assert ex.info is not None
        if api_rules()[ex.api_key].physical in ("reject", "refuse"):
            return refuse(ex, ErrorCode.cluster_authorization_failed, f"{ex.info.name} is internal")
        if ex.api_key in management.REQUESTS and ex.header is not None:
            if self.ctx.relayed:  # virtual clusters are the proxy's: a principal it does not know has no say
                return refuse_all(
                    ex, ErrorCode.cluster_authorization_failed, "not authorized to manage virtual clusters"
                )
            return None  # advertised only to callers who may use them; authorization answers the others
        low, high = self.ctx.versions.get(ex.api_key, (0, -1))
        if not low <= ex.api_version <= high:
            return refuse(ex, ErrorCode.unsupported_version, f"{ex.info.name} v{ex.api_version}")
        return None

    def _api_versions(self, ex: Exchange) -> RequestDecision:
        info = ex.info
        assert info is not None
        if ex.header is None:
            # Too new for us (or negative): answer as a broker would (v0 body), so the client retries lower.
            # Like a broker, name only ApiVersions' own range: enough to retry, nothing more before login.
            if self._too_new_reply is None:
                supported = self.ctx.supported
                advertised = kip1313.advertised(supported, known_apis()) if self.header_v3 else supported
                self._too_new_reply = apiversions.unsupported_version_body(
                    {ApiKey.API_VERSIONS: advertised[ApiKey.API_VERSIONS]}
                )
            ex.response_header_version = 0
            return answer(ex, self._too_new_reply)
        if not self.auth.complete and self.upstream_versions is not None:
            # Before login the broker's answer comes from the cache: no broker connection for a stranger.
            cached = self.upstream_versions.get(ex.api_version)
            if cached is not None and self._refused_name(ex):  # as the broker answers it: no versions
                refused = codec.error_response_body(ex.api_key, ex.api_version, ErrorCode.invalid_request)
                assert refused is not None  # ApiVersions' answer has an error field in every version
                return answer(ex, refused)
            if cached is not None:
                return answer(ex, self._built(ex, cached))
        return forward(ex)

    @staticmethod
    def _refused_name(ex: Exchange) -> bool:
        """A client software name or version Kafka refuses (KIP-511: proxy/protocol/name_rules.py)."""
        rules = ex.spec.name_rules if ex.spec is not None else ()
        try:
            return bool(rules) and name_rules.refuses(rules, ex.received())
        except (CodecError, *MALFORMED):
            return False  # read as the broker's cached answer is given: unchanged

    def on_response(self, ex: Exchange, msg: ResponseMessage) -> None:
        if ex.api_key != ApiKey.API_VERSIONS:
            return
        raw = bytes(msg.frame[msg.body_offset :])
        body = self._built(ex, raw)
        if self.upstream_versions is not None:
            self.upstream_versions.put(ex.api_version, raw)
        msg.replace([codec.response_frame(ex.correlation_id, 0, body)])

    def _built(self, ex: Exchange, raw: bytes) -> bytes:
        """The answer to send for the broker's `raw` answer; sets what this session agreed to."""
        extra = self._extra()
        key = (ex.api_version, raw, id(self.ctx.supported), self.header_v3, frozenset(extra.items()) if extra else None)
        built = _BUILT.get(key)
        if built is None:
            response = apiversions.decode_response(ex.api_version, raw)
            built = (self._body(ex, response, extra), self.ctx.versions, self.ctx.v3_keys)
            if int(response.error_code) == 0:  # an error's answer changes the exchange (its version): built each time
                if len(_BUILT) >= _BUILT_MOST:
                    _BUILT.clear()
                _BUILT[key] = built
        body, self.ctx.versions, self.ctx.v3_keys = built  # shared, never mutated
        return body

    def _extra(self) -> apiversions.VersionTable | None:
        if self.extra is not None and self.auth.complete and not self.ctx.relayed:
            return self.extra()
        return None

    def _body(self, ex: Exchange, response: Any, extra: apiversions.VersionTable | None) -> bytes:
        """The broker's ApiVersions answer cut down to what this proxy and session can handle."""
        ctx = self.ctx
        upstream = apiversions.table_of(response)
        versions = apiversions.intersect(upstream, ctx.supported)
        if extra:
            versions.update(extra)
        ctx.versions = versions
        advertised = kip1313.advertised(versions, known_apis(), upstream) if self.header_v3 else versions
        ctx.v3_keys = {k for k, (_, high) in advertised.items() if high > versions[k][1]}
        if int(response.error_code) == ErrorCode.unsupported_version:
            ex.api_version = 0
        return codec.encode(apiversions.with_table(response, advertised))
