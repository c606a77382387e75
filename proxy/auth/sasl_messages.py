"""Who a SASL login is for, read by the rules of Kafka's own parsers, or refused. Sans-I/O.

The proxy reads the first message of a login to decide whether to answer it itself or relay it to the
broker, and whether the name may be relayed at all (docs/security.md, "How the proxy reads a login").
The broker then reads the same bytes with its own parsers. So this module reads each mechanism's
client-first message exactly as Kafka does (the regular expressions of `ScramMessages`,
`OAuthBearerClientInitialResponse`, the NUL split of `PlainSaslServer`, the claims of
`OAuthBearerUnsecuredJws`), and refuses (`Refused`) every message that Kafka and the proxy could read
as different identities, even where Kafka would take it:

* PLAIN: anything but exactly ``authzid NUL authcid NUL password`` in UTF-8 (Kafka reads up to a third
  NUL and ignores the rest); an authzid unlike the authcid.
* SCRAM: a message Kafka's pattern does not match (only the ``n`` GS2 flag, ASCII names with the
  ``=2C``/``=3D`` escapes); the reserved ``m=``; any extension (Kafka knows only ``tokenauth``, whose
  login is the delegation token's owner, a name only the broker knows); an authzid unlike the name.
* OAUTHBEARER: a message Kafka's pattern does not match; a key given twice (Kafka keeps the last; keys
  compared ignoring case); no ``auth``; an authzid unlike the token's principal; a token whose claims
  cannot be read one way only: not three base64url parts without padding, a part that is not a JSON
  object in UTF-8, a member name given twice, non-standard JSON (NaN, trailing data, lone surrogates),
  a principal claim that is not a non-blank string.

The token's signature, expiry and algorithm are not looked at: the broker verifies the token; the
proxy only makes sure there is one way to read whose it is.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import Refusal

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PRINCIPAL_CLAIM = "sub"  # the claim Kafka's validators name the principal by, unless configured otherwise

# Kafka's character classes, spelt without Java's class intersection (`&&`); ASCII only, as in Java.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # [\x01-\x7F&&[^=,]] | =2C | =3D
_SCRAM_VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # [\x01-\x7F&&[^,]]
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # [\x21-\x7E&&[^,]]
_KEY = r"[A-Za-z]+"
_SCRAM_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<reserved>m={_SCRAM_VALUE},)?"
    rf"n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>(?:,{_KEY}={_SCRAM_VALUE})*)"
)
_OAUTH_VALUE = r"[\x21-\x7e \t\r\n]+"
_OAUTH_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KEY}={_OAUTH_VALUE}\x01)*)\x01")
# Java's \w is [a-zA-Z_0-9] without UNICODE_CHARACTER_CLASS; Python's would take any letter.
_AUTH = re.compile(r"(?P<scheme>[A-Za-z0-9_]+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
_JWS = re.compile(r"(?P<header>[-_A-Za-z0-9]+)\.(?P<claims>[-_A-Za-z0-9]+)\.(?P<signature>[-_A-Za-z0-9]*)")


class Refused(Refusal, ValueError):
    """A login message the proxy will not read: Kafka refuses it, or might read another identity from it."""


@dataclass(frozen=True, slots=True)
class Login:
    """Whose login a first SASL message is, as the broker's principal would name it (without `User:`)."""

    mechanism: str
    name: str
    # OAUTHBEARER: every name a broker could take as the principal, whatever claim it is configured to
    # read (`sasl.oauthbearer.sub.claim.name`): the relay guard refuses a token naming a protected one anywhere.
    names: tuple[str, ...] = ()

    @property
    def every_name(self) -> tuple[str, ...]:
        return (self.name, *(n for n in self.names if n != self.name))


def read_login(mechanism: str, message: bytes, principal_claim: str = PRINCIPAL_CLAIM) -> Login:
    """The identity a first SaslAuthenticate message of `mechanism` logs in as, or `Refused`."""
    if mechanism == PLAIN:
        return Login(PLAIN, read_plain(message)[1])
    if mechanism in SCRAM:
        return Login(mechanism, read_scram_first(message).username)
    if mechanism == OAUTHBEARER:
        first = read_oauth_first(message)
        claims = read_token_claims(first.token)
        name = token_principal(claims, principal_claim)
        if first.authzid and first.authzid != name:
            raise Refused("authorization id differs from the token's principal")
        return Login(OAUTHBEARER, name, claim_names(claims))
    raise Refused(f"mechanism {mechanism!r} is not read by the proxy")


# -- PLAIN --------------------------------------------------------------------------------------------


def read_plain(message: bytes) -> tuple[str, str, str]:
    """(authzid, authcid, password) of ``[authzid] NUL authcid NUL passwd`` (RFC 4616)."""
    text = _utf8(message)
    parts = text.split("\0")
    if len(parts) != 3:  # Kafka reads the first three and ignores the rest: the proxy takes exactly three
        raise Refused(f"expected 3 tokens, got {len(parts)}")
    authzid, authcid, password = parts
    if not authcid:
        raise Refused("username not specified")
    if not password:
        raise Refused("password not specified")
    if authzid and authzid != authcid:
        raise Refused("authorization id differs from the username")
    return authzid, authcid, password


