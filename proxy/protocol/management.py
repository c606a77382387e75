"""The KIP-1134 management RPCs and vcproxy's VC-scoped ACL RPCs: their messages, codes and tables.

The messages are generated (proxy/protocol/message_gen.py) from Kafka-style JSON definitions in
proxy/protocol/messages/, so proxy.protocol.codec reads, validates and writes them like Kafka's own. On the
wire they are as the KIP's one implementation, aiven/inkless' KIP-1134 branch, puts them: keys 501-505,
inkless' field layout and AlterVirtualClusters codes. What vcproxy adds is tagged (a reader of inkless'
schemas skips it) or a code of its own; docs/management.md lists it all.

1139-1141 are vcproxy's own, not the KIP's: Kafka's DescribeAcls, CreateAcls and DeleteAcls v3 with the
virtual cluster named in each item, for operators (a super-admin is bound to no VC, so Kafka's own ACL
APIs reach the broker's ACLs, not a VC's).
"""

import enum
from collections.abc import Mapping

from .apikey import ApiKey
from .management_messages import *  # noqa: F403 (the generated messages, by their Kafka names)
from .management_messages import MESSAGES

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
    """AlterVirtualClusters' resource types: inkless' codes (0-4), then vcproxy's own."""

    USER = 0  # a principal, "User:alice" (a bare "alice" means User:alice)
    TOPIC = 1  # a topic link: ResourceName the name the VC sees, PhysicalTopicName the broker's (null: the same)
    GROUP = 2
    TRANSACTIONAL_ID = 3
    CLIENT = 4  # a client id
    ADMIN = 64  # vcproxy's: a principal allowed DESCRIBE/ALTER_VIRTUAL_CLUSTER on this VC


class ResourceOperation(enum.IntEnum):
    """AlterVirtualClusters' operations: inkless' codes."""

    ADD = 0
    REMOVE = 1


class ConfigOperation(enum.IntEnum):
    """A VC setting's change: IncrementalAlterConfigs' codes."""

    SET = 0
    DELETE = 1


class VirtualClusterPatternType(enum.IntEnum):
    """How the ACL RPCs' `VirtualCluster` names VCs (the KIP's --virtual-cluster-pattern-type)."""

    LITERAL = 3  # the VC of that name (Kafka's PatternType codes)
    PREFIXED = 4  # every existing VC whose name starts with it


def _by_key(direction: str) -> Mapping[int, Mapping[int, type]]:
    table: dict[int, dict[int, type]] = {}
    for cls in MESSAGES:
        if cls.__type__.name == direction:
            table.setdefault(int(cls.__api_key__), {})[int(cls.__version__)] = cls
    return table


# Each RPC's classes by key, then version; and its newest version's, by key.
REQUEST_VERSIONS = _by_key("request")
RESPONSE_VERSIONS = _by_key("response")
REQUESTS: Mapping[int, type] = {key: by[max(by)] for key, by in REQUEST_VERSIONS.items()}
RESPONSES: Mapping[int, type] = {key: by[max(by)] for key, by in RESPONSE_VERSIONS.items()}
