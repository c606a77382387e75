"""The proxy's fetch-session table is bounded per VC as well as in total (issue 56): a busy consumer whose Fetches the
forwarder serves keeps its session while another VC opens sessions by the thousand and its own VC's other clients
come and go. One real proxy (forwarder on, small table limits so that they are reached quickly) in front of the
session's real Kafka; raw protocol clients (tests/integration/rawclient.py)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from vcproxy_tools.process import ProxyProcess

from .hardening_attacks import login
from .ports import free_port, free_port_block
from .rawclient import RawClient
from .tenants import sasl_tenants_config
from .test_availability import warm_up
from .test_observability import metrics_port, scrape, total
from .test_tenant_hardening import ensure_topic, fetch, metadata, ready_topic

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
FETCH = 1
PER_VC, TOTAL = 60, 100
# The broker keeps at most max.incremental.fetch.session.cache.slots (1000) sessions each, for the session's other
# tests too: bob's thousands are spread over every broker, and stay well under that on each.
BOB_SESSIONS = 2100
ALICE_CHURN = 150
# Alice's own clients open a session every this long: the forwarder's uses reach the table once a second
# (proxy/net/forwarder.py, SESSIONS_EVERY), and a VC replacing its whole bound faster than that is not what this
# measures. PER_VC - 1 openings take 6 s at this pace, room for a late tick on a loaded machine.
ALICE_PACE = 0.1


@pytest.fixture(scope="module")
def proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    config = sasl_tenants_config(
        kafka_cluster,
        free_port_block(),
        USERS,
        tenancy={"auto_create_topics": True},
        limits={"max_fetch_sessions_per_vc": PER_VC, "max_fetch_sessions": TOTAL},
        metrics={"enabled": True, "port": free_port()},
    )
    process = ProxyProcess(config, tmp_path_factory.mktemp("tables"), name="tables").start(timeout=120)
    warm_up(process.bootstrap)
    yield process
    process.stop()


def as_user(proxy: ProxyProcess, user: str, address: str | None = None) -> RawClient:
    assert proxy.proc is not None and proxy.proc.poll() is None, f"proxy died:\n{proxy.log_tail()}"
    return login(address or proxy.bootstrap, user, USERS[user])


def open_sessions(client: RawClient, count: int, cid: int) -> list[int]:
    """`count` new fetch sessions of nothing (epoch 0), pipelined 50 at a time: the ids the broker gave."""
    ids = []
    for start in range(0, count, 50):
        batch = range(cid + start, cid + min(start + 50, count))
        client.send_raw(b"".join(RawClient.encode(FETCH, 13, c, fetch(0, 0)) for c in batch))
        for c in batch:
            got, body = RawClient.decode(FETCH, 13, client.read_frame())
            assert got == c and body.error_code == 0, (got, c, body.error_code)
            ids.append(body.session_id)
    return ids


def forwarded_fetches(proxy: ProxyProcess, vc: str) -> float:
    return total(scrape(metrics_port(proxy)), "vcproxy_forwarded_requests_total", api="Fetch", vc=vc)


def test_a_busy_consumers_session_survives_another_vc_opening_thousands(proxy):
    topic = f"tables-{uuid.uuid4().hex[:6]}"
    with as_user(proxy, "alice") as alice:
        ensure_topic(alice, topic)
        entry, leader = ready_topic(alice, topic)
    with as_user(proxy, "bob") as bob:
        brokers = [f"{b.host}:{b.port}" for b in metadata(bob).brokers]
    assert len(brokers) >= 2
    before = forwarded_fetches(proxy, "team-a")

    consumer, churn = as_user(proxy, "alice", leader), as_user(proxy, "alice", leader)
    bobs = [as_user(proxy, "bob", address) for address in brokers]
    try:
        _, opened = consumer.request(FETCH, 13, 10, fetch(0, 0, entry.topic_id))
        assert opened.error_code == 0 and opened.session_id != 0
        session = opened.session_id
        # The consumer's Fetches go by the forwarder from here on: the Python path never sees its session again
        # unless the forwarder hands the connection back.
        for epoch in range(1, 11):
            _, body = consumer.request(FETCH, 13, 10 + epoch, fetch(session, epoch))
            assert (body.error_code, body.session_id) == (0, session)
        assert forwarded_fetches(proxy, "team-a") - before >= 5
        firsts = []
        opened_by_bob = 0
        for i in range(ALICE_CHURN):
            # Alice's other clients come and go; bob opens sessions steadily, on every broker.
            alice_opened = open_sessions(churn, 1, 200 + i)
            share = BOB_SESSIONS // ALICE_CHURN
            bob_opened = open_sessions(bobs[i % len(bobs)], share, 1000 + i * share)
            opened_by_bob += sum(1 for s in bob_opened if s)
            firsts = firsts or [alice_opened[0], bob_opened[0]]
            epoch = 11 + i
            _, body = consumer.request(FETCH, 13, 20_000 + i, fetch(session, epoch))
            assert (body.error_code, body.session_id) == (0, session), f"after {i} rounds: {body.error_code}"
            time.sleep(ALICE_PACE)  # a pace, not a wait for a condition
        assert opened_by_bob >= 2000  # each a session of the broker's (not 0: its cache had room)
        # The consumer's Fetches went by the forwarder, which told the table they used the session.
        assert forwarded_fetches(proxy, "team-a") - before >= ALICE_CHURN // 2

        # The bounds are real: the churners' first sessions are gone from the table (each VC's own churn).
        assert all(firsts)
        for client, first in zip((churn, bobs[0]), firsts, strict=True):
            _, gone = client.request(FETCH, 13, 90_000, fetch(first, 1))
            assert gone.error_code == ErrorCode.fetch_session_id_not_found
    finally:
        for client in (consumer, churn, *bobs):
            client.close()
    log = proxy.log_path.read_text()
    assert not re.search(r"internal error|Traceback|panicked", log), log[-3000:]
