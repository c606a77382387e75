"""Credential entries: what the proxy stores to check a password without ever storing the password.

One entry per user holds, for each SCRAM mechanism, RFC 5802's ``salt``, ``iterations``,
``stored_key`` and ``server_key`` (base64 in the config). SCRAM logins use them as they are.
PLAIN logins are checked against the same entry: the proxy derives the salted password from the
password the client sent and compares the resulting stored key (``hmac.compare_digest``), so a
PLAIN-capable user needs nothing else on disk.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scramp import ScramMechanism
from scramp.utils import ScramException, saslprep

from ..errors import Refusal
from . import SCRAM_MECHANISMS

DEFAULT_ITERATIONS = 8192
MIN_ITERATIONS = 4096  # Kafka's clients refuse fewer for SCRAM-SHA-256/512 (and so does scramp)
MAX_ITERATIONS = 1_000_000  # a PLAIN login costs one derivation of this many rounds (in a worker thread)

_HASH = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_KEY_BYTES = {"SCRAM-SHA-256": 32, "SCRAM-SHA-512": 64}


class CredentialError(Refusal, ValueError):
    """An entry that cannot be used (bad base64, wrong key length, too few iterations...)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:  # keys are password-equivalent for SCRAM: keep them out of logs and tracebacks
        return f"ScramCredential({self.mechanism}, iterations={self.iterations})"

    @classmethod
    def from_fields(cls, mechanism: str, fields: Mapping[str, Any]) -> ScramCredential:
        """Build and check an entry from its config form (base64 strings)."""
        if mechanism not in _HASH:
            raise CredentialError(f"unknown mechanism {mechanism!r}; expected one of {', '.join(SCRAM_MECHANISMS)}")
        missing = {"salt", "iterations", "stored_key", "server_key"} - set(fields)
        if missing:
            raise CredentialError(f"missing {', '.join(sorted(missing))}")
        iterations = fields["iterations"]
        if type(iterations) is not int or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise CredentialError(f"iterations must be an integer from {MIN_ITERATIONS} to {MAX_ITERATIONS}")
        # Any salt, as Kafka stores any (librdkafka's tests use 4 bytes): its length is the creator's choice.
        salt = _b64("salt", fields["salt"])
        stored_key = _b64("stored_key", fields["stored_key"])
        server_key = _b64("server_key", fields["server_key"])
        size = _KEY_BYTES[mechanism]
        for name, key in (("stored_key", stored_key), ("server_key", server_key)):
            if len(key) != size:
                raise CredentialError(f"{name} must be {size} bytes for {mechanism}, got {len(key)}")
        return cls(mechanism, salt, iterations, stored_key, server_key)

    def to_fields(self) -> dict[str, Any]:
        return {
            "salt": base64.b64encode(self.salt).decode("ascii"),
            "iterations": self.iterations,
            "stored_key": base64.b64encode(self.stored_key).decode("ascii"),
            "server_key": base64.b64encode(self.server_key).decode("ascii"),
        }

    def scram_auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """What scramp's server ``auth_fn`` returns: (salt, stored_key, server_key, iterations)."""
        return self.salt, self.stored_key, self.server_key, self.iterations

    def matches_password(self, password: str) -> bool:
        """Derive the stored key from ``password`` the way SCRAM does and compare in constant time."""
        try:
            normalized = saslprep(password).encode("utf-8")
        except ScramException:
            return False  # prohibited characters: could never have produced this entry
        return hmac.compare_digest(_stored_key(self.mechanism, normalized, self.salt, self.iterations), self.stored_key)


