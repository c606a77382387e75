"""Builders for request/response frames in unit tests (kio does the encoding)."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from proxy.protocol import codec
from proxy.protocol.apikey import ApiKey
from proxy.protocol.apis import api_info, known_apis, request_type, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, encode_response_header


def request_frame(api_key: int, version: int, correlation_id: int, body: Any | bytes, client_id: str = "t") -> bytes:
    header = encode_request_header(
        api_key, version, correlation_id, client_id, api_info(api_key).request_header_version(version)
    )
    raw = body if isinstance(body, bytes) else codec.encode(body)
    return frame(header + raw)


def response_frame(api_key: int, version: int, correlation_id: int, body: Any | bytes) -> bytes:
    raw = body if isinstance(body, bytes) else codec.encode(body)
    return frame(encode_response_header(correlation_id, api_info(api_key).response_header_version(version)) + raw)


def every_schema() -> list[type]:
    """The request and response class of every API and version the catalogue knows."""
    out = []
    for key, info in sorted(known_apis().items()):
        for version in range(info.min_version, info.max_version + 1):
            out += [request_type(key, version), response_type(key, version)]
    return out


def share_answer(ids: list[uuid.UUID], version: int = 2, key: int = ApiKey.SHARE_FETCH, leaders: int = 0) -> bytes:
    """A ShareFetch answer (partition 0 of each topic: a record batch's worth of bytes, one record acquired) or a
    ShareAcknowledge answer (KIP-932) listing `leaders` leaders' endpoints, as a broker lists them: after a
    NOT_LEADER_OR_FOLLOWER."""
    api = "share_fetch" if key == ApiKey.SHARE_FETCH else "share_acknowledge"
    res = importlib.import_module(f"kio.schema.{api}.v{version}.response")
    error = ErrorCode.not_leader_or_follower if leaders else ErrorCode.none
    leader = res.LeaderIdAndEpoch(leader_id=1, leader_epoch=0)
    common = {"partition_index": 0, "error_code": error, "error_message": None, "current_leader": leader}
    if key == ApiKey.SHARE_FETCH:
        partition = res.PartitionData(
            **common,
            acknowledge_error_code=ErrorCode.none,
            acknowledge_error_message=None,
            records=b"\x00" * 61,
            acquired_records=(res.AcquiredRecords(first_offset=1, last_offset=1, delivery_count=1),),
        )
        topics = tuple(res.ShareFetchableTopicResponse(topic_id=i, partitions=(partition,)) for i in ids)
        cls = res.ShareFetchResponse
    else:
        partition = res.PartitionData(**common)
        topics = tuple(res.ShareAcknowledgeTopicResponse(topic_id=i, partitions=(partition,)) for i in ids)
        cls = res.ShareAcknowledgeResponse
    endpoints = tuple(res.NodeEndpoint(node_id=n, host=f"broker-{n}", port=9092, rack=None) for n in range(leaders))
    values = {
        "throttle_time": datetime.timedelta(0),
        "error_code": ErrorCode.none,
        "error_message": None,
        "acquisition_lock_timeout": datetime.timedelta(seconds=30),
        "responses": topics,
        "node_endpoints": endpoints,
    }
    fields = {f.name for f in dataclasses.fields(cls)}
    return response_frame(key, version, 5, cls(**{k: v for k, v in values.items() if k in fields}))
