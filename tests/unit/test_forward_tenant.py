"""The forwarder for a virtual cluster's connection, held to the session: a grant never widens anyone's reach.

A VC's Produce (v13+: topics named by id) is served by the forwarder only when the session would send it as
the client sent it: every topic id one the VC owns and the caller may write, no transactional id, a body the
strict walker accepts, and the state as it was when the session let those ids through (proxy/core/forward_table.py).
Wherever the forwarder says "mine" here, the session says "forward these bytes, unchanged"; an answer it passes
untouched is one the session leaves as it came. Then the rows a tenant with rights would try: another VC's id,
a topic it may not write, a right revoked, a quota, a transactional id.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import os
import random
import uuid
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as fq
from kio.schema.fetch.v17 import response as fs
from kio.schema.produce.v13 import request as rq
from kio.schema.produce.v13 import response as rs

from benchmarks import fuzz_session
from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.auth.users import scram_record
from proxy.core import apiversions, grants
from proxy.core.endpoints import ListenerLayout
from proxy.core.exchange import Action
from proxy.core.forward_table import (
    METERED_ANSWER,
    METERED_NO,
    METERED_REQUEST,
    forward_entries,
    tenant_entries_for,
)
from proxy.core.session import ProxySession
from proxy.protocol.apikey import ApiKey
from proxy.quotas.model import FETCH as FETCH_RATE
from proxy.quotas.model import PRODUCE as PRODUCE_RATE
from proxy.quotas.model import REQUEST as REQUEST_RATE
from proxy.tenancy.engine import Policy
from proxy.tenancy.fetch_sessions import FETCH_SESSIONS
from proxy.tenancy.model import (
    KAFKA_CLUSTER,
    TenancyImage,
    admin_record,
    client_record,
    gen_record,
    group_record,
    link_record,
    orphan_record,
    partitions_record,
    principal_record,
    quota_record,
    setting_record,
    topic_record,
    txn_record,
    vc_delete,
    vc_record,
)
from proxy.tenancy.settings import ALLOW_IF_NO_ACL

from .wire import request_frame, response_frame, share_answer

try:
    import vcproxy_native
except ImportError:  # CI builds it: missing there is a failure, not a skip
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("vcproxy_native is not built (make .venv/.installed-test builds it)", allow_module_level=True)

LAYOUT = ListenerLayout("127.0.0.1", 9192, 9193)
ORDERS, PAYMENTS, FOREIGN = (uuid.UUID(int=n << 64 | n) for n in (1, 2, 3))
ENTRIES = tenant_entries_for(tuple(sorted(apiversions.tenant_versions().items())))
TABLE = vcproxy_native.ForwardTable(ENTRIES)


@dataclasses.dataclass
class Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


def make_image() -> TenancyImage:
    image = TenancyImage()
    for vc, user in (("team-a", "carol"), ("team-b", "bob")):  # bob: another VC's member
        image.apply(*vc_record(vc))
        image.apply(*principal_record(f"User:{user}", vc))
    for vc, link, topic_id in (
        ("team-a", "orders", ORDERS),
        ("team-a", "payments", PAYMENTS),
        ("team-b", "x", FOREIGN),
    ):
        physical = f"{uuid.uuid4()}.{link}"
        image.apply(*link_record(vc, link, physical))
        image.apply(*topic_record(physical, topic_id))
    return image


_BROKERS = iter(range(10_000, 1 << 30))  # a broker of its own per session: the fetch-session table is per process


def session(image: TenancyImage, allow_if_no_acl: bool = True, principal: str = "User:carol") -> ProxySession:
    return ProxySession(
        LAYOUT,
        tenancy=Tenancy(image),
        principal=principal,
        allow_if_no_acl=lambda vc: allow_if_no_acl,
        broker=next(_BROKERS),
    )


def _schema(api: str, version: int) -> tuple[Any, Any]:
    """kio's request and response modules of one API version (`api`: its package, e.g. "produce")."""
    return (
        importlib.import_module(f"kio.schema.{api}.v{version}.request"),
        importlib.import_module(f"kio.schema.{api}.v{version}.response"),
    )


def produce(ids: list[uuid.UUID], txn: str | None = None, acks: int = -1, correlation: int = 5) -> bytes:
    topics = tuple(
        rq.TopicProduceData(topic_id=i, partition_data=(rq.PartitionProduceData(index=0, records=b"\x00" * 70),))
        for i in ids
    )
    body = rq.ProduceRequest(transactional_id=txn, acks=acks, timeout=datetime.timedelta(seconds=30), topic_data=topics)
    return request_frame(ApiKey.PRODUCE, 13, correlation, body)


def answer(ids: list[uuid.UUID], message: str | None = None, correlation: int = 5) -> bytes:
    partition = rs.PartitionProduceResponse(
        index=0,
        error_code=ErrorCode.none if message is None else ErrorCode.invalid_record,
        base_offset=0,
        log_append_time=None,
        log_start_offset=0,
        record_errors=(),
        error_message=message,
    )
    topics = tuple(rs.TopicProduceResponse(topic_id=i, partition_responses=(partition,)) for i in ids)
    body = rs.ProduceResponse(responses=topics, throttle_time=datetime.timedelta(0))
    return response_frame(ApiKey.PRODUCE, 13, correlation, body)


def sent(s: ProxySession, frame: bytes) -> bytes | None:
    """What the session forwards for `frame` (None: it answers or closes instead)."""
    decision = s.on_request(memoryview(frame))
    if decision.action is not Action.FORWARD:
        return None
    if decision.pieces is not None:
        return b"".join(bytes(p) for p in decision.pieces)
    return bytes(decision.frame) if decision.frame is not None else frame


def mutated(frame: bytes, rng: random.Random, cut: int) -> bytes:
    """`frame` as it is (0), mutated anywhere (1), mutated in its body with a true size (2), or with bytes after its
    body (3: a decoding session would drop them, so the forwarder must leave such a Fetch to it)."""
    if cut == 1:
        return fuzz_session.mutate(frame, rng, 4, frame)
    if cut == 2:
        body = bytearray(frame[4:])
        for _ in range(rng.randrange(1, 4)):
            body[rng.randrange(8, len(body))] = rng.randrange(256)
        return frame[:4] + bytes(body)
    if cut == 3:
        return (len(frame) - 4 + 5).to_bytes(4, "big") + frame[4:] + rng.randbytes(5)
    return frame


def left_as_it_came(s: ProxySession, key: int, version: int, reply: bytes, note: tuple[int, int] | None = None) -> bool:
    """False when the forwarder gives `reply` to the session's rewrite; else checks the session leaves it as it came."""
    if not TABLE.untouched(key, version, reply, s.ctx.grant, note):
        return False
    result = s.on_response(memoryview(bytearray(reply)))
    assert b"".join(bytes(p) for p in result.pieces) == reply
    return True


def granted(s: ProxySession) -> bytes:
    """A session that let a Produce to its own `orders` through, and so granted its id."""
    frame = produce([ORDERS])
    assert sent(s, frame) == frame
    return frame


def test_a_tenants_to_forward_are_produce_fetch_a_group_members_and_a_transactional_producers_own_requests():
    """Produce by id (v13) or by name (v3-v12, renamed), and Fetch by id (v13+) or by name (v7-v12, renamed): a
    consumer's, read from its replica id before v15. A Fetch answer by name goes on whole (no plan to stream it).
    A consumer's ListOffsets (by name, renamed; its replica id read), a share consumer's ShareFetch and
    ShareAcknowledge (by topic id, its group renamed). A group member's Heartbeat, OffsetCommit (by
    name, renamed, or by id) and LeaveGroup, its group renamed. A
    transactional producer's AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit, its transactional id,
    group and topics renamed (not InitProducerId: its id may be null, and then names nothing a grant is of)."""
    served = {(key, version) for key, version, *_ in ENTRIES}
    assert served == (
        {(ApiKey.PRODUCE, v) for v in range(3, 14)}
        | {(ApiKey.FETCH, v) for v in range(7, 19)}
        | {(ApiKey.OFFSET_COMMIT, v) for v in range(2, 11)}
        | {(ApiKey.HEARTBEAT, v) for v in range(0, 5)}
        | {(ApiKey.LEAVE_GROUP, v) for v in range(0, 6)}
        | {(ApiKey.LIST_OFFSETS, v) for v in range(1, 12)}
        | {(ApiKey.SHARE_FETCH, v) for v in range(1, 3)}  # KIP-932's: no leader's endpoint in the answer
        | {(ApiKey.SHARE_ACKNOWLEDGE, v) for v in range(1, 3)}
        | {(ApiKey.ADD_PARTITIONS_TO_TXN, v) for v in range(0, 4)}  # v4+ are brokers' (their answers name ids)
        | {(ApiKey.ADD_OFFSETS_TO_TXN, v) for v in range(0, 5)}
        | {(ApiKey.END_TXN, v) for v in range(0, 6)}
        | {(ApiKey.TXN_OFFSET_COMMIT, v) for v in range(0, 6)}
    )
    streamed = {(key, version) for key, version, *rest in ENTRIES if rest[6] is not None}
    assert streamed == {(ApiKey.FETCH, v) for v in range(13, 19)}


def test_the_vcs_own_topic_is_granted_and_served_as_the_client_sent_it():
    s = session(make_image())
    assert forward_entries(s) == ()  # nothing granted yet: the first request is the session's
    frame = granted(s)
    assert len(s.ctx.grant) == 1
    assert forward_entries(s) == ENTRIES
    assert TABLE.classify(frame, s.ctx.grant) == (5, True)
    assert TABLE.classify(produce([ORDERS], acks=0), s.ctx.grant) == (5, False)
    assert TABLE.classify(frame) is None  # no grant, nothing served


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(produce([FOREIGN]), id="another VC's topic"),
        pytest.param(produce([ORDERS, FOREIGN]), id="its own and another VC's"),
        pytest.param(produce([uuid.UUID(int=99)]), id="an id no one has"),
        pytest.param(produce([ORDERS], txn="t-1"), id="a transactional id"),
        pytest.param(produce([PAYMENTS]), id="its own topic, not granted yet"),
    ],
)
def test_what_the_grant_does_not_hold_is_the_sessions(frame):
    s = session(make_image())
    granted(s)
    assert TABLE.classify(frame, s.ctx.grant) is None


def test_another_vcs_topic_is_never_granted():
    s = session(make_image())
    granted(s)
    frame = produce([FOREIGN])
    assert sent(s, frame) != frame  # a placeholder id goes to the broker instead
    assert TABLE.classify(frame, s.ctx.grant) is None


def test_a_topic_the_caller_may_not_write_is_not_granted_nor_is_the_rest_of_its_request():
    image = make_image()
    image.apply(*acl_record("team-a", _acl("orders", Operation.WRITE), True))
    s = session(image, allow_if_no_acl=False)
    both = produce([ORDERS, PAYMENTS])
    assert sent(s, both) != both  # payments refused: its id replaced
    assert s.ctx.grant is None or len(s.ctx.grant) == 0
    assert sent(s, produce([ORDERS])) == produce([ORDERS])
    assert TABLE.classify(produce([ORDERS]), s.ctx.grant) == (5, True)
    assert TABLE.classify(both, s.ctx.grant) is None


def test_a_right_revoked_voids_the_grant_at_once():
    image = make_image()
    write = _acl("orders", Operation.WRITE)
    image.apply(*acl_record("team-a", write, True))
    s = session(image, allow_if_no_acl=False)
    frame = granted(s)
    grant = s.ctx.grant
    assert TABLE.classify(frame, grant) == (5, True)
    image.apply(*acl_record("team-a", write, False))  # the state changes: every grant made before is void
    assert not grant.valid()
    assert TABLE.classify(frame, grant) is None
    assert forward_entries(s) == ()
    assert sent(s, frame) != frame  # the session now refuses it
    assert TABLE.classify(frame, s.ctx.grant) is None


def test_any_change_of_the_state_voids_the_grant():
    image = make_image()
    s = session(image)
    frame = granted(s)
    image.apply(*link_record("team-a", "orders", None))  # unlinked
    assert TABLE.classify(frame, s.ctx.grant) is None
    assert sent(s, frame) != frame


def _physical(image: TenancyImage, vc: str, link: str) -> str:
    return image.vcs[vc].links[link]


