"""The proxy's SASL server, sans-I/O: real exchanges driven by scramp's client and kio-encoded frames."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from scramp import ScramClient

from proxy.auth.credentials import CredentialStore, make_entry
from proxy.auth.sasl import Preauthenticated, SaslServer
from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession, RequestDecision, SaslReply
from proxy.net.upstream_auth import SaslClient, SaslLogin, UpstreamAuthError
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.headers import parse_request_header, peek_request, response_body_offset

from .wire import request_frame

HANDSHAKE, AUTHENTICATE = 17, 36
STORE = CredentialStore.from_mapping(
    {"alice": make_entry("alice-secret", 4096), "bob": make_entry("bob-secret", 4096, ["SCRAM-SHA-256"])}
)


def _ask(server: Any, api_key: int, version: int, **fields: Any) -> tuple[Any, bool]:
    """Send one SASL request to the authenticator; returns (decoded response body, close)."""
    frame = request_frame(api_key, version, 7, request_type(api_key, version)(**fields))
    header = parse_request_header(frame, api_info(api_key).request_header_version(version))
    reply = _done(server.on_sasl_request(api_key, version, memoryview(frame), header))
    body, end = codec.decode(response_type(api_key, version), reply.body)
    assert end == len(reply.body)
    return body, reply.close


def _done(reply: SaslReply) -> SaslReply:
    """What the shell does with a password check: run it (in a worker thread there), then finish."""
    return reply.check.finish(reply.check.run()) if reply.check is not None else reply


def _decided(decision: RequestDecision) -> RequestDecision:
    assert decision.action is not Action.CHECK or (decision.check is not None and decision.resume is not None)
    return decision.resume(decision.check.run()) if decision.action is Action.CHECK else decision


def _handshake(server: SaslServer, mechanism: str, version: int = 1) -> tuple[Any, bool]:
    return _ask(server, HANDSHAKE, version, mechanism=mechanism)


def _authenticate(server: SaslServer, token: bytes, version: int = 2) -> tuple[Any, bool]:
    return _ask(server, AUTHENTICATE, version, auth_bytes=token)


def _scram_login(server: SaslServer, mechanism: str, user: str, password: str, version: int = 2) -> tuple[Any, bool]:
    body, close = _handshake(server, mechanism)
    assert body.error_code == ErrorCode.none and not close
    assert list(body.mechanisms) == list(server.mechanisms)
    client = ScramClient([mechanism], user, password)
    first, close = _authenticate(server, client.get_client_first().encode(), version)
    if first.error_code != ErrorCode.none:
        return first, close
    assert not close and not server.complete
    client.set_server_first(first.auth_bytes.decode())
    final, close = _authenticate(server, client.get_client_final().encode(), version)
    if final.error_code == ErrorCode.none:
        client.set_server_final(final.auth_bytes.decode())  # the proxy proved it holds the server key
    return final, close


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_scram_exchange_succeeds(mechanism, version):
    server = SaslServer(STORE, name="t")
    final, close = _scram_login(server, mechanism, "alice", "alice-secret", version)
    assert final.error_code == ErrorCode.none and not close
    assert server.complete and server.principal == "User:alice" and server.mechanism == mechanism
    if version >= 1:
        assert final.session_lifetime.total_seconds() == 0  # no re-authentication


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_fails_with_58_and_closes(mechanism, caplog):
    server = SaslServer(STORE, name="t")
    final, close = _scram_login(server, mechanism, "alice", "not-her-password")
    assert final.error_code == ErrorCode.sasl_authentication_failed and close
    assert final.error_message == (
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    )
    assert not server.complete and server.principal is None
    assert "not-her-password" not in caplog.text and "alice" in caplog.text


def test_scram_unknown_user_looks_like_a_wrong_password(caplog):
    server = SaslServer(STORE, name="t")
    final, close = _scram_login(server, "SCRAM-SHA-512", "mallory", "guess")
    assert final.error_code == ErrorCode.sasl_authentication_failed and close
    assert "invalid credentials" in final.error_message
    assert "unknown user" in caplog.text
    # bob only has a SCRAM-SHA-256 entry: SHA-512 does not know him (Kafka keeps one credential per mechanism)
    final, _ = _scram_login(SaslServer(STORE), "SCRAM-SHA-512", "bob", "bob-secret")
    assert final.error_code == ErrorCode.sasl_authentication_failed
    final, _ = _scram_login(SaslServer(STORE), "SCRAM-SHA-256", "bob", "bob-secret")
    assert final.error_code == ErrorCode.none


@pytest.mark.parametrize(("user", "password"), [("alice", "alice-secret"), ("bob", "bob-secret")])
def test_plain_succeeds_against_the_scram_entry(user, password):
    server = SaslServer(STORE, name="t")
    body, close = _handshake(server, "PLAIN")
    assert body.error_code == ErrorCode.none and not close
    reply, close = _authenticate(server, f"\0{user}\0{password}".encode())
    assert reply.error_code == ErrorCode.none and not close and reply.auth_bytes == b""
    assert server.complete and server.principal == f"User:{user}"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0alice\0wrong", "invalid credentials"),
        (b"\0mallory\0alice-secret", "invalid credentials"),
        (b"bob\0alice\0alice-secret", "authorization id that is different"),
        (b"\0alice\0", "password not specified"),
        (b"\0\0x", "username not specified"),
        (b"alice-secret", "expected 3 tokens"),
    ],
)
def test_plain_failures(token, message, caplog):
    server = SaslServer(STORE, name="t")
    _handshake(server, "PLAIN")
    reply, close = _authenticate(server, token)
    assert reply.error_code == ErrorCode.sasl_authentication_failed and close
    assert message in reply.error_message
    assert not server.complete
    assert "alice-secret" not in caplog.text and "wrong" not in caplog.text


@pytest.mark.parametrize("mechanism", ["GSSAPI", "OAUTHBEARER", "SCRAM-SHA-256"])
def test_unknown_or_disabled_mechanism_lists_the_enabled_ones_and_closes(mechanism):
    server = SaslServer(STORE, ["SCRAM-SHA-512", "PLAIN"], name="t")
    body, close = _handshake(server, mechanism)
    assert body.error_code == ErrorCode.unsupported_sasl_mechanism and close
    assert list(body.mechanisms) == ["SCRAM-SHA-512", "PLAIN"]
    assert not server.complete


def test_handshake_v0_is_refused_clearly():
    server = SaslServer(STORE, name="t")
    body, close = _handshake(server, "PLAIN", version=0)
    assert body.error_code == ErrorCode.unsupported_version and close
    assert list(body.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_authenticate_before_handshake_is_an_illegal_state():
    server = SaslServer(STORE, name="t")
    reply, close = _authenticate(server, b"\0alice\0alice-secret")
    assert reply.error_code == ErrorCode.illegal_sasl_state and close
    assert not server.complete


def test_sasl_after_login_is_refused_without_closing():
    server = SaslServer(STORE, name="t")
    _handshake(server, "PLAIN")
    _authenticate(server, b"\0alice\0alice-secret")
    body, close = _handshake(server, "PLAIN")
    assert body.error_code == ErrorCode.illegal_sasl_state and not close
    reply, close = _authenticate(server, b"\0alice\0alice-secret")
    assert reply.error_code == ErrorCode.illegal_sasl_state and not close
    assert server.principal == "User:alice"


def test_second_handshake_mid_exchange_closes():
    server = SaslServer(STORE, name="t")
    _handshake(server, "SCRAM-SHA-256")
    body, close = _handshake(server, "SCRAM-SHA-256")
    assert body.error_code == ErrorCode.illegal_sasl_state and close


def test_delegation_token_logins_are_refused():
    server = SaslServer(STORE, name="t")
    _handshake(server, "SCRAM-SHA-256")
    reply, close = _authenticate(server, b"n,,n=alice,r=abcdefabcdef,tokenauth=true")
    assert reply.error_code == ErrorCode.sasl_authentication_failed and close


def test_preauthenticated_answers_sasl_with_illegal_state():
    auth = Preauthenticated("User:CN=alice")
    assert auth.complete and auth.principal == "User:CN=alice"
    body, close = _ask(auth, HANDSHAKE, 1, mechanism="PLAIN")
    assert body.error_code == ErrorCode.illegal_sasl_state and not close


# -- through the session: only ApiVersions and SASL before login ---------------------------------


def _session() -> tuple[ProxySession, SaslServer]:
    server = SaslServer(STORE, name="t")
    return ProxySession(ListenerLayout("127.0.0.1", 9192, 9193), server), server


def _metadata_frame() -> bytes:
    cls = request_type(3, 12)
    return request_frame(
        3, 12, 9, cls(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    )


def test_session_closes_on_a_request_before_login():
    session, _ = _session()
    decision = session.on_request(memoryview(_metadata_frame()))
    assert decision.action is Action.CLOSE and "before authentication" in decision.reason


def test_session_answers_sasl_locally_then_forwards_after_login():
    session, server = _session()
    for api_key, version, body in (
        (HANDSHAKE, 1, request_type(HANDSHAKE, 1)(mechanism="PLAIN")),
        (AUTHENTICATE, 2, request_type(AUTHENTICATE, 2)(auth_bytes=b"\0alice\0alice-secret")),
    ):
        decision = _decided(session.on_request(memoryview(request_frame(api_key, version, 5, body))))
        assert decision.action is Action.LOCAL and not decision.pending.close_after
        pending = session.next_local_reply()
        assert pending is not None
        offset = response_body_offset(pending.reply, api_info(api_key).response_header_version(version))
        response, _ = codec.decode(response_type(api_key, version), pending.reply, offset)
        assert response.error_code == ErrorCode.none
    assert server.complete and session.principal == "User:alice"
    assert session.on_request(memoryview(_metadata_frame())).action is Action.FORWARD


def test_session_closes_after_a_failed_login():
    session, _ = _session()
    session.on_request(memoryview(request_frame(HANDSHAKE, 1, 1, request_type(HANDSHAKE, 1)(mechanism="PLAIN"))))
    session.next_local_reply()
    frame = request_frame(AUTHENTICATE, 2, 2, request_type(AUTHENTICATE, 2)(auth_bytes=b"\0alice\0nope"))
    decision = session.on_request(memoryview(frame))
    assert decision.action is Action.CHECK  # the key derivation runs off the event loop
    decision = _decided(decision)
    assert decision.action is Action.LOCAL and decision.pending.close_after


# -- the proxy's upstream client against the proxy's own server ----------------------------------


def _pair(client: SaslClient, server: SaslServer) -> None:
    """Run the upstream client's frames through the server until the client is done or fails."""
    request = client.start()
    while request is not None:
        api_key, version, _ = peek_request(request)
        header = parse_request_header(request, api_info(api_key).request_header_version(version))
        reply = _done(server.on_sasl_request(header.api_key, header.api_version, memoryview(request), header))
        info = api_info(header.api_key)
        frame = codec.response_frame(
            header.correlation_id, info.response_header_version(header.api_version), reply.body
        )
        request = client.receive(frame)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_upstream_client_logs_in(mechanism):
    client, server = SaslClient(SaslLogin(mechanism, "alice", "alice-secret")), SaslServer(STORE)
    _pair(client, server)
    assert client.done and server.principal == "User:alice"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_upstream_client_reports_refusals(mechanism):
    with pytest.raises(UpstreamAuthError, match="SASL_AUTHENTICATION_FAILED: Authentication failed"):
        _pair(SaslClient(SaslLogin(mechanism, "alice", "wrong")), SaslServer(STORE))
    with pytest.raises(UpstreamAuthError, match="offers SCRAM-SHA-256"):
        _pair(SaslClient(SaslLogin(mechanism, "alice", "alice-secret")), SaslServer(STORE, ["SCRAM-SHA-256"]))
    assert "wrong" not in repr(SaslLogin(mechanism, "alice", "wrong"))


