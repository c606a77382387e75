"""What a SASL server (proxy/auth/sasl.py) hands the session's authentication stage
(proxy/core/stages/authenticate.py): a reply, or slow work to run before the reply is known. Sans-I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class PasswordCheck:
    """Work too slow for the event loop (a PLAIN key derivation): the shell waits `wait` seconds (a spent
    failed-login budget paces the login, proxy/auth/guard.py), runs `run` in a worker thread when `cpu` (in
    its turn among the checks from address `key`, proxy/auth/check_queue.py; else on the loop), then `finish`
    with its result on the loop, which gives the reply."""

    run: Callable[[], bool]
    finish: Callable[[bool], Any]
    key: str = ""
    wait: float = 0.0
    cpu: bool = True


@dataclass(slots=True)
class SaslReply:
    body: bytes  # the response body (header added by the session)
    close: bool = False  # failed authentication: close the connection once this is sent
    check: PasswordCheck | None = None  # the reply is not known yet: run this first
    slow: bool = False  # a failure from an address whose failure budget is spent: answer it slowly
    relay: str | None = None  # no reply: relay this request, and the rest of the exchange, with this mechanism
