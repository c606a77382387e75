"""What the forwarder may serve for a virtual cluster's connection (sans-I/O): the API versions, and the grant.

An API version is a tenant's to forward when its translation (tenant.yaml) is a splice both ways and nothing else, and
its request names nothing but topics (by id, Produce v13+, or by name, Produce v3-v12), a group (Heartbeat, LeaveGroup,
OffsetCommit, ShareFetch, ShareAcknowledge) and transactional ids (Produce's, which may be null; a transactional
producer's AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit, never null), or from the version the
catalogue says for its fetch session (Fetch v7+: by name, v7-v12, or by id), or a ListOffsets whose replica id is a
consumer's (the session decodes those two only to read such fields). Such a request goes to the broker exactly when
every topic id in it is one the VC owns and every topic name one of its links, each one the caller may use for the API
(the VC's ACLs), its transactional id null or one the caller may use, its group one the caller may use, and its fetch
session none or the VC's: as the client sent it, its topic names each replaced by the physical name the link gives and
its group and transactional id by the VC's, as the session replaces them; its answer's names go back the same way. The
tenancy stage says which ids, names and sessions those are as it lets them through (`grant_for(ctx)`; a name only where
its link is the only name of its topic, so the answer's name is the one the client used): a grant is of one state of the
connection's virtual cluster, void once it changes (`VirtualCluster.changes`: its links, ACLs, settings, the ids of its
topics) or the whole state does (`TenancyImage.changes`: bindings, credentials, quotas, VCs made or deleted), so a right
revoked or a topic unlinked takes effect at the next request, and another VC's records leave it standing; its sessions
are void once the fetch-session table lets any id of the VC go (`FETCH_SESSIONS.changes_of`: another VC's churn leaves
them standing). The forwarder (native/src/forward.rs) reads a request with the plans made here, as the tenancy stage
reads it: a body the strict walker accepts, each name null or granted, no tagged field of its own; an answer with a
message, an id the grant does not hold or a session that changed goes back to the session's rewrite."""

from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING, Any

from ..catalogue import catalogue
from ..protocol import native, plans
from ..protocol.apis import request_type, response_type
from ..protocol.entities import unwrap
from ..rules import tenant_rules
from ..tenancy.engine import MESSAGE, Handler, message_paths, response_paths, splice_paths
from ..tenancy.fetch_sessions import FETCH_SESSIONS
from ..tenancy.handlers import HANDLERS
from ..tenancy.handlers.fetch import replica_id_request
from .forward_plans import TENANT

if TYPE_CHECKING:
    from .stages.context import ConnectionState

# A tenant's plans: the request body's strict plan (walker.validate), the request's names and the answer's names
# and messages (the tenancy splice's walks), for vcproxy_native to read as the tenancy stage reads them; and for a
# Fetch, where its session id is in the body and where its replica id is while a regular field (v13-v14; else None),
# which only a consumer's (negative) lets the forwarder serve it.
TenantPlans = tuple[Any, Any, Any, int | None, int | None]

# What a served tenant request may name: granted topic ids, granted topic names, transactional ids and group ids
# (renamed), and null ids. At least one topic, group or transactional id that is never null: what the grant is of.
NAMES = frozenset({"topic_id", "topic", "txn", "group"})
TOPICS = frozenset({"topic_id", "topic"})
GRANTED = TOPICS | {"group"}


def tenant_plans(key: int, version: int) -> TenantPlans | None:
    """The API version's plans, as checked in (forward_plans_gen.py): no schema is loaded to read them."""
    return TENANT.get((key, version))  # type: ignore[return-value]


