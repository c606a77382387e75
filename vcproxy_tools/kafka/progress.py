"""A live status line for the launcher's long steps (resolving jars from Maven Central, starting brokers).

On a terminal the line is redrawn in place (what is happening, how far, for how long); anywhere else
(CI, a pipe, a log file) nothing is drawn and the log lines alone tell the story. ``VCPROXY_PROGRESS=1``
or ``0`` forces it on or off.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from typing import TextIO

CLEAR_LINE = "\r\x1b[K"


def progress_wanted(stream: TextIO) -> bool:
    forced = os.environ.get("VCPROXY_PROGRESS", "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _ClearBeforeLog(logging.Filter):
    """Erases the status line before a log record is written to the same terminal (the line is redrawn
    at the next update), so log lines never start in the middle of it."""

    def __init__(self, progress: Progress):
        super().__init__()
        self.progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        self.progress.clear()
        return True


class Progress:
    """``update(text)`` redraws the status line (at most every ``interval`` seconds unless forced);
    ``clear()`` erases it. A no-op unless ``enabled`` (by default: the stream is a terminal).

    Used as a context manager it also keeps log records written to the terminal off the line."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None, interval: float = 0.2):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = progress_wanted(self.stream) if enabled is None else enabled
        self.interval = interval
        self._shown = False
        self._last = 0.0
        self._filter = _ClearBeforeLog(self)
        self._handlers: list[logging.Handler] = []

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and self._shown and now - self._last < self.interval:
            return
        self._last = now
        width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        if len(text) > width:
            text = text[: width - 3] + "..."
        self._write(CLEAR_LINE + text)
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self._shown = False
            self._write(CLEAR_LINE)

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal is gone (closed window): nothing to draw on
            self.enabled = False

    def __enter__(self) -> Progress:
        if self.enabled:
            for logger in (logging.getLogger(), logging.getLogger("proxy"), logging.getLogger("vcproxy_tools.kafka")):
                for handler in logger.handlers:
                    if handler not in self._handlers:
                        handler.addFilter(self._filter)
                        self._handlers.append(handler)
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()
        for handler in self._handlers:
            handler.removeFilter(self._filter)
        self._handlers.clear()


def elapsed(t0: float) -> str:
    """Seconds since ``t0`` (a monotonic time) as `12s` or `2m05s`."""
    seconds = int(time.monotonic() - t0)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
