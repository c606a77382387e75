"""The proxy's own small Kafka client: connects upstream and learns the cluster's brokers."""

from __future__ import annotations

import itertools
import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse

from ..auth.tls import NativeTlsClientContext
from ..core.endpoints import BrokerEndpoint
from ..identity import CLIENT_ID
from ..protocol import codec
from ..protocol.framing import frame
from ..protocol.headers import encode_request_header, response_body_offset
from .frames import FrameReader
from .native_tls import HandshakeRefused, client_handshake
from .upstream_auth import SaslLogin, authenticate

if TYPE_CHECKING:
    from ..config import UpstreamConfig

log = logging.getLogger(__name__)

_correlation = itertools.count(1)


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class UpstreamSecurity:
    """How the proxy reaches the brokers: TLS and/or its own SASL login (never the clients')."""

    # OpenSSL's (Python's ssl), or the compiled TLS (rustls: the forwarder then serves the connection's plain requests)
    ssl_context: ssl.SSLContext | NativeTlsClientContext | None = None
    sasl: SaslLogin | None = None

    @classmethod
    def from_config(cls, upstream: UpstreamConfig) -> UpstreamSecurity:
        from ..auth.tls import client_context, native_client_context

        context: ssl.SSLContext | NativeTlsClientContext | None = None
        if upstream.security_protocol in ("SSL", "SASL_SSL"):
            tls = upstream.tls
            engine = tls.engine if tls is not None else "auto"
            if engine != "openssl":
                try:
                    context = native_client_context(tls)
                except ValueError as exc:
                    if engine == "native":
                        raise
                    _say_openssl(str(exc))
            if context is None:
                context = (
                    client_context(tls.cafile, tls.certfile, tls.keyfile, tls.check_hostname)
                    if tls is not None
                    else client_context()
                )
        sasl = None
        if upstream.security_protocol.startswith("SASL_"):
            assert upstream.sasl_mechanism and upstream.sasl_username
            sasl = SaslLogin(upstream.sasl_mechanism, upstream.sasl_username, upstream.password() or "")
        return cls(context, sasl)


PLAINTEXT = UpstreamSecurity()
_said: set[str] = set()


def _say_openssl(why: str) -> None:
    if why not in _said:  # once per reason, not at each reload
        _said.add(why)
        log.warning("TLS to the brokers on OpenSSL (Python's ssl), every request on the Python path: %s", why)


async def connect(address: tuple[str, int], timeout: float, security: UpstreamSecurity = PLAINTEXT) -> trio.abc.Stream:
    """A connection ready for client bytes: TCP, then TLS, then the proxy's SASL login, all within `timeout`."""
    with trio.fail_after(timeout):
        tcp = await trio.open_tcp_stream(*address)
        stream: trio.abc.Stream = tcp
        try:
            if isinstance(security.ssl_context, NativeTlsClientContext):
                try:
                    stream = await client_handshake(tcp, security.ssl_context, address[0])
                except HandshakeRefused as exc:
                    raise OSError(f"TLS handshake failed: {exc}") from exc
            elif security.ssl_context is not None:
                stream = ssl_stream = trio.SSLStream(tcp, security.ssl_context, server_hostname=address[0])
                try:
                    await ssl_stream.do_handshake()
                except trio.BrokenResourceError as exc:  # the ssl.SSLError is its cause
                    raise OSError(f"TLS handshake failed: {exc.__cause__ or exc}") from exc
            if security.sasl is not None:
                await authenticate(stream, security.sasl)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream


async def connect_any(
    addresses: Sequence[tuple[str, int]], timeout: float, security: UpstreamSecurity = PLAINTEXT
) -> trio.abc.Stream:
    """The first of `addresses` that accepts a connection (in order, like a client's bootstrap)."""
    return (await connect_first(addresses, timeout, security))[0]


async def connect_first(
    addresses: Sequence[tuple[str, int]], timeout: float, security: UpstreamSecurity = PLAINTEXT
) -> tuple[trio.abc.Stream, tuple[str, int]]:
    """Like connect_any, and which of `addresses` it reached."""
    errors: list[str] = []
    for address in addresses:
        try:
            return await connect(address, timeout, security), address
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            errors.append(f"{address[0]}:{address[1]}: {exc or 'timed out'}")
    raise OSError("no upstream broker reachable: " + "; ".join(errors))


class ClusterView:
    def __init__(self, brokers: list[BrokerEndpoint], cluster_id: str | None, controller_id: int):
        self.brokers = brokers
        self.cluster_id = cluster_id
        self.controller_id = controller_id


async def describe_cluster(stream: trio.abc.Stream) -> ClusterView:
    """Metadata v12 with an empty topic list: brokers, cluster id and controller, nothing else."""
    correlation_id = next(_correlation)
    request = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    payload = encode_request_header(3, 12, correlation_id, CLIENT_ID, 2) + codec.encode(request)
    await stream.send_all(frame(payload))
    reader = FrameReader(stream, 64 * 1024 * 1024, 64 * 1024)
    response_frame = await reader.next_frame()
    if response_frame is None:
        raise OSError("upstream closed the connection during Metadata")
    response, _ = codec.decode(MetadataResponse, response_frame, response_body_offset(response_frame, 1))
    brokers = [BrokerEndpoint(int(b.node_id), b.host, int(b.port), b.rack) for b in response.brokers]
    return ClusterView(brokers, response.cluster_id, int(response.controller_id))
