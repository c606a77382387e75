"""The Trio side of quota sharing (proxy/quotas/fleet.py): a usage report every interval, the others' charged.

Each replica writes what its clients used to the usage topic (`tenancy.quota_sharing.topic`, one partition,
deleted after a few minutes: only the newest reports matter) and reads every report from the topic's end,
its own included: its own coming back is how it knows the others' are in sight (fleet.py, "stale"). The
topic is created at start when missing, with the state topic's replication; it is guarded like the state
topic (proxy/tenancy/guard.py): no client may write it through the proxy, and only the state topic's
readers may read it.

Nothing of this starts before the first quota is defined: a deployment without quotas has no usage topic
and no clients for it. Writes go through a producer that the Trio thread polls (its delivery reports arrive
there), reads through a consumer on a thread of its own, handed over with `trio.from_thread.run_sync`: the
meters are only ever touched on the Trio thread.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ..quotas.fleet import FleetUsage
from .client_logs import client_log
from .store import RECONNECT, topic_id_of

if TYPE_CHECKING:
    from ..config import QuotaSharingConfig
    from ..quotas.meter import Meters
    from ..tenancy.model import TenancyImage

log = logging.getLogger(__name__)

RETENTION_MS = 300_000  # five minutes of reports: enough to read at any lag that still matters
MAX_RETRY_DELAY = 10.0


def usage_topic(state_topic: str, configured: str | None) -> str:
    return configured or f"{state_topic}.quota-usage"


class QuotaSharing:
    """Run with `nursery.start_soon(sharing.run)` once the state is replayed. `image()`: the tenancy
    image of now (the meters are its, and so is the guard); `changed(seen)`: its version once no longer
    `seen` (TenancyService.wait_for_change)."""

    def __init__(
        self,
        image: Callable[[], TenancyImage],
        changed: Callable[[int], Awaitable[int]],
        state_topic: str,
        replication_factor: int | None,
        client_conf: dict[str, Any],
        config: QuotaSharingConfig,
    ):
        self.image = image
        self.changed = changed
        self.topic = usage_topic(state_topic, config.topic)
        self.interval = config.report_interval_ms / 1000
        self.fleet = FleetUsage(
            replica=f"{uuid.uuid4()}",
            replicas=config.replicas,
            stale_after=config.stale_after_ms / 1000,
        )
        self.replication_factor = replication_factor
        self._conf = {**RECONNECT, **client_conf, "logger": client_log}
        self._stop = threading.Event()
        self._following = trio.Event()  # the consumer sits at the topic's end: reports sent from now come back
        self._stale_logged = False

    def _meters(self) -> Meters:
        return self.image().quotas.meters  # the image's, looked up each time: a replay replaces it

    async def run(self) -> None:
        seen = self.image().version
        while not self.image().quotas.values:  # no quota, nothing to share: no topic, no clients
            seen = await self.changed(seen)  # woken by the state topic, not a timer: idle costs nothing
        log.info(
            "sharing quota use with the other replicas through %s (a report every %.1f s, %d replica(s) stated)",
            self.topic,
            self.interval,
            self.fleet.replicas,
        )
        meters = self._meters()
        meters.fleet = self.fleet  # from now on local use is counted; stale (its share) until a report returns
        self.fleet.start(meters.clock())
        producer = Producer({**self._conf, "acks": 1, "linger.ms": 5, "message.timeout.ms": 10_000})
        thread: threading.Thread | None = None
        try:
            await self._ensure_topic()
            thread = threading.Thread(
                target=self._follow,
                args=(trio.lowlevel.current_trio_token(),),
                name="vcproxy-quota-usage",
                daemon=True,
            )
            thread.start()
            await self._following.wait()
            while True:
                await trio.sleep(self.interval)
                self._report(producer)
        finally:
            self._stop.set()
            if self._meters().fleet is self.fleet:
                self._meters().fleet = None
            with trio.CancelScope(shield=True):
                if thread is not None:
                    await trio.to_thread.run_sync(thread.join, 5)
                await trio.to_thread.run_sync(producer.flush, 1)

    def _report(self, producer: Producer) -> None:
        now = self._meters().clock()
        for value in self.fleet.report(now):
            try:
                producer.produce(self.topic, value, key=self.fleet.replica.encode(), on_delivery=self._delivered)
            except (BufferError, KafkaException) as exc:
                self._failed(f"cannot queue a usage report: {exc}")
        producer.poll(0)  # delivery reports, on this thread
        stale = self.fleet.stale(now)
        if stale != self._stale_logged:
            self._stale_logged = stale
            if stale:
                log.warning(
                    "quota usage topic %s: the other replicas' use is out of sight; each quota is held to "
                    "this replica's share (1/%d) until it is back",
                    self.topic,
                    round(1 / self.fleet.share(now)),
                )
            else:
                log.warning("quota usage topic %s: reports flow again; quotas are shared", self.topic)

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.fleet.written()
        else:
            self._failed(f"a usage report was not written: {err.str()}")

    def _failed(self, why: str) -> None:
        if self.fleet.failed_at is None:
            log.debug("quota usage topic %s: %s", self.topic, why)
        self.fleet.write_failed(self._meters().clock())

    def _receive(self, value: bytes | None) -> None:
        meters = self._meters()
        now = meters.clock()
        for key, amount in self.fleet.receive(value, now):
            meters.absorb(key, amount, now)

    # -- blocking, on threads ---------------------------------------------------------------------

    async def _ensure_topic(self) -> None:
        delay = 0.5
        while True:
            problem = await trio.to_thread.run_sync(self._create, abandon_on_cancel=True)
            if isinstance(problem, uuid.UUID):
                guard = getattr(self.image(), "guard", None)
                if guard is not None:  # requests that name it by id are refused like those that name it
                    self.image().guard = guard.guarding(self.topic, problem)
                return
            log.warning("quota usage topic %s: %s; retrying in %.1f s (shares meanwhile)", self.topic, problem, delay)
            self.fleet.write_failed(self._meters().clock())
            await trio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY)

    def _create(self) -> uuid.UUID | str:
        """The topic's id once it exists (created if missing), or why not yet."""
        admin = AdminClient(self._conf)
        try:
            metadata = admin.list_topics(timeout=10)
            if self.topic not in metadata.topics or metadata.topics[self.topic].error is not None:
                rf = self.replication_factor or min(3, max(len(metadata.brokers), 1))
                config = {"cleanup.policy": "delete", "retention.ms": str(RETENTION_MS)}
                future = admin.create_topics([NewTopic(self.topic, 1, rf, config=config)], request_timeout=10)
                try:
                    future[self.topic].result(10)
                    log.info("created quota usage topic %s (1 partition, replication factor %d)", self.topic, rf)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another replica won the race
                        return f"cannot create it: {exc.args[0].str()}"
            topic_id = topic_id_of(admin, self.topic, 10)  # a broker that has not caught up: asked again
            return uuid.UUID(topic_id) if topic_id is not None else "not described yet"
        except KafkaException as exc:
            return f"cannot reach the upstream cluster: {exc.args[0].str() if exc.args else exc}"
        except TimeoutError:
            return "the upstream cluster did not answer in time"
        finally:
            admin.poll(0)

    def _follow(self, token: trio.lowlevel.TrioToken) -> None:
        consumer = Consumer(
            {
                **self._conf,
                "group.id": f"vcproxy-quota-usage-{self.fleet.replica}",  # required, unused: assigned by hand
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
            }
        )
        consumer.assign([TopicPartition(self.topic, 0, OFFSET_END)])
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                try:
                    if msg.error() is not None:
                        if msg.error().code() == KafkaError._PARTITION_EOF and not self._following.is_set():
                            trio.from_thread.run_sync(self._following.set, trio_token=token)
                        continue  # librdkafka retries by itself; an unseen report turns this replica to its share
                    trio.from_thread.run_sync(self._receive, msg.value(), trio_token=token)
                except trio.RunFinishedError:
                    return
        finally:
            consumer.close()
