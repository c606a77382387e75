"""KIP-1313: the client instance id of a connection, and request header v3 for brokers without it.

A request with header v3 (the version after the proxy's newest) carries the client's instance id:
it is checked against the connection's, and the request is sent upstream as the version before with
header v1/v2; its answer goes back in the client's version. Without header v3 the id is learned from
KIP-714 telemetry requests (or the broker's assignment), else the proxy's own id stands.
"""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from ...errors import ProtocolViolation
from ...protocol import kip1313
from ...protocol.apikey import ApiKey
from ...protocol.headers import parse_request_header, response_body_offset
from ...protocol.primitives import MALFORMED
from ..exchange import Exchange, RequestDecision, ResponseMessage, refuse
from .context import ConnectionState


class IdentifyStage:
    def __init__(self, ctx: ConnectionState, header_v3: bool):
        self.ctx = ctx
        self.header_v3 = header_v3  # KIP-1313 versions advertised and translated
        self._first_request = True

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        ctx, info = self.ctx, ex.info
        assert info is not None
        if ex.header is None and ex.client_version >= 0:
            return self._header_v3(ex)
        if ex.header is not None:
            if self._first_request:
                self._first_request = False
                ctx.client_id = ex.header.client_id
            if ctx.header_instance_id is not None and self._offers_header_v3(ex.api_key):
                why = f"{info.name} v{ex.api_version} without the ClientInstanceId this connection started with"
                return refuse(ex, ErrorCode.invalid_request, why)
            if (
                ex.spec is not None
                and ex.spec.telemetry
                and ex.api_version == 0
                and ctx.client_instance_id_source != "header"
            ):
                offset = ex.header.body_offset  # KIP-714 v0 requests carry the id in their body (zero at first)
                self._learn(bytes(ex.frame[offset : offset + 16]))  # type: ignore[index]
        return None

    def _header_v3(self, ex: Exchange) -> RequestDecision | None:
        ctx, info = self.ctx, ex.info
        assert info is not None and ex.frame is not None
        try:
            header = kip1313.parse_header_v3(ex.frame)
        except MALFORMED as exc:
            raise ProtocolViolation(f"malformed {info.name} v{ex.client_version} request (header v3): {exc}") from exc
        if self._first_request:
            self._first_request = False
            ctx.client_id = header.client_id
        problem = self._check_instance_id(header.instance_id)
        if problem is not None:
            return refuse(ex, ErrorCode.invalid_request, f"{info.name}: {problem}")
        client_id = header.client_id if header.client_id is not None else ctx.client_id
        try:
            ex.frame = kip1313.downgrade(ex.frame, info, header, client_id)
            ex.header = parse_request_header(ex.frame, info.request_header_version(ex.api_version))
        except MALFORMED as exc:  # a body the proxy converts (OffsetDelete v1) that does not parse
            raise ProtocolViolation(f"malformed {info.name} v{ex.client_version} request: {exc}") from exc
        ex.pieces = [ex.frame]
        return None

    def _offers_header_v3(self, api_key: int) -> bool:
        """Whether this connection was offered a header-v3 version of the API (the KIP's rule that
        later requests carry the id can only hold there; SaslHandshake never has one)."""
        if self.ctx.v3_keys is not None:
            return api_key in self.ctx.v3_keys
        from ...protocol.apis import api_info

        info = api_info(api_key)
        return info is not None and kip1313.header_v3_version(info) is not None

    def _check_instance_id(self, instance_id: bytes) -> str | None:
        ctx = self.ctx
        if instance_id == kip1313.ZERO:
            return "request header v3 with a zero ClientInstanceId"
        if ctx.header_instance_id is None:
            ctx.header_instance_id = instance_id
            ctx.client_instance_id = str(uuid.UUID(bytes=instance_id))
            ctx.client_instance_id_source = "header"
            return None
        if instance_id != ctx.header_instance_id:
            theirs = uuid.UUID(bytes=instance_id)
            return f"ClientInstanceId {theirs} differs from this connection's {ctx.client_instance_id}"
        return None

    def _learn(self, raw: bytes) -> None:
        ctx = self.ctx
        if len(raw) == 16 and raw != kip1313.ZERO and ctx.client_instance_id_source != "header":
            ctx.client_instance_id = str(uuid.UUID(bytes=raw))
            ctx.client_instance_id_source = "telemetry"

    # -- answers ----------------------------------------------------------------------------------

    def on_local(self, ex: Exchange) -> None:
        """A local answer made in the upstream version goes back in the client's."""
        if ex.client_version >= 0 and ex.reply is not None and ex.api_key in kip1313.CONVERTED_RESPONSES:
            ex.reply = kip1313.upgrade_response(ex.api_key, ex.reply)

    def on_response(self, ex: Exchange, msg: ResponseMessage) -> None:
        if ex.api_key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS and ex.api_version == 0:
            self._learn(_telemetry_assigned_id(msg.frame))  # the broker's, if the client sent zero
        if ex.client_version >= 0 and ex.api_key in kip1313.CONVERTED_RESPONSES:
            try:
                msg.replace([kip1313.upgrade_response(ex.api_key, b"".join(map(bytes, msg.materialize())))])
            except MALFORMED as exc:
                raise ProtocolViolation(f"cannot convert response to api {ex.api_key}: {exc}") from exc


def _telemetry_assigned_id(frame: memoryview | bytes) -> bytes:
    """GetTelemetrySubscriptions v0 response: header v1, throttle, error, then ClientInstanceId."""
    try:
        offset = response_body_offset(frame, 1) + 6
    except MALFORMED:
        return b""
    return bytes(frame[offset : offset + 16])
