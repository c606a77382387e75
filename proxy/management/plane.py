"""The KIP-1134 management plane, sans-I/O: a request entity and who asks in; the response entity and
the state records to write out. The proxy writes the records durably before the answer leaves, and
every replica applies them from the state topic (docs/management.md).

Who may do what is ACLs (proxy/tenancy/rights.py, docs/security.md#rights): the KIP's *_VIRTUAL_CLUSTER
operations on CLUSTER resources in `kafka-cluster`'s own ACLs, the config's super-admins holding all.
* CREATE/DELETE/LIST/DESCRIBE_VIRTUAL_CLUSTER on a VC's name (or `kafka-cluster`: every VC);
* ALTER_VIRTUAL_CLUSTER on a VC: its users, client ids and admins, removals, topic links to physical
  topics already in the VC (aliases), its description and labels. What reaches beyond the VC (linking a
  physical topic not yet in it, assigning an existing group or transactional id, placing a principal
  that holds rights elsewhere, adding members to `kafka-cluster`, a VC's limits and other settings of its
  reach: proxy/management/vc_settings.py) needs ALTER_VIRTUAL_CLUSTER on `kafka-cluster`;
* no right lets its holder move a super-admin or another VC's member, widen its own rights, or remove
  the last holder of ALTER_VIRTUAL_CLUSTER on a VC;
* anyone else: CLUSTER_AUTHORIZATION_FAILED, never saying whether a VC they may not see exists.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16

from ..acl.model import (
    VC_OPERATIONS,
    AclBinding,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    acl_record,
)
from ..errors import Refusal
from ..protocol import management as m
from ..tenancy import limits, settings
from ..tenancy.model import (
    KAFKA_CLUSTER,
    RESERVED_VC_NAMES,
    TenancyError,
    TenancyImage,
    admin_record,
    client_record,
    group_record,
    link_record,
    principal_record,
    setting_delete,
    txn_record,
    validate_link_name,
    validate_vc_name,
    vc_delete,
    vc_record,
)
from ..tenancy.rights import ANONYMOUS, Caller, Rights, admin_bindings
from . import acl_plane
from .inventory import Listing, groups_of, named, own_groups, own_txns, txns_of
from .vc_settings import SettingsRefused, alter_settings

Record = tuple[str, dict[str, Any] | None]
Op = Operation


_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PRINCIPAL = re.compile(r"^[^:\s]+:\S.*$")


def administered(image: TenancyImage, caller: Caller, op: Operation = Op.LIST_VIRTUAL_CLUSTERS) -> list[str]:
    """The VCs on which this caller may do `op` (listing: those it may list)."""
    caller = caller.on(image)
    return sorted(name for name in image.vcs if caller.may(op, name))


def advertised(image: TenancyImage, caller: Caller) -> set[int]:
    """The management API keys this caller may use (ApiVersions shows only these): all of them for a
    principal holding any right, none for anyone else."""
    caller = caller.on(image)
    if caller.principal is not None and caller.rights.holds_any(caller.principal):
        return set(m.KEYS)
    return set()


def handle(
    image: TenancyImage,
    caller: Caller,
    request: Any,
    listing: Listing | None = None,
    unpurged: dict[str, str] | None = None,
) -> tuple[Any, list[Record]]:
    """`listing`: the broker's groups and transactional ids (Describe and Delete use it; None: not asked,
    as without an upstream). `unpurged`: VC -> why its groups could not be deleted (a forced Delete)."""
    caller = caller.on(image)
    if isinstance(request, m.DescribeVirtualClustersRequest):
        return _describe(image, caller, request, listing)
    if isinstance(request, m.DeleteVirtualClustersRequest):
        return _delete(image, caller, request, listing, unpurged or {})
    handler = _HANDLERS[type(request)]
    return handler(image, caller, request)


def needs_listing(image: TenancyImage, caller: Caller, request: Any) -> bool:
    """Whether answering `request` needs the broker's groups and transactional ids: a Describe or Delete
    of a VC that exists and that the caller may describe or delete (others are answered without)."""
    caller = caller.on(image)
    if isinstance(request, m.DescribeVirtualClustersRequest):
        op = Op.DESCRIBE_VIRTUAL_CLUSTER
    elif isinstance(request, m.DeleteVirtualClustersRequest):
        op = Op.DELETE_VIRTUAL_CLUSTER
    else:
        return False
    return any(vc.name in image.vcs and caller.may(op, vc.name) for vc in request.virtual_clusters)


def groups_to_purge(image: TenancyImage, request: Any, response: Any, listing: Listing) -> dict[str, list[str]]:
    """A forced Delete's VCs that would go, each with its own groups' physical ids (DeleteGroups upstream
    before the VC is deleted: once it is, nobody can name them any more)."""
    if not (isinstance(request, m.DeleteVirtualClustersRequest) and request.force) or request.validate_only:
        return {}
    out = {}
    for result in response.responses:
        vc = image.vcs.get(result.name)
        if int(result.error_code) == ErrorCode.none and vc is not None:
            groups = sorted(own_groups(vc, listing).values())
            if groups:
                out[vc.name] = groups
    return out


class _Refused(Refusal):
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
        return ErrorCode.invalid_request, str(exc)
    return ErrorCode.none, None


# -- Create / Delete / List / Describe --------------------------------------------------------------------


def _create(image: TenancyImage, caller: Caller, request: m.CreateVirtualClustersRequest) -> tuple[Any, list[Record]]:
    records: list[Record] = []
    results = []
    planned: set[str] = set()
    room = limits.room(image, None)
    for item in request.virtual_clusters:
        name = item.name

        def check(name: str = name) -> None:
            if not caller.may(Op.CREATE_VIRTUAL_CLUSTER, name):
                raise _Refused(ErrorCode.cluster_authorization_failed, "not authorized to create this virtual cluster")
            validate_vc_name(name)
            if name in image.vcs or name in planned:
                raise _Refused(ErrorCode.duplicate_resource, f"virtual cluster {name!r} exists")

            why = room.total_refusal(len(records) + 1)  # the VC's record
            if why is not None:
                raise _Refused(ErrorCode.policy_violation, why)

        code, message = _check(check)
        if code == ErrorCode.none:
            planned.add(name)
            records.append(vc_record(name))
        results.append(m.CreatableVirtualClustersResult(name=name, error_code=i16(code), error_message=message))
    return m.CreateVirtualClustersResponse(virtual_clusters=tuple(results)), [] if request.validate_only else records


def _delete(
    image: TenancyImage,
    caller: Caller,
    request: m.DeleteVirtualClustersRequest,
    listing: Listing | None = None,
    unpurged: dict[str, str] | None = None,
) -> tuple[Any, list[Record]]:
    records: list[Record] = []
    results = []
    for item in request.virtual_clusters:
        name = item.name

        def check(name: str = name) -> None:
            if name in RESERVED_VC_NAMES:
                raise _Refused(ErrorCode.invalid_request, f"{name!r} is reserved")
            if not caller.may(Op.DELETE_VIRTUAL_CLUSTER, name):
                raise _Refused(ErrorCode.cluster_authorization_failed, "not authorized")
            vc = image.vcs.get(name)
            if vc is None:
                raise _Refused(ErrorCode.resource_not_found, f"no virtual cluster {name!r}")
            left = _contents(image, name)
            if left:
                raise _Refused(
                    ErrorCode.policy_violation, f"virtual cluster {name!r} is not empty: {left}; remove them first"
                )
            _on_the_broker(vc, request.force, listing, (unpurged or {}).get(name))

        code, message = _check(check)
        if code == ErrorCode.none:
            records.extend(acl_record(name, b, False) for b in image.vcs[name].acls)  # its ACLs go with it
            # and rights on it; not its DENYs: deleting one gives back what it denied (to a later VC of the
            # same name, under a prefixed or cluster-wide grant), which only whoever holds that right may do
            records.extend(
                acl_record(KAFKA_CLUSTER, b, False)
                for b in _rights_on(image, name)
                if b.permission is not Permission.DENY
            )
            records.extend(image.quotas.of_vc(name))  # and its quotas
            records.extend(setting_delete(name, k) for k in image.vcs[name].settings)  # and its settings
            records.append(vc_delete(name))
        results.append(m.DeletableVirtualClusterResult(name=name, error_code=i16(code), error_message=message))
    return m.DeleteVirtualClustersResponse(responses=tuple(results)), [] if request.validate_only else records


def _on_the_broker(vc: Any, force: bool, listing: Listing | None, unpurged: str | None) -> None:
    """The VC's own groups and transactional ids (the broker's listing) refuse an unforced delete; a
    forced one deletes the groups first, and is refused if some could not be."""
    if listing is None:
        return
    if listing.error is not None:
        raise _Refused(
            ErrorCode.coordinator_not_available,
            f"cannot tell whether {vc.name!r} still has groups or transactional ids: {listing.error}",
        )
    groups, txns = sorted(own_groups(vc, listing)), sorted(own_txns(vc, listing))
    if (groups or txns) and not force:
        left = " and ".join(named(w, n) for w, n in (("group", groups), ("transactional id", txns)) if n)
        raise _Refused(
            ErrorCode.policy_violation,
            f"virtual cluster {vc.name!r} still has {left}; delete them first, or delete with force "
            "(which deletes the groups and their committed offsets)",
        )
    if unpurged is not None:
        raise _Refused(ErrorCode.policy_violation, unpurged)


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


def _rights_on(image: TenancyImage, vc: str) -> list[AclBinding]:
    """kafka-cluster's bindings about exactly this VC (a later VC of the same name must not inherit them)."""
    return [
        b
        for b in image.cluster_acls
        if b.resource_type is ResourceType.CLUSTER and b.pattern is PatternType.LITERAL and b.name == vc
    ]


