"""The state clients' librdkafka logs: routine producer-id retries at DEBUG, real warnings as they are."""

from __future__ import annotations

import logging

import pytest

from proxy.state import store

ROUTINE = (
    "GETPID [vcproxy-760cab83-state#producer-5] [thrd:main]: Failed to acquire idempotence PID from broker "
    "127.0.0.1:27202/2: Broker: Coordinator load in progress: retrying"
)


@pytest.fixture
def records(caplog):
    caplog.set_level(logging.DEBUG, logger="proxy.state.librdkafka")
    logging.getLogger("proxy.state.librdkafka").setLevel(logging.INFO)
    yield caplog
    logging.getLogger("proxy.state.librdkafka").setLevel(logging.NOTSET)


def _log(level: int, message: str) -> None:
    # As confluent-kafka hands librdkafka's lines to the `logger` of a client config.
    store._client_log.log(level, "%s", message)


def test_a_routine_retry_is_not_a_warning(records):
    _log(logging.WARNING, ROUTINE)
    assert [r for r in records.records if r.name == "proxy.state.librdkafka"] == []  # DEBUG, and DEBUG is off


def test_it_shows_at_debug(records):
    logging.getLogger("proxy.state.librdkafka").setLevel(logging.DEBUG)
    _log(logging.WARNING, ROUTINE.replace("load in progress", "not available"))
    [record] = [r for r in records.records if r.name == "proxy.state.librdkafka"]
    assert record.levelno == logging.DEBUG and record.levelname == "DEBUG"


@pytest.mark.parametrize(
    "message",
    [
        "GETPID [p#producer-1] [thrd:main]: Failed to acquire idempotence PID from broker b:1/1: "
        "Broker: Cluster authorization failed: retrying",
        "FAIL [p#producer-1] [thrd:127.0.0.1:27202/2]: 127.0.0.1:27202/2: Connect to ipv4#127.0.0.1:27202 failed: "
        "Connection refused (after 0ms in state CONNECT)",
    ],
)
def test_other_warnings_stay_warnings(records, message):
    _log(logging.WARNING, message)
    [record] = [r for r in records.records if r.name == "proxy.state.librdkafka"]
    assert record.levelno == logging.WARNING
