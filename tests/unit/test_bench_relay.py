"""benchmarks/relay.py, bench_peers.py's floor of one hop: it must carry every byte both ways and pass an end of
stream on, or the bench would credit the proxy with a gap the relay never had (a relay that loses bytes ends a
consumer's run early, one that holds an end open never ends it)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

RELAY = Path(__file__).resolve().parents[2] / "benchmarks" / "relay.py"


def echo_server() -> tuple[socket.socket, threading.Thread]:
    """One connection's bytes sent back as they come; its end of stream answered with ours."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while chunk := conn.recv(1 << 16):
                conn.sendall(chunk)
            conn.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def test_the_relay_carries_every_byte_both_ways_and_the_end_of_stream():
    server, thread = echo_server()
    target = server.getsockname()[1]
    relay = subprocess.Popen(
        [sys.executable, str(RELAY), "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{target}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = relay.stdout.readline()  # type: ignore[union-attr]
        port = int(re.fullmatch(r"relay ready: 127\.0\.0\.1:(\d+) -> 127\.0\.0\.1:\d+\n", ready).group(1))  # type: ignore[union-attr]
        payload = os.urandom(3 << 20)  # many pipes' worth, both ways at once
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            writer = threading.Thread(target=lambda: (client.sendall(payload), client.shutdown(socket.SHUT_WR)))
            writer.start()
            back = bytearray()
            while chunk := client.recv(1 << 16):  # ends only when the echo's end of stream came through
                back += chunk
            writer.join(30)
        assert bytes(back) == payload
        thread.join(30)
        assert not thread.is_alive()
    finally:
        relay.terminate()
        relay.wait(30)
        server.close()