def _list(image: TenancyImage, caller: Caller, request: m.ListVirtualClustersRequest) -> tuple[Any, list[Record]]:
    caller = caller.on(image)
    names = administered(image, caller)
    if not names and not caller.may(Op.LIST_VIRTUAL_CLUSTERS, KAFKA_CLUSTER):
        return m.ListVirtualClustersResponse(error_code=i16(ErrorCode.cluster_authorization_failed)), []
    listed = tuple(m.ListedVirtualCluster(name=n) for n in names)
    return m.ListVirtualClustersResponse(virtual_clusters=listed), []


def _describe(
    image: TenancyImage, caller: Caller, request: m.DescribeVirtualClustersRequest, listing: Listing | None = None
) -> tuple[Any, list[Record]]:
    results = []
    for item in request.virtual_clusters:
        name = item.name
        vc = image.vcs.get(name)
        if name == KAFKA_CLUSTER and caller.may(Op.DESCRIBE_VIRTUAL_CLUSTER, name):
            results.append(_describe_kafka_cluster(image, caller))
            continue
        if vc is None or not caller.may(Op.DESCRIBE_VIRTUAL_CLUSTER, name):
            everywhere = caller.may(Op.DESCRIBE_VIRTUAL_CLUSTER, KAFKA_CLUSTER)
            code = ErrorCode.resource_not_found if everywhere else ErrorCode.cluster_authorization_failed
            why = f"no virtual cluster {name!r}" if everywhere else "not authorized"
            results.append(m.DescribedVirtualCluster(name=name, error_code=i16(code), error_message=why))
            continue
        principals, client_ids = image.bound_to(name)
        links = tuple(
            m.VirtualClusterTopicLink(link_name=link, physical_name=physical)
            for link, physical in sorted(vc.links.items())
        )
        results.append(
            m.DescribedVirtualCluster(
                name=name,
                topic_links=links,
                users=tuple(principals),
                client_ids=tuple(client_ids),
                transactional_ids=tuple(txns_of(vc, listing)),
                consumer_groups=tuple(groups_of(vc, listing)),
                cluster_id=vc.cluster_id,
                admins=tuple(sorted(caller.rights.holders(Op.ALTER_VIRTUAL_CLUSTER, name) - _everywhere(caller))),
                error_message=_partial(listing),
                configs=tuple(
                    m.DescribedVirtualClusterConfig(name=k, value=settings.show(k, v))
                    for k, v in sorted(vc.settings.items())
                ),
            )
        )
    return m.DescribeVirtualClustersResponse(virtual_clusters=tuple(results)), []