_GLOBAL = uuid.UUID(int=99)
# Records that void team-a's grant (carol's, on its topic orders): about team-a, about a topic it links, or about
# the whole state (bindings, credentials, quotas, kafka-cluster's ACLs, VCs made or deleted).
VOIDING = {
    "its topic unlinked": lambda i: link_record("team-a", "orders", None),
    "another link of its own": lambda i: link_record("team-a", "more", "p.more"),
    "its link's incarnation": lambda i: gen_record("team-a", "orders", 2),
    "its ACLs": lambda i: acl_record("team-a", _acl("payments", Operation.READ), True),
    "its setting allow_everyone_if_no_acl_found": lambda i: setting_record("team-a", ALLOW_IF_NO_ACL, False),
    "its admins": lambda i: admin_record("team-a", "User:dave", True),
    "its groups": lambda i: group_record("team-a", "g", True),
    "its transactional ids": lambda i: txn_record("team-a", "t", True),
    "its topic's id (re-created)": lambda i: topic_record(_physical(i, "team-a", "orders"), _GLOBAL),
    "its topic's partitions": lambda i: partitions_record(_physical(i, "team-a", "orders"), 12),
    "carol bound to another VC": lambda i: principal_record("User:carol", "team-b"),
    "anyone's binding": lambda i: principal_record("User:zed", "team-b"),
    "a client id's binding": lambda i: client_record("c-1", "team-b"),
    "a quota": lambda i: quota_record((("user", "bob"),), "producer_byte_rate", 1024.0),
    "a credential": lambda i: scram_record("bob", "SCRAM-SHA-512", None),
    "kafka-cluster's ACLs": lambda i: acl_record(KAFKA_CLUSTER, _acl("orders", Operation.WRITE), True),
    "a VC made": lambda i: vc_record("team-c"),
    "another VC deleted": lambda i: vc_delete("team-b"),
    "an orphan": lambda i: orphan_record("p.gone", "team-b"),
}
# Records about another VC alone, or a topic only it links: team-a's grant stands (what keeps a busy fleet's grants
# from being voided by every tenant's every change).
STANDING = {
    "team-b's link": lambda i: link_record("team-b", "y", "p.y"),
    "team-b's ACLs": lambda i: acl_record("team-b", _acl("x", Operation.WRITE), True),
    "team-b's setting": lambda i: setting_record("team-b", ALLOW_IF_NO_ACL, False),
    "team-b's groups": lambda i: group_record("team-b", "g", True),
    "team-b's topic's id": lambda i: topic_record(_physical(i, "team-b", "x"), _GLOBAL),
    "a topic no VC links": lambda i: topic_record("p.unlinked", _GLOBAL),
    # team-a's rights are its own links and ACLs: another VC linking the same topic takes nothing from it.
    "team-b linking team-a's topic": lambda i: link_record("team-b", "also", _physical(i, "team-a", "orders")),
}


@pytest.mark.parametrize(
    ("record", "voids"),
    [*((r, True) for r in VOIDING.values()), *((r, False) for r in STANDING.values())],
    ids=[*VOIDING, *STANDING],
)
def test_a_record_voids_the_grant_exactly_when_it_is_about_the_vc_or_everyone(record, voids):
    image = make_image()
    s = session(image)
    frame = granted(s)
    grant = s.ctx.grant
    assert TABLE.classify(frame, grant) == (5, True)
    image.apply(*record(image))
    if voids:
        assert not grant.valid() and TABLE.classify(frame, grant) is None  # the session's to decide again
    else:
        assert grant.valid() and TABLE.classify(frame, grant) == (5, True)
        assert sent(s, frame) == frame and s.ctx.grant is grant  # as the session decides now, too


P, F = ApiKey.PRODUCE, ApiKey.FETCH
NO, REQ, ANS = METERED_NO, METERED_REQUEST, METERED_ANSWER


@pytest.mark.parametrize(
    ("entity", "key", "served", "lent"),
    [
        # A Produce's size is charged as it is read: served within an allowance taken from the meters (REQ).
        pytest.param((("virtual-cluster", "team-a"),), PRODUCE_RATE, {P: REQ, F: NO}, {PRODUCE_RATE}, id="VC's cap"),
        pytest.param((("user", "carol"),), PRODUCE_RATE, {P: REQ, F: NO}, {PRODUCE_RATE}, id="carol's produce rate"),
        pytest.param((("user", None),), FETCH_RATE, {P: NO, F: ANS}, {FETCH_RATE}, id="every user's fetch rate"),
        # Every request counted: served while a count of requests taken from the meters has one left.
        pytest.param((("virtual-cluster", "team-a"),), REQUEST_RATE, {P: NO, F: NO}, {REQUEST_RATE}, id="VC's rate"),
        pytest.param((("user", "carol"),), "controller_mutation_rate", {P: NO, F: NO}, set(), id="mutations"),
        pytest.param((("user", "bob"),), REQUEST_RATE, {P: NO, F: NO}, set(), id="another user's"),
        pytest.param((("user", "bob"),), PRODUCE_RATE, {P: NO, F: NO}, set(), id="another user's produce rate"),
    ],
)
def test_a_quota_keeps_what_it_meters_off_the_forwarder(entity, key, served, lent):
    """The quota stage meters what a quota that applies to the connection measures (a Produce's size, a Fetch answer's,
    every request for a request rate): the forwarder serves none of that but within an allowance the quota stage took
    out of the meters (REQ: a request's size, ANS: an answer's; a request rate's: every request), so nothing escapes a
    meter."""
    image = make_image()
    s = session(image)
    granted(s)
    image.apply(*quota_record(entity, key, 1e9))  # never reached: nothing muted
    sent(s, produce([ORDERS]))  # granted again, in the state with the quota
    assert s.quota is not None and s.ctx.grant is not None and s.ctx.grant.valid()
    # Metered by none: a consumer's ListOffsets, a group member's, a transactional producer's.
    members = dict.fromkeys((ApiKey.LIST_OFFSETS, ApiKey.OFFSET_COMMIT, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP), NO)
    members |= dict.fromkeys(TXN_APIS, NO)
    members |= dict.fromkeys((ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE), served[F])  # a share consumer's bytes
    assert {entry[0]: entry[9] for entry in forward_entries(s)} == served | members
    assert s.quota.allowances() == lent


def test_a_producers_byte_rate_lends_the_forwarder_an_allowance_out_of_its_meters():
    """What the forwarder may spend is what the meters of the limits that apply hold (the smaller of carol's rate and
    the VC's cap), a term's worth at most, and never less than the request at hand; it comes back counted."""
    image = make_image()
    clock = [100.0]
    meters = image.quotas.meters
    meters.clock = lambda: clock[0]
    image.apply(*quota_record((("user", "carol"),), "producer_byte_rate", 10_000.0))
    image.apply(*quota_record((("virtual-cluster", "team-a"),), "producer_byte_rate", 50_000.0))
    s = session(image)
    frame = granted(s)  # the session charged it: the meters start empty, so carol owes its size and is muted
    assert not s.quota.allowances()
    clock[0] += 1.0  # the mute is over; carol's meter holds 10,000 bytes less her debt
    assert s.quota.allowances() == {PRODUCE_RATE}
    assert (
        s.quota.reserve(PRODUCE_RATE, 20_000, take=False) == 0
    )  # more than it holds: the session's to charge (and mute)
    lent = s.quota.reserve(PRODUCE_RATE, len(frame))
    assert lent == 10_000 - len(frame)
    limits = s.quota._current()
    carol, cap = (
        meters.get(limits.limits["producer_byte_rate"].meter),
        meters.get(limits.caps["producer_byte_rate"].meter),
    )
    assert carol.tokens == 0 and cap.tokens == 50_000 - len(frame) - lent  # each lent the same, and one charged
    s.quota.settle(PRODUCE_RATE, 3 * len(frame), lent - 3 * len(frame))  # the forwarder served three
    assert carol.tokens == pytest.approx(lent - 3 * len(frame)) and sum(carol.rate.values) == 4 * len(frame)
    clock[0] += 60.0  # the meters full (11 s of each quota): a term of the smaller quota at most
    assert s.quota.reserve(PRODUCE_RATE, len(frame)) == 10_000
    # Renewed while the forwarder has the connection: what it spent counted, and topped up to a term's worth again.
    assert s.quota.renew(PRODUCE_RATE, 4_000, 6_000) == 4_000 and carol.tokens == 110_000 - 10_000 - 4_000
    assert carol.rate.values[-1] == 4_000
    # Another connection of carol's, charged by the session meanwhile, leaves the meter in debt: what is left goes back.
    meters.charge(limits.limits["producer_byte_rate"].meter, 200_000, 10_000.0, clock[0])
    assert s.quota.renew(PRODUCE_RATE, 0, 10_000) == -1
    s.quota.settle(PRODUCE_RATE, 0, 10_000, over=False)
    s.quota.settle(PRODUCE_RATE, 0, 0)
    assert carol.tokens == 110_000 - 4_000 - 200_000  # only what was spent, and what the session charged
    assert s.quota.renew(PRODUCE_RATE, 0, 0) == 0  # the allowance over: nothing more to renew


@pytest.mark.parametrize("key", [PRODUCE_RATE, FETCH_RATE, REQUEST_RATE])
def test_a_vc_admin_who_raises_her_own_rate_is_still_lent_no_more_than_the_vcs_cap_holds(key):
    """alice, team-a's admin, may set her users' rates (carol's to 1 GB/s), not the VC's cap (the cluster operator's,
    10 KB/s): what the forwarder may spend is the cap's, as the session would charge it."""
    image = make_image()
    clock = [100.0]
    image.quotas.meters.clock = lambda: clock[0]
    image.apply(*quota_record((("user", "carol"),), key, 1e9))
    image.apply(*quota_record((("virtual-cluster", "team-a"),), key, 10_000.0))
    s = session(image)
    frame = granted(s)
    assert s.quota.reserve(key, 0) == 0  # the meters start empty
    clock[0] += 60.0
    lent = [s.quota.reserve(key, len(frame))]  # a term of the cap at a time, although carol's meter holds 11 GB
    while lent[-1]:
        lent.append(s.quota.renew(key, lent[-1], 0))  # each spent whole, at once: the cap's bucket runs dry
    assert lent[0] == 10_000 and sum(lent) == 11 * 10_000  # what 11 s of the cap filled it with, no more
    s.quota.settle(key, 0, 0)
    assert s.quota.reserve(key, len(frame), take=False) == 0  # and the next goes to the session, to be charged


def test_a_consumers_byte_rate_lends_fetch_an_allowance_and_an_answer_past_it_mutes_the_connection():
    """A Fetch answer's size is known once it has come: the forwarder charges it whole, past what was left; the
    debt then mutes the connection as the session's own charge would have, and nothing more goes by the forwarder
    until the mute is over."""
    image = make_image()
    clock = [100.0]
    image.quotas.meters.clock = lambda: clock[0]
    image.apply(*quota_record((("user", "carol"),), FETCH_RATE, 10_000.0))
    s = session(image)
    granted(s)
    assert s.quota.allowances() == {FETCH_RATE}
    assert s.quota.reserve(FETCH_RATE, 0) == 0  # a new meter starts empty: the session charges the first answers
    clock[0] += 1.0
    assert s.quota.reserve(FETCH_RATE, 0) == 10_000  # a term's worth
    s.quota.settle(FETCH_RATE, 25_000, -15_000)  # an answer of 25,000 bytes went on with 10,000 left: 15,000 over
    assert s.quota.mute_until == pytest.approx(clock[0] + 1.5)  # 15,000 bytes of debt at 10,000 a second
    assert s.quota.metered() is None and forward_entries(s) == ()
    clock[0] += 1.5
    assert s.quota.metered() == {FETCH_RATE} and {e[0]: e[9] for e in forward_entries(s)} == {
        ApiKey.PRODUCE: METERED_NO,
        ApiKey.FETCH: METERED_ANSWER,
        ApiKey.OFFSET_COMMIT: METERED_NO,
        ApiKey.HEARTBEAT: METERED_NO,
        ApiKey.LEAVE_GROUP: METERED_NO,
        ApiKey.LIST_OFFSETS: METERED_NO,
        ApiKey.SHARE_FETCH: METERED_ANSWER,
        ApiKey.SHARE_ACKNOWLEDGE: METERED_ANSWER,
        **dict.fromkeys(TXN_APIS, METERED_NO),
    }


def test_a_muted_connection_is_not_forwarded():
    image = make_image()
    image.apply(*quota_record((("user", "carol"),), "producer_byte_rate", 1.0))
    s = session(image)
    granted(s)
    sent(s, produce([ORDERS]))  # over 1 byte/s: muted
    assert s.quota.metered() is None
    assert forward_entries(s) == ()


def test_an_answer_with_a_message_or_an_id_not_granted_goes_to_the_session():
    s = session(make_image())
    granted(s)
    grant = s.ctx.grant
    assert TABLE.untouched(ApiKey.PRODUCE, 13, answer([ORDERS]), grant)
    assert not TABLE.untouched(ApiKey.PRODUCE, 13, answer([ORDERS], message="bad record"), grant)
    assert not TABLE.untouched(ApiKey.PRODUCE, 13, answer([FOREIGN]), grant)
    assert not TABLE.untouched(ApiKey.PRODUCE, 13, answer([ORDERS]), None)


