"""The relay guard under every login form (issue 23): no login is relayed to the broker as the proxy's
upstream user or as a name the proxy places or empowers, whatever the mechanism and however the name is
spelt; and a relayed connection's later SASL requests cannot change whose login it is. Sans-I/O, through
the session (tests/integration/test_relay.py probes the same against real brokers)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.auth.credentials import CredentialStore, make_entry
from proxy.auth.sasl import SaslServer
from proxy.core.session import Action, ProxySession
from proxy.tenancy.model import TenancyImage, admin_record, principal_record, vc_record

from .sasl_corpus import EXP, bearer, jws, oauth
from .test_relay import (
    AUTHENTICATE,
    HANDSHAKE,
    LAYOUT,
    STORE,
    _authenticate_response,
    _handshake,
    _handshake_response,
    _local,
    _request,
    _session,
    _start_relay,
    _Tenancy,
)


def _refused_at_login(session: ProxySession, mechanism: str, token: bytes) -> None:
    _handshake(session, mechanism)
    decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=token)
    assert decision.action is Action.LOCAL and not session.ctx.relayed
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.sasl_authentication_failed and close
    assert not session.ctx.authenticator.complete and session.principal is None


@pytest.mark.parametrize(
    "token",
    [
        oauth(bearer("nobody-relayed"), bearer("vcproxy")),  # the message
        oauth(bearer("vcproxy"), bearer("nobody-relayed")),
        oauth(bearer("nobody-relayed"), b"AUTH=Bearer " + jws({"sub": "vcproxy", "exp": EXP})),
        oauth(b"auth=Bearer " + jws(b'{"sub":"nobody","sub":"vcproxy","exp":%d}' % EXP)),
        oauth(bearer("vcproxy")),
        oauth(b"auth=bEaReR " + jws({"sub": "vcproxy", "exp": EXP})),
        oauth(bearer("nobody", email="vcproxy")),  # a broker may name principals by another claim
        oauth(bearer("alice")),  # a user of the proxy logs in at the proxy, with her password
        oauth(bearer("nobody", preferred_username="alice")),
        oauth(b"auth=Bearer garbage"),  # a token whose claims cannot be read is refused, not relayed blind
        oauth(bearer(None)),
    ],
)
def test_an_oauthbearer_token_naming_a_protected_user_anywhere_is_refused(token):
    _refused_at_login(_session(), "OAUTHBEARER", token)


@pytest.mark.parametrize(
    ("mechanism", "token"),
    [
        ("PLAIN", b"\0vc,proxy\0pw"),
        ("SCRAM-SHA-256", b"n,,n=vc=2Cproxy,r=abc"),  # escaped: Kafka unescapes it to the upstream user
        ("SCRAM-SHA-256", b"n,a=vc=2Cproxy,n=vc=2Cproxy,r=abc"),
        ("PLAIN", b"vc,proxy\0nobody\0pw"),  # authzid unlike authcid: refused, whatever the broker would do
        ("SCRAM-SHA-512", b"n,a=vc=2Cproxy,n=nobody,r=abc"),
    ],
)
def test_the_upstream_user_however_spelt_is_never_relayed(mechanism, token):
    server = SaslServer(STORE, name="t", relay=True, upstream_user="vc,proxy")
    _refused_at_login(ProxySession(LAYOUT, server), mechanism, token)


def _tenancy_session(super_admins: list[str]) -> ProxySession:
    img = TenancyImage()
    for record in (vc_record("team-a"), principal_record("user:erin", "team-a")):
        img.apply(*record)
    server = SaslServer(STORE, name="t", relay=True, upstream_user="vcproxy")
    return ProxySession(LAYOUT, server, tenancy=_Tenancy(img), super_admins=super_admins)


@pytest.mark.parametrize(
    ("mechanism", "token"),
    [
        ("PLAIN", b"\0dave\0pw"),
        ("SCRAM-SHA-512", b"n,,n=dave,r=abc"),
        ("OAUTHBEARER", oauth(bearer("dave"))),
        ("OAUTHBEARER", oauth(bearer("nobody", upn="dave"))),
        ("PLAIN", b"\0erin\0pw"),  # bound to a VC as user:erin
        ("OAUTHBEARER", oauth(bearer("erin"))),
    ],
)
def test_a_name_the_proxy_empowers_is_refused_whatever_the_case_of_user(mechanism, token):
    _refused_at_login(_tenancy_session(["USER:dave"]), mechanism, token)


def test_a_name_the_proxy_knows_nothing_of_is_still_relayed():
    _start_relay(_tenancy_session(["User:dave"]), "OAUTHBEARER", oauth(bearer("mallory")))
    _start_relay(_tenancy_session(["User:dave"]), "SCRAM-SHA-512", b"n,,n=mallory,r=abc")


def test_an_oauthbearer_exchange_takes_one_token():
    session = _session()
    _start_relay(session, "OAUTHBEARER", oauth(bearer("mallory")))
    # The broker's error challenge; then a second client-first would log in as whoever it names.
    session.on_response(memoryview(bytearray(_authenticate_response(2, token=b'{"status":"invalid_token"}'))))
    decision = _request(session, AUTHENTICATE, 2, 3, auth_bytes=oauth(bearer("vcproxy")))
    assert decision.action is Action.LOCAL
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.sasl_authentication_failed and close
    assert not session.ctx.authenticator.complete


def _relayed_and_logged_in(mechanism: str, token: bytes) -> ProxySession:
    session = _session()
    _start_relay(session, mechanism, token)
    if mechanism.startswith("SCRAM"):  # server-first, client-final, server-final
        session.on_response(memoryview(bytearray(_authenticate_response(2, token=b"r=abcdef,s=c2FsdA==,i=4096"))))
        assert _request(session, AUTHENTICATE, 2, 3, auth_bytes=b"c=biws,r=abcdef,p=cHJvb2Y=").action is Action.FORWARD
        session.on_response(memoryview(bytearray(_authenticate_response(3, token=b"v=c2lnbmF0dXJl"))))
    else:
        session.on_response(memoryview(bytearray(_authenticate_response(2, lifetime_ms=1000))))
    assert session.ctx.authenticator.complete
    return session


def _reauthenticate(session: ProxySession, mechanism: str, token: bytes) -> Action:
    assert _request(session, HANDSHAKE, 1, 7, mechanism=mechanism).action is Action.FORWARD
    session.on_response(memoryview(bytearray(_handshake_response(7))))
    return _request(session, AUTHENTICATE, 2, 8, auth_bytes=token).action


@pytest.mark.parametrize(
    ("mechanism", "first", "again", "forwarded"),
    [
        ("OAUTHBEARER", oauth(bearer("mallory")), oauth(bearer("mallory")), True),
        ("OAUTHBEARER", oauth(bearer("mallory")), oauth(bearer("vcproxy")), False),
        ("OAUTHBEARER", oauth(bearer("mallory")), oauth(bearer("mallory"), bearer("vcproxy")), False),
        ("OAUTHBEARER", oauth(bearer("mallory")), oauth(bearer("other")), False),
        ("SCRAM-SHA-512", b"n,,n=mallory,r=abc", b"n,,n=mallory,r=xyz", True),
        ("SCRAM-SHA-512", b"n,,n=mallory,r=abc", b"n,,n=mallory,r=xyz,tokenauth=true", False),
        ("PLAIN", b"\0mallory\0pw", b"\0mallory\0pw", True),
        ("PLAIN", b"\0mallory\0pw", b"\0mallory\0pw\0vcproxy", False),
        ("PLAIN", b"\0mallory\0pw", b"vcproxy\0mallory\0pw", False),
    ],
)
def test_a_reauthentication_is_read_and_must_name_the_same_user(mechanism, first, again, forwarded):
    session = _relayed_and_logged_in(mechanism, first)
    action = _reauthenticate(session, mechanism, again)
    assert (action is Action.FORWARD) is forwarded
    if not forwarded:
        body, close = _local(session, AUTHENTICATE, 2)
        assert body.error_code == ErrorCode.sasl_authentication_failed and close


def test_a_reauthentication_with_another_mechanism_is_refused():
    session = _relayed_and_logged_in("PLAIN", b"\0mallory\0pw")
    assert _reauthenticate(session, "OAUTHBEARER", oauth(bearer("mallory"))) is Action.LOCAL


def test_a_terminated_scram_login_reads_the_name_kafka_reads():
    store = CredentialStore.from_mapping({"a,b": make_entry("pw", 4096)})
    server = SaslServer(store, name="t")
    session = ProxySession(LAYOUT, server)
    _handshake(session, "SCRAM-SHA-256")
    assert _request(session, AUTHENTICATE, 2, 2, auth_bytes=b"n,,n=a=2Cb,r=abc").action is Action.LOCAL
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.none and body.auth_bytes.startswith(b"r=abc") and not close
    for odd in (b"n,a=x,n=a=2Cb,r=abc", b"y,,n=a=2Cb,r=abc", b"n,,n=a=2Cb,r=abc,ext=1"):
        session = ProxySession(LAYOUT, SaslServer(store, name="t"))
        _refused_at_login(session, "SCRAM-SHA-256", odd)


def test_a_reauthentication_of_a_name_the_proxy_has_placed_since_is_refused():
    img = TenancyImage()
    img.apply(*vc_record("team-a"))
    session = ProxySession(
        LAYOUT, SaslServer(STORE, name="t", relay=True, upstream_user="vcproxy"), tenancy=_Tenancy(img)
    )
    _start_relay(session, "PLAIN", b"\0mallory\0pw")
    session.on_response(memoryview(bytearray(_authenticate_response(2, lifetime_ms=1000))))
    assert session.ctx.authenticator.complete
    img.apply(*principal_record("User:mallory", "team-a"))  # an admin binds her name to a VC meanwhile
    assert _reauthenticate(session, "PLAIN", b"\0mallory\0pw") is Action.LOCAL
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.sasl_authentication_failed and close


def test_a_name_named_after_the_session_started_is_refused_too():
    """The names the proxy protects are made once per change of the image: a binding, an admin or a cluster
    ACL (even a DENY) written while the connection is open is seen at its login."""
    img = _tenancy_session(["User:dave"]).tenancy.image
    _start_relay(_tenancy_session_on(img), "PLAIN", b"\0frank\0pw")  # relayed while nobody names frank
    img.apply(*admin_record("team-a", "User:frank", True))
    _refused_at_login(_tenancy_session_on(img), "PLAIN", b"\0frank\0pw")
    for record in (
        principal_record("User:gina", "team-a"),
        acl_record(
            "kafka-cluster",
            AclBinding(
                ResourceType.CLUSTER, "team-a", PatternType.LITERAL, "user:hank", "*", Operation.ALTER, Permission.DENY
            ),
            True,
        ),
    ):
        img.apply(*record)
    for name in (b"gina", b"hank"):
        _refused_at_login(_tenancy_session_on(img), "PLAIN", b"\0" + name + b"\0pw")


def _tenancy_session_on(img: TenancyImage) -> ProxySession:
    server = SaslServer(STORE, name="t", relay=True, upstream_user="vcproxy")
    return ProxySession(LAYOUT, server, tenancy=_Tenancy(img), super_admins=["User:dave"])
