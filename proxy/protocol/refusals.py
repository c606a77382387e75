"""Refusals in the shape of APIs whose responses carry an error per item (sans-I/O).

Most APIs are refused with one error code in their top-level field (codec.error_response_body). These
carry an error per item (DescribeUserScramCredentials: at the top as well), so a refusal mirrors the
request's items, each with the error, as a broker answers a caller it does not authorize. Each builder is
registered in its API's spec (proxy/catalogue.py, `refuse_items`); with one, an API can be advertised to
every caller and refused to those who may not use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from . import codec, entities
from .apikey import ApiKey
from .codec import CLUSTER_AUTHORIZATION_MESSAGE

Build = Callable[[Any, type, ErrorCode], Any]  # (request, response class, error) -> response


def _partitions(cls: type, indexes: Any, error: ErrorCode) -> tuple[Any, ...]:
    return tuple(codec._empty(cls, partition_index=p, error_code=error) for p in indexes)


def write_txn_markers(request: Any, cls: type, error: ErrorCode) -> Any:
    marker_cls = entities.item_type(cls, "markers")
    topic_cls = entities.item_type(marker_cls, "topics")
    partition_cls = entities.item_type(topic_cls, "partitions")
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


def alter_replica_log_dirs(request: Any, cls: type, error: ErrorCode) -> Any:
    topic_cls = entities.item_type(cls, "results")
    partition_cls = entities.item_type(topic_cls, "partitions")
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


def alter_user_scram_credentials(request: Any, cls: type, error: ErrorCode) -> Any:
    result_cls = entities.item_type(cls, "results")
    users = dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions))  # once each, in order
    return codec._empty(
        cls, results=tuple(codec._empty(result_cls, user=u, error_code=error, error_message=None) for u in users)
    )


def describe_user_scram_credentials(request: Any, cls: type, error: ErrorCode) -> Any:
    """Kafka's refusal (DescribeUserScramCredentialsRequest.getErrorResponse): the error at the top and in
    one result per asked user, whose name is left empty, byte for byte what a client gets from the broker
    (tests/integration/test_equivalence.py compares them)."""
    result_cls = entities.item_type(cls, "results")
    item = codec._empty(result_cls, user="", error_code=error, error_message=None, credential_infos=())
    return codec._empty(cls, error_code=error, error_message=None, results=tuple(item for _ in request.users or ()))


def create_topics(request: Any, cls: type, error: ErrorCode) -> Any:
    item = entities.item_type(cls, "topics")
    return codec._empty(
        cls,
        topics=tuple(
            entities.build(item, name=t.name, error_code=error, num_partitions=-1, replication_factor=-1)
            for t in request.topics
        ),
    )


def delete_topics(request: Any, cls: type, error: ErrorCode) -> Any:
    import uuid

    item = entities.item_type(cls, "responses")
    asked = (
        [(t.name, t.topic_id) for t in request.topics]
        if getattr(request, "topics", None)
        else [(n, None) for n in getattr(request, "topic_names", ())]
    )
    return codec._empty(
        cls,
        responses=tuple(
            entities.build(item, name=n, topic_id=i or uuid.UUID(int=0), error_code=error) for n, i in asked
        ),
    )


def delete_records(request: Any, cls: type, error: ErrorCode) -> Any:
    topic_cls = entities.item_type(cls, "topics")
    partition_cls = entities.item_type(topic_cls, "partitions")
    return codec._empty(
        cls,
        topics=tuple(
            entities.build(
                topic_cls,
                name=t.name,
                partitions=tuple(
                    entities.build(partition_cls, partition_index=p.partition_index, low_watermark=-1, error_code=error)
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )


def create_acls(request: Any, cls: type, error: ErrorCode) -> Any:
    item = entities.item_type(cls, "results")
    return codec._empty(cls, results=tuple(entities.build(item, error_code=error) for _ in request.creations))


def delete_acls(request: Any, cls: type, error: ErrorCode) -> Any:
    item = entities.item_type(cls, "filter_results")
    return codec._empty(cls, filter_results=tuple(entities.build(item, error_code=error) for _ in request.filters))


def configs(request: Any, cls: type, error: ErrorCode) -> Any:
    name = "results" if "results" in entities.field_names(cls) else "responses"
    item = entities.item_type(cls, name)
    resources = tuple(
        entities.build(item, resource_type=r.resource_type, resource_name=r.resource_name, error_code=error)
        for r in request.resources
    )
    return codec._empty(cls, **{name: resources})


def create_partitions(request: Any, cls: type, error: ErrorCode) -> Any:
    item = entities.item_type(cls, "results")
    return codec._empty(cls, results=tuple(entities.build(item, name=t.name, error_code=error) for t in request.topics))


SHARE_STATE_KEYS = (
    ApiKey.INITIALIZE_SHARE_GROUP_STATE,
    ApiKey.READ_SHARE_GROUP_STATE,
    ApiKey.WRITE_SHARE_GROUP_STATE,
    ApiKey.DELETE_SHARE_GROUP_STATE,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
)


def share_state(request: Any, cls: type, error: ErrorCode) -> Any:
    """The share-state APIs (KIP-932) are for brokers (CLUSTER_ACTION); a broker refuses any other caller per
    partition, each result naming its topic id and partition with the error and the error's message."""
    result_cls = entities.item_type(cls, "results")
    partition_cls = entities.item_type(result_cls, "partitions")
    message = CLUSTER_AUTHORIZATION_MESSAGE if error == ErrorCode.cluster_authorization_failed else None
    return codec._empty(
        cls,
        results=tuple(
            codec._empty(
                result_cls,
                topic_id=t.topic_id,
                partitions=tuple(
                    codec._empty(partition_cls, partition=p.partition, error_code=error, error_message=message)
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )
