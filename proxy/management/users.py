"""AlterUserScramCredentials and DescribeUserScramCredentials for the proxy's own users, sans-I/O
(docs/management.md#users-at-runtime).

Answered as a KRaft controller answers them (ScramControlManager, ScramImage in Kafka 4.2): the same
per-user errors and messages, a user altered twice in one request refused whole. Who may touch whom:

* **cluster-wide** callers (a super-admin, or a member of `kafka-cluster` whom kafka-cluster's ACLs give
  ALTER on the cluster, DESCRIBE to read, as a broker requires): any user, except that only a super-admin
  may change a super-admin's credentials or a state topic reader's, and nobody a user holding a
  *_VIRTUAL_CLUSTER right the caller could not grant (no right widens its holder's reach);
* **a VC's admins** (ALTER_VIRTUAL_CLUSTER on the VC they are connected in): users bound to that VC, and
  new users (no credential, bound nowhere), who join the VC; never a super-admin, another VC's member, a
  user holding rights beyond the VC, nor one with credentials but no VC. Where the listener relays unknown
  users to the broker, no new users: a name without a proxy credential may be a broker user, shut out (and
  taken over) by a credential at the proxy; an operator gives such a name one. Describe shows them only
  their VC's users, and any other name as one that does not exist.
* The proxy's own upstream user is never a proxy user: refused to everyone.

Refusals are CLUSTER_AUTHORIZATION_FAILED per user, as a broker answers per user.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from kio.schema.alter_user_scram_credentials.v0 import response as alter_v0
from kio.schema.describe_user_scram_credentials.v0 import response as describe_v0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from .. import audit
from ..acl.model import VC_OPERATIONS, Operation, Permission, ResourceType
from ..auth.credentials import CredentialError
from ..auth.users import (
    KAFKA_MAX_ITERATIONS,
    KAFKA_MIN_ITERATIONS,
    MECHANISMS_BY_TYPE,
    TYPE_OF,
    Record,
    credential_from_salted,
    scram_record,
)
from ..quoting import cut, shown
from ..tenancy import limits
from ..tenancy.model import TenancyImage, principal_record
from . import plane

log = logging.getLogger(__name__)

ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
DELETE_MISSING = "Attempt to delete a user credential that does not exist"
DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "
DESCRIBE_TWICE = "Cannot describe SCRAM credentials for the same user twice in a single request: "

_Error = tuple[ErrorCode, str]
_NO_THROTTLE = i32Timedelta.parse(timedelta(0))


@dataclass(frozen=True)
class Scope:
    """Who asks: `caller` (principal, super-admins, image), and `vc`: None for a cluster-wide caller, else
    the VC whose users it manages. `upstream_user`: the proxy's own login to the brokers. `relays_unknown`:
    a name without a proxy credential may be the broker's user, whom a new proxy credential would shut out."""

    caller: plane.Caller
    vc: str | None
    upstream_user: str | None = None
    relays_unknown: bool = False  # the listener relays logins of names without a proxy credential to the broker


def _user(name: str) -> str:
    return f"User:{name}"


def _readers(image: TenancyImage) -> frozenset[str]:
    guard = image.guard
    return frozenset(getattr(guard, "readers", ()) or ())


def _refusal(scope: Scope, name: str, image: TenancyImage) -> str | None:
    """Why this caller may not change `name`'s credentials (None: it may)."""
    caller, principal = scope.caller, _user(name)
    if scope.upstream_user is not None and name == scope.upstream_user:
        return "the proxy's own upstream user is not a proxy user"
    if caller.super_admin:
        return None
    if principal in caller.super_admins:
        return "only a super-admin may change a super-admin's credentials"
    if principal in _readers(image):
        return "only a super-admin may change a state topic reader's credentials"
    if scope.vc is not None:
        if scope.relays_unknown and name not in image.users.users:
            return f"{principal} has no proxy credential: its logins are relayed to the broker, whose user it may be"
        bound = image.principals.get(principal)
        if bound is None and name in image.users.users:  # someone's already, placed by an operator or not yet
            return f"{principal} is in no virtual cluster of the caller's"
        if bound not in (None, scope.vc):
            return f"{principal} is not in {scope.vc!r}"
        if plane._rights_beyond(image, caller, principal, scope.vc):
            return f"{principal} holds rights beyond {scope.vc!r}"
    return _wider_rights(caller, image, principal)


