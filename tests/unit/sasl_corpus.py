"""Odd SASL first messages: what the proxy must read as the broker does, or refuse (issue 23). Shared by
tests/unit/test_sasl_messages.py (the proxy's reading, expected here) and
tests/integration/test_sasl_differential.py (the same messages read by Kafka's own classes)."""

from __future__ import annotations

import base64
import json
from typing import Any

# 2100-01-01: Kafka's unsecured validator takes tokens not yet expired (the proxy does not look at the expiry).
# A constant, not the clock: the tokens are in test ids, which every pytest-xdist worker must collect alike.
EXP = 4_102_444_800


def b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def jws(claims: Any, header: bytes = b'{"alg":"none"}', signature: bytes = b"") -> bytes:
    """An unsecured JWS; `claims` as a dict, or as the JSON text itself (to spell duplicates and the like)."""
    text = claims if isinstance(claims, bytes) else json.dumps(claims).encode()
    return b64(header) + b"." + b64(text) + b"." + signature


def oauth(*pairs: bytes, gs2: bytes = b"n,,") -> bytes:
    """An OAUTHBEARER client-first message: the GS2 header, then each key=value pair and \\x01."""
    return gs2 + b"\x01" + b"".join(p + b"\x01" for p in pairs) + b"\x01"


def bearer(sub: Any = "alice", **claims: Any) -> bytes:
    return b"auth=Bearer " + jws({"sub": sub, "exp": EXP, **claims})


