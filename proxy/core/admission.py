"""Who may open a connection, and how often: sans-I/O, the caller passes the clock.

The broker's answers to the same questions (max.connections, max.connections.per.ip,
max.connection.creation.rate); how often a login may fail is proxy/auth/guard.py's. docs/security.md
has the threat model and the defaults.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ConnectionLimiter:
    """Open connections in total and per client address, and the rate at which new ones are accepted."""

    max_connections: int
    max_per_ip: int
    rate: float  # connections per second over all listeners
    open: Counter[str] = field(default_factory=Counter)
    total: int = 0
    _tokens: float = -1.0  # -1 with _refilled 0: not started (the bucket starts full)
    _refilled: float = 0.0

    def accept_delay(self, now: float) -> float:
        """Count a connection just accepted; the seconds to wait before accepting the next (0: at once).

        Like the broker's acceptor, the proxy stops accepting for a while rather than refusing once the
        creation rate is reached: a burst of `rate` connections, then one every 1/rate seconds. Tokens
        may go into debt, so accept loops of several listeners share one rate."""
        if self._refilled == 0.0 and self._tokens < 0:
            self._tokens, self._refilled = self.rate, now
        self._tokens = min(self.rate, self._tokens + (now - self._refilled) * self.rate) - 1
        self._refilled = now
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def admit(self, ip: str) -> str | None:
        """Count a new connection from `ip`; the reason it is refused, or None (then call `release`)."""
        if self.total >= self.max_connections:
            return f"{self.total} connections open (limits.max_connections)"
        if self.open[ip] >= self.max_per_ip:
            return f"{self.open[ip]} connections open from {ip} (limits.max_connections_per_ip)"
        self.open[ip] += 1
        self.total += 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        self.open[ip] -= 1
        if self.open[ip] <= 0:
            del self.open[ip]