def derive_tenant_plans(key: int, version: int) -> TenantPlans | None:
    """The plans of an API version the forwarder may serve for a VC, or None: one whose translation (tenant.yaml)
    is a splice both ways with nothing else (no handler, extra paths or filters), whose request names nothing
    but topic ids and ids that may be null, whose answer names nothing but topic ids and messages within the
    splice's reach, and that no stage reads otherwise (ACL listings, authorized operations, mutation quotas)."""
    rule = tenant_rules().get(key)
    spec = catalogue().get(key)
    if rule is None or spec is None or rule.action != "rewrite" or rule.request or rule.response or rule.filters:
        return None
    # Fetch's request is decoded by its handler (proxy/tenancy/handlers/fetch.py: the replica id, the cluster id, the
    # fetch session's owner); the forwarder reads it instead from the version the catalogue says (`fetch_session`): a
    # request with any tagged field of its own is handed back, its replica id (a regular field before v15) must be a
    # consumer's, its session none or one the ownership table gave the VC (`Grant.add_session`), and an answer that
    # opens, closes or loses a session is the session's.
    session = replica = None
    request = request_type(key, version)
    if spec.fetch_session is not None:
        fields = {f.name for f in plans.regular_fields(request)}
        session = plans.field_offset(request, "session_id")
        if session is None or version < spec.fetch_session:
            return None  # before fetch sessions (v4-v6: clients older than Kafka 1.1's), the session's
        if "replica_id" in fields:
            replica = plans.field_offset(request, "replica_id")
            if replica is None:
                return None
    elif _replica_only(rule):
        # ListOffsets: decoded by the session only to refuse a follower's replica id (a regular field), which the
        # forwarder reads at its offset instead; a version without one would be the session's.
        replica = plans.field_offset(request, "replica_id")
        if replica is None:
            return None
    elif set(rule.splice) != {"request", "response"} or rule.handler:
        return None
    if spec.acl_listing is not None or spec.authorized_operations is not None or spec.mutation_items is not None:
        return None
    response = response_type(key, version)
    names = splice_paths(request)
    kinds = {kind for _, kind in names}
    # At least one topic (by id or by name), group, or transactional id the schema says is never null (EndTxn's): a
    # request that names none would be served on a grant it has nothing to do with (InitProducerId, whose id may be
    # null, is IDEMPOTENT_WRITE's to decide without one). A null transactional id passes (Produce's: none); where the
    # schema says it is never null, the strict walk refuses one, as Kafka's parser does.
    txn = any(kind == "txn" and not _nullable(request, path) for path, kind in names)
    if not (kinds & GRANTED or txn) or kinds - NAMES or not message_paths(response)[1]:
        return None
    answer = response_paths(response)
    if {kind for _, kind in answer} - {*TOPICS, MESSAGE}:
        return None
    read = _renames(plans.splice_entity(request, names))
    if session is not None or replica is not None:  # decoded by the session: every string one kio decodes (UTF-8)
        strings = string_paths(request)
        if strings is None:
            return None
        renamed = {path for path, _ in names}  # a name the grant holds is one kio decoded
        read = _utf8(_renames(plans.splice_entity(request, names | {(p, UTF8) for p in strings - renamed})))
    return plans.check_entity(request)[0], read, _renames(plans.splice_entity(response, answer)), session, replica


REPLICA_ONLY = Handler(request=replica_id_request)


def _replica_only(rule: Any) -> bool:
    """Whether the API's translation is a splice of its answer with a handler that reads nothing of the request but
    its replica id (tenant.yaml: ListOffsets)."""
    return rule.splice == {"response"} and rule.handler is not None and HANDLERS.get(rule.handler) == REPLICA_ONLY


def _nullable(cls: type, path: str) -> bool:
    """Whether the field at a splice path ("array[].field" chains) may be null in this version."""
    head, _, rest = path.partition("[].")
    f = next(f for f in dataclasses.fields(cls) if f.name == head)
    if not rest:
        return unwrap(f.type)[1]
    inner, _ = unwrap(typing.get_args(unwrap(f.type)[0])[0])
    return _nullable(inner, rest)


# The names the forwarder renames by a grant (`Grant.add_names`), each with its map's index in vcproxy_native: a topic
# name (never null), a transactional id (null: none, passed as it is) and a group id (never null).
RENAMED = {"topic": 0, "txn": 1, "group": 2}


def _renames(node: Any) -> Any:
    """The plan with each topic name, transactional id and group id turned into the forwarder's rename (by the
    grant)."""
    if node[0] == "string" and node[2] in RENAMED:
        return ("rename", node[1], RENAMED[node[2]])
    if node[0] == "pstruct":
        return (node[0], node[1], tuple(_renames(step) for step in node[2]))
    if node[0] == "parray":
        return (node[0], node[1], _renames(node[2]))
    return node


