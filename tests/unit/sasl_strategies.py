"""Hypothesis strategies for SASL first messages, near the shapes Kafka reads and just off them: the
differential test feeds them to the proxy and to Kafka's own classes (tests/integration/
test_sasl_differential.py); tests/unit/test_sasl_messages.py to the proxy alone."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from .sasl_corpus import EXP, b64

NAMES = ["alice", "vcproxy", "admin", "User:admin", "a,b", "a=b", "zoë", " alice", "ALICE", "", "null", "true"]
name = st.one_of(st.sampled_from(NAMES), st.text(max_size=6))
odd_bytes = st.binary(max_size=4)


def _escaped(text: str) -> str:
    return text.replace("=", "=3D").replace(",", "=2C")


@st.composite
def mangled(draw: st.DrawFn, message: bytes) -> bytes:
    """The message, or with a few bytes inserted, dropped or replaced (NULs, separators, UTF-8 pieces)."""
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):  # mostly whole: most should reach a reading
        at = draw(st.integers(0, len(message)))
        piece = draw(st.sampled_from([b"\0", b",", b"=", b"\x01", b"\xc3\xa9", b"\xff", b" ", b"=2C", b"a"]))
        how = draw(st.sampled_from(["insert", "drop", "replace"]))
        if how == "insert":
            message = message[:at] + piece + message[at:]
        elif how == "drop":
            message = message[:at] + message[at + 1 :]
        else:
            message = message[:at] + piece + message[at + 1 :]
    return message


@st.composite
def plain(draw: st.DrawFn) -> bytes:
    authcid = draw(name)
    authzid = draw(st.sampled_from(["", authcid, "vcproxy"]) | name)
    parts = [authzid, authcid, draw(st.sampled_from(["pw", ""]) | st.text(max_size=3))]
    parts += draw(st.lists(st.text(max_size=3), max_size=2))  # more parts than three
    message = "\0".join(parts).encode()
    return draw(mangled(message))


@st.composite
def scram(draw: st.DrawFn) -> bytes:
    user = draw(name)
    saslname = draw(st.sampled_from([_escaped(user), user, _escaped(user).lower()]))
    gs2 = draw(st.sampled_from(["n", "y", "p=tls-unique", "N"]))
    authzid = draw(st.sampled_from(["", "a=" + saslname, "a=" + user, "a=vcproxy"]))
    reserved = draw(st.sampled_from(["", "m=x,"]))
    nonce = draw(st.sampled_from(["abc", "a b", "r=s", "é"]))
    keys = st.sampled_from(["tokenauth", "TokenAuth", "ext", "n", "r"])
    values = st.sampled_from(["true", "TRUE", "false", "x=y", "vcproxy"])
    extensions = "".join(f",{k}={v}" for k, v in draw(st.lists(st.tuples(keys, values), max_size=2)))
    message = f"{gs2},{authzid},{reserved}n={saslname},r={nonce}{extensions}".encode()
    return draw(mangled(message))


@st.composite
def claims_json(draw: st.DrawFn) -> bytes:
    """A claims object, written by hand so that a member can repeat."""
    sub = draw(st.one_of(name, st.none(), st.booleans(), st.integers(-2, 2), st.lists(name, max_size=1)))
    members = [("sub", sub)]
    if draw(st.booleans()):
        members.append(("exp", draw(st.sampled_from([EXP, float(EXP), str(EXP)]))))
    extra = st.tuples(st.sampled_from(["sub", "s\\u0075b", "email", "email", "scope", "iat"]), name)
    members += draw(st.lists(extra, max_size=2))
    members = draw(st.permutations(members))
    body = ",".join(f'"{k}":{json.dumps(v, ensure_ascii=draw(st.booleans()))}' for k, v in members)
    return ("{" + body + "}" + draw(st.sampled_from(["", "", "", " ", "{}", "x"]))).encode()


@st.composite
def token(draw: st.DrawFn) -> bytes:
    header = draw(st.sampled_from([b'{"alg":"none"}'] * 3 + [b"{}", b'{"alg":"HS256"}', b"[]"]))
    claims = draw(claims_json())
    signature = draw(st.sampled_from([b"", b"", b"c2ln"]))
    encoded = b64(claims)
    if draw(st.integers(0, 9)) == 0:  # padding, or the standard alphabet
        encoded = draw(st.sampled_from([encoded + b"=", encoded.replace(b"-", b"+").replace(b"_", b"/")]))
    return b64(header) + b"." + encoded + b"." + signature


@st.composite
def oauthbearer(draw: st.DrawFn) -> bytes:
    gs2 = draw(st.sampled_from([b"n,,"] * 4 + [b"n,a=alice,", b"n,a=vcproxy,", b"y,,"]))
    scheme = draw(st.sampled_from([b"Bearer"] * 3 + [b"bearer", b"BEARER", b"Basic", b"B\xc3\xa9arer"]))
    auths = [draw(token()) for _ in range(draw(st.sampled_from([1, 1, 1, 2])))]
    pairs = [draw(st.sampled_from([b"auth"] * 4 + [b"AUTH"])) + b"=" + scheme + b" " + t for t in auths]
    pairs += [
        k + b"=" + v
        for k, v in draw(
            st.lists(
                st.tuples(st.sampled_from([b"host", b"port", b"ext"]), st.sampled_from([b"x", b"9092", b"a=b"])),
                max_size=2,
            )
        )
    ]
    pairs = draw(st.permutations(pairs))
    message = gs2 + b"\x01" + b"".join(p + b"\x01" for p in pairs) + b"\x01"
    return draw(mangled(message))


# -- well-formed messages with any names: what Kafka reads, so that the two readings are compared ------
any_name = st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=12)
ascii_name = st.text(st.characters(min_codepoint=1, max_codepoint=0x7F), min_size=1, max_size=12)


@st.composite
def good_plain(draw: st.DrawFn) -> bytes:
    authcid = draw(any_name)
    authzid = draw(st.sampled_from(["", authcid]))
    return f"{authzid}\0{authcid}\0{draw(any_name)}".encode()


@st.composite
def good_scram(draw: st.DrawFn) -> bytes:
    user = draw(ascii_name)
    authzid = draw(st.sampled_from(["", f"a={user}"])) if _escaped(user) == user else ""
    nonce = draw(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=","), min_size=1))
    return f"n,{authzid},n={_escaped(user)},r={nonce}".encode()


@st.composite
def good_oauthbearer(draw: st.DrawFn) -> bytes:
    sub = draw(any_name.filter(lambda n: any(c > " " for c in n)))
    extra = draw(st.dictionaries(st.sampled_from(["email", "upn", "iss", "scope"]), any_name, max_size=2))
    claims = json.dumps({"sub": sub, "exp": EXP, **extra}, ensure_ascii=draw(st.booleans())).encode()
    gs2 = b"n,,"
    if _escaped(sub) == sub and all(0 < ord(c) < 0x80 for c in sub):  # Kafka compares the authzid as sent
        gs2 = draw(st.sampled_from([gs2, f"n,a={sub},".encode()]))
    scheme = draw(st.sampled_from([b"Bearer", b"bearer", b"BEARER"]))
    pairs = [b"auth=" + scheme + b" " + b64(b'{"alg":"none"}') + b"." + b64(claims) + b"."]
    pairs += [
        k + b"=" + v
        for k, v in draw(
            st.dictionaries(
                st.sampled_from([b"host", b"port", b"x"]), st.sampled_from([b"a", b"9092", b"a=b c"]), max_size=2
            )
        ).items()
    ]
    pairs = draw(st.permutations(pairs))
    return gs2 + b"\x01" + b"".join(p + b"\x01" for p in pairs) + b"\x01"


def well_formed_login() -> st.SearchStrategy[tuple[str, bytes]]:
    scram_mechanism = st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"])
    return st.one_of(
        st.tuples(st.just("PLAIN"), good_plain()),
        st.tuples(scram_mechanism, good_scram()),
        st.tuples(st.just("OAUTHBEARER"), good_oauthbearer()),
    )


def login_message() -> st.SearchStrategy[tuple[str, bytes]]:
    """Well-formed messages with any names, and messages near them or broken (the proxy refuses those)."""
    scram_mechanism = st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"])
    return st.one_of(
        well_formed_login(),
        st.tuples(st.just("PLAIN"), plain()),
        st.tuples(scram_mechanism, scram()),
        st.tuples(st.just("OAUTHBEARER"), oauthbearer()),
        st.tuples(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER"]), odd_bytes),
    )
