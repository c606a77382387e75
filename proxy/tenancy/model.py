"""The virtual-cluster model (KIP-1134), sans-I/O: records in, an in-memory image out.

The running truth is a compacted Kafka topic of records (see proxy/state/); every proxy replica
replays it into a `TenancyImage` and keeps applying new records. This module knows nothing of
Kafka clients: `apply(key, value)` takes one record, `value=None` is a tombstone.

Naming (all injective, so no two tenants can ever collide):
* topics: a link name in a VC points to a physical topic `UUID.link` (the KIP's scheme); the UUID
  is derived from the VC's id, the link and its generation (`created_topic_for`), so two VCs creating
  "orders" get two physical topics, concurrent creators in one VC get one, and no tenant can derive
  another VC's names (VC ids are never shown to tenants);
* group ids, share/streams group ids and transactional ids: `<vc.id>.<name>`, where vc.id is the
  VC's immutable UUID string (always 36 characters). The prefix has a fixed length, so the mapping
  is unambiguous whatever the VC or group names contain (separators, one VC name a prefix of another).
  Existing physical groups and transactional ids can be assigned to one VC (migration, KIP-1134): the
  VC then uses them under the same name, so committed offsets and producer state carry over.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..acl.model import AclBinding, AclSet, Permission
from ..auth.users import UserBook
from ..errors import Refusal
from ..quotas import model as quotas

MAX_TOPIC_NAME = 249
UUID_PREFIX_LEN = 36 + 1  # "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."
MAX_LINK_NAME = MAX_TOPIC_NAME - UUID_PREFIX_LEN
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_VC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,100}$")
KAFKA_CLUSTER = "kafka-cluster"  # the KIP's reserved VC: the physical cluster, names unchanged
# Records about one VC alone, named first in their key (its ACLs too, unless kafka-cluster's), and records about one
# physical topic (the VCs linking it): what voids only those VCs' grants (TenancyImage._scope).
_VC_RECORDS = frozenset({"vcconfig", "link", "gen", "group", "txn", "admin", "seeded"})
_TOPIC_RECORDS = frozenset({"topic", "parts"})
RESERVED_VC_NAMES = {KAFKA_CLUSTER}


class TenancyError(Refusal, ValueError):
    """A request to change the model that breaks its rules; the message says which."""


def new_cluster_id() -> str:
    """KIP-78: 22 characters of URL-safe base64 of a random UUID (no padding, never starting with '-')."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def validate_link_name(name: str) -> None:
    if name in (".", "..") or not _LEGAL_TOPIC.match(name):
        raise TenancyError(f"topic name {name!r} must be 1+ of [a-zA-Z0-9._-] and not '.' or '..'")
    if len(name) > MAX_LINK_NAME:
        raise TenancyError(
            f"topic name {name!r} is longer than {MAX_LINK_NAME} characters (the physical name "
            f"adds a {UUID_PREFIX_LEN}-character prefix and Kafka allows {MAX_TOPIC_NAME})"
        )


def validate_vc_name(name: str) -> None:
    if not _VC_NAME.match(name) or name in RESERVED_VC_NAMES:
        raise TenancyError(f"virtual cluster name {name!r} must be 1-100 of [a-zA-Z0-9._-] and not reserved")


def physical_topic_for(link: str) -> str:
    validate_link_name(link)
    return f"{uuid.uuid4()}.{link}"


def derived_topic_for(vc_id: str, link: str) -> str:
    """`uuid5(vc id, link).link`: the physical name of a topic the broker creates on the VC's behalf
    (Metadata auto-creation, Kafka Streams internal topics). The same for every proxy replica and
    request, so concurrent creators agree on one topic; no other VC can derive it."""
    validate_link_name(link)
    return f"{uuid.uuid5(uuid.UUID(vc_id), link)}.{link}"


def created_topic_for(vc_id: str, link: str, generation: int) -> str:
    """The physical name CreateTopics uses for incarnation `generation` of a link: deterministic, so
    concurrent creators (on any replica) ask the broker for one name and it picks one winner; a new
    generation after each delete, so a re-created link never lands on an old topic still being deleted
    (or kept). Generation 0 is `derived_topic_for`, the name Metadata auto-creation uses."""
    if generation == 0:
        return derived_topic_for(vc_id, link)
    validate_link_name(link)
    return f"{uuid.uuid5(uuid.UUID(vc_id), f'{link}#{generation}')}.{link}"


