"""The KIP-1134 management RPCs, version 0, as kio-style entities (so proxy.protocol.codec reads and
writes them like any Kafka message, validation included).

Kafka 4.x has assigned the KIP's keys 91-95 to other APIs (share-group offsets, Streams topology
updates, UnregisterController), so vcproxy serves the RPCs under 1134-1138, far from Kafka's range.
Where the KIP's schemas contradict themselves (fields "versions 1+" in an API whose only version is 0:
`validateOnly`, `ErrorMessage`, `ThrottleTimeMs`), version 0 carries them. What the KIP leaves out is
added as tagged fields, which a reader of the KIP's exact schema skips: the link name of a topic
resource, a described VC's cluster id, admins and error message, and a VC's settings (set in Alter, with
their outcome per VC item, and shown by Describe). docs/management.md lists it all.

1139-1141 are vcproxy's own, not the KIP's: Kafka's DescribeAcls, CreateAcls and DeleteAcls v3 with the
virtual cluster named in each item, for operators (a super-admin is bound to no VC, so Kafka's own ACL
APIs reach the broker's ACLs, not a VC's).
"""

import enum
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32

from .apikey import ApiKey

KEYS = (
    ApiKey.CREATE_VIRTUAL_CLUSTERS,
    ApiKey.ALTER_VIRTUAL_CLUSTERS,
    ApiKey.DELETE_VIRTUAL_CLUSTERS,
    ApiKey.LIST_VIRTUAL_CLUSTERS,
    ApiKey.DESCRIBE_VIRTUAL_CLUSTERS,
    # vcproxy's own: Kafka's DescribeAcls/CreateAcls/DeleteAcls v3 naming a VC, for operators bound to none.
    ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS,
    ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS,
    ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS,
)
ACL_KEYS = (
    ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS,
    ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS,
    ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS,
)
NAMES = {key: key.title for key in KEYS}
SNAKE_NAMES = {key: key.name.lower() for key in KEYS}


class ResourceType(enum.IntEnum):
    """AlterVirtualClusters resource types: Kafka's ResourceType codes where Kafka has one."""

    TOPIC = 2  # ResourceName: the physical topic; LinkName: the name the VC sees (default: the same)
    GROUP = 3
    TRANSACTIONAL_ID = 5
    USER = 7  # a principal, "User:alice" (a bare "alice" means User:alice)
    CLIENT = 64  # a client id (Kafka has no resource type for it)
    ADMIN = 65  # a principal allowed DESCRIBE/ALTER_VIRTUAL_CLUSTER on this VC (until VC-scoped ACLs)


class ResourceOperation(enum.IntEnum):
    ADD = 1
    REMOVE = 2


class ConfigOperation(enum.IntEnum):
    """A VC setting's change: IncrementalAlterConfigs' codes."""

    SET = 0
    DELETE = 1


class VirtualClusterPatternType(enum.IntEnum):
    """How the ACL RPCs' `VirtualCluster` names VCs (the KIP's --virtual-cluster-pattern-type)."""

    LITERAL = 3  # the VC of that name (Kafka's PatternType codes)
    PREFIXED = 4  # every existing VC whose name starts with it


def _meta(kafka_type: str, tag: int | None = None) -> dict[str, object]:
    return {"kafka_type": kafka_type} if tag is None else {"kafka_type": kafka_type, "tag": tag}


class _Request:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader


class _Response:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader


class _Nested:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True