def test_a_forwarded_answer_is_the_sessions_rewrite():
    """The hook's path: an answer the forwarder passes back is translated as the Python path translates it."""
    image = make_image()
    physical = image.vcs["team-a"].physical_topic("orders")
    reference = session(image)
    request = produce([ORDERS])
    assert sent(reference, request) == request
    message = f"record rejected by {physical}"
    expected = reference.on_response(memoryview(bytearray(answer([ORDERS], message))))
    s = session(image)
    granted(s)
    s.on_response(memoryview(bytearray(answer([ORDERS]))))
    result = s.forwarded_answer(ApiKey.PRODUCE, 13, answer([ORDERS], message))
    rewritten = b"".join(bytes(p) for p in result.pieces)
    assert rewritten == b"".join(bytes(p) for p in expected.pieces)
    assert physical.encode() not in rewritten and b"orders" in rewritten


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ids=st.lists(st.sampled_from([ORDERS, PAYMENTS, FOREIGN, uuid.UUID(int=0)]), max_size=3),
    txn=st.sampled_from([None, "", "t"]),
    acks=st.sampled_from([-1, 0, 1]),
    seed=st.integers(0, 1 << 30),
    cut=st.integers(0, 3),
)
def test_wherever_the_forwarder_serves_a_request_the_session_sends_it_unchanged(ids, txn, acks, seed, cut):
    image = make_image()
    s = session(image)
    granted(s)
    frame = mutated(produce(ids, txn=txn, acks=acks, correlation=9), random.Random(seed), cut)
    mine = TABLE.classify(frame, s.ctx.grant)
    if mine is None:
        return
    before = len(s.in_flight)
    assert sent(s, frame) == frame
    answered = len(s.in_flight) > before  # the session awaits an answer
    assert mine == (int.from_bytes(frame[8:12], "big", signed=True), answered)


def test_every_answer_it_passes_untouched_is_one_the_session_leaves_as_it_came():
    rng = random.Random(1134)
    passed = held = 0
    for _ in range(300):
        s = session(make_image())
        granted(s)
        reply = response_frame(ApiKey.PRODUCE, 13, 5, fuzz_session._body(rs.ProduceResponse, rng))
        if rng.random() < 0.5:  # the ids of the sample: the VC's granted one, or another
            reply = answer(rng.sample([ORDERS, ORDERS, FOREIGN], rng.randrange(1, 3)))
        if left_as_it_came(s, ApiKey.PRODUCE, 13, reply):
            passed += 1
        else:
            held += 1
    assert passed > 30 and held > 30


def _acl(topic: str, op: Operation) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:carol", "*", op, Permission.ALLOW)


# -- Fetch: topic ids granted for READ, and fetch sessions the ownership table gives the VC -------------------------


def fetch(
    ids: list[uuid.UUID],
    session_id: int = 0,
    epoch: int = -1,
    correlation: int = 6,
    forget: tuple = (),
    version: int = 17,
    **extra,
) -> bytes:
    req, _ = _schema("fetch", version)
    topics = tuple(
        req.FetchTopic(
            topic_id=i,
            partitions=(req.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),),
        )
        for i in ids
    )
    forgotten = tuple(req.ForgottenTopic(topic_id=i, partitions=(0,)) for i in forget)
    body = req.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        session_id=session_id,
        session_epoch=epoch,
        topics=topics,
        forgotten_topics_data=forgotten,
        **extra,
    )
    return request_frame(ApiKey.FETCH, version, correlation, body)


def fetched(
    ids: list[uuid.UUID],
    session_id: int = 0,
    error: int = 0,
    correlation: int = 6,
    records: bytes = b"\0" * 61,
    version: int = 17,
) -> bytes:
    _, res = _schema("fetch", version)
    partition = res.PartitionData(
        partition_index=0, error_code=ErrorCode.none, high_watermark=10, aborted_transactions=None, records=records
    )
    body = res.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode(error),
        session_id=session_id,
        responses=tuple(res.FetchableTopicResponse(topic_id=i, partitions=(partition,)) for i in ids),
    )
    return response_frame(ApiKey.FETCH, version, correlation, body)


def in_session(s: ProxySession, session_id: int = 77, version: int = 17) -> None:
    """`s` fetched `orders` and the broker opened fetch session `session_id` for it: both granted."""
    frame = fetch([ORDERS], epoch=0, version=version)
    assert sent(s, frame) == frame
    s.on_response(memoryview(bytearray(fetched([ORDERS], session_id, version=version))))
    assert FETCH_SESSIONS.owns(s.vc.id, s.ctx.broker, session_id)


def test_a_fetch_of_the_vcs_own_topic_in_its_own_session_is_served():
    s = session(make_image())
    in_session(s)
    grant = s.ctx.grant
    assert grant.owns_session(77)
    incremental = fetch([ORDERS], 77, 1)
    assert TABLE.classify(incremental, grant) == (6, True)
    assert TABLE.classify(fetch([], 77, 2, forget=(ORDERS,)), grant) == (6, True)
    assert TABLE.classify(fetch([ORDERS], 0, -1), grant) == (6, True)  # no session
    # Its answer goes back untouched only while the session goes on as the request left it.
    assert TABLE.untouched(ApiKey.FETCH, 17, fetched([ORDERS], 77), grant, (77, 1))
    assert not TABLE.untouched(ApiKey.FETCH, 17, fetched([ORDERS], 78), grant, (77, 1))  # a new one: the table's
    assert not TABLE.untouched(ApiKey.FETCH, 17, fetched([ORDERS], 77, error=70), grant, (77, 1))  # gone
    assert not TABLE.untouched(ApiKey.FETCH, 17, fetched([ORDERS], 77), grant, (77, 0))  # epoch 0 closes it
    assert not TABLE.untouched(ApiKey.FETCH, 17, fetched([ORDERS], 5), grant, (0, 0))  # one opened
    assert TABLE.untouched(ApiKey.FETCH, 17, fetched([ORDERS], 0), grant, (0, -1))
    assert not TABLE.untouched(ApiKey.FETCH, 17, fetched([FOREIGN], 77), grant, (77, 1))


def test_what_goes_on_of_a_large_answer_before_it_is_whole_never_reaches_an_id_outside_the_grant():
    """A large Fetch answer goes on to the client as it arrives (forward.rs `stream`). For a VC, only bytes before any
    topic id not yet seen whole in the grant, and nothing of an answer whose session changed or whose grant is void:
    at every point the answer may be cut by its arrival."""
    s = session(make_image())
    in_session(s)
    grant = s.ctx.grant
    records = bytes(range(1, 251)) * 800  # 200,000 bytes, no topic id's bytes in them
    mixed = fetched([ORDERS, FOREIGN, ORDERS], 77, records=records)
    foreign = mixed.index(FOREIGN.bytes)
    cuts = {*range(8, len(mixed), 997), *range(foreign - 40, foreign + 40), len(mixed) - 1}
    reached = 0
    for cut in sorted(cuts):
        may = TABLE.streamable(ApiKey.FETCH, 17, mixed[:cut], grant, (77, 1))
        if may is not None:
            assert may[0] <= foreign, cut
            reached = max(reached, may[0])
    assert reached > len(records)  # the first topic's records went on as they came
    assert not TABLE.untouched(ApiKey.FETCH, 17, mixed, grant, (77, 1))  # and the whole answer is Python's

    own = fetched([ORDERS], 77, records=records)
    cut = len(own) // 2
    end = own.index(records) + len(records)
    assert TABLE.streamable(ApiKey.FETCH, 17, own[:cut], grant, (77, 1)) == (cut, end)  # the rest: spliced
    for note in ((78, 1), (77, 0), (0, -1)):  # a session that does not go on as the request left it
        assert TABLE.streamable(ApiKey.FETCH, 17, own[:cut], grant, note) is None
    changed = fetched([ORDERS], 5, records=records)
    assert TABLE.streamable(ApiKey.FETCH, 17, changed[:cut], grant, (0, 0)) is None  # a session opened: the table's
    assert TABLE.streamable(ApiKey.FETCH, 17, own[:cut], None, (77, 1)) is None
    s.tenancy.image.apply(*link_record("team-a", "refunds", f"{uuid.uuid4()}.refunds"))  # any change voids the grant
    assert not grant.valid()
    assert TABLE.streamable(ApiKey.FETCH, 17, own[:cut], grant, (77, 1)) is None


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(fetch([ORDERS], 99, 1), id="another VC's session"),
        pytest.param(fetch([ORDERS], 12345, 1), id="a session no one has"),
        pytest.param(fetch([FOREIGN], 77, 1), id="another VC's topic"),
        pytest.param(fetch([ORDERS], 77, 1, forget=(FOREIGN,)), id="another VC's topic, forgotten"),
        pytest.param(fetch([PAYMENTS], 77, 1), id="its own topic, not granted yet"),
        pytest.param(fetch([ORDERS], 77, 1, cluster_id="x"), id="a cluster id (a KRaft replica's field)"),
        pytest.param(
            fetch([ORDERS], 77, 1, replica_state=fq.ReplicaState(replica_id=2, replica_epoch=1)), id="a follower"
        ),
    ],
)
def test_a_fetch_the_grant_does_not_cover_is_the_sessions(frame):
    image = make_image()
    s = session(image)
    in_session(s)
    FETCH_SESSIONS.record(image.vcs["team-b"].id, s.ctx.broker, 99)  # bob's session on the same broker
    assert TABLE.classify(frame, s.ctx.grant) is None


def test_a_session_the_table_lets_go_is_no_longer_served():
    s = session(make_image())
    in_session(s)
    incremental = fetch([ORDERS], 77, 1)
    FETCH_SESSIONS.drop(s.ctx.broker, 77)  # closed, evicted, or reported gone
    assert TABLE.classify(incremental, s.ctx.grant) is None
    assert not s.ctx.grant.owns_session(77)
    assert TABLE.classify(fetch([ORDERS]), s.ctx.grant) == (6, True)  # the topic is still granted


def test_a_session_given_to_another_vc_is_not_served():
    image = make_image()
    s = session(image)
    in_session(s)
    FETCH_SESSIONS.record(image.vcs["team-b"].id, s.ctx.broker, 77)  # the broker reused the id for bob's session
    assert TABLE.classify(fetch([ORDERS], 77, 1), s.ctx.grant) is None


def test_a_read_right_revoked_voids_the_fetch_grant():
    image = make_image()
    read = _acl("orders", Operation.READ)
    image.apply(*acl_record("team-a", read, True))
    s = session(image, allow_if_no_acl=False)
    in_session(s)
    frame = fetch([ORDERS], 77, 1)
    assert TABLE.classify(frame, s.ctx.grant) == (6, True)
    image.apply(*acl_record("team-a", read, False))
    assert TABLE.classify(frame, s.ctx.grant) is None
    assert sent(s, frame) != frame


def test_a_forwarded_answer_whose_charge_mutes_the_connection_takes_it_back_from_the_forwarder():
    """An answer the session rewrites for the forwarder (a fetch session that changed) is charged by the session's
    quota stage: past carol's consumer byte rate it mutes the connection, and the forwarder must give it back at once
    (`muted`), so that the next request waits for the mute rather than until the allowance's next renewal."""
    image = make_image()
    clock = [100.0]
    image.quotas.meters.clock = lambda: clock[0]
    s = session(image)
    in_session(s, 77)
    image.apply(*quota_record((("user", "carol"),), FETCH_RATE, 1_000.0))
    sent(s, fetch([ORDERS], 77, 1))
    s.on_response(memoryview(bytearray(fetched([ORDERS], 77))))
    assert s.quota is not None and s.quota.metered() is None  # charged against an empty meter: muted
    clock[0] += 60.0  # over, and the meter full: 11 s of 1,000 B/s
    small = s.forwarded_answer(ApiKey.FETCH, 17, fetched([ORDERS], 78), (77, 2))
    assert not small.muted and s.quota.metered() == {FETCH_RATE}
    big = s.forwarded_answer(ApiKey.FETCH, 17, fetched([ORDERS], 79, records=b"\0" * 20_000), (78, 0))
    assert big.muted and s.quota.metered() is None and forward_entries(s) == ()


def test_a_write_grant_is_not_a_read_grant():
    s = session(make_image())
    granted(s)  # Produce to orders
    assert TABLE.classify(fetch([ORDERS]), s.ctx.grant) is None


def test_a_forwarded_fetch_answer_that_opens_a_session_teaches_the_table():
    s = session(make_image())
    in_session(s, 77)
    result = s.forwarded_answer(ApiKey.FETCH, 17, fetched([ORDERS], 78), (77, 0))  # epoch 0: closed, and a new one
    assert b"".join(bytes(p) for p in result.pieces) == fetched([ORDERS], 78)
    assert not FETCH_SESSIONS.owns(s.vc.id, s.ctx.broker, 77)
    assert FETCH_SESSIONS.owns(s.vc.id, s.ctx.broker, 78)
    assert s.ctx.grant.owns_session(78) and not s.ctx.grant.owns_session(77)
    assert TABLE.classify(fetch([ORDERS], 78, 1), s.ctx.grant) == (6, True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ids=st.lists(st.sampled_from([ORDERS, PAYMENTS, FOREIGN]), max_size=2),
    forget=st.lists(st.sampled_from([ORDERS, FOREIGN]), max_size=1),
    session_id=st.sampled_from([0, 77, 99]),
    epoch=st.sampled_from([-1, 0, 1, 5]),
    seed=st.integers(0, 1 << 30),
    cut=st.integers(0, 3),
)
def test_wherever_the_forwarder_serves_a_fetch_the_session_sends_it_unchanged(
    ids, forget, session_id, epoch, seed, cut
):
    image = make_image()
    s = session(image)
    in_session(s)
    FETCH_SESSIONS.record(image.vcs["team-b"].id, s.ctx.broker, 99)
    frame = mutated(fetch(ids, session_id, epoch, correlation=9, forget=tuple(forget)), random.Random(seed), cut)
    mine = TABLE.classify(frame, s.ctx.grant)
    if mine is None:
        return
    assert sent(s, frame) == frame
    assert mine == (int.from_bytes(frame[8:12], "big", signed=True), True)


