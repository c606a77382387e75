"""Free ports chosen at run time, outside Linux's ephemeral range (32768-60999), so that two suites can
share a machine and an outgoing connection never holds a port a test is about to bind.

The range also stays below the demo's Kafka (29092...) so that `make run` and a suite can run side by side.
Ports are chosen at random so that two suites choosing at the same moment rarely pick the same ones. The workers
of one suite (pytest-xdist) each choose in a slice of their own: a block one worker has chosen but not bound yet
would look free to another.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Callable, Mapping

from vcproxy_tools.kafka.cluster import plan_nodes


def _slice(low: int, high: int, env: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """This pytest-xdist worker's share of [low, high): gw0 the first of PYTEST_XDIST_WORKER_COUNT slices."""
    worker, count = env.get("PYTEST_XDIST_WORKER", ""), int(env.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count <= 1:
        return low, high
    index, width = int(worker[2:]) % count, (high - low) // count
    return low + index * width, low + (index + 1) * width


# Below the ephemeral range and the demo's Kafka ports; this worker's slice of it.
LOW, HIGH = _slice(20000, 29000)
BROKER_SLOTS = 8  # a proxy on `base` also binds base+1+node_id for node ids up to this
_given: set[int] = set()  # ports handed out in this session: a block chosen but not bound yet is not free


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_base(span: int, offsets: Callable[[int], list[int]], attempts: int = 200) -> int:
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(LOW, HIGH - span)
        ports = offsets(base)
        if _given.isdisjoint(ports) and all(_free(port) for port in ports):
            _given.update(ports)
            return base
    raise RuntimeError(f"no free ports for a block of {span} between {LOW} and {HIGH}")


def free_port_block(size: int = 2 + BROKER_SLOTS) -> int:
    """The first port of `size` consecutive free ports (a proxy's bootstrap port plus its broker ports)."""
    return _free_base(size, lambda base: list(range(base, base + size)))


def free_port() -> int:
    """One free port (a metrics endpoint, a collector, a port nothing listens on)."""
    return free_port_block(1)


def free_kafka_base_port(brokers: int, sasl: bool = False) -> int:
    """A base port for vcproxy_tools.kafka's launcher whose every broker port (client, controller, SASL) is free."""

    def ports(base: int) -> list[int]:
        return [port for node in plan_nodes(brokers, None, base, sasl) for port, _ in node.ports()]

    return _free_base(max(ports(LOW)) - LOW + 1, ports)
