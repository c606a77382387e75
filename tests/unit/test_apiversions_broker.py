"""ApiVersions through the proxy shows a client what the broker shows it (issue 25): franz-go's
`kcl misc probe-version` names the release from the set of keys and their newest versions, and said
"at least v3.9" through a VC because the share-state APIs (83-87) a 4.2 broker advertises on its client
listener were left out. Checked against a recorded answer of a Kafka 4.2.2 broker."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode

from proxy.core.session import Action, ProxySession
from proxy.protocol import codec
from proxy.protocol.apis import request_type, response_type
from proxy.protocol.headers import response_body_offset

from .test_session import api_versions_response, joined, roundtrip
from .test_tenant_rewrite import LAYOUT, Tenancy, make_image
from .wire import request_frame

BROKER = json.loads((Path(__file__).parent / "golden" / "kafka-4.2.2-apiversions.json").read_text())
TABLE = {k: (lo, hi) for k, lo, hi in BROKER["api_keys"]}
SHARE_STATE = (83, 84, 85, 86, 87)


def _session(tenant: bool) -> ProxySession:
    if not tenant:
        return ProxySession(LAYOUT, header_v3=False)
    image, _ = make_image()
    return ProxySession(LAYOUT, tenancy=Tenancy(image), principal="User:team-a-user", header_v3=False)


def _advertised(session: ProxySession) -> dict[int, tuple[int, int]]:
    req = request_frame(18, 3, 5, ApiVersionsRequest(client_software_name="kcl", client_software_version="1"))
    out = joined(roundtrip(session, req, _broker_frame()).pieces)
    body, _ = codec.decode(ApiVersionsResponse, out, response_body_offset(out, 0))
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}


def _broker_frame() -> bytes:
    from .wire import response_frame

    return response_frame(18, 3, 5, api_versions_response(TABLE))


@pytest.mark.parametrize("tenant", [False, True], ids=["proxy", "virtual-cluster"])
def test_api_versions_are_the_brokers_own(tenant):
    """Every key and version range the broker lists, nothing more (the management keys go only to a
    principal holding a management right: docs/compatibility.md)."""
    # Produce from v3: Kafka 4 lists v0-2 (for old clients' probes) but refuses them (KIP-896); the proxy
    # cannot read them. Only newest versions count for a version probe.
    expected = {**TABLE, 0: (3, 13)}
    if tenant:  # refused in a VC from the first version whose answer has a place for the error
        expected |= {35: (3, 4), 43: (1, 2)}  # DescribeLogDirs, ElectLeaders
    assert _advertised(_session(tenant)) == expected


@pytest.mark.parametrize("tenant", [False, True], ids=["proxy", "virtual-cluster"])
@pytest.mark.parametrize("key", SHARE_STATE)
def test_share_state_apis_are_listed_and_refused_per_partition_as_a_broker_refuses_a_client(tenant, key):
    session = _session(tenant)
    _advertised(session)
    version = TABLE[key][1]
    cls = request_type(key, version)
    topic_id = uuid.uuid4()
    request = _request(cls, topic_id)
    decision = session.on_request(memoryview(bytearray(request_frame(key, version, 9, request))))
    assert decision.action is Action.LOCAL  # never reaches the broker
    reply = memoryview(session.next_local_reply().reply)
    body, _ = codec.decode(response_type(key, version), reply, response_body_offset(reply, 1))
    assert [
        (r.topic_id, [(int(p.partition), p.error_code, p.error_message) for p in r.partitions]) for r in body.results
    ] == [
        (
            topic_id,
            [(p, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.") for p in (0, 2)],
        )
    ]


def _request(cls: type, topic_id: uuid.UUID):
    import typing

    topic_cls = typing.get_args(typing.get_type_hints(cls)["topics"])[0]
    partition_cls = typing.get_args(typing.get_type_hints(topic_cls)["partitions"])[0]
    partitions = tuple(codec._empty(partition_cls, partition=p) for p in (0, 2))
    return codec._empty(cls, group_id="g", topics=(codec._empty(topic_cls, topic_id=topic_id, partitions=partitions),))
