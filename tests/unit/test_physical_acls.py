"""kafka-cluster's own ACLs for its proxy-authenticated members who are not super-admins
(proxy/core/physical_acls.py)."""

from __future__ import annotations

import pytest

from proxy.acl.model import AclBinding, AclSet, Operation, PatternType, Permission, ResourceType
from proxy.core.physical_acls import PhysicalAuthorizer
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type
from proxy.protocol.headers import parse_request_header

from .wire import request_frame

Op = Operation


def auth(*bindings: tuple[ResourceType, str, Operation]) -> PhysicalAuthorizer:
    acls = AclSet()
    for rtype, name, op in bindings:
        acls.add(AclBinding(rtype, name, PatternType.LITERAL, "User:ops", "*", op, Permission.ALLOW))
    return PhysicalAuthorizer("User:ops", "10.0.0.1", acls)


def check(a: PhysicalAuthorizer, api_key: int, version: int, **fields):
    frame = request_frame(api_key, version, 1, codec._empty(request_type(api_key, version), **fields))
    header = parse_request_header(frame, api_info(api_key).request_header_version(version))
    return a.check(api_key, version, memoryview(frame), header.body_offset)


@pytest.mark.parametrize(
    ("api_key", "version", "grant", "error"),
    [
        (18, 3, None, 0),  # ApiVersions: needs nothing (apis.yaml cluster_acl: none)
        (60, 1, None, 0),  # DescribeCluster: nothing either, as on a broker
        (29, 3, None, 31),  # DescribeAcls: DESCRIBE on the cluster
        (29, 3, Op.DESCRIBE, 0),
        (29, 3, Op.ALTER, 0),  # ALTER implies DESCRIBE
        (30, 3, Op.DESCRIBE, 31),  # CreateAcls: ALTER
        (51, 0, Op.ALTER, 0),  # AlterUserScramCredentials: ALTER
        (48, 1, Op.ALTER_CONFIGS, 0),  # DescribeClientQuotas: DESCRIBE_CONFIGS, implied by ALTER_CONFIGS
        (49, 1, Op.DESCRIBE_CONFIGS, 31),  # AlterClientQuotas: ALTER_CONFIGS
        (38, 3, Op.ALL, 31),  # CreateDelegationToken: not open to them at all (fail closed)
    ],
)
def test_cluster_apis_need_their_operation_on_the_cluster(api_key, version, grant, error):
    a = auth(*([(ResourceType.CLUSTER, "kafka-cluster", grant)] if grant else []))
    assert check(a, api_key, version).error == error


def test_config_resources_need_the_topics_groups_or_clusters_operation():
    from kio.schema.describe_configs.v4.request import DescribeConfigsResource

    def describe(*resources):
        return check(
            a,
            32,
            4,
            resources=tuple(
                DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=None) for t, n in resources
            ),
        )

    a = auth((ResourceType.TOPIC, "orders", Op.DESCRIBE_CONFIGS), (ResourceType.GROUP, "g", Op.ALTER_CONFIGS))
    assert describe((2, "orders"), (32, "g")).error == 0
    assert describe((2, "payments")).error == 29  # TOPIC_AUTHORIZATION_FAILED
    assert describe((32, "other")).error == 30  # GROUP_AUTHORIZATION_FAILED
    assert describe((4, "1")).error == 31  # a broker's configs: DESCRIBE_CONFIGS on the cluster
