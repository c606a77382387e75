"""TLS in the compiled parts (native/src/tls.rs through proxy/net/native_tls.py): the handshake with OpenSSL's client
(Python's ssl), SNI and client certificates, refusals, and a TLS connection served by the forwarder and handed back,
its bytes through the one session."""

from __future__ import annotations

import os
import random
import ssl

import pytest
import trio
import trustme

from proxy.auth.tls import NativeTlsClientContext, NativeTlsContext, distinguished_name
from proxy.net.native_tls import HandshakeRefused, NativeTlsStream, client_handshake, handshake
from proxy.protocol import native

from .test_forwarder import (
    _Connection,
    _metadata_answer,
    _metadata_request,
    _rewritten,
    fetch,
    fetched,
    metadata_or_produce,
    produce,
    produced,
)

if native.module() is None:
    if os.environ.get("CI") == "true":  # CI builds it: missing there is a failure, not a skip
        raise ImportError("vcproxy_native is not built")
    pytest.skip("vcproxy_native is not built (make .venv/.installed-test builds it)", allow_module_level=True)

MODULE = native.module()
CA = trustme.CA()
SERVER = CA.issue_cert("proxy.example", "broker-1.proxy.example")
ALICE = CA.issue_cert("alice", common_name="alice", organization_unit_name="eng", organization_name="Acme")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("tls")
    paths = {"server": d / "server.pem", "ca": d / "ca.pem"}
    SERVER.private_key_and_cert_chain_pem.write_to_path(str(paths["server"]))
    CA.cert_pem.write_to_path(str(paths["ca"]))
    return {k: str(v) for k, v in paths.items()}


def context(files: dict[str, str], client_auth: str = "none", route=None) -> NativeTlsContext:
    ca = files["ca"] if client_auth != "none" else None
    return NativeTlsContext.load(MODULE, files["server"], None, ca, client_auth, route)


def client_context(certificate: bool = False, version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    CA.configure_trust(ctx)
    if certificate:
        ALICE.configure_cert(ctx)
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    return ctx


async def connect(
    server: NativeTlsContext, client: ssl.SSLContext, name: str = "proxy.example"
) -> tuple[NativeTlsStream, trio.SSLStream, str | None]:
    """The two ends of a TLS connection on a socket pair: the proxy's (native) and the client's (OpenSSL)."""
    a, b = trio.socket.socketpair()
    client_stream = trio.SSLStream(trio.SocketStream(b), client, server_hostname=name)
    out: dict[str, object] = {}

    async def serve() -> None:
        out["stream"], out["name"] = await handshake(trio.SocketStream(a), server)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            await client_stream.do_handshake()
    stream = out["stream"]
    assert isinstance(stream, NativeTlsStream)
    return stream, client_stream, out["name"]  # type: ignore[return-value]


async def refused(
    server: NativeTlsContext, client: ssl.SSLContext, name: str = "proxy.example"
) -> tuple[BaseException, BaseException]:
    """A handshake that fails: (the proxy's exception, the client's), each side left to end on its own."""
    a, b = trio.socket.socketpair()
    client_stream = trio.SSLStream(trio.SocketStream(b), client, server_hostname=name)
    out: dict[str, BaseException] = {}

    async def serve() -> None:
        proxy_end = trio.SocketStream(a)
        try:
            await handshake(proxy_end, server)
        except HandshakeRefused as exc:
            out["proxy"] = exc
        await proxy_end.aclose()  # as `secure` closes it

    async def dial() -> None:
        try:
            await client_stream.do_handshake()
            await client_stream.receive_some()  # TLS 1.3: a refused certificate is told after the client's Finished
        except trio.BrokenResourceError as exc:
            out["client"] = exc

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            nursery.start_soon(dial)
    return out["proxy"], out["client"]


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["TLS 1.2", "TLS 1.3"])
async def test_bytes_pass_both_ways_and_the_server_name_is_read(files, version):
    stream, client, name = await connect(context(files), client_context(version=version), "broker-1.proxy.example")
    assert name == "broker-1.proxy.example"
    assert stream.session.version == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
    assert stream.session.peer_certificate is None
    big = random.Random(1).randbytes(300_000)  # many records each way, more than the socket pair holds
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, big)
        got = b""
        while len(got) < len(big):
            got += await stream.receive_some(50_000)
    assert got == big
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream.send_pieces, [big[:7], memoryview(big)[7:1000], bytearray(big[1000:])])
        got = b""
        while len(got) < len(big):
            got += await client.receive_some()
    assert got == big
    await client.aclose()  # close_notify, then the end of the stream
    assert await stream.receive_some() == b""


