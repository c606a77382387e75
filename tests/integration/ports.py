"""Free ports chosen at run time, outside Linux's ephemeral range (32768-60999), so that two suites can
share a machine and an outgoing connection never holds a port a test is about to bind."""

from __future__ import annotations

import random
import socket

LOW, HIGH = 20000, 32000  # below the ephemeral range
BROKER_SLOTS = 8  # a proxy on `base` also binds base+1+node_id for node ids up to this


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(size: int = 2 + BROKER_SLOTS, attempts: int = 200) -> int:
    """The first port of `size` consecutive free ports (a proxy's bootstrap port plus its broker ports)."""
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(LOW, HIGH - size)
        if all(_free(base + i) for i in range(size)):
            return base
    raise RuntimeError(f"no block of {size} free ports between {LOW} and {HIGH}")
