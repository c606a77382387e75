"""Waiting in the integration tests: a condition polled until it holds, with a deadline that names what was
awaited. The pause between polls is the loop's, never a stand-in for the condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest
from confluent_kafka import KafkaError, KafkaException

T = TypeVar("T")


def until(condition: Callable[[], T], what: str, timeout: float = 120.0, step: float = 0.05) -> T:
    """Poll `condition` until it returns something truthy, and return that; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(step)


def seconds_until(condition: Callable[[], object], what: str, timeout: float = 120.0, step: float = 0.02) -> float:
    """How long `condition` took to hold (polled as `until` polls): for tests that bound a propagation time."""
    start = time.monotonic()
    until(condition, what, timeout, step)
    return time.monotonic() - start


def once_known(call: Callable[[], T], timeout: float = 60.0) -> T:
    """`call`'s result once no broker answers it UNKNOWN_TOPIC_OR_PART. A topic just created reaches each
    broker's metadata in its own time, and a describe goes to whichever broker the client picks."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() >= deadline:
                raise
        time.sleep(0.1)


def refused(
    admin: object, errors: list[KafkaError], expected: Callable[[KafkaError], bool], timeout: float = 60.0
) -> None:
    """Ask `admin` (an AdminClient whose error_cb appends to `errors`) for metadata until an `expected` error was
    reported, or `timeout` s passed (the caller's assertion then says what is missing). Every ask must fail:
    nothing is served to a refused client. An ask waits at most 1 s: librdkafka waits out a metadata call's whole
    timeout once its broker refused it, so a longer one would only wait."""
    deadline = time.monotonic() + timeout
    while not any(expected(e) for e in errors) and time.monotonic() < deadline:
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=1)  # type: ignore[attr-defined]
        admin.poll(0.1)  # type: ignore[attr-defined]
