"""Connection admission and the failed-login budget, sans-I/O with a clock the test moves."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from proxy.auth.credentials import CredentialStore, make_entry
from proxy.auth.guard import FailureBudget, LoginGuard
from proxy.auth.sasl import SaslServer
from proxy.core.admission import ConnectionLimiter
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.headers import parse_request_header

from .test_sasl import _scram_login
from .wire import request_frame

HANDSHAKE, AUTHENTICATE = 17, 36
ENTRY = make_entry("alice-secret", 4096)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_connections_are_limited_per_address_and_in_total():
    limiter = ConnectionLimiter(max_connections=3, max_per_ip=2, rate=100)
    assert limiter.admit("10.0.0.1") is None
    assert limiter.admit("10.0.0.1") is None
    assert "max_connections_per_ip" in (limiter.admit("10.0.0.1") or "")
    assert limiter.admit("10.0.0.2") is None
    assert "max_connections" in (limiter.admit("10.0.0.3") or "")
    limiter.release("10.0.0.1")
    assert limiter.admit("10.0.0.3") is None
    for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        limiter.release(ip)
    assert limiter.total == 0 and not limiter.open


def test_creation_rate_delays_accepting_beyond_the_burst():
    limiter = ConnectionLimiter(max_connections=100, max_per_ip=100, rate=10)
    delays = [limiter.accept_delay(5.0) for _ in range(10)]
    assert delays == [0.0] * 10  # a burst of `rate` connections is accepted at once
    assert limiter.accept_delay(5.0) == pytest.approx(0.1)  # then one every 1/rate seconds
    assert limiter.accept_delay(5.0) == pytest.approx(0.2)  # another listener's loop queues behind it
    assert limiter.accept_delay(5.5) == 0.0


def test_failure_budget_slides_and_stays_bounded():
    budget = FailureBudget(limit=3, window=60, max_keys=4)
    for t in (0, 1, 2):
        assert not budget.exhausted("a", t)
        budget.record("a", t)
    assert budget.exhausted("a", 3)
    assert not budget.exhausted("a", 60.5)  # the first failure left the window
    for i in range(10):
        budget.record(f"k{i}", 100 + i)
    assert len(budget._failures) <= 4


def _ask(server: SaslServer, api_key: int, **fields) -> tuple[object, bool, bool, float]:
    """(response, close, ran a password check, seconds the check waited first)."""
    frame = request_frame(
        api_key,
        2 if api_key == AUTHENTICATE else 1,
        1,
        request_type(api_key, 2 if api_key == AUTHENTICATE else 1)(**fields),
    )
    version = 2 if api_key == AUTHENTICATE else 1
    header = parse_request_header(frame, api_info(api_key).request_header_version(version))
    reply = server.on_sasl_request(api_key, version, memoryview(frame), header)
    checked = reply.check is not None and reply.check.cpu
    wait = 0.0 if reply.check is None else reply.check.wait
    if reply.check is not None:
        reply = reply.check.finish(reply.check.run())
    body, _ = codec.decode(response_type(api_key, version), reply.body)
    return body, reply.close, checked, wait


class Proxy:
    """What one proxy shares between its connections: the credentials (and their cache) and the guard."""

    def __init__(self, limit: int):
        self.store = CredentialStore.from_mapping({"alice": ENTRY})
        self.guard = LoginGuard.create(limit=limit, window=60)


def _plain(proxy: Proxy, clock: Clock, address: str, user: str, password: str) -> tuple[object, float, bool]:
    """(response, seconds the check waits, whether a password check ran)."""
    server = SaslServer(proxy.store, ["PLAIN"], guard=proxy.guard, address=address, clock=clock)
    _ask(server, HANDSHAKE, mechanism="PLAIN")
    body, _, checked, wait = _ask(server, AUTHENTICATE, auth_bytes=f"\0{user}\0{password}".encode())
    return body, wait, checked


def test_a_spent_address_and_user_is_paced_and_the_next_user_from_that_address_is_not():
    clock, proxy = Clock(), Proxy(3)
    for _ in range(3):
        body, wait, checked = _plain(proxy, clock, "10.0.0.9", "alice", "guess")
        assert body.error_code == ErrorCode.sasl_authentication_failed and checked and wait == 0
    # Every budget of 10.0.0.9 and alice is spent: alice's checks from there are paced, one per 60/3 s.
    body, wait, checked = _plain(proxy, clock, "10.0.0.9", "alice", "alice-secret")
    assert body.error_code == ErrorCode.none and checked and wait == 0  # the first paced slot is free
    body, wait, checked = _plain(proxy, clock, "10.0.0.9", "alice", "guess")  # the next is 20 s ahead:
    assert not checked and "too many failed authentications" in body.error_message  # beyond the horizon
    clock.now += 16  # 4 s before the next slot: queued, not refused
    body, wait, checked = _plain(proxy, clock, "10.0.0.9", "alice", "guess again")
    assert body.error_code == ErrorCode.sasl_authentication_failed and checked and wait == pytest.approx(4)
    # bob from the spent address: his right password is checked at once (and so is a wrong one)
    proxy.store = CredentialStore.from_mapping({"alice": ENTRY, "bob": ENTRY})
    body, wait, checked = _plain(proxy, clock, "10.0.0.9", "bob", "alice-secret")
    assert body.error_code == ErrorCode.none and checked and wait == 0
    clock.now += 61
    assert proxy.guard.spent("10.0.0.9", "alice", clock()) is None


def test_guessing_a_users_password_does_not_lock_out_a_client_that_knows_it():
    clock, proxy = Clock(), Proxy(3)
    body, _, checked = _plain(proxy, clock, "10.0.0.1", "alice", "alice-secret")
    assert body.error_code == ErrorCode.none and checked
    for i in range(3):  # guesses for alice from many addresses spend alice's user budget
        _plain(proxy, clock, f"10.9.0.{i}", "alice", f"guess{i}")
    body, wait, checked = _plain(proxy, clock, "10.9.1.1", "alice", "another-guess")
    assert checked and wait == 0  # paced: the first slot
    body, wait, checked = _plain(proxy, clock, "10.9.1.2", "alice", "again")
    assert body.error_code == ErrorCode.sasl_authentication_failed and not checked  # 20 s ahead: no derivation
    body, _, checked = _plain(proxy, clock, "10.0.0.1", "alice", "alice-secret")
    assert body.error_code == ErrorCode.none and not checked  # verified before: no derivation, no wait


def test_scram_from_a_spent_address_is_still_checked_and_its_failures_are_answered_slowly():
    clock, proxy = Clock(), Proxy(2)

    def scram(password: str) -> tuple[object, SaslServer]:
        server = SaslServer(proxy.store, ["SCRAM-SHA-512"], guard=proxy.guard, address="10.1.1.1", clock=clock)
        body, _ = _scram_login(server, "SCRAM-SHA-512", "alice", password)
        return body, server

    for _ in range(2):
        body, _ = scram("wrong")
        assert body.error_code == ErrorCode.sasl_authentication_failed
    assert proxy.guard.by_address.exhausted("10.1.1.1", clock())
    body, server = scram("alice-secret")  # a correct proof is never locked out
    assert body.error_code == ErrorCode.none and server.complete
    frame_server = SaslServer(proxy.store, ["SCRAM-SHA-512"], guard=proxy.guard, address="10.1.1.1", clock=clock)
    _ask(frame_server, HANDSHAKE, mechanism="SCRAM-SHA-512")
    version = 2
    # Another user from the spent address: not paced, but its failure is answered slowly.
    frame = request_frame(AUTHENTICATE, version, 3, request_type(AUTHENTICATE, version)(auth_bytes=b"n,,n=bob,r=x"))
    header = parse_request_header(frame, api_info(AUTHENTICATE).request_header_version(version))
    first = frame_server.on_sasl_request(AUTHENTICATE, version, memoryview(frame), header)
    frame = request_frame(
        AUTHENTICATE, version, 4, request_type(AUTHENTICATE, version)(auth_bytes=b"c=biws,r=x,p=AAAA")
    )
    reply = frame_server.on_sasl_request(AUTHENTICATE, version, memoryview(frame), header)
    assert first.check is None and first.slow is False  # bob is not paced
    assert reply.close and reply.slow  # the failure is answered SLOW_DOWN times later
    # alice from there is paced: the first paced slot was the correct proof's, the next is 30 s ahead
    body, _ = scram("wrong")
    assert "too many failed authentications" in body.error_message
