"""A virtual cluster's own settings (issue 19, point 3), sans-I/O: what they are, how a value given as
text (the management RPC, `vcproxy virtual-clusters alter --config K=V`) is checked and stored, and the
run-time lookups that read them before the static config.

Each setting is one state record `["vcconfig", vc, key]` with `{"value": v}` (docs/state.md): two replicas
changing two keys at once never undo each other, and a tombstone goes back to the static config. Values
are stored typed (bool, int or null for "no limit", a string, labels as an object).

Who may set what (proxy/management/plane.py): `description` and `labels` are the VC's own (showback),
ALTER_VIRTUAL_CLUSTER on the VC; every other key widens or narrows what the VC may reach or use, so only
a cluster operator (ALTER_VIRTUAL_CLUSTER on kafka-cluster) sets or deletes it: a VC's admin never raises
its own limits.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Protocol

from pydantic import Field, TypeAdapter, ValidationError

from ..errors import Refusal
from . import limits as state_limits
from .model import TenancyImage
from .policy import LIMIT_MINIMUMS, TopicPolicy

DESCRIPTION = "description"
LABELS = "labels"
ALLOW_IF_NO_ACL = "allow_everyone_if_no_acl_found"
DELETE_PHYSICAL_TOPICS = "delete_physical_topics"
POLICY_KEYS = ("max_partitions_per_topic", "max_topics", "max_partitions", "allow_unlisted_configs")
LIMIT_KEYS = state_limits.VC_KEYS  # what the VC's state may hold (proxy/tenancy/limits.py)
# The VC's own bound in the proxy's fetch-session table (proxy/tenancy/fetch_sessions.py), over the config's
# `limits.max_fetch_sessions_per_vc`: a large tenant's consumers need more than the default.
MAX_FETCH_SESSIONS = "max_fetch_sessions"
TABLE_KEYS = (MAX_FETCH_SESSIONS,)
KEYS = (DESCRIPTION, LABELS, ALLOW_IF_NO_ACL, DELETE_PHYSICAL_TOPICS, *POLICY_KEYS, *LIMIT_KEYS, *TABLE_KEYS)
OPERATOR_KEYS = frozenset({ALLOW_IF_NO_ACL, DELETE_PHYSICAL_TOPICS, *POLICY_KEYS, *LIMIT_KEYS, *TABLE_KEYS})

MAX_DESCRIPTION = 1024
MAX_LABELS = 64
_LABEL_KEY = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9._/-]{0,62})$")
_LABEL_VALUE = re.compile(r"^[a-zA-Z0-9._/-]{0,63}$")
_BOOLS = {"true": True, "false": False}
_LIMITS = {key: TypeAdapter(Annotated[int, Field(ge=minimum)]) for key, minimum in LIMIT_MINIMUMS.items()}


class SettingError(Refusal, ValueError):
    """A key or value refused; the message names the key and says why."""

    def __init__(self, key: str, reason: str):
        super().__init__(f"{key}: {reason}")
        self.key = key


def parse(key: str, text: str) -> Any:
    """The stored value of `key` given as text; SettingError if the key or value is not allowed."""
    if key not in KEYS:
        raise SettingError(key, f"unknown virtual cluster setting (known: {', '.join(KEYS)})")
    if key == DESCRIPTION:
        return check_description(key, text)
    if key == LABELS:
        return parse_labels(text)
    if key in (ALLOW_IF_NO_ACL, DELETE_PHYSICAL_TOPICS, "allow_unlisted_configs"):
        value = _BOOLS.get(text.strip().lower())
        if value is None:
            raise SettingError(key, f"must be true or false (got {text!r})")
        return value
    if key in LIMIT_KEYS:
        return _state_limit(key, text)
    if key in TABLE_KEYS:
        return _table_bound(key, text)
    return _limit(key, text)


def _table_bound(key: str, text: str) -> int:
    """A VC's bound in one of the proxy's tables: a whole number of entries, at least 1 (delete the setting for the
    config's; there is no \"no limit\": the table's total bounds every VC)."""
    try:
        value = int(text.strip())
    except ValueError:
        raise SettingError(key, f"must be a whole number (got {text!r})") from None
    if value < 1:
        raise SettingError(key, "must be at least 1")
    return value


def _state_limit(key: str, text: str) -> int | float | None:
    raw = text.strip().lower()
    value: int | float | None
    if raw in ("null", "none"):
        value = None
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw) if key == state_limits.ORPHAN_GRACE_SECONDS else None
            except ValueError:
                value = None
            if value is None or value != value or value in (float("inf"), float("-inf")):
                raise SettingError(key, f"must be a whole number, or null for no limit (got {text!r})") from None
    why = state_limits.check_value(key, value)
    if why is not None:
        raise SettingError(key, why)
    return value


def _limit(key: str, text: str) -> int | None:
    """A topic policy limit, within the bounds `tenancy.topic_policy` has (both read them from
    proxy/tenancy/policy.py, and pydantic words the refusal alike)."""
    raw = text.strip().lower()
    if raw in ("null", "none"):
        return None
    try:
        number = int(raw)
    except ValueError:
        raise SettingError(key, f"must be a whole number, or null for no limit (got {text!r})") from None
    try:
        _LIMITS[key].validate_python(number)
    except ValidationError as exc:
        raise SettingError(key, exc.errors()[0]["msg"]) from None
    return number


def check_description(key: str, text: str) -> str:
    if len(text) > MAX_DESCRIPTION:
        raise SettingError(key, f"at most {MAX_DESCRIPTION} characters")
    if any(not c.isprintable() for c in text):
        raise SettingError(key, "must not contain control characters")
    return text


def parse_labels(text: str) -> dict[str, str]:
    """`k=v,k2=v2` (empty: none) into a mapping."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, value = item.partition("=")
        if not eq:
            raise SettingError(LABELS, f"{item!r} is not key=value")
        out[name] = value
    return check_labels(out)


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise SettingError(LABELS, f"at most {MAX_LABELS} labels")
    for name, value in labels.items():
        if not _LABEL_KEY.match(name):
            raise SettingError(LABELS, f"label key {name!r} must be 1-63 of [a-zA-Z0-9._/-], starting alphanumeric")
        if not _LABEL_VALUE.match(value):
            raise SettingError(LABELS, f"label value {value!r} must be 0-63 of [a-zA-Z0-9._/-]")
    return dict(labels)


