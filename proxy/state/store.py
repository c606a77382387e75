"""The virtual-cluster state topic: a compacted, single-partition Kafka topic on the upstream cluster.

Blocking confluent-kafka code; the Trio side (service.py) calls it through worker threads. Records
are the (key, value) pairs of proxy.tenancy.model: the key is a UTF-8 JSON string, the value a JSON
object, or no value at all for a tombstone. One partition gives every replica the same total order.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from ..errors import InternalFault
from ..tenancy.guard import decisions_id
from .admin_handles import AdminHandles
from .client_logs import client_log as _client_log  # the clients' own logs, levelled once there
from .client_logs import decision_log as _decider_log

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


DEFAULT_STATE_TOPIC = "__vcproxy_state"
Record = tuple[str, dict[str, Any] | None]

# Faster than librdkafka's defaults (10 s reconnect backoff): after a broker bounce the state must
# flow again within a second or two, and the state traffic is tiny.
RECONNECT = {
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 1000,
    "retry.backoff.max.ms": 1000,
    "log.connection.close": False,  # idle connections closed by the broker are routine, not news
    # Never let a state client's metadata request auto-create the state topic: a deleted state topic
    # would come back empty with the broker's defaults (cleanup.policy=delete) and every VC id lost.
    # (librdkafka's producer, and so the admin client, default to true.)
    "allow.auto.create.topics": False,
}


DECISION_ID, DECISION_SIZE, DECISION_INDEX = "vcproxy.txn", "vcproxy.n", "vcproxy.i"  # a decision's headers

TRANSACTION_TIMEOUT_MS = 10_000
# How long the broker may park the end reader's fetch (committed_end, holds_records): it reads only up to the end.
END_READ_WAIT_MS = 10


def decision_of(headers: Sequence[tuple[str, bytes | None]] | None) -> tuple[bytes, int, int] | None:
    """(decision id, records in it, this record's index) from a record's headers; None: a record alone
    (or headers that do not say it consistently: applied alone rather than held back forever)."""
    if not headers:
        return None
    found = {k: v for k, v in headers if k in (DECISION_ID, DECISION_SIZE, DECISION_INDEX)}
    try:
        txn, count, index = found[DECISION_ID], int(found[DECISION_SIZE] or b""), int(found[DECISION_INDEX] or b"")
    except (KeyError, ValueError):
        return None
    if not txn or not 0 <= index < count:
        return None
    return txn, count, index


class Assembler:
    """Puts each decision's records back together as the follower reads them (sans-I/O): a record alone
    is handed on at once, a decision's records when the last of them arrived, in their index order.
    Offsets say where following resumes with nothing skipped: before the first record of a decision
    still incomplete (a follower restarted there reads it whole again)."""

    def __init__(self) -> None:
        self._groups: dict[bytes, tuple[int, int, dict[int, Record]]] = {}  # id -> (first offset, count, records)

    def record(self, offset: int, record: Record, headers: Any) -> tuple[list[Record], int]:
        """(records to apply now, the offset to resume at) for the record at `offset`."""
        member = decision_of(headers)
        if member is None:
            return [record], self.resume_at(offset + 1)
        txn, count, index = member
        _, count, records = self._groups.setdefault(txn, (offset, count, {}))  # the first record says how many
        records[index] = record
        if len(records) < count:
            return [], self.resume_at(offset + 1)
        del self._groups[txn]
        return [r for _, r in sorted(records.items())], self.resume_at(offset + 1)

    def resume_at(self, offset: int) -> int:
        return min([offset, *(first for first, _, _ in self._groups.values())])

    def end(self) -> list[Record]:
        """At the end of the partition: decisions still incomplete lost records to compaction (their
        newer versions were applied already); what is left of them, oldest first."""
        left = sorted(self._groups.values(), key=lambda g: g[0])
        self._groups.clear()
        if left:
            log.warning("state topic: %d decision(s) incomplete at the end (compacted): applying the rest", len(left))
        return [r for _, _, records in left for _, r in sorted(records.items())]


def _admin_call(method: Callable[Concatenate[StateStore, P], R]) -> Callable[Concatenate[StateStore, P], R]:
    """A store call that makes an admin client: once it has returned (its frame gone), the client is
    destroyed on this thread, and its broker connections closed with it."""

    @functools.wraps(method)
    def call(store: StateStore, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(store, *args, **kwargs)
        finally:
            store._admins.sweep()

    return call


class StateStoreError(InternalFault, OSError):
    """The state topic cannot be used; `retriable` is False for misconfiguration (retrying won't help).

    An OSError: like a broker connection failing, a failed state write ends the one client connection
    whose change it was (the client retries), and is not a bug."""

    def __init__(self, message: str, retriable: bool = True):
        super().__init__(message)
        self.retriable = retriable


class Fenced(StateStoreError):
    """Another replica began deciding since this one did: the decision was not committed; decide again."""


_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


class Applies(Protocol):
    def apply(self, key: str, value: dict[str, Any] | None) -> None: ...


def encode_value(value: dict[str, Any] | None) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def decode(key: bytes | None, value: bytes | None) -> Record:
    """(key, value) of a state record; ValueError if it is not one (a foreign or corrupt record)."""
    if key is None:
        raise ValueError("record without a key")
    text = key.decode()
    parts = json.loads(text)
    if not isinstance(parts, list) or not parts or not all(isinstance(p, str) for p in parts):
        raise ValueError(f"key {text!r} is not a JSON array of strings")
    if value is None:
        return text, None
    decoded = json.loads(value)
    if not isinstance(decoded, dict):
        raise ValueError(f"value of {text!r} is not a JSON object")
    return text, decoded


class StateStore:
    """Ensure, replay, write and follow the state topic. Every method blocks; none touches Trio."""

    def __init__(
        self,
        client_config: dict[str, Any],
        topic: str = DEFAULT_STATE_TOPIC,
        replication_factor: int | None = None,
    ):
        if "bootstrap.servers" not in client_config:
            raise ValueError("client_config needs bootstrap.servers")
        self.client_config = dict(client_config)
        self.topic = topic
        self.replication_factor = replication_factor
        self.replayed_offset: int | None = None  # next offset after the last replayed record
        self.topic_id: str | None = None  # the state topic's id when it was ensured
        self._producer: Producer | None = None
        self._producer_lock = threading.Lock()
        self._decider: Producer | None = None  # the transactional producer of decisions (one thread at a time)
        self._decider_ready = False  # init_transactions succeeded: this replica holds the current epoch
        self._ends: Consumer | None = None  # asks the partition's last stable offset
        self._ends_lock = threading.Lock()
        self._admins = AdminHandles(lambda: AdminClient(self._conf({})))

    # -- clients ---------------------------------------------------------------------------------

    def _conf(self, settings: dict[str, Any]) -> dict[str, Any]:
        # The caller's connection and security settings, but never its delivery semantics.
        return {**RECONNECT, **self.client_config, **settings, "logger": _client_log}

    def _admin(self) -> AdminClient:
        # Its logs reach _client_log when polled. Held until unused and destroyed on a caller's thread:
        # see admin_handles.py for the abort that prevents.
        return self._admins.new()

    def _consumer(self, settings: dict[str, Any] | None = None) -> Consumer:
        return Consumer(
            self._conf(
                {
                    # Required by librdkafka, but unused: partitions are assigned by hand and nothing
                    # is committed, so replicas never share work or rebalance.
                    "group.id": f"vcproxy-state-{uuid.uuid4()}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                    "enable.partition.eof": True,
                    # Only committed decisions (and the idempotent producer's records): a decision whose
                    # transaction was aborted (its writer fenced) never reaches any image.
                    "isolation.level": "read_committed",
                    **(settings or {}),
                }
            )
        )

    def _get_producer(self) -> Producer:
        with self._producer_lock:
            if self._producer is None:
                self._producer = Producer(self._conf({"enable.idempotence": True, "acks": "all", "linger.ms": 0}))
            return self._producer

    def prepare_writes(self) -> None:
        """Create the producer now: it fetches its idempotence id in the background, which would
        otherwise add a few hundred ms to the first write."""
        self._get_producer()

    def _drop_producer(self, producer: Producer) -> None:
        """Forget a producer after a failure (an idempotent producer may be in a fatal state)."""
        with self._producer_lock:
            if self._producer is producer:
                self._producer = None
        producer.purge()  # what was not sent must not land after we reported failure
        producer.flush(0)

    def close(self) -> None:
        with self._producer_lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(5)
        self._drop_decider()
        with self._ends_lock:
            ends, self._ends = self._ends, None
        if ends is not None:
            ends.close()
        self._admins.release()

    # -- topic -----------------------------------------------------------------------------------

    @_admin_call
    def exists(self, timeout: float = 30) -> bool:
        admin = self._admin()
        try:
            return self.topic in admin.list_topics(timeout=timeout).topics
        except KafkaException as exc:
            raise StateStoreError(f"cannot reach the upstream cluster: {exc}") from None
        finally:
            admin.poll(0)  # hand its queued logs to _client_log

    @_admin_call
    def topic_names(self, timeout: float = 30) -> set[str]:
        """Every topic on the upstream cluster (for orphan detection, every few seconds: the kept client)."""
        admin = self._admins.kept()
        try:
            return set(admin.list_topics(timeout=timeout).topics)
        except KafkaException as exc:
            raise StateStoreError(f"cannot reach the upstream cluster: {exc}") from None
        finally:
            admin.poll(0)

    @_admin_call
    def delete_topics(self, names: Sequence[str], timeout: float = 30) -> dict[str, str | None]:
        """Delete physical topics; name -> None when deleted, else the error."""
        if not names:
            return {}
        admin = self._admin()
        out: dict[str, str | None] = {}
        try:
            for name, future in admin.delete_topics(list(names), request_timeout=timeout).items():
                try:
                    future.result(timeout)
                    out[name] = None
                except KafkaException as exc:
                    out[name] = exc.args[0].str()
                except TimeoutError:
                    out[name] = f"timed out after {timeout} s"
            return out
        finally:
            admin.poll(0)

    @_admin_call
    def ensure_topic(self, timeout: float = 30, create: bool = True, new_cluster: bool = False) -> None:
        """Create the topic if missing (1 partition, compacted) and `create`; refuse an existing one that
        is not. Remembers the topic id, so `check()` can tell a deleted and re-created topic. On a cluster
        the caller knows to be new (the demo's), a missing topic is no surprise: no warning then."""
        admin = self._admin()
        try:
            try:
                metadata = admin.list_topics(timeout=timeout)
            except KafkaException as exc:
                raise StateStoreError(f"cannot reach the upstream cluster: {exc}") from None
            if self.topic not in metadata.topics:
                if not create:
                    raise StateStoreError(
                        f"state topic {self.topic} does not exist and tenancy.create_state_topic is false: "
                        "restore it with `vcproxy state import` (or set create_state_topic for a first start)"
                    )
                if new_cluster:
                    log.info("creating the state topic %s on the new cluster", self.topic)
                else:
                    log.warning(
                        "state topic %s does not exist: creating it empty (a first start; if it existed before, "
                        "stop and restore a backup with `vcproxy state import`)",
                        self.topic,
                    )
                self._create(admin, len(metadata.brokers), timeout)
            self._verify(admin, self._wait_for_leader(admin, timeout), timeout)
            self.topic_id = self._known_topic_id(admin, timeout)
        finally:
            admin.poll(0)

    def _known_topic_id(self, admin: AdminClient, timeout: float) -> str:
        """The id of a topic known to exist. A broker whose metadata has not caught up with a topic just
        created answers as if it did not: ask again until the deadline, or `check()` could not tell a
        deleted and re-created topic later."""
        deadline = time.monotonic() + timeout
        while (topic_id := self._topic_id(admin, timeout)) is None:
            if time.monotonic() >= deadline:
                raise StateStoreError(f"state topic {self.topic} exists but no broker describes it after {timeout} s")
            time.sleep(0.2)
        return topic_id

    def _topic_id(self, admin: AdminClient, timeout: float) -> str | None:
        try:
            return topic_id_of(admin, self.topic, timeout)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return None
            raise StateStoreError(f"cannot describe state topic {self.topic}: {exc.args[0].str()}") from None
        except TimeoutError:  # a slow or loaded cluster: retried like an unreachable one, never fatal
            raise StateStoreError(f"describing state topic {self.topic} timed out after {timeout} s") from None

    @_admin_call
    def check(self, timeout: float = 10) -> str | None:
        """Why the state topic cannot take changes now, or None. Never creates anything: a state topic
        that was deleted, re-created (another topic id) or reconfigured needs an operator. Asked every few
        seconds: on the kept client, whose broker connection stays open between checks."""
        admin = self._admins.kept()
        try:
            topic_id = self._topic_id(admin, timeout)
            if topic_id is None:
                return self._missing()
            if self.topic_id is not None and topic_id != self.topic_id:
                return (
                    f"state topic {self.topic} was deleted and re-created (topic id {topic_id}, replayed "
                    f"{self.topic_id}); restore it with `vcproxy state import`, then restart the proxy"
                )
            metadata = admin.list_topics(self.topic, timeout=timeout).topics[self.topic]
            try:
                self._verify(admin, metadata, timeout)
            except StateStoreError as exc:
                # Deleted between the looks: the broker that described it had not heard yet. Say so, not
                # "cannot describe" (an operator restores a deleted topic; /readyz says which it is).
                if exc.retriable and self._topic_id(admin, timeout) is None:
                    return self._missing()
                return str(exc)
            return None
        except KafkaException as exc:
            raise StateStoreError(f"cannot reach the upstream cluster: {exc}") from None
        finally:
            admin.poll(0)

    def _missing(self) -> str:
        return f"state topic {self.topic} does not exist (deleted?); restore it with `vcproxy state import`"

    def _wait_for_leader(self, admin: AdminClient, timeout: float) -> Any:
        """The topic's metadata once its partitions have leaders (not so right after creation)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                topic = admin.list_topics(self.topic, timeout=timeout).topics[self.topic]
            except KafkaException as exc:
                raise StateStoreError(f"cannot reach the upstream cluster: {exc}") from None
            if topic.error is None and all(p.leader >= 0 and p.error is None for p in topic.partitions.values()):
                return topic
            if time.monotonic() >= deadline:
                return topic  # _verify reports what is wrong
            time.sleep(0.1)

    def _create(self, admin: AdminClient, brokers: int, timeout: float) -> None:
        rf = self.replication_factor or min(3, max(brokers, 1))
        config = {"cleanup.policy": "compact"}
        if rf >= 3:
            config["min.insync.replicas"] = "2"
        future = admin.create_topics([NewTopic(self.topic, 1, rf, config=config)], request_timeout=timeout)[self.topic]
        try:
            future.result(timeout)
            log.info("created state topic %s (1 partition, replication factor %d, compacted)", self.topic, rf)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another replica won the race
                raise StateStoreError(f"cannot create state topic {self.topic}: {exc.args[0].str()}") from None
        except TimeoutError:
            raise StateStoreError(f"creating state topic {self.topic} timed out after {timeout} s") from None

    def _verify(self, admin: AdminClient, topic: Any, timeout: float) -> None:
        if topic.error is not None:
            raise StateStoreError(f"state topic {self.topic}: {topic.error.str()}")
        if len(topic.partitions) != 1:
            raise StateStoreError(
                f"state topic {self.topic} has {len(topic.partitions)} partitions; it needs exactly 1 "
                "(one total order of state changes)",
                retriable=False,
            )
        resource = ConfigResource(ConfigResource.Type.TOPIC, self.topic)
        deadline = time.monotonic() + timeout
        while True:
            try:
                configs = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
                break
            except KafkaException as exc:
                # A topic just created may not have reached every broker's metadata yet: retry that.
                unknown = exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                if not unknown or time.monotonic() > deadline:
                    raise StateStoreError(f"cannot describe state topic {self.topic}: {exc.args[0].str()}") from None
                time.sleep(0.2)
            except TimeoutError:
                raise StateStoreError(f"describing state topic {self.topic} timed out after {timeout} s") from None
        policy = configs["cleanup.policy"].value or ""
        if "compact" not in policy.split(","):
            raise StateStoreError(
                f"state topic {self.topic} has cleanup.policy={policy}; it must be compact, or old "
                "state would be deleted by retention (fix with kafka-configs --alter --add-config "
                "cleanup.policy=compact, or choose another tenancy.state_topic)",
                retriable=False,
            )

    # -- reading ---------------------------------------------------------------------------------

    def end_offsets(self, timeout: float = 30) -> tuple[int, int]:
        consumer = self._consumer()
        try:
            return self._watermarks(consumer, timeout)
        finally:
            consumer.close()

    def _watermarks(self, consumer: Consumer, timeout: float) -> tuple[int, int]:
        deadline = time.monotonic() + timeout
        while True:  # right after creation the partition may have no leader yet
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=min(5, timeout))
                return low, high
            except KafkaException as exc:
                if time.monotonic() >= deadline:
                    raise StateStoreError(f"cannot read the end of state topic {self.topic}: {exc}") from None
                time.sleep(0.2)

    def replay(self, image: Applies, timeout: float = 30) -> int:
        """Apply every record up to the end offset seen at the start; returns how many were applied.

        `timeout` bounds the time without progress, not the whole replay: a large state topic on a busy
        host (300,000 records take 5-6 s of CPU alone) must not time out and start over for ever."""
        deadline = time.monotonic() + timeout
        consumer = self._consumer()
        try:
            low, high = self._watermarks(consumer, timeout)
            count, position = 0, low
            if position < high:
                consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            while position < high:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StateStoreError(
                        f"replay of {self.topic} made no progress for {timeout} s at offset {position} of {high}"
                    )
                msg = consumer.poll(min(remaining, 1.0))
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        position = max(position, msg.offset())  # the rest before `high` was compacted away
                    elif err.fatal():
                        raise StateStoreError(f"replay of {self.topic} failed: {err.str()}")
                    else:  # the client retries; the deadline bounds how long
                        log.warning("replay of %s: %s (retrying)", self.topic, err.str())
                    continue
                position = msg.offset() + 1
                deadline = time.monotonic() + timeout  # progress: the bound starts again
                if msg.offset() >= high:
                    break  # written after we started: the follower applies it
                if _apply(image, msg):
                    count += 1
            self.replayed_offset = high  # the follower starts here, so nothing is skipped or repeated
            return count
        finally:
            consumer.close()

    def follow(
        self,
        on_batch: Callable[[list[Record], int], None],
        stop: threading.Event,
        *,
        start_offset: int | None = None,
        poll_interval: float = 0.2,
    ) -> None:
        """Call `on_batch(records, next_offset)` from `start_offset` (default: where replay ended) until
        `stop` is set: a record alone, or every record of one decision at once (its `vcproxy.txn` headers,
        docs/state.md), so that no reader ever sees half a change. `next_offset`: where following would
        resume with nothing skipped (before the first record of a decision still incomplete); records may
        be empty (a skipped record, the end of the partition). A decision still incomplete at the end of
        the partition lost records to compaction: what is left is applied then. Broker failures are logged
        and retried by the client; an exception from the callback ends the loop."""
        if start_offset is None:
            start_offset = self.replayed_offset if self.replayed_offset is not None else OFFSET_BEGINNING
        # fetch.wait.max.ms bounds how long the broker parks an empty fetch; new records are returned
        # as soon as they are committed (fetch.min.bytes=1), so changes arrive in a few ms. The end of the
        # partition is reported: its offset is past the transactions' commit markers, which no record shows.
        consumer = self._consumer({"fetch.wait.max.ms": 500})
        consumer.assign([TopicPartition(self.topic, 0, start_offset)])
        failing = False
        decisions = Assembler()
        try:
            while not stop.is_set():
                msg = consumer.poll(poll_interval)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        on_batch(decisions.end(), msg.offset())
                        continue
                    # Transport errors, leader changes, a missing topic: librdkafka keeps retrying.
                    if err.fatal():
                        raise StateStoreError(f"following {self.topic} failed: {err.str()}")
                    log.log(
                        logging.DEBUG if failing else logging.WARNING,
                        "state topic %s: %s (still following)",
                        self.topic,
                        err.str(),
                    )
                    failing = True
                    continue
                if failing:
                    log.info("state topic %s: following again at offset %d", self.topic, msg.offset())
                    failing = False
                try:
                    record = decode(msg.key(), msg.value())
                except ValueError as exc:
                    log.error("state topic %s offset %d: skipping bad record: %s", self.topic, msg.offset(), exc)
                    on_batch([], decisions.resume_at(msg.offset() + 1))
                    continue
                on_batch(*decisions.record(msg.offset(), record, msg.headers()))
        finally:
            consumer.close()

    # -- deciding (docs/security.md#the-write-protocol) -------------------------------------------

    def begin_deciding(self, timeout: float = 30) -> None:
        """Hold the decisions' epoch: every replica's decision producer shares one transactional.id, so
        its init_transactions fences the others' and aborts their open transaction. Done once; again
        only after this replica was fenced (`commit` dropped its producer)."""
        if self._decider is not None and self._decider_ready:
            return
        if self._decider is None:
            self._decider = Producer(
                self._conf(
                    {
                        "transactional.id": decisions_id(self.topic),
                        "enable.idempotence": True,
                        "acks": "all",
                        "linger.ms": 0,
                        # A replica that dies mid-decision holds back every reader (the last stable offset)
                        # until the next replica's init aborts its transaction, or until this.
                        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                    }
                )
                | {"logger": _decider_log}
            )
            self._decider_ready = False
        try:
            self._decider.init_transactions(timeout)
        except KafkaException as exc:
            self._drop_decider()
            raise StateStoreError(f"cannot start deciding on {self.topic}: {exc.args[0].str()}") from None
        self._decider_ready = True

    def committed_end(self, timeout: float = 30) -> int:
        """The partition's last stable offset (read_committed). A commit returns before the coordinator
        has written its marker: only after `begin_deciding` (whose init waits for the previous transaction
        to complete) does every decision committed before lie below it."""
        with self._ends_lock:
            return self._watermarks(self._end_reader(), timeout)[1]

    def _end_reader(self) -> Consumer:
        if self._ends is None:  # it reads only to the end: an empty fetch there is answered at once, not parked
            self._ends = self._consumer({"fetch.wait.max.ms": END_READ_WAIT_MS})
        return self._ends

    def holds_records(self, start: int, end: int, timeout: float = 30) -> bool:
        """Whether a committed record lies in [start, end): one read from `start`. The follower learns that
        only markers (or aborted records) lie before `end` from its next fetch, which the broker parks up to
        fetch.wait.max.ms when nothing new is there: after every commit, whose marker no record shows, a
        decision waiting for it would wait that long for nothing. True when the read does not settle it
        (a stale end, a timeout): the caller then waits for the follower, as without this read."""
        if start >= end:
            return False
        deadline = time.monotonic() + timeout
        with self._ends_lock:
            consumer = self._end_reader()
            consumer.assign([TopicPartition(self.topic, 0, start)])
            try:
                while (remaining := deadline - time.monotonic()) > 0:
                    msg = consumer.poll(min(remaining, 1.0))
                    if msg is None:
                        continue
                    err = msg.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        if err.fatal():
                            return True
                        continue  # the client retries
                    if msg.offset() < start:
                        continue  # a report of an earlier read's position
                    # A record before `end`: True. A record at or past it, or the end of the partition there:
                    # nothing lies in between. The end of the partition before it: unsettled (True).
                    return msg.offset() < end
                return True
            finally:
                consumer.unassign()

    def commit(self, records: Sequence[Record], timeout: float = 30) -> list[int]:
        """Write one decision's records in one transaction, each with the decision's headers; their
        offsets once committed. Fenced (retriable): another replica began deciding since `begin_deciding`,
        so this decision was made against a log that may have changed; nothing of it was committed."""
        producer = self._decider
        if producer is None or not self._decider_ready:
            raise Fenced(f"not holding the decisions' epoch on {self.topic}")
        txn = uuid.uuid4().hex.encode()
        deliveries = _Deliveries(len(records))
        offsets, errors, delivered = deliveries.offsets, deliveries.errors, deliveries.callback

        count = str(len(records)).encode()
        deadline = time.monotonic() + timeout
        try:
            producer.begin_transaction()
            for index, (key, value) in enumerate(records):
                headers = [(DECISION_ID, txn), (DECISION_SIZE, count), (DECISION_INDEX, str(index).encode())]
                while True:
                    try:
                        producer.produce(
                            self.topic,
                            key=key.encode(),
                            value=encode_value(value),
                            headers=headers,
                            on_delivery=delivered(index),
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.commit_transaction(max(deadline - time.monotonic(), 0.1))
            while any(o is None for o in offsets) and not errors and time.monotonic() < deadline:
                producer.poll(0.05)  # the delivery reports of a committed transaction
        except KafkaException as exc:
            err = exc.args[0]
            self._abandon(producer, err)
            if err.fatal() or err.code() in _FENCED_CODES:
                raise Fenced(f"deciding on {self.topic}: fenced ({err.str()})") from None
            raise StateStoreError(
                f"writing a decision of {len(records)} record(s) to {self.topic} failed: {err.str()}"
            ) from None
        if errors or any(o is None for o in offsets):
            # Committed (commit_transaction succeeded), but an offset is unknown: the caller waits for the end.
            log.warning("decision committed to %s without every offset reported: %s", self.topic, errors)
            return []
        return [o for o in offsets if o is not None]

    def _abandon(self, producer: Producer, err: KafkaError) -> None:
        """After a failed transaction: abort it if the producer can, else drop the producer (fenced, fatal)."""
        if not err.fatal() and err.code() not in _FENCED_CODES:
            try:
                producer.abort_transaction(10)
                return
            except KafkaException as exc:
                log.debug("aborting a decision on %s failed: %s", self.topic, exc)
        self._drop_decider()

    def _drop_decider(self) -> None:
        producer, self._decider, self._decider_ready = self._decider, None, False
        if producer is not None:
            try:
                producer.purge()
                producer.flush(0)
            except KafkaException:
                pass

    # -- writing ---------------------------------------------------------------------------------

    def write(self, records: Sequence[Record], timeout: float = 30) -> list[int]:
        """Write records durably (idempotent producer, acks=all) in order; returns their offsets.
        Raises StateStoreError unless every record was acknowledged within `timeout`."""
        if not records:
            return []
        producer = self._get_producer()
        deliveries = _Deliveries(len(records))
        offsets, errors, delivered = deliveries.offsets, deliveries.errors, deliveries.callback

        try:
            for index, (key, value) in enumerate(records):
                while True:
                    try:
                        producer.produce(
                            self.topic, key=key.encode(), value=encode_value(value), on_delivery=delivered(index)
                        )
                        break
                    except BufferError:  # queue full: let deliveries drain
                        producer.poll(0.05)
            deadline = time.monotonic() + timeout
            while any(o is None for o in offsets) and not errors and time.monotonic() < deadline:
                producer.flush(min(0.5, max(deadline - time.monotonic(), 0)))
        except KafkaException as exc:
            errors.append(str(exc))
        if errors or any(o is None for o in offsets):
            reason = errors[0] if errors else f"not acknowledged within {timeout} s"
            self._drop_producer(producer)
            raise StateStoreError(f"writing {len(records)} record(s) to {self.topic} failed: {reason}")
        return [o for o in offsets if o is not None]


def topic_id_of(admin: AdminClient, topic: str, timeout: float) -> str | None:
    """A topic's id as a UUID string (KafkaException if it cannot be described, TimeoutError)."""
    described = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic]
    kafka_id = described.result(timeout).topic_id  # str() is Kafka's base64 form: make it a UUID
    mask = (1 << 64) - 1
    most, least = kafka_id.get_most_significant_bits(), kafka_id.get_least_significant_bits()
    return str(uuid.UUID(int=((most & mask) << 64) | (least & mask)))


class _Deliveries:
    """Where a batch of produced records landed: each record's offset, or the errors librdkafka reported."""

    def __init__(self, count: int):
        self.offsets: list[int | None] = [None] * count
        self.errors: list[str] = []

    def callback(self, index: int) -> Callable[[KafkaError | None, Any], None]:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.errors.append(err.str())
            else:
                self.offsets[index] = msg.offset()

        return delivered


def _apply(image: Applies, msg: Any) -> bool:
    try:
        key, value = decode(msg.key(), msg.value())
    except ValueError as exc:
        log.error("skipping bad record at offset %d: %s", msg.offset(), exc)
        return False
    image.apply(key, value)
    return True