def _wider_rights(caller: plane.Caller, image: TenancyImage, principal: str) -> str | None:
    """A right of the target's over VCs that the caller could not grant: taking over its login would widen
    the caller's reach."""
    for b in image.cluster_acls:
        if b.principal != principal or b.resource_type is not ResourceType.CLUSTER:
            continue
        if b.permission is Permission.ALLOW and (b.operation in VC_OPERATIONS or b.operation is Operation.ALL):
            try:
                plane._may_grant(caller, b)
            except plane._Refused as refused:
                return f"{principal} holds a right the caller does not: {refused.message}"
    for vc in image.vcs.values():  # admins of older state
        if principal in vc.admins and not caller.may(plane.Op.ALTER_VIRTUAL_CLUSTER, vc.name):
            return f"{principal} holds rights on {vc.name!r} the caller does not"
    return None


# -- AlterUserScramCredentials ----------------------------------------------------------------------------


def alter(image: TenancyImage, scope: Scope, request: Any) -> tuple[Any, list[Record]]:
    """Kafka's order: deletions, then upsertions; a user named twice (in either list) is refused with
    DUPLICATE_RESOURCE; the response has one result per user: the successes, then the refusals."""
    caller = scope.caller.on(image)
    scope = replace(scope, caller=caller)
    bounds = limits.of(image, scope.vc)
    errors: dict[str, _Error] = {}
    deletions: dict[str, Any] = {}
    upsertions: dict[str, Any] = {}
    for d in request.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.duplicate_resource, ALTERED_TWICE)
            continue
        error = _authorize(scope, d.name, image) or _validate_deletion(d, image)
        if error is not None:
            errors[d.name] = error
        else:
            deletions[d.name] = d
    for u in request.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.duplicate_resource, ALTERED_TWICE)
            continue
        error = _authorize(scope, u.name, image) or _validate_upsertion(u, bounds)
        if error is not None:
            errors[u.name] = error
        else:
            upsertions[u.name] = u
    records: list[Record] = []
    results: list[Any] = []
    for name, d in deletions.items():
        mechanism = MECHANISMS_BY_TYPE[int(d.mechanism)]
        records.append(scram_record(name, mechanism, None))
        results.append(_altered(name))
        audit.note(log, "%s deleted the %s credential of user %s", caller.principal, mechanism, shown(name))
    users_here, state_records = limits.users_in(image, scope.vc), limits.record_count(image)
    where = f"virtual cluster {scope.vc!r}" if scope.vc is not None else "the users in no virtual cluster"
    for name, u in upsertions.items():
        mechanism = MECHANISMS_BY_TYPE[int(u.mechanism)]
        credential = credential_from_salted(mechanism, u.salt, int(u.iterations), u.salted_password)
        mine = [scram_record(name, mechanism, credential)]
        principal = _user(name)
        if scope.vc is not None and image.principals.get(principal) is None:
            mine.append(principal_record(principal, scope.vc))  # a VC admin's new user joins the VC
        # one more for the limit: a principal joining the VC, or (cluster-wide) a new user bound nowhere
        new = image.principals.get(principal) is None and (scope.vc is not None or name not in image.users.users)
        why = (new and limits.count_refusal(limits.MAX_USERS, bounds.max_users, users_here, 1, where)) or (
            limits.records_refusal(image, [*records, *mine], state_records)
        )
        if why:
            audit.note(log, "refusing %s user %s: %s", caller.principal, shown(name), why)
            errors[name] = (ErrorCode.policy_violation, why)
            continue
        users_here += new
        records += mine
        results.append(_altered(name))
        audit.note(log, "%s set the %s credential of user %s", caller.principal, mechanism, shown(name))
    for name, (code, message) in errors.items():
        results.append(_altered(name, code, message))
    return alter_v0.AlterUserScramCredentialsResponse(throttle_time=_NO_THROTTLE, results=tuple(results)), (records)


