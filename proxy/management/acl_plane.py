"""CreateAcls, DescribeAcls and DeleteAcls inside a virtual cluster, answered by the proxy (sans-I/O).

The bindings are the VC's own, in its own names, stored as state-topic records (proxy/acl/model.py).
Who may manage them: super users of the VC (the config's super admins and the VC's admins), and
principals an explicit ACL allows ALTER (create, delete) or DESCRIBE (describe) on the VC's cluster
resource. Unlike other operations, the VC's no-ACL default never grants these: an ordinary member
of an open VC cannot hand out permissions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from ..acl.model import (
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    AclSet,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    Subject,
    acl_record,
)
from ..protocol import entities
from ..protocol.apikey import ApiKey
from ..protocol.apis import response_type
from ..tenancy.limits import MAX_ACLS, Room, count_refusal, record_size_refusal

Record = tuple[str, dict[str, Any] | None]


def may_manage(acls: AclSet, who: Subject, op: Operation) -> bool:
    """ALTER (create, delete) or DESCRIBE on the VC's cluster, granted to super users or by an explicit ACL."""
    return who.super_user or Authorizer(acls, allow_if_no_acl=False).allows(who, op, ResourceType.CLUSTER, CLUSTER_NAME)


def handle(
    vc_name: str, acls: AclSet, who: Subject, api_key: int, version: int, request: Any, room: Room | None = None
) -> tuple[Any, list[Record]]:
    """`room`: the VC's state limits (proxy/tenancy/limits.py); None: the defaults, on an empty state."""
    cls = response_type(api_key, version)
    if api_key == ApiKey.DESCRIBE_ACLS:
        return _describe(acls, who, cls, request), []
    if api_key == ApiKey.CREATE_ACLS:
        return _create(vc_name, acls, who, cls, request, room or Room())
    return _delete(vc_name, acls, who, cls, request)


def filter_of(item: Any, prefix: str = "") -> AclFilter:
    # DescribeAcls names its fields *_filter; DeleteAcls' filters do too. v0 has no pattern type: LITERAL.
    pattern = getattr(item, "pattern_type_filter", int(PatternType.LITERAL))
    return AclFilter(
        ResourceType(int(item.resource_type_filter)),
        item.resource_name_filter,
        PatternType(int(pattern)),
        item.principal_filter,
        item.host_filter,
        Operation(int(item.operation)),
        Permission(int(item.permission_type)),
    ).validate()


def binding_of(item: Any, cluster_wide: bool = False) -> AclBinding:
    pattern = getattr(item, "resource_pattern_type", int(PatternType.LITERAL))
    return AclBinding(
        ResourceType(int(item.resource_type)),
        item.resource_name,
        PatternType(int(pattern)),
        item.principal,
        item.host,
        Operation(int(item.operation)),
        Permission(int(item.permission_type)),
    ).validate(cluster_wide)


def _describe(acls: AclSet, who: Subject, cls: type, request: Any) -> Any:
    if not may_manage(acls, who, Operation.DESCRIBE):
        return entities.build(
            cls,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message="not authorized to describe ACLs in this virtual cluster",
            resources=(),
        )
    try:
        flt = filter_of(request)
    except (AclError, ValueError) as exc:
        return entities.build(cls, error_code=ErrorCode.invalid_request, error_message=str(exc), resources=())
    resource_cls = entities.item_type(cls, "resources")
    acl_cls = entities.item_type(resource_cls, "acls")
    grouped: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for b in acls.matching(flt):
        grouped.setdefault((b.resource_type, b.name, b.pattern), []).append(b)
    resources = tuple(
        entities.build(
            resource_cls,
            resource_type=i8(rtype),
            resource_name=name,
            pattern_type=i8(pattern),
            acls=tuple(
                acl_cls(principal=b.principal, host=b.host, operation=i8(b.operation), permission_type=i8(b.permission))
                for b in bindings
            ),
        )
        for (rtype, name, pattern), bindings in grouped.items()
    )
    return entities.build(cls, error_code=ErrorCode.none, error_message=None, resources=resources)


def _create(vc_name: str, acls: AclSet, who: Subject, cls: type, request: Any, room: Room) -> tuple[Any, list[Record]]:
    result_cls = entities.item_type(cls, "results")
    allowed = may_manage(acls, who, Operation.ALTER)
    results = []
    records: list[Record] = []
    planned: set[AclBinding] = set()
    for item in request.creations:
        code, message = ErrorCode.none, None
        if not allowed:
            code, message = (
                ErrorCode.cluster_authorization_failed,
                "not authorized to create ACLs in this virtual cluster",
            )
        else:
            try:
                binding = binding_of(item)
            except (AclError, ValueError) as exc:
                code, message = ErrorCode.invalid_request, str(exc)
            else:
                if binding not in acls and binding not in planned:  # creating an existing binding succeeds
                    record = acl_record(vc_name, binding, True)
                    why = (
                        count_refusal(MAX_ACLS, room.limits.max_acls, len(acls) + len(planned))
                        or record_size_refusal(record, room.limits)
                        or room.total_refusal(len(planned) + 1)
                    )
                    if why is not None:
                        code, message = ErrorCode.policy_violation, why
                    else:
                        planned.add(binding)
                        records.append(record)
        results.append(entities.build(result_cls, error_code=ErrorCode(code), error_message=message))
    return entities.build(cls, results=tuple(results)), records


def _delete(vc_name: str, acls: AclSet, who: Subject, cls: type, request: Any) -> tuple[Any, list[Record]]:
    result_cls = entities.item_type(cls, "filter_results")
    match_cls = entities.item_type(result_cls, "matching_acls")
    allowed = may_manage(acls, who, Operation.ALTER)
    results = []
    gone: dict[AclBinding, None] = {}
    for item in request.filters:
        if not allowed:
            results.append(
                entities.build(
                    result_cls,
                    error_code=ErrorCode.cluster_authorization_failed,
                    error_message="not authorized to delete ACLs in this virtual cluster",
                    matching_acls=(),
                )
            )
            continue
        try:
            flt = filter_of(item)
        except (AclError, ValueError) as exc:
            results.append(
                entities.build(
                    result_cls, error_code=ErrorCode.invalid_request, error_message=str(exc), matching_acls=()
                )
            )
            continue
        matched = acls.matching(flt)
        gone.update(dict.fromkeys(matched))
        results.append(
            entities.build(
                result_cls,
                error_code=ErrorCode.none,
                error_message=None,
                matching_acls=tuple(_matching(match_cls, matched)),
            )
        )
    records = [acl_record(vc_name, b, False) for b in gone]
    return entities.build(cls, filter_results=tuple(results)), records


def _matching(match_cls: type, bindings: Iterable[AclBinding]) -> Iterable[Any]:
    for b in bindings:
        yield entities.build(match_cls, error_code=ErrorCode.none, error_message=None, **b.wire())
