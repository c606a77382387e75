"""Relaying the SASL exchange of principals the proxy does not know (listeners.unknown_principals: relay),
sans-I/O: the session's decisions, the proxy's internal SaslHandshake, and the broker's answers (made up
here; tests/integration/test_relay.py runs it against real brokers)."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode
from scramp import ScramClient

from proxy.auth.credentials import CredentialStore, make_entry
from proxy.auth.guard import SLOW_DOWN, LoginGuard
from proxy.auth.sasl import SaslServer, oauth_subject, peek_user
from proxy.config import ConfigError, parse_config
from proxy.core.apiversions import with_table
from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession, RequestDecision
from proxy.protocol import codec
from proxy.protocol import management as m
from proxy.protocol.apikey import ApiKey
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.headers import parse_request_header, response_body_offset
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import TenancyImage, principal_record, vc_record

from .wire import request_frame, response_frame

HANDSHAKE, AUTHENTICATE, METADATA, API_VERSIONS = 17, 36, 3, 18
LAYOUT = ListenerLayout("proxy.example", 9192, 9193)
STORE = CredentialStore.from_mapping({"alice": make_entry("alice-secret", 4096)})
CLUSTER_AUTHORIZATION_FAILED = 31


@dataclasses.dataclass
class _Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


def _session(relay: bool = True, tenancy: bool = False, guard: LoginGuard | None = None) -> ProxySession:
    server = SaslServer(STORE, name="t", relay=relay, upstream_user="vcproxy", guard=guard, address="10.0.0.1")
    if not tenancy:
        return ProxySession(LAYOUT, server)
    img = TenancyImage()
    for record in (
        vc_record("team-a"),
        principal_record("User:alice", "team-a"),
        principal_record("User:carol", "team-a"),
    ):
        img.apply(*record)
    return ProxySession(LAYOUT, server, tenancy=_Tenancy(img), super_admins=["User:carol"])


def _decided(decision: RequestDecision) -> RequestDecision:
    return decision.resume(decision.check.run()) if decision.action is Action.CHECK else decision


def _request(session: ProxySession, api_key: int, version: int, correlation_id: int, **fields: Any) -> RequestDecision:
    frame = request_frame(api_key, version, correlation_id, request_type(api_key, version)(**fields))
    return _decided(session.on_request(memoryview(bytearray(frame))))


def _local(session: ProxySession, api_key: int, version: int) -> tuple[Any, bool]:
    pending = session.next_local_reply()
    assert pending is not None and pending.reply is not None
    offset = response_body_offset(pending.reply, api_info(api_key).response_header_version(version))
    body, _ = codec.decode(response_type(api_key, version), pending.reply, offset)
    return body, pending.close_after


def _handshake(session: ProxySession, mechanism: str) -> Any:
    decision = _request(session, HANDSHAKE, 1, 1, mechanism=mechanism)
    assert decision.action is Action.LOCAL  # the proxy answers the client's handshake itself
    body, close = _local(session, HANDSHAKE, 1)
    assert not close
    return body


def _authenticate_response(correlation_id: int, error: int = 0, token: bytes = b"", lifetime_ms: int = 0) -> bytes:
    body = response_type(AUTHENTICATE, 2)(
        error_code=ErrorCode(error),
        error_message="Authentication failed" if error else None,
        auth_bytes=token,
        session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
    )
    return response_frame(AUTHENTICATE, 2, correlation_id, body)


def _handshake_response(correlation_id: int, error: int = 0) -> bytes:
    body = response_type(HANDSHAKE, 1)(error_code=ErrorCode(error), mechanisms=("PLAIN", "SCRAM-SHA-512"))
    return response_frame(HANDSHAKE, 1, correlation_id, body)


def _start_relay(session: ProxySession, mechanism: str, token: bytes) -> RequestDecision:
    """Handshake, then the first SaslAuthenticate, which must be relayed; the internal handshake is answered."""
    _handshake(session, mechanism)
    decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=token)
    assert decision.action is Action.FORWARD and decision.relay
    assert session.ctx.relayed and not session.ctx.authenticator.complete
    assert decision.before is not None and len(decision.before) == 1
    internal = decision.before[0]
    # The proxy's own SaslHandshake v1 for the client's mechanism, queued before the client's request.
    frame = bytes(internal.frame)
    header = parse_request_header(frame, api_info(HANDSHAKE).request_header_version(1))
    assert (header.api_key, header.api_version) == (HANDSHAKE, 1)
    sent, _ = codec.decode(request_type(HANDSHAKE, 1), frame, header.body_offset)
    assert sent.mechanism == mechanism
    assert list(session.in_flight) == [internal, decision.pending]
    assert decision.pieces is None and decision.frame is None  # the client's frame goes unchanged
    result = session.on_response(memoryview(bytearray(_handshake_response(header.correlation_id))))
    assert result.pieces == [] and result.close is None and result.exchange is None  # never sent to the client
    return decision


def _scram_first(user: str, mechanism: str = "SCRAM-SHA-512") -> tuple[ScramClient, bytes]:
    client = ScramClient([mechanism], user, "whatever")
    return client, client.get_client_first().encode()


# -- peeking the user name --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mechanism", "token", "user"),
    [
        ("PLAIN", b"\0carol\0pw", "carol"),
        ("PLAIN", b"carol\0carol\0pw", "carol"),
        ("PLAIN", "\0zoë\0pw".encode(), "zoë"),
        ("SCRAM-SHA-256", b"n,,n=carol,r=abc", "carol"),
        ("SCRAM-SHA-512", b"n,a=carol,n=carol,r=abc", "carol"),
        ("SCRAM-SHA-512", b"n,,n=a=2Cb=3Dc,r=abc", "a,b=c"),
        ("SCRAM-SHA-512", b"n,,n==3D=2C,r=abc", "=,"),
    ],
)
def test_peek_user_reads_the_login_name(mechanism, token, user):
    assert peek_user(mechanism, token) == (user, "")


@pytest.mark.parametrize(
    ("mechanism", "token"),
    [
        ("PLAIN", b"carol\0pw"),
        ("PLAIN", b"\0\0pw"),
        ("PLAIN", b"\0\xff\0pw"),
        ("SCRAM-SHA-512", b"n,,n=carol"),  # no nonce
        ("SCRAM-SHA-512", b"x,,n=carol,r=abc"),  # bad gs2 header
        ("SCRAM-SHA-512", b"n,,u=carol,r=abc"),
        ("SCRAM-SHA-512", b"n,,n=a=41b,r=abc"),  # only =2C and =3D are escapes
        ("SCRAM-SHA-512", b"n,,n=a=2,r=abc"),
        ("SCRAM-SHA-512", b"n,,n=,r=abc"),
        ("SCRAM-SHA-512", b"n,,n=\xff,r=abc"),
        # Kafka takes only the gs2 flag n, and no extension but tokenauth (refused: a token's owner is the login)
        ("SCRAM-SHA-512", b"y,,n=a=2Cb=3Dc,r=abc"),
        ("SCRAM-SHA-512", b"n,,n==3D=2C,r=abc,ext=1"),
    ],
)
def test_peek_user_refuses_malformed_tokens(mechanism, token):
    user, why = peek_user(mechanism, token)
    assert user is None and why


@pytest.mark.parametrize("token", [b"n,,n=\xc3,r=abc", b"n,,n=a=41,r=abc", b"n,,r=abc"])
def test_a_malformed_scram_token_is_a_failed_login_with_one_log_line(token, caplog):
    session = _session()
    _handshake(session, "SCRAM-SHA-512")
    with caplog.at_level(logging.INFO, logger="proxy"):
        decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=token)
    assert decision.action is Action.LOCAL and not session.ctx.relayed
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.sasl_authentication_failed and close
    assert len([r for r in caplog.records if "authentication failed" in r.getMessage()]) == 1


def test_a_malformed_plain_token_fails_as_ever(caplog):
    session = _session()
    _handshake(session, "PLAIN")
    with caplog.at_level(logging.INFO, logger="proxy"):
        decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=b"just-one-token")
    assert decision.action is Action.LOCAL and not session.ctx.relayed
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.sasl_authentication_failed and close
    assert "expected 3 tokens" in body.error_message
    assert len([r for r in caplog.records if "authentication failed" in r.getMessage()]) == 1


# -- who is relayed ---------------------------------------------------------------------------------


def test_handshake_offers_oauthbearer_only_when_relaying():
    assert list(_handshake(_session(), "PLAIN").mechanisms) == [
        "PLAIN",
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
        "OAUTHBEARER",
    ]
    assert "OAUTHBEARER" not in _handshake(_session(relay=False), "PLAIN").mechanisms
    refused = _session(relay=False)
    assert _request(refused, HANDSHAKE, 1, 1, mechanism="OAUTHBEARER").action is Action.LOCAL
    body, close = _local(refused, HANDSHAKE, 1)
    assert body.error_code == ErrorCode.unsupported_sasl_mechanism and close


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_the_proxys_own_user_is_terminated_locally(mechanism):
    session = _session()
    _handshake(session, mechanism)
    if mechanism == "PLAIN":
        decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=b"\0alice\0alice-secret")
        assert decision.action is Action.LOCAL
        body, close = _local(session, AUTHENTICATE, 2)
    else:
        client = ScramClient([mechanism], "alice", "alice-secret")
        assert (
            _request(session, AUTHENTICATE, 2, 2, auth_bytes=client.get_client_first().encode()).action is Action.LOCAL
        )
        first, _ = _local(session, AUTHENTICATE, 2)
        client.set_server_first(first.auth_bytes.decode())
        decision = _request(session, AUTHENTICATE, 2, 3, auth_bytes=client.get_client_final().encode())
        assert decision.action is Action.LOCAL
        body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.none and not close
    assert not session.ctx.relayed and session.principal == "User:alice"
    assert not session.in_flight


@pytest.mark.parametrize(
    ("mechanism", "token"),
    [("PLAIN", b"\0vcproxy\0vcproxy-secret"), ("SCRAM-SHA-256", b"n,,n=vcproxy,r=abc")],
)
def test_the_proxys_upstream_user_is_never_relayed(mechanism, token, caplog):
    session = _session()
    _handshake(session, mechanism)
    with caplog.at_level(logging.INFO, logger="proxy"):
        decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=token)
    assert decision.action is Action.LOCAL and not session.ctx.relayed
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.sasl_authentication_failed and close
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "upstream user is never relayed" in lines[0] and "'vcproxy'" in lines[0]


def test_refuse_mode_fails_an_unknown_user_as_ever():
    session = _session(relay=False)
    _handshake(session, "PLAIN")
    decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=b"\0carol\0carol-secret")
    assert decision.action is Action.LOCAL and not session.ctx.relayed
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.sasl_authentication_failed and close


def test_relayed_plain_login_then_a_plain_relay(caplog):
    session = _session()
    with caplog.at_level(logging.INFO, logger="proxy"):
        decision = _start_relay(session, "PLAIN", b"\0carol\0carol-secret")
    # The broker's answer goes back unchanged and logs the session in.
    answer = _authenticate_response(2, lifetime_ms=60_000)
    result = session.on_response(memoryview(bytearray(answer)))
    assert b"".join(map(bytes, result.pieces)) == answer and result.exchange is decision.pending
    assert not result.exchange.close_after
    assert session.ctx.authenticator.complete and session.principal == "User:carol"
    assert any("relaying the PLAIN login of user 'carol'" in r.getMessage() for r in caplog.records)
    # After login: requests pass unchanged, broker endpoints still point at the proxy.
    metadata = _request(
        session,
        METADATA,
        12,
        3,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert metadata.action is Action.FORWARD and metadata.pieces is None
    result = session.on_response(memoryview(bytearray(_metadata_response_frame(3))))
    out = b"".join(map(bytes, result.pieces))
    assert b"proxy.example" in out and b"10.1.1.1" not in out


def _metadata_response_frame(correlation_id: int) -> bytes:
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseBroker
    from kio.static.primitive import i32

    body = MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(MetadataResponseBroker(node_id=i32(2), host="10.1.1.1", port=i32(9092), rack=None),),
        cluster_id="c",
        controller_id=i32(2),
        topics=(),
    )
    return response_frame(METADATA, 12, correlation_id, body)


def test_relayed_scram_login_needs_the_servers_final_message():
    session = _session()
    _, first = _scram_first("carol")
    _start_relay(session, "SCRAM-SHA-512", first)
    server_first = b"r=" + first.split(b"r=")[1] + b"srv,s=c2FsdA==,i=4096"
    result = session.on_response(memoryview(bytearray(_authenticate_response(2, token=server_first))))
    assert not result.exchange.close_after and not session.ctx.authenticator.complete
    # The client's final message goes straight on: no handshake this time.
    decision = _request(session, AUTHENTICATE, 2, 3, auth_bytes=b"c=biws,r=x,p=cHJvb2Y=")
    assert decision.action is Action.FORWARD and not decision.before and len(session.in_flight) == 1
    result = session.on_response(memoryview(bytearray(_authenticate_response(3, token=b"v=c2lnbmF0dXJl"))))
    assert session.ctx.authenticator.complete and session.principal == "User:carol"
    # Endpoint rewriting still applies to a relayed connection.
    metadata = _request(
        session,
        METADATA,
        12,
        4,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert metadata.action is Action.FORWARD
    result = session.on_response(memoryview(bytearray(_metadata_response_frame(4))))
    out = b"".join(map(bytes, result.pieces))
    assert b"proxy.example" in out and b"10.1.1.1" not in out


def test_the_broker_refusing_a_relayed_login_is_passed_on_then_closes(caplog):
    guard = LoginGuard.create(1, 60)  # one failure spends the address's budget
    session = _session(guard=guard)
    _, first = _scram_first("carol")
    _start_relay(session, "SCRAM-SHA-512", first)
    refusal = _authenticate_response(2, error=int(ErrorCode.sasl_authentication_failed))
    with caplog.at_level(logging.INFO, logger="proxy"):
        result = session.on_response(memoryview(bytearray(refusal)))
    assert b"".join(map(bytes, result.pieces)) == refusal  # unchanged
    assert result.exchange.close_after and not session.ctx.authenticator.complete
    assert session.principal is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "refused by the broker" in lines[0] and "'carol'" in lines[0]
    assert result.exchange.delay_factor == 1
    # The failure counts against the client's address: the next relayed failure from it is answered slowly.
    again = _session(guard=guard)
    _start_relay(again, "SCRAM-SHA-512", first)
    result = again.on_response(memoryview(bytearray(refusal)))
    assert result.exchange.close_after and result.exchange.delay_factor == SLOW_DOWN


def test_the_internal_handshake_refused_closes_the_connection():
    session = _session()
    _handshake(session, "SCRAM-SHA-256")
    decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=b"n,,n=carol,r=abc")
    internal = decision.before[0]
    result = session.on_response(
        memoryview(bytearray(_handshake_response(internal.correlation_id, int(ErrorCode.unsupported_sasl_mechanism))))
    )
    assert result.pieces == [] and "refused SASL mechanism SCRAM-SHA-256" in (result.close or "")
    assert "UNSUPPORTED_SASL_MECHANISM" in result.close and "PLAIN, SCRAM-SHA-512" in result.close


def test_oauthbearer_is_relayed_and_named_after_its_subject():
    claims = base64.urlsafe_b64encode(json.dumps({"sub": "svc-1"}).encode()).rstrip(b"=")
    token = b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0." + claims + b".\x01\x01"
    assert oauth_subject(token) == "svc-1"
    assert oauth_subject(b"n,,\x01auth=Bearer garbage\x01\x01") is None
    session = _session()
    _start_relay(session, "OAUTHBEARER", token)
    # A non-empty success is the broker's error challenge: not logged in yet.
    session.on_response(memoryview(bytearray(_authenticate_response(2, token=b'{"status":"invalid_token"}'))))
    assert not session.ctx.authenticator.complete
    assert _request(session, AUTHENTICATE, 2, 3, auth_bytes=b"\x01").action is Action.FORWARD
    result = session.on_response(memoryview(bytearray(_authenticate_response(3, error=58))))
    assert result.exchange.close_after

    session = _session()
    _start_relay(session, "OAUTHBEARER", token)
    session.on_response(memoryview(bytearray(_authenticate_response(2))))
    assert session.ctx.authenticator.complete and session.principal == "User:svc-1"


def test_an_oauthbearer_token_for_the_proxys_upstream_user_is_not_relayed():
    claims = base64.urlsafe_b64encode(json.dumps({"sub": "vcproxy"}).encode()).rstrip(b"=")
    session = _session()
    _handshake(session, "OAUTHBEARER")
    decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=b"n,,\x01auth=Bearer e30." + claims + b".\x01\x01")
    assert decision.action is Action.LOCAL and not session.ctx.relayed
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.sasl_authentication_failed and close


def test_reauthentication_is_forwarded_unchanged():
    session = _session()
    _start_relay(session, "PLAIN", b"\0carol\0carol-secret")
    session.on_response(memoryview(bytearray(_authenticate_response(2, lifetime_ms=1000))))
    assert session.ctx.authenticator.complete
    handshake = _request(session, HANDSHAKE, 1, 7, mechanism="PLAIN")
    assert handshake.action is Action.FORWARD and not handshake.before and handshake.pieces is None
    result = session.on_response(memoryview(bytearray(_handshake_response(7))))
    assert result.pieces and not result.exchange.close_after
    assert _request(session, AUTHENTICATE, 2, 8, auth_bytes=b"\0carol\0carol-secret").action is Action.FORWARD
    result = session.on_response(memoryview(bytearray(_authenticate_response(8, lifetime_ms=1000))))
    assert not result.exchange.close_after and session.principal == "User:carol"
    # A refused re-authentication is passed on, then the connection closes (the broker closes it too).
    _request(session, HANDSHAKE, 1, 9, mechanism="PLAIN")
    session.on_response(memoryview(bytearray(_handshake_response(9))))
    _request(session, AUTHENTICATE, 2, 10, auth_bytes=b"\0carol\0wrong")
    result = session.on_response(memoryview(bytearray(_authenticate_response(10, error=58))))
    assert result.exchange.close_after


# -- a relayed connection on a tenancy listener -------------------------------------------------------


def test_a_relayed_principal_is_in_no_vc_and_cannot_manage_vcs():
    # mallory is a user the proxy does not know: the broker judges her, the proxy's bindings, ACLs and
    # management RPCs do not apply (a name the proxy places is never relayed: the test below).
    session = _session(tenancy=True)
    _start_relay(session, "PLAIN", b"\0mallory\0mallory-secret")
    session.on_response(memoryview(bytearray(_authenticate_response(2))))
    metadata = _request(
        session,
        METADATA,
        12,
        3,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert metadata.action is Action.FORWARD and metadata.pieces is None  # not translated
    assert session.vc is None and session.engine is None
    session.on_response(memoryview(bytearray(_metadata_response_frame(3))))
    decision = session.on_request(
        memoryview(bytearray(request_frame(ApiKey.LIST_VIRTUAL_CLUSTERS, 0, 4, m.ListVirtualClustersRequest())))
    )
    assert decision.action is Action.LOCAL
    reply = session.next_local_reply()
    body, _ = codec.decode(m.RESPONSES[ApiKey.LIST_VIRTUAL_CLUSTERS], reply.reply, response_body_offset(reply.reply, 1))
    assert int(body.error_code) == CLUSTER_AUTHORIZATION_FAILED
    # ApiVersions after login: the broker's table, without the proxy's management APIs.
    request = request_type(API_VERSIONS, 3)(client_software_name="t", client_software_version="1")
    assert _request(session, API_VERSIONS, 3, 5, **dataclasses.asdict(request)).action is Action.FORWARD
    broker = with_table(
        response_type(API_VERSIONS, 3)(error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0)),
        {3: (0, 12), 17: (0, 1), 18: (0, 4), 36: (0, 2)},
    )
    result = session.on_response(memoryview(bytearray(response_frame(API_VERSIONS, 3, 5, broker))))
    answered, _ = codec.decode(
        response_type(API_VERSIONS, 3),
        b"".join(map(bytes, result.pieces)),
        response_body_offset(b"".join(map(bytes, result.pieces)), 0),
    )
    keys = {int(k.api_key) for k in answered.api_keys}
    assert keys and not keys & set(m.REQUESTS)


def test_a_proxy_user_on_a_relaying_listener_keeps_its_vc():
    session = _session(tenancy=True)
    _handshake(session, "PLAIN")
    _request(session, AUTHENTICATE, 2, 2, auth_bytes=b"\0alice\0alice-secret")
    body, _ = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.none and not session.ctx.relayed
    metadata = _request(
        session,
        METADATA,
        12,
        3,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    assert metadata.action is Action.FORWARD and session.vc is not None and session.vc.name == "team-a"


def test_a_name_the_proxy_places_is_never_relayed(caplog):
    """carol is bound to team-a (and a super-admin) but has no credentials at the proxy: relaying her login
    would let the broker judge a principal the proxy places. Refused like a wrong password instead."""
    session = _session(tenancy=True)
    _handshake(session, "PLAIN")
    with caplog.at_level(logging.INFO):
        decision = _request(session, AUTHENTICATE, 2, 2, auth_bytes=b"\0carol\0whatever")
    assert decision.action is Action.LOCAL and not session.ctx.relayed
    body, close = _local(session, AUTHENTICATE, 2)
    assert body.error_code == ErrorCode.sasl_authentication_failed and close
    assert "invalid credentials" in body.error_message
    assert "refusing to relay the login of User:carol" in caplog.text
    # A name the proxy does not place is relayed on the same listener.
    other = _session(tenancy=True)
    _start_relay(other, "PLAIN", b"\0mallory\0whatever")


# -- config ---------------------------------------------------------------------------------------------


def _config(listener: str, upstream: str) -> dict[str, Any]:
    up: dict[str, Any] = {"bootstrap_servers": ["k:1"], "security_protocol": upstream}
    if upstream.startswith("SASL_"):
        up.update(sasl_mechanism="PLAIN", sasl_username="vcproxy", sasl_password="x")
    return {
        "listeners": {"security_protocol": listener, "unknown_principals": "relay"},
        "upstream": up,
        "credentials": {"users": {"alice": make_entry("alice-secret", 4096)}},
    }


def test_relay_needs_a_sasl_listener_and_a_sasl_upstream():
    assert parse_config(_config("SASL_PLAINTEXT", "SASL_PLAINTEXT")).listeners.unknown_principals == "relay"
    assert parse_config({"upstream": {"bootstrap_servers": ["k:1"]}}).listeners.unknown_principals == "refuse"
    with pytest.raises(ConfigError, match="unknown_principals: relay needs a SASL listener"):
        parse_config(_config("PLAINTEXT", "SASL_PLAINTEXT"))
    with pytest.raises(ConfigError, match="unknown_principals: relay needs an upstream that speaks SASL"):
        parse_config(_config("SASL_PLAINTEXT", "PLAINTEXT"))
    with pytest.raises(ConfigError, match="unknown_principals"):
        parse_config({**_config("SASL_PLAINTEXT", "SASL_PLAINTEXT"), "listeners": {"unknown_principals": "maybe"}})


# -- the shell: the relayed login's own broker connection, and the login guards --------------------------


class _Shell:
    """A ClientConnection between an in-memory client and in-memory brokers that answer as told."""

    def __init__(
        self,
        nursery: Any,
        limits: Any = None,
        answer_authenticate: Callable[[int], bytes | None] | None = None,
        lockstep: bool = False,
        sockets: bool = False,
    ):
        import trio.testing

        from proxy.net.connection import ClientConnection, ConnectionLimits
        from proxy.net.frames import FrameReader

        self.logins: list[bool] = []
        self.seen: list[list[int]] = []
        self.nursery = nursery
        self.answer_authenticate = answer_authenticate or (lambda cid: _authenticate_response(cid))
        # lockstep: the proxy's sends to the client wait until the client reads (a client that reads slowly)
        pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
        self.client, proxy_side = pair()
        self.connection = ClientConnection(
            proxy_side,
            self._connect,
            _session(),
            limits=limits or ConnectionLimits(max_frame_bytes=1 << 20, buffer_size=1 << 16),
            on_brokers=self._on_brokers,
            name="t",
        )
        self.replies = FrameReader(self.client, 1 << 20, 1 << 16)
        self.closed = trio.Event()
        # sockets: the brokers are the far ends of socket pairs (the shell's own readiness waits), not memory
        self.sockets = sockets
        self.brokers: list[Any] = []  # the broker side of each upstream connection, in order

        async def run() -> None:
            await self.connection.run()
            self.closed.set()

        nursery.start_soon(run)

    async def _on_brokers(self, _seen: Any, _full: bool) -> None:
        return None

    async def _connect(self, login: bool) -> Any:
        import trio.testing

        if self.sockets:
            a, b = trio.socket.socketpair()
            ours, theirs = trio.SocketStream(a), trio.SocketStream(b)
        else:
            ours, theirs = trio.testing.memory_stream_pair()
        self.brokers.append(theirs)
        self.logins.append(login)
        self.seen.append([])
        self.nursery.start_soon(self._broker, theirs, self.seen[-1])
        return ours

    async def _broker(self, stream: Any, log: list[int]) -> None:
        from proxy.net.frames import FrameReader
        from proxy.protocol.headers import peek_request

        reader = FrameReader(stream, 1 << 20, 1 << 16)
        try:
            while (frame := await reader.next_frame()) is not None:
                api_key, _version, correlation_id = peek_request(frame)
                log.append(api_key)
                answer: bytes | None = None
                if api_key == API_VERSIONS:
                    body: Any = with_table(
                        response_type(API_VERSIONS, 3)(
                            error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0)
                        ),
                        {3: (0, 12), 17: (0, 1), 18: (0, 4), 36: (0, 2)},
                    )
                    answer = response_frame(API_VERSIONS, 3, correlation_id, body)
                elif api_key == HANDSHAKE:
                    answer = _handshake_response(correlation_id)
                elif api_key == AUTHENTICATE:
                    answer = self.answer_authenticate(correlation_id)
                if answer is not None:
                    await stream.send_all(answer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def send(self, api_key: int, version: int, correlation_id: int, **fields: Any) -> None:
        await self.client.send_all(
            request_frame(api_key, version, correlation_id, request_type(api_key, version)(**fields))
        )

    async def ask(self, api_key: int, version: int, correlation_id: int, **fields: Any) -> Any:
        await self.send(api_key, version, correlation_id, **fields)
        with trio.fail_after(10):
            reply = await self.replies.next_frame()
        assert reply is not None
        header_version = 0 if api_key == API_VERSIONS else api_info(api_key).response_header_version(version)
        assert int.from_bytes(reply[4:8], "big") == correlation_id  # the client's answers, in order
        body, _ = codec.decode(response_type(api_key, version), reply, response_body_offset(reply, header_version))
        return body


async def test_a_relayed_login_gets_a_broker_connection_without_the_proxys_login():
    """The client's ApiVersions (nothing cached) went up on a connection with the proxy's login; the relayed
    login must not use it: the shell waits for its answers, closes it and opens one without the login, on
    which the proxy's SaslHandshake goes first. Its answer never reaches the client."""
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery)
        assert (await shell.ask(API_VERSIONS, 3, 1, client_software_name="t", client_software_version="1")).api_keys
        assert (await shell.ask(HANDSHAKE, 1, 2, mechanism="PLAIN")).error_code == ErrorCode.none
        answer = await shell.ask(AUTHENTICATE, 2, 3, auth_bytes=b"\0carol\0carol-secret")
        assert answer.error_code == ErrorCode.none
        assert shell.connection.session.principal == "User:carol" and shell.connection._logged_in
        assert shell.logins == [True, False]
        assert shell.seen == [[API_VERSIONS], [HANDSHAKE, AUTHENTICATE]]
        await shell.client.aclose()


