"""The forwarder's table against the session, the reference: one reading of every request it serves.

A request the forwarder serves must be one the passthrough session forwards as the client sent it, with an
answer expected exactly when the session expects one, and whose answer the session leaves as the broker
sent it (unless it carries KIP-951 leader hints, which go back to the session's rewrite). Checked on a
valid request of every API version in the table, on mutants of them (the header is read by both), and on
arbitrary frames: wherever the forwarder says "mine", the session says "forward, unchanged".
"""

from __future__ import annotations

import os
import random
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import fuzz_session
from proxy.core import apiversions
from proxy.core.endpoints import ListenerLayout
from proxy.core.exchange import Action
from proxy.core.forward_table import entries_for, forward_entries
from proxy.core.session import ProtocolViolation, ProxySession
from proxy.protocol.apikey import ApiKey
from proxy.protocol.apis import request_type, response_type
from proxy.protocol.codec import decode
from proxy.protocol.headers import response_body_offset
from proxy.protocol.walker import regular_names, tags_start

from .wire import request_frame, response_frame, share_answer

try:
    import vcproxy_native
except ImportError:  # CI builds it: missing there is a failure, not a skip
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("vcproxy_native is not built (make .venv/.installed-test builds it)", allow_module_level=True)

LAYOUT = ListenerLayout("proxy.example", 9192, 9193)
ENTRIES = entries_for(tuple(sorted(apiversions.proxy_versions().items())))
TABLE = vcproxy_native.ForwardTable(ENTRIES)


def _session() -> ProxySession:
    return ProxySession(LAYOUT)


def _agree(frame: bytes) -> tuple[int, bool] | None:
    """The forwarder's reading of `frame`, after checking the session agrees wherever it serves it."""
    mine = TABLE.classify(frame)
    if mine is None:
        return None
    session = _session()
    try:
        decision = session.on_request(memoryview(frame))
    except ProtocolViolation as exc:
        raise AssertionError(f"the forwarder serves a frame the session refuses: {exc}") from exc
    assert decision.action is Action.FORWARD, decision
    assert decision.pieces is None and decision.frame is None  # sent as the client sent it
    correlation, answered = mine
    assert correlation == int.from_bytes(frame[8:12], "big", signed=True)
    assert (decision.pending is not None) == answered
    return mine


def test_the_table_is_what_a_passthrough_session_forwards_unchanged():
    keys = {entry[0] for entry in ENTRIES}
    assert ApiKey.PRODUCE in keys and ApiKey.FETCH in keys and ApiKey.OFFSET_COMMIT in keys
    for own in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.METADATA):
        assert own not in keys  # answered, converted or rewritten by a stage
    assert ApiKey.FIND_COORDINATOR not in keys and ApiKey.DESCRIBE_CLUSTER not in keys  # endpoints in the answer
    rng = random.Random(951)
    for key, version, acks, *_ in ENTRIES:
        for _ in range(2):
            frame = request_frame(
                key, version, rng.randrange(1 << 31), fuzz_session._body(request_type(key, version), rng)
            )
            mine = _agree(frame)
            assert mine is not None, (key, version)
            assert acks == (key == ApiKey.PRODUCE)


def test_every_answer_it_passes_untouched_is_one_the_session_leaves_as_it_came():
    rng = random.Random(368)
    passed = 0
    for key, version, _acks, _rq, response_flexible, tags, *_ in ENTRIES:
        session = _session()
        request = request_frame(key, version, 7, fuzz_session._body(request_type(key, version), rng))
        decision = session.on_request(memoryview(request))
        if decision.pending is None:  # acks=0
            continue
        answer = response_frame(key, version, 7, fuzz_session._body(response_type(key, version), rng))
        if tags is not None:
            cls = response_type(key, version)
            offset = response_body_offset(answer, 1 if response_flexible else 0)
            tagged = answer[tags_start(cls, answer, offset)] != 0
            if "node_endpoints" in regular_names(cls):  # KIP-932's leaders' endpoints: a regular field, a list
                tagged |= bool(decode(cls, answer, offset)[0].node_endpoints)
            assert TABLE.untouched(key, version, answer) is not tagged  # endpoints or tagged: the session's rewrite
            if tagged:
                continue
        assert TABLE.untouched(key, version, answer)
        result = session.on_response(memoryview(answer))
        assert b"".join(bytes(p) for p in result.pieces) == answer, (key, version)
        assert not result.brokers
        passed += 1
    assert passed > 100


