"""The catalogue: everything the proxy knows about each API, in one frozen `ApiSpec` per key (sans-I/O).

Built once, at start, from the rule files (rewrite_rules/apis.yaml, tenant.yaml, endpoints.yaml: proxy/rules.py)
and the tables below, and checked across them when built. Stages ask `spec(api_key)` (the session puts it on
each exchange as `ex.spec`) instead of keeping tables of their own: no other module keys a table by an API's
number or name (tests/unit/test_catalogue.py scans for it).

Adding a version of an existing API: kio's schemas bring it (proxy/protocol/apis.py reads its versions); a
version that changes what a stage reads gets a `versions` range in tenant.yaml or endpoints.yaml. Adding an
API: its key in proxy/protocol/apikey.py, its line in apis.yaml, its tenant.yaml entry, and here what it needs
of the ACLs and, where it has them, its refusal shape, listing filter, fixers and counting (docs/architecture.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from .acl import operations
from .acl.access import Access, Listing, Need, need
from .acl.model import Operation
from .protocol import codec, management, refusals
from .protocol import name_rules as names
from .protocol.apikey import ApiKey
from .protocol.apis import request_type, response_type
from .rules import ApiRule, EndpointRule, TenantRule, api_rules, endpoint_rules, tenant_rules

Op = Operation
Fixer = Callable[[Access, Any], Any]  # (the request's authorization, response entity) -> response entity


@dataclass(frozen=True, slots=True)
class StateGuardRule:
    """What the state-topic guard (proxy/tenancy/guard.py) reads of an API."""

    writes: bool = False  # writes to (or reconfigures, truncates, deletes) the topics it names
    uses_txn_id: bool = False  # names a transactional id: the replicas' decisions id is refused
    lists_topics: bool = False  # may list every topic: the state topic is hidden from non-readers
    config_resources: bool = False  # names topics as config resources (resources[].resource_name)


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: ApiKey
    rule: ApiRule  # apis.yaml: class, physical action, kafka-cluster's CLUSTER ACL
    tenant: TenantRule | None  # tenant.yaml: what the tenancy stage does for a principal in a VC
    endpoints: tuple[EndpointRule, ...]  # endpoints.yaml: where broker endpoints sit in its responses
    acl_need: Need | None  # what it needs of a VC's ACLs (and of kafka-cluster's for its members)
    acl_listing: Listing | None  # a listing whose items the caller sees only with DESCRIBE
    refuse_items: refusals.Build | None  # its refusal in Kafka's shape where the response has an error per item
    authorized_operations: Fixer | None  # fills in its authorized-operations fields from a VC's ACLs
    produce_bytes: bool  # the request's size counts against produce quotas
    fetch_bytes: bool  # the response's size counts against fetch quotas (KIP-932 share consumers too)
    mutation_items: str | None  # the response array whose accepted items count as controller mutations
    state_guard: StateGuardRule
    spliced: bool  # bodies are walked and spliced, never decoded: telemetry reads their errors off the frame
    records_in_response: bool  # its responses carry record batches (telemetry counts them as fetched bytes)
    sasl: bool  # part of the SASL exchange
    telemetry: bool  # a KIP-714 client-telemetry API
    answered_by: str | None  # the stage that answers it itself, where one does: see ANSWERED_BY
    # A KIP-227 fetch session: the first version that has one, whose session id and replica id (a regular field
    # before v15) the forwarder reads for a VC where the schema says (proxy/core/grants.py); set for Fetch alone.
    fetch_session: int | None
    # Kafka's checks on the names its request sends, made on them as the client sent them before they are renamed
    # for a VC (proxy/tenancy/name_rules.py).
    name_rules: tuple[names.NameRule, ...] = ()

    @property
    def name(self) -> str:
        """Kafka's name of the API, e.g. "FindCoordinator"."""
        return self.rule.name

    @property
    def management(self) -> bool:
        """A KIP-1134 management RPC (or one of ours), answered by the proxy for every caller."""
        return self.answered_by == "management"


# -- the tables a stage reads, by API -------------------------------------------------------------------