async def test_a_relayed_login_has_the_login_deadline(autojump_clock):
    from proxy.net.connection import ConnectionLimits

    limits = ConnectionLimits(max_frame_bytes=1 << 20, buffer_size=1 << 16, authentication_timeout=10)
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, limits, answer_authenticate=lambda cid: None)  # the broker never answers
        assert (await shell.ask(HANDSHAKE, 1, 1, mechanism="PLAIN")).error_code == ErrorCode.none
        await shell.send(AUTHENTICATE, 2, 2, auth_bytes=b"\0carol\0carol-secret")
        started = trio.current_time()
        await shell.closed.wait()
        assert trio.current_time() - started <= 10
        assert shell.connection.close_reason == "not authenticated within 10 s"
        assert shell.logins == [False] and shell.seen == [[HANDSHAKE, AUTHENTICATE]]


async def test_a_relayed_login_keeps_the_pre_login_frame_limit():
    from proxy.net.connection import ConnectionLimits

    limits = ConnectionLimits(max_frame_bytes=1 << 20, buffer_size=1 << 16, pre_auth_max_frame_bytes=4096)
    async with trio.open_nursery() as nursery:
        # SCRAM's first answer is not the end of the login: the connection is still a stranger's.
        shell = _Shell(
            nursery, limits, answer_authenticate=lambda cid: _authenticate_response(cid, token=b"r=x,s=eA==,i=4096")
        )
        assert (await shell.ask(HANDSHAKE, 1, 1, mechanism="SCRAM-SHA-256")).error_code == ErrorCode.none
        assert (await shell.ask(AUTHENTICATE, 2, 2, auth_bytes=b"n,,n=carol,r=x")).error_code == ErrorCode.none
        assert shell.connection.session.ctx.relayed and not shell.connection._logged_in
        await shell.send(AUTHENTICATE, 2, 3, auth_bytes=b"c=biws,r=x,p=" + b"A" * 8192)
        with trio.fail_after(10):
            await shell.closed.wait()
        assert "4096" in shell.connection.close_reason
        assert shell.seen == [[HANDSHAKE, AUTHENTICATE]]  # the big frame never reached the broker


