"""The tenancy state's upkeep beside the connections: closing those whose VC binding changed, and
sweeping orphaned physical topics."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import trio

from ..tenancy import orphans
from .connection import ClientConnection

if TYPE_CHECKING:
    from ..state.service import TenancyService

log = logging.getLogger(__name__)


async def follow_bindings(tenancy: TenancyService, connections: Callable[[], Iterable[ClientConnection]]) -> None:
    """Close the connections whose VC binding a followed change undid (VC deleted, principal moved or
    unbound, or newly bound while on the physical cluster): the client reconnects under its new binding."""
    seen = tenancy.image.version
    while True:
        seen = await tenancy.wait_for_change(seen)
        for connection in list(connections()):
            why = connection.session.stale_binding()
            if why is not None:
                connection.close_now(why)


async def sweep_orphans(tenancy: TenancyService, interval: Callable[[], float]) -> None:
    """Orphaned physical topics (proxy/tenancy/orphans.py decides): forget those gone or linked again,
    delete those past their VC's orphan_grace_seconds, with the state topic's upstream login. Every
    replica sweeps; a topic another deleted first is gone, and its records are tombstones either way."""
    from ..state.store import StateStoreError

    store = tenancy.store
    while True:
        await trio.sleep(interval())
        if not tenancy.image.orphans:
            continue
        try:
            existing = await trio.to_thread.run_sync(store.topic_names, 10, abandon_on_cancel=True)
            plan = orphans.sweep(tenancy.image, existing, time.time())
            if plan.delete:
                results = await trio.to_thread.run_sync(store.delete_topics, plan.delete, 30, abandon_on_cancel=True)
                for physical, error in results.items():
                    orphan = tenancy.image.orphans.get(physical)
                    left = f"left by virtual cluster {orphan.vc}" if orphan is not None else "orphaned"
                    if error is None or "UNKNOWN_TOPIC" in error.upper():
                        log.warning("deleted physical topic %s, %s past its grace period", physical, left)
                        plan.forget.append(physical)
                    else:
                        log.warning("could not delete physical topic %s (%s): %s", physical, left, error)
            records = [r for physical in plan.forget for r in orphans.forget_records(tenancy.image, physical)]
            if records:
                await tenancy.write(records)
        except (StateStoreError, trio.TooSlowError, OSError) as exc:
            log.warning("orphaned topics: sweep failed, retrying later: %s", exc)
