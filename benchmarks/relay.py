"""A cut-through TCP byte relay: what one hop costs when it reads nothing and rewrites nothing.

Each client connection gets a connection to TARGET and two threads, one a direction, each moving bytes socket to pipe
to socket with splice(2): never copied through this process, sent on as they arrive. It is the floor under any proxy's
cost on the same machine. bench_peers.py's `relay` variant runs it in front of a broker listener that advertises the
relay's own address, so that clients stay on it after their first Metadata.

    .venv/bin/python benchmarks/relay.py --listen 127.0.0.1:24096 --target 127.0.0.1:24095
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading

CHUNK = 1 << 20  # at most this much a splice; the pipe (64 KiB by default) bounds it further


def pump(src: socket.socket, dst: socket.socket) -> None:
    """src's bytes to dst until src ends; then dst is told no more will come."""
    read, write = os.pipe()
    try:
        while True:
            n = os.splice(src.fileno(), write, CHUNK)
            if n == 0:
                break
            while n:
                n -= os.splice(read, dst.fileno(), n)
    except OSError:
        pass  # either side gone: the other direction ends the pair
    finally:
        os.close(read)
        os.close(write)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def serve(client: socket.socket, target: tuple[str, int]) -> None:
    with client, socket.create_connection(target) as upstream:
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        back.start()
        pump(client, upstream)
        back.join()


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=address, required=True, help="HOST:PORT the relay serves (port 0: any free one)")
    ap.add_argument("--target", type=address, required=True, help="HOST:PORT each connection is relayed to")
    args = ap.parse_args()
    with socket.create_server(args.listen, reuse_port=False) as server:
        host, port = server.getsockname()[:2]  # port 0: one the kernel chose
        print(f"relay ready: {host}:{port} -> {args.target[0]}:{args.target[1]}", flush=True)
        while True:
            client, _ = server.accept()
            threading.Thread(target=serve, args=(client, args.target), daemon=True).start()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
    sys.exit(0)
