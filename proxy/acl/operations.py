"""Authorized-operations fields (KIP-430) in a virtual cluster, where the client asked for them (sans-I/O).

A broker fills them in for its own ACLs and the caller; inside a VC they say what the VC's ACLs allow the
caller, computed as a broker computes them. One fixer per API that has such fields, registered in the API's
`ApiSpec` (proxy/catalogue.py, `authorized_operations`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.static.primitive import i32

from .access import Access
from .model import CLUSTER_NAME, ResourceType

ALL_OPERATIONS_UNSET = -2147483648  # an authorized-operations field nobody asked for


def _ops(access: Access, rtype: ResourceType, name: str, current: int) -> i32:
    if int(current) == ALL_OPERATIONS_UNSET:
        return i32(ALL_OPERATIONS_UNSET)
    # As a broker computes it: every operation the resource type supports that the caller's ACLs allow
    # (for the cluster, the seven of acl.model.ALL_CLUSTER_OPERATIONS).
    return i32(access.authorizer.authorized_operations(access.who, rtype, name))


def metadata(access: Access, body: Any) -> Any:
    changes: dict[str, Any] = {}
    topics = getattr(body, "topics", ())
    if topics and hasattr(topics[0], "topic_authorized_operations"):
        changes["topics"] = tuple(
            dataclasses.replace(
                t,
                topic_authorized_operations=_ops(
                    access, ResourceType.TOPIC, t.name or "", t.topic_authorized_operations
                ),
            )
            for t in topics
        )
    if hasattr(body, "cluster_authorized_operations"):
        changes["cluster_authorized_operations"] = _ops(
            access, ResourceType.CLUSTER, CLUSTER_NAME, body.cluster_authorized_operations
        )
    return dataclasses.replace(body, **changes) if changes else body


def describe_cluster(access: Access, body: Any) -> Any:
    ops = _ops(access, ResourceType.CLUSTER, CLUSTER_NAME, body.cluster_authorized_operations)
    return dataclasses.replace(body, cluster_authorized_operations=ops)


def groups(access: Access, body: Any) -> Any:
    groups = tuple(
        dataclasses.replace(
            g, authorized_operations=_ops(access, ResourceType.GROUP, g.group_id, g.authorized_operations)
        )
        if hasattr(g, "authorized_operations")
        else g
        for g in body.groups
    )
    return dataclasses.replace(body, groups=groups)