def _partial(listing: Listing | None) -> str | None:
    """A describe whose broker listing failed still answers, saying what is missing."""
    if listing is None or listing.error is None:
        return None
    return f"groups and transactional ids: only those assigned are shown; the brokers' listing failed: {listing.error}"


def _everywhere(caller: Caller) -> set[str]:
    """Holders of ALTER_VIRTUAL_CLUSTER on kafka-cluster: operators, not any one VC's admins."""
    return caller.rights.holders(Op.ALTER_VIRTUAL_CLUSTER, KAFKA_CLUSTER)


def _describe_kafka_cluster(image: TenancyImage, caller: Caller) -> Any:
    """kafka-cluster, the physical cluster: its members (super-admins and those added) and operators."""
    members, _ = image.bound_to(KAFKA_CLUSTER)
    return m.DescribedVirtualCluster(
        name=KAFKA_CLUSTER,
        users=tuple(sorted(set(members) | caller.super_admins)),
        admins=tuple(sorted(_everywhere(caller) | caller.super_admins)),
    )


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
        if (vc, p) in self.admins:
            return self.admins[(vc, p)]
        granted = all(b in self.image.cluster_acls for b in admin_bindings(vc, p))
        return granted or p in self.image.vcs[vc].admins


def _principal(name: str) -> str:
    principal = name if ":" in name else f"User:{name}"
    if not _PRINCIPAL.match(principal):
        raise _Refused(ErrorCode.invalid_request, f"{name!r} is not a principal (Type:name)")
    return principal


