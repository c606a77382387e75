"""Configs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and ListConfigResources (KIP-1142)."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from ...catalogue import spec
from ...protocol import codec, name_rules
from ...protocol.apikey import ApiKey
from ...quoting import cut, shown
from ..engine import LocalAnswer, TenantCall, TenantEngine
from .calls import NOT_OWNER, acl_allows, response_cls

log = logging.getLogger(__name__)

TOPIC, GROUP = 2, 32  # config resource types


# -- Configs --------------------------------------------------------------------------------------------


OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def configs_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on the VC's topics and groups, each
    resource checked as Kafka does before the broker sees it: the ACL first (ApiKey.DESCRIBE_CONFIGS or
    ApiKey.ALTER_CONFIGS on the topic or group: TOPIC_/GROUP_AUTHORIZATION_FAILED), then for changes to a
    topic its ownership (only the VC that owns a shared topic may reconfigure it) and the VC's topic
    policy (POLICY_VIOLATION naming the key, as Kafka's AlterConfigPolicy). A refused resource goes to
    the broker as a topic that exists nowhere, so the answer keeps the API's shape; its error is set
    on the way back (configs_response)."""
    refused: dict[str, tuple[int, str, int, str | None]] = {}  # placeholder -> (type, name, error, message)
    alter = ex.api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)
    # Kafka's internal topics are described with their configs (kafka-topics --describe asks for every
    # listed topic's), never reconfigured: an alter names a topic that exists nowhere.
    ex.tx.describe_internal = not alter
    resources = []
    for resource in body.resources:
        rtype, name = int(resource.resource_type), resource.resource_name
        why = _config_refusal(engine, ex, rtype, name, resource, alter)
        if why is not None:
            fake = f"{uuid.uuid4()}.refused"
            refused[fake] = (rtype, name, *why)
            rtype, name = TOPIC, fake
        elif rtype == TOPIC:
            name = ex.tx.topic(name)
        else:
            name = engine.vc.physical_group(name)
        resources.append(dataclasses.replace(resource, resource_type=i8(rtype), resource_name=name))
    ex.state["refused"] = refused
    return dataclasses.replace(body, resources=tuple(resources))


def _config_refusal(
    engine: TenantEngine, ex: TenantCall, rtype: int, name: str, resource: Any, alter: bool
) -> tuple[int, str | None] | None:
    if rtype not in (TOPIC, GROUP):
        # Broker, logger and client-metrics configs describe the physical cluster: never forwarded.
        return int(ErrorCode.cluster_authorization_failed), "not available in a virtual cluster"
    kind = "topic" if rtype == TOPIC else "group"
    if not acl_allows(ex, kind, name):
        error = ErrorCode.topic_authorization_failed if rtype == TOPIC else ErrorCode.group_authorization_failed
        return int(error), None  # Kafka's words: the error's own message
    api = spec(ex.api_key)
    invalid = name_rules.resource_refusal(api.name_rules if api is not None else (), rtype, name)
    if invalid is not None:  # Kafka's check of the name as sent (renamed, the empty one would be legal)
        return int(invalid[0]), invalid[1]
    if rtype != TOPIC or not alter:
        return None
    physical = engine.vc.physical_topic(name)
    if physical is None:
        return None  # unknown: the broker answers UNKNOWN_TOPIC_OR_PARTITION for the placeholder
    if not engine.image.owns(engine.vc, physical):
        return int(ErrorCode.topic_authorization_failed), NOT_OWNER.format(name=name)
    if ex.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        ops = (OP_SET, OP_APPEND)  # a value to check; DELETE and SUBTRACT need the key settable only
        changes = [(c.name, c.value if int(c.config_operation) in ops else None) for c in resource.configs]
    else:
        changes = [(c.name, c.value) for c in resource.configs]
    unknown = engine.topic_policy.unknown_config(changes)
    if unknown is not None:
        return int(ErrorCode.invalid_config), unknown
    why = engine.topic_policy.configs_refusal(changes)
    if why is not None:
        log.info("virtual cluster %s: config change of topic %s refused: %s", engine.vc.name, shown(name), cut(why))
        return int(ErrorCode.policy_violation), why
    return None


def configs_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    field_name = "results" if hasattr(body, "results") else "responses"
    refused = ex.state["refused"]
    out = []
    for result in getattr(body, field_name):
        rtype, name = int(result.resource_type), result.resource_name
        if name in refused:
            rtype, name, error, message = refused[name]
            result = dataclasses.replace(
                result,
                error_code=ErrorCode(error),
                error_message=message,
                **({"configs": ()} if hasattr(result, "configs") else {}),
            )
        elif rtype == TOPIC:
            name = ex.tx.virtual_topic(name)
        elif rtype == GROUP:
            name = ex.tx.to_virtual("group", name)
        out.append(dataclasses.replace(result, resource_type=i8(rtype), resource_name=name))
    return dataclasses.replace(body, **{field_name: tuple(out)})


# -- ListConfigResources (KIP-1142) -----------------------------------------------------------------------


def list_config_resources_request(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    """A VC lists only its topics and groups; broker, logger and client-metrics resources are the
    physical cluster's. v0 lists client-metrics resources only: nothing for a VC."""
    if not hasattr(body, "resource_types"):
        raise LocalAnswer(codec._empty(response_cls(ex)))
    wanted = [int(t) for t in body.resource_types] or [TOPIC, GROUP]
    kept = tuple(i8(t) for t in wanted if t in (TOPIC, GROUP))
    if not kept:
        raise LocalAnswer(codec._empty(response_cls(ex)))
    return dataclasses.replace(body, resource_types=kept)


def list_config_resources_response(engine: TenantEngine, ex: TenantCall, body: Any) -> Any:
    out = []
    for resource in body.config_resources:
        kind = {TOPIC: "topic", GROUP: "group"}.get(int(getattr(resource, "resource_type", -1)))
        if kind is not None and ex.tx.visible(kind, resource.resource_name):
            out.append(dataclasses.replace(resource, resource_name=ex.tx.to_virtual(kind, resource.resource_name)))
    return dataclasses.replace(body, config_resources=tuple(out))