def test_every_fetch_answer_it_passes_untouched_is_one_the_session_leaves_as_it_came():
    rng = random.Random(227)
    passed = held = 0
    for _ in range(300):
        s = session(make_image())
        in_session(s)
        request = fetch([ORDERS], 77, 1)
        assert sent(s, request) == request
        if rng.random() < 0.5:
            reply = response_frame(ApiKey.FETCH, 17, 6, fuzz_session._body(fs.FetchResponse, rng))
        else:
            reply = fetched(rng.sample([ORDERS, ORDERS, FOREIGN], rng.randrange(1, 3)), rng.choice([77, 77, 78, 0]))
        if left_as_it_came(s, ApiKey.FETCH, 17, reply, (77, 1)):
            passed += 1
        else:
            held += 1
    assert passed > 30 and held > 30


# -- a whole connection: the session's rewrite of a passed-back answer runs on the Trio thread ----------------------


async def test_a_vcs_fetch_session_is_learned_on_the_trio_thread_and_then_forwarded(nursery):
    """A forwarded Fetch whose answer changes its session goes back to the session on the Trio thread, where the
    fetch-session table (and with workers, its messages to the others: `tell`) lives; the next Fetch in the new
    session is the forwarder's again."""
    import threading

    from .test_forwarder import _Connection

    trio_thread = threading.get_ident()
    told: list[tuple[object, bool]] = []
    sessions = iter([77, 77, 77, 78, 78, 78, 78])

    def answer(api_key: int, version: int, correlation: int) -> bytes:
        assert (api_key, version) == (ApiKey.FETCH, 17)
        return fetched([ORDERS], next(sessions), correlation=correlation)

    s = session(make_image())
    FETCH_SESSIONS.tell = lambda message: told.append((message, threading.get_ident() == trio_thread))
    try:
        peer = _Connection(nursery, s, answer)
        s.ctx.broker = 1  # a listener's node id: the table tells the other workers of its sessions
        assert [c for c, _ in await peer.exchange(fetch([ORDERS], 0, 0, correlation=1))] == [1]  # opens 77
        assert s.ctx.grant.owns_session(77)
        for correlation, epoch in ((2, 1), (3, 2)):
            assert [c for c, _ in await peer.exchange(fetch([ORDERS], 77, epoch, correlation=correlation))] == [
                correlation
            ]
        assert peer.connection._phase is not None  # forwarded
        await peer.exchange(fetch([ORDERS], 77, 3, correlation=4))  # the broker answers with a new session, 78
        assert FETCH_SESSIONS.owns(s.vc.id, 1, 78) and not FETCH_SESSIONS.owns(s.vc.id, 1, 77)
        for correlation, epoch in ((5, 1), (6, 2), (7, 3)):
            await peer.exchange(fetch([ORDERS], 78, epoch, correlation=correlation))
        assert peer.connection._phase is not None
        await peer.close()
        # The Fetches it served in session 78 marked it used, here and (told once a second) in the other workers.
        with trio.fail_after(30):
            while not told or told[-1][0][0] != "used":
                await trio.sleep(0.05)
    finally:
        FETCH_SESSIONS.tell = None
    assert told and all(on_trio for _, on_trio in told), told
    assert [m[0] for m, _ in told if m[0] != "used"] == ["record", "drop", "record"]
    assert told[-1][0] == ["used", s.vc.id, 1, [78]]
    assert peer.connection.forwarded >= 4


# -- Produce by name (v3-v12: librdkafka's, older clients'): each name a link of the VC, renamed as the session does --

NAMED = (7, 10, 12)  # int16 strings; compact strings (librdkafka's v10); the newest by name


def produce_named(names: list[str], version: int = 10, txn: str | None = None, acks: int = -1) -> bytes:
    req, _ = _schema("produce", version)
    topics = tuple(
        req.TopicProduceData(name=n, partition_data=(req.PartitionProduceData(index=0, records=b"\x00" * 70),))
        for n in names
    )
    timeout = datetime.timedelta(seconds=30)
    body = req.ProduceRequest(transactional_id=txn, acks=acks, timeout=timeout, topic_data=topics)
    return request_frame(ApiKey.PRODUCE, version, 5, body)


def answer_named(names: list[str], version: int = 10, message: str | None = None) -> bytes:
    _, res = _schema("produce", version)
    fields = {f.name for f in dataclasses.fields(res.PartitionProduceResponse)}
    optional = {"log_append_time": None, "log_start_offset": 0, "record_errors": (), "error_message": message}
    partition = res.PartitionProduceResponse(
        index=0,
        error_code=ErrorCode.none if message is None else ErrorCode.invalid_record,
        base_offset=0,
        **{k: v for k, v in optional.items() if k in fields},
    )
    topics = tuple(res.TopicProduceResponse(name=n, partition_responses=(partition,)) for n in names)
    body = res.ProduceResponse(responses=topics, throttle_time=datetime.timedelta(0))
    return response_frame(ApiKey.PRODUCE, version, 5, body)


def granted_named(s: ProxySession, version: int = 10) -> bytes:
    """A session that let a Produce to its own `orders` through by name, and so granted the name; what it sent."""
    frame = produce_named(["orders"], version)
    out = sent(s, frame)
    assert out is not None and out != frame
    s.on_response(memoryview(bytearray(answer_named([_physical(s.tenancy.image, "team-a", "orders")], version))))
    return out


def session_answer(s: ProxySession, request: bytes, reply: bytes) -> bytes:
    """The session's rewrite of `reply` to `request`, which it lets through first."""
    assert sent(s, request) is not None
    return b"".join(bytes(p) for p in s.on_response(memoryview(bytearray(reply))).pieces)


@pytest.mark.parametrize("version", NAMED)
def test_the_vcs_link_is_granted_by_name_and_renamed_as_the_session_renames_it(version):
    image = make_image()
    s = session(image)
    expected = granted_named(s, version)
    assert len(s.ctx.grant) == 1
    assert forward_entries(s) == ENTRIES
    frame = produce_named(["orders"], version)
    assert TABLE.sent(frame, s.ctx.grant) == expected == sent(session(image), frame)
    assert TABLE.classify(produce_named(["orders"], version, acks=0), s.ctx.grant) == (5, False)
    assert TABLE.sent(frame) is None  # no grant, nothing served
    physical = _physical(image, "team-a", "orders")
    reply = answer_named([physical], version)
    back = TABLE.answered(ApiKey.PRODUCE, version, reply, s.ctx.grant)
    assert back == session_answer(session(image), frame, reply)
    assert physical.encode() not in back and b"orders" in back


def test_a_name_of_any_length_is_renamed_with_its_length_prefix():
    """A compact string's length grows a byte past 127 (a 100-character link, 137 with its prefix)."""
    image = make_image()
    link = "l" * 100
    image.apply(*link_record("team-a", link, f"{uuid.uuid4()}.{link}"))
    s = session(image)
    frame = produce_named([link, "orders", link])
    expected = sent(s, frame)
    assert expected is not None and len(expected) == len(frame) + 3 * 37 + 2
    assert TABLE.sent(frame, s.ctx.grant) == expected


@pytest.mark.parametrize(
    "names",
    [
        pytest.param(["x"], id="another VC's link"),
        pytest.param(["orders", "x"], id="its own and another VC's"),
        pytest.param(["nope"], id="a name no link has"),
        pytest.param(["payments"], id="its own link, not granted yet"),
    ],
)
def test_a_name_the_grant_does_not_hold_is_the_sessions(names):
    s = session(make_image())
    granted_named(s)
    assert TABLE.sent(produce_named(names), s.ctx.grant) is None


def test_a_null_name_is_the_sessions():
    s = session(make_image())
    granted_named(s)
    frame = produce_named(["payments", "orders"])
    null = frame.replace(b"\x09payments", b"\x00")  # compact strings: length + 1, 0 for null
    null = (len(null) - 4).to_bytes(4, "big") + null[4:]
    assert TABLE.sent(frame.replace(b"payments", b"orders00"), s.ctx.grant) is None  # a name no link has
    assert TABLE.sent(null, s.ctx.grant) is None


def test_a_transactional_id_is_the_sessions_by_name_too():
    s = session(make_image())
    granted_named(s)
    assert TABLE.sent(produce_named(["orders"], txn="t-1"), s.ctx.grant) is None


TOPIC, TXN = grants.RENAMED["topic"], grants.RENAMED["txn"]


def granted_txn(s: ProxySession, version: int = 10, txn: str = "t") -> bytes:
    """A session that let a transactional Produce to its own `orders` through by name; what it sent."""
    frame = produce_named(["orders"], version, txn=txn)
    out = sent(s, frame)
    assert out is not None and s.ctx.vc.physical_txn(txn).encode() in out
    s.on_response(memoryview(bytearray(answer_named([_physical(s.tenancy.image, "team-a", "orders")], version))))
    return out


@pytest.mark.parametrize("version", [7, 10, 12])
def test_a_transactional_id_the_session_let_through_is_granted_and_renamed(version):
    image = make_image()
    s = session(image)
    expected = granted_txn(s, version)
    frame = produce_named(["orders"], version, txn="t")
    assert TABLE.sent(frame, s.ctx.grant) == expected == sent(session(image), frame)
    assert TABLE.sent(produce_named(["orders"], version, txn="u"), s.ctx.grant) is None  # another id: not yet
    assert TABLE.sent(produce_named(["orders"], version), s.ctx.grant) is not None  # none at all: as before


def test_a_transactional_id_by_topic_id_is_granted_and_renamed_too():
    image = make_image()
    s = session(image)
    first = sent(s, produce([ORDERS], txn="t"))
    assert first is not None and s.ctx.vc.physical_txn("t").encode() in first
    s.on_response(memoryview(bytearray(answer([ORDERS]))))
    assert TABLE.sent(produce([ORDERS], txn="t"), s.ctx.grant) == first


def test_a_transactional_id_granted_on_one_vcs_connection_is_not_on_another():
    image = make_image()
    carol = session(image)
    granted_txn(carol)
    bob = session(image, principal="User:bob")
    assert sent(bob, produce_named(["x"], txn="t")) is not None
    frame = produce_named(["x"], txn="t")
    mine = TABLE.sent(frame, bob.ctx.grant)
    assert mine is not None and image.vcs["team-b"].physical_txn("t").encode() in mine
    assert image.vcs["team-a"].physical_txn("t").encode() not in mine


def test_a_transactional_id_the_caller_may_not_use_is_never_granted():
    image = make_image()
    image.apply(*acl_record("team-a", _acl("orders", Operation.WRITE), True))  # the topic, not the id
    s = session(image, allow_if_no_acl=False)
    granted_named(s)
    frame = produce_named(["orders"], txn="t")
    assert sent(s, frame) is None  # refused: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert TABLE.sent(frame, s.ctx.grant) is None


def test_a_transactional_id_right_revoked_voids_its_grant():
    image = make_image()
    use = AclBinding(
        ResourceType.TRANSACTIONAL_ID, "t", PatternType.LITERAL, "User:carol", "*", Operation.WRITE, Permission.ALLOW
    )
    image.apply(*acl_record("team-a", _acl("orders", Operation.WRITE), True))
    image.apply(*acl_record("team-a", use, True))
    s = session(image, allow_if_no_acl=False)
    granted_txn(s)
    grant, frame = s.ctx.grant, produce_named(["orders"], txn="t")
    assert TABLE.sent(frame, grant) is not None
    image.apply(*acl_record("team-a", use, False))
    assert TABLE.sent(frame, grant) is None
    assert sent(s, frame) is None  # the session refuses it now


def test_a_name_is_granted_for_produce_alone_and_never_another_vcs():
    image = make_image()
    s = session(image)
    granted_named(s)
    assert TABLE.sent(produce_named(["x"]), s.ctx.grant) is None
    other = session(image, principal="User:bob")  # team-b: its own link x, never carol's orders
    assert sent(other, produce_named(["x"])) is not None
    assert TABLE.sent(produce_named(["orders"]), other.ctx.grant) is None