async def test_a_refused_relayed_login_is_answered_after_the_failed_authentication_delay(autojump_clock):
    from proxy.net.connection import ConnectionLimits

    limits = ConnectionLimits(max_frame_bytes=1 << 20, buffer_size=1 << 16, failed_authentication_delay=2)
    refusal = int(ErrorCode.sasl_authentication_failed)
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, limits, answer_authenticate=lambda cid: _authenticate_response(cid, error=refusal))
        assert (await shell.ask(HANDSHAKE, 1, 1, mechanism="PLAIN")).error_code == ErrorCode.none
        started = trio.current_time()
        answer = await shell.ask(AUTHENTICATE, 2, 2, auth_bytes=b"\0carol\0wrong")
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert trio.current_time() - started >= 2
        with trio.fail_after(10):
            await shell.closed.wait()
        assert shell.connection.close_reason == "failed authentication"


async def test_the_idle_clock_starts_at_the_login_not_at_its_deadline(autojump_clock):
    """connections.max.idle.ms counts from the last answer: a connection idle right after its login was
    closed only once the whole login deadline had passed too (60 s + 2 s with the test proxies' limits)."""
    from proxy.net.connection import ConnectionLimits

    limits = ConnectionLimits(max_frame_bytes=1 << 20, buffer_size=1 << 16, authentication_timeout=60, idle_timeout=2)
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, limits)
        assert (await shell.ask(HANDSHAKE, 1, 1, mechanism="PLAIN")).error_code == ErrorCode.none
        assert (await shell.ask(AUTHENTICATE, 2, 2, auth_bytes=b"\0carol\0carol-secret")).error_code == 0
        logged_in = trio.current_time()
        await shell.closed.wait()
        assert trio.current_time() - logged_in <= 3
        assert shell.connection.close_reason == "idle for 2 s (connections_max_idle_ms)"


