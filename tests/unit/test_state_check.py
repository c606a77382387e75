"""The state topic's periodic check names a deletion as a deletion even when the brokers disagree for a moment
(one still describes the topic, the next does not): a fake admin client answers as they did in a whole run."""

from __future__ import annotations

import types
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from proxy.state.admin_handles import AdminHandles
from proxy.state.store import StateStore

TOPIC = "__vcproxy_state_test"
UNKNOWN = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))


class _Future:
    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        self.value, self.error = value, error

    def result(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class _Uuid:
    def __init__(self, value: uuid.UUID) -> None:
        self.value = value

    def get_most_significant_bits(self) -> int:
        return self.value.int >> 64

    def get_least_significant_bits(self) -> int:
        return self.value.int & ((1 << 64) - 1)


class _Admin:
    """Describes the topic while `described` lasts, then answers it unknown; its configs are unknown."""

    def __init__(self, topic_id: uuid.UUID, described: int, configs_error: Exception | None = UNKNOWN) -> None:
        self.topic_id, self.described, self.configs_error = topic_id, described, configs_error

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, _Future]:
        if self.described > 0:
            self.described -= 1
            return {TOPIC: _Future(types.SimpleNamespace(topic_id=_Uuid(self.topic_id)))}
        return {TOPIC: _Future(error=UNKNOWN)}

    def list_topics(self, topic: str, timeout: float) -> Any:
        metadata = types.SimpleNamespace(error=None, partitions={0: object()})
        return types.SimpleNamespace(topics={TOPIC: metadata})

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, _Future]:
        configs = {"cleanup.policy": types.SimpleNamespace(value="compact")}
        return {resources[0]: _Future(configs, self.configs_error)}

    def poll(self, timeout: float) -> int:
        return 0


def _store(monkeypatch: pytest.MonkeyPatch, admin: _Admin) -> StateStore:
    store = StateStore({"bootstrap.servers": "unused:9092"}, TOPIC)
    store.topic_id = str(admin.topic_id)
    monkeypatch.setattr(store, "_admins", AdminHandles(lambda: admin))  # type: ignore[arg-type,return-value]
    return store


def test_a_topic_deleted_between_the_checks_looks_is_reported_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(monkeypatch, _Admin(uuid.uuid4(), described=1))
    problem = store.check(timeout=0.3)
    assert problem is not None and "does not exist (deleted?)" in problem, problem


def test_a_topic_that_is_there_but_cannot_be_described_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(monkeypatch, _Admin(uuid.uuid4(), described=2))
    problem = store.check(timeout=0.3)
    assert problem is not None and problem.startswith(f"cannot describe state topic {TOPIC}"), problem


def test_a_healthy_topic_has_no_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _store(monkeypatch, _Admin(uuid.uuid4(), described=2, configs_error=None)).check(timeout=0.3) is None
