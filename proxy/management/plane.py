"""The KIP-1134 management plane, sans-I/O: a request entity and who asks in; the response entity and
the state records to write out. The proxy writes the records durably before the answer leaves, and
every replica applies them from the state topic (docs/management.md).

Who may do what:
* super-admins (`tenancy.super_admins`; the KIP's *_CLUSTER operations on kafka-cluster): everything;
* a VC's admins (its `admins`; the KIP's *_VIRTUAL_CLUSTER operations): list (their VCs only), describe
  and alter their VC, within bounds that keep it from reaching outside the VC: users, client ids and
  admins of the VC, removals, and topic links to physical topics already in the VC (aliases). Linking a
  physical topic not yet in the VC, or assigning an existing group or transactional id, would reach
  another tenant's data: super-admins only; and the VC-scoped ACLs of their VCs (the ACL RPCs);
* anyone else: CLUSTER_AUTHORIZATION_FAILED, never saying whether a VC they may not see exists.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.static.primitive import i8, i16

from ..acl import plane as acl_plane
from ..acl.model import AclBinding, AclError, acl_record
from ..tenancy.model import (
    RESERVED_VC_NAMES,
    TenancyError,
    TenancyImage,
    admin_record,
    client_record,
    group_record,
    link_record,
    principal_record,
    txn_record,
    validate_link_name,
    validate_vc_name,
    vc_delete,
    vc_record,
)
from . import schema as m

Record = tuple[str, dict[str, Any] | None]

NONE = 0
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92

_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PRINCIPAL = re.compile(r"^[^:\s]+:\S.*$")


@dataclass(frozen=True)
class Caller:
    principal: str | None
    super_admin: bool
    super_admins: frozenset[str] = frozenset()  # never bound into a VC (they would lose the physical view)


def administered(image: TenancyImage, caller: Caller) -> list[str]:
    """The VCs this caller may see: all for super-admins, else those it administers."""
    if caller.super_admin:
        return sorted(image.vcs)
    return sorted(name for name, vc in image.vcs.items() if caller.principal in vc.admins)


def advertised(image: TenancyImage, caller: Caller) -> set[int]:
    """The management API keys this caller may use (ApiVersions shows only these)."""
    if caller.super_admin:
        return set(m.KEYS)
    if administered(image, caller):
        return {m.LIST_VIRTUAL_CLUSTERS, m.DESCRIBE_VIRTUAL_CLUSTERS, m.ALTER_VIRTUAL_CLUSTERS, *m.ACL_KEYS}
    return set()


def handle(image: TenancyImage, caller: Caller, request: Any) -> tuple[Any, list[Record]]:
    handler = _HANDLERS[type(request)]
    return handler(image, caller, request)


class _Refused(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _check(fn: Callable[[], None]) -> tuple[int, str | None]:
    try:
        fn()
    except _Refused as refused:
        return refused.code, refused.message
    except TenancyError as exc:
        return INVALID_REQUEST, str(exc)
    return NONE, None


# -- Create / Delete / List / Describe --------------------------------------------------------------------


def _create(image: TenancyImage, caller: Caller, request: m.CreateVirtualClustersRequest) -> tuple[Any, list[Record]]:
    records: list[Record] = []
    results = []
    planned: set[str] = set()
    for item in request.virtual_clusters:
        name = item.name

        def check(name: str = name) -> None:
            if not caller.super_admin:
                raise _Refused(CLUSTER_AUTHORIZATION_FAILED, "only super-admins may create virtual clusters")
            validate_vc_name(name)
            if name in image.vcs or name in planned:
                raise _Refused(DUPLICATE_RESOURCE, f"virtual cluster {name!r} exists")

        code, message = _check(check)
        if code == NONE:
            planned.add(name)
            records.append(vc_record(name))
        results.append(m.CreatableVirtualClustersResult(name=name, error_code=i16(code), error_message=message))
    return m.CreateVirtualClustersResponse(virtual_clusters=tuple(results)), [] if request.validate_only else records


def _delete(image: TenancyImage, caller: Caller, request: m.DeleteVirtualClustersRequest) -> tuple[Any, list[Record]]:
    records: list[Record] = []
    results = []
    for item in request.virtual_clusters:
        name = item.name

        def check(name: str = name) -> None:
            if not caller.super_admin:
                raise _Refused(CLUSTER_AUTHORIZATION_FAILED, "only super-admins may delete virtual clusters")
            if name in RESERVED_VC_NAMES:
                raise _Refused(INVALID_REQUEST, f"{name!r} is reserved")
            vc = image.vcs.get(name)
            if vc is None:
                raise _Refused(RESOURCE_NOT_FOUND, f"no virtual cluster {name!r}")
            left = _contents(image, name)
            if left:
                raise _Refused(POLICY_VIOLATION, f"virtual cluster {name!r} is not empty: {left}; remove them first")

        code, message = _check(check)
        if code == NONE:
            records.extend(acl_record(name, b, False) for b in image.vcs[name].acls)  # its ACLs go with it
            records.extend(image.quotas.of_vc(name))  # and its quotas
            records.append(vc_delete(name))
        results.append(m.DeletableVirtualClusterResult(name=name, error_code=i16(code), error_message=message))
    return m.DeleteVirtualClustersResponse(responses=tuple(results)), [] if request.validate_only else records


def _contents(image: TenancyImage, name: str) -> str:
    vc = image.vcs[name]
    principals, client_ids = image.bound_to(name)
    counts = (
        ("user", len(principals)),
        ("client id", len(client_ids)),
        ("topic link", len(vc.links)),
        ("group", len(vc.groups)),
        ("transactional id", len(vc.txns)),
        ("admin", len(vc.admins)),
    )
    return ", ".join(f"{n} {what}{'s' if n != 1 else ''}" for what, n in counts if n)


def _list(image: TenancyImage, caller: Caller, request: m.ListVirtualClustersRequest) -> tuple[Any, list[Record]]:
    names = administered(image, caller)
    if not names and not caller.super_admin:
        return m.ListVirtualClustersResponse(error_code=i16(CLUSTER_AUTHORIZATION_FAILED)), []
    listed = tuple(m.ListedVirtualCluster(name=n) for n in names)
    return m.ListVirtualClustersResponse(virtual_clusters=listed), []


def _describe(
    image: TenancyImage, caller: Caller, request: m.DescribeVirtualClustersRequest
) -> tuple[Any, list[Record]]:
    visible = set(administered(image, caller))
    results = []
    for item in request.virtual_clusters:
        name = item.name
        vc = image.vcs.get(name)
        if name not in visible:
            code = RESOURCE_NOT_FOUND if caller.super_admin else CLUSTER_AUTHORIZATION_FAILED
            why = f"no virtual cluster {name!r}" if caller.super_admin else "not authorized"
            results.append(m.VirtualClusterResults(name=name, error_code=i16(code), error_message=why))
            continue
        assert vc is not None
        principals, client_ids = image.bound_to(name)
        links = tuple(
            m.TopicLink(link_name=link, physical_name=physical) for link, physical in sorted(vc.links.items())
        )
        results.append(
            m.VirtualClusterResults(
                name=name,
                topic_links=links,
                users=tuple(principals),
                client_ids=tuple(client_ids),
                transactional_ids=tuple(sorted(vc.txns)),
                consumer_groups=tuple(sorted(vc.groups)),
                cluster_id=vc.cluster_id,
                admins=tuple(sorted(vc.admins)),
            )
        )
    return m.DescribeVirtualClustersResponse(virtual_clusters=tuple(results)), []


# -- Alter -----------------------------------------------------------------------------------------------


@dataclass
class _Plan:
    """The image as the earlier items of one Alter request leave it (items apply in order)."""

    image: TenancyImage
    principals: dict[str, str | None] = field(default_factory=dict)
    client_ids: dict[str, str | None] = field(default_factory=dict)
    links: dict[tuple[str, str], str | None] = field(default_factory=dict)
    groups: dict[str, str | None] = field(default_factory=dict)
    txns: dict[str, str | None] = field(default_factory=dict)
    admins: dict[tuple[str, str], bool] = field(default_factory=dict)

    def principal(self, p: str) -> str | None:
        return self.principals[p] if p in self.principals else self.image.principals.get(p)

    def client(self, c: str) -> str | None:
        return self.client_ids[c] if c in self.client_ids else self.image.client_ids.get(c)

    def link(self, vc: str, link: str) -> str | None:
        return self.links[(vc, link)] if (vc, link) in self.links else self.image.vcs[vc].links.get(link)

    def in_vc(self, vc: str, physical: str) -> bool:
        current = {lk: p for lk, p in self.image.vcs[vc].links.items()}
        for (v, lk), p in self.links.items():
            if v == vc:
                if p is None:
                    current.pop(lk, None)
                else:
                    current[lk] = p
        return physical in current.values()

    def group(self, g: str) -> str | None:
        return self.groups[g] if g in self.groups else self.image.group_owners.get(g)

    def txn(self, t: str) -> str | None:
        return self.txns[t] if t in self.txns else self.image.txn_owners.get(t)

    def admin(self, vc: str, p: str) -> bool:
        return self.admins[(vc, p)] if (vc, p) in self.admins else p in self.image.vcs[vc].admins


def _principal(name: str) -> str:
    principal = name if ":" in name else f"User:{name}"
    if not _PRINCIPAL.match(principal):
        raise _Refused(INVALID_REQUEST, f"{name!r} is not a principal (Type:name)")
    return principal


def _alter(image: TenancyImage, caller: Caller, request: m.AlterVirtualClustersRequest) -> tuple[Any, list[Record]]:
    plan = _Plan(image)
    visible = set(administered(image, caller))
    records: list[Record] = []
    results = []
    for vc_data in request.virtual_cluster:
        name = vc_data.name
        items = []
        for resource in vc_data.resources:
            out: list[Record] = []

            def check(resource: Any = resource, out: list[Record] = out, name: str = name) -> None:
                if name not in visible:
                    if caller.super_admin:
                        raise _Refused(RESOURCE_NOT_FOUND, f"no virtual cluster {name!r}")
                    raise _Refused(CLUSTER_AUTHORIZATION_FAILED, "not authorized")
                out.extend(_alter_one(plan, caller, name, resource))

            code, message = _check(check)
            if code == NONE:
                records += out
            items.append(
                m.VirtualClusterResourceResult(
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    resource_operation=resource.resource_operation,
                    link_name=resource.link_name,
                    error_code=i16(code),
                    error_message=message,
                )
            )
        results.append(m.VirtualClusterDataResult(name=name, resources=tuple(items)))
    return m.AlterVirtualClustersResponse(virtual_cluster=tuple(results)), [] if request.validate_only else records


def _alter_one(plan: _Plan, caller: Caller, vc: str, resource: Any) -> list[Record]:
    try:
        kind = m.ResourceType(int(resource.resource_type))
        op = m.ResourceOperation(int(resource.resource_operation))
    except ValueError:
        raise _Refused(INVALID_REQUEST, "unknown resource type or operation") from None
    add = op is m.ResourceOperation.ADD
    value = resource.resource_name

    def super_only(what: str) -> None:
        if not caller.super_admin:
            raise _Refused(CLUSTER_AUTHORIZATION_FAILED, f"only super-admins may {what}")

    if kind in (m.ResourceType.USER, m.ResourceType.ADMIN):
        principal = _principal(value)
        if kind is m.ResourceType.ADMIN:
            if plan.admin(vc, principal) == add:
                raise _Refused(
                    DUPLICATE_RESOURCE if add else RESOURCE_NOT_FOUND,
                    f"{principal} is {'already' if add else 'not'} an admin of {vc!r}",
                )
            plan.admins[(vc, principal)] = add
            return [admin_record(vc, principal, add)]
        return _bind(plan, caller, vc, principal, add, plan.principal, plan.principals, principal_record, "user")
    if kind is m.ResourceType.CLIENT:
        if not value:
            raise _Refused(INVALID_REQUEST, "a client id must not be empty")
        return _bind(plan, caller, vc, value, add, plan.client, plan.client_ids, client_record, "client id")
    if kind is m.ResourceType.TOPIC:
        if not _TOPIC.match(value) or value in (".", ".."):
            raise _Refused(INVALID_REQUEST, f"{value!r} is not a legal topic name")
        link = resource.link_name or value
        validate_link_name(link)
        current = plan.link(vc, link)
        if add:
            if current is not None:
                raise _Refused(DUPLICATE_RESOURCE, f"{vc!r} already has a topic link {link!r}")
            if not plan.in_vc(vc, value):
                super_only("link a physical topic that is not yet in the virtual cluster")
            plan.links[(vc, link)] = value
            return [link_record(vc, link, value)]
        if current != value:
            raise _Refused(RESOURCE_NOT_FOUND, f"{vc!r} has no topic link {link!r} to {value!r}")
        plan.links[(vc, link)] = None
        return [link_record(vc, link, None)]
    # GROUP, TRANSACTIONAL_ID: an existing physical id used by the VC under the same name.
    group = kind is m.ResourceType.GROUP
    what = "group" if group else "transactional id"
    if not value:
        raise _Refused(INVALID_REQUEST, f"a {what} must not be empty")
    owner = plan.group(value) if group else plan.txn(value)
    table = plan.groups if group else plan.txns
    record = group_record if group else txn_record
    if add:
        super_only(f"assign an existing {what}")
        if owner == vc:
            raise _Refused(DUPLICATE_RESOURCE, f"{what} {value!r} is already in {vc!r}")
        if owner is not None or _prefixed(plan.image, value):
            raise _Refused(DUPLICATE_RESOURCE, f"{what} {value!r} belongs to another virtual cluster")
        table[value] = vc
        return [record(vc, value, True)]
    if owner != vc:
        raise _Refused(RESOURCE_NOT_FOUND, f"{what} {value!r} is not assigned to {vc!r}")
    table[value] = None
    return [record(vc, value, False)]


def _prefixed(image: TenancyImage, value: str) -> bool:
    """Another VC's own (prefixed) group or transactional id."""
    return any(value.startswith(vc.prefix) for vc in image.vcs.values())


