"""SNI routing, sans I/O: which broker a TLS server name is for, and what Metadata advertises."""

import pytest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse

from proxy.core.endpoints import ListenerLayout, SniRouting, UnknownServerName
from proxy.core.session import ProxySession
from proxy.protocol import codec
from proxy.protocol.headers import response_body_offset

from .test_session import joined, metadata_response, roundtrip
from .wire import request_frame, response_frame

OPEN = SniRouting("broker-$(nodeId).kafka.example.com", None, 443)
STRICT = SniRouting("broker-$(nodeId).kafka.example.com", "bootstrap.kafka.example.com", 9192)


@pytest.mark.parametrize(
    ("name", "node"),
    [
        ("broker-0.kafka.example.com", 0),
        ("broker-7.kafka.example.com", 7),
        ("BROKER-12.Kafka.Example.COM", 12),  # DNS names compare without case
        ("broker-3.kafka.example.com.", 3),  # the root's trailing dot
        ("broker-2147483647.kafka.example.com", 2**31 - 1),
        ("bootstrap.kafka.example.com", None),
    ],
)
def test_server_names_route_to_their_broker(name, node):
    assert STRICT.route(name) == node
    assert OPEN.route(name) == node


@pytest.mark.parametrize(
    "name",
    [
        None,  # no SNI: the client connected by address
        "broker-.kafka.example.com",
        "broker-01.kafka.example.com",  # not how the proxy advertises 1
        "broker-+1.kafka.example.com",
        "broker-2147483648.kafka.example.com",  # beyond an int32 node id
        "broker-1.kafka.example.com.evil",
        "broker-1xkafka.example.com",  # '.' is literal in the pattern
        "other.example.com",
        "x" * 300,
    ],
)
def test_other_names_are_refused_when_the_bootstrap_has_a_name(name):
    with pytest.raises(UnknownServerName):
        STRICT.route(name)
    assert OPEN.route(name) is None  # without bootstrap_host they get the bootstrap


def test_metadata_advertises_the_pattern_and_the_one_port():
    session = ProxySession(ListenerLayout("ignored", 9192, 9193, OPEN))
    request = request_frame(
        3, 12, 7, MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )
    out = joined(roundtrip(session, request, response_frame(3, 12, 7, metadata_response())).pieces)
    body, _ = codec.decode(MetadataResponse, out, response_body_offset(out, 1))
    assert [(b.node_id, b.host, b.port, b.rack) for b in body.brokers] == [
        (n, f"broker-{n}.kafka.example.com", 443, f"r{n}") for n in (1, 2, 3)
    ]
    for node in (1, 2, 3):  # what is advertised routes back to the same broker
        assert OPEN.route(OPEN.host(node)) == node