# (mechanism, message, the name the proxy reads or None: refused). Names the relay guard protects appear
# often (vcproxy is the test proxy's upstream user, admin a super-admin).
CORPUS: list[tuple[str, bytes, str | None]] = [
    # -- PLAIN: authzid NUL authcid NUL password ------------------------------------------------------
    ("PLAIN", b"\0alice\0pw", "alice"),
    ("PLAIN", b"alice\0alice\0pw", "alice"),
    ("PLAIN", "\0zoë\0pw".encode(), "zoë"),
    ("PLAIN", b"\0User:admin\0pw", "User:admin"),  # a name with a colon: principal User:User:admin
    ("PLAIN", b"vcproxy\0alice\0pw", None),  # authzid unlike authcid
    ("PLAIN", b"Alice\0alice\0pw", None),
    ("PLAIN", b"\0alice\0pw\0vcproxy", None),  # a fourth part
    ("PLAIN", b"\0alice\0pw\0", None),
    ("PLAIN", b"\0alice", None),
    ("PLAIN", b"alice", None),
    ("PLAIN", b"\0\0pw", None),  # no name
    ("PLAIN", b"\0alice\0", None),  # no password
    ("PLAIN", b"\0al\xffice\0pw", None),  # not UTF-8 (Kafka reads U+FFFD)
    ("PLAIN", b"\0\xc0\xb0\0pw", None),  # overlong
    ("PLAIN", b"\0\xed\xa0\x80\0pw", None),  # an encoded surrogate
    ("PLAIN", b"\xef\xbb\xbf\0alice\0pw", None),  # a BOM as the authzid
    ("PLAIN", b"", None),
    # -- SCRAM client-first ----------------------------------------------------------------------------
    ("SCRAM-SHA-256", b"n,,n=alice,r=abc", "alice"),
    ("SCRAM-SHA-512", b"n,a=alice,n=alice,r=abc", "alice"),
    ("SCRAM-SHA-512", b"n,,n=a=2Cb=3Dc,r=abc", "a,b=c"),
    ("SCRAM-SHA-512", b"n,,n==3D=2C,r=abc", "=,"),
    ("SCRAM-SHA-512", b"n,,n=vc=3Dproxy,r=abc", "vc=proxy"),
    ("SCRAM-SHA-512", b"n,,n=User:admin,r=abc", "User:admin"),
    ("SCRAM-SHA-512", b"n,a=vcproxy,n=alice,r=abc", None),  # authzid unlike the name
    ("SCRAM-SHA-512", b"n,a=a=2Cb,n=a=2Cb,r=abc", None),  # Kafka compares the escaped authzid: refused
    ("SCRAM-SHA-512", b"n,,n=alice,r=abc,tokenauth=true", None),  # the login is the token's owner
    ("SCRAM-SHA-512", b"n,,n=alice,r=abc,tokenauth=false,tokenauth=true", None),
    ("SCRAM-SHA-512", b"n,,n=alice,r=abc,TokenAuth=true", None),
    ("SCRAM-SHA-512", b"n,,n=alice,r=abc,ext=1", None),  # any extension
    ("SCRAM-SHA-512", b"n,,m=x,n=alice,r=abc", None),  # reserved m=
    ("SCRAM-SHA-512", b"y,,n=alice,r=abc", None),  # gs2 flags Kafka refuses
    ("SCRAM-SHA-512", b"p=tls-unique,,n=alice,r=abc", None),
    ("SCRAM-SHA-512", b"n,,n=alice,r=abc,", None),  # trailing comma
    ("SCRAM-SHA-512", b"n,,n=alice,r=abc\0", None),
    ("SCRAM-SHA-512", b"n,,n=alice,n=vcproxy,r=abc", None),  # two names
    ("SCRAM-SHA-512", b"n,,n=a=41,r=abc", None),  # only =2C and =3D escape
    ("SCRAM-SHA-512", b"n,,n=a=2c,r=abc", None),  # escapes are upper case
    ("SCRAM-SHA-512", b"n,,n=,r=abc", None),
    ("SCRAM-SHA-512", "n,,n=zoë,r=abc".encode(), None),  # Kafka's names are ASCII
    ("SCRAM-SHA-512", b"n,,n=alice,r=a c", None),  # nonce not printable
    ("SCRAM-SHA-512", b"n,,n=alice", None),
    ("SCRAM-SHA-512", b"N,,n=alice,r=abc", None),
    # -- OAUTHBEARER -----------------------------------------------------------------------------------
    ("OAUTHBEARER", oauth(bearer("alice")), "alice"),
    ("OAUTHBEARER", oauth(bearer("alice"), gs2=b"n,a=alice,"), "alice"),
    ("OAUTHBEARER", oauth(b"auth=bearer " + jws({"sub": "alice", "exp": EXP})), "alice"),  # scheme case
    ("OAUTHBEARER", oauth(b"auth=BEARER  " + jws({"sub": "alice", "exp": EXP})), "alice"),
    ("OAUTHBEARER", oauth(bearer("alice"), b"host=example", b"port=9092"), "alice"),
    ("OAUTHBEARER", oauth(bearer("zoë")), "zoë"),
    # the message: two auth keys (Kafka keeps the last)
    ("OAUTHBEARER", oauth(bearer("nobody-relayed"), bearer("vcproxy")), None),
    ("OAUTHBEARER", oauth(bearer("nobody-relayed"), b"AUTH=Bearer " + jws({"sub": "vcproxy", "exp": EXP})), None),
    ("OAUTHBEARER", oauth(bearer("alice"), b"host=a", b"host=b"), None),
    ("OAUTHBEARER", oauth(b"AUTH=Bearer " + jws({"sub": "alice", "exp": EXP})), None),  # no auth
    ("OAUTHBEARER", oauth(bearer("alice"), gs2=b"n,a=vcproxy,"), None),  # authzid unlike the principal
    ("OAUTHBEARER", oauth(bearer("alice"), gs2=b"y,,"), None),
    ("OAUTHBEARER", oauth(b"auth=Basic " + jws({"sub": "alice", "exp": EXP})), None),
    ("OAUTHBEARER", oauth(bearer("alice")) + b"\x01", None),  # trailing bytes
    ("OAUTHBEARER", oauth(bearer("alice"))[:-1], None),
    ("OAUTHBEARER", oauth(bearer("alice"), b"ext=caf\xc3\xa9"), None),  # values are ASCII
    # the token's claims: one reading or refused
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws(b'{"sub":"alice","sub":"vcproxy","exp":%d}' % EXP)), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws(b'{"sub":"alice","s\\u0075b":"vcproxy","exp":%d}' % EXP)), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws(b'{"sub":"alice","exp":%d}{"sub":"vcproxy"}' % EXP)), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws(b'{"sub":"alice","exp":%d} ' % EXP)), "alice"),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws(b'{"sub":"alice","exp":NaN}')), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws(b'{"sub":"\\ud800","exp":%d}' % EXP)), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws(b'\xef\xbb\xbf{"sub":"alice","exp":%d}' % EXP)), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws(b'["alice"]')), None),
    ("OAUTHBEARER", oauth(bearer(None)), None),  # Kafka would name it "null"
    ("OAUTHBEARER", oauth(bearer(True)), None),
    ("OAUTHBEARER", oauth(bearer(7)), None),
    ("OAUTHBEARER", oauth(bearer(["vcproxy"])), None),
    ("OAUTHBEARER", oauth(bearer({"name": "vcproxy"})), None),
    ("OAUTHBEARER", oauth(bearer("  ")), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws({"exp": EXP})), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws({"sub": "alice", "exp": EXP}) + b"="), None),  # padding
    ("OAUTHBEARER", oauth(b"auth=Bearer " + base64.standard_b64encode(b'{"alg":"none"}') + b".e30."), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws({"sub": "alice", "exp": EXP}) + b".x"), None),  # four parts
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws({"sub": "alice", "exp": EXP}).rsplit(b".", 1)[0]), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer ." + b64(b'{"sub":"alice","exp":1}') + b"."), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + jws({"sub": "alice", "exp": EXP}, header=b"[]")), None),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + b64(b'{"alg":"none"}') + b".eyJzdWIiOiJhIn0."), "a"),
    ("OAUTHBEARER", oauth(b"auth=Bearer " + b64(b'{"alg":"none"}') + b".eyJzdWIiOiJhIn1."), None),  # unused bits
]