# Every API a tenant may send that names resources (Kafka's KafkaApis checks). Checked against tenant.yaml
# when the catalogue is built: every API translated for tenants is here.
_ACL_NEEDS: dict[ApiKey, Need] = {
    ApiKey.PRODUCE: need(topic=Op.WRITE, txn=Op.WRITE),
    ApiKey.FETCH: need(topic=Op.READ),
    ApiKey.LIST_OFFSETS: need(topic=Op.DESCRIBE),
    ApiKey.METADATA: need(topic=Op.DESCRIBE),
    ApiKey.OFFSET_COMMIT: need(group=Op.READ, topic=Op.READ),
    ApiKey.OFFSET_FETCH: need(items_from=8, group=Op.DESCRIBE, topic=Op.DESCRIBE),  # (v8+: several groups)
    ApiKey.FIND_COORDINATOR: need(items_from=4, group=Op.DESCRIBE, txn=Op.DESCRIBE),  # (v4+: several keys)
    ApiKey.JOIN_GROUP: need(group=Op.READ),
    ApiKey.HEARTBEAT: need(group=Op.READ),
    ApiKey.LEAVE_GROUP: need(group=Op.READ),
    ApiKey.SYNC_GROUP: need(group=Op.READ),
    ApiKey.DESCRIBE_GROUPS: need(whole=False, group=Op.DESCRIBE),
    ApiKey.LIST_GROUPS: need(),  # filtered by DESCRIBE on the way back
    ApiKey.CREATE_TOPICS: need(),  # CREATE on the topic or the cluster, checked by its handler
    ApiKey.DELETE_TOPICS: need(whole=False, topic=Op.DELETE),
    ApiKey.DELETE_RECORDS: need(topic=Op.DELETE),
    ApiKey.INIT_PRODUCER_ID: need(idempotent=True, txn=Op.WRITE),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: need(topic=Op.DESCRIBE),
    ApiKey.ADD_PARTITIONS_TO_TXN: need(txn=Op.WRITE, topic=Op.WRITE),
    ApiKey.ADD_OFFSETS_TO_TXN: need(txn=Op.WRITE, group=Op.READ),
    ApiKey.END_TXN: need(txn=Op.WRITE),
    ApiKey.TXN_OFFSET_COMMIT: need(txn=Op.WRITE, group=Op.READ, topic=Op.READ),
    ApiKey.DESCRIBE_CONFIGS: need(topic=Op.DESCRIBE_CONFIGS, group=Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CONFIGS: need(topic=Op.ALTER_CONFIGS, group=Op.ALTER_CONFIGS),
    ApiKey.CREATE_PARTITIONS: need(topic=Op.ALTER),
    ApiKey.DELETE_GROUPS: need(whole=False, group=Op.DELETE),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: need(topic=Op.ALTER_CONFIGS, group=Op.ALTER_CONFIGS),
    ApiKey.OFFSET_DELETE: need(group=Op.DELETE, topic=Op.READ),
    ApiKey.DESCRIBE_CLUSTER: need(),  # its authorized operations, on the way back
    ApiKey.DESCRIBE_PRODUCERS: need(topic=Op.READ),
    ApiKey.DESCRIBE_TRANSACTIONS: need(whole=False, txn=Op.DESCRIBE),
    ApiKey.LIST_TRANSACTIONS: need(),  # filtered by DESCRIBE on the way back
    ApiKey.CONSUMER_GROUP_HEARTBEAT: need(group=Op.READ, topic=Op.DESCRIBE),
    ApiKey.CONSUMER_GROUP_DESCRIBE: need(whole=False, group=Op.DESCRIBE, topic=Op.DESCRIBE),
    ApiKey.LIST_CONFIG_RESOURCES: need(),  # the VC's own topics and groups, as the tenancy handler lists them
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: need(topic=Op.DESCRIBE),
    ApiKey.SHARE_GROUP_HEARTBEAT: need(group=Op.READ, topic=Op.DESCRIBE),
    ApiKey.SHARE_GROUP_DESCRIBE: need(whole=False, group=Op.DESCRIBE, topic=Op.DESCRIBE),
    ApiKey.SHARE_FETCH: need(group=Op.READ, topic=Op.READ),
    ApiKey.SHARE_ACKNOWLEDGE: need(group=Op.READ, topic=Op.READ),
    ApiKey.STREAMS_GROUP_HEARTBEAT: need(group=Op.READ, topic=Op.DESCRIBE),
    ApiKey.STREAMS_GROUP_DESCRIBE: need(whole=False, group=Op.DESCRIBE, topic=Op.DESCRIBE),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: need(whole=False, group=Op.DESCRIBE, topic=Op.DESCRIBE),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: need(group=Op.READ, topic=Op.READ),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: need(group=Op.DELETE, topic=Op.READ),
}
# Listings whose items the caller sees only with DESCRIBE: API key -> (array, item field, kind).
_ACL_LISTINGS: dict[ApiKey, Listing] = {
    ApiKey.LIST_GROUPS: ("groups", "group_id", "group"),
    ApiKey.LIST_TRANSACTIONS: ("transaction_states", "transactional_id", "txn"),
}

_REFUSE_ITEMS: dict[ApiKey, refusals.Build] = {
    **dict.fromkeys(refusals.SHARE_STATE_KEYS, refusals.share_state),
    ApiKey.CREATE_TOPICS: refusals.create_topics,
    ApiKey.DELETE_TOPICS: refusals.delete_topics,
    ApiKey.DELETE_RECORDS: refusals.delete_records,
    ApiKey.CREATE_ACLS: refusals.create_acls,
    ApiKey.DELETE_ACLS: refusals.delete_acls,
    ApiKey.DESCRIBE_CONFIGS: refusals.configs,
    ApiKey.ALTER_CONFIGS: refusals.configs,
    ApiKey.CREATE_PARTITIONS: refusals.create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: refusals.configs,
    ApiKey.WRITE_TXN_MARKERS: refusals.write_txn_markers,
    ApiKey.ALTER_REPLICA_LOG_DIRS: refusals.alter_replica_log_dirs,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: refusals.describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: refusals.alter_user_scram_credentials,
}

# Kafka 4.2's checks on names (proxy/tenancy/name_rules.py): on group ids (the empty one) where the broker makes them
# (APIs that accept it have none),
_NAME_RULES: dict[ApiKey, tuple[names.NameRule, ...]] = {
    ApiKey.JOIN_GROUP: (names.INVALID_GROUP_JOIN,),
    ApiKey.SYNC_GROUP: (names.INVALID_GROUP,),
    ApiKey.HEARTBEAT: (names.INVALID_GROUP,),
    ApiKey.LEAVE_GROUP: (names.INVALID_GROUP,),
    ApiKey.OFFSET_DELETE: (names.INVALID_GROUP,),
    ApiKey.TXN_OFFSET_COMMIT: (names.INVALID_GROUP_TXN_OFFSETS,),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (names.EMPTY_GROUP_HEARTBEAT,),
    ApiKey.SHARE_GROUP_HEARTBEAT: (names.EMPTY_GROUP_HEARTBEAT,),
    ApiKey.STREAMS_GROUP_HEARTBEAT: (names.EMPTY_GROUP_HEARTBEAT,),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (names.EMPTY_GROUP_DESCRIBED,),
    ApiKey.SHARE_GROUP_DESCRIBE: (names.EMPTY_GROUP_DESCRIBED,),
    ApiKey.STREAMS_GROUP_DESCRIBE: (names.EMPTY_GROUP_DESCRIBED,),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (names.INVALID_GROUP_SHARE_OFFSETS,),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (names.INVALID_GROUP_SHARE_OFFSETS,),
    # Topic names, where Kafka validates them (CreateTopics and Metadata: proxy/tenancy/names.py), and config
    # resources' names (the configs handler asks).
    ApiKey.DESCRIBE_PRODUCERS: (names.INVALID_TOPIC_PRODUCERS,),
    ApiKey.API_VERSIONS: names.CLIENT_SOFTWARE,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (names.EMPTY_TOPIC_DESCRIBED, names.INVALID_TOPIC_DESCRIBED),
    ApiKey.DESCRIBE_CONFIGS: (names.DESCRIBED_CONFIGS,),
    ApiKey.ALTER_CONFIGS: (names.ALTERED_CONFIGS,),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (names.ALTERED_CONFIGS,),
}

_AUTHORIZED_OPERATIONS: dict[ApiKey, Fixer] = {
    ApiKey.METADATA: operations.metadata,
    ApiKey.DESCRIBE_CLUSTER: operations.describe_cluster,
    ApiKey.DESCRIBE_GROUPS: operations.groups,
    ApiKey.CONSUMER_GROUP_DESCRIBE: operations.groups,
}

# Controller mutations (KIP-599): partitions created, topics deleted, topics given partitions.
_MUTATION_ITEMS = {
    ApiKey.CREATE_TOPICS: "topics",
    ApiKey.DELETE_TOPICS: "responses",
    ApiKey.CREATE_PARTITIONS: "results",
}
_FETCH_BYTES = frozenset({ApiKey.FETCH, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE})

_STATE_GUARD_WRITES = frozenset(
    {
        ApiKey.PRODUCE,
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.DELETE_RECORDS,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.WRITE_TXN_MARKERS,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.ALTER_CONFIGS,
        ApiKey.ALTER_REPLICA_LOG_DIRS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    }
)
_USES_TXN_ID = frozenset(
    {
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.END_TXN,
        ApiKey.TXN_OFFSET_COMMIT,
    }
)
_LISTS_TOPICS = frozenset({ApiKey.METADATA, ApiKey.DESCRIBE_TOPIC_PARTITIONS})
_CONFIG_RESOURCES = frozenset({ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS})

_SPLICED = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE})
_RECORDS_IN_RESPONSE = frozenset({ApiKey.FETCH, ApiKey.SHARE_FETCH})
_SASL = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# Fetch sessions (KIP-227), from Fetch v7: session_id and session_epoch after max_wait_ms, min_bytes, max_bytes and
# isolation_level (and replica_id before v15).
_FETCH_SESSION = {ApiKey.FETCH: 7}
_TELEMETRY = frozenset({ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY})