# -- CreateVirtualClusters --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableVirtualCluster(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_meta("string"))


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateVirtualClustersRequest(_Request):
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_VIRTUAL_CLUSTERS)
    virtual_clusters: tuple[CreatableVirtualCluster, ...] = field(default=())
    timeout_ms: i32 = field(metadata=_meta("int32"), default=i32(60000))
    validate_only: bool = field(metadata=_meta("bool"), default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableVirtualClustersResult(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata=_meta("string"))
    error_code: i16 = field(metadata=_meta("int16"), default=i16(0))
    error_message: str | None = field(metadata=_meta("string"), default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateVirtualClustersResponse(_Response):
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_VIRTUAL_CLUSTERS)
    throttle_time_ms: i32 = field(metadata=_meta("int32"), default=i32(0))
    virtual_clusters: tuple[CreatableVirtualClustersResult, ...] = field(default=())


# -- AlterVirtualClusters ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualClusterResource(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.ALTER_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    resource_type: i8 = field(metadata=_meta("int8"))
    resource_name: str = field(metadata=_meta("string"))
    resource_operation: i8 = field(metadata=_meta("int8"))
    link_name: str | None = field(metadata=_meta("string", 0), default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualClusterConfig(_Nested):
    """One of a VC's settings (proxy/tenancy/settings.py) to set or delete."""

    __api_key__: ClassVar[i16] = i16(ApiKey.ALTER_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_meta("string"))
    config_operation: i8 = field(metadata=_meta("int8"), default=i8(ConfigOperation.SET))
    value: str | None = field(metadata=_meta("string"), default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualClusterData(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.ALTER_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_meta("string"))
    resources: tuple[VirtualClusterResource, ...] = field(default=())
    # vcproxy's: the VC's settings, applied together or not at all (the result's Configs* fields say).
    configs: tuple[VirtualClusterConfig, ...] = field(metadata={"tag": 0}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterVirtualClustersRequest(_Request):
    __api_key__: ClassVar[i16] = i16(ApiKey.ALTER_VIRTUAL_CLUSTERS)
    virtual_cluster: tuple[VirtualClusterData, ...] = field(default=())
    timeout_ms: i32 = field(metadata=_meta("int32"), default=i32(60000))
    validate_only: bool = field(metadata=_meta("bool"), default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualClusterResourceResult(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.ALTER_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    resource_type: i8 = field(metadata=_meta("int8"))
    resource_name: str = field(metadata=_meta("string"))
    resource_operation: i8 = field(metadata=_meta("int8"))
    error_code: i16 = field(metadata=_meta("int16"), default=i16(0))
    error_message: str | None = field(metadata=_meta("string"), default=None)
    link_name: str | None = field(metadata=_meta("string", 0), default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualClusterDataResult(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.ALTER_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata=_meta("string"))
    resources: tuple[VirtualClusterResourceResult, ...] = field(default=())
    configs_error_code: i16 = field(metadata=_meta("int16", 0), default=i16(0))
    configs_error_message: str | None = field(metadata=_meta("string", 1), default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterVirtualClustersResponse(_Response):
    __api_key__: ClassVar[i16] = i16(ApiKey.ALTER_VIRTUAL_CLUSTERS)
    virtual_cluster: tuple[VirtualClusterDataResult, ...] = field(default=())
    throttle_time_ms: i32 = field(metadata=_meta("int32", 0), default=i32(0))


# -- DeleteVirtualClusters --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletableVirtualCluster(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_meta("string"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteVirtualClustersRequest(_Request):
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_VIRTUAL_CLUSTERS)
    virtual_clusters: tuple[DeletableVirtualCluster, ...] = field(default=())
    timeout_ms: i32 = field(metadata=_meta("int32"), default=i32(60000))
    validate_only: bool = field(metadata=_meta("bool"), default=False)
    # vcproxy's: delete the VC although it still has groups or transactional ids on the broker, deleting
    # the groups (their committed offsets) first. Tagged: a reader of the KIP's schema skips it.
    force: bool = field(metadata=_meta("bool", 0), default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletableVirtualClusterResult(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata=_meta("string"))
    error_code: i16 = field(metadata=_meta("int16"), default=i16(0))
    error_message: str | None = field(metadata=_meta("string"), default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteVirtualClustersResponse(_Response):
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_VIRTUAL_CLUSTERS)
    throttle_time_ms: i32 = field(metadata=_meta("int32"), default=i32(0))
    responses: tuple[DeletableVirtualClusterResult, ...] = field(default=())


# -- ListVirtualClusters ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ListVirtualClustersRequest(_Request):
    __api_key__: ClassVar[i16] = i16(ApiKey.LIST_VIRTUAL_CLUSTERS)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedVirtualCluster(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.LIST_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata=_meta("string"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ListVirtualClustersResponse(_Response):
    __api_key__: ClassVar[i16] = i16(ApiKey.LIST_VIRTUAL_CLUSTERS)
    throttle_time_ms: i32 = field(metadata=_meta("int32"), default=i32(0))
    error_code: i16 = field(metadata=_meta("int16"), default=i16(0))
    virtual_clusters: tuple[ListedVirtualCluster, ...] = field(default=())


# -- DescribeVirtualClusters ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedVirtualClusterName(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: str = field(metadata=_meta("string"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeVirtualClustersRequest(_Request):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS)
    virtual_clusters: tuple[DescribedVirtualClusterName, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicLink(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    link_name: str = field(metadata=_meta("string"))
    physical_name: str = field(metadata=_meta("string"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedVirtualClusterConfig(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata=_meta("string"))
    value: str = field(metadata=_meta("string"))


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualClusterResults(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata=_meta("string"))
    error_code: i16 = field(metadata=_meta("int16"), default=i16(0))
    topic_links: tuple[TopicLink, ...] = field(default=())
    users: tuple[str, ...] = field(metadata=_meta("string"), default=())
    client_ids: tuple[str, ...] = field(metadata=_meta("string"), default=())
    transactional_ids: tuple[str, ...] = field(metadata=_meta("string"), default=())
    consumer_groups: tuple[str, ...] = field(metadata=_meta("string"), default=())
    cluster_id: str | None = field(metadata=_meta("string", 0), default=None)
    admins: tuple[str, ...] = field(metadata=_meta("string", 1), default=())
    error_message: str | None = field(metadata=_meta("string", 2), default=None)
    configs: tuple[DescribedVirtualClusterConfig, ...] = field(metadata={"tag": 3}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeVirtualClustersResponse(_Response):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS)
    throttle_time_ms: i32 = field(metadata=_meta("int32"), default=i32(0))
    virtual_clusters: tuple[VirtualClusterResults, ...] = field(default=())


# -- DescribeVirtualClusterAcls / CreateVirtualClusterAcls / DeleteVirtualClusterAcls ------------------------
# Kafka's DescribeAcls, CreateAcls and DeleteAcls v3, field for field, plus the VC(s) each item is about:
# `VirtualCluster` and `VirtualClusterPatternType` after Kafka's fields, and the VC of each described or
# deleted binding. ACL names are the VC's own (link names, its group and transactional id names).


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeVirtualClusterAclsRequest(_Request):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS)
    resource_type_filter: i8 = field(metadata=_meta("int8"))
    resource_name_filter: str | None = field(metadata=_meta("string"), default=None)
    pattern_type_filter: i8 = field(metadata=_meta("int8"), default=i8(3))
    principal_filter: str | None = field(metadata=_meta("string"), default=None)
    host_filter: str | None = field(metadata=_meta("string"), default=None)
    operation: i8 = field(metadata=_meta("int8"))
    permission_type: i8 = field(metadata=_meta("int8"))
    virtual_cluster: str = field(metadata=_meta("string"))
    virtual_cluster_pattern_type: i8 = field(metadata=_meta("int8"), default=i8(VirtualClusterPatternType.LITERAL))


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualClusterAclDescription(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    principal: str = field(metadata=_meta("string"))
    host: str = field(metadata=_meta("string"))
    operation: i8 = field(metadata=_meta("int8"))
    permission_type: i8 = field(metadata=_meta("int8"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeVirtualClusterAclsResource(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    resource_type: i8 = field(metadata=_meta("int8"))
    resource_name: str = field(metadata=_meta("string"))
    pattern_type: i8 = field(metadata=_meta("int8"), default=i8(3))
    acls: tuple[VirtualClusterAclDescription, ...] = field(default=())
    virtual_cluster: str = field(metadata=_meta("string"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeVirtualClusterAclsResponse(_Response):
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_VIRTUAL_CLUSTER_ACLS)
    throttle_time_ms: i32 = field(metadata=_meta("int32"), default=i32(0))
    error_code: i16 = field(metadata=_meta("int16"), default=i16(0))
    error_message: str | None = field(metadata=_meta("string"), default=None)
    resources: tuple[DescribeVirtualClusterAclsResource, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualClusterAclCreation(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    resource_type: i8 = field(metadata=_meta("int8"))
    resource_name: str = field(metadata=_meta("string"))
    resource_pattern_type: i8 = field(metadata=_meta("int8"), default=i8(3))
    principal: str = field(metadata=_meta("string"))
    host: str = field(metadata=_meta("string"))
    operation: i8 = field(metadata=_meta("int8"))
    permission_type: i8 = field(metadata=_meta("int8"))
    virtual_cluster: str = field(metadata=_meta("string"))
    virtual_cluster_pattern_type: i8 = field(metadata=_meta("int8"), default=i8(VirtualClusterPatternType.LITERAL))


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateVirtualClusterAclsRequest(_Request):
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS)
    creations: tuple[VirtualClusterAclCreation, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class VirtualClusterAclCreationResult(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: i16 = field(metadata=_meta("int16"), default=i16(0))
    error_message: str | None = field(metadata=_meta("string"), default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateVirtualClusterAclsResponse(_Response):
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_VIRTUAL_CLUSTER_ACLS)
    throttle_time_ms: i32 = field(metadata=_meta("int32"), default=i32(0))
    results: tuple[VirtualClusterAclCreationResult, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteVirtualClusterAclsFilter(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    resource_type_filter: i8 = field(metadata=_meta("int8"))
    resource_name_filter: str | None = field(metadata=_meta("string"), default=None)
    pattern_type_filter: i8 = field(metadata=_meta("int8"), default=i8(3))
    principal_filter: str | None = field(metadata=_meta("string"), default=None)
    host_filter: str | None = field(metadata=_meta("string"), default=None)
    operation: i8 = field(metadata=_meta("int8"))
    permission_type: i8 = field(metadata=_meta("int8"))
    virtual_cluster: str = field(metadata=_meta("string"))
    virtual_cluster_pattern_type: i8 = field(metadata=_meta("int8"), default=i8(VirtualClusterPatternType.LITERAL))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteVirtualClusterAclsRequest(_Request):
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS)
    filters: tuple[DeleteVirtualClusterAclsFilter, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteVirtualClusterAclsMatchingAcl(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: i16 = field(metadata=_meta("int16"), default=i16(0))
    error_message: str | None = field(metadata=_meta("string"), default=None)
    resource_type: i8 = field(metadata=_meta("int8"))
    resource_name: str = field(metadata=_meta("string"))
    pattern_type: i8 = field(metadata=_meta("int8"), default=i8(3))
    principal: str = field(metadata=_meta("string"))
    host: str = field(metadata=_meta("string"))
    operation: i8 = field(metadata=_meta("int8"))
    permission_type: i8 = field(metadata=_meta("int8"))
    virtual_cluster: str = field(metadata=_meta("string"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteVirtualClusterAclsFilterResult(_Nested):
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: i16 = field(metadata=_meta("int16"), default=i16(0))
    error_message: str | None = field(metadata=_meta("string"), default=None)
    matching_acls: tuple[DeleteVirtualClusterAclsMatchingAcl, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteVirtualClusterAclsResponse(_Response):
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_VIRTUAL_CLUSTER_ACLS)
    throttle_time_ms: i32 = field(metadata=_meta("int32"), default=i32(0))
    filter_results: tuple[DeleteVirtualClusterAclsFilterResult, ...] = field(default=())


REQUESTS: dict[int, type] = {
    c.__api_key__: c
    for c in (
        CreateVirtualClustersRequest,
        AlterVirtualClustersRequest,
        DeleteVirtualClustersRequest,
        ListVirtualClustersRequest,
        DescribeVirtualClustersRequest,
        DescribeVirtualClusterAclsRequest,
        CreateVirtualClusterAclsRequest,
        DeleteVirtualClusterAclsRequest,
    )
}
RESPONSES: dict[int, type] = {
    c.__api_key__: c
    for c in (
        CreateVirtualClustersResponse,
        AlterVirtualClustersResponse,
        DeleteVirtualClustersResponse,
        ListVirtualClustersResponse,
        DescribeVirtualClustersResponse,
        DescribeVirtualClusterAclsResponse,
        CreateVirtualClusterAclsResponse,
        DeleteVirtualClusterAclsResponse,
    )
}
