"""What each API needs of the ACLs, and one request's authorization (sans-I/O).

The tenancy translation sees every topic, group and transactional id a request names (the annotated
fields of Kafka's schemas, plus the rules' extras), so the authorization stage hands it an `Access`
and the translation asks it about each name as it translates: the body is decoded once. What is
refused then follows Kafka's answer for that API:

* a topic (name or id) the caller may not use is sent to the broker as a placeholder that exists
  nowhere, so the broker answers that item in the API's own shape; on the way back its error becomes
  TOPIC_AUTHORIZATION_FAILED (`fix_response`). A listing of all topics leaves it out, as Kafka does.
* a group or transactional id in an API about one of them refuses the request with the API's
  GROUP_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED; in APIs about several (describe, delete) the item
  goes as a placeholder and its error is set on the way back, like a topic's.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from .model import CLUSTER_NAME, AclSet, Authorizer, Operation, ResourceType, Subject

Op = Operation

RESOURCE_OF_KIND = {
    "topic": ResourceType.TOPIC,
    "topic_id": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "txn": ResourceType.TRANSACTIONAL_ID,
}
ERROR_OF_KIND = {
    "topic": ErrorCode.topic_authorization_failed,
    "topic_id": ErrorCode.topic_authorization_failed,
    "group": ErrorCode.group_authorization_failed,
    "txn": ErrorCode.transactional_id_authorization_failed,
}


Listing = tuple[str, str, str]  # a listing's (array, item field, identifier kind)


@dataclass(frozen=True)
class Need:
    """What one API needs: an operation per identifier kind, and whether a refused group or
    transactional id refuses the whole request (APIs about one of them) or only its item."""

    ops: Mapping[str, Operation]
    whole: bool = True
    items_from: int | None = None  # the version from which the API is about several (per-item errors)
    idempotent: bool = False  # InitProducerId: no transactional id needs IDEMPOTENT_WRITE (or WRITE on a topic)


def need(whole: bool = True, items_from: int | None = None, idempotent: bool = False, **ops: Operation) -> Need:
    if "topic" in ops:
        ops.setdefault("topic_id", ops["topic"])  # a topic named by id needs what its name needs
    return Need(ops, whole, items_from, idempotent)


# Fields that name the item an error belongs to, by identifier kind (for `fix_response`).
_NAME_FIELDS = {
    "topic": ("name", "topic", "topic_name"),
    "group": ("group_id", "group", "key"),
    "txn": ("transactional_id", "key"),
}


@dataclass
class Access:
    """One request's authorization: asked by the translation, then read by the stages."""

    authorizer: Authorizer
    who: Subject
    api_key: int
    version: int
    need: Need
    listing: Listing | None = None  # a listing whose items the caller sees only with DESCRIBE
    denied: dict[str, set[Any]] = field(default_factory=dict)  # kind -> names (or topic ids) refused
    seen: set[str] = field(default_factory=set)  # kinds the request named

    def allows(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        return self.authorizer.allows(self.who, op, rtype, name)

    def permits(self, kind: str, name: Any, link: str | None = None) -> bool:
        """May the request use this identifier? `link` names a topic given by id."""
        op = self.need.ops.get(kind)
        self.seen.add(kind)
        if op is None:
            return True
        value = link if kind == "topic_id" else name
        if value is None or self.allows(op, RESOURCE_OF_KIND[kind], value):
            return True
        self.denied.setdefault(kind, set()).add(name)
        return False

    def may_create_topic(self, link: str) -> bool:
        return self.allows(Op.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or self.allows(
            Op.CREATE, ResourceType.TOPIC, link
        )

    @property
    def whole(self) -> bool:
        """A refused group or transactional id refuses the request (else only its item)."""
        need = self.need
        return need.whole and (need.items_from is None or self.version < need.items_from)

    def refusal(self) -> tuple[int, str] | None:
        """A whole-request refusal once the request was translated: (error, message), or None."""
        if self.whole:
            for kind in ("txn", "group"):
                names = self.denied.get(kind)
                if names:
                    return ERROR_OF_KIND[kind], f"not authorized: {kind} {sorted(names)[0]!r}"
        if self.need.idempotent and "txn" not in self.seen and not self._may_write_idempotently():
            return ErrorCode.cluster_authorization_failed, "not authorized: IDEMPOTENT_WRITE on the cluster"
        return None

    def _may_write_idempotently(self) -> bool:
        return may_write_idempotently(self.allows, self.authorizer.acls)

    @property
    def any_denied(self) -> bool:
        return any(self.denied.values())

    def fix_response(self, body: Any) -> Any:
        """Items the request named but may not use get the API's authorization error."""
        if not self.any_denied:
            return body
        names = {kind: self.denied.get(kind, set()) for kind in _NAME_FIELDS}
        names["topic"] = names["topic"] | self.denied.get("topic_id", set())
        return _fix(body, names)

    def filter_listing(self, body: Any) -> Any:
        listing = self.listing
        if listing is None:
            return body
        array, item_field, kind = listing
        op = Op.DESCRIBE
        kept = tuple(
            item for item in getattr(body, array) if self.allows(op, RESOURCE_OF_KIND[kind], getattr(item, item_field))
        )
        return dataclasses.replace(body, **{array: kept})


def may_write_idempotently(allows: Callable[[Operation, ResourceType, str], bool], acls: AclSet) -> bool:
    """Kafka (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (a literal one the ACLs
    name, or every topic)."""
    if allows(Op.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME):
        return True
    return any(
        b.operation in (Op.WRITE, Op.ALL) and allows(Op.WRITE, ResourceType.TOPIC, b.name)
        for b in acls.by_type.get(ResourceType.TOPIC, ())
        if b.name != "*" and b.pattern.name == "LITERAL"
    ) or allows(Op.WRITE, ResourceType.TOPIC, "*")


def _denied_item(obj: Any, names: Mapping[str, set[Any]]) -> int | None:
    for kind, fields in _NAME_FIELDS.items():
        for name in fields:
            value = getattr(obj, name, None)
            if value is not None and value in names[kind]:
                return ERROR_OF_KIND[kind]
    topic_id = getattr(obj, "topic_id", None)
    if isinstance(topic_id, uuid.UUID) and topic_id in names["topic"]:
        return ErrorCode.topic_authorization_failed
    return None


def _fix(obj: Any, names: Mapping[str, set[Any]], error: int | None = None) -> Any:
    if not dataclasses.is_dataclass(obj):
        return obj
    error = _denied_item(obj, names) or error
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "error_code" and error is not None:
            changes[f.name] = ErrorCode(error)
        elif f.name == "error_message" and error is not None:
            changes[f.name] = None
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            changes[f.name] = tuple(_fix(v, names, error) for v in value)
        elif dataclasses.is_dataclass(value):
            changes[f.name] = _fix(value, names, error)
    return dataclasses.replace(obj, **changes) if changes else obj
