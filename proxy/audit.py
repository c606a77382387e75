"""Audit lines of state changes, logged once the change is what happened (docs/security.md, the write protocol).

A management decision is run more than once: by its stage against the replica's own image (the answer
when there is no state topic), then by the shell against the log's image, again after each fence. Its
lines ("alice set the SCRAM-SHA-512 credential of user x") must say what was committed, not what one of
those runs would have done: the decision functions `note` them, whoever runs a decision `collect`s them,
and the lines are `emit`ted only for the run whose outcome stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

Line = tuple[logging.Logger, str, tuple[Any, ...]]
T = TypeVar("T")

_held: ContextVar[list[Line] | None] = ContextVar("vcproxy_audit_held", default=None)


def note(logger: logging.Logger, message: str, *args: Any) -> None:
    """An INFO line about a state change: held while a decision is collected, else logged at once."""
    held = _held.get()
    if held is None:
        logger.info(message, *args)
    else:
        held.append((logger, message, args))


def collect(decision: Callable[[], T]) -> tuple[T, list[Line]]:
    """Run `decision`, holding back the lines it notes."""
    token = _held.set([])
    try:
        result = decision()
        lines = _held.get() or []
    finally:
        _held.reset(token)
    return result, lines


def emit(lines: list[Line]) -> None:
    for logger, message, args in lines:
        logger.info(message, *args)
