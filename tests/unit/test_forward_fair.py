"""The forwarder's one thread shared fairly (native/src/forward.rs, `run`): a connection that always has bytes has a
bounded turn and the others theirs between, an answer Python is slow to rewrite holds its own connection alone, and
TLS records that carry no data cost bounded work."""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import functools
import os
import ssl
import struct
import subprocess
import termios

import pytest
import trio
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from kio.schema.produce.v9 import request as produce9
from kio.static.primitive import i16

from proxy.protocol import native

from .test_forwarder import LIMITS, Pair, _Connection, _hinted_answer, produce, produced, unread_none
from .test_native_tls import CA, connect, context, files  # noqa: F401 (a fixture)
from .wire import request_frame

if native.module() is None:
    if os.environ.get("CI") == "true":  # CI builds it: missing there is a failure, not a skip
        raise ImportError("vcproxy_native is not built")
    pytest.skip("vcproxy_native is not built (make .venv/.installed-test builds it)", allow_module_level=True)


async def test_a_connection_that_always_has_bytes_yields_after_its_turn_and_the_others_go_on():
    """The flood has far more small acks=0 Produce requests already read than a turn moves (`initial`), a broker that
    takes them as fast as it can, and room to queue all of them when it cannot: with no budget, its turn would last
    until the last was sent or queued, and the other connection would wait for all of them."""
    flood, victim = Pair(), Pair()
    count = 400_000
    frames = produce(1, acks=0) * count
    # The flood's broker: another process reading everything, so that sending never waits.
    os.set_blocking(flood.broker.fileno(), True)  # cat's reads wait (the descriptor's flags are shared)
    sink = subprocess.Popen(["cat"], stdin=flood.broker.fileno(), stdout=subprocess.DEVNULL)
    flood.broker.close()
    phases: list[object] = []
    outcomes = {}
    try:
        await victim.client.send(produce(7))
        await victim.broker.send(produced(7))

        async def run(name: str, pair: Pair, **kwargs: object) -> None:
            outcomes[name] = await pair.run(**kwargs)

        async with trio.open_nursery() as nursery:
            flooding = dataclasses.replace(LIMITS, buffer_bytes=len(frames) * 2)
            nursery.start_soon(
                functools.partial(run, "flood", flood, limits=flooding, initial=frames, started=phases.append)
            )
            with trio.fail_after(30):
                while not phases:
                    await trio.sleep(0.001)
            nursery.start_soon(run, "victim", victim)
            with trio.fail_after(30):
                assert await victim.read(victim.client, len(produced(7))) == produced(7)
            phases[0].detach()  # type: ignore[attr-defined]
            victim.client.close()
    finally:
        sink.kill()
        sink.wait()
    assert (outcomes["victim"].kind, outcomes["victim"].responses) == ("client-closed", 1)
    flooded = outcomes["flood"]
    assert flooded.kind == "detached"
    assert 0 < flooded.requests < count  # the victim was answered while the flood still had most of its requests


def _hinted_request(correlation: int) -> bytes:
    body = produce9.ProduceRequest(
        transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=1), topic_data=()
    )
    return request_frame(0, 10, correlation, body)  # the same body in v10, whose answer may carry leader hints


async def test_an_answer_python_is_slow_to_rewrite_holds_its_own_connection_alone():
    """Python's rewrite waits here until another connection has been served: were the forwarder's thread waiting for
    it, neither would ever end. The slow connection's next answer waits behind the one being rewritten."""
    slow, other = Pair(), Pair()
    asked, release = trio.Event(), trio.Event()

    async def hook(api_key: int, version: int, frame: bytes, note: object) -> bytes:
        asked.set()
        await release.wait()
        return b"rewritten"

    await slow.client.send(_hinted_request(4) + produce(5))
    await slow.broker.send(_hinted_answer(4) + produced(5))
    outcomes = {}

    async def run(name: str, pair: Pair, **kwargs: object) -> None:
        outcomes[name] = await pair.run(**kwargs)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(run, "slow", slow, hook=hook))
        with trio.fail_after(30):
            await asked.wait()
        await other.client.send(produce(7))
        await other.broker.send(produced(7))
        nursery.start_soon(run, "other", other)
        with trio.fail_after(30):
            assert await other.read(other.client, len(produced(7))) == produced(7)
        await unread_none(slow.proxy_broker)  # produced(5) has been read from the broker, and waits
        assert _unread(slow.client) == 0
        release.set()
        with trio.fail_after(30):
            assert await slow.read(slow.client, len(b"rewritten") + len(produced(5))) == b"rewritten" + produced(5)
        slow.client.close()
        other.client.close()
    assert (outcomes["slow"].kind, outcomes["slow"].responses) == ("client-closed", 2)
    assert (outcomes["other"].kind, outcomes["other"].responses) == ("client-closed", 1)


