"""The proxy's own small Kafka client: connects upstream and learns the cluster's brokers."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

import trio
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse

from ..core.endpoints import BrokerEndpoint
from ..protocol import codec
from ..protocol.framing import frame
from ..protocol.headers import encode_request_header, response_body_offset
from .frames import FrameReader

log = logging.getLogger(__name__)

CLIENT_ID = "vcproxy"
_correlation = itertools.count(1)


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def connect(address: tuple[str, int], timeout: float) -> trio.SocketStream:
    with trio.fail_after(timeout):
        return await trio.open_tcp_stream(*address)


async def connect_any(addresses: Sequence[tuple[str, int]], timeout: float) -> trio.SocketStream:
    """The first of `addresses` that accepts a connection (in order, like a client's bootstrap)."""
    errors: list[str] = []
    for address in addresses:
        try:
            return await connect(address, timeout)
        except (OSError, trio.TooSlowError) as exc:
            errors.append(f"{address[0]}:{address[1]}: {exc or 'timed out'}")
    raise OSError("no upstream broker reachable: " + "; ".join(errors))


class ClusterView:
    def __init__(self, brokers: list[BrokerEndpoint], cluster_id: str | None, controller_id: int):
        self.brokers = brokers
        self.cluster_id = cluster_id
        self.controller_id = controller_id


async def describe_cluster(stream: trio.SocketStream) -> ClusterView:
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