def _altered(name: str, code: ErrorCode = ErrorCode.none, message: str | None = None) -> Any:
    return alter_v0.AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message)


def _authorize(scope: Scope, name: str, image: TenancyImage) -> _Error | None:
    if _mechanism_or_name(name, None) is not None:
        return None  # an empty name: Kafka's validation answers it
    why = _refusal(scope, name, image)
    if why is None:
        return None
    audit.note(log, "refusing %s a change of user %s's credentials: %s", scope.caller.principal, shown(name), cut(why))
    return ErrorCode.cluster_authorization_failed, "Cluster authorization failed."


def _mechanism_or_name(name: str, mechanism: int | None) -> _Error | None:
    """Kafka's validateScramUsernameAndMechanism."""
    if mechanism is not None and mechanism not in MECHANISMS_BY_TYPE:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    return None


def _validate_deletion(d: Any, image: TenancyImage) -> _Error | None:
    error = _mechanism_or_name(d.name, int(d.mechanism))
    if error is not None:
        return error
    user = image.users.users.get(d.name)
    if user is None or MECHANISMS_BY_TYPE[int(d.mechanism)] not in user.scram:
        return ErrorCode.resource_not_found, DELETE_MISSING
    return None


def _validate_upsertion(u: Any, bounds: limits.StateLimits = limits.DEFAULT) -> _Error | None:
    error = _mechanism_or_name(u.name, int(u.mechanism))
    if error is not None:
        return error
    why = limits.user_name_refusal(u.name, bounds)  # beyond Kafka: a name every replica keeps, bounded
    if why is not None:
        return ErrorCode.unacceptable_credential, why
    iterations = int(u.iterations)
    if iterations < KAFKA_MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if iterations > KAFKA_MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    # Salt and salted password: any bytes, as Kafka (ScramControlManager checks only name, mechanism and
    # iterations); an empty salted password is refused as its HMAC refuses an empty key.
    mechanism = MECHANISMS_BY_TYPE[int(u.mechanism)]
    if not u.salted_password:
        return ErrorCode.unknown_server_error, "Empty key"
    try:
        credential_from_salted(mechanism, u.salt, iterations, u.salted_password)
    except CredentialError as exc:
        return ErrorCode.unacceptable_credential, str(exc)
    return None


# -- DescribeUserScramCredentials -------------------------------------------------------------------------


def describe(image: TenancyImage, scope: Scope, request: Any) -> Any:
    """Kafka's ScramImage.describe: no names means every user (a VC admin: every user of its VC); a name
    asked twice gets DUPLICATE_RESOURCE, one without credentials (or not the caller's to see)
    RESOURCE_NOT_FOUND."""
    visible = _visible(image, scope)
    asked: dict[str, bool] = {}  # name -> asked twice
    if not request.users:
        asked = dict.fromkeys(sorted(visible), False)
    else:
        for u in request.users:
            asked[u.name] = u.name in asked
    results = []
    for name, twice in asked.items():
        if twice:
            results.append(_described(name, ErrorCode.duplicate_resource, DESCRIBE_TWICE + name))
            continue
        user = visible.get(name)
        if user is None:
            results.append(_described(name, ErrorCode.resource_not_found, DESCRIBE_MISSING + name))
            continue
        infos = tuple(
            describe_v0.CredentialInfo(mechanism=i8(TYPE_OF[mech]), iterations=i32(cred.iterations))
            for mech, cred in sorted(user.scram.items(), key=lambda item: TYPE_OF[item[0]])
        )
        results.append(_described(name, ErrorCode.none, None, infos))
    return describe_v0.DescribeUserScramCredentialsResponse(
        throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None, results=tuple(results)
    )


def _visible(image: TenancyImage, scope: Scope) -> dict[str, Any]:
    users = image.users.users
    if scope.vc is None:
        return dict(users)
    return {name: u for name, u in users.items() if image.principals.get(_user(name)) == scope.vc}


def _described(name: str, code: ErrorCode, message: str | None, infos: tuple[Any, ...] = ()) -> Any:
    return describe_v0.DescribeUserScramCredentialsResult(
        user=name, error_code=code, error_message=message, credential_infos=infos
    )
