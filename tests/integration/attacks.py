"""Hostile peers for the availability tests, run as processes of their own (`python -m
tests.integration.attacks NAME ...`) so that their CPU and GIL never count against the tenant whose
latency the test measures. Each prints one JSON line with what it saw."""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from proxy.protocol.apis import api_info

from .rawclient import RawClient

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


def flood_api_versions(bootstrap: str, source: str, count: int) -> dict[str, Any]:
    """Pipeline `count` ApiVersions requests of a version too new for anyone (answered by the proxy
    itself), reading the answers as they come."""
    client = RawClient(bootstrap, timeout=60, source=source)
    one = RawClient.encode(API_VERSIONS, 127, 0, b"", client_id="flood")
    batch = one * 1000
    answered = errors = 0
    sock = client.sock
    sock.setblocking(False)
    sent = 0
    buf = bytearray()
    pending = memoryview(b"")
    deadline = time.monotonic() + 300  # generous: a loaded machine answers slower, never fewer
    while answered < count and time.monotonic() < deadline:
        if not pending and sent < count:
            pending = memoryview(batch)
            sent += 1000
        if pending:
            try:
                n = sock.send(pending)
                pending = pending[n:]
            except BlockingIOError:
                pass
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            chunk = None
        if chunk == b"":
            break
        if chunk:
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                size = int.from_bytes(buf[:4], "big")
                error = int.from_bytes(buf[8:10], "big", signed=True)
                errors += error == 35  # UNSUPPORTED_VERSION, as a broker answers
                answered += 1
                del buf[: 4 + size]
        elif not pending:
            time.sleep(0.001)
    client.close()
    return {"answered": answered, "unsupported_version": errors}


def _login(client: RawClient, user: str, password: str) -> tuple[int, str | None]:
    client.request(SASL_HANDSHAKE, 1, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    token = f"\0{user}\0{password}".encode()
    _, response = client.request(SASL_AUTHENTICATE, 2, 2, SaslAuthenticateRequest(auth_bytes=token))
    return int(response.error_code), response.error_message


def guess_logins(bootstrap: str, source: str, user: str, seconds: float) -> dict[str, Any]:
    """Fail PLAIN logins for `user` as fast as the proxy answers, for `seconds`."""
    results: dict[str, Any] = {"attempts": 0, "codes": {}, "messages": {}, "fastest": None, "errors": {}}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            with RawClient(bootstrap, timeout=10, source=source) as client:
                code, message = _login(client, user, f"guess-{results['attempts']}")
        except (ConnectionError, OSError) as exc:  # e.g. refused at accept: counted, then tried again
            results["errors"][type(exc).__name__] = results["errors"].get(type(exc).__name__, 0) + 1
            continue
        took = time.monotonic() - started
        results["attempts"] += 1
        results["codes"][str(code)] = results["codes"].get(str(code), 0) + 1
        results["messages"][message or ""] = results["messages"].get(message or "", 0) + 1
        results["fastest"] = took if results["fastest"] is None else min(results["fastest"], took)
    return results


def hold_connections(bootstrap: str, source: str, count: int, seconds: float) -> dict[str, Any]:
    """Open `count` connections that send nothing; report how many the proxy closed within `seconds`."""
    host, _, port = bootstrap.rpartition(":")
    socks = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
        socks.append(sock)
    print(json.dumps({"opened": len(socks)}), flush=True)
    closed = 0
    end = time.monotonic() + seconds
    for sock in socks:
        sock.settimeout(max(end - time.monotonic(), 0.01))
        try:
            closed += sock.recv(1) == b""
        except ConnectionResetError:
            closed += 1
        except TimeoutError:
            pass
        sock.close()
    return {"closed": closed}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("attack", choices=["flood", "guess", "hold"])
    parser.add_argument("bootstrap")
    parser.add_argument("--source", default="127.0.0.2")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--user", default="alice")
    args = parser.parse_args(argv)
    # Load the protocol tables (seconds of CPU) before the attack, then wait for the test's go: the
    # attack itself, not this process's start-up, is what runs beside the measured tenant.
    for key in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
        api_info(key)
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    if args.attack == "flood":
        result = flood_api_versions(args.bootstrap, args.source, args.count)
    elif args.attack == "guess":
        result = guess_logins(args.bootstrap, args.source, args.user, args.seconds)
    else:
        result = hold_connections(args.bootstrap, args.source, args.count, args.seconds)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