@dataclass
class VirtualCluster:
    name: str
    id: str  # UUID string; prefix of this VC's group and transactional ids
    cluster_id: str  # KIP-78, immutable, shown to clients as the cluster id
    links: dict[str, str] = field(default_factory=dict)  # link name -> physical topic
    physical_links: dict[str, list[str]] = field(default_factory=dict)  # physical -> link names, in order
    links_version: int = 0  # bumped whenever `links` changes: keys caches of what was computed from them
    groups: set[str] = field(default_factory=set)  # physical group ids assigned to this VC (same name in it)
    txns: set[str] = field(default_factory=set)  # physical transactional ids assigned likewise
    admins: set[str] = field(default_factory=set)  # principals that may describe and alter this VC
    acls: AclSet = field(default_factory=AclSet)  # the VC's own ACLs, in its own names (proxy/acl/)
    settings: dict[str, Any] = field(default_factory=dict)  # its own settings (proxy/tenancy/settings.py)
    # Bumped by every record about this VC alone (TenancyImage.apply): its connections' grants are void then, and
    # the other VCs' stand (vcproxy_native.Generation, made with the first grant; else None).
    changes: Any = field(default=None, repr=False, compare=False)

    # -- topics ----------------------------------------------------------------------------------
    def physical_topic(self, link: str) -> str | None:
        return self.links.get(link)

    def link_for(self, physical: str) -> str | None:
        names = self.physical_links.get(physical)
        return names[0] if names else None

    def derived_link(self, physical: str) -> str | None:
        """The name behind this VC's `derived_topic_for` name, linked or not (e.g. a source topic a
        Streams topology names before it exists); None for any other name."""
        head, dot, name = physical.partition(".")
        if not dot or len(head) != 36 or not name:
            return None
        return name if head == str(uuid.uuid5(uuid.UUID(self.id), name)) else None

    # -- groups and transactional ids ----------------------------------------------------------------
    @property
    def prefix(self) -> str:
        return f"{self.id}."

    def physical_id(self, name: str) -> str:
        return self.prefix + name

    def virtual_id(self, physical: str) -> str | None:
        """The VC-local name of a physical group/transactional id, or None if it is not this VC's."""
        return physical[len(self.prefix) :] if physical.startswith(self.prefix) else None

    def physical_group(self, name: str) -> str:
        return name if name in self.groups else self.prefix + name

    def virtual_group(self, physical: str) -> str | None:
        return physical if physical in self.groups else self.virtual_id(physical)

    def physical_txn(self, name: str) -> str:
        return name if name in self.txns else self.prefix + name

    def virtual_txn(self, physical: str) -> str | None:
        return physical if physical in self.txns else self.virtual_id(physical)

    @property
    def empty(self) -> bool:
        return not (self.links or self.groups or self.txns or self.admins)


@dataclass(frozen=True)
class Orphan:
    """A physical topic whose last link a VC deleted while the topic stayed (KIP-1134's unlink): it counts
    against that VC's topic and partition limits until it is deleted (docs/tenancy.md, "Orphaned topics")."""

    vc: str
    at: float  # when, in seconds since the epoch (the grace period counts from it)