# -- SCRAM --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScramFirst:
    authzid: str
    saslname: str  # as sent, with =2C and =3D
    username: str  # unescaped: the name Kafka looks up and logs in
    nonce: str


def read_scram_first(message: bytes) -> ScramFirst:
    """A SCRAM client-first message (RFC 5802) as Kafka's `ScramMessages.ClientFirstMessage` reads it."""
    match = _SCRAM_FIRST.fullmatch(_utf8(message))
    if match is None:
        raise Refused("not a SCRAM client-first message Kafka reads (gs2 flag n, ASCII name, nonce)")
    if match["reserved"]:
        raise Refused("reserved attribute m= (RFC 5802: the server fails such a message)")
    if match["extensions"]:
        keys = [item.partition("=")[0] for item in match["extensions"][1:].split(",")]
        if any(k.lower() == "tokenauth" for k in keys):
            raise Refused("delegation tokens are not supported by the proxy")
        raise Refused(f"extensions {', '.join(keys)}: Kafka takes none but tokenauth")
    saslname = match["saslname"]
    username = unescape_saslname(saslname)
    authzid = match["authzid"] or ""
    # Kafka compares the authzid as sent with the unescaped name: equal only when neither has an escape.
    if authzid and authzid != username:
        raise Refused("authorization id differs from the username")
    return ScramFirst(authzid, saslname, username, match["nonce"])


def unescape_saslname(saslname: str) -> str:
    """``=2C`` -> ``,`` and ``=3D`` -> ``=`` (RFC 5802); the pattern already refused any other ``=``."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


# -- OAUTHBEARER --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OAuthFirst:
    authzid: str
    token: str
    extensions: dict[str, str]


def read_oauth_first(message: bytes) -> OAuthFirst:
    """An OAUTHBEARER client-first message (RFC 7628) as Kafka's `OAuthBearerClientInitialResponse` reads it."""
    match = _OAUTH_FIRST.fullmatch(_utf8(message))
    if match is None:
        raise Refused("not an OAUTHBEARER client-first message Kafka reads")
    pairs: dict[str, str] = {}
    seen: set[str] = set()
    for item in match["kvpairs"].split("\x01")[:-1]:
        key, _, value = item.partition("=")
        if key.lower() in seen:  # Kafka keeps the last value, and `AUTH` is another key to it
            raise Refused(f"key {key!r} given twice")
        seen.add(key.lower())
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise Refused("'auth' not specified")
    found = _AUTH.fullmatch(auth)
    if found is None or found["scheme"].lower() != "bearer":  # Kafka: equalsIgnoreCase("bearer")
        raise Refused("'auth' is not 'Bearer <token>'")
    return OAuthFirst(match["authzid"] or "", found["token"], pairs)


def read_token_claims(token: str) -> dict[str, Any]:
    """The claims of a JWS compact serialization, refused unless there is one way to read them: three
    base64url parts without padding, header and claims each a JSON object in UTF-8 with unique names."""
    match = _JWS.fullmatch(token)
    if match is None:
        raise Refused("token is not three base64url parts (header.claims.signature)")
    _json_object(_b64url(match["header"]))
    return _json_object(_b64url(match["claims"]))


def token_principal(claims: dict[str, Any], claim: str = PRINCIPAL_CLAIM) -> str:
    value = claims.get(claim)
    # Kafka would turn true/null into "true"/"null" and refuses a blank name (Java's trim: chars <= U+0020).
    if not isinstance(value, str) or all(c <= " " for c in value):
        raise Refused(f"the {claim!r} claim is not a non-blank string")
    return value


def claim_names(claims: dict[str, Any]) -> tuple[str, ...]:
    """Every top-level claim a broker could name the principal by, as Kafka's JSON reading turns it into a
    string (true/false/null as words; numbers, arrays and objects never make a usable name)."""
    names = []
    for value in claims.values():
        if isinstance(value, str):
            names.append(value)
        elif value is None or isinstance(value, bool):
            names.append(json.dumps(value))
    return tuple(names)


def _b64url(part: str) -> bytes:
    if len(part) % 4 == 1:
        raise Refused("token part is not base64url")
    try:
        data = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError) as exc:
        raise Refused("token part is not base64url") from exc
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode() != part:  # unused bits set: two spellings
        raise Refused("token part is not canonical base64url")
    return data


def _no_constants(name: str) -> Any:
    raise Refused(f"non-standard JSON constant {name}")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:  # Python keeps the last, Jackson too by default, jose4j refuses: refused here
            raise Refused(f"JSON member {key!r} given twice")
        result[key] = value
    return result


def _json_object(data: bytes) -> dict[str, Any]:
    text = _utf8(data)
    try:
        value = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; Refused passes through
        if isinstance(exc, Refused):
            raise
        raise Refused("token part is not JSON") from exc
    if not isinstance(value, dict):
        raise Refused("token part is not a JSON object")
    try:
        _check_strings(value)
    except (UnicodeEncodeError, RecursionError) as exc:
        raise Refused("token part holds a string no UTF-8 spells") from exc
    return value


def _check_strings(value: Any) -> None:
    """Lone surrogates (`"\\ud800"`) make strings no UTF-8 holds: Java and Python could compare them apart."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")  # strict: Kafka would put U+FFFD where the proxy cannot read
    except UnicodeDecodeError as exc:
        raise Refused("not UTF-8") from exc