def test_a_link_that_shares_its_topic_with_another_name_is_not_granted():
    """The answer names the topic once: which name the client used only the session remembers."""
    image = make_image()
    image.apply(*link_record("team-a", "orders-too", _physical(image, "team-a", "orders")))
    s = session(image)
    frame = produce_named(["orders"])
    assert sent(s, frame) is not None
    assert s.ctx.grant is None or len(s.ctx.grant) == 0
    assert TABLE.sent(frame, s.ctx.grant) is None


def test_a_name_the_caller_may_not_write_is_not_granted_nor_is_the_rest_of_its_request():
    image = make_image()
    image.apply(*acl_record("team-a", _acl("orders", Operation.WRITE), True))
    s = session(image, allow_if_no_acl=False)
    both = produce_named(["orders", "payments"])
    assert sent(s, both) is not None
    assert s.ctx.grant is None or len(s.ctx.grant) == 0
    granted_named(s)
    assert TABLE.sent(produce_named(["orders"]), s.ctx.grant) is not None
    assert TABLE.sent(both, s.ctx.grant) is None


def test_a_right_revoked_voids_the_name_grant_at_once():
    image = make_image()
    write = _acl("orders", Operation.WRITE)
    image.apply(*acl_record("team-a", write, True))
    s = session(image, allow_if_no_acl=False)
    granted_named(s)
    grant = s.ctx.grant
    frame = produce_named(["orders"])
    assert TABLE.sent(frame, grant) is not None
    image.apply(*acl_record("team-a", write, False))
    assert TABLE.sent(frame, grant) is None
    assert TABLE.answered(ApiKey.PRODUCE, 10, answer_named([_physical(image, "team-a", "orders")]), grant) is None


def test_a_name_relinked_to_another_topic_is_the_sessions():
    image = make_image()
    s = session(image)
    granted_named(s)
    grant = s.ctx.grant
    image.apply(*link_record("team-a", "orders", f"{uuid.uuid4()}.orders"))
    assert TABLE.sent(produce_named(["orders"]), grant) is None


def test_an_answer_by_name_with_a_message_or_a_name_not_granted_goes_to_the_session():
    image = make_image()
    s = session(image)
    granted_named(s)
    grant, physical = s.ctx.grant, _physical(image, "team-a", "orders")
    assert TABLE.answered(ApiKey.PRODUCE, 10, answer_named([physical]), grant) is not None
    assert TABLE.answered(ApiKey.PRODUCE, 10, answer_named([physical], message="bad record"), grant) is None
    assert TABLE.answered(ApiKey.PRODUCE, 10, answer_named([_physical(image, "team-b", "x")]), grant) is None
    assert TABLE.answered(ApiKey.PRODUCE, 10, answer_named(["orders"]), grant) is None  # the client's name, unmapped
    assert TABLE.answered(ApiKey.PRODUCE, 10, answer_named([physical]), None) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(st.sampled_from(["orders", "payments", "x", "nope", ""]), max_size=3),
    version=st.sampled_from(range(3, 13)),
    txn=st.sampled_from([None, "", "t", "u"]),
    acks=st.sampled_from([-1, 0, 1]),
    seed=st.integers(0, 1 << 30),
    cut=st.integers(0, 2),
)
def test_wherever_the_forwarder_renames_a_request_the_session_sends_the_same_bytes(
    names, version, txn, acks, seed, cut
):
    image = make_image()
    s = session(image)
    granted_named(s, version)
    s.ctx.grant.add_names(ApiKey.PRODUCE, TOPIC, [(b"payments", _physical(image, "team-a", "payments").encode())])
    granted_txn(s, version)
    frame = mutated(produce_named(names, version, txn=txn, acks=acks), random.Random(seed), cut)
    mine = TABLE.sent(frame, s.ctx.grant)
    if mine is None:
        return
    before = len(s.in_flight)
    assert sent(s, frame) == mine
    correlation = int.from_bytes(frame[8:12], "big", signed=True)
    assert TABLE.classify(frame, s.ctx.grant) == (correlation, len(s.in_flight) > before)


@pytest.mark.parametrize("version", NAMED)
def test_every_answer_by_name_it_renames_is_the_sessions_rewrite(version):
    rng = random.Random(1134 + version)
    image = make_image()
    physical = {n: _physical(image, vc, n) for vc, n in (("team-a", "orders"), ("team-a", "payments"), ("team-b", "x"))}
    _, res = _schema("produce", version)
    passed = held = 0
    for _ in range(200):
        s = session(image)
        granted_named(s, version)
        reply = response_frame(ApiKey.PRODUCE, version, 5, fuzz_session._body(res.ProduceResponse, rng))
        if rng.random() < 0.7:
            picked = rng.sample(["orders", "orders", "x"], rng.randrange(1, 3))
            reply = answer_named([physical[n] for n in picked], version)
        mine = TABLE.answered(ApiKey.PRODUCE, version, reply, s.ctx.grant)
        if mine is None:
            held += 1
            continue
        passed += 1
        assert session_answer(s, produce_named(["orders"], version), reply) == mine
    assert passed > 30 and held > 30


def test_a_grant_holds_a_bounded_number_of_names():
    """A client may name as many transactional ids as it likes: past 4,096 per kind, the rest stay the session's."""
    s = session(make_image())
    granted_named(s)
    grant = s.ctx.grant
    before = len(grant)
    grant.add_names(ApiKey.PRODUCE, TXN, [(f"t{i}".encode(), f"p.t{i}".encode()) for i in range(5000)])
    assert len(grant) == before + 4096
    assert TABLE.sent(produce_named(["orders"], txn="t4095"), grant) is not None
    assert TABLE.sent(produce_named(["orders"], txn="t4096"), grant) is None


# -- Fetch v13-v14 (Java consumers 3.1-3.4): by topic id, its replica id still a regular field -------------------------


def fetch13(
    ids: list[uuid.UUID], session_id: int = 0, epoch: int = -1, replica: int = -1, correlation: int = 6
) -> bytes:
    return fetch(ids, session_id, epoch, correlation, version=13, replica_id=replica)


def fetched13(ids: list[uuid.UUID], session_id: int = 0, correlation: int = 6) -> bytes:
    return fetched(ids, session_id, correlation=correlation, version=13)


def test_a_consumers_fetch_v13_in_its_own_session_is_served():
    s = session(make_image())
    in_session(s, version=13)
    grant = s.ctx.grant
    assert TABLE.classify(fetch13([ORDERS], 77, 1), grant) == (6, True)
    assert TABLE.classify(fetch13([ORDERS]), grant) == (6, True)  # no session
    assert TABLE.untouched(ApiKey.FETCH, 13, fetched13([ORDERS], 77), grant, (77, 1))
    assert not TABLE.untouched(ApiKey.FETCH, 13, fetched13([FOREIGN], 77), grant, (77, 1))
    assert TABLE.classify(fetch13([FOREIGN], 77, 1), grant) is None
    assert TABLE.classify(fetch13([ORDERS], 99, 1), grant) is None  # a session not granted


@pytest.mark.parametrize("replica", [0, 1, 1 << 30])
def test_a_followers_fetch_v13_is_never_served(replica):
    """A broker's replica id reads as a follower (beyond the high watermark, other replicas' state): the session
    refuses it, and the forwarder never serves it, whatever the grant."""
    s = session(make_image())
    in_session(s, version=13)
    frame = fetch13([ORDERS], 77, 1, replica=replica)
    assert TABLE.classify(frame, s.ctx.grant) is None
    assert sent(s, frame) is None  # CLUSTER_AUTHORIZATION_FAILED, answered by the proxy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ids=st.lists(st.sampled_from([ORDERS, PAYMENTS, FOREIGN]), max_size=2),
    session_id=st.sampled_from([0, 77, 99]),
    epoch=st.sampled_from([-1, 0, 1, 5]),
    replica=st.sampled_from([-1, -2, 0, 3]),
    seed=st.integers(0, 1 << 30),
    cut=st.integers(0, 3),
)
def test_wherever_the_forwarder_serves_a_fetch_v13_the_session_sends_it_unchanged(
    ids, session_id, epoch, replica, seed, cut
):
    image = make_image()
    s = session(image)
    in_session(s, version=13)
    FETCH_SESSIONS.record(image.vcs["team-b"].id, s.ctx.broker, 99)
    frame = mutated(fetch13(ids, session_id, epoch, replica, correlation=9), random.Random(seed), cut)
    mine = TABLE.classify(frame, s.ctx.grant)
    if mine is None:
        return
    assert sent(s, frame) == frame
    assert mine == (int.from_bytes(frame[8:12], "big", signed=True), True)


# -- Fetch by name (v7-v12: Java's before 3.1, sarama's, older librdkafka's and kafka-python's) ---------------------

FETCH_NAMED = (7, 11, 12)  # the first with a session, int16 strings; librdkafka's and sarama's; compact strings


def fetch_named(
    names: list[str], session_id: int = 0, epoch: int = -1, forget: tuple = (), version: int = 12, correlation: int = 6
) -> bytes:
    req, _ = _schema("fetch", version)
    fields = {f.name for f in dataclasses.fields(req.FetchRequest)}
    partition = {f.name for f in dataclasses.fields(req.FetchPartition)}
    extra = {"partition_max_bytes": 1 << 20, "fetch_offset": 0}
    if "log_start_offset" in partition:
        extra["log_start_offset"] = -1
    if "current_leader_epoch" in partition:
        extra["current_leader_epoch"] = -1
    topics = tuple(req.FetchTopic(topic=n, partitions=(req.FetchPartition(partition=0, **extra),)) for n in names)
    body: dict[str, Any] = {
        "replica_id": -1,
        "max_wait": datetime.timedelta(milliseconds=500),
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": topics,
    }
    if "session_id" in fields:
        forgotten = tuple(req.ForgottenTopic(topic=n, partitions=(0,)) for n in forget)
        body |= {"session_id": session_id, "session_epoch": epoch, "forgotten_topics_data": forgotten}
    if "rack_id" in fields:
        body["rack_id"] = ""
    return request_frame(ApiKey.FETCH, version, correlation, req.FetchRequest(**body))


def fetched_named(names: list[str], session_id: int = 0, version: int = 12, error: int = 0) -> bytes:
    _, res = _schema("fetch", version)
    fields = {f.name for f in dataclasses.fields(res.PartitionData)}
    extra = {k: v for k, v in {"last_stable_offset": 10, "log_start_offset": 0}.items() if k in fields}
    if "preferred_read_replica" in fields:
        extra["preferred_read_replica"] = -1
    partition = res.PartitionData(
        partition_index=0, error_code=ErrorCode.none, high_watermark=10, aborted_transactions=None,
        records=b"\0" * 61, **extra,
    )  # fmt: skip
    body: dict[str, Any] = {
        "throttle_time": datetime.timedelta(0),
        "responses": tuple(res.FetchableTopicResponse(topic=n, partitions=(partition,)) for n in names),
    }
    if "session_id" in {f.name for f in dataclasses.fields(res.FetchResponse)}:
        body |= {"error_code": ErrorCode(error), "session_id": session_id}
    return response_frame(ApiKey.FETCH, version, 6, res.FetchResponse(**body))


def in_named_session(s: ProxySession, version: int = 12, session_id: int = 77) -> bytes:
    """`s` fetched `orders` by name and the broker opened fetch session `session_id` for it: the name and the session
    granted. What the session sent."""
    out = sent(s, fetch_named(["orders"], epoch=0, version=version))
    assert out is not None and b"orders" in out and out != fetch_named(["orders"], epoch=0, version=version)
    physical = _physical(s.tenancy.image, "team-a", "orders")
    s.on_response(memoryview(bytearray(fetched_named([physical], session_id, version))))
    return out


@pytest.mark.parametrize("version", FETCH_NAMED)
def test_a_fetch_by_name_of_the_vcs_link_is_renamed_as_the_session_renames_it_both_ways(version):
    image = make_image()
    s = session(image)
    in_named_session(s, version)
    grant = s.ctx.grant
    physical = _physical(image, "team-a", "orders")
    session_id, epoch = 77, 1
    frame = fetch_named(["orders"], session_id, epoch, version=version)
    assert grant.owns_session(77)
    expected = TABLE.sent(frame, grant)
    other = session(image)
    in_named_session(other, version)
    assert expected is not None and expected == sent(other, frame)
    assert physical.encode() in expected and len(expected) == len(frame) + len(physical) - len("orders")
    reply = fetched_named([physical], session_id, version)
    back = TABLE.answered(ApiKey.FETCH, version, reply, grant, (session_id, epoch))
    assert back is not None and back == session_answer(other, frame, reply)
    assert physical.encode() not in back and b"orders" in back
    assert TABLE.sent(fetch_named(["payments"], session_id, epoch, version=version), grant) is None  # not yet granted
    assert TABLE.sent(fetch_named(["x"], session_id, epoch, version=version), grant) is None  # another VC's link
    assert TABLE.sent(frame) is None  # no grant, nothing served