def _alter(image: TenancyImage, caller: Caller, request: m.AlterVirtualClustersRequest) -> tuple[Any, list[Record]]:
    plan = _Plan(image)
    records: list[Record] = []
    results = []
    have = limits.record_count(image)
    for vc_data in request.virtual_clusters:
        name = vc_data.name
        items = []
        for resource in vc_data.resources:
            out: list[Record] = []

            def check(
                resource: Any = resource, out: list[Record] = out, name: str = name, records: list[Record] = records
            ) -> None:
                if not caller.may(Op.ALTER_VIRTUAL_CLUSTER, name):
                    raise _Refused(ErrorCode.cluster_authorization_failed, "not authorized")
                if name != KAFKA_CLUSTER and name not in image.vcs:
                    raise _Refused(ErrorCode.resource_not_found, f"no virtual cluster {name!r}")
                out.extend(_alter_one(plan, caller, name, resource))
                why = limits.records_refusal(image, [*records, *out], have)
                if why is not None:
                    raise _Refused(ErrorCode.policy_violation, why)

            code, message = _check(check)
            if code == ErrorCode.none:
                records += out
            items.append(
                m.VirtualClusterResourceResult(
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    resource_operation=resource.resource_operation,
                    physical_topic_name=resource.physical_topic_name,
                    error_code=i16(code),
                    error_message=message,
                )
            )
        configs_code, configs_message = ErrorCode.none, None
        if vc_data.configs:
            try:
                records += alter_settings(image, caller, name, vc_data.configs)
            except SettingsRefused as refused:
                configs_code, configs_message = refused.code, refused.message
        results.append(
            m.AlterableVirtualClusterResult(
                name=name,
                resources=tuple(items),
                configs_error_code=i16(configs_code),
                configs_error_message=configs_message,
            )
        )
    return m.AlterVirtualClustersResponse(virtual_clusters=tuple(results)), [] if request.validate_only else records