async def test_a_client_certificate_is_the_principal_s_and_one_is_required_when_asked(files):
    stream, _client, _ = await connect(context(files, "required"), client_context(certificate=True))
    assert stream.session.peer_certificate == ssl.PEM_cert_to_DER_cert(ALICE.cert_chain_pems[0].bytes().decode())
    assert distinguished_name(stream.session.peer_certificate) == "CN=alice,OU=eng,O=Acme"
    stream, _client, _ = await connect(context(files, "requested"), client_context())
    assert stream.session.peer_certificate is None  # requested: none given is a connection without one
    proxy, _client = await refused(context(files, "required"), client_context())
    assert "no certificates" in str(proxy)
    # A certificate that claims alice's subject, signed by a CA the listener does not trust: no principal from it,
    # whether certificates are required or only requested (as OpenSSL's CERT_OPTIONAL, a bad one fails the handshake).
    forger = trustme.CA()
    forged = forger.issue_cert("alice", common_name="alice", organization_unit_name="eng", organization_name="Acme")
    hostile = client_context()
    forged.configure_cert(hostile)
    for client_auth in ("required", "requested"):
        proxy, _client = await refused(context(files, client_auth), hostile)
        assert "invalid peer certificate" in str(proxy), proxy


async def test_a_server_name_no_broker_answers_to_is_refused_with_unrecognized_name(files):
    def route(name: str | None) -> None:
        if name != "proxy.example":
            raise LookupError(f"no broker answers to {name}")

    await connect(context(files, route=route), client_context())  # the bootstrap's name
    proxy, client = await refused(context(files, route=route), client_context(), "broker-9.proxy.example")
    assert "no broker answers to broker-9" in str(proxy)
    assert "UNRECOGNIZED_NAME" in str(client.__cause__)  # the client's handshake got the alert


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x00\x00\x00\x10" + bytes(16), id="a Kafka frame"),
        pytest.param(b"\x16\x03\x01\x00\x05hello", id="a handshake record that is no ClientHello"),
        pytest.param(b"\x16\x03\x01\xff\xff" + bytes(100), id="a record longer than TLS allows"),
    ],
)
async def test_bytes_that_are_no_client_hello_fail_that_handshake_alone(files, data):
    a, b = trio.socket.socketpair()
    await b.send(data)
    with trio.fail_after(5), pytest.raises(HandshakeRefused):
        await handshake(trio.SocketStream(a), context(files))


async def test_a_closed_socket_during_the_handshake_fails_it(files):
    a, b = trio.socket.socketpair()
    b.close()
    with trio.fail_after(5), pytest.raises(HandshakeRefused, match="closed"):
        await handshake(trio.SocketStream(a), context(files))


async def test_a_tls_connection_goes_to_the_forwarder_and_back_with_every_answer_in_order(nursery, files):
    """As the plaintext connection of test_forwarder: the forwarder takes the connection and hands it back between
    requests of any mix, reading and writing through the same session the Python path uses."""
    stream, client, _ = await connect(context(files), client_context())
    peer = _Connection(nursery, streams=(stream, client))
    connection, exchange = peer.connection, peer.exchange
    assert await exchange(produce(1)) == [(1, produced(1))]  # the Python path opens the broker connection
    assert await exchange(produce(2)) == [(2, produced(2))]  # then the forwarder takes it
    assert connection._phase is not None
    got = await exchange(_metadata_request(3))  # not plain: back to the pumps, rewritten
    assert got[0][0] == 3 and _rewritten(got[0][1])
    correlation = await peer.random_batches(4243, 3, 60, 6, metadata_or_produce)
    await peer.close()
    assert connection.requests == correlation and connection.forwarded >= 30
    assert connection.close_reason == "client closed the connection"