async def test_a_client_that_reads_late_gets_every_answer_in_order():
    """Answers wait on a client that is not reading while it asks more, some of it answered by the broker and
    some by the proxy itself: once it reads, every answer comes, in the order asked, and nothing hangs."""
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, lockstep=True)
        versions = {"client_software_name": "t", "client_software_version": "1"}
        await shell.send(API_VERSIONS, 3, 1, **versions)  # forwarded
        await shell.send(API_VERSIONS, 3, 2, **versions)
        await shell.send(HANDSHAKE, 1, 3, mechanism="PLAIN")  # answered by the proxy
        await shell.send(API_VERSIONS, 3, 4, **versions)
        with trio.fail_after(10):
            for correlation_id in (1, 2, 3, 4):
                reply = await shell.replies.next_frame()
                assert reply is not None, shell.connection.close_reason
                assert int.from_bytes(reply[4:8], "big") == correlation_id
        assert shell.seen == [[API_VERSIONS] * 3]
        await shell.client.aclose()


async def _reading(shell: _Shell) -> None:
    """Once every task waits, the response pump waits on the broker's connection (nothing outstanding)."""
    with trio.fail_after(10):
        await trio.testing.wait_all_tasks_blocked()
    assert shell.connection._reading


@pytest.mark.parametrize("sockets", [True, False], ids=["sockets", "memory"])
async def test_with_nothing_outstanding_the_shell_waits_on_the_brokers_connection(sockets):
    """With nothing outstanding the response pump waits on the broker's connection itself (one wake-up per
    forwarded request's answer). A request the proxy answers itself is answered by the request pump then, and
    the relayed login's new broker connection replaces the one waited on: the same exchanges as before."""
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, sockets=sockets)
        versions = {"client_software_name": "t", "client_software_version": "1"}
        assert (await shell.ask(API_VERSIONS, 3, 1, **versions)).api_keys
        await _reading(shell)
        assert (await shell.ask(HANDSHAKE, 1, 2, mechanism="PLAIN")).error_code == ErrorCode.none  # local
        await _reading(shell)
        answer = await shell.ask(AUTHENTICATE, 2, 3, auth_bytes=b"\0carol\0carol-secret")  # a new upstream
        assert answer.error_code == ErrorCode.none
        assert shell.logins == [True, False]
        assert shell.seen == [[API_VERSIONS], [HANDSHAKE, AUTHENTICATE]]
        for n in range(4, 8):  # idle between each, woken by each answer
            await _reading(shell)
            assert await shell.ask(API_VERSIONS, 3, n, **versions)
        assert shell.seen[1][2:] == [API_VERSIONS] * 4
        await shell.client.aclose()
        with trio.fail_after(10):
            await shell.closed.wait()  # the client's end: closed with nothing outstanding
        assert shell.connection.close_reason == "client closed the connection"