# The stage that answers an API itself (for whom: its module says): ApiVersions, the SASL exchange, the
# management RPCs, a VC's ACL and client-quota APIs, SCRAM credentials of the proxy's own users.
ANSWERED_BY: dict[ApiKey, str] = {
    ApiKey.API_VERSIONS: "versions",
    **dict.fromkeys(_SASL, "authenticate"),
    **dict.fromkeys(management.KEYS, "management"),
    **dict.fromkeys((ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS), "acls"),
    **dict.fromkeys((ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS), "quotas"),
    **dict.fromkeys((ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS), "users"),
}


# -- the catalogue ---------------------------------------------------------------------------------------


@functools.cache
def catalogue() -> Mapping[int, ApiSpec]:
    """Every API's spec, by key: built on first use (the server's start) and checked across the rule files."""
    tenant = tenant_rules()
    endpoints = endpoint_rules()
    specs = {}
    for key, rule in api_rules().items():
        api = ApiKey(key)
        specs[api] = ApiSpec(
            key=api,
            rule=rule,
            tenant=tenant.get(api),
            endpoints=tuple(e for e in endpoints if e.api == rule.name),
            acl_need=_ACL_NEEDS.get(api),
            acl_listing=_ACL_LISTINGS.get(api),
            refuse_items=_REFUSE_ITEMS.get(api),
            authorized_operations=_AUTHORIZED_OPERATIONS.get(api),
            produce_bytes=api == ApiKey.PRODUCE,
            fetch_bytes=api in _FETCH_BYTES,
            mutation_items=_MUTATION_ITEMS.get(api),
            state_guard=StateGuardRule(
                writes=api in _STATE_GUARD_WRITES,
                uses_txn_id=api in _USES_TXN_ID,
                lists_topics=api in _LISTS_TOPICS,
                config_resources=api in _CONFIG_RESOURCES,
            ),
            spliced=api in _SPLICED,
            records_in_response=api in _RECORDS_IN_RESPONSE,
            sasl=api in _SASL,
            telemetry=api in _TELEMETRY,
            answered_by=ANSWERED_BY.get(api),
            fetch_session=_FETCH_SESSION.get(api),
            name_rules=_NAME_RULES.get(api, ()),
        )
    _check(specs)
    return specs