def test_a_fetch_by_name_answer_naming_what_the_grant_does_not_hold_is_the_sessions():
    image = make_image()
    s = session(image)
    in_named_session(s)
    grant = s.ctx.grant
    foreign = _physical(image, "team-b", "x")
    mine = _physical(image, "team-a", "orders")
    assert TABLE.answered(ApiKey.FETCH, 12, fetched_named([mine, foreign], 77), grant, (77, 1)) is None
    assert TABLE.answered(ApiKey.FETCH, 12, fetched_named([mine], 78), grant, (77, 1)) is None  # a new session
    assert TABLE.answered(ApiKey.FETCH, 12, fetched_named([mine], 77, error=70), grant, (77, 1)) is None


def test_a_read_right_revoked_voids_the_fetch_by_name_grant():
    image = make_image()
    image.apply(*acl_record("team-a", _acl("orders", Operation.READ), True))
    s = session(image, allow_if_no_acl=False)
    in_named_session(s)
    frame = fetch_named(["orders"], 77, 1)
    assert TABLE.sent(frame, s.ctx.grant) is not None
    image.apply(*acl_record("team-a", _acl("orders", Operation.READ), False))
    assert TABLE.sent(frame, s.ctx.grant) is None
    assert TABLE.sent(fetch_named(["orders"], 77, 1), s.ctx.grant) is None


def test_a_write_grant_by_name_is_not_a_read_grant():
    s = session(make_image())
    granted_named(s)  # a Produce to orders by name
    assert TABLE.sent(fetch_named(["orders"]), s.ctx.grant) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(st.sampled_from(["orders", "payments", "x", "nope"]), max_size=2),
    forget=st.lists(st.sampled_from(["orders", "x"]), max_size=1),
    session_id=st.sampled_from([0, 77, 99]),
    epoch=st.sampled_from([-1, 0, 1, 5]),
    version=st.sampled_from(FETCH_NAMED),
    seed=st.integers(0, 1 << 30),
    cut=st.integers(0, 3),
)
def test_wherever_the_forwarder_serves_a_fetch_by_name_the_session_sends_the_same_bytes(
    names, forget, session_id, epoch, version, seed, cut
):
    image = make_image()
    s = session(image)
    in_named_session(s, version)
    FETCH_SESSIONS.record(image.vcs["team-b"].id, s.ctx.broker, 99)
    frame = fetch_named(names, session_id, epoch, tuple(forget), version, correlation=9)
    frame = mutated(frame, random.Random(seed), cut)
    mine = TABLE.sent(frame, s.ctx.grant)
    if mine is None:
        return
    assert sent(s, frame) == mine


def test_every_fetch_by_name_answer_it_renames_is_the_sessions_rewrite():
    rng = random.Random(7)
    passed = held = 0
    for _ in range(300):
        version = rng.choice(FETCH_NAMED)
        image = make_image()
        s = session(image)
        in_named_session(s, version)
        request = fetch_named(["orders"], 77, 1, version=version)
        assert sent(s, request) is not None
        mine, foreign = _physical(image, "team-a", "orders"), _physical(image, "team-b", "x")
        if rng.random() < 0.5:
            _, res = _schema("fetch", version)
            reply = response_frame(ApiKey.FETCH, version, 6, fuzz_session._body(res.FetchResponse, rng))
        else:
            reply = fetched_named(
                rng.sample([mine, mine, foreign], rng.randrange(1, 3)), rng.choice([77, 77, 0]), version
            )
        back = TABLE.answered(ApiKey.FETCH, version, reply, s.ctx.grant, (77, 1))
        if back is None:
            held += 1
            continue
        passed += 1
        assert back == b"".join(bytes(p) for p in s.on_response(memoryview(bytearray(reply))).pieces)
    assert passed > 30 and held > 30


# -- A group member's own requests: its group id renamed by the grant ---------------------------------------------


def heartbeat(group: str, version: int = 4, member: str = "m-1") -> bytes:
    req, _ = _schema("heartbeat", version)
    fields = {f.name for f in dataclasses.fields(req.HeartbeatRequest)}
    optional = {"group_instance_id": None} if "group_instance_id" in fields else {}
    body = req.HeartbeatRequest(group_id=group, generation_id=3, member_id=member, **optional)
    return request_frame(ApiKey.HEARTBEAT, version, 5, body)


def heartbeat_answer(version: int = 4, error: ErrorCode = ErrorCode.none) -> bytes:
    _, res = _schema("heartbeat", version)
    fields = {f.name for f in dataclasses.fields(res.HeartbeatResponse)}
    optional = {"throttle_time": datetime.timedelta(0)} if "throttle_time" in fields else {}
    return response_frame(ApiKey.HEARTBEAT, version, 5, res.HeartbeatResponse(error_code=error, **optional))


def _present(cls: type, **values: Any) -> Any:
    """`cls` made of those of `values` it has (the fields an API version has)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in fields})


def offset_commit(group: str, names: list[str], version: int = 8) -> bytes:
    req, _ = _schema("offset_commit", version)
    partition = _present(
        req.OffsetCommitRequestPartition,
        partition_index=0,
        committed_offset=42,
        committed_leader_epoch=-1,
        committed_metadata="",
        commit_timestamp=-1,
    )
    topics = tuple(req.OffsetCommitRequestTopic(name=n, partitions=(partition,)) for n in names)
    body = _present(
        req.OffsetCommitRequest,
        group_id=group,
        generation_id_or_member_epoch=3,
        member_id="m-1",
        group_instance_id=None,
        retention_time_ms=datetime.timedelta(milliseconds=-1),
        topics=topics,
    )
    return request_frame(ApiKey.OFFSET_COMMIT, version, 5, body)


def offset_commit_answer(names: list[str], version: int = 8) -> bytes:
    _, res = _schema("offset_commit", version)
    partition = res.OffsetCommitResponsePartition(partition_index=0, error_code=ErrorCode.none)
    topics = tuple(res.OffsetCommitResponseTopic(name=n, partitions=(partition,)) for n in names)
    body = _present(res.OffsetCommitResponse, throttle_time=datetime.timedelta(0), topics=topics)
    return response_frame(ApiKey.OFFSET_COMMIT, version, 5, body)


def leave_group(group: str, version: int = 5) -> bytes:
    req, _ = _schema("leave_group", version)
    if version < 3:
        return request_frame(ApiKey.LEAVE_GROUP, version, 5, req.LeaveGroupRequest(group_id=group, member_id="m-1"))
    member = _present(req.MemberIdentity, member_id="m-1", group_instance_id=None, reason="bye")
    return request_frame(ApiKey.LEAVE_GROUP, version, 5, req.LeaveGroupRequest(group_id=group, members=(member,)))


def leave_group_answer(version: int = 5) -> bytes:
    _, res = _schema("leave_group", version)
    body = _present(res.LeaveGroupResponse, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, members=())
    return response_frame(ApiKey.LEAVE_GROUP, version, 5, body)


def granted_group(s: ProxySession, frame: bytes, reply: bytes) -> bytes:
    """A session that let `frame` through, its group renamed as the VC's; what it sent."""
    out = sent(s, frame)
    assert out is not None and out != frame
    s.on_response(memoryview(bytearray(reply)))
    return out


@pytest.mark.parametrize("version", [0, 3, 4])
def test_a_heartbeat_the_session_let_through_is_granted_and_renamed_as_the_session_renames_it(version):
    image = make_image()
    s = session(image)
    frame = heartbeat("g", version)
    expected = granted_group(s, frame, heartbeat_answer(version))
    assert image.vcs["team-a"].physical_group("g").encode() in expected
    assert TABLE.sent(frame, s.ctx.grant) == expected == sent(session(image), frame)
    assert TABLE.sent(heartbeat("g", version, member="m-2"), s.ctx.grant) is not None  # the group is granted
    assert TABLE.sent(heartbeat("h", version), s.ctx.grant) is None  # another group: not yet
    assert TABLE.sent(frame) is None  # no grant, nothing served
    reply = heartbeat_answer(version, ErrorCode.rebalance_in_progress)
    assert TABLE.answered(ApiKey.HEARTBEAT, version, reply, s.ctx.grant) == session_answer(session(image), frame, reply)


def test_a_group_granted_on_one_vcs_connection_is_renamed_as_that_vcs_on_another():
    image = make_image()
    carol = session(image)
    granted_group(carol, heartbeat("g"), heartbeat_answer())
    bob = session(image, principal="User:bob")
    mine = granted_group(bob, heartbeat("g"), heartbeat_answer())
    assert TABLE.sent(heartbeat("g"), bob.ctx.grant) == mine
    assert image.vcs["team-b"].physical_group("g").encode() in mine
    assert image.vcs["team-a"].physical_group("g").encode() not in mine


def test_a_group_is_granted_for_its_api_alone():
    """A Heartbeat's grant of group `g` is not an OffsetCommit's, nor a LeaveGroup's: each is the session's first."""
    s = session(make_image())
    granted_group(s, heartbeat("g"), heartbeat_answer())
    assert TABLE.sent(offset_commit("g", ["orders"]), s.ctx.grant) is None
    assert TABLE.sent(heartbeat("g"), s.ctx.grant) is not None


def _group_acl(group: str, op: Operation = Operation.READ) -> AclBinding:
    return AclBinding(ResourceType.GROUP, group, PatternType.LITERAL, "User:carol", "*", op, Permission.ALLOW)


def test_a_group_the_caller_may_not_use_is_never_granted():
    image = make_image()
    image.apply(*acl_record("team-a", _group_acl("other"), True))  # another group, not this one
    s = session(image, allow_if_no_acl=False)
    granted_group(s, heartbeat("other"), heartbeat_answer())
    frame = heartbeat("g")
    assert sent(s, frame) is None  # refused before it leaves: GROUP_AUTHORIZATION_FAILED
    assert s.ctx.grant is not None and TABLE.sent(heartbeat("other"), s.ctx.grant) is not None
    assert TABLE.sent(frame, s.ctx.grant) is None


def test_a_group_right_revoked_voids_its_grant():
    image = make_image()
    read = _group_acl("g")
    image.apply(*acl_record("team-a", read, True))
    s = session(image, allow_if_no_acl=False)
    granted_group(s, heartbeat("g"), heartbeat_answer())
    grant = s.ctx.grant
    assert TABLE.sent(heartbeat("g"), grant) is not None
    image.apply(*acl_record("team-a", read, False))
    assert TABLE.sent(heartbeat("g"), grant) is None


@pytest.mark.parametrize("version", [2, 8, 9])
def test_an_offset_commit_by_name_is_granted_and_renamed_both_ways_as_the_session_renames_it(version):
    image = make_image()
    s = session(image)
    physical = _physical(image, "team-a", "orders")
    frame = offset_commit("g", ["orders"], version)
    expected = granted_group(s, frame, offset_commit_answer([physical], version))
    assert TABLE.sent(frame, s.ctx.grant) == expected == sent(session(image), frame)
    assert TABLE.sent(offset_commit("g", ["x"], version), s.ctx.grant) is None  # another VC's link
    assert TABLE.sent(offset_commit("g", ["payments"], version), s.ctx.grant) is None  # not granted yet
    reply = offset_commit_answer([physical], version)
    back = TABLE.answered(ApiKey.OFFSET_COMMIT, version, reply, s.ctx.grant)
    assert back == session_answer(session(image), frame, reply)
    assert back is not None and physical.encode() not in back and b"orders" in back


def test_a_write_grant_of_a_topic_is_not_an_offset_commits():
    s = session(make_image())
    granted_named(s)  # Produce by name to orders
    assert TABLE.sent(offset_commit("g", ["orders"]), s.ctx.grant) is None


MEMBER_APIS = {ApiKey.HEARTBEAT: (0, 4), ApiKey.OFFSET_COMMIT: (2, 9), ApiKey.LEAVE_GROUP: (0, 5)}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["g", "h", "x" * 300, ""]),
    st.lists(st.sampled_from(["orders", "payments", "x", "nope"]), max_size=3),
    st.sampled_from([(k, v) for k, vs in MEMBER_APIS.items() for v in vs]),
    st.integers(0, 2**32),
    st.integers(0, 2),
)
def test_wherever_the_forwarder_serves_a_group_members_request_the_session_sends_the_same_bytes(
    group, names, api, seed, cut
):
    key, version = api
    image = make_image()
    s = session(image)
    physical = _physical(image, "team-a", "orders")
    granted_group(s, heartbeat("g", version if key == ApiKey.HEARTBEAT else 4), heartbeat_answer())
    granted_group(s, offset_commit("g", ["orders"], 9), offset_commit_answer([physical], 9))
    granted_group(s, leave_group("g"), leave_group_answer())
    if key == ApiKey.HEARTBEAT:
        base = heartbeat(group, version)
    elif key == ApiKey.LEAVE_GROUP:
        base = leave_group(group, version)
    else:
        base = offset_commit(group, names, version)
    frame = mutated(base, random.Random(seed), cut)
    mine = TABLE.sent(frame, s.ctx.grant)
    if mine is not None:
        assert mine == sent(session(image), frame)