@dataclass
class TenancyImage:
    """All virtual clusters, bindings, links and topic ids, as replayed from the state topic."""

    vcs: dict[str, VirtualCluster] = field(default_factory=dict)
    principals: dict[str, str] = field(default_factory=dict)  # "User:alice" -> vc name
    client_ids: dict[str, str] = field(default_factory=dict)  # client id -> vc name
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)  # physical topic -> topic id
    # topic id's int -> physical topic: asked per id per request, and an int key hashes and compares in C (a
    # UUID key runs UUID.__hash__ and __eq__ in the interpreter)
    topics_by_id: dict[int, str] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)  # physical topic -> partition count, as learned
    # physical topic -> the names of the VCs linking it (a dict as an ordered set): who links or owns a topic
    # is asked of these, not of every VC (kept by _apply_link and _apply_vc, the only writers of links)
    linked_by: dict[str, dict[str, None]] = field(default_factory=dict)
    generations: dict[tuple[str, str], int] = field(default_factory=dict)  # (vc, link) -> incarnation
    group_owners: dict[str, str] = field(default_factory=dict)  # assigned physical group id -> vc name
    txn_owners: dict[str, str] = field(default_factory=dict)  # assigned physical transactional id -> vc name
    seeded: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # vc -> seed entries applied once
    version: int = 0  # bumped on every applied record
    # Bumped by every record that is not about one VC alone (bindings, credentials, quotas, kafka-cluster's ACLs,
    # VCs made or deleted: `_scope`), read by the forwarder's thread without the interpreter: every grant made before
    # is void (vcproxy_native.Generation, made by proxy/core/grants.py with the first grant; else None).
    changes: Any = field(default=None, repr=False, compare=False)
    state_problem: str | None = None  # why the state topic cannot take changes now (set by the state service)
    guard: Any = None  # the state topic's guard for principals in no VC (proxy/tenancy/guard.py), set likewise
    limits: Any = None  # the config's state limits (tenancy/limits.StateLimits), set by the server; None: defaults
    orphans: dict[str, Orphan] = field(default_factory=dict)  # physical topic a VC's delete left behind -> by whom
    quotas: quotas.QuotaBook = field(default_factory=quotas.QuotaBook)  # client quotas (proxy/quotas/)
    # kafka-cluster's own ACLs (the KIP's cluster-wide ACLs): the *_VIRTUAL_CLUSTER rights on CLUSTER
    # resources naming VCs, and the physical names its proxy-authenticated members may use.
    cluster_acls: AclSet = field(default_factory=AclSet)
    users: UserBook = field(default_factory=UserBook)  # the proxy's users: salted SCRAM credentials (auth/users.py)
    # (image version, cluster ACLs' version) -> right_holders() then: made once per change, not per question
    _holders: tuple[tuple[int, int], frozenset[str]] | None = field(default=None, repr=False, compare=False)
    _user_names: tuple[tuple[int, int], frozenset[str]] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        # An image made from another's VCs (a "what if" of the management plane) indexes them as it starts.
        for vc in self.vcs.values():
            for physical in vc.physical_links:
                self.linked_by.setdefault(physical, {})[vc.name] = None

    # -- lookups -----------------------------------------------------------------------------------
    def right_holders(self) -> frozenset[str]:
        """Every principal a VC names as its admin or one of kafka-cluster's ACLs allows. Asked for each
        connection bound by client id at every change of the image (`Rights.holds_any`): made once per change."""
        key = (self.version, self.cluster_acls.version)
        if self._holders is None or self._holders[0] != key:
            holders = {principal for vc in self.vcs.values() for principal in vc.admins}
            holders.update(b.principal for b in self.cluster_acls if b.permission is Permission.ALLOW)
            self._holders = (key, frozenset(holders))
        return self._holders[1]

    def named_user_names(self) -> frozenset[str]:
        """The name after `User:` (the kind in any case) of every principal the image names: bound to a VC or
        to kafka-cluster, a VC's admin, or in one of kafka-cluster's ACLs, allowed or denied. A relayed login
        under one of these names is refused (ProxySession._may_relay): made once per change, not per login."""
        key = (self.version, self.cluster_acls.version)
        if self._user_names is None or self._user_names[0] != key:
            named = [*self.principals, *(p for vc in self.vcs.values() for p in vc.admins)]
            named += [b.principal for b in self.cluster_acls]
            names = frozenset(name for kind, _, name in (p.partition(":") for p in named) if kind.lower() == "user")
            self._user_names = (key, names)
        return self._user_names[1]

    def vc_for(self, principal: str | None, client_id: str | None = None) -> VirtualCluster | None:
        """The VC a principal is bound to by name, else its client id's: the plain lookup, without the
        trust model's rules (proxy/tenancy/rights.py `Rights.placement` decides who is where)."""
        name = self.principals.get(principal or "") or self.client_ids.get(client_id or "")
        return self.vcs.get(name) if name else None

    def owns_topic_id(self, vc: VirtualCluster, topic_id: uuid.UUID | None) -> bool:
        physical = self.topics_by_id.get(topic_id.int) if topic_id is not None else None
        return physical is not None and physical in vc.physical_links

    def physical_for_id(self, topic_id: uuid.UUID | None) -> str | None:
        return self.topics_by_id.get(topic_id.int) if topic_id is not None else None

    def links_to(self, physical: str) -> list[tuple[str, str]]:
        """(vc name, link name) of every link to a physical topic."""
        return [
            (name, link)
            for name in self.linked_by.get(physical, ())
            for link in self.vcs[name].physical_links.get(physical, [])
        ]

    def _linking(self, physical: str) -> list[VirtualCluster]:
        return [self.vcs[name] for name in self.linked_by.get(physical, ())]

    # -- ownership of physical topics ------------------------------------------------------------------
    def created_by(self, vc: VirtualCluster, physical: str) -> bool:
        """Whether `physical` is a name this VC's creations use (`created_topic_for` of any generation
        of its link name so far, which Metadata auto-creation and Streams share as generation 0)."""
        head, dot, link = physical.partition(".")
        if not dot or len(head) != 36 or not link:
            return False
        vc_uuid = uuid.UUID(vc.id)
        if head == str(uuid.uuid5(vc_uuid, link)):
            return True
        return any(
            head == str(uuid.uuid5(vc_uuid, f"{link}#{g}")) for g in range(1, self.generation(vc.name, link) + 1)
        )

    def topic_owner(self, physical: str) -> str | None:
        """The VC that owns a physical topic: the VC that created it (while it links it), else the one
        VC that links it; None when two or more VCs link it and none of them created it (then only the
        physical cluster, `kafka-cluster`, owns it). Only an owner may delete, truncate, reconfigure or
        grow the physical topic (docs/tenancy.md, "Shared topics")."""
        linking = self._linking(physical)
        for vc in linking:
            if self.created_by(vc, physical):
                return vc.name
        return linking[0].name if len(linking) == 1 else None

    def owns(self, vc: VirtualCluster, physical: str) -> bool:
        return self.topic_owner(physical) == vc.name

    # -- records -----------------------------------------------------------------------------------
    def apply(self, key: str, value: dict[str, Any] | None) -> None:
        kind, *parts = json.loads(key)
        handler = getattr(self, f"_apply_{kind}", None)
        if handler is None:
            return  # a newer proxy's record type: ignore rather than fail replay
        # Before the record is applied: the forwarder hands a connection back at once, and the session (on this
        # thread) can only read it after the whole record.
        if self.changes is not None:
            for changes in self._scope(kind, parts):
                changes.bump()
        handler(*parts, value=value)
        self.version += 1

    def _scope(self, kind: str, parts: list[Any]) -> list[Any]:
        """The generations a record voids the grants of: the VC it is about, the VCs linking the physical topic it is
        about, or (anything else) the whole state's. A grant is of its connection's VC: what it depends on is that
        VC's links, ACLs and settings, the ids of the topics it links, and the bindings and credentials of all."""
        if kind in _VC_RECORDS or (kind == "acl" and parts and parts[0] != KAFKA_CLUSTER):
            vc = self.vcs.get(parts[0]) if parts and isinstance(parts[0], str) else None
            return [vc.changes] if vc is not None and vc.changes is not None else []
        if kind in _TOPIC_RECORDS and parts and isinstance(parts[0], str):
            linking = (self.vcs.get(name) for name in self.linked_by.get(parts[0], ()))
            return [vc.changes for vc in linking if vc is not None and vc.changes is not None]
        return [self.changes]

    def _apply_vc(self, name: str, *, value: dict[str, Any] | None) -> None:
        if value is None:
            vc = self.vcs.pop(name, None)
            if vc is not None:
                for physical in vc.physical_links:
                    self._unlinked(physical, name)
                self.principals = {p: v for p, v in self.principals.items() if v != name}
                self.client_ids = {c: v for c, v in self.client_ids.items() if v != name}
                self.group_owners = {g: v for g, v in self.group_owners.items() if v != name}
                self.txn_owners = {t: v for t, v in self.txn_owners.items() if v != name}
            return
        existing = self.vcs.get(name)
        if existing is not None:
            return  # cluster id and VC id are immutable once created
        self.vcs[name] = VirtualCluster(name=name, id=value["id"], cluster_id=value["cluster_id"])

    def _apply_vcconfig(self, vc_name: str, key: str, *, value: dict[str, Any] | None) -> None:
        vc = self.vcs.get(vc_name)
        if vc is None:
            return
        if value is None:
            vc.settings.pop(key, None)
        else:
            vc.settings[key] = value["value"]

    def _apply_principal(self, principal: str, *, value: dict[str, Any] | None) -> None:
        if value is None:
            self.principals.pop(principal, None)
        else:
            self.principals[principal] = value["vc"]

    def _apply_client(self, client_id: str, *, value: dict[str, Any] | None) -> None:
        if value is None:
            self.client_ids.pop(client_id, None)
        else:
            self.client_ids[client_id] = value["vc"]

    def _apply_link(self, vc_name: str, link: str, *, value: dict[str, Any] | None) -> None:
        vc = self.vcs.get(vc_name)
        if vc is None:
            return
        old = vc.links.pop(link, None)
        if old is not None:
            names = vc.physical_links.get(old, [])
            if link in names:
                names.remove(link)
            if not names and vc.physical_links.pop(old, None) is not None:
                self._unlinked(old, vc_name)
        if value is not None:
            physical = value["physical"]
            vc.links[link] = physical
            vc.physical_links.setdefault(physical, []).append(link)
            self.linked_by.setdefault(physical, {})[vc_name] = None
        vc.links_version += 1

    def _unlinked(self, physical: str, vc_name: str) -> None:
        """`vc_name` links `physical` no more."""
        linking = self.linked_by.get(physical)
        if linking is not None:
            linking.pop(vc_name, None)
            if not linking:
                del self.linked_by[physical]

    def _apply_gen(self, vc_name: str, link: str, *, value: dict[str, Any] | None) -> None:
        if value is None:
            self.generations.pop((vc_name, link), None)
        else:
            self.generations[(vc_name, link)] = int(value["gen"])

    def _apply_group(self, vc_name: str, group: str, *, value: dict[str, Any] | None) -> None:
        self._assign(vc_name, group, value, "groups", self.group_owners)

    def _apply_txn(self, vc_name: str, txn: str, *, value: dict[str, Any] | None) -> None:
        self._assign(vc_name, txn, value, "txns", self.txn_owners)

    def _assign(self, vc_name: str, name: str, value: Any, attr: str, owners: dict[str, str]) -> None:
        vc = self.vcs.get(vc_name)
        if value is None:
            if vc is not None:
                getattr(vc, attr).discard(name)
            if owners.get(name) == vc_name:
                del owners[name]
        elif vc is not None and owners.get(name, vc_name) == vc_name:  # one owner: the first in log order
            getattr(vc, attr).add(name)
            owners[name] = vc_name

    def _apply_admin(self, vc_name: str, principal: str, *, value: dict[str, Any] | None) -> None:
        vc = self.vcs.get(vc_name)
        if vc is not None:
            (vc.admins.discard if value is None else vc.admins.add)(principal)

    def _apply_acl(self, vc_name: str, *parts: str, value: dict[str, Any] | None) -> None:
        vc = self.vcs.get(vc_name)
        acls = self.cluster_acls if vc_name == KAFKA_CLUSTER else vc.acls if vc is not None else None
        if acls is None:
            return
        try:
            binding = AclBinding.from_key_parts(list(parts))
        except (KeyError, ValueError):
            return  # a newer proxy's binding: ignore rather than fail replay
        (acls.discard if value is None else acls.add)(binding)

    def _apply_quota(self, *parts: Any, value: dict[str, Any] | None) -> None:
        try:
            ent, key, amount = quotas.parse_record(list(parts), value)
        except (KeyError, ValueError, TypeError):
            return  # a newer proxy's quota record: ignore rather than fail replay
        self.quotas.apply(ent, key, amount)

    def _apply_scram(self, user: str, mechanism: str, *, value: dict[str, Any] | None) -> None:
        self.users.apply_scram(user, mechanism, value)

    def _apply_userseed(self, user: str, *, value: dict[str, Any] | None) -> None:
        self.users.apply_seed(user, value)

    def _apply_seeded(self, vc_name: str, *, value: dict[str, Any] | None) -> None:
        if value is None:
            self.seeded.pop(vc_name, None)
        else:
            self.seeded[vc_name] = {k: list(v) for k, v in value.items()}

    def bound_to(self, vc_name: str) -> tuple[list[str], list[str]]:
        """The principals and client ids bound to a VC."""
        principals = sorted(p for p, v in self.principals.items() if v == vc_name)
        return principals, sorted(c for c, v in self.client_ids.items() if v == vc_name)

    def generation(self, vc_name: str, link: str) -> int:
        return self.generations.get((vc_name, link), 0)

    def _apply_parts(self, physical: str, *, value: dict[str, Any] | None) -> None:
        if value is None:
            self.partitions.pop(physical, None)
        else:
            self.partitions[physical] = int(value["n"])

    def _apply_orphan(self, physical: str, *, value: dict[str, Any] | None) -> None:
        if value is None:
            self.orphans.pop(physical, None)
        else:
            self.orphans[physical] = Orphan(str(value["vc"]), float(value["at"]))

    def orphans_of(self, vc_name: str) -> list[str]:
        """The physical topics this VC left behind (not linked again by it)."""
        vc = self.vcs.get(vc_name)
        linked = vc.physical_links if vc is not None else {}
        return sorted(p for p, o in self.orphans.items() if o.vc == vc_name and p not in linked)

    def _apply_topic(self, physical: str, *, value: dict[str, Any] | None) -> None:
        if value is None:
            topic_id = self.topic_ids.pop(physical, None)
            if topic_id is not None:
                self.topics_by_id.pop(topic_id.int, None)
            return
        topic_id = uuid.UUID(value["topic_id"])
        self.topic_ids[physical] = topic_id
        self.topics_by_id[topic_id.int] = physical


