"""Bounds on what the state topic holds (issue 23, point 4), sans-I/O.

Every user, ACL, client-id binding and quota entity is a record of the compacted state topic, kept in
every replica's memory and replayed at every start. A tenant's admin who can create them without bound
can grow every replica (a 30,000-character user name was accepted before these checks). So each kind
has a limit per VC, and the state a cluster-wide total:

* `max_user_name_bytes` (256): a SCRAM user name's length in UTF-8 bytes. Kafka's controller checks only
  that a name is not empty (ScramControlManager.validateScramUsernameAndMechanism); its bound in practice
  is the record field's, 32767 bytes, which is the most this setting allows. The characters: RFC 5802
  lets a SCRAM name hold any UTF-8 but escapes `,` and `=` (`=2C`, `=3D`, undone by Kafka's
  ScramFormatter.username); the proxy also refuses control characters (NUL, C0, DEL, C1), which no login
  form carries unambiguously and which forge log lines.
* `max_users`, `max_acls`, `max_client_ids`, `max_quota_entities`: per VC (for cluster-wide callers'
  users: the users bound to no VC, under the global value).
* `max_records`: every record of the state, cluster-wide (proxy config only).
* `max_record_bytes`: one record's key and value as written (a binding's names are client-supplied).

Defaults are the proxy config's `tenancy.state_limits` (proxy/config.py); a cluster operator may set a
VC's own with `vcproxy virtual-clusters alter --config max_users=...` (proxy/tenancy/settings.py): a VC's
admin never raises them. A refusal names the limit and its value.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import TenancyImage

KAFKA_MAX_STRING_BYTES = 0x7FFF  # Kafka's generated messages refuse a longer string field

MAX_USER_NAME_BYTES = "max_user_name_bytes"
MAX_USERS = "max_users"
MAX_ACLS = "max_acls"
MAX_CLIENT_IDS = "max_client_ids"
MAX_QUOTA_ENTITIES = "max_quota_entities"
ORPHAN_GRACE_SECONDS = "orphan_grace_seconds"
VC_KEYS = (MAX_USER_NAME_BYTES, MAX_USERS, MAX_ACLS, MAX_CLIENT_IDS, MAX_QUOTA_ENTITIES, ORPHAN_GRACE_SECONDS)


@dataclass(frozen=True)
class StateLimits:
    """One VC's limits (or the config's defaults). None for a count: no limit."""

    max_user_name_bytes: int = 256
    max_users: int | None = 1000
    max_acls: int | None = 1000
    max_client_ids: int | None = 1000
    max_quota_entities: int | None = 1000
    max_records: int | None = 100_000
    max_record_bytes: int = 4096
    orphan_grace_seconds: float | None = None  # None: the proxy never deletes orphaned physical topics

    @classmethod
    def from_settings(cls, base: StateLimits, stored: Mapping[str, Any]) -> StateLimits:
        overrides = {k: stored[k] for k in VC_KEYS if k in stored}
        return replace(base, **overrides) if overrides else base


DEFAULT = StateLimits()
_NAMES = frozenset(f.name for f in fields(StateLimits))


def check_value(key: str, value: Any) -> str | None:
    """Why `value` cannot be setting `key` (None: it can); None values mean no limit, except for names."""
    if key not in _NAMES:
        return "unknown limit"
    if value is None:
        return "must be set" if key in (MAX_USER_NAME_BYTES, "max_record_bytes") else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    if key == ORPHAN_GRACE_SECONDS:
        return "must be at least 0" if value < 0 else None
    if not isinstance(value, int):
        return "must be a whole number"
    if key == MAX_USER_NAME_BYTES and not 1 <= value <= KAFKA_MAX_STRING_BYTES:
        return f"must be 1 to {KAFKA_MAX_STRING_BYTES} (the longest string a Kafka record field holds)"
    if key == "max_record_bytes" and not 256 <= value <= 1 << 20:
        return "must be 256 to 1048576"
    if value < 0:
        return "must be at least 0, or null for no limit"
    return None


def of(image: TenancyImage, vc: str | None) -> StateLimits:
    """A VC's limits: its stored settings over the config's defaults (`image.limits`)."""
    base = getattr(image, "limits", None) or DEFAULT
    found = image.vcs.get(vc) if vc is not None else None
    return StateLimits.from_settings(base, found.settings) if found is not None else base


# -- refusals: None when allowed, else the message (the API's own error code is the caller's) --------------


def user_name_refusal(name: str, limits: StateLimits) -> str | None:
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > limits.max_user_name_bytes:
        return f"User name is {size} bytes: the limit max_user_name_bytes is {limits.max_user_name_bytes}"
    for ch in name:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            return f"User name holds control character U+{ord(ch):04X}: SCRAM names may not"
    return None


def count_refusal(
    key: str, limit: int | None, have: int, adding: int = 1, where: str = "this virtual cluster"
) -> str | None:
    if limit is not None and have + adding > limit:
        return f"The limit {key} of {where} is {limit} (it has {have})"
    return None


def users_in(image: TenancyImage, vc: str | None) -> int:
    """The principals bound to `vc` (a VC admin's new users join it); None: proxy users bound to no VC."""
    principals = image.principals
    if vc is not None:
        return sum(1 for v in principals.values() if v == vc)
    return sum(1 for name in image.users.users if f"User:{name}" not in principals)


def client_ids_in(image: TenancyImage, vc: str) -> int:
    return sum(1 for v in image.client_ids.values() if v == vc)


def record_count(image: TenancyImage) -> int:
    """The live records the image holds (what compaction leaves of the state topic), counted by kind."""
    count = len(image.vcs) + len(image.principals) + len(image.client_ids) + len(image.topic_ids)
    count += len(image.partitions) + len(image.generations) + len(image.seeded) + len(image.cluster_acls)
    count += len(getattr(image, "orphans", ()))
    for vc in image.vcs.values():
        count += len(vc.settings) + len(vc.links) + len(vc.groups) + len(vc.txns) + len(vc.admins) + len(vc.acls)
    count += sum(len(keys) for keys in image.quotas.values.values())
    count += sum(len(user.scram) for user in image.users.users.values()) + len(image.users.seeded)
    return count


def record_size_refusal(record: tuple[str, Any], limits: StateLimits) -> str | None:
    key, value = record
    size = len(key.encode()) + (len(json.dumps(value, separators=(",", ":")).encode()) if value is not None else 0)
    if size > limits.max_record_bytes:
        return f"A state record of {size} bytes: the limit max_record_bytes is {limits.max_record_bytes}"
    return None


def records_refusal(image: TenancyImage, records: Iterable[tuple[str, Any]], have: int | None = None) -> str | None:
    """Each record's size and the state's total: None if these records may be written. `have`: the
    state's records now (counted when not given)."""
    limits = getattr(image, "limits", None) or DEFAULT
    adding = 0
    for record in records:
        why = record_size_refusal(record, limits)
        if why is not None:
            return why
        adding += record[1] is not None
    if adding and limits.max_records is not None:
        have = record_count(image) if have is None else have
        if have + adding > limits.max_records:
            return f"The limit max_records of the proxy's state is {limits.max_records} (it has {have})"
    return None


@dataclass(frozen=True)
class Room:
    """What a decision that sees only part of the image (a VC's ACLs, the quota book) needs: the VC's
    limits and the state's records now."""

    limits: StateLimits = DEFAULT
    records: int = 0

    def total_refusal(self, adding: int) -> str | None:
        limit = self.limits.max_records
        if adding and limit is not None and self.records + adding > limit:
            return f"The limit max_records of the proxy's state is {limit} (it has {self.records})"
        return None


def room(image: TenancyImage, vc: str | None) -> Room:
    return Room(of(image, vc), record_count(image))