def _stored_key(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    name = _HASH[mechanism]
    salted = hashlib.pbkdf2_hmac(name, password, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hashlib.new(name, client_key).digest()


def _b64(name: str, value: Any) -> bytes:
    if not isinstance(value, str):
        raise CredentialError(f"{name} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise CredentialError(f"{name} is not valid base64") from None


def make_entry(
    password: str, iterations: int = DEFAULT_ITERATIONS, mechanisms: Iterable[str] = SCRAM_MECHANISMS
) -> dict[str, dict[str, Any]]:
    """A new credential entry (config form) with a fresh random salt per mechanism."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CredentialError(f"iterations must be from {MIN_ITERATIONS} to {MAX_ITERATIONS}")
    entry: dict[str, dict[str, Any]] = {}
    for mechanism in mechanisms:
        if mechanism not in _HASH:
            raise CredentialError(f"unknown mechanism {mechanism!r}")
        try:
            salt, stored_key, server_key, rounds = ScramMechanism(mechanism).make_auth_info(password, iterations)
        except ScramException as exc:
            raise CredentialError(f"cannot derive {mechanism} keys: {exc}") from None
        entry[mechanism] = ScramCredential(mechanism, salt, rounds, stored_key, server_key).to_fields()
    if not entry:
        raise CredentialError("at least one mechanism is needed")
    return entry


@dataclass(frozen=True, slots=True)
class UserCredentials:
    name: str
    scram: Mapping[str, ScramCredential]  # by mechanism name

    def for_plain(self) -> ScramCredential:
        # Either entry proves the password; SHA-512 first because it is the stronger derivation.
        return self.scram.get("SCRAM-SHA-512") or self.scram["SCRAM-SHA-256"]


# Verifying a PLAIN login for an unknown user still costs one derivation, so response time does not
# tell which user names exist.
_DECOY = ScramCredential("SCRAM-SHA-512", b"vcproxy-decoy-salt", DEFAULT_ITERATIONS, b"\0" * 64, b"\0" * 64)


class CredentialStore:
    """The users a SASL listener checks logins against: a fixed mapping (the config, tenancy off) or,
    with `source`, the users replayed from the state topic (proxy/auth/users.py), read at each login so
    a change made on any replica applies to the next login."""

    def __init__(
        self,
        users: Mapping[str, UserCredentials] | None = None,
        *,
        source: Callable[[], Mapping[str, UserCredentials]] | None = None,
    ):
        self._static: dict[str, UserCredentials] = dict(users or {})
        self._source = source
        # PLAIN: a keyed digest of the password last verified per user, with the credential it was verified
        # against, so a returning client is checked without the key derivation (the costly part of a login,
        # and what a guesser makes us pay for), and a changed credential makes the digest worthless.
        self._verified: dict[str, tuple[ScramCredential, bytes]] = {}
        self._verified_key = secrets.token_bytes(32)

    def replace(self, users: Mapping[str, UserCredentials]) -> None:
        """A reloaded users file: the next login sees these users (one assignment: no login sees half)."""
        self._static = dict(users)

    @property
    def users(self) -> Mapping[str, UserCredentials]:
        return self._source() if self._source is not None else self._static

    def __repr__(self) -> str:
        return f"CredentialStore({len(self.users)} users)"

    @classmethod
    def from_mapping(cls, users: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> CredentialStore:
        """From the config form ``{user: {mechanism: {salt, iterations, stored_key, server_key}}}``."""
        store: dict[str, UserCredentials] = {}
        for name, entry in users.items():
            scram = {mech: ScramCredential.from_fields(mech, fields) for mech, fields in entry.items() if fields}
            if not scram:
                raise CredentialError(f"user {name!r} has no credential entry")
            store[name] = UserCredentials(name, scram)
        return cls(store)

    def scram_credential(self, mechanism: str, username: str) -> ScramCredential | None:
        user = self.users.get(username)
        return None if user is None else user.scram.get(mechanism)

    def plain_credential(self, username: str) -> ScramCredential | None:
        """The entry a PLAIN login of `username` is checked against, or None (unknown user)."""
        user = self.users.get(username)
        return None if user is None else user.for_plain()

    def current(self, username: str, credential: ScramCredential) -> bool:
        """Whether `credential` (what a login was checked against) is still one of the user's."""
        user = self.users.get(username)
        return user is not None and credential in user.scram.values()

    def verify_plain(self, username: str, password: str) -> bool:
        """Runs the key derivation (milliseconds of CPU): the shell calls it off the event loop."""
        return self.check_plain(self.plain_credential(username), password)

    @staticmethod
    def check_plain(credential: ScramCredential | None, password: str) -> bool:
        """`verify_plain` against an entry taken beforehand (None: an unknown user, checked against a decoy)."""
        if credential is None:
            _DECOY.matches_password(password)
            return False
        return credential.matches_password(password)

    def _digest(self, username: str, password: str) -> bytes:
        return hmac.new(self._verified_key, f"{username}\0{password}".encode(), "sha256").digest()

    def verified_before(self, username: str, password: str) -> bool:
        """Whether `password` is the one last verified for `username` against its current entry (no key
        derivation)."""
        known = self._verified.get(username)
        return (
            known is not None
            and known[0] == self.plain_credential(username)
            and hmac.compare_digest(known[1], self._digest(username, password))
        )

    def remember_verified(self, username: str, password: str, credential: ScramCredential | None = None) -> None:
        credential = credential or self.plain_credential(username)
        if credential is not None and username in self.users:
            self._verified[username] = (credential, self._digest(username, password))