def _alter_one(plan: _Plan, caller: Caller, vc: str, resource: Any) -> list[Record]:
    try:
        kind = m.ResourceType(int(resource.resource_type))
        op = m.ResourceOperation(int(resource.resource_operation))
    except ValueError:
        raise _Refused(ErrorCode.invalid_request, "unknown resource type or operation") from None
    add = op is m.ResourceOperation.ADD
    value = resource.resource_name

    def operator_only(what: str) -> None:
        if not caller.operator:
            raise _Refused(
                ErrorCode.cluster_authorization_failed,
                f"only holders of ALTER_VIRTUAL_CLUSTER on {KAFKA_CLUSTER} may {what}",
            )

    if vc == KAFKA_CLUSTER and kind is not m.ResourceType.USER:
        raise _Refused(
            ErrorCode.invalid_request, f"{KAFKA_CLUSTER} is the physical cluster: only users are added to it"
        )
    if kind in (m.ResourceType.USER, m.ResourceType.ADMIN):
        principal = _principal(value)
        if kind is m.ResourceType.ADMIN:
            return _admin(plan, caller, vc, principal, add)
        if add:
            _may_place(plan, caller, vc, principal)
        return _bind(plan, caller, vc, principal, add, plan.principal, plan.principals, principal_record, "user")
    if kind is m.ResourceType.CLIENT:
        if not value:
            raise _Refused(ErrorCode.invalid_request, "a client id must not be empty")
        return _bind(plan, caller, vc, value, add, plan.client, plan.client_ids, client_record, "client id")
    if kind is m.ResourceType.TOPIC:
        # inkless' layout: ResourceName is the link's name, PhysicalTopicName the broker's (null: the same).
        link = value
        physical = resource.physical_topic_name if resource.physical_topic_name is not None else link
        if not _TOPIC.match(physical) or physical in (".", ".."):
            raise _Refused(ErrorCode.invalid_request, f"{physical!r} is not a legal topic name")
        validate_link_name(link)
        current = plan.link(vc, link)
        if add:
            if current is not None:
                raise _Refused(ErrorCode.duplicate_resource, f"{vc!r} already has a topic link {link!r}")
            if not plan.in_vc(vc, physical):
                operator_only("link a physical topic that is not yet in the virtual cluster")
            plan.links[(vc, link)] = physical
            return [link_record(vc, link, physical)]
        if current is None or (resource.physical_topic_name is not None and current != physical):
            # inkless names a link to remove by its name alone; vcproxy's CLI names its topic too, checked.
            raise _Refused(ErrorCode.resource_not_found, f"{vc!r} has no topic link {link!r} to {physical!r}")
        plan.links[(vc, link)] = None
        return [link_record(vc, link, None)]
    # GROUP, TRANSACTIONAL_ID: an existing physical id used by the VC under the same name.
    group = kind is m.ResourceType.GROUP
    what = "group" if group else "transactional id"
    if not value:
        raise _Refused(ErrorCode.invalid_request, f"a {what} must not be empty")
    owner = plan.group(value) if group else plan.txn(value)
    table = plan.groups if group else plan.txns
    record = group_record if group else txn_record
    if add:
        operator_only(f"assign an existing {what}")
        if owner == vc:
            raise _Refused(ErrorCode.duplicate_resource, f"{what} {value!r} is already in {vc!r}")
        if owner is not None or _prefixed(plan.image, value):
            raise _Refused(ErrorCode.duplicate_resource, f"{what} {value!r} belongs to another virtual cluster")
        table[value] = vc
        return [record(vc, value, True)]
    if owner != vc:
        raise _Refused(ErrorCode.resource_not_found, f"{what} {value!r} is not assigned to {vc!r}")
    table[value] = None
    return [record(vc, value, False)]


def _may_place(plan: _Plan, caller: Caller, vc: str, principal: str) -> None:
    """Adding a principal to a VC must not capture anyone: not a super-admin, not User:ANONYMOUS into
    kafka-cluster, and not a principal holding rights beyond this VC (an operator's tool, another VC's
    admin) unless the caller holds ALTER_VIRTUAL_CLUSTER on kafka-cluster. (Another VC's member is bound
    elsewhere: `_bind` refuses it.)"""
    if principal in caller.super_admins:
        raise _Refused(
            ErrorCode.invalid_request, "a super-admin is in kafka-cluster and cannot be bound to a virtual cluster"
        )
    if vc == KAFKA_CLUSTER and principal in (ANONYMOUS, "User:*"):
        raise _Refused(ErrorCode.invalid_request, f"{principal} is nobody's identity and cannot be in {KAFKA_CLUSTER}")
    if not caller.operator and _rights_beyond(plan.image, caller, principal, vc):
        raise _Refused(
            ErrorCode.cluster_authorization_failed,
            f"{principal} holds rights beyond {vc!r}: only an operator may place it",
        )


def _rights_beyond(image: TenancyImage, caller: Caller, principal: str, vc: str) -> bool:
    """Whether a principal holds any right other than on `vc` itself."""
    if any(principal in other.admins for name, other in image.vcs.items() if name != vc):
        return True
    return any(
        b.principal == principal
        and not (b.resource_type is ResourceType.CLUSTER and b.pattern is PatternType.LITERAL and b.name == vc)
        for b in image.cluster_acls
    )