def show(key: str, value: Any) -> str:
    """A stored value as text, as `parse` takes it back."""
    if key == LABELS:
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, str):
        return value
    return json.dumps(value)


def seeded(seed: Any) -> dict[str, Any]:
    """The settings a VC's seed entry (config.VirtualClusterSeedConfig) gives, as stored values."""
    out: dict[str, Any] = {}
    if getattr(seed, "description", None) is not None:
        out[DESCRIPTION] = seed.description
    if getattr(seed, "labels", None):
        out[LABELS] = dict(seed.labels)
    for key in (ALLOW_IF_NO_ACL, DELETE_PHYSICAL_TOPICS):
        if getattr(seed, key, None) is not None:
            out[key] = getattr(seed, key)
    policy = getattr(seed, "topic_policy", None)
    if policy is not None:
        out.update({key: getattr(policy, key) for key in POLICY_KEYS if key in policy.model_fields_set})
    return out


class StaticSettings(Protocol):
    """What the static config says of a VC (config.TenancyConfig): the fallback of its stored settings."""

    def allow_if_no_acl(self, vc: str) -> bool: ...

    def delete_physical_topics_for(self, vc: str) -> bool: ...

    def topic_policy_for(self, vc: str) -> TopicPolicy: ...


class VcSettings:
    """The run-time lookups: a VC's stored setting first, then the static config's (its seed entry's,
    else the global key). Cheap enough per request; topic policies are built once per distinct value."""

    def __init__(self, config: StaticSettings, image: Callable[[], TenancyImage]):
        self.config = config
        self.image = image
        self._policies: dict[tuple[str, tuple[tuple[str, Any], ...]], TopicPolicy] = {}

    def stored(self, vc: str) -> Mapping[str, Any]:
        found = self.image().vcs.get(vc)
        return found.settings if found is not None else {}

    def allow_if_no_acl(self, vc: str) -> bool:
        stored = self.stored(vc)
        return bool(stored[ALLOW_IF_NO_ACL]) if ALLOW_IF_NO_ACL in stored else self.config.allow_if_no_acl(vc)

    def delete_physical_topics(self, vc: str) -> bool:
        stored = self.stored(vc)
        if DELETE_PHYSICAL_TOPICS in stored:
            return bool(stored[DELETE_PHYSICAL_TOPICS])
        return self.config.delete_physical_topics_for(vc)

    def topic_policy(self, vc: str) -> TopicPolicy:
        stored = self.stored(vc)
        overrides = tuple((k, stored[k]) for k in POLICY_KEYS if k in stored)
        base = self.config.topic_policy_for(vc)
        if not overrides:
            return base
        key = (vc, overrides)
        policy = self._policies.get(key)
        if policy is None:
            if len(self._policies) > 4096:  # old values of every VC: forget them rather than grow
                self._policies.clear()
            policy = self._policies[key] = dataclasses.replace(base, **dict(overrides))
        return policy