def spec(api_key: int) -> ApiSpec | None:
    """The API's spec, or None for a key the proxy does not know."""
    return catalogue().get(api_key)


def refusal_body(api_key: int, version: int, error: int, frame: Any, body_offset: int) -> bytes | None:
    """The response refusing every item of this request, or None when the API has no such shape."""
    api = spec(api_key)
    build = api.refuse_items if api is not None else None
    if build is None:
        return None
    request, _ = codec.decode(request_type(api_key, version), frame, body_offset)
    return codec.encode(build(request, response_type(api_key, version), ErrorCode(error)))


def _check(specs: Mapping[int, ApiSpec]) -> None:
    """The cross-checks between the tables, when the catalogue is built (fail at start, not on a request)."""
    tables: dict[str, Mapping[ApiKey, Any]] = {
        "ACL needs": _ACL_NEEDS,
        "ACL listings": _ACL_LISTINGS,
        "refusal shapes": _REFUSE_ITEMS,
        "name rules": _NAME_RULES,
        "authorized-operations fixers": _AUTHORIZED_OPERATIONS,
        "answering stages": ANSWERED_BY,
    }
    for what, table in tables.items():
        unknown = sorted(k.name for k in table if k not in specs)
        if unknown:
            raise ValueError(f"proxy/catalogue.py: {what} for APIs not in apis.yaml: {unknown}")
    # Every API translated for tenants must say what it needs of the ACLs (fail closed otherwise).
    missing = sorted(
        s.name for s in specs.values() if s.tenant is not None and s.tenant.action == "rewrite" and s.acl_need is None
    )
    if missing:
        raise ValueError(f"APIs translated for tenants with no ACL needs in proxy/catalogue.py: {missing}")
    # A listing is filtered only where the API's needs are registered.
    unlisted = sorted(s.name for s in specs.values() if s.acl_listing is not None and s.acl_need is None)
    if unlisted:
        raise ValueError(f"proxy/catalogue.py: listings without ACL needs: {unlisted}")