def _bind(
    plan: _Plan,
    caller: Caller,
    vc: str,
    value: str,
    add: bool,
    current: Callable[[str], str | None],
    table: dict[str, str | None],
    record: Callable[[str, str | None], Record],
    what: str,
) -> list[Record]:
    bound = current(value)
    if add:
        if bound == vc:
            raise _Refused(DUPLICATE_RESOURCE, f"{what} {value!r} is already in {vc!r}")
        if bound is not None:
            where = f" ({bound!r})" if caller.super_admin else ""
            raise _Refused(DUPLICATE_RESOURCE, f"{what} {value!r} is bound to another virtual cluster{where}")
        if what == "user" and value in caller.super_admins:
            raise _Refused(INVALID_REQUEST, "a super-admin cannot be bound to a virtual cluster")
        table[value] = vc
        return [record(value, vc)]
    if bound != vc:
        raise _Refused(RESOURCE_NOT_FOUND, f"{what} {value!r} is not in {vc!r}")
    table[value] = None
    return [record(value, None)]


# -- VC-scoped ACLs for operators (Describe/Create/DeleteVirtualClusterAcls) ------------------------------
# Kafka's ACL RPCs with the VC named in each item, for super-admins (bound to no VC, so Kafka's own ACL
# APIs reach the broker's ACLs) and a VC's admins. The bindings are checked and matched as Kafka's ACL
# APIs inside a VC check them (proxy/acl/plane.py); a prefixed VC pattern means every VC, among those
# the caller may manage, whose name starts with it, as they are now (a VC made later gets none).


