"""A virtual cluster's topic policy (sans-I/O), like Kafka's CreateTopicPolicy and AlterConfigPolicy.

Members of a VC share the physical cluster: a topic with `segment.ms=1` or `flush.messages=1` costs
every tenant's brokers, and a VC with ten thousand topics costs everyone's controller. Operators set
what a VC may do (`tenancy.topic_policy`, overridable per VC in its seed entry: proxy/config.py, and its
limits at runtime: proxy/tenancy/settings.py); the
handlers (proxy/tenancy/handlers/) ask this module before anything reaches the broker:

* topic configs (CreateTopics, AlterConfigs, IncrementalAlterConfigs, Streams topologies): only the
  keys the policy lists may be set, each within its bounds; POLICY_VIOLATION with a message naming
  the key, as Kafka's policies answer;
* partitions per topic (CreateTopics, CreatePartitions, Streams topologies);
* topics per VC (links included: a topic linked into the VC counts like one it created; so does a
  physical topic the VC's DeleteTopics left behind, until it is deleted: `TenancyImage.orphans`) and
  partitions per VC (the partition counts the proxy knows: `TenancyImage.partitions`, learned from
  CreateTopics, CreatePartitions and Metadata; a topic whose count is not known yet counts as one).

`SAFE_DEFAULT` is what a VC gets when the operator says nothing; docs/tenancy.md explains its values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class ConfigRule:
    """What a tenant may set one topic config key to. A value passes when it is one of `values`, or
    (with `minimum` or `maximum`) a number within them; with neither, any value passes (the broker
    still validates it). `settable=False`: the key may not be set at all (the cluster's default applies)."""

    settable: bool = True
    minimum: float | None = None
    maximum: float | None = None
    values: frozenset[str] | None = None  # for list configs (cleanup.policy), each comma-separated element

    def refusal(self, key: str, value: str | None) -> str | None:
        if not self.settable:
            return f"Topic config '{key}' may not be set in this virtual cluster."
        if value is None:
            return None
        bounded = self.minimum is not None or self.maximum is not None
        if self.values is not None and not bounded:
            bad = [v for v in (e.strip() for e in value.split(",")) if v not in self.values]
            if bad:
                return f"Topic config '{key}' may not be {value!r}: allowed values are {sorted(self.values)}."
            return None
        if self.values is not None and value.strip() in self.values:
            return None
        if not bounded:
            return None
        try:
            number = float(value.strip())
        except ValueError:
            return None  # not a number: the broker answers INVALID_CONFIG, as it would anyway
        if math.isnan(number):
            return None
        if self.minimum is not None and number < self.minimum:
            return f"Topic config '{key}' must be at least {_num(self.minimum)}{self._also()} (got {value})."
        if self.maximum is not None and number > self.maximum:
            return f"Topic config '{key}' must be at most {_num(self.maximum)}{self._also()} (got {value})."
        return None

    def _also(self) -> str:
        return f" or one of {sorted(self.values)}" if self.values else ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
MIB = 1 << 20

# Kafka 4.x topic configs a tenant may set by default, and their bounds. Every other key is the
# cluster's (flush.*, preallocate, index sizes, tiered storage, unclean election, replication throttles...).
DEFAULT_CONFIGS: Mapping[str, ConfigRule] = MappingProxyType(
    {
        "cleanup.policy": ConfigRule(values=frozenset({"delete", "compact"})),
        "compression.type": ConfigRule(values=frozenset({"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"})),
        "compression.gzip.level": ConfigRule(),
        "compression.lz4.level": ConfigRule(),
        "compression.zstd.level": ConfigRule(),
        "delete.retention.ms": ConfigRule(minimum=0, maximum=7 * DAY_MS),
        "max.compaction.lag.ms": ConfigRule(minimum=HOUR_MS),
        "min.compaction.lag.ms": ConfigRule(minimum=0, maximum=7 * DAY_MS),
        "min.cleanable.dirty.ratio": ConfigRule(minimum=0.1, maximum=1.0),
        "max.message.bytes": ConfigRule(minimum=1024, maximum=8 * MIB),
        "message.timestamp.type": ConfigRule(values=frozenset({"CreateTime", "LogAppendTime"})),
        "message.timestamp.before.max.ms": ConfigRule(minimum=0),
        "message.timestamp.after.max.ms": ConfigRule(minimum=0, maximum=HOUR_MS),
        "min.insync.replicas": ConfigRule(minimum=1, maximum=3),
        # -1 (no time limit) stays allowed: Kafka Streams' repartition topics use it (and purge them).
        "retention.ms": ConfigRule(minimum=60_000, maximum=30 * DAY_MS, values=frozenset({"-1"})),
        "retention.bytes": ConfigRule(minimum=MIB, maximum=1 << 40, values=frozenset({"-1"})),
        "segment.ms": ConfigRule(minimum=HOUR_MS),
        "segment.bytes": ConfigRule(minimum=16 * MIB, maximum=1 << 30),
        "segment.jitter.ms": ConfigRule(minimum=0),
    }
)


# Every topic config name Kafka 4.2 knows (`TopicConfig` and the replication throttles). A name outside
# it is answered as the broker answers it, INVALID_CONFIG "Unknown topic config name", not as a policy
# refusal: a client tells a typo from a rule by that code. It only chooses which error a refusal carries:
# a policy that allows unlisted keys forwards them, and the broker judges.
KAFKA_TOPIC_CONFIGS = frozenset(
    {
        *("cleanup.policy", "compression.type", "compression.gzip.level", "compression.lz4.level"),
        *("compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms"),
        *("index.interval.bytes", "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms"),
        *("max.decompressed.message.bytes", "max.message.bytes", "message.downconversion.enable"),
        *("message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "message.timestamp.type"),
        *("min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate"),
        *("remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes"),
        *("retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms"),
        *("unclean.leader.election.enable", "leader.replication.throttled.replicas"),
        "follower.replication.throttled.replicas",
    }
)


# The least each limit may be set to, in `tenancy.topic_policy` (proxy/config.py) and as a VC's setting.
LIMIT_MINIMUMS = {"max_partitions_per_topic": 1, "max_topics": 0, "max_partitions": 0}


@dataclass(frozen=True)
class TopicPolicy:
    """One VC's topic policy. None for a limit: no limit."""

    configs: Mapping[str, ConfigRule] = field(default_factory=lambda: DEFAULT_CONFIGS)
    allow_unlisted_configs: bool = False  # keys `configs` does not name: settable (true) or refused
    max_partitions_per_topic: int | None = 128
    max_topics: int | None = 500  # per VC, links included
    max_partitions: int | None = 5000  # per VC, summed over its topics

    # -- configs ------------------------------------------------------------------------------------
    def config_refusal(self, key: str, value: str | None) -> str | None:
        """Why a tenant may not set `key` to `value` (None: it may). `value` None: deleting the override."""
        rule = self.configs.get(key)
        if rule is None:
            if self.allow_unlisted_configs:
                return None
            return f"Topic config '{key}' may not be set in this virtual cluster."
        return rule.refusal(key, value)

    def unknown_config(self, configs: Iterable[tuple[str, str | None]]) -> str | None:
        """Kafka's INVALID_CONFIG message for the first name it does not know, where this policy would
        refuse that name anyway (None: none, or the broker is left to judge it)."""
        for key, _ in configs:
            if key not in KAFKA_TOPIC_CONFIGS and key not in self.configs and not self.allow_unlisted_configs:
                return f"Unknown topic config name: {key}"
        return None

    def configs_refusal(self, configs: Iterable[tuple[str, str | None]]) -> str | None:
        for key, value in configs:
            why = self.config_refusal(key, value)
            if why is not None:
                return why
        return None

    # -- counts -------------------------------------------------------------------------------------
    def partitions_refusal(self, partitions: int) -> str | None:
        """A topic with this many partitions (-1/0: the broker's default, which the operator chose)."""
        limit = self.max_partitions_per_topic
        if limit is not None and partitions > limit:
            return f"Topics in this virtual cluster may have at most {limit} partitions (asked for {partitions})."
        return None

    def growth_refusal(self, usage: Usage, topics: int, partitions: int) -> str | None:
        """Adding `topics` topics and `partitions` partitions to a VC that has `usage`."""
        if topics and self.max_topics is not None and usage.topics + topics > self.max_topics:
            return f"This virtual cluster may have at most {self.max_topics} topics (it has {usage.topics})."
        if partitions and self.max_partitions is not None and usage.partitions + partitions > self.max_partitions:
            return (
                f"This virtual cluster may have at most {self.max_partitions} partitions "
                f"(it has {usage.partitions}, asked for {partitions} more)."
            )
        return None


SAFE_DEFAULT = TopicPolicy()
UNLIMITED = TopicPolicy(
    configs=MappingProxyType({}),
    allow_unlisted_configs=True,
    max_partitions_per_topic=None,
    max_topics=None,
    max_partitions=None,
)


@dataclass
class Usage:
    """What a VC has, counted as a request's checks go (each accepted item adds to it)."""

    topics: int
    partitions: int

    def add(self, topics: int, partitions: int) -> None:
        self.topics += topics
        self.partitions += partitions


def usage_of(vc: object, partitions: Mapping[str, int], orphans: Iterable[str] = ()) -> Usage:
    """A VC's topics (its links, and the physical topics its deletes left behind: `orphans`) and
    partitions (known counts; unknown ones count as one)."""
    physical = [*vc.links.values(), *orphans]  # type: ignore[attr-defined]
    return Usage(len(physical), sum(max(partitions.get(p, 1), 1) for p in physical))


class Budget:
    """One request's checks against a VC's policy: items are admitted one by one, each counting
    against the limits for the next (a CreateTopics of 10 topics when 5 are left admits 5)."""

    def __init__(self, policy: TopicPolicy, usage: Usage):
        self.policy = policy
        self.usage = usage

    def admit_topic(self, partitions: int, configs: Iterable[tuple[str, str | None]] = ()) -> str | None:
        """A new topic (`partitions` <= 0: the broker's default, counted as one). None: admitted."""
        why = self.policy.configs_refusal(configs) or self.policy.partitions_refusal(partitions)
        count = max(partitions, 1)
        why = why or self.policy.growth_refusal(self.usage, 1, count)
        if why is None:
            self.usage.add(1, count)
        return why

    def admit_partitions(self, current: int | None, total: int) -> str | None:
        """A topic growing to `total` partitions from `current` (None: unknown, counted as one)."""
        why = self.policy.partitions_refusal(total)
        more = max(total - (current if current is not None else 1), 0)
        why = why or self.policy.growth_refusal(self.usage, 0, more)
        if why is None:
            self.usage.add(0, more)
        return why
