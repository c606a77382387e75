"""API-specific tenant logic beyond field translation, one module per API family, registered here.

Request hooks run before the generic translation of annotated fields (so they may add *virtual*
names for it to translate) and may raise LocalAnswer; response hooks run before the reverse
translation (so they see physical names). Each handler is registered below, by the name tenant.yaml
gives it (checked both ways at load): this table is the one place a handler is tied to an API.
"""

from __future__ import annotations

import functools

from ...rules import tenant_rules
from ..engine import Handler, Registry
from . import configs, fetch, groups, metadata, streams, topics, transactions

HANDLERS: dict[str, Handler] = {
    "metadata": Handler(
        request=metadata.metadata_request, response=metadata.metadata_response, finish=metadata.metadata_finish
    ),
    "fetch": Handler(request=fetch.fetch_request, spliced=fetch.fetch_spliced, unseen=fetch.fetch_unseen),
    "replica_id": Handler(request=fetch.replica_id_request),
    "find_coordinator": Handler(request=groups.find_coordinator_request, response=groups.find_coordinator_response),
    "join_group": Handler(request=groups.join_group_request, response=groups.join_group_response),
    "sync_group": Handler(request=groups.sync_group_request, response=groups.sync_group_response),
    "describe_groups": Handler(response=groups.describe_groups_response),
    "consumer_group_heartbeat": Handler(request=groups.consumer_group_heartbeat_request),
    "share_group_heartbeat": Handler(request=groups.share_group_heartbeat_request),
    "group_assignment": Handler(request=groups.group_assignment_request),
    "streams_group_heartbeat": Handler(
        request=streams.streams_group_heartbeat_request, response=streams.streams_group_heartbeat_response
    ),
    "create_topics": Handler(
        request=topics.create_topics_request, response=topics.create_topics_response, finish=topics.create_topics_finish
    ),
    "delete_topics": Handler(
        request=topics.delete_topics_request, response=topics.delete_topics_response, finish=topics.delete_topics_finish
    ),
    "configs": Handler(request=configs.configs_request, response=configs.configs_response),
    "delete_records": Handler(request=topics.delete_records_request, response=topics.delete_records_response),
    "create_partitions": Handler(request=topics.create_partitions_request, response=topics.create_partitions_response),
    "describe_cluster": Handler(request=metadata.describe_cluster_request, response=metadata.describe_cluster_response),
    "describe_topic_partitions": Handler(
        request=metadata.describe_topic_partitions_request, response=metadata.describe_topic_partitions_response
    ),
    "list_config_resources": Handler(
        request=configs.list_config_resources_request, response=configs.list_config_resources_response
    ),
}

# Identifier kinds that need code (tenant.yaml's `kind` beyond translate.Translation's plain ones).
SPECIAL_KINDS = {
    "subscription": groups.subscription_kind,
    "assignment": groups.assignment_kind,
    "topic_regex": groups.topic_regex_kind,
    "txn_regex": transactions.txn_regex_kind,
}


@functools.cache
def registry() -> Registry:
    """The handlers and special kinds, checked against tenant.yaml (ValueError if they do not match)."""
    reg = Registry(HANDLERS, SPECIAL_KINDS)
    reg.check(tenant_rules(), schemas=False)
    return reg