def test_librdkafka_settings_mirror_the_upstream_config():
    from proxy.config import parse_config
    from proxy.net.upstream_auth import librdkafka_settings

    upstream = {
        "bootstrap_servers": ["k:9094"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "vcproxy",
        "sasl_password": "vcproxy-secret",
        "tls": {"check_hostname": False},
    }
    settings = librdkafka_settings(parse_config({"upstream": upstream}).upstream)
    assert settings == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "vcproxy",
        "sasl.password": "vcproxy-secret",
        "ssl.endpoint.identification.algorithm": "none",
    }
    assert librdkafka_settings(parse_config({"upstream": {"bootstrap_servers": ["k:1"]}}).upstream) == {
        "security.protocol": "PLAINTEXT"
    }


def test_api_versions_before_login_comes_from_the_brokers_last_answer():
    """No broker connection for a stranger: once a broker's ApiVersions answer is known, a client that
    has not logged in is answered from it (the same bytes a forwarded request would get)."""
    from proxy.core.apiversions import UpstreamVersions, with_table

    from .wire import response_frame

    now = [0.0]
    cache = UpstreamVersions(ttl=30, clock=lambda: now[0])
    request = request_type(18, 3)(client_software_name="t", client_software_version="1")
    broker = with_table(
        response_type(18, 3)(error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0)),
        {3: (0, 12), 17: (0, 1), 18: (0, 4), 36: (0, 2)},
    )
    first = ProxySession(ListenerLayout("127.0.0.1", 9192, 9193), SaslServer(STORE), upstream_versions=cache)
    decision = first.on_request(memoryview(request_frame(18, 3, 1, request)))
    assert decision.action is Action.FORWARD  # nothing known yet: the broker answers
    forwarded = first.on_response(memoryview(bytearray(response_frame(18, 3, 1, broker))))
    second = ProxySession(ListenerLayout("127.0.0.1", 9192, 9193), SaslServer(STORE), upstream_versions=cache)
    decision = second.on_request(memoryview(request_frame(18, 3, 1, request)))
    assert decision.action is Action.LOCAL
    assert second.next_local_reply().reply == b"".join(map(bytes, forwarded.pieces))
    now[0] = 31  # expired: the next stranger's request refreshes it from the broker
    third = ProxySession(ListenerLayout("127.0.0.1", 9192, 9193), SaslServer(STORE), upstream_versions=cache)
    assert third.on_request(memoryview(request_frame(18, 3, 1, request))).action is Action.FORWARD


def test_a_login_with_a_huge_or_forging_name_makes_one_short_log_line(caplog):
    """Issue 23 (bounded logs): a 30,000-character or multi-line user name is quoted and cut, never a log
    line as long as the name nor a second, forged line."""
    for name in ("m" * 30_000, "mallory\n2026-11-27 INFO forged: authenticated User:admin"):
        caplog.clear()
        server = SaslServer(STORE, name="t")
        _handshake(server, "PLAIN")
        reply, close = _authenticate(server, f"\0{name}\0guess".encode())
        assert reply.error_code == ErrorCode.sasl_authentication_failed and close
        [line] = [r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()]
        assert len(line) < 600 and "\n" not in line


def test_principals_are_logged_as_ever_unless_they_could_forge_or_flood_a_line():
    from proxy.quoting import bare

    assert bare("User:alice") == "User:alice"
    assert bare("User:a\nb") == repr("User:a\nb")
    assert bare("User:" + "x" * 300).endswith("…(105 more)")