async def test_a_drain_while_python_rewrites_an_answer_hands_back_after_that_answer_is_written():
    """The rewrite has run (a fetch session learnt, a mute charged): the session must not run it again, so the
    connection goes back once the rewritten answer is written, not with it outstanding."""
    pair = Pair()
    asked, release = trio.Event(), trio.Event()
    phases: list[object] = []

    async def hook(*_: object) -> bytes:
        asked.set()
        await release.wait()
        return b"rewritten"

    await pair.client.send(_hinted_request(4))
    await pair.broker.send(_hinted_answer(4))
    outcomes = {}

    async def run() -> None:
        outcomes["held"] = await pair.run(hook=hook, started=phases.append)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        with trio.fail_after(30):
            await asked.wait()
        phases[0].hold()  # type: ignore[attr-defined]
        release.set()
        with trio.fail_after(30):
            assert await pair.read(pair.client, len(b"rewritten")) == b"rewritten"
    held = outcomes["held"]
    assert (held.kind, held.responses, held.in_flight, held.broker_leftover) == ("yield", 1, (), b"")


def _unread(sock: trio.socket.SocketType) -> int:
    """The bytes a socket holds unread now."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]


# -- TLS records with no data ---------------------------------------------------------------------------------


class _Records:
    """The client's side of a TLS 1.3 record layer, from its traffic secret (the key log's): records made here in place
    of OpenSSL's, so that they may be ones OpenSSL never sends (empty application data, a KeyUpdate after each)."""

    SUITES = {  # the cipher suite: AEAD, key length, hash
        "TLS_AES_128_GCM_SHA256": (AESGCM, 16, hashes.SHA256()),
        "TLS_AES_256_GCM_SHA384": (AESGCM, 32, hashes.SHA384()),
        "TLS_CHACHA20_POLY1305_SHA256": (ChaCha20Poly1305, 32, hashes.SHA256()),
    }

    def __init__(self, suite: str, secret: bytes):
        self.aead, self.key_length, self.hash = self.SUITES[suite]
        self._keys(secret)

    def _label(self, secret: bytes, label: str, length: int) -> bytes:
        full = b"tls13 " + label.encode()
        info = length.to_bytes(2, "big") + bytes([len(full)]) + full + b"\x00"
        return HKDFExpand(self.hash, length, info).derive(secret)

    def _keys(self, secret: bytes) -> None:
        self.secret, self.seq = secret, 0
        self.cipher = self.aead(self._label(secret, "key", self.key_length))
        self.iv = self._label(secret, "iv", 12)

    def seal(self, content: bytes, kind: int) -> bytes:
        inner = content + bytes([kind])
        header = b"\x17\x03\x03" + (len(inner) + 16).to_bytes(2, "big")
        nonce = bytes(a ^ b for a, b in zip(self.iv, self.seq.to_bytes(12, "big"), strict=True))
        self.seq += 1
        return header + self.cipher.encrypt(nonce, inner, header)

    def data(self, plain: bytes) -> bytes:
        return self.seal(plain, 0x17)

    def key_update(self) -> bytes:
        record = self.seal(b"\x18\x00\x00\x01\x00", 0x16)  # KeyUpdate, update_not_requested
        self._keys(self._label(self.secret, "traffic upd", self.hash.digest_size))
        return record


async def test_tls_records_with_no_data_end_that_connection_on_the_forwarder(nursery, files, tmp_path):  # noqa: F811
    """rustls refuses many empty records in a row, and many KeyUpdates in a row, but not the two in turn: without a
    bound of its own, the forwarder would decrypt them for as long as they come, for nothing."""
    log = tmp_path / "keys.log"
    client_ctx = ssl.create_default_context()
    CA.configure_trust(client_ctx)
    client_ctx.minimum_version = client_ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    client_ctx.keylog_filename = str(log)
    stream, client, _ = await connect(context(files), client_ctx)
    secret = next(
        line.split()[2] for line in log.read_text().splitlines() if line.startswith("CLIENT_TRAFFIC_SECRET_0")
    )
    records = _Records(client.cipher()[0], bytes.fromhex(secret))  # type: ignore[index]
    peer = _Connection(nursery, streams=(stream, client))
    raw = client.transport_stream

    async def exchange(request: bytes) -> bytes:
        await raw.send_all(records.data(request))
        frame = await peer.answers.next_frame()
        assert frame is not None
        return bytes(frame)

    assert await exchange(produce(1)) == produced(1)  # the Python path
    assert await exchange(produce(2)) == produced(2)  # the forwarder
    assert peer.connection._phase is not None
    await raw.send_all(b"".join(records.data(b"") + records.key_update() for _ in range(40)))  # rustls takes these
    assert await exchange(produce(3)) == produced(3)  # and so does the forwarder, a few
    with trio.fail_after(30):
        try:
            while not peer.done.is_set():  # empty records and KeyUpdates in turn, a few KiB at a time
                await raw.send_all(b"".join(records.data(b"") + records.key_update() for _ in range(100)))
        except trio.BrokenResourceError:
            pass  # closed by the proxy while sending
        await peer.done.wait()
    assert "records with no data" in peer.connection.close_reason, peer.connection.close_reason
    assert peer.connection.forwarded == 2