def _acl_targets(image: TenancyImage, caller: Caller, name: str, pattern_type: int) -> list[str]:
    """The VCs one ACL item is about; _Refused if none the caller may manage."""
    try:
        pattern = m.VirtualClusterPatternType(int(pattern_type))
    except ValueError:
        raise _Refused(INVALID_REQUEST, "virtual cluster pattern type must be LITERAL (3) or PREFIXED (4)") from None
    visible = administered(image, caller)
    if pattern is m.VirtualClusterPatternType.LITERAL:
        if name in visible:
            return [name]
    else:
        matched = [vc for vc in visible if vc.startswith(name)]
        if matched:
            return matched
    if not caller.super_admin:
        raise _Refused(CLUSTER_AUTHORIZATION_FAILED, "not authorized")
    if name in RESERVED_VC_NAMES and pattern is m.VirtualClusterPatternType.LITERAL:
        raise _Refused(INVALID_REQUEST, f"{name!r} is the physical cluster: its ACLs are the broker's (kafka-acls)")
    what = "virtual cluster" if pattern is m.VirtualClusterPatternType.LITERAL else "virtual cluster starting with"
    raise _Refused(RESOURCE_NOT_FOUND, f"no {what} {name!r}")


def _acl_check(fn: Callable[[], None]) -> tuple[int, str | None]:
    """_check, with a binding or filter Kafka would refuse as INVALID_REQUEST."""
    try:
        return _check(fn)
    except (AclError, ValueError) as exc:
        return INVALID_REQUEST, str(exc)