async def test_large_answers_on_the_forwarder_go_through_the_session_whole(nursery, files):
    """Answers larger than the socket holds (so the forwarder meets a full socket and waits to write), from the
    forwarder and from the Python path in turn."""
    sizes = {c: 600_000 + 1_000 * c for c in range(1, 9)}
    stream, client, _ = await connect(context(files), client_context())

    def answer(key: int, _version: int, correlation: int) -> bytes:
        return fetched(correlation, sizes[correlation]) if key == 1 else _metadata_answer(correlation)

    peer = _Connection(nursery, answer=answer, streams=(stream, client))
    for c in (1, 2):
        assert await peer.exchange(fetch(c)) == [(c, fetched(c, sizes[c]))]
    assert peer.connection._phase is not None
    got = await peer.exchange(fetch(3), fetch(4), _metadata_request(5), fetch(6))
    assert [c for c, _ in got] == [3, 4, 5, 6]
    assert [f for c, f in got if c != 5] == [fetched(c, sizes[c]) for c in (3, 4, 6)]
    await peer.close()
    assert peer.connection.forwarded >= 3  # 2, 3 and 4 (6 follows the hand-back in the same batch)


async def test_a_record_that_does_not_decrypt_ends_that_connection_on_the_forwarder(nursery, files):
    """Bytes from the client are hostile until proven otherwise, whichever side reads them: a forged record while the
    forwarder has the connection closes it, with the session's reason."""
    stream, client, _ = await connect(context(files), client_context())
    peer = _Connection(nursery, streams=(stream, client))
    assert await peer.exchange(produce(1)) == [(1, produced(1))]
    assert await peer.exchange(produce(2)) == [(2, produced(2))]
    assert peer.connection._phase is not None  # the forwarder reads the next bytes
    await client.transport_stream.send_all(b"\x17\x03\x03\x00\x20" + bytes(32))  # application data, not sealed by it
    with trio.fail_after(10):
        await peer.done.wait()
    assert peer.connection.close_reason.endswith("TLS: cannot decrypt peer's message"), peer.connection.close_reason
    assert peer.connection.forwarded == 1


def test_auto_is_openssl_where_the_compiled_tls_is_missing_and_native_is_then_refused(files, monkeypatch, caplog):
    from proxy.config import ListenerTlsConfig, ProxyConfig
    from proxy.net.handshake import listener_context

    def config(engine: str) -> ProxyConfig:
        tls = {"certfile": files["server"], "engine": engine}
        return ProxyConfig.model_validate({"listeners": {"security_protocol": "SSL", "tls": tls}, "upstream": UPSTREAM})

    assert isinstance(listener_context(config("auto"), None), NativeTlsContext)
    assert isinstance(listener_context(config("openssl"), None), ssl.SSLContext)
    monkeypatch.setattr(native, "module", lambda: None)
    with caplog.at_level("WARNING"):
        assert isinstance(listener_context(config("auto"), None), ssl.SSLContext)
    assert "TLS listeners on OpenSSL" in caplog.text  # said once, with the reason
    with pytest.raises(ValueError, match="compiled TLS is not available"):
        ListenerTlsConfig.model_validate({"certfile": files["server"], "engine": "native"})


def test_the_upstream_engine_is_chosen_as_the_listeners_is(files, monkeypatch):
    from proxy.config import UpstreamConfig, UpstreamTlsConfig
    from proxy.net.upstream import UpstreamSecurity

    def security(engine: str) -> object:
        upstream = {"bootstrap_servers": ["b:9093"], "security_protocol": "SSL"}
        tls = {"cafile": files["ca"], "engine": engine}
        return UpstreamSecurity.from_config(UpstreamConfig.model_validate({**upstream, "tls": tls})).ssl_context

    assert isinstance(security("auto"), NativeTlsClientContext)
    assert isinstance(security("openssl"), ssl.SSLContext)
    monkeypatch.setattr(native, "module", lambda: None)
    assert isinstance(security("auto"), ssl.SSLContext)
    with pytest.raises(ValueError, match="compiled TLS is not available"):
        UpstreamTlsConfig.model_validate({"cafile": files["ca"], "engine": "native"})


