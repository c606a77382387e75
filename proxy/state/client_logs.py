"""The levels of the proxy's own librdkafka clients' log lines, decided once, as an operator reads them.

confluent-kafka hands each librdkafka line to the `logger` of a client's config as
``logger.log(level, "%s [%s] %s", fac, client_name, text)`` with the syslog level mapped to Python's
(ERR -> ERROR, WARNING -> WARNING, NOTICE/INFO -> INFO, DEBUG -> DEBUG). librdkafka logs every broker
connection failure at ERR, including the ones it retries by itself a few ms later; the proxy's log is
read by operators (and by the suite, which fails a module on any ERROR line), so an ERROR there must
mean something an operator has to act on. The rule of the table below:

- one broker connection failing (refused, reset, timed out, unresolvable, a login cut off by the
  transport): WARNING. librdkafka reconnects with backoff, and the state clients use any broker.
- the whole cluster unreachable ("N/N brokers are down"): ERROR. librdkafka reports it once, when the
  last broker connection fails, and as an error event, not a log line: confluent-kafka hands it to an
  `error_cb` or, for a consumer, to `poll()` (the state follower logs it there); it never reaches this
  logger unless an `error_cb` logs it here.
- the proxy's own configuration refused (a failed login with its credentials, a mechanism the broker
  does not offer, a TLS certificate that does not verify): ERROR.
- a producer-id request retried while the transaction coordinator loads: DEBUG (every fresh cluster).
- anything not in the table keeps librdkafka's own level (a fatal producer error: CRITICAL).

The decision producer (docs/security.md#the-write-protocol) has one more rule, first: being fenced, and
retrying while another replica's transaction ends, is how replicas take turns deciding, not a failure:
DEBUG, whatever level librdkafka gives it (ERROR, and CRITICAL for the fenced producer's fatal error).
A commit answered with another error is a WARNING: the service decides again against the log.

A rule only ever lowers a level (a connection close librdkafka logs at INFO stays INFO).

The table matches the text, whatever the facility (an error event's text is the FAIL line's text).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class LevelRule:
    name: str
    pattern: re.Pattern[str]
    level: int


def _rule(name: str, pattern: str, level: int) -> LevelRule:
    return LevelRule(name, re.compile(pattern), level)


# A local error of a request cut off with its connection, never an answer from the broker.
_LOCAL_TRANSPORT = r"Local: (?:Broker transport failure|Timed out|Timed out in queue|Broker handle destroyed)"

# First match wins: the specific SASL transport rules come before the rules that keep logins at ERROR.
LEVELS: tuple[LevelRule, ...] = (
    _rule(
        "producer id retried while the coordinator loads",
        r"Failed to acquire (?:idempotence|transactional) PID from broker \S+: "
        r"Broker: (?:Coordinator load in progress|Coordinator not available|Not coordinator): retrying",
        logging.DEBUG,
    ),
    _rule(
        # The login's request was lost with its connection (e.g. a coordinator's connection replaced
        # in the middle of the handshake); librdkafka logs in again on the next connection.
        "login cut off by the transport",
        rf"SASL authentication error: SaslAuthenticateRequest failed: {_LOCAL_TRANSPORT}"
        rf"|SASL \S+ mechanism handshake failed: {_LOCAL_TRANSPORT}",
        logging.WARNING,
    ),
    _rule(
        # The broker's own answer to the proxy's credentials (SaslAuthenticate's error_message), or
        # a SASL exchange librdkafka could not complete: retrying will not fix it.
        "login refused",
        r"SASL authentication error: |SASL \S+ mechanism handshake failed: |Failed to initialize SASL authentication",
        logging.ERROR,
    ),
    _rule(
        # librdkafka's own reading: a disconnect during the TLS handshake is the transport, not TLS.
        "TLS handshake cut off by the transport",
        r"SSL handshake failed: (?:Disconnected|SSL transport error)",
        logging.WARNING,
    ),
    _rule("TLS refused", r"SSL handshake failed: ", logging.ERROR),
    _rule("whole cluster unreachable", r"\d+/\d+ brokers are down", logging.ERROR),
    _rule(
        "one broker connection failed",
        r"Connect to \S+ failed: |Receive failed: |Send failed: |Failed to resolve '|Disconnected"
        r"|Connection setup timed out in state |ApiVersionRequest failed: " + _LOCAL_TRANSPORT,
        logging.WARNING,
    ),
)


# Only on the decision producer's logger: another client's fencing would be news.
DECISION_LEVELS: tuple[LevelRule, ...] = (
    _rule(
        "decisions taking turns",
        r"fenced by a newer instance|operation with an old epoch|another concurrent operation on the same transaction"
        r"|Producer attempted to update a transaction while another concurrent operation"
        r"|Failed to acquire transactional PID from broker \S+: Broker: (?:Coordinator load in progress"
        r"|Coordinator not available|Not coordinator)",
        logging.DEBUG,
    ),
    _rule(
        # A commit whose answer is an error (e.g. Kafka 4.2's UNKNOWN_SERVER_ERROR when another replica's
        # InitProducerId fences the transaction mid-EndTxn): the service decides again against the log,
        # and logs a WARNING of its own if it gives up, so the client line is no more than a warning.
        "decision commit answered with an error",
        r"Current transaction failed in state \S+: Failed to end transaction: ",
        logging.WARNING,
    ),
    *LEVELS,
)


def level_of(message: str, level: int, table: tuple[LevelRule, ...] = LEVELS) -> int:
    """The level a client line logged by librdkafka at `level` is logged at."""
    for rule in table:
        if rule.pattern.search(message):
            return min(level, rule.level)
    return level


class ClientLogLevels(logging.Filter):
    """Relevel a record by LEVELS; drop it when its logger is not enabled for the new level (the
    logger checked the old one before the filter ran)."""

    def __init__(self, table: tuple[LevelRule, ...] = LEVELS):
        super().__init__()
        self.table = table

    def filter(self, record: logging.LogRecord) -> bool:
        level = level_of(record.getMessage(), record.levelno, self.table)
        if level != record.levelno:
            record.levelno, record.levelname = level, logging.getLevelName(level)
            return logging.getLogger(record.name).isEnabledFor(level)
        return True


_SUPPRESSED = re.compile(r", \d+ identical error\(s\) suppressed")


class Throttle(logging.Filter):
    """Let an identical message through at most once per `interval` seconds: a client retrying an
    unreachable broker logs the same line every few ms."""

    def __init__(self, interval: float = 30.0):
        super().__init__()
        self.interval = interval
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        text = _SUPPRESSED.sub("", record.getMessage())  # librdkafka's own repeat counter would defeat this
        with self._lock:
            if now - self._last.get(text, -self.interval) < self.interval:
                return False
            if len(self._last) > 1000:
                self._last.clear()
            self._last[text] = now
        return True


# The `logger` of every librdkafka client the proxy runs (the state store's producer, consumers and
# admin clients).
client_log = logging.getLogger("proxy.state.librdkafka")
client_log.addFilter(ClientLogLevels())
client_log.addFilter(Throttle())

# The decision producer's own logger (a child's records skip its parent's filters: it has its own).
decision_log = logging.getLogger("proxy.state.librdkafka.decisions")
decision_log.addFilter(ClientLogLevels(DECISION_LEVELS))
decision_log.addFilter(Throttle())