def _describe_acls(
    image: TenancyImage, caller: Caller, request: m.DescribeVirtualClusterAclsRequest
) -> tuple[Any, list[Record]]:
    found: list[tuple[str, list[AclBinding]]] = []

    def check() -> None:
        vcs = _acl_targets(image, caller, request.virtual_cluster, request.virtual_cluster_pattern_type)
        flt = acl_plane.filter_of(request)
        found.extend((vc, image.vcs[vc].acls.matching(flt)) for vc in vcs)

    code, message = _acl_check(check)
    if code != NONE:
        return m.DescribeVirtualClusterAclsResponse(error_code=i16(code), error_message=message), []
    resources = []
    for vc, bindings in found:
        grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
        for b in bindings:
            grouped.setdefault((b.resource_type, b.name, b.pattern), []).append(b)
        resources += [
            m.DescribeVirtualClusterAclsResource(
                resource_type=i8(rtype),
                resource_name=name,
                pattern_type=i8(pattern),
                acls=tuple(
                    m.VirtualClusterAclDescription(
                        principal=b.principal, host=b.host, operation=i8(b.operation), permission_type=i8(b.permission)
                    )
                    for b in group
                ),
                virtual_cluster=vc,
            )
            for (rtype, name, pattern), group in grouped.items()
        ]
    return m.DescribeVirtualClusterAclsResponse(resources=tuple(resources)), []