UPSTREAM = {"bootstrap_servers": ["127.0.0.1:9092"]}


BROKER = CA.issue_cert("broker-1.internal", "127.0.0.1")


def broker_server_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    BROKER.configure_cert(ctx)
    return ctx


def client_tls(files: dict[str, str], check_hostname: bool = True, ca: str | None = None) -> NativeTlsClientContext:
    return NativeTlsClientContext.load(MODULE, ca or files["ca"], None, None, check_hostname)


async def dial_broker(context: NativeTlsClientContext, host: str) -> tuple[NativeTlsStream, trio.SSLStream]:
    """The proxy's TLS connection to a broker (OpenSSL's server, Python's ssl) on a socket pair: both ends."""
    a, b = trio.socket.socketpair()
    broker = trio.SSLStream(trio.SocketStream(b), broker_server_context(), server_side=True)
    out: dict[str, NativeTlsStream] = {}

    async def dial() -> None:
        out["proxy"] = await client_handshake(trio.SocketStream(a), context, host)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dial)
            await broker.do_handshake()
    return out["proxy"], broker


async def test_the_proxys_own_tls_to_a_broker_checks_its_chain_and_its_name(files):
    proxy, broker = await dial_broker(client_tls(files), "broker-1.internal")
    big = random.Random(2).randbytes(200_000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(proxy.send_all, big)
        got = b""
        while len(got) < len(big):
            got += await broker.receive_some()
    assert got == big
    await dial_broker(client_tls(files), "127.0.0.1")  # an IP address: its SAN
    with pytest.raises(ExceptionGroup) as refused:
        await dial_broker(client_tls(files), "broker-2.internal")  # a name the certificate does not have
    assert refused.group_contains(HandshakeRefused, match="only valid for")
    await dial_broker(client_tls(files, check_hostname=False), "broker-2.internal")  # the chain alone
    other = trustme.CA()
    other.cert_pem.write_to_path(files["ca"] + ".other")
    with pytest.raises(ExceptionGroup) as refused:  # the name is not enough: the chain is checked either way
        await dial_broker(client_tls(files, check_hostname=False, ca=files["ca"] + ".other"), "broker-1.internal")
    assert refused.group_contains(HandshakeRefused, match="invalid peer certificate")


class _TlsBrokerConnection(_Connection):
    """`_Connection` whose broker connection is TLS too: the proxy's compiled session, the broker's OpenSSL."""

    tls_context: NativeTlsClientContext

    async def _connect(self, _login: bool) -> NativeTlsStream:  # type: ignore[override]
        proxy, broker = await dial_broker(self.tls_context, "broker-1.internal")
        self.nursery.start_soon(self._broker, broker)
        return proxy


async def test_tls_on_both_sides_goes_to_the_forwarder_and_back(nursery, files):
    stream, client, _ = await connect(context(files), client_context())
    _TlsBrokerConnection.tls_context = client_tls(files)
    sizes = {c: 300_000 + c for c in range(1, 200)}

    def answer(key: int, version: int, correlation: int) -> bytes:
        if key == 1:
            return fetched(correlation, sizes[correlation])
        return _metadata_answer(correlation) if key == 3 else produced(correlation)

    peer = _TlsBrokerConnection(nursery, answer=answer, streams=(stream, client))
    connection, exchange = peer.connection, peer.exchange
    assert await exchange(produce(1)) == [(1, produced(1))]
    assert await exchange(produce(2)) == [(2, produced(2))]
    assert connection._phase is not None

    def pick(draw: float, correlation: int) -> bytes:
        return fetch(correlation) if draw < 0.15 else metadata_or_produce((draw - 0.15) / 0.85, correlation)

    correlation = await peer.random_batches(4244, 2, 30, 5, pick)
    await peer.close()
    assert connection.requests == correlation and connection.forwarded >= 20
    assert connection.close_reason == "client closed the connection"