async def test_pipelined_local_and_forwarded_requests_are_answered_in_order_while_idle():
    """A local request behind a forwarded one is not the request pump's to answer: the response pump answers
    it after the broker's answer; one at the head while the broker is waited on is answered at once."""
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, sockets=True)
        versions = {"client_software_name": "t", "client_software_version": "1"}
        assert (await shell.ask(API_VERSIONS, 3, 1, **versions)).api_keys
        await _reading(shell)
        await shell.send(API_VERSIONS, 3, 2, **versions)
        await shell.send(HANDSHAKE, 1, 3, mechanism="PLAIN")
        await shell.send(API_VERSIONS, 3, 4, **versions)
        with trio.fail_after(10):
            for correlation_id in (2, 3, 4):
                reply = await shell.replies.next_frame()
                assert reply is not None, shell.connection.close_reason
                assert int.from_bytes(reply[4:8], "big") == correlation_id
        assert shell.seen == [[API_VERSIONS] * 3]
        await shell.client.aclose()


async def test_a_broker_closing_an_idle_connection_closes_the_clients_at_once():
    """Nothing outstanding, the broker closes its end (its own connections.max.idle.ms, a restart): the client
    connection closes then, not at its next request, so the client re-bootstraps before it needs to."""
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, sockets=True)
        assert (await shell.ask(API_VERSIONS, 3, 1, client_software_name="t", client_software_version="1")).api_keys
        await _reading(shell)
        await shell.brokers[0].aclose()
        with trio.fail_after(10):
            await shell.closed.wait()
            assert await shell.replies.next_frame() is None  # closed, with nothing sent
        assert shell.connection.close_reason.endswith("upstream broker closed the connection"), (
            shell.connection.close_reason
        )