def _admin(plan: _Plan, caller: Caller, vc: str, principal: str, add: bool) -> list[Record]:
    """An admin of a VC holds ADMIN_OPERATIONS on it (ACLs in kafka-cluster's). Granting them needs them
    (ALTER_VIRTUAL_CLUSTER grants all three) and may not capture a principal placed elsewhere; removing
    them may not leave the VC without a holder of ALTER_VIRTUAL_CLUSTER, unless an operator does it."""
    if plan.admin(vc, principal) == add:
        raise _Refused(
            ErrorCode.duplicate_resource if add else ErrorCode.resource_not_found,
            f"{principal} is {'already' if add else 'not'} an admin of {vc!r}",
        )
    bind: list[Record] = []
    if add:
        if principal in caller.super_admins or principal in (ANONYMOUS, "User:*"):
            raise _Refused(ErrorCode.invalid_request, f"{principal} cannot be made an admin of a virtual cluster")
        placed = plan.principal(principal)
        if placed not in (None, vc) and not caller.operator:
            raise _Refused(ErrorCode.cluster_authorization_failed, f"{principal} is in another virtual cluster")
        if placed is None:  # everyone is somewhere: an admin bound nowhere would be refused at login
            _may_place(plan, caller, vc, principal)
            plan.principals[principal] = vc
            bind = [principal_record(principal, vc)]
    elif not caller.operator:
        left = caller.rights.holders(Op.ALTER_VIRTUAL_CLUSTER, vc) - {principal}
        left -= {p for (v, p), on in plan.admins.items() if v == vc and not on}
        if not left - _everywhere(caller):
            raise _Refused(ErrorCode.policy_violation, f"{principal} is the last admin of {vc!r}: grant another first")
    plan.admins[(vc, principal)] = add
    records = [*bind, *(acl_record(KAFKA_CLUSTER, b, add) for b in admin_bindings(vc, principal))]
    if not add and principal in plan.image.vcs[vc].admins:
        records.append(admin_record(vc, principal, False))  # an admin of older state
    return records


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
            raise _Refused(ErrorCode.duplicate_resource, f"{what} {value!r} is already in {vc!r}")
        if bound is not None:
            where = f" ({bound!r})" if caller.super_admin else ""
            raise _Refused(ErrorCode.duplicate_resource, f"{what} {value!r} is bound to another virtual cluster{where}")
        if what == "client id" and vc == KAFKA_CLUSTER:
            raise _Refused(
                ErrorCode.invalid_request,
                "a client id is a label the client chooses: it cannot place anyone in kafka-cluster",
            )
        if vc != KAFKA_CLUSTER:
            _within(plan, vc, what, table)
        table[value] = vc
        return [record(value, vc)]
    if bound != vc:
        raise _Refused(ErrorCode.resource_not_found, f"{what} {value!r} is not in {vc!r}")
    table[value] = None
    return [record(value, None)]


def _within(plan: _Plan, vc: str, what: str, table: dict[str, str | None]) -> None:
    """One more principal (max_users) or client id (max_client_ids) bound to `vc`, as the plan leaves it."""
    key = limits.MAX_CLIENT_IDS if what == "client id" else limits.MAX_USERS
    bound = plan.image.client_ids if what == "client id" else plan.image.principals
    current = {k for k, v in bound.items() if v == vc}
    for k, v in table.items():
        (current.add if v == vc else current.discard)(k)
    why = limits.count_refusal(key, getattr(limits.of(plan.image, vc), key), len(current), 1, f"virtual cluster {vc!r}")
    if why is not None:
        raise _Refused(ErrorCode.policy_violation, why)


# -- VC-scoped ACLs for operators (Describe/Create/DeleteVirtualClusterAcls) ------------------------------
# Kafka's ACL RPCs with the VC named in each item. A VC's ACLs are managed by those holding
# ALTER_VIRTUAL_CLUSTER on it (DESCRIBE_VIRTUAL_CLUSTER to read them); the bindings are checked and
# matched as Kafka's ACL APIs inside a VC check them (proxy/management/acl_plane.py). A prefixed VC pattern means
# every VC, among those the caller may manage, whose name starts with it, as they are now (a VC made
# later gets none). `kafka-cluster` (literal) names the cluster-wide ACLs: the rights over VCs and the
# physical names its proxy-authenticated members may use, managed as Kafka manages ACLs (ALTER on the
# cluster to change, DESCRIBE to read), and never so as to leave nobody able to manage them.