# -- A transactional producer's own requests: its transactional id (and group, and topics) granted per API ----------


def add_partitions(txn: str, names: list[str], version: int = 3) -> bytes:
    req, _ = _schema("add_partitions_to_txn", version)
    topics = tuple(req.AddPartitionsToTxnTopic(name=n, partitions=(0,)) for n in names)
    body = req.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn,
        v3_and_below_producer_id=7,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=topics,
    )
    return request_frame(ApiKey.ADD_PARTITIONS_TO_TXN, version, 5, body)


def add_partitions_answer(names: list[str], version: int = 3) -> bytes:
    _, res = _schema("add_partitions_to_txn", version)
    partition = res.AddPartitionsToTxnPartitionResult(partition_index=0, partition_error_code=ErrorCode.none)
    topics = tuple(res.AddPartitionsToTxnTopicResult(name=n, results_by_partition=(partition,)) for n in names)
    body = res.AddPartitionsToTxnResponse(throttle_time=datetime.timedelta(0), results_by_topic_v3_and_below=topics)
    return response_frame(ApiKey.ADD_PARTITIONS_TO_TXN, version, 5, body)


def add_offsets(txn: str, group: str, version: int = 3) -> bytes:
    req, _ = _schema("add_offsets_to_txn", version)
    body = req.AddOffsetsToTxnRequest(transactional_id=txn, producer_id=7, producer_epoch=0, group_id=group)
    return request_frame(ApiKey.ADD_OFFSETS_TO_TXN, version, 5, body)


def add_offsets_answer(version: int = 3, error: ErrorCode = ErrorCode.none) -> bytes:
    _, res = _schema("add_offsets_to_txn", version)
    body = res.AddOffsetsToTxnResponse(throttle_time=datetime.timedelta(0), error_code=error)
    return response_frame(ApiKey.ADD_OFFSETS_TO_TXN, version, 5, body)


def end_txn(txn: str, version: int = 3, committed: bool = True) -> bytes:
    req, _ = _schema("end_txn", version)
    body = req.EndTxnRequest(transactional_id=txn, producer_id=7, producer_epoch=0, committed=committed)
    return request_frame(ApiKey.END_TXN, version, 5, body)


def end_txn_answer(version: int = 3, error: ErrorCode = ErrorCode.none) -> bytes:
    _, res = _schema("end_txn", version)
    body = _present(
        res.EndTxnResponse, throttle_time=datetime.timedelta(0), error_code=error, producer_id=7, producer_epoch=1
    )
    return response_frame(ApiKey.END_TXN, version, 5, body)


def txn_offset_commit(txn: str, group: str, names: list[str], version: int = 3) -> bytes:
    req, _ = _schema("txn_offset_commit", version)
    partition = _present(
        req.TxnOffsetCommitRequestPartition,
        partition_index=0,
        committed_offset=42,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    topics = tuple(req.TxnOffsetCommitRequestTopic(name=n, partitions=(partition,)) for n in names)
    body = _present(
        req.TxnOffsetCommitRequest,
        transactional_id=txn,
        group_id=group,
        producer_id=7,
        producer_epoch=0,
        generation_id=3,
        member_id="m-1",
        group_instance_id=None,
        topics=topics,
    )
    return request_frame(ApiKey.TXN_OFFSET_COMMIT, version, 5, body)


def txn_offset_commit_answer(names: list[str], version: int = 3) -> bytes:
    _, res = _schema("txn_offset_commit", version)
    partition = res.TxnOffsetCommitResponsePartition(partition_index=0, error_code=ErrorCode.none)
    topics = tuple(res.TxnOffsetCommitResponseTopic(name=n, partitions=(partition,)) for n in names)
    body = res.TxnOffsetCommitResponse(throttle_time=datetime.timedelta(0), topics=topics)
    return response_frame(ApiKey.TXN_OFFSET_COMMIT, version, 5, body)


TXN_APIS = {
    ApiKey.ADD_PARTITIONS_TO_TXN: range(0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN: range(0, 5),
    ApiKey.END_TXN: range(0, 6),
    ApiKey.TXN_OFFSET_COMMIT: range(0, 6),
}


def txn_request(
    key: int, version: int, txn: str = "t", group: str = "g", names: tuple[str, ...] = ("orders",)
) -> bytes:
    if key == ApiKey.ADD_PARTITIONS_TO_TXN:
        return add_partitions(txn, list(names), version)
    if key == ApiKey.ADD_OFFSETS_TO_TXN:
        return add_offsets(txn, group, version)
    if key == ApiKey.END_TXN:
        return end_txn(txn, version)
    return txn_offset_commit(txn, group, list(names), version)


def txn_answer(image: TenancyImage, key: int, version: int, names: tuple[str, ...] = ("orders",)) -> bytes:
    """The broker's answer to `txn_request` (its topics by their physical names)."""
    physical = [_physical(image, "team-a", n) for n in names]
    if key == ApiKey.ADD_PARTITIONS_TO_TXN:
        return add_partitions_answer(physical, version)
    if key == ApiKey.ADD_OFFSETS_TO_TXN:
        return add_offsets_answer(version)
    if key == ApiKey.END_TXN:
        return end_txn_answer(version)
    return txn_offset_commit_answer(physical, version)


def granted_txn_api(s: ProxySession, key: int, version: int, **names: Any) -> bytes:
    """A session that let `txn_request` through, renamed as the VC's; what it sent."""
    out = sent(s, txn_request(key, version, **names))
    assert out is not None and s.ctx.vc.physical_txn(names.get("txn", "t")).encode() in out
    s.on_response(memoryview(bytearray(txn_answer(s.tenancy.image, key, version, names.get("names", ("orders",))))))
    return out


TXN_VERSIONS = [(k, v) for k, vs in TXN_APIS.items() for v in vs]


@pytest.mark.parametrize(("key", "version"), TXN_VERSIONS)
def test_a_transactional_request_the_session_let_through_is_granted_and_renamed_both_ways_as_the_session_does(
    key, version
):
    image = make_image()
    s = session(image)
    expected = granted_txn_api(s, key, version)
    frame = txn_request(key, version)
    assert TABLE.sent(frame, s.ctx.grant) == expected == sent(session(image), frame)
    assert TABLE.sent(txn_request(key, version, txn="u"), s.ctx.grant) is None  # another id: not yet
    assert TABLE.sent(frame) is None  # no grant, nothing served
    reply = txn_answer(image, key, version)
    back = TABLE.answered(key, version, reply, s.ctx.grant)
    assert back == session_answer(session(image), frame, reply)
    assert back is not None and _physical(image, "team-a", "orders").encode() not in back


@pytest.mark.parametrize("key", [ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.TXN_OFFSET_COMMIT])
def test_a_transactional_request_naming_a_topic_not_granted_is_the_sessions(key):
    s = session(make_image())
    granted_txn_api(s, key, 3)
    assert TABLE.sent(txn_request(key, 3, names=("orders", "payments")), s.ctx.grant) is None  # not yet
    assert TABLE.sent(txn_request(key, 3, names=("x",)), s.ctx.grant) is None  # another VC's link


def test_a_transactional_ids_grant_is_for_its_api_alone():
    """A Produce's grant of id `t` is not an EndTxn's, and an EndTxn's not an AddOffsetsToTxn's: each is the session's
    first, where the VC's ACLs are asked for what that API needs."""
    s = session(make_image())
    granted_txn(s)  # a transactional Produce
    assert TABLE.sent(end_txn("t"), s.ctx.grant) is None
    granted_txn_api(s, ApiKey.END_TXN, 3)
    assert TABLE.sent(end_txn("t"), s.ctx.grant) is not None
    assert TABLE.sent(add_offsets("t", "g"), s.ctx.grant) is None
    assert TABLE.sent(txn_offset_commit("t", "g", ["orders"]), s.ctx.grant) is None


def test_a_transactional_id_granted_on_one_vcs_connection_is_renamed_as_that_vcs_on_another():
    image = make_image()
    carol = session(image)
    granted_txn_api(carol, ApiKey.END_TXN, 3)
    bob = session(image, principal="User:bob")
    assert TABLE.sent(end_txn("t"), bob.ctx.grant) is None  # bob's connection: no grant of its own yet
    mine = sent(bob, end_txn("t"))
    assert mine is not None
    bob.on_response(memoryview(bytearray(end_txn_answer())))
    assert TABLE.sent(end_txn("t"), bob.ctx.grant) == mine
    assert image.vcs["team-b"].physical_txn("t").encode() in mine
    assert image.vcs["team-a"].physical_txn("t").encode() not in mine


def _txn_acl(txn: str, op: Operation = Operation.WRITE) -> AclBinding:
    return AclBinding(ResourceType.TRANSACTIONAL_ID, txn, PatternType.LITERAL, "User:carol", "*", op, Permission.ALLOW)


def test_an_end_txn_of_an_id_the_caller_may_not_use_is_never_granted():
    image = make_image()
    image.apply(*acl_record("team-a", _txn_acl("other"), True))  # another id, not this one
    s = session(image, allow_if_no_acl=False)
    granted_txn_api(s, ApiKey.END_TXN, 3, txn="other")
    assert sent(s, end_txn("t")) is None  # refused before it leaves: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert TABLE.sent(end_txn("other"), s.ctx.grant) is not None
    assert TABLE.sent(end_txn("t"), s.ctx.grant) is None


def test_a_transactional_id_described_only_is_never_granted_for_end_txn():
    """DESCRIBE on the id is not WRITE: EndTxn is refused, and nothing of it is granted."""
    image = make_image()
    image.apply(*acl_record("team-a", _txn_acl("t", Operation.DESCRIBE), True))
    s = session(image, allow_if_no_acl=False)
    assert sent(s, end_txn("t")) is None
    assert s.ctx.grant is None or TABLE.sent(end_txn("t"), s.ctx.grant) is None


def test_add_offsets_for_a_group_the_caller_may_not_read_is_never_granted():
    image = make_image()
    image.apply(*acl_record("team-a", _txn_acl("t"), True))
    image.apply(*acl_record("team-a", _group_acl("other"), True))  # another group, not this one
    s = session(image, allow_if_no_acl=False)
    granted_txn_api(s, ApiKey.ADD_OFFSETS_TO_TXN, 3, group="other")
    assert sent(s, add_offsets("t", "g")) is None  # refused: GROUP_AUTHORIZATION_FAILED
    assert TABLE.sent(add_offsets("other", "other"), s.ctx.grant) is None  # an id not granted either
    assert TABLE.sent(add_offsets("t", "g"), s.ctx.grant) is None


def test_a_txn_offset_commit_of_a_topic_the_caller_may_only_write_is_never_granted():
    """TxnOffsetCommit needs READ on its topics: the producer's WRITE on `orders` lets no commit of it through."""
    image = make_image()
    image.apply(*acl_record("team-a", _txn_acl("t"), True))
    image.apply(*acl_record("team-a", _group_acl("g"), True))
    image.apply(*acl_record("team-a", _acl("orders", Operation.WRITE), True))
    s = session(image, allow_if_no_acl=False)
    granted_txn_api(s, ApiKey.ADD_PARTITIONS_TO_TXN, 3)
    frame = txn_offset_commit("t", "g", ["orders"])
    out = sent(s, frame)  # the session answers TOPIC_AUTHORIZATION_FAILED for the topic, or refuses it
    assert out is None or _physical(image, "team-a", "orders").encode() not in out
    assert TABLE.sent(frame, s.ctx.grant) is None


def test_a_transactional_id_right_revoked_voids_its_end_txn_grant():
    image = make_image()
    use = _txn_acl("t")
    image.apply(*acl_record("team-a", use, True))
    s = session(image, allow_if_no_acl=False)
    granted_txn_api(s, ApiKey.END_TXN, 3)
    grant = s.ctx.grant
    assert TABLE.sent(end_txn("t"), grant) is not None
    image.apply(*acl_record("team-a", use, False))
    assert TABLE.sent(end_txn("t"), grant) is None
    assert sent(s, end_txn("t")) is None  # the session refuses it now


@pytest.mark.parametrize("version", [0, 3, 4])
def test_an_end_txn_with_a_null_transactional_id_is_never_served(version):
    """The schema says EndTxn's id is never null: Kafka's parser refuses one, and so does the forwarder's walk (the
    session closes the connection); a null must not pass as Produce's does."""
    s = session(make_image())
    granted_txn_api(s, ApiKey.END_TXN, version)
    frame = end_txn("t", version)
    flexible = version >= 3
    null = frame.replace(b"\x02t" if flexible else b"\x00\x01t", b"\x00" if flexible else b"\xff\xff")
    null = (len(null) - 4).to_bytes(4, "big") + null[4:]
    assert TABLE.sent(null, s.ctx.grant) is None
    assert sent(session(make_image()), null) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["t", "u", "x" * 300, ""]),
    st.sampled_from(["g", "h"]),
    st.lists(st.sampled_from(["orders", "payments", "x", "nope"]), max_size=3),
    st.sampled_from(TXN_VERSIONS),
    st.integers(0, 2**32),
    st.integers(0, 2),
)
def test_wherever_the_forwarder_serves_a_transactional_request_the_session_sends_the_same_bytes(
    txn, group, names, api, seed, cut
):
    key, version = api
    image = make_image()
    s = session(image)
    for k in TXN_APIS:
        granted_txn_api(s, k, 3)
    frame = mutated(txn_request(key, version, txn=txn, group=group, names=tuple(names)), random.Random(seed), cut)
    mine = TABLE.sent(frame, s.ctx.grant)
    if mine is not None:
        assert mine == sent(session(image), frame)


