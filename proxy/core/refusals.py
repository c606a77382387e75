"""Refusals in the shape of APIs whose responses have no top-level error code (sans-I/O).

Most APIs are refused with one error code in their top-level field (codec.error_response_body). These
carry an error per item only, so a refusal mirrors the request's items, each with the error, as a
broker answers a caller it does not authorize. Registered per API key; with one, an API can be
advertised to every caller and refused to those who may not use it.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol import codec
from ..protocol.apis import request_type, response_type

WRITE_TXN_MARKERS, ALTER_REPLICA_LOG_DIRS, ALTER_USER_SCRAM_CREDENTIALS = 27, 34, 51

Build = Callable[[Any, type, ErrorCode], Any]  # (request, response class, error) -> response


def _item(cls: type, name: str) -> type:
    return typing.get_args(typing.get_type_hints(cls)[name])[0]


def _partitions(cls: type, indexes: Any, error: ErrorCode) -> tuple[Any, ...]:
    return tuple(codec._empty(cls, partition_index=p, error_code=error) for p in indexes)


def _write_txn_markers(request: Any, cls: type, error: ErrorCode) -> Any:
    marker_cls = _item(cls, "markers")
    topic_cls = _item(marker_cls, "topics")
    partition_cls = _item(topic_cls, "partitions")
    return codec._empty(
        cls,
        markers=tuple(
            codec._empty(
                marker_cls,
                producer_id=m.producer_id,
                topics=tuple(
                    codec._empty(
                        topic_cls,
                        name=t.name,
                        partitions=tuple(
                            codec._empty(partition_cls, partition_index=p, error_code=error)
                            for p in t.partition_indexes
                        ),
                    )
                    for t in m.topics
                ),
            )
            for m in request.markers
        ),
    )


def _alter_replica_log_dirs(request: Any, cls: type, error: ErrorCode) -> Any:
    topic_cls = _item(cls, "results")
    partition_cls = _item(topic_cls, "partitions")
    return codec._empty(
        cls,
        results=tuple(
            codec._empty(
                topic_cls,
                topic_name=t.name,
                partitions=tuple(
                    codec._empty(partition_cls, partition_index=p, error_code=error) for p in t.partitions
                ),
            )
            for d in request.dirs
            for t in d.topics
        ),
    )


def _alter_user_scram_credentials(request: Any, cls: type, error: ErrorCode) -> Any:
    result_cls = _item(cls, "results")
    users = dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions))  # once each, in order
    return codec._empty(
        cls, results=tuple(codec._empty(result_cls, user=u, error_code=error, error_message=None) for u in users)
    )


PER_ITEM: dict[int, Build] = {
    WRITE_TXN_MARKERS: _write_txn_markers,
    ALTER_REPLICA_LOG_DIRS: _alter_replica_log_dirs,
    ALTER_USER_SCRAM_CREDENTIALS: _alter_user_scram_credentials,
}


def refusal_body(api_key: int, version: int, error: int, frame: Any, body_offset: int) -> bytes | None:
    """The response refusing every item of this request, or None when the API has no such shape."""
    build = PER_ITEM.get(api_key)
    if build is None:
        return None
    request, _ = codec.decode(request_type(api_key, version), frame, body_offset)
    return codec.encode(build(request, response_type(api_key, version), ErrorCode(error)))
