"""TLS contexts and client-certificate principals.

Principals follow Kafka's ``ssl.principal.mapping.rules``: the certificate subject is rendered as an
RFC 2253 distinguished name the way Java's ``X500Principal.getName()`` does (most specific RDN first,
``CN=alice,OU=eng,O=Acme``), and the first rule that matches it gives the user name:

    RULE:<regex>/<replacement>/[L|U]   regex must match the whole DN; $1.. in the replacement; L/U = case
    DEFAULT                            the DN itself

Rules are comma-separated and tried in order; no matching rule means the connection is refused, as in
Kafka. Everything except the context builders is pure and unit-tested.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..errors import MalformedInput
from ..protocol import native
from . import ANONYMOUS

ClientAuth = Literal["required", "requested", "none"]
USER_PREFIX = "User:"


class _TlsFiles(Protocol):
    """A listener's TLS settings (config.py `ListenerTlsConfig`), as the compiled TLS reads them."""

    certfile: str
    keyfile: str | None
    cafile: str | None
    client_auth: ClientAuth


class PrincipalMappingError(MalformedInput, ValueError):
    """Rules that cannot be parsed, or a DN that no rule maps."""


# -- SSL contexts -------------------------------------------------------------------------------


def server_context(
    certfile: str, keyfile: str | None = None, cafile: str | None = None, client_auth: ClientAuth = "none"
) -> ssl.SSLContext:
    """A listener's context; ``client_auth`` as Kafka's ``ssl.client.auth`` (needs ``cafile`` unless none)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if cafile:
        context.load_verify_locations(cafile)
    if client_auth != "none" and not cafile:
        raise ValueError(f"client_auth {client_auth} needs a cafile to verify client certificates")
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[
        client_auth
    ]
    return context


def client_context(
    cafile: str | None = None, certfile: str | None = None, keyfile: str | None = None, check_hostname: bool = True
) -> ssl.SSLContext:
    """The upstream context: verifies the broker against ``cafile`` (or the system CAs); the host name
    check can be turned off (Kafka's ``ssl.endpoint.identification.algorithm=``), the chain check cannot."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    if certfile:
        context.load_cert_chain(certfile, keyfile)
    return context


@dataclass(frozen=True, slots=True)
class NativeTlsContext:
    """A listener's compiled TLS settings; `route` raises for a server name no broker answers to (SNI)."""

    module: Any
    config: Any  # vcproxy_native.TlsConfig
    route: Callable[[str | None], object] | None = None

    @classmethod
    def load(
        cls, module: Any, certfile: str, keyfile: str | None, cafile: str | None, client_auth: str, route: Any = None
    ) -> NativeTlsContext:
        """Raises ValueError naming what could not be loaded."""
        with open(certfile, "rb") as f:  # read once, at start and at a reload, as the ssl context's files are
            chain = f.read()
        key = chain
        if keyfile:
            with open(keyfile, "rb") as f:
                key = f.read()
        ca = None
        if cafile:
            with open(cafile, "rb") as f:
                ca = f.read()
        return cls(module, module.TlsConfig(chain, key, ca, client_auth), route)


def native_context(tls: _TlsFiles, route: Callable[[str | None], object] | None = None) -> NativeTlsContext:
    """The compiled TLS for a listener's settings; ValueError when it cannot serve them (not built, turned off with
    the compiled parts, or a certificate, key or CA it does not load)."""
    module = _compiled_tls()
    return NativeTlsContext.load(module, tls.certfile, tls.keyfile, tls.cafile, tls.client_auth, route)


@dataclass(frozen=True, slots=True)
class NativeTlsClientContext:
    """The proxy's compiled TLS to the brokers (`vcproxy_native.TlsClientConfig`)."""

    module: Any
    config: Any

    @classmethod
    def load(
        cls, module: Any, cafile: str | None, certfile: str | None, keyfile: str | None, check_hostname: bool
    ) -> NativeTlsClientContext:
        """Raises ValueError naming what could not be loaded. No `cafile`: the system's CA bundle, OpenSSL's own
        (what `ssl.create_default_context` trusts), when it is one file."""
        if cafile is None:
            cafile = ssl.get_default_verify_paths().openssl_cafile
            if not os.path.isfile(cafile):
                raise ValueError(f"no cafile, and the system's CA bundle is not one file ({cafile})")
        with open(cafile, "rb") as f:
            ca = f.read()
        chain = key = None
        if certfile:
            with open(certfile, "rb") as f:
                chain = key = f.read()
        if keyfile:
            with open(keyfile, "rb") as f:
                key = f.read()
        return cls(module, module.TlsClientConfig(ca, chain, key, check_hostname))


class _UpstreamTlsFiles(Protocol):
    """The upstream's TLS settings (config.py `UpstreamTlsConfig`), as the compiled TLS reads them."""

    cafile: str | None
    certfile: str | None
    keyfile: str | None
    check_hostname: bool


def native_client_context(tls: _UpstreamTlsFiles | None) -> NativeTlsClientContext:
    """The compiled TLS to the brokers (None: the defaults, the system's CAs); ValueError when it cannot serve."""
    module = _compiled_tls()
    if tls is None:
        return NativeTlsClientContext.load(module, None, None, None, True)
    return NativeTlsClientContext.load(module, tls.cafile, tls.certfile, tls.keyfile, tls.check_hostname)


def _compiled_tls() -> Any:
    module = native.module()
    if module is None or not hasattr(module, "TlsConfig"):
        raise ValueError(f"the compiled TLS is not available: {native.REASON or 'vcproxy_native has no TlsConfig'}")
    return module


# -- distinguished names ------------------------------------------------------------------------

# The keywords Java's RFC 2253 output uses; any other attribute is written as <oid>=#<hex of its DER>.
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_ESCAPED = set(',=+<>;"\\')


def _escape(value: str) -> str:
    out = []
    for i, char in enumerate(value):
        if char in _ESCAPED or (i == 0 and char in "# ") or (i == len(value) - 1 and char == " "):
            out.append("\\")
        out.append(char)
    return "".join(out)


def distinguished_name(der: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` (RFC 2253) prints it."""
    from asn1crypto import x509  # only needed when a client presents a certificate

    subject = x509.Certificate.load(der).subject
    rdns = []
    for rdn in reversed(list(subject.chosen)):  # RFC 2253: last RDN of the sequence first
        parts = []
        for ava in rdn:
            oid = ava["type"].dotted
            value = ava["value"]
            keyword = _KEYWORDS.get(oid)
            text = value.native if keyword is not None else None
            if isinstance(text, str):
                parts.append(f"{keyword}={_escape(text)}")
            else:
                parts.append(f"{oid}=#{value.dump().hex()}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


# -- mapping rules ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    template: str = ""  # Python re.sub template converted from Java's $1 syntax
    case: Literal["", "L", "U"] = ""
    source: str = "DEFAULT"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:  # Java Matcher.matches(): the whole DN
            return None
        result = self.pattern.sub(self.template, dn)  # then String.replaceAll, as Kafka does
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _java_replacement(replacement: str, groups: int, source: str) -> str:
    """Java replacement syntax ($1, ${name}, \\x for a literal x) as a Python re.sub template."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\":
            if i + 1 >= len(replacement):
                raise PrincipalMappingError(f"rule {source!r}: replacement ends with a lone backslash")
            out.append(replacement[i + 1].replace("\\", "\\\\"))
            i += 2
        elif char == "$":
            if replacement.startswith("{", i + 1):
                end = replacement.find("}", i + 2)
                if end < 0:
                    raise PrincipalMappingError(f"rule {source!r}: unterminated ${{name}} in the replacement")
                out.append(f"\\g<{replacement[i + 2 : end]}>")
                i = end + 1
                continue
            j = i + 1
            if j >= len(replacement) or not replacement[j].isdigit():
                raise PrincipalMappingError(f"rule {source!r}: '$' must be followed by a group number or {{name}}")
            number = int(replacement[j])
            j += 1
            # Like Java: take more digits only while the group number still exists.
            while j < len(replacement) and replacement[j].isdigit() and number * 10 + int(replacement[j]) <= groups:
                number = number * 10 + int(replacement[j])
                j += 1
            if number > groups:
                raise PrincipalMappingError(f"rule {source!r}: no group {number} in the pattern")
            out.append(f"\\g<{number}>")
            i = j
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _take_until_slash(text: str, start: int) -> tuple[str, int]:
    """Characters up to the next unescaped '/', escapes kept as written; returns (part, index of '/')."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "/":
            return text[start:i], i
        i += 1
    raise PrincipalMappingError(f"rule at {text[start - 5 if start >= 5 else 0 :]!r}: missing '/'")


def parse_rules(rules: str | Sequence[str]) -> list[MappingRule]:
    """Parse Kafka's ``ssl.principal.mapping.rules`` (one string, or a list joined with commas)."""
    text = rules if isinstance(rules, str) else ",".join(rules)
    parsed: list[MappingRule] = []
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        start = i
        if text.startswith("DEFAULT", i):
            parsed.append(MappingRule(None))
            i += len("DEFAULT")
        elif text.startswith("RULE:", i):
            pattern_text, slash = _take_until_slash(text, i + len("RULE:"))
            replacement, slash = _take_until_slash(text, slash + 1)
            i = slash + 1
            case = ""
            if i < len(text) and text[i] in "LU":
                case = text[i]
                i += 1
            source = text[start:i]
            try:
                pattern = re.compile(pattern_text)
            except re.error as exc:
                raise PrincipalMappingError(f"rule {source!r}: bad regular expression: {exc}") from None
            template = _java_replacement(replacement, pattern.groups, source)
            parsed.append(MappingRule(pattern, template, case, source))  # type: ignore[arg-type]
        else:
            expected = "expected RULE:pattern/replacement/[LU] or DEFAULT"
            raise PrincipalMappingError(f"invalid rule at {text[i:]!r}: {expected}")
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text):
            if text[i] != ",":
                raise PrincipalMappingError(f"invalid rule {text[start:]!r}: expected ',' after {text[start:i]!r}")
            i += 1
    if not parsed:
        raise PrincipalMappingError("no rules")
    return parsed


class PrincipalMapper:
    def __init__(self, rules: str | Sequence[str] = "DEFAULT"):
        self.rules = parse_rules(rules)

    def name_for(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                if not name:
                    raise PrincipalMappingError(f"rule {rule.source!r} maps {dn!r} to an empty name")
                return name
        raise PrincipalMappingError(f"no principal mapping rule matches {dn!r}")

    def principal_for(self, der: bytes | None) -> str:
        """``User:<mapped name>`` for a client certificate, ``User:ANONYMOUS`` without one."""
        if not der:
            return ANONYMOUS
        return USER_PREFIX + self.name_for(distinguished_name(der))