# -- ListOffsets: a consumer's (replica id -1), its topics granted for it by name -----------------------------------


def list_offsets(names: list[str], version: int = 9, replica: int = -1) -> bytes:
    req, _ = _schema("list_offsets", version)
    partition = _present(req.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=-1)
    topics = tuple(req.ListOffsetsTopic(name=n, partitions=(partition,)) for n in names)
    timeout = datetime.timedelta(seconds=30)
    body = _present(req.ListOffsetsRequest, replica_id=replica, isolation_level=1, topics=topics, timeout=timeout)
    return request_frame(ApiKey.LIST_OFFSETS, version, 5, body)


def list_offsets_answer(names: list[str], version: int = 9) -> bytes:
    _, res = _schema("list_offsets", version)
    partition = _present(
        res.ListOffsetsPartitionResponse,
        partition_index=0,
        error_code=ErrorCode.none,
        timestamp=-1,
        offset=42,
        leader_epoch=0,
    )
    topics = tuple(res.ListOffsetsTopicResponse(name=n, partitions=(partition,)) for n in names)
    body = _present(res.ListOffsetsResponse, throttle_time=datetime.timedelta(0), topics=topics)
    return response_frame(ApiKey.LIST_OFFSETS, version, 5, body)


def granted_list_offsets(s: ProxySession, version: int = 9, names: tuple[str, ...] = ("orders",)) -> bytes:
    """A session that let a consumer's ListOffsets of its own topics through, renamed; what it sent."""
    out = sent(s, list_offsets(list(names), version))
    assert out is not None and _physical(s.tenancy.image, "team-a", names[0]).encode() in out
    physical = [_physical(s.tenancy.image, "team-a", n) for n in names]
    s.on_response(memoryview(bytearray(list_offsets_answer(physical, version))))
    return out


@pytest.mark.parametrize("version", [1, 2, 4, 6, 7, 9, 10, 11])
def test_a_consumers_list_offsets_is_granted_and_renamed_both_ways_as_the_session_does(version):
    image = make_image()
    s = session(image)
    expected = granted_list_offsets(s, version)
    frame = list_offsets(["orders"], version)
    assert TABLE.sent(frame, s.ctx.grant) == expected == sent(session(image), frame)
    assert TABLE.sent(list_offsets(["orders", "payments"], version), s.ctx.grant) is None  # not yet
    assert TABLE.sent(list_offsets(["x"], version), s.ctx.grant) is None  # another VC's link
    assert TABLE.sent(frame) is None
    reply = list_offsets_answer([_physical(image, "team-a", "orders")], version)
    back = TABLE.answered(ApiKey.LIST_OFFSETS, version, reply, s.ctx.grant)
    assert back == session_answer(session(image), frame, reply)
    assert back is not None and _physical(image, "team-a", "orders").encode() not in back


@pytest.mark.parametrize("replica", [0, 1, 2**31 - 1])
def test_a_followers_list_offsets_is_never_served(replica):
    """A replica id of a broker's: the session refuses it (closes), the forwarder hands it back."""
    s = session(make_image())
    granted_list_offsets(s)
    frame = list_offsets(["orders"], replica=replica)
    assert TABLE.sent(frame, s.ctx.grant) is None
    assert sent(session(make_image()), frame) is None


def test_list_offsets_bytes_after_the_body_are_the_sessions():
    """The session decodes a ListOffsets and encodes it again, so bytes after its body never reach the broker: the
    forwarder, which would send them on, leaves such a request to it."""
    s = session(make_image())
    granted_list_offsets(s)
    frame = list_offsets(["orders"])
    longer = (len(frame) - 4 + 3).to_bytes(4, "big") + frame[4:] + b"\x00\x00\x00"
    assert TABLE.sent(longer, s.ctx.grant) is None


def test_a_list_offsets_grant_is_for_its_api_alone():
    """A Produce's grant of `orders` (WRITE) is not a ListOffsets' (DESCRIBE), nor the other way round."""
    s = session(make_image())
    granted_named(s)
    assert TABLE.sent(list_offsets(["orders"]), s.ctx.grant) is None
    granted_list_offsets(s)
    assert TABLE.sent(list_offsets(["orders"]), s.ctx.grant) is not None
    assert TABLE.sent(produce_named(["payments"]), s.ctx.grant) is None


def test_list_offsets_of_a_topic_the_caller_may_not_describe_is_never_granted():
    image = make_image()
    image.apply(*acl_record("team-a", _acl("payments", Operation.DESCRIBE), True))  # the other topic, not orders
    s = session(image, allow_if_no_acl=False)
    granted_list_offsets(s, names=("payments",))
    frame = list_offsets(["orders"])
    out = sent(s, frame)  # answered TOPIC_AUTHORIZATION_FAILED for it, never sent on
    assert out is None or _physical(image, "team-a", "orders").encode() not in out
    assert TABLE.sent(frame, s.ctx.grant) is None
    assert TABLE.sent(list_offsets(["payments"]), s.ctx.grant) is not None


def test_a_describe_right_revoked_voids_the_list_offsets_grant():
    image = make_image()
    describe = _acl("orders", Operation.DESCRIBE)
    image.apply(*acl_record("team-a", describe, True))
    s = session(image, allow_if_no_acl=False)
    granted_list_offsets(s)
    grant = s.ctx.grant
    assert TABLE.sent(list_offsets(["orders"]), grant) is not None
    image.apply(*acl_record("team-a", describe, False))
    assert TABLE.sent(list_offsets(["orders"]), grant) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(["orders", "payments", "x", "nope"]), max_size=3),
    st.sampled_from([1, 4, 6, 9, 11]),
    st.sampled_from([-1, -2, 0, 1]),
    st.integers(0, 2**32),
    st.integers(0, 3),
)
def test_wherever_the_forwarder_serves_a_list_offsets_the_session_sends_the_same_bytes(
    names, version, replica, seed, cut
):
    image = make_image()
    s = session(image)
    granted_list_offsets(s, 9, ("orders", "payments"))
    granted_list_offsets(s, version, ("orders", "payments"))
    frame = mutated(list_offsets(names, version, replica), random.Random(seed), cut)
    mine = TABLE.sent(frame, s.ctx.grant)
    if mine is not None:
        assert mine == sent(session(image), frame)


# -- A share consumer's ShareFetch and ShareAcknowledge (KIP-932): its topic ids granted, its group renamed ---------


def share_fetch(group: str, ids: list[uuid.UUID], version: int = 2, key: int = ApiKey.SHARE_FETCH) -> bytes:
    """A ShareFetch (or a ShareAcknowledge) of partition 0 of each topic, acknowledging its first record."""
    api = "share_fetch" if key == ApiKey.SHARE_FETCH else "share_acknowledge"
    req, _ = _schema(api, version)
    batch = req.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=(1,))
    if key == ApiKey.SHARE_FETCH:
        topics = tuple(
            req.FetchTopic(
                topic_id=i, partitions=(req.FetchPartition(partition_index=0, acknowledgement_batches=(batch,)),)
            )
            for i in ids
        )
        body = _present(
            req.ShareFetchRequest,
            group_id=group,
            member_id="m-1",
            share_session_epoch=1,
            max_wait=datetime.timedelta(milliseconds=500),
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=500,
            batch_size=500,
            share_acquire_mode=0,
            is_renew_ack=False,
            topics=topics,
            forgotten_topics_data=(),
        )
    else:
        partition = req.AcknowledgePartition(partition_index=0, acknowledgement_batches=(batch,))
        topics = tuple(req.AcknowledgeTopic(topic_id=i, partitions=(partition,)) for i in ids)
        body = _present(
            req.ShareAcknowledgeRequest,
            group_id=group,
            member_id="m-1",
            share_session_epoch=1,
            is_renew_ack=False,
            topics=topics,
        )
    return request_frame(key, version, 5, body)


SHARE_VERSIONS = [(k, v) for k in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE) for v in (1, 2)]


def granted_share(s: ProxySession, key: int = ApiKey.SHARE_FETCH, version: int = 2, group: str = "g") -> bytes:
    """A session that let a share consumer's request of its own `orders` through, its group renamed; what it sent."""
    out = sent(s, share_fetch(group, [ORDERS], version, key))
    assert out is not None and s.ctx.vc.physical_group(group).encode() in out
    s.on_response(memoryview(bytearray(share_answer([ORDERS], version, key))))
    return out


@pytest.mark.parametrize(("key", "version"), SHARE_VERSIONS)
def test_a_share_consumers_request_is_granted_and_renamed_as_the_session_renames_it(key, version):
    image = make_image()
    s = session(image)
    expected = granted_share(s, key, version)
    frame = share_fetch("g", [ORDERS], version, key)
    assert TABLE.sent(frame, s.ctx.grant) == expected == sent(session(image), frame)
    assert TABLE.sent(share_fetch("h", [ORDERS], version, key), s.ctx.grant) is None  # another group: not yet
    assert TABLE.sent(share_fetch("g", [PAYMENTS], version, key), s.ctx.grant) is None  # not yet
    assert TABLE.sent(share_fetch("g", [FOREIGN], version, key), s.ctx.grant) is None  # another VC's
    assert TABLE.sent(frame) is None
    reply = share_answer([ORDERS], version, key)
    assert TABLE.untouched(key, version, reply, s.ctx.grant)
    assert left_as_it_came(session_of(image, frame), key, version, reply)


def session_of(image: TenancyImage, frame: bytes) -> ProxySession:
    """A new session of carol's that let `frame` through (its answer is next)."""
    s = session(image)
    assert sent(s, frame) is not None
    return s


@pytest.mark.parametrize(("key", "version"), SHARE_VERSIONS)
def test_a_share_answer_naming_a_leader_or_another_vcs_topic_is_the_sessions(key, version):
    s = session(make_image())
    granted_share(s, key, version)
    assert not TABLE.untouched(key, version, share_answer([ORDERS], version, key, leaders=1), s.ctx.grant)
    assert not TABLE.untouched(key, version, share_answer([FOREIGN], version, key), s.ctx.grant)
    assert not TABLE.untouched(key, version, share_answer([ORDERS]), None)  # no grant


def test_a_share_grant_is_for_its_api_alone_and_a_fetch_grant_is_not_one():
    s = session(make_image())
    granted(s)  # a Produce to orders (WRITE)
    assert TABLE.sent(share_fetch("g", [ORDERS]), s.ctx.grant) is None
    granted_share(s, ApiKey.SHARE_FETCH)
    assert TABLE.sent(share_fetch("g", [ORDERS]), s.ctx.grant) is not None
    assert TABLE.sent(share_fetch("g", [ORDERS], key=ApiKey.SHARE_ACKNOWLEDGE), s.ctx.grant) is None


def test_a_share_group_the_caller_may_not_read_is_never_granted_and_a_revoked_right_voids_the_grant():
    image = make_image()
    read_group, read_topic = _group_acl("g"), _acl("orders", Operation.READ)
    image.apply(*acl_record("team-a", read_group, True))
    image.apply(*acl_record("team-a", read_topic, True))
    s = session(image, allow_if_no_acl=False)
    granted_share(s)
    assert sent(s, share_fetch("h", [ORDERS])) is None  # GROUP_AUTHORIZATION_FAILED: never sent on
    assert TABLE.sent(share_fetch("h", [ORDERS]), s.ctx.grant) is None
    grant = s.ctx.grant
    assert TABLE.sent(share_fetch("g", [ORDERS]), grant) is not None
    image.apply(*acl_record("team-a", read_topic, False))
    assert TABLE.sent(share_fetch("g", [ORDERS]), grant) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["g", "h", ""]),
    st.lists(st.sampled_from([ORDERS, PAYMENTS, FOREIGN]), max_size=3),
    st.sampled_from(SHARE_VERSIONS),
    st.integers(0, 2**32),
    st.integers(0, 3),
)
def test_wherever_the_forwarder_serves_a_share_request_the_session_sends_the_same_bytes(group, ids, api, seed, cut):
    key, version = api
    image = make_image()
    s = session(image)
    for k, v in SHARE_VERSIONS:
        granted_share(s, k, v)
    frame = mutated(share_fetch(group, ids, version, key), random.Random(seed), cut)
    mine = TABLE.sent(frame, s.ctx.grant)
    if mine is not None:
        assert mine == sent(session(image), frame)
