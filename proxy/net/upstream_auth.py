"""The proxy's own SASL login to a broker: SaslHandshake v1, then SaslAuthenticate v2 rounds.

``SaslClient`` is sans-I/O (request frames out, response frames in); ``authenticate`` drives it over
a Trio stream right after the connection (and TLS) is up, before any client byte is forwarded.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio
from kio.schema.errors import ErrorCode
from scramp import ScramClient
from scramp.utils import ScramException

from ..auth import SASL_MECHANISMS
from ..errors import InternalFault
from ..identity import CLIENT_ID
from ..protocol import codec
from ..protocol.apikey import ApiKey
from ..protocol.apis import request_type, response_type
from ..protocol.framing import frame
from ..protocol.headers import encode_request_header, response_body_offset, response_correlation_id
from .frames import FrameReader

if TYPE_CHECKING:
    from ..config import UpstreamConfig

HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 2
_correlation = itertools.count(1)


def _headers(api_key: int) -> tuple[int, int]:
    """(request, response) header versions, fixed here rather than looked up: building the full API table
    imports every kio schema, which must not eat into the connect timeout of the first upstream login."""
    return (1, 0) if api_key == ApiKey.SASL_HANDSHAKE else (2, 1)  # SaslAuthenticate v2 is flexible, v1 is not


class UpstreamAuthError(InternalFault, ConnectionError):
    """The broker refused the proxy's credentials or mechanism (an OSError: the connection is unusable)."""


@dataclass(frozen=True)
class SaslLogin:
    mechanism: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in SASL_MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {self.mechanism!r}")


class SaslClient:
    """One login's exchange. ``start()`` gives the first request frame; each ``receive(response)`` gives the
    next one, or None once the broker has accepted the login. Failures raise UpstreamAuthError."""

    def __init__(self, login: SaslLogin):
        self.login = login
        self.done = False
        self._expect: tuple[int, int, int] | None = None  # api key, version, correlation id
        self._scram: ScramClient | None = None
        self._rounds = 0

    def start(self) -> bytes:
        return self._request(ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSION, mechanism=self.login.mechanism)

    def receive(self, response_frame: bytes | memoryview) -> bytes | None:
        if self._expect is None:
            raise UpstreamAuthError("SASL response with no request outstanding")
        api_key, version, correlation_id = self._expect
        self._expect = None
        if len(response_frame) < 8 or response_correlation_id(response_frame) != correlation_id:
            raise UpstreamAuthError("broker answered the SASL request out of order")
        offset = response_body_offset(response_frame, _headers(api_key)[1])
        try:
            response, _ = codec.decode(response_type(api_key, version), response_frame, offset)
        except codec.CodecError as exc:
            raise UpstreamAuthError(f"malformed SASL response from the broker: {exc}") from exc
        error = ErrorCode(response.error_code)
        if api_key == ApiKey.SASL_HANDSHAKE:
            if error is not ErrorCode.none:
                offered = ", ".join(response.mechanisms) or "none"
                raise UpstreamAuthError(
                    f"broker refused SASL mechanism {self.login.mechanism}: {error.name.upper()} (it offers {offered})"
                )
            return self._authenticate(self._first_token())
        if error is not ErrorCode.none:
            raise UpstreamAuthError(
                f"broker refused the proxy's {self.login.mechanism} login as {self.login.username!r}: "
                f"{error.name.upper()}: {response.error_message or ''}".rstrip(": ")
            )
        return self._next_token(bytes(response.auth_bytes))

    def _first_token(self) -> bytes:
        login = self.login
        if login.mechanism == "PLAIN":
            return b"\0" + login.username.encode("utf-8") + b"\0" + login.password.encode("utf-8")
        try:
            self._scram = ScramClient([login.mechanism], login.username, login.password)
            return self._scram.get_client_first().encode("utf-8")
        except ScramException as exc:
            raise UpstreamAuthError(f"cannot start {login.mechanism}: {exc}") from None

    def _next_token(self, server_token: bytes) -> bytes | None:
        self._rounds += 1
        if self._scram is None:  # PLAIN: one round
            self.done = True
            return None
        try:
            if self._rounds == 1:
                self._scram.set_server_first(server_token.decode("utf-8"))
                return self._authenticate(self._scram.get_client_final().encode("utf-8"))
            # The server's signature proves it knows the credential too (mutual authentication).
            self._scram.set_server_final(server_token.decode("utf-8"))
        except (ScramException, UnicodeDecodeError) as exc:
            raise UpstreamAuthError(f"{self.login.mechanism} exchange with the broker failed: {exc}") from None
        self.done = True
        return None

    def _authenticate(self, token: bytes) -> bytes:
        return self._request(ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSION, auth_bytes=token)

    def _request(self, api_key: int, version: int, **fields: Any) -> bytes:
        correlation_id = next(_correlation)
        self._expect = (api_key, version, correlation_id)
        header = encode_request_header(api_key, version, correlation_id, CLIENT_ID, _headers(api_key)[0])
        return frame(header + codec.encode(request_type(api_key, version)(**fields)))


async def authenticate(stream: trio.abc.Stream, login: SaslLogin) -> None:
    """Log in on a fresh connection (the caller bounds the time)."""
    client = SaslClient(login)
    reader = FrameReader(stream, 1024 * 1024, 64 * 1024)
    request: bytes | None = client.start()
    while request is not None:
        await stream.send_all(request)
        response = await reader.next_frame()
        if response is None:
            raise UpstreamAuthError(f"broker closed the connection during the proxy's {login.mechanism} login")
        request = client.receive(response)


def librdkafka_settings(upstream: UpstreamConfig) -> dict[str, str]:
    """The same upstream security as confluent-kafka settings, for the proxy's own librdkafka clients
    (e.g. the state topic's), so they log in exactly like the proxy's connections."""
    out = {"security.protocol": upstream.security_protocol}
    if upstream.security_protocol.startswith("SASL_"):
        assert upstream.sasl_mechanism and upstream.sasl_username
        out.update(
            {
                "sasl.mechanism": upstream.sasl_mechanism,
                "sasl.username": upstream.sasl_username,
                "sasl.password": upstream.password() or "",
            }
        )
    tls = upstream.tls
    if tls is not None:
        if tls.cafile:
            out["ssl.ca.location"] = tls.cafile
        if tls.certfile:
            out["ssl.certificate.location"] = tls.certfile
            out["ssl.key.location"] = tls.keyfile or tls.certfile
        out["ssl.endpoint.identification.algorithm"] = "https" if tls.check_hostname else "none"
    return out
