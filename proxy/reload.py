"""Reloading the configuration at run time: what changed, and whether it may be applied (sans-I/O).

The shell (proxy/net/reloader.py) notices a change (a watched file's stamp, or SIGHUP), loads the
config again and asks `decide` whether the running proxy may take it. The rule: an edit is applied
whole or refused whole. It is refused when it cannot be loaded (bad YAML, a bad value, an unreadable or
mismatched certificate and key: the ConfigError names the file, the key and the reason) or when it
changes any key outside RELOADABLE (the listeners' ports, the upstream's addresses, tenancy...): those
are read once at start, and applying half an edit would leave a config nobody wrote.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from .config import ConfigError, ProxyConfig

# Keys (dotted paths, a prefix covers what is under it) that a running proxy applies to what comes next:
# new TLS handshakes, new upstream connections, the next login, the next log line.
RELOADABLE: tuple[str, ...] = (
    "listeners.tls.certfile",
    "listeners.tls.keyfile",
    "listeners.tls.cafile",
    "listeners.tls.client_auth",
    "listeners.tls.principal_mapping_rules",
    "listeners.tls.handshake_timeout_seconds",
    "listeners.tls.engine",
    "upstream.tls",
    "upstream.sasl_password",
    "upstream.sasl_password_file",
    "credentials.users",
    "credentials.users_file",
    "logging.level",
)

# Why a key outside RELOADABLE needs a restart, by the longest matching prefix.
_FIXED_REASONS: tuple[tuple[str, str], ...] = (
    ("listeners.tls", "decides whether the listeners speak TLS, which is fixed when they are bound"),
    ("listeners", "the listeners are bound and their protocol chosen at start"),
    ("upstream.bootstrap_servers", "the upstream cluster is chosen at start"),
    ("upstream", "the proxy's upstream identity and timeouts are fixed at start"),
    ("tenancy", "the state topic is replayed and seeded at start"),
    ("limits", "the connection limits are built at start"),
    ("metrics", "the HTTP port is bound at start"),
    ("tracing", "the exporters are started at start"),
    ("debug", "read at start"),
)

# Paths whose value is a file the proxy reads (watched for changes besides the config file itself).
FILE_KEYS: tuple[str, ...] = (
    "listeners.tls.certfile",
    "listeners.tls.keyfile",
    "listeners.tls.cafile",
    "upstream.tls.cafile",
    "upstream.tls.certfile",
    "upstream.tls.keyfile",
    "upstream.sasl_password_file",
    "credentials.users_file",
)

Stamp = tuple[int, int, int, int]  # (device, inode, size, mtime in ns): a rename over the file changes the inode


def stamp(path: str) -> Stamp | None:
    """The file's stamp, following symbolic links (a Kubernetes Secret's files are links swapped at once)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _get(config: ProxyConfig, path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def watched_files(config: ProxyConfig, config_path: str) -> dict[str, str]:
    """Every file whose change may change what the proxy runs with: path -> the key that names it."""
    files = {str(config_path): "(config file)"}
    for key in FILE_KEYS:
        path = _get(config, key)
        if path is not None:
            files.setdefault(str(path), key)
    return files


def changed_files(before: Mapping[str, Stamp | None], paths: Iterable[str]) -> list[str]:
    """The paths whose stamp differs from `before` (a file that appeared or vanished included)."""
    return [path for path in paths if stamp(path) != before.get(path)]


def diff(old: Any, new: Any, path: str = "") -> list[str]:
    """Dotted paths of the keys whose value differs (values compared, never returned: they may be secrets)."""
    if isinstance(old, BaseModel) and type(old) is type(new):
        out: list[str] = []
        for name in type(old).model_fields:
            out += diff(getattr(old, name), getattr(new, name), f"{path}.{name}" if path else name)
        return out
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            here = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                out.append(here)
            else:
                out += diff(old[key], new[key], here)
        return out
    return [] if old == new else [path]


def reloadable(key: str) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in RELOADABLE)


def fixed_reason(key: str) -> str:
    for prefix, reason in _FIXED_REASONS:
        if key == prefix or key.startswith(prefix + "."):
            return reason
    return "read at start"


def _user_changes(old: ProxyConfig, new: ProxyConfig) -> list[str]:
    before, after = old.credentials.as_mapping(), new.credentials.as_mapping()
    return sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))


@dataclass(frozen=True)
class Decision:
    """What to do with a reloaded config: `config` to apply (None: keep the running one) and one log line."""

    config: ProxyConfig | None
    message: str
    changed: tuple[str, ...] = ()  # keys, or "key (file)" for a file whose content changed
    users: tuple[str, ...] = ()  # user names whose credentials were added, changed or removed


def decide(
    current: ProxyConfig,
    candidate: ProxyConfig | ConfigError,
    files: Mapping[str, str],
    changed: Sequence[str],
) -> Decision:
    """Whether `candidate` (the config as loaded now, or why it could not be) replaces `current`.

    `files` maps each watched path to its key (watched_files of the running config), `changed` lists the
    paths whose stamp changed: a certificate rewritten in place is a change of its key.
    """
    if isinstance(candidate, ConfigError):
        reason = str(candidate).replace("\n", "; ")
        return Decision(None, f"configuration reload refused, the running configuration is kept: {reason}")
    keys = diff(current, candidate)
    fixed = [key for key in keys if not reloadable(key)]
    if fixed:
        why = "; ".join(f"{key}: {fixed_reason(key)}" for key in fixed)
        return Decision(
            None,
            f"configuration reload refused, the running configuration is kept (restart to apply): {why}",
        )
    # credentials.users.<name>.<mechanism>...: the user is what changed.
    named = sorted({".".join(key.split(".")[:3]) if key.startswith("credentials.users.") else key for key in keys})
    for path in changed:
        key = files.get(path)
        if key is not None and key != "(config file)" and key not in named and _get(candidate, key) == path:
            named.append(f"{key} ({path})")
    users = _user_changes(current, candidate)
    if not named and not users:
        return Decision(candidate, "configuration reloaded: nothing changed")
    what = ", ".join(named)
    if users:
        what += f"; users added, changed or removed: {', '.join(users)}"
    return Decision(candidate, f"configuration reloaded: {what}", tuple(named), tuple(users))
