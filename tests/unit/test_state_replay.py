"""Replay's time bound is on progress, not on the whole replay: a large state topic on a slow host finishes,
and a replay that stops advancing still fails (a fake consumer and a fake clock; the real one is in
tests/integration/test_state_store.py)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.state import store as store_module
from proxy.state.store import StateStore, StateStoreError, encode_value
from proxy.tenancy.model import vc_record


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class _Message:
    def __init__(self, offset: int, key: str, value: dict[str, Any]) -> None:
        self._offset, self._key, self._value = offset, key.encode(), encode_value(value)

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class _Consumer:
    """Hands out `records` one per poll, each poll costing `seconds` of the fake clock; then nothing."""

    def __init__(self, clock: _Clock, records: list[_Message], seconds: float) -> None:
        self.clock, self.records, self.seconds = clock, records, seconds

    def assign(self, partitions: list[Any]) -> None:
        pass

    def poll(self, timeout: float) -> _Message | None:
        if not self.records:
            self.clock.now += timeout
            return None
        self.clock.now += self.seconds
        return self.records.pop(0)

    def close(self) -> None:
        pass


class _Image:
    def __init__(self) -> None:
        self.applied: list[str] = []

    def apply(self, key: str, value: Any) -> None:
        self.applied.append(key)


def _store(monkeypatch: pytest.MonkeyPatch, clock: _Clock, consumer: _Consumer, high: int) -> StateStore:
    monkeypatch.setattr(store_module.time, "monotonic", clock.monotonic)
    store = StateStore({"bootstrap.servers": "unused:9092"})
    monkeypatch.setattr(store, "_consumer", lambda settings=None: consumer)
    monkeypatch.setattr(store, "_watermarks", lambda consumer, timeout: (0, high))
    return store


def _records(n: int) -> list[_Message]:
    return [_Message(i, *vc_record(f"vc-{i}")) for i in range(n)]


def test_a_replay_longer_than_its_timeout_finishes_while_it_makes_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    store = _store(monkeypatch, clock, _Consumer(clock, _records(100), seconds=1.0), high=100)
    image = _Image()
    assert store.replay(image, timeout=30) == 100  # 100 s of fake time, never 30 s without a record
    assert len(image.applied) == 100
    assert store.replayed_offset == 100


def test_a_replay_that_stops_advancing_fails_after_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    store = _store(monkeypatch, clock, _Consumer(clock, _records(10), seconds=1.0), high=100)
    with pytest.raises(StateStoreError, match="made no progress for 30 s at offset 10 of 100"):
        store.replay(_Image(), timeout=30)
    assert clock.now <= 10 + 30 + 1  # it gave up one timeout after the last record, not later
