"""The proxy's users as state records, sans-I/O (docs/management.md#users-at-runtime).

Users live in the state topic beside the virtual clusters, so every replica follows them:

* ``["scram", user, mechanism]`` -> ``{salt, iterations, stored_key, server_key}`` (base64): one SCRAM
  credential, RFC 5802's salted keys only. AlterUserScramCredentials carries a salted password (the
  client derives it); the proxy turns it into the two keys at once and keeps neither it nor a password.
  A tombstone deletes the credential; a user with none left is gone.
* ``["userseed", user]`` -> ``{"digest": hex}``: the static entry (``credentials.users``/``users_file``)
  already applied once, so a restart never undoes a runtime change while a new or edited entry still
  takes effect, as VC seeds do (proxy/state/seed.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .credentials import _HASH, CredentialError, ScramCredential, UserCredentials

Record = tuple[str, dict[str, Any] | None]

# Kafka's mechanism codes (org.apache.kafka.clients.admin.ScramMechanism) and iteration bounds
# (common.security.scram.internals.ScramMechanism: 4096..16384 for both).
MECHANISMS_BY_TYPE = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
TYPE_OF = {name: code for code, name in MECHANISMS_BY_TYPE.items()}
KAFKA_MIN_ITERATIONS, KAFKA_MAX_ITERATIONS = 4096, 16384


def _key(*parts: str) -> str:
    return json.dumps(list(parts), separators=(",", ":"))


def scram_record(user: str, mechanism: str, credential: ScramCredential | None) -> Record:
    return _key("scram", user, mechanism), None if credential is None else credential.to_fields()


def userseed_record(user: str, digest: str) -> Record:
    return _key("userseed", user), {"digest": digest}


def credential_from_salted(mechanism: str, salt: bytes, iterations: int, salted_password: bytes) -> ScramCredential:
    """RFC 5802's StoredKey and ServerKey from a salted password, which is then dropped."""
    if mechanism not in _HASH:
        raise CredentialError(f"unknown mechanism {mechanism!r}")
    name = _HASH[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", name).digest()
    server_key = hmac.new(salted_password, b"Server Key", name).digest()
    return ScramCredential(mechanism, bytes(salt), iterations, hashlib.new(name, client_key).digest(), server_key)


@dataclass
class UserBook:
    """The users replayed from the state topic, by name; each change makes a new `UserCredentials`."""

    users: dict[str, UserCredentials] = field(default_factory=dict)
    seeded: dict[str, str] = field(default_factory=dict)  # user -> digest of the static entry applied
    version: int = 0

    def apply_scram(self, user: str, mechanism: str, value: dict[str, Any] | None) -> None:
        current = dict(self.users[user].scram) if user in self.users else {}
        if value is None:
            current.pop(mechanism, None)
        else:
            current[mechanism] = ScramCredential.from_fields(mechanism, value)  # checked: a bad record is skipped
        if current:
            self.users[user] = UserCredentials(user, current)
        else:
            self.users.pop(user, None)
        self.version += 1

    def records(self) -> list[Record]:
        """The records that rebuild this book (backups: proxy/state/backup.py)."""
        out = [scram_record(n, m, c) for n, u in sorted(self.users.items()) for m, c in sorted(u.scram.items())]
        return out + [userseed_record(n, d) for n, d in sorted(self.seeded.items())]

    def apply_seed(self, user: str, value: dict[str, Any] | None) -> None:
        if value is None:
            self.seeded.pop(user, None)
        else:
            self.seeded[user] = str(value["digest"])


def entry_digest(entry: Mapping[str, Mapping[str, Any]]) -> str:
    """Names one static entry (its salts and keys): a changed entry is a new one."""
    return hashlib.sha256(json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seed_user_records(book: UserBook, users: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[Record]:
    """The records that apply each static user entry never applied before (a new user, or an entry edited
    since): the entry's credentials replace the user's, then a `userseed` record remembers it. Empty on a
    restart with the same entries, so a password changed or a user deleted at runtime stays so."""
    records: list[Record] = []
    for user, entry in sorted(users.items()):
        digest = entry_digest(entry)
        if book.seeded.get(user) == digest:
            continue
        wanted = {mech: ScramCredential.from_fields(mech, fields) for mech, fields in entry.items()}
        had = book.users[user].scram if user in book.users else {}
        records += [scram_record(user, mech, None) for mech in sorted(had) if mech not in wanted]
        records += [scram_record(user, mech, cred) for mech, cred in sorted(wanted.items())]
        records.append(userseed_record(user, digest))
    return records