def _acl_targets(image: TenancyImage, caller: Caller, name: str, pattern_type: int, op: Operation) -> list[str]:
    """The VCs one ACL item is about; _Refused if none the caller may manage."""
    try:
        pattern = m.VirtualClusterPatternType(int(pattern_type))
    except ValueError:
        raise _Refused(
            ErrorCode.invalid_request, "virtual cluster pattern type must be LITERAL (3) or PREFIXED (4)"
        ) from None
    if pattern is m.VirtualClusterPatternType.LITERAL and name == KAFKA_CLUSTER:
        if not caller.acl_admin(Op.ALTER if op is Op.ALTER_VIRTUAL_CLUSTER else Op.DESCRIBE):
            raise _Refused(ErrorCode.cluster_authorization_failed, "not authorized")
        return [KAFKA_CLUSTER]
    visible = administered(image, caller, op)
    if pattern is m.VirtualClusterPatternType.LITERAL:
        if name in visible:
            return [name]
    else:
        matched = [vc for vc in visible if vc.startswith(name)]
        if matched:
            return matched
    if not caller.may(op, KAFKA_CLUSTER):
        raise _Refused(ErrorCode.cluster_authorization_failed, "not authorized")
    what = "virtual cluster" if pattern is m.VirtualClusterPatternType.LITERAL else "virtual cluster starting with"
    raise _Refused(ErrorCode.resource_not_found, f"no {what} {name!r}")


def _acls_of(image: TenancyImage, vc: str) -> Any:
    return image.cluster_acls if vc == KAFKA_CLUSTER else image.vcs[vc].acls


def _acl_check(fn: Callable[[], None]) -> tuple[int, str | None]:
    """_check, with a binding or filter Kafka would refuse as INVALID_REQUEST."""
    try:
        return _check(fn)
    except (AclError, ValueError) as exc:
        return ErrorCode.invalid_request, str(exc)


def _describe_acls(
    image: TenancyImage, caller: Caller, request: m.DescribeVirtualClusterAclsRequest
) -> tuple[Any, list[Record]]:
    found: list[tuple[str, list[AclBinding]]] = []

    def check() -> None:
        vcs = _acl_targets(
            image, caller, request.virtual_cluster, request.virtual_cluster_pattern_type, Op.DESCRIBE_VIRTUAL_CLUSTER
        )
        flt = acl_plane.filter_of(request)
        found.extend((vc, _acls_of(image, vc).matching(flt)) for vc in vcs)

    code, message = _acl_check(check)
    if code != ErrorCode.none:
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
    state_records = limits.record_count(image)
    for item in request.creations:
        out: list[Record] = []

        def check(item: Any = item, out: list[Record] = out, records: list[Record] = records) -> None:
            vcs = _acl_targets(
                image, caller, item.virtual_cluster, item.virtual_cluster_pattern_type, Op.ALTER_VIRTUAL_CLUSTER
            )
            binding = acl_plane.binding_of(item, cluster_wide=vcs == [KAFKA_CLUSTER])
            if vcs == [KAFKA_CLUSTER] and binding.principal == ANONYMOUS and binding.permission.name == "ALLOW":
                raise _Refused(ErrorCode.invalid_request, "User:ANONYMOUS is nobody's identity: it holds no right")
            if vcs == [KAFKA_CLUSTER]:
                _may_grant(caller, binding)
            mine: list[tuple[str, AclBinding]] = []
            for vc in vcs:  # creating an existing binding succeeds, as in Kafka
                if binding not in _acls_of(image, vc) and (vc, binding) not in planned:
                    if vc != KAFKA_CLUSTER:
                        have = len(_acls_of(image, vc)) + sum(1 for v, _ in planned if v == vc)
                        why = limits.count_refusal(
                            limits.MAX_ACLS, limits.of(image, vc).max_acls, have, 1, f"virtual cluster {vc!r}"
                        )
                        if why is not None:
                            raise _Refused(ErrorCode.policy_violation, why)
                    mine.append((vc, binding))
                    out.append(acl_record(vc, binding, True))
            why = limits.records_refusal(image, [*records, *out], state_records)
            if why is not None:
                raise _Refused(ErrorCode.policy_violation, why)
            planned.update(mine)

        code, message = _acl_check(check)
        if code == ErrorCode.none:
            records += out
        results.append(m.VirtualClusterAclCreationResult(error_code=i16(code), error_message=message))
    return m.CreateVirtualClusterAclsResponse(results=tuple(results)), records