# -- record constructors: (key, value) pairs for the state topic ----------------------------------


def _key(*parts: str) -> str:
    return json.dumps(list(parts), separators=(",", ":"))


def vc_record(name: str, vc_id: str | None = None, cluster_id: str | None = None) -> tuple[str, dict[str, Any]]:
    validate_vc_name(name)
    return _key("vc", name), {"id": vc_id or str(uuid.uuid4()), "cluster_id": cluster_id or new_cluster_id()}


def vc_delete(name: str) -> tuple[str, None]:
    return _key("vc", name), None


def principal_record(principal: str, vc: str | None) -> tuple[str, dict[str, Any] | None]:
    return _key("principal", principal), (None if vc is None else {"vc": vc})


def client_record(client_id: str, vc: str | None) -> tuple[str, dict[str, Any] | None]:
    return _key("client", client_id), (None if vc is None else {"vc": vc})


def link_record(vc: str, link: str, physical: str | None) -> tuple[str, dict[str, Any] | None]:
    validate_link_name(link)
    return _key("link", vc, link), (None if physical is None else {"physical": physical})


def gen_record(vc: str, link: str, generation: int) -> tuple[str, dict[str, Any]]:
    """The incarnation the next CreateTopics of `link` uses (written when the link is deleted)."""
    return _key("gen", vc, link), {"gen": generation}