async def test_a_broker_speaking_unasked_closes_the_connection(caplog):
    """Bytes from the broker with nothing outstanding answer no request: the connection closes, with one line."""
    caplog.set_level(logging.DEBUG, logger="proxy")
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, sockets=True)
        assert (await shell.ask(API_VERSIONS, 3, 1, client_software_name="t", client_software_version="1")).api_keys
        await _reading(shell)
        await shell.brokers[0].send_all(_handshake_response(99))
        with trio.fail_after(10):
            await shell.closed.wait()
        assert "no request outstanding" in shell.connection.close_reason
        closing = [r for r in caplog.records if "closing" in r.getMessage()]
        assert len(closing) == 1 and closing[0].levelname == "INFO", closing


async def test_a_drained_connection_with_nothing_outstanding_closes():
    """The proxy draining stops a connection's reading: with nothing outstanding it closes at once, though its
    response pump waits on the broker."""
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, sockets=True)
        assert (await shell.ask(API_VERSIONS, 3, 1, client_software_name="t", client_software_version="1")).api_keys
        await _reading(shell)
        shell.connection.stop_reading()
        with trio.fail_after(10):
            await shell.closed.wait()
        assert shell.connection.close_reason == "proxy draining"


async def test_a_drain_lets_the_local_answer_being_sent_complete():
    """A drain takes no new request but lets outstanding ones complete (it stops the request pump only between
    requests): a local answer the request pump is sending (the response pump waits on the broker) reaches the
    client, here a refused login's after its connection.failed.authentication.delay.ms, then the connection
    closes."""
    from proxy.net.connection import ConnectionLimits

    limits = ConnectionLimits(max_frame_bytes=1 << 20, buffer_size=1 << 16, failed_authentication_delay=0.5)
    async with trio.open_nursery() as nursery:
        shell = _Shell(nursery, limits, sockets=True)
        assert (await shell.ask(API_VERSIONS, 3, 1, client_software_name="t", client_software_version="1")).api_keys
        await _reading(shell)
        assert (await shell.ask(HANDSHAKE, 1, 2, mechanism="PLAIN")).error_code == ErrorCode.none
        await _reading(shell)
        await shell.send(AUTHENTICATE, 2, 3, auth_bytes=b"nonsense")  # a malformed PLAIN login: refused here
        with trio.fail_after(10):
            await trio.testing.wait_all_tasks_blocked()
        # Read and dequeued: the request pump holds its answer for the delay.
        assert shell.connection.requests == 3 and not shell.connection.session.in_flight
        shell.connection.stop_reading()
        with trio.fail_after(10):
            reply = await shell.replies.next_frame()
            assert reply is not None, shell.connection.close_reason
            assert int.from_bytes(reply[4:8], "big") == 3
            await shell.closed.wait()
        assert shell.connection.close_reason == "failed authentication"
        assert shell.seen == [[API_VERSIONS]]