UTF8 = "utf8"  # a string the forwarder checks is UTF-8 (a decode would refuse it otherwise)


def string_paths(cls: type) -> frozenset[str] | None:
    """The splice paths of every regular string field of `cls` ("array[].field" chains), or None when one is out of a
    splice's reach (below a struct that is not an array item)."""
    paths: set[str] = set()
    for f in plans.regular_fields(cls):
        if f.metadata.get("kafka_type") == "string":
            paths.add(f.name)
            continue
        if "kafka_type" in f.metadata:
            continue
        inner, is_array = _entity_of(f)
        if inner is None:
            continue
        below = string_paths(inner)
        if below is None or (below and not is_array):
            return None
        paths |= {f"{f.name}[].{path}" for path in below}
    return frozenset(paths)


def _entity_of(f: Any) -> tuple[type | None, bool]:
    hint, _ = unwrap(f.type)
    if typing.get_origin(hint) is tuple:
        inner, _ = unwrap(typing.get_args(hint)[0])
        return (inner if dataclasses.is_dataclass(inner) else None), True  # type: ignore[return-value]
    return (hint if dataclasses.is_dataclass(hint) else None), False  # type: ignore[return-value]


def _utf8(node: Any) -> Any:
    """The plan with each string captured as UTF8 turned into the forwarder's UTF-8 check."""
    if node[0] == "string" and node[2] == UTF8:
        return ("utf8", node[1])
    if node[0] in ("pstruct",):
        return (node[0], node[1], tuple(_utf8(step) for step in node[2]))
    if node[0] == "parray":
        return (node[0], node[1], _utf8(node[2]))
    return node


def renames(vc: Any, tx: Any) -> dict[int, list[tuple[bytes, bytes]]] | None:
    """The names a request by name was let through with, as (the client's, the broker's) per `RENAMED` index, for
    `Grant.add_names`; None when a topic name is not a plain link of the VC both ways (unknown, planned, or one of
    several names of its topic: the answer's name then depends on the request, which only the session remembers)."""
    if tx.unknown_topics or tx.planned or tx.refused:
        return None
    topics = []
    for physical, name in tx.topics.items():
        links = vc.physical_links.get(physical)
        if vc.physical_topic(name) != physical or links is None or len(links) != 1:
            return None
        topics.append((name.encode(), physical.encode()))
    txns = [(name.encode(), physical.encode()) for physical, name in tx.txn_ids.items()]
    groups = [(name.encode(), physical.encode()) for physical, name in tx.group_ids.items()]
    return {RENAMED["topic"]: topics, RENAMED["txn"]: txns, RENAMED["group"]: groups}


def grant_for(ctx: ConnectionState) -> Any:
    """The connection's grant for the state as it is now (a new one once it changed); None without the forwarder."""
    module = native.forwarding()
    image = ctx.image
    if module is None or image is None:
        return None
    if image.changes is None:
        image.changes = module.Generation()
    if FETCH_SESSIONS.make_generation is None:
        FETCH_SESSIONS.make_generation = module.Generation
    vc = ctx.vc
    if vc is not None and vc.changes is None:
        vc.changes = module.Generation()
    current = ctx.grant
    if current is None or not current.valid():
        # Of the whole state and of the connection's VC: a record about another VC leaves it standing.
        vc_changes = vc.changes if vc is not None else None
        sessions = FETCH_SESSIONS.changes_of(vc.id if vc is not None else "")
        current = ctx.grant = module.Grant(image.changes, sessions, vc_changes)
    return current


def sessions_used(ctx: ConnectionState, grant: Any) -> None:
    """The fetch sessions the forwarder served a Fetch of since last asked, marked used in the ownership table as the
    Python path marks those it serves: a busy consumer's session is not the least recently used of its VC."""
    used = grant.take_used()
    engine = ctx.engine
    if used and engine is not None:
        FETCH_SESSIONS.touch(engine.vc.id, ctx.broker, used)
