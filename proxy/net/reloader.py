"""The Trio task that reloads the configuration: polls the watched files' stamps, and reloads at once on
SIGHUP. What to do with an edit is proxy/reload.py's decision; applying it is the server's (`Reconfigurable`:
ProxyServer.reconfigure), which this task knows by that interface alone."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Protocol

import trio

from .. import reload
from ..config import ConfigError, ProxyConfig, load_config

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0  # a rotated certificate is in use for new handshakes within this (plus a file read)


class Reconfigurable(Protocol):
    """What a reload reads and applies: the running config, and the applying of an accepted decision."""

    @property
    def config(self) -> ProxyConfig: ...

    def reconfigure(self, decision: reload.Decision) -> None: ...


class Reloader:
    def __init__(
        self,
        server: Reconfigurable,
        config_path: str | Path,
        poll_seconds: float = POLL_SECONDS,
        keep_log_level: bool = False,
    ):
        self.server = server
        self.keep_log_level = keep_log_level  # --log-level was given: it wins over logging.level
        self.config_path = str(config_path)
        self.poll_seconds = poll_seconds
        self.files = reload.watched_files(server.config, self.config_path)
        self.stamps = {path: reload.stamp(path) for path in self.files}
        self._lock = trio.Lock()  # a SIGHUP during a poll's reload waits for it: one decision at a time

    async def run(self) -> None:
        with trio.open_signal_receiver(signal.SIGHUP) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._poll)
                async for _ in signals:
                    log.info("received SIGHUP: reloading the configuration")
                    await self.reload(forced=True)

    async def _poll(self) -> None:
        while True:
            await trio.sleep(self.poll_seconds)
            if reload.changed_files(self.stamps, self.files):
                await self.reload()

    async def reload(self, forced: bool = False) -> reload.Decision | None:
        """Load the config again and apply or refuse it; None when nothing was touched (a poll's no-op)."""
        async with self._lock:
            return await self._reload(forced)

    async def _reload(self, forced: bool) -> reload.Decision | None:
        changed = reload.changed_files(self.stamps, self.files)
        if not changed and not forced:
            return None
        # Stamps first: a refused edit is logged once, not at every poll, until the file changes again.
        self.stamps.update({path: reload.stamp(path) for path in changed})
        candidate: ProxyConfig | ConfigError
        try:
            # Reading and validating loads certificates and key files: off the event loop.
            candidate = await trio.to_thread.run_sync(load_config, self.config_path)
        except ConfigError as exc:
            candidate = exc
        decision = reload.decide(self.server.config, candidate, self.files, changed)
        if decision.config is None:
            log.error("%s", decision.message)
            return decision
        try:
            self.server.reconfigure(decision)
        except (OSError, ValueError) as exc:  # a file changed again since it was validated: keep running
            log.error("configuration reload refused, the running configuration is kept: %s", exc)
            self.stamps.clear()  # try again at the next poll
            return None
        if not self.keep_log_level:
            logging.getLogger().setLevel(decision.config.logging.level)
        log.info("%s", decision.message)
        # The applied config may name other files (a new certificate path): watch those from now on.
        self.files = reload.watched_files(decision.config, self.config_path)
        self.stamps = {path: self.stamps.get(path) or reload.stamp(path) for path in self.files}
        return decision
