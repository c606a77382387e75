"""Every API key the proxy knows, by name: Kafka's (kio's schema index, plus the removed keys 4-7 and the
keys kio has no schema for, which rewrite_rules/apis.yaml lists so that they are refused) and the management
RPCs (KIP-1134's at aiven/inkless' keys 501-505, vcproxy's own at 1139-1141: proxy/protocol/management.py).

An `IntEnum`, so a key read off the wire compares and hashes as its number. What the proxy knows about each
API is its `ApiSpec` (proxy/catalogue.py); this module only names the keys, at the bottom of the layers.
tests/unit/test_catalogue.py checks it against kio's index and apis.yaml.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92
    STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE = 93
    UNREGISTER_CONTROLLER = 94
    CREATE_VIRTUAL_CLUSTERS = 501
    ALTER_VIRTUAL_CLUSTERS = 502
    DELETE_VIRTUAL_CLUSTERS = 503
    LIST_VIRTUAL_CLUSTERS = 504
    DESCRIBE_VIRTUAL_CLUSTERS = 505
    DESCRIBE_VIRTUAL_CLUSTER_ACLS = 1139
    CREATE_VIRTUAL_CLUSTER_ACLS = 1140
    DELETE_VIRTUAL_CLUSTER_ACLS = 1141

    @property
    def title(self) -> str:
        """Kafka's name of the API, e.g. "FindCoordinator"."""
        return "".join(part.capitalize() for part in self.name.split("_"))


# The keys vcproxy served KIP-1134's RPCs under before it moved to inkless' (501-505). For one release a
# request on one is closed with a reason that names the new key (docs/management.md#wire-keys): the old
# layouts are gone, so there is no answer a client of them could read.
RETIRED: Mapping[int, ApiKey] = {
    1134: ApiKey.CREATE_VIRTUAL_CLUSTERS,
    1135: ApiKey.ALTER_VIRTUAL_CLUSTERS,
    1136: ApiKey.DELETE_VIRTUAL_CLUSTERS,
    1137: ApiKey.LIST_VIRTUAL_CLUSTERS,
    1138: ApiKey.DESCRIBE_VIRTUAL_CLUSTERS,
}


def retired_reason(key: int) -> str | None:
    """Why a request on a retired key is closed, or None for any other key."""
    now = RETIRED.get(key)
    if now is None:
        return None
    return (
        f"API key {key} is retired: vcproxy serves {now.title} under key {int(now)}, in aiven/inkless' "
        "KIP-1134 layout; upgrade the client (docs/management.md#wire-keys)"
    )