def group_record(vc: str, group: str, assigned: bool) -> tuple[str, dict[str, Any] | None]:
    """An existing physical consumer group assigned to (or released from) a VC."""
    return _key("group", vc, group), ({} if assigned else None)


def txn_record(vc: str, txn: str, assigned: bool) -> tuple[str, dict[str, Any] | None]:
    return _key("txn", vc, txn), ({} if assigned else None)


def admin_record(vc: str, principal: str, admin: bool) -> tuple[str, dict[str, Any] | None]:
    return _key("admin", vc, principal), ({} if admin else None)


def setting_record(vc: str, key: str, value: Any) -> tuple[str, dict[str, Any]]:
    """One of a VC's settings (proxy/tenancy/settings.py), stored typed."""
    return _key("vcconfig", vc, key), {"value": value}


def setting_delete(vc: str, key: str) -> tuple[str, None]:
    """A VC's setting removed: the static config's applies again."""
    return _key("vcconfig", vc, key), None


def seeded_record(vc: str, entries: dict[str, list[str]]) -> tuple[str, dict[str, Any]]:
    """What of a VC's seed entry has been applied (each entry is applied once; see proxy/state/seed.py)."""
    return _key("seeded", vc), {k: sorted(v) for k, v in entries.items()}


def topic_record(physical: str, topic_id: uuid.UUID | None) -> tuple[str, dict[str, Any] | None]:
    return _key("topic", physical), (None if topic_id is None else {"topic_id": str(topic_id)})


def partitions_record(physical: str, count: int | None) -> tuple[str, dict[str, Any] | None]:
    """How many partitions a VC's physical topic has, as the proxy learned it (for the topic policy's
    per-VC partition limit: proxy/tenancy/policy.py); None when the topic is deleted."""
    return _key("parts", physical), (None if count is None else {"n": int(count)})


def orphan_record(physical: str, vc: str | None, at: float = 0.0) -> tuple[str, dict[str, Any] | None]:
    """A physical topic `vc` left behind when it deleted its last link (None: deleted, or linked again)."""
    return _key("orphan", physical), (None if vc is None else {"vc": vc, "at": at})


def quota_record(ent: quotas.Entity, key: str, value: float | None) -> tuple[str, dict[str, Any] | None]:
    """A client quota (proxy/quotas/model.py): one entity's one key; None removes it."""
    return quotas.record(ent, key, value)
