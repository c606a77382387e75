"""The state clients' librdkafka logs: one level per kind of line (proxy/state/client_logs.py).

The lines are librdkafka's own texts (src/rdkafka_broker.c, rdkafka_request.c, rdkafka_ssl.c,
rdkafka_idempotence.c of librdkafka 2.x), handed to the logger as confluent-kafka does:
``logger.log(level, "%s [%s] %s", fac, client_name, "[thrd:...]: text")``.
"""

from __future__ import annotations

import logging
import socket
import time

import pytest
from confluent_kafka import Producer

from proxy.state import client_logs

NAME = "vcproxy-760cab83-state#consumer-3"
ROUTINE = (
    "[thrd:main]: Failed to acquire idempotence PID from broker "
    "127.0.0.1:27202/2: Broker: Coordinator load in progress: retrying"
)
LOGGER = "proxy.state.librdkafka"


@pytest.fixture
def records(caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    logging.getLogger(LOGGER).setLevel(logging.INFO)
    yield caplog
    logging.getLogger(LOGGER).setLevel(logging.NOTSET)


def _log(level: int, text: str, fac: str = "FAIL") -> None:
    # As confluent-kafka hands librdkafka's lines to the `logger` of a client config.
    client_logs.client_log.log(level, "%s [%s] %s", fac, NAME, text)


def _levels(records) -> list[int]:
    return [r.levelno for r in records.records if r.name == LOGGER]


def test_a_routine_retry_is_not_a_warning(records):
    _log(logging.WARNING, ROUTINE, fac="GETPID")
    assert _levels(records) == []  # DEBUG, and DEBUG is off


def test_it_shows_at_debug(records):
    logging.getLogger(LOGGER).setLevel(logging.DEBUG)
    _log(logging.WARNING, ROUTINE.replace("load in progress", "not available"), fac="GETPID")
    [record] = [r for r in records.records if r.name == LOGGER]
    assert record.levelno == logging.DEBUG and record.levelname == "DEBUG"


# (librdkafka's level, the text after "[thrd:...]: ", the level the proxy logs it at)
MAPPINGS = [
    # The suite's flake (issue 24): the coordinator connection went down while its login was in
    # flight; the purged SaslAuthenticate request fails with a local transport error. Retried.
    pytest.param(
        logging.ERROR,
        "GroupCoordinator: SASL authentication error: SaslAuthenticateRequest failed: "
        "Local: Broker transport failure (after 0ms in state DOWN)",
        logging.WARNING,
        id="login-cut-off-by-transport",
    ),
    pytest.param(
        logging.ERROR,
        "sasl_plaintext://127.0.0.1:27202/bootstrap: SASL authentication error: SaslAuthenticateRequest failed: "
        "Local: Timed out (after 30012ms in state AUTH_REQ)",
        logging.WARNING,
        id="login-timed-out",
    ),
    pytest.param(
        logging.ERROR,
        "127.0.0.1:27202/1: SASL SCRAM-SHA-512 mechanism handshake failed: Local: Broker transport failure: "
        "broker's supported mechanisms:  (after 1ms in state DOWN)",
        logging.WARNING,
        id="handshake-cut-off-by-transport",
    ),
    # A real refusal of the proxy's credentials: the broker's SaslAuthenticate error_message.
    pytest.param(
        logging.ERROR,
        "sasl_plaintext://127.0.0.1:27202/bootstrap: SASL authentication error: Authentication failed during "
        "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 4ms in state AUTH_REQ)",
        logging.ERROR,
        id="login-refused-scram",
    ),
    pytest.param(
        logging.ERROR,
        "sasl_plaintext://127.0.0.1:27202/bootstrap: SASL authentication error: Authentication failed: "
        "Invalid username or password (after 3ms in state AUTH_REQ)",
        logging.ERROR,
        id="login-refused-plain",
    ),
    pytest.param(
        logging.ERROR,
        "sasl_plaintext://127.0.0.1:27202/bootstrap: SASL SCRAM-SHA-512 mechanism handshake failed: "
        "Broker: Unsupported SASL mechanism: broker's supported mechanisms: PLAIN (after 2ms in state AUTH_HANDSHAKE)",
        logging.ERROR,
        id="mechanism-refused",
    ),
    pytest.param(
        logging.ERROR,
        "ssl://127.0.0.1:27202/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify "
        "failed: broker certificate could not be verified, verify that ssl.ca.location is correctly configured "
        "or root CA certificates are installed (install ca-certificates package) (after 9ms in state SSL_HANDSHAKE)",
        logging.ERROR,
        id="tls-refused",
    ),
    pytest.param(
        logging.ERROR,
        "ssl://127.0.0.1:27202/bootstrap: SSL handshake failed: Disconnected: connecting to a PLAINTEXT broker "
        "listener? (after 2ms in state SSL_HANDSHAKE)",
        logging.WARNING,
        id="tls-cut-off-by-transport",
    ),
    pytest.param(
        logging.ERROR,
        "127.0.0.1:27202/2: Connect to ipv4#127.0.0.1:27202 failed: Connection refused (after 0ms in state CONNECT)",
        logging.WARNING,
        id="broker-refused",
    ),
    pytest.param(
        logging.ERROR,
        "127.0.0.1:27202/2: Receive failed: Connection reset by peer (after 12ms in state UP)",
        logging.WARNING,
        id="broker-reset",
    ),
    pytest.param(
        logging.ERROR,
        "127.0.0.1:27202/2: Send failed: Broken pipe (after 3ms in state UP, 4 identical error(s) suppressed)",
        logging.WARNING,
        id="send-failed",
    ),
    pytest.param(
        logging.ERROR,
        "kafka-2.kafka:9092/2: Failed to resolve 'kafka-2.kafka:9092': Name or service not known "
        "(after 1ms in state CONNECT)",
        logging.WARNING,
        id="broker-unresolvable",
    ),
    pytest.param(
        logging.WARNING,
        "127.0.0.1:27202/2: Connection setup timed out in state APIVERSION_QUERY (after 30028ms in state "
        "APIVERSION_QUERY)",
        logging.WARNING,
        id="connection-setup-timeout",
    ),
    pytest.param(
        logging.INFO,
        "127.0.0.1:27202/2: Disconnected (after 120009ms in state UP)",
        logging.INFO,
        id="close-stays-info",
    ),
    # The whole cluster unreachable: the state cannot be read or written. (An error event, which
    # confluent-kafka gives an error_cb or a consumer's poll, not the logger; ERROR should it be logged.)
    pytest.param(
        logging.ERROR, "vcproxy-760cab83-state#consumer-3: 3/3 brokers are down", logging.ERROR, id="all-down"
    ),
    # Not in the table: librdkafka's own level.
    pytest.param(
        logging.WARNING,
        "Failed to acquire idempotence PID from broker b:1/1: Broker: Cluster authorization failed: retrying",
        logging.WARNING,
        id="unmapped-warning",
    ),
    pytest.param(
        logging.CRITICAL,
        "Fatal error: Broker: Producer attempted an operation with an old epoch: the producer is fenced",
        logging.CRITICAL,
        id="fatal",
    ),
]


@pytest.mark.parametrize(("librdkafka_level", "text", "level"), MAPPINGS)
def test_each_line_has_its_level(records, librdkafka_level, text, level):
    _log(librdkafka_level, f"[thrd:GroupCoordinator]: {text}")
    assert _levels(records) == [level]


def test_a_real_client_refused_by_its_broker_warns(records):
    """A real librdkafka producer, its only broker a closed port: librdkafka's own text of a refused
    connection, logged at ERR, reaches the log as a WARNING (librdkafka retries it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "logger": client_logs.client_log})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("Connection refused" in r.getMessage() for r in records.records):
            producer.poll(0.1)
    refused = [r for r in records.records if r.name == LOGGER and "Connection refused" in r.getMessage()]
    assert refused and {r.levelno for r in refused} == {logging.WARNING}, [r.getMessage() for r in refused]
    assert refused[0].getMessage().startswith("FAIL [rdkafka#producer-")
    assert f"Connect to ipv4#127.0.0.1:{port} failed: Connection refused (after " in refused[0].getMessage()


def test_every_rule_only_lowers():
    assert all(rule.level <= logging.ERROR for rule in client_logs.LEVELS)
    assert client_logs.level_of("127.0.0.1:1/1: Receive failed: Disconnected", logging.INFO) == logging.INFO


@pytest.mark.parametrize(
    ("librdkafka_level", "text"),
    [
        (
            logging.CRITICAL,
            "Fatal error: Broker: Producer attempted an operation with an old epoch: the producer is fenced",
        ),
        (logging.ERROR, "Failed to commit transaction: Broker: Producer fenced by a newer instance"),
        (
            logging.WARNING,
            "Failed to acquire transactional PID from broker b:1/1: Broker: Coordinator load in progress: retrying",
        ),
    ],
)
def test_the_decision_producer_taking_turns_is_debug(caplog, librdkafka_level, text):
    """Fenced by another replica's decision: how replicas take turns, not an operator's problem. Only on the
    decision producer's logger: the same line from another client keeps its level (the `fatal` row above)."""
    name = "proxy.state.librdkafka.decisions"
    caplog.set_level(logging.DEBUG, logger=name)
    logging.getLogger(name).setLevel(logging.INFO)
    try:
        client_logs.decision_log.log(librdkafka_level, "%s [%s] %s", "TXNERR", NAME, f"[thrd:main]: {text}")
    finally:
        logging.getLogger(name).setLevel(logging.NOTSET)
    assert [r for r in caplog.records if r.name == name] == []
    assert client_logs.level_of(text, librdkafka_level, client_logs.DECISION_LEVELS) == logging.DEBUG


def test_a_decision_commit_answered_with_an_error_is_a_warning():
    """Kafka 4.2.2 answers an EndTxn racing another replica's fencing InitProducerId with UNKNOWN_SERVER_ERROR
    (an IllegalStateException in its coordinator, seen in CI): the service decides again against the log, so
    the client's line is a warning, not an operator's ERROR; from another client it keeps its level."""
    text = (
        "[thrd:main]: Current transaction failed in state CommittingTransaction: "
        "Failed to end transaction: Unknown broker error (UNKNOWN)"
    )
    assert client_logs.level_of(text, logging.ERROR, client_logs.DECISION_LEVELS) == logging.WARNING
    assert client_logs.level_of(text, logging.ERROR) == logging.ERROR