def test_mutated_headers_are_read_alike():
    rng = random.Random(1313)
    served = held = 0
    for key, version, *_ in ENTRIES:
        frame = request_frame(key, version, 3, fuzz_session._body(request_type(key, version), rng), client_id="c-1")
        for _ in range(8):
            mutant = fuzz_session.mutate(frame, rng, 4, frame)
            if _agree(mutant) is None:
                held += 1
            else:
                served += 1
    assert served > 100 and held > 100  # both ways exercised


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, len(ENTRIES) - 1),
    client_id=st.one_of(st.none(), st.binary(max_size=12)),
    tail=st.binary(max_size=64),
    length=st.integers(-3, 20),
)
def test_arbitrary_headers_are_read_alike(index, client_id, tail, length):
    """A client id of any bytes (invalid UTF-8 too) and a length that lies, then anything."""
    key, version, *_ = ENTRIES[index]
    raw = b"" if client_id is None else client_id
    claimed = -1 if client_id is None else length if length != 20 else len(raw)
    payload = key.to_bytes(2, "big") + version.to_bytes(2, "big", signed=True) + (5).to_bytes(4, "big")
    payload += claimed.to_bytes(2, "big", signed=True) + raw + tail
    _agree(len(payload).to_bytes(4, "big") + payload)


def test_a_connection_it_may_not_serve_has_no_table():
    session = _session()
    assert forward_entries(session) == ENTRIES
    session.ctx.header_instance_id = b"\x01" * 16  # KIP-1313 header v3: the identify stage converts requests
    assert forward_entries(session) == ()
    session = _session()
    session.ctx.relayed = True  # the broker's own login: its SASL exchanges and answers are the broker's
    assert forward_entries(session) == ()


def test_what_a_vc_proxy_advertises_loads_no_schema(monkeypatch):
    # A tenancy proxy's start: the versions it advertises are checked in (proxy/core/forward_plans.py).
    loaded: list[tuple[int, int]] = []
    real = apiversions.response_type
    monkeypatch.setattr(apiversions, "response_type", lambda k, v: loaded.append((k, v)) or real(k, v))
    apiversions.tenant_versions.cache_clear()
    assert apiversions.tenant_versions()[1] and loaded == []  # Fetch, among others
    assert apiversions.derive_tenant_versions() and loaded  # what the checked-in table is compared with


def test_a_connections_table_loads_no_schema(monkeypatch):
    # The entries and a VC's plans are checked in (proxy/core/forward_plans.py): a connection's table, plain or a
    # VC's, loads no schema, at start or on the event loop at a client's first plain request.
    from proxy.core import forward_table, grants

    loaded: list[tuple[int, int]] = []
    for module, name in ((forward_table, "response_type"), (grants, "request_type"), (grants, "response_type")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda k, v, real=real: loaded.append((k, v)) or real(k, v))
    versions = tuple(sorted(apiversions.tenant_versions().items()))
    forward_table.entries_for.cache_clear()
    forward_table.tenant_entries_for.cache_clear()
    assert forward_table.entries_for(tuple(sorted(apiversions.proxy_versions().items())))
    assert forward_table.tenant_entries_for(versions)
    assert loaded == []


def test_the_checked_in_entries_are_what_the_schemas_and_rules_give_now():
    from proxy.core import forward_plans, forward_plans_gen

    assert forward_plans_gen.OUTPUT.read_text() == forward_plans_gen.current(), "run `make messages`"
    entries, tenant = forward_plans_gen.rows()
    assert entries == forward_plans.ENTRIES and tenant == forward_plans.TENANT  # read back as derived
    assert apiversions.tenant_versions() == apiversions.derive_tenant_versions() == forward_plans.TENANT_VERSIONS
    # Produce, Fetch, ListOffsets; OffsetCommit, Heartbeat, LeaveGroup; AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
    # TxnOffsetCommit; ShareFetch, ShareAcknowledge
    assert {key for key, _ in tenant} == {0, 1, 2, 8, 12, 13, 24, 25, 26, 28, 78, 79}


@pytest.mark.parametrize(
    ("key", "version"),
    [(ApiKey.SHARE_FETCH, 1), (ApiKey.SHARE_FETCH, 2), (ApiKey.SHARE_ACKNOWLEDGE, 1), (ApiKey.SHARE_ACKNOWLEDGE, 2)],
)
def test_a_share_answer_goes_as_it_came_until_it_lists_a_leader(key, version):
    """KIP-932's answers list leaders' endpoints in a regular field (after a NOT_LEADER_OR_FOLLOWER only): while the
    list is empty the forwarder passes the answer, which the session leaves as it came; one that lists a leader (the
    broker's host and port) is the session's to rewrite."""
    rng = random.Random(932)
    for leaders in (0, 1, 2):
        answer = share_answer([uuid.UUID(int=7)], version, key, leaders)
        session = _session()
        request = request_frame(key, version, 5, fuzz_session._body(request_type(key, version), rng))
        assert session.on_request(memoryview(request)).action is Action.FORWARD
        result = b"".join(bytes(p) for p in session.on_response(memoryview(bytearray(answer))).pieces)
        assert TABLE.untouched(key, version, answer) is (leaders == 0)
        assert (result == answer) is (leaders == 0)
        assert (b"broker-0" in result) is False  # rewritten to the proxy's own listener