def _may_grant(caller: Caller, b: AclBinding, lifting: bool = False) -> None:
    """No right lets its holder widen its own reach, managing kafka-cluster's ACLs included: a
    *_VIRTUAL_CLUSTER right (or ALL on a CLUSTER resource, which holds them all) is granted only by a
    caller holding it on all the binding covers: the VC it names (`kafka-cluster`: every VC). A prefix
    also covers VCs not made yet, so granting one needs the right on `kafka-cluster`. Lifting a DENY
    (deleting it) gives back what it denied: the same rule."""
    wanted = Permission.DENY if lifting else Permission.ALLOW
    if b.permission is not wanted or b.resource_type is not ResourceType.CLUSTER:
        return
    ops = VC_OPERATIONS if b.operation is Op.ALL else VC_OPERATIONS & {b.operation}
    on = b.name if b.pattern is PatternType.LITERAL else KAFKA_CLUSTER
    missing = sorted(op.name for op in ops if not caller.may(op, on))
    if missing:
        raise _Refused(
            ErrorCode.cluster_authorization_failed,
            f"may not {'lift a DENY of' if lifting else 'grant'} {', '.join(missing)} on {b.name!r}: "
            "the caller does not hold it",
        )


def _delete_acls(
    image: TenancyImage, caller: Caller, request: m.DeleteVirtualClusterAclsRequest
) -> tuple[Any, list[Record]]:
    gone: dict[tuple[str, AclBinding], None] = {}  # ordered: one record per binding, however many filters
    results = []
    for item in request.filters:
        matched: list[tuple[str, AclBinding]] = []

        def check(item: Any = item, matched: list[tuple[str, AclBinding]] = matched) -> None:
            vcs = _acl_targets(
                image, caller, item.virtual_cluster, item.virtual_cluster_pattern_type, Op.ALTER_VIRTUAL_CLUSTER
            )
            flt = acl_plane.filter_of(item)
            found = [(vc, b) for vc in vcs for b in _acls_of(image, vc).matching(flt)]
            for vc, b in found:
                if vc == KAFKA_CLUSTER:
                    _may_grant(caller, b, lifting=True)
            _keeps_a_holder(image, caller, [b for vc, b in [*gone, *found] if vc == KAFKA_CLUSTER])
            matched.extend(found)

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


def _keeps_a_holder(image: TenancyImage, caller: Caller, removed: list[AclBinding]) -> None:
    """Removing kafka-cluster bindings must leave every VC that had a holder of ALTER_VIRTUAL_CLUSTER
    with one (super-admins aside), and the cluster's ACLs with someone allowed to manage them, unless
    the caller is a super-admin (the bootstrap, who can always grant again)."""
    if caller.super_admin or not removed:
        return
    after = TenancyImage(vcs=image.vcs, principals=image.principals)
    for b in image.cluster_acls:
        if b not in removed:
            after.cluster_acls.add(b)
    before, then = caller.rights, Rights(after, caller.super_admins)
    for vc in [*image.vcs, KAFKA_CLUSTER]:
        if before.holders(Op.ALTER_VIRTUAL_CLUSTER, vc) and not then.holders(Op.ALTER_VIRTUAL_CLUSTER, vc):
            raise _Refused(
                ErrorCode.policy_violation, f"this would remove the last holder of ALTER_VIRTUAL_CLUSTER on {vc!r}"
            )
    managers = {b.principal for b in image.cluster_acls} - {WILDCARD_ANY, ANONYMOUS}
    was = any(Caller(p, caller.super_admins, image=image).acl_admin() for p in managers)
    if was and not any(Caller(p, caller.super_admins, image=after).acl_admin() for p in managers):
        raise _Refused(
            ErrorCode.policy_violation, "this would leave nobody but the super-admins able to manage these ACLs"
        )


WILDCARD_ANY = "User:*"


_HANDLERS: dict[type, Callable[[TenancyImage, Caller, Any], tuple[Any, list[Record]]]] = {
    m.CreateVirtualClustersRequest: _create,
    m.AlterVirtualClustersRequest: _alter,
    m.ListVirtualClustersRequest: _list,
    m.DescribeVirtualClusterAclsRequest: _describe_acls,
    m.CreateVirtualClusterAclsRequest: _create_acls,
    m.DeleteVirtualClusterAclsRequest: _delete_acls,
}
