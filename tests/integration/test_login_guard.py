"""Failed logins slow the guesser, not the neighbours (issue 56): a client looping on a deleted credential from
127.0.0.1 for 60 s, while other users log in from the same address every second, through a real proxy in front
of the session's Kafka. The guesser is raw SASL loops on four connections at once (a crash-looping client
reconnects as fast as it is answered) plus a librdkafka producer with the same stale credential."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from scramp import ScramClient

from vcproxy_tools.process import ProxyProcess

from .ports import free_port_block
from .rawclient import RawClient
from .tenants import sasl_tenants_config
from .test_availability import warm_up

NEIGHBOURS = {f"member{i}": f"member{i}-secret" for i in range(12)}
STALE = "retired"  # a user whose credential was deleted: to the proxy, a user it does not know
SECONDS = 60.0
WINDOW = 60.0  # limits.failed_authentication_window_seconds (the default)
BUDGET = 60  # limits.max_failed_authentications and the per-user, per-pair ones (the defaults)
HANDSHAKE, AUTHENTICATE = 17, 36


@pytest.fixture(params=[2], ids=["2-workers"])
def proxy(kafka_cluster, tmp_path, request) -> Iterator[ProxyProcess]:
    """Two workers: the budgets and the pacing are the instance's, told between its workers (one process is the
    simpler case of the same rules, held by tests/unit/test_login_guard.py; a minute each, the suite runs one)."""
    config = sasl_tenants_config(kafka_cluster, free_port_block(), NEIGHBOURS, ("PLAIN", "SCRAM-SHA-512"))
    process = ProxyProcess(config, tmp_path, name="logins", extra_args=["--workers", str(request.param)])
    process.workers = request.param  # type: ignore[attr-defined]
    process.start(timeout=120)
    try:
        warm_up(process.bootstrap)
        yield process
    finally:
        process.stop()


def _plain(client: RawClient, user: str, password: str) -> tuple[int, str | None]:
    _, handshake = client.request(HANDSHAKE, 1, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert int(handshake.error_code) == 0
    token = f"\0{user}\0{password}".encode()
    _, response = client.request(AUTHENTICATE, 2, 2, SaslAuthenticateRequest(auth_bytes=token))
    return int(response.error_code), response.error_message


def _scram(client: RawClient, user: str, password: str) -> tuple[int, str | None]:
    mechanism = "SCRAM-SHA-512"
    _, handshake = client.request(HANDSHAKE, 1, 1, SaslHandshakeRequest(mechanism=mechanism))
    assert int(handshake.error_code) == 0
    scram = ScramClient([mechanism], user, password)
    first = SaslAuthenticateRequest(auth_bytes=scram.get_client_first().encode())
    _, response = client.request(AUTHENTICATE, 2, 2, first)
    if int(response.error_code):
        return int(response.error_code), response.error_message
    scram.set_server_first(bytes(response.auth_bytes).decode())
    final = SaslAuthenticateRequest(auth_bytes=scram.get_client_final().encode())
    _, response = client.request(AUTHENTICATE, 2, 3, final)
    if int(response.error_code) == 0:
        scram.set_server_final(bytes(response.auth_bytes).decode())  # the proxy holds the right keys
    return int(response.error_code), response.error_message


def _guess(bootstrap: str, stop: threading.Event, seen: dict[str, Any], lock: threading.Lock) -> None:
    """The stale credential, again and again, as fast as the proxy answers."""
    while not stop.is_set():
        try:
            with RawClient(bootstrap, timeout=30) as client:
                code, message = _plain(client, STALE, "the-old-password")
        except (ConnectionError, OSError) as exc:
            with lock:
                seen["errors"].append(repr(exc))
            continue
        with lock:
            seen["attempts"] += 1
            seen["codes"].add(code)
            seen["messages"].add(message)


def _librdkafka_guesser(bootstrap: str, stop: threading.Event, seen: dict[str, Any]) -> None:
    def on_error(error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            seen["librdkafka_auth_errors"] += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": STALE,
            "sasl.password": "the-old-password",
            "error_cb": on_error,
        }
    )
    while not stop.is_set():
        producer.poll(0.2)


def _log_of(path: Path, user: str) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if f"failed for user {user!r}" in line]


def test_a_client_looping_on_a_deleted_credential_slows_itself_not_the_neighbours(proxy):
    bootstrap = proxy.bootstrap
    stop, lock = threading.Event(), threading.Lock()
    seen: dict[str, Any] = {"attempts": 0, "codes": set(), "messages": set(), "errors": [], "librdkafka_auth_errors": 0}
    guessers = [threading.Thread(target=_guess, args=(bootstrap, stop, seen, lock), daemon=True) for _ in range(4)]
    guessers.append(threading.Thread(target=_librdkafka_guesser, args=(bootstrap, stop, seen), daemon=True))
    started = time.monotonic()
    for thread in guessers:
        thread.start()
    neighbours: list[tuple[str, str, int, str | None, float]] = []
    names = list(NEIGHBOURS)
    try:
        second = 0
        while time.monotonic() - started < SECONDS:
            # One login a second from the same address: PLAIN (a key derivation each, for a user not logged
            # in before; the proxy remembers a verified password) and SCRAM in turn.
            user = names[(second // 2) % len(names)]
            login, mechanism = (_plain, "PLAIN") if second % 2 == 0 else (_scram, "SCRAM")
            began = time.monotonic()
            with RawClient(bootstrap, timeout=30) as client:
                code, message = login(client, user, NEIGHBOURS[user])
            neighbours.append((user, mechanism, code, message, time.monotonic() - began))
            second += 1
            time.sleep(max(0.0, started + second - time.monotonic()))
    finally:
        stop.set()
        for thread in guessers:
            thread.join(timeout=60)
    elapsed = time.monotonic() - started

    # Every neighbour's login succeeded, none waited long, while the guesser was being slowed.
    failed = [n for n in neighbours if n[2] != 0]
    assert not failed, failed
    assert len(neighbours) >= SECONDS - 2
    slowest = max(n[4] for n in neighbours)
    assert slowest < 3.0, sorted(neighbours, key=lambda n: -n[4])[:5]

    # The guesser only ever got SASL_AUTHENTICATION_FAILED, librdkafka saw it too.
    assert seen["codes"] == {58}, seen
    assert seen["attempts"] > BUDGET, seen  # it did loop: beyond every budget
    assert seen["librdkafka_auth_errors"] >= 1, seen

    # Its password checks stay bounded: the budget, then one per window/budget seconds (its pair and user
    # budgets pace it), from the proxy's (rate-limited) log lines, which count failures and checks.
    lines = _log_of(proxy.log_path, STALE)
    told = [re.search(r"\[(\d+) failures? and (\d+) password checks?", line) for line in lines]
    assert all(told), lines[:3]
    failures = sum(int(m.group(1)) for m in told if m)
    checks = sum(int(m.group(2)) for m in told if m)
    assert checks <= BUDGET + elapsed * BUDGET / WINDOW + 10, (checks, failures, elapsed)
    assert failures >= seen["attempts"] // 2, (failures, seen["attempts"])  # the lines do tell the attempts
    # ... and the log is one line per address and user per interval (10 s) and worker, not one per attempt.
    assert len(lines) <= proxy.workers * (elapsed / 10 + 2), len(lines)
    assert "Traceback" not in proxy.log_path.read_text()
    print(
        f"guesser: {seen['attempts']} raw attempts, {failures} failures and {checks} password checks logged in "
        f"{len(lines)} lines over {elapsed:.0f} s; neighbours: {len(neighbours)} logins, slowest {slowest:.3f} s"
    )
