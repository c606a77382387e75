"""The Trio side of the state topic: replay at start, follow live, write durably.

`TenancyService.image` is only ever changed on the Trio thread, in log order: the follower thread
hands each record (or each decision's records together) over with `trio.from_thread.run_sync`, and
`write()` and `decide()` return once the follower has applied what they wrote. So every replica applies
the same records in the same order, and a change is visible locally when its call returns.

Two kinds of writes (docs/security.md#the-write-protocol): `decide()` for changes the proxy decides
(management, users, ACLs, quotas, unlinks it answers itself), one replica at a time against the whole
log; `write()` for facts the broker decided (links and topic ids learned from its answers) and seeds.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from .. import audit
from ..auth.users import seed_user_records
from ..identity import CLIENT_ID
from ..tenancy.guard import StateTopicGuard
from ..tenancy.model import TenancyImage, vc_record
from .quota_sharing import usage_topic
from .seed import VirtualClusterSeed, seed_records
from .store import Fenced, Record, StateStore, StateStoreError

if TYPE_CHECKING:
    from ..config import ProxyConfig

log = logging.getLogger(__name__)

MAX_RETRY_DELAY = 10.0
DECIDE_ATTEMPTS = 8  # a decision fenced this often in a row (replicas deciding at once) gives up
DECIDE_BACKOFF = 0.05  # seconds: the first pause before deciding again is random up to twice this

# A decision: the answer's body and the records it writes, computed against the image when called.
Decision = Callable[[], tuple[bytes, Sequence[Record]]]


def client_config(config: ProxyConfig) -> dict[str, Any]:
    """librdkafka settings for the state topic's clients: the upstream cluster, reached and logged
    into the way the proxy itself does (upstream.security_protocol, SASL and TLS settings)."""
    up = config.upstream
    conf: dict[str, Any] = {"bootstrap.servers": ",".join(up.bootstrap_servers), "client.id": f"{CLIENT_ID}-state"}
    protocol = getattr(up, "security_protocol", "PLAINTEXT")
    conf["security.protocol"] = protocol.lower()
    if protocol.startswith("SASL_"):
        conf["sasl.mechanism"] = up.sasl_mechanism
        conf["sasl.username"] = up.sasl_username
        conf["sasl.password"] = up.password()
    if protocol.endswith("SSL"):
        tls = up.tls
        conf["ssl.ca.location"] = (tls and tls.cafile) or "probe"  # probe: the system's CAs
        if tls is not None and tls.certfile is not None:
            conf["ssl.certificate.location"] = tls.certfile
            conf["ssl.key.location"] = tls.keyfile or tls.certfile
        conf["ssl.endpoint.identification.algorithm"] = "https" if tls is None or tls.check_hostname else "none"
    return conf


class TenancyService:
    """Owns the TenancyImage of one proxy process. Run it with `nursery.start(service.run)`."""

    def __init__(
        self,
        store: StateStore,
        seed: Sequence[VirtualClusterSeed] = (),
        *,
        replay_timeout: float = 30,
        write_timeout: float = 30,
        create_topic: bool = True,
        check_interval: float = 5.0,
        readers: Sequence[str] = (),
        users: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
        guarded: Sequence[str] = (),
    ):
        self.guarded = list(guarded)  # the replicas' other topics, guarded like the state topic from the start
        self.users_seed = dict(users or {})  # credentials.users / users_file: applied once each (auth/users.py)
        self.readers = list(readers)  # principals in no VC that may read the state topic through the proxy
        self.store = store
        self.create_topic = create_topic  # at start only: a running proxy never re-creates its state topic
        self.check_interval = check_interval
        self.seed = list(seed)
        self.replay_timeout = replay_timeout
        self.write_timeout = write_timeout
        self.image = TenancyImage()
        self.ready = trio.Event()  # set once replayed (and seeded): never serve tenants before
        self.applied_offset = 0  # the image reflects every record before this offset
        self.replayed_records = 0
        self._waiters: list[tuple[int, trio.Event]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nursery: trio.Nursery | None = None
        self._logged_vcs: dict[str, str] = {}  # name -> cluster id, to log each VC once
        self._repairs: list[Record] = []
        self._repaired: set[tuple[str, str]] = set()
        self.start_error: str | None = None  # why the last attempt to replay failed (while not ready)
        self._changed = trio.Event()  # set (and replaced) whenever a followed record changed the image
        self._deciding = trio.Lock()  # one decision at a time on this replica (the epoch: across replicas)
        self.decisions = 0  # committed
        self.fenced = 0  # decisions made again because another replica decided meanwhile

    @classmethod
    def from_config(cls, config: ProxyConfig) -> TenancyService:
        tc = config.tenancy
        store = StateStore(client_config(config), tc.state_topic, tc.state_replication_factor)
        return cls(
            store,
            tc.virtual_clusters,
            create_topic=tc.create_state_topic,
            check_interval=tc.state_check_interval_seconds,
            readers=tc.state_topic_readers,
            users=config.credentials.as_mapping(),
            guarded=[usage_topic(tc.state_topic, tc.quota_sharing.topic)] if tc.quota_sharing.enabled else [],
        )

    @property
    def problem(self) -> str | None:
        """Why the state topic cannot take changes now (None: it can); /readyz reports it."""
        return self.image.state_problem

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Replay, follow, seed; started() once ready; follows until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await self._start()
                task_status.started()
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await self._close()

    async def _start(self) -> None:
        delay = 0.5
        while True:
            started = time.monotonic()
            try:
                # abandon_on_cancel: a SIGTERM while the cluster is down must not wait for client timeouts.
                await trio.to_thread.run_sync(self.store.ensure_topic, 10, self.create_topic, abandon_on_cancel=True)
                replay = _Replay(self)
                self.replayed_records = await trio.to_thread.run_sync(
                    self.store.replay, replay, self.replay_timeout, abandon_on_cancel=True
                )
                break
            except StateStoreError as exc:
                if not exc.retriable:
                    log.critical("cannot use the virtual-cluster state: %s", exc)
                    raise
                # Serving tenants without their state would expose the physical cluster: wait instead.
                log.warning("state topic %s unavailable, retrying in %.1f s: %s", self.store.topic, delay, exc)
                self.start_error = str(exc)  # /readyz says why
                self.image, self._logged_vcs, self._repairs, self._repaired = TenancyImage(), {}, [], set()
                await trio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
        assert self.store.replayed_offset is not None
        self.applied_offset = self.store.replayed_offset
        topic_id = uuid.UUID(self.store.topic_id) if self.store.topic_id else None
        also = tuple((name, None) for name in self.guarded)  # ids are learned once the topics exist
        self.image.guard = StateTopicGuard(self.store.topic, frozenset(self.readers), topic_id, also)
        log.info(
            "replayed %d state record(s) from %s in %.2f s: %d virtual cluster(s)",
            self.replayed_records,
            self.store.topic,
            time.monotonic() - started,
            len(self.image.vcs),
        )
        self._thread = threading.Thread(
            target=self._follow, args=(trio.lowlevel.current_trio_token(),), name="vcproxy-state-follower", daemon=True
        )
        self._thread.start()
        await trio.to_thread.run_sync(self.store.prepare_writes)
        await self._seed()
        self._schedule_repairs()
        self.ready.set()
        if self._nursery is not None:
            self._nursery.start_soon(self._watch)

    async def _watch(self) -> None:
        """Check the state topic now and then: deleted, re-created or no longer compacted makes the proxy
        not ready and refuse topic changes (never re-created or guessed: an operator restores it)."""
        while True:
            await trio.sleep(self.check_interval)
            try:
                problem = await trio.to_thread.run_sync(self.store.check, 10, abandon_on_cancel=True)
            except StateStoreError as exc:  # the cluster is unreachable: upstream readiness says so
                log.debug("state topic check failed: %s", exc)
                continue
            if problem != self.image.state_problem:
                if problem is None:
                    log.warning("state topic %s usable again", self.store.topic)
                else:
                    log.error("virtual-cluster state unusable, refusing topic changes: %s", problem)
                self.image.state_problem = problem

    async def reseed_users(self, users: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        """A reloaded users file: its new and edited entries are written as seeds (once each, as at start);
        a user removed from the file stays in the state topic (delete it with kafka-configs)."""
        self.users_seed = dict(users)  # the start's seeding takes them if it has not run yet
        await self.ready.wait()  # never seed against an image not yet replayed: it would undo runtime changes
        await self._seed()

    async def _seed(self) -> None:
        delay = 0.5
        # Recomputed on each attempt (others may have written meanwhile), but written once: two
        # replicas with conflicting seeds must not undo each other forever.
        while records := seed_records(self.image, self.seed) + seed_user_records(self.image.users, self.users_seed):
            try:
                await self.write(records)
            except StateStoreError as exc:
                log.warning("seeding the state topic failed, retrying in %.1f s: %s", delay, exc)
                await trio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_DELAY)
                continue
            log.info("seeded %d state record(s) from the configuration", len(records))
            return

    async def _close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await trio.to_thread.run_sync(self._thread.join, 5)
        await trio.to_thread.run_sync(self.store.close)

    # -- writing --------------------------------------------------------------------------------

    async def write(self, records: Sequence[Record], timeout: float | None = None) -> None:
        """Write durably, then return once the image shows the records (applied in log order).
        StateStoreError if the write failed, or succeeded but was not followed back in time."""
        timeout = self.write_timeout if timeout is None else timeout
        problem = self.image.state_problem
        if problem is not None:
            # Topic ids are facts from the broker (an image cache): keep using them, persist them later.
            if all(json.loads(key)[0] == "topic" for key, _ in records):
                for key, value in records:
                    self._apply(key, value)
                return
            log.warning("not writing %d state record(s): %s", len(records), problem)
            raise StateStoreError(problem, retriable=False)
        try:
            offsets = await trio.to_thread.run_sync(self.store.write, list(records), timeout)
        except StateStoreError as exc:
            log.warning("%s", exc)
            raise
        if not offsets:
            return
        target = max(offsets) + 1
        if self.applied_offset >= target:
            return
        if self._thread is None:  # not following (a tool, or before start): apply directly
            for key, value in records:
                self._apply(key, value)
            return
        # Wait for the follower rather than apply here: applying out of log order could make this
        # replica disagree with the others (e.g. which of two concurrent vc records came first).
        await self._applied(target, timeout, "written, but not applied back")  # the follower will, later

    async def decide(self, decision: Decision, timeout: float | None = None) -> tuple[bytes, list[Record]]:
        """Run `decision` against the image once it holds every decision committed so far, commit its
        records as one transaction, and return (body, records) once they are applied here. Across
        replicas the decisions' transactional.id serialises them: a replica whose commit succeeds was
        not fenced since its init, so nobody else decided in between (docs/security.md). StateStoreError
        when no decision could be made and committed within `timeout` (the client's connection closes,
        as for a failed write; nothing was written)."""
        timeout = self.write_timeout if timeout is None else timeout
        deadline = trio.current_time() + timeout
        async with self._deciding:
            attempt = 0
            while True:
                attempt += 1
                problem = self.image.state_problem
                if problem is not None:
                    log.warning("not deciding a state change: %s", problem)
                    raise StateStoreError(problem, retriable=False)
                try:
                    body, records = await self._decide_once(decision, deadline)
                except StateStoreError as exc:
                    if not exc.retriable or attempt >= DECIDE_ATTEMPTS or trio.current_time() >= deadline:
                        log.warning("state change not decided after %d attempt(s): %s", attempt, exc)
                        raise
                    if isinstance(exc, Fenced):
                        self.fenced += 1
                    log.info("deciding a state change again (attempt %d): %s", attempt + 1, exc)
                    # Two replicas fenced by each other's init would take turns failing forever: a random
                    # pause, longer each time, lets one of them commit first.
                    pause = random.uniform(0, DECIDE_BACKOFF * 2**attempt)
                    await trio.sleep(max(0.0, min(pause, deadline - trio.current_time())))
                    continue
                return body, records

    async def _decide_once(self, decision: Decision, deadline: float) -> tuple[bytes, list[Record]]:
        def left() -> float:
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                raise StateStoreError(f"no decision within {self.write_timeout} s")
            return remaining

        if self._thread is None:  # not following (a tool, or before start): this image is all there is
            (body, records), lines = audit.collect(decision)
            await self.write(list(records), left())
            audit.emit(lines)
            return body, list(records)
        await trio.to_thread.run_sync(self.store.begin_deciding, left())
        end = await trio.to_thread.run_sync(self.store.committed_end, left())
        # Between what the follower applied and the end there is often nothing but the last commit's marker:
        # one read says so in milliseconds, where the follower would learn it from its next parked fetch.
        if self.applied_offset < end and await trio.to_thread.run_sync(
            self.store.holds_records, self.applied_offset, end, left()
        ):
            await self._applied(end, left(), "the end of the log not applied")
        (body, records), lines = audit.collect(decision)  # logged only for the run whose outcome stands
        records = list(records)
        if not records:
            audit.emit(lines)
            return body, records
        offsets = await trio.to_thread.run_sync(self.store.commit, records, left())
        target = max(offsets) + 1 if offsets else await trio.to_thread.run_sync(self.store.committed_end, left())
        await self._applied(target, left(), "a committed decision not applied")
        self.decisions += 1
        audit.emit(lines)
        return body, records

    async def _applied(self, target: int, timeout: float, what: str) -> None:
        """Return once the follower applied every record before `target`; StateStoreError after `timeout`."""
        if self.applied_offset >= target:
            return
        event = trio.Event()
        waiter = (target, event)
        self._waiters.append(waiter)
        with trio.move_on_after(timeout):
            await event.wait()
            return
        self._waiters.remove(waiter)
        raise StateStoreError(
            f"{what} within {timeout:g} s: {self.store.topic} up to offset {target - 1}, "
            f"the follower at offset {self.applied_offset}"
        )

    # -- applying -------------------------------------------------------------------------------

    def _apply(self, key: str, value: dict[str, Any] | None) -> None:
        """Apply one record to the image; a record the model cannot take is logged and skipped."""
        try:
            kind, *parts = json.loads(key)
            if kind == "vc" and value is not None:
                self._check_vc(parts[0], value)
            self.image.apply(key, value)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            log.error("state topic %s: skipping record %s: %r", self.store.topic, key, exc)
            return
        if kind == "vc":
            self._log_vc(parts[0])

    def _check_vc(self, name: str, value: dict[str, Any]) -> None:
        # Two replicas creating the same VC at once (both seeded it from an empty topic) each write
        # a vc record. Everyone keeps the first in log order, but compaction keeps the last, so a
        # later replay would see other ids. Writing the winner again makes it the last one too.
        vc = self.image.vcs.get(name)
        if vc is not None and (vc.id, vc.cluster_id) != (value["id"], value["cluster_id"]):
            log.warning("virtual cluster %s was created twice; keeping the first (id %s)", name, vc.id)
            if (name, vc.id) not in self._repaired:  # once: never a write loop between replicas
                self._repaired.add((name, vc.id))
                self._repairs.append(vc_record(name, vc.id, vc.cluster_id))

    def _log_vc(self, name: str) -> None:
        vc = self.image.vcs.get(name)
        if vc is None:
            if self._logged_vcs.pop(name, None) is not None:
                log.info("virtual cluster %s deleted", name)
        elif self._logged_vcs.get(name) != vc.cluster_id:
            self._logged_vcs[name] = vc.cluster_id
            log.info("virtual cluster %s cluster id %s (id %s)", name, vc.cluster_id, vc.id)

    def _schedule_repairs(self) -> None:
        if self._repairs and self._nursery is not None:
            repairs, self._repairs = self._repairs, []
            self._nursery.start_soon(self._write_repairs, repairs)

    async def _write_repairs(self, records: list[Record]) -> None:
        try:
            await self.write(records)
        except StateStoreError as exc:
            log.error("could not rewrite duplicate virtual cluster records: %s", exc)

    # -- following (runs in its own thread) ------------------------------------------------------

    def _from_log(self, records: list[Record], next_offset: int) -> None:
        """Records the follower read (one, or one decision's all), applied in one go on the Trio thread:
        no task sees half a decision. Then the offset, so that waiters see their records applied."""
        if records:
            for key, value in records:
                self._apply(key, value)
            self._changed.set()
            self._changed = trio.Event()
            if self.ready.is_set():
                self._schedule_repairs()
        self._advance(next_offset)

    async def wait_for_change(self, seen: int) -> int:
        """The image's version once it is no longer `seen` (live bindings are checked against it)."""
        while self.image.version == seen:
            await self._changed.wait()
        return self.image.version

    def _advance(self, offset: int) -> None:
        self.applied_offset = max(self.applied_offset, offset)
        done = [w for w in self._waiters if w[0] <= self.applied_offset]
        for waiter in done:
            self._waiters.remove(waiter)
            waiter[1].set()

    def _follow(self, token: trio.lowlevel.TrioToken) -> None:
        def on_batch(records: list[Record], next_offset: int) -> None:
            trio.from_thread.run_sync(self._from_log, records, next_offset, trio_token=token)

        while not self._stop.is_set():
            try:
                self.store.follow(on_batch, self._stop, start_offset=self.applied_offset)
            except trio.RunFinishedError:
                return
            except Exception:
                log.exception("state follower failed; restarting at offset %d", self.applied_offset)
                self._stop.wait(1.0)


class _Replay:
    """The image as replay sees it (worker thread, before anyone reads the image)."""

    def __init__(self, service: TenancyService):
        self._service = service

    def apply(self, key: str, value: dict[str, Any] | None) -> None:
        self._service._apply(key, value)


@asynccontextmanager
async def open_tenancy(
    source: ProxyConfig | StateStore, seed: Sequence[VirtualClusterSeed] = ()
) -> AsyncIterator[TenancyService]:
    """A started (replayed, following) service for the body of the `async with`."""
    service = TenancyService.from_config(source) if not isinstance(source, StateStore) else TenancyService(source, seed)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        try:
            yield service
        finally:
            nursery.cancel_scope.cancel()
