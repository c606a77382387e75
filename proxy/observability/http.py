"""A tiny HTTP/1.1 server on Trio for orchestrators and Prometheus.

* ``GET /metrics``: the Prometheus text format (404 when metrics are off);
* ``GET /healthz``: 200 while the process serves (liveness);
* ``GET /readyz``: 200 when the proxy can serve clients, else 503 with the reason in the body:
  the first upstream discovery succeeded and broker listeners are bound (``server.ready``), the
  last successful discovery is recent, the virtual-cluster state topic is replayed (tenancy), and
  the proxy is not draining.

One request per connection (``Connection: close``); requests larger than 8 KiB or slower than
10 s are dropped. The handlers run on the Trio thread, next to the counters they read.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD = 8192
REQUEST_TIMEOUT = 10.0
TEXT = "text/plain; charset=utf-8"
Readiness = Callable[[], tuple[bool, str] | Awaitable[tuple[bool, str]]]


def server_readiness(server: Any) -> tuple[bool, str]:
    """Why a ProxyServer is (not) ready: (ready, reason)."""
    if getattr(server, "draining", False):
        return False, "draining: not accepting connections"
    tenancy = getattr(server, "tenancy", None)
    if server.config.tenancy.enabled and (tenancy is None or not tenancy.ready.is_set()):
        why = getattr(tenancy, "start_error", None)
        return False, f"virtual-cluster state topic {server.config.tenancy.state_topic} not replayed yet" + (
            f": {why}" if why else ""
        )
    if tenancy is not None and getattr(tenancy, "problem", None) is not None:
        return False, f"virtual-cluster state unusable: {tenancy.problem}"
    error = getattr(server, "discovery_error", None)
    if not server.ready.is_set():
        return False, f"upstream not reachable yet: {error}" if error else "upstream discovery in progress"
    discovered_at = getattr(server, "discovered_at", None)
    upstream = server.config.upstream
    stale_after = max(2 * upstream.metadata_refresh_seconds + upstream.connect_timeout_seconds, 5.0)
    if discovered_at is not None:
        age = trio.current_time() - discovered_at
        if age > stale_after:
            return False, f"upstream unreachable: last successful discovery {age:.0f} s ago ({error or 'no answer'})"
    return True, "ready"


class HttpServer:
    def __init__(self, host: str, port: int, readiness: Readiness, metrics: Any = None):
        self.host = host
        self.port = port
        self.readiness = readiness
        self.metrics = metrics  # proxy.observability.metrics.Metrics, or None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        log.info("metrics and health on http://%s:%d (/metrics, /healthz, /readyz)", self.host, self.port)
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT):
                head = await _read_head(stream)
                if head is None:
                    return
                status, content_type, body = await self.route(head)
                method = head.split(b" ", 1)[0]
                await stream.send_all(_response(status, content_type, b"" if method == b"HEAD" else body, len(body)))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def route(self, head: bytes) -> tuple[int, str, bytes]:
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400, TEXT, b"bad request\n"
        method, target, _ = parts
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, TEXT, b"method not allowed\n"
        if path == "/healthz":
            return 200, TEXT, b"ok\n"
        if path == "/readyz":
            ready, reason = await _settled(self.readiness())
            return (200 if ready else 503), TEXT, reason.encode() + b"\n"
        if path == "/metrics" and self.metrics is not None:
            from prometheus_client import CONTENT_TYPE_LATEST

            return 200, CONTENT_TYPE_LATEST, await _settled(self.metrics.render())
        return 404, TEXT, b"not found\n"


async def _settled(value: Any) -> Any:
    """A single proxy answers at once; a parent of workers (proxy/net/workers.py) asks them first."""
    return await value if inspect.isawaitable(value) else value


async def _read_head(stream: trio.SocketStream) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > MAX_REQUEST_HEAD:
            await stream.send_all(_response(431, TEXT, b"request header too large\n", 26))
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        data += chunk
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 431: "Too Large"}
_REASONS[503] = "Service Unavailable"


def _response(status: int, content_type: str, body: bytes, length: int) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body