def _create_acls(
    image: TenancyImage, caller: Caller, request: m.CreateVirtualClusterAclsRequest
) -> tuple[Any, list[Record]]:
    records: list[Record] = []
    planned: set[tuple[str, AclBinding]] = set()
    results = []
    for item in request.creations:
        out: list[Record] = []

        def check(item: Any = item, out: list[Record] = out) -> None:
            vcs = _acl_targets(image, caller, item.virtual_cluster, item.virtual_cluster_pattern_type)
            binding = acl_plane.binding_of(item)
            for vc in vcs:  # creating an existing binding succeeds, as in Kafka
                if binding not in image.vcs[vc].acls and (vc, binding) not in planned:
                    planned.add((vc, binding))
                    out.append(acl_record(vc, binding, True))

        code, message = _acl_check(check)
        if code == NONE:
            records += out
        results.append(m.VirtualClusterAclCreationResult(error_code=i16(code), error_message=message))
    return m.CreateVirtualClusterAclsResponse(results=tuple(results)), records


def _delete_acls(
    image: TenancyImage, caller: Caller, request: m.DeleteVirtualClusterAclsRequest
) -> tuple[Any, list[Record]]:
    gone: dict[tuple[str, AclBinding], None] = {}  # ordered: one record per binding, however many filters
    results = []
    for item in request.filters:
        matched: list[tuple[str, AclBinding]] = []

        def check(item: Any = item, matched: list[tuple[str, AclBinding]] = matched) -> None:
            vcs = _acl_targets(image, caller, item.virtual_cluster, item.virtual_cluster_pattern_type)
            flt = acl_plane.filter_of(item)
            matched.extend((vc, b) for vc in vcs for b in image.vcs[vc].acls.matching(flt))

        code, message = _acl_check(check)
        gone.update(dict.fromkeys(matched))
        results.append(
            m.DeleteVirtualClusterAclsFilterResult(
                error_code=i16(code),
                error_message=message,
                matching_acls=tuple(
                    m.DeleteVirtualClusterAclsMatchingAcl(**b.wire(), virtual_cluster=vc) for vc, b in matched
                ),
            )
        )
    return m.DeleteVirtualClusterAclsResponse(filter_results=tuple(results)), [
        acl_record(vc, b, False) for vc, b in gone
    ]


_HANDLERS: dict[type, Callable[[TenancyImage, Caller, Any], tuple[Any, list[Record]]]] = {
    m.CreateVirtualClustersRequest: _create,
    m.AlterVirtualClustersRequest: _alter,
    m.DeleteVirtualClustersRequest: _delete,
    m.ListVirtualClustersRequest: _list,
    m.DescribeVirtualClustersRequest: _describe,
    m.DescribeVirtualClusterAclsRequest: _describe_acls,
    m.CreateVirtualClusterAclsRequest: _create_acls,
    m.DeleteVirtualClusterAclsRequest: _delete_acls,
}
