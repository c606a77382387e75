"""A running proxy watches its state topic (issue 8, class 10): sans-I/O parts and the Trio glue with a fake store."""

from __future__ import annotations

import types
import uuid

import pytest
import trio

from proxy.observability.http import server_readiness
from proxy.state.service import TenancyService
from proxy.state.store import StateStoreError
from proxy.tenancy.model import link_record, topic_record, vc_record


class _Store:
    topic = "__vcproxy_state"

    def __init__(self) -> None:
        self.written: list = []
        self.problem: str | None = None
        self.checks = 0

    def write(self, records, timeout):
        self.written.extend(records)
        return list(range(len(records)))

    def check(self, timeout):
        self.checks += 1
        return self.problem


async def test_the_watch_marks_the_state_unusable_and_writes_are_refused_then_usable_again():
    store = _Store()
    service = TenancyService(store, check_interval=0.01)  # type: ignore[arg-type]
    await service.write([vc_record("team-a")])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service._watch)
        store.problem = "state topic __vcproxy_state does not exist (deleted?)"
        with trio.fail_after(5):
            while service.problem is None:
                await trio.sleep(0.01)
        assert service.image.state_problem == store.problem  # what CreateTopics/DeleteTopics answer with
        with pytest.raises(StateStoreError, match="does not exist"):
            await service.write([link_record("team-a", "orders", f"{uuid.uuid4()}.orders")])
        written = len(store.written)
        physical, topic_id = f"{uuid.uuid4()}.x", uuid.uuid4()
        await service.write([topic_record(physical, topic_id)])  # a fact from the broker: kept in memory
        assert service.image.topic_ids[physical] == topic_id and len(store.written) == written
        store.problem = None
        with trio.fail_after(5):
            while service.problem is not None:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


def test_readyz_says_why_the_state_is_unusable():
    tenancy = types.SimpleNamespace(ready=trio.Event(), problem="state topic t does not exist (deleted?)")
    tenancy.ready.set()
    server = types.SimpleNamespace(
        draining=False,
        tenancy=tenancy,
        config=types.SimpleNamespace(tenancy=types.SimpleNamespace(enabled=True, state_topic="t")),
    )
    ready, reason = server_readiness(server)
    assert not ready and reason == "virtual-cluster state unusable: state topic t does not exist (deleted?)"


class _SlowAdmin:
    """An admin client whose every answer times out, as on a cluster too loaded to answer in time."""

    class _Late:
        def result(self, timeout=None):
            raise TimeoutError

    def describe_topics(self, topics, request_timeout):
        return {name: self._Late() for name in topics.topic_names}

    def poll(self, timeout):
        return 0


def test_a_state_check_that_times_out_is_a_state_store_error_not_a_crash(monkeypatch):
    """A describe that outlived its timeout escaped the watch and stopped the whole proxy (seen under
    franz-go's suite on a loaded machine): it is an unreachable cluster, retried at the next check."""
    from proxy.state.admin_handles import AdminHandles
    from proxy.state.store import StateStore

    store = StateStore({"bootstrap.servers": "127.0.0.1:1"})
    monkeypatch.setattr(store, "_admins", AdminHandles(_SlowAdmin))  # type: ignore[arg-type]
    with pytest.raises(StateStoreError, match="timed out"):
        store.check(0.01)


async def test_the_watch_survives_a_check_that_fails():
    store = _Store()

    def failing(timeout):
        store.checks += 1
        raise StateStoreError("describing state topic __vcproxy_state timed out after 10 s")

    store.check = failing  # type: ignore[method-assign]
    service = TenancyService(store, check_interval=0.01)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service._watch)
        with trio.fail_after(5):
            while store.checks < 3:  # still checking after failures
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert service.problem is None
