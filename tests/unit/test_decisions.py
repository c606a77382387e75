"""The write protocol (docs/security.md#the-write-protocol) against a fake state topic: decisions made one
replica at a time (a replica fenced by another's init decides again against the log, and gets the answer
the plane gives then), each decision's records applied together, answered once applied."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import trio
from kio.schema.alter_user_scram_credentials.v0.response import AlterUserScramCredentialsResponse

from proxy.auth.credentials import CredentialError
from proxy.auth.users import credential_from_salted
from proxy.management import users
from proxy.protocol import codec
from proxy.protocol.apikey import ApiKey
from proxy.state.backup import image_records
from proxy.state.service import TenancyService
from proxy.state.store import DECISION_ID, DECISION_INDEX, DECISION_SIZE, Assembler, Fenced, decision_of
from proxy.tenancy.model import TenancyImage, principal_record, vc_record

from .test_users import alter_request, call, errors, image, session, upsert

NEW = "newcomer"


class FakeLog:
    """One partition shared by the replicas' fake stores: entries are (record, headers), or None for a
    transaction's commit marker (an offset no reader sees); the epoch is the shared transactional.id's."""

    def __init__(self, records: list[Any]):
        self.entries: list[Any] = [(r, None) for r in records]
        self.epoch = 0
        self.changed = threading.Condition()


class FakeStore:
    topic = "state"
    topic_id = None

    def __init__(self, log: FakeLog):
        self.log = log
        self.replayed_offset: int | None = None
        self.epoch: int | None = None  # the epoch this replica's init got (None: not holding one)
        self.before_commit: Any = None  # a test's hook, run in the worker thread before the epoch check
        self.commits = 0
        # As the real follower does, report the end of the partition at once (False: only with a record, as
        # when its fetch is parked); deliver nothing while `gate` is clear (a follower behind the log).
        self.reports_end = True
        self.gate = threading.Event()
        self.gate.set()
        self.probed = threading.Event()  # holds_records was asked

    def ensure_topic(self, timeout: float, create: bool = True) -> None:
        pass

    def replay(self, image: Any, timeout: float = 30) -> int:
        with self.log.changed:
            entries = list(self.log.entries)
        for entry in entries:
            if entry is not None:
                image.apply(*entry[0])
        self.replayed_offset = len(entries)
        return len(entries)

    def prepare_writes(self) -> None:
        pass

    def check(self, timeout: float = 10) -> None:
        return None

    def close(self) -> None:
        pass

    def write(self, records: list[Any], timeout: float = 30) -> list[int]:
        with self.log.changed:
            start = len(self.log.entries)
            self.log.entries.extend((r, None) for r in records)
            self.log.changed.notify_all()
        return list(range(start, start + len(records)))

    def begin_deciding(self, timeout: float = 30) -> None:
        with self.log.changed:
            if self.epoch is None:
                self.log.epoch += 1  # fences every other replica's producer
                self.epoch = self.log.epoch

    def committed_end(self, timeout: float = 30) -> int:
        with self.log.changed:
            return len(self.log.entries)

    def holds_records(self, start: int, end: int, timeout: float = 30) -> bool:
        with self.log.changed:
            found = any(entry is not None for entry in self.log.entries[start:end])
        self.probed.set()
        return found

    def commit(self, records: list[Any], timeout: float = 30) -> list[int]:
        if self.before_commit is not None:
            self.before_commit()
        with self.log.changed:
            if self.epoch != self.log.epoch:
                self.epoch = None
                raise Fenced("fenced by another replica's init")
            start = len(self.log.entries)
            n = str(len(records)).encode()
            for i, record in enumerate(records):
                headers = [(DECISION_ID, f"d{start}".encode()), (DECISION_SIZE, n), (DECISION_INDEX, str(i).encode())]
                self.log.entries.append((record, headers))
            self.log.entries.append(None)  # the commit marker
            self.log.changed.notify_all()
            self.commits += 1
        return list(range(start, start + len(records)))

    def follow(self, on_batch: Any, stop: threading.Event, *, start_offset: int | None = None, **_: Any) -> None:
        position = start_offset or 0
        decisions = Assembler()
        while not stop.is_set():
            with self.log.changed:
                while len(self.log.entries) <= position and not stop.is_set():
                    self.log.changed.wait(0.05)
                entries = self.log.entries[position:]
            while not self.gate.wait(0.05) and not stop.is_set():
                pass
            for offset, entry in enumerate(entries, position):
                if entry is not None:
                    on_batch(*decisions.record(offset, *entry))
                    time.sleep(0.02)  # a slow follower: the loop runs its tasks between two batches
            position += len(entries)
            if entries and self.reports_end:
                on_batch(decisions.end(), position)  # the end of the partition


def test_a_decision_is_applied_whole_and_only_when_complete():
    a, b, c = principal_record("User:x", "team-a"), vc_record("team-a"), principal_record("User:y", "team-a")
    decisions = Assembler()
    head = [(DECISION_ID, b"d1"), (DECISION_SIZE, b"2")]
    assert decisions.record(10, a, [*head, (DECISION_INDEX, b"1")]) == ([], 10)  # resume before it
    assert decisions.record(11, c, None) == ([c], 10)  # a record alone goes on; the decision is still open
    assert decisions.record(12, b, [*head, (DECISION_INDEX, b"0")]) == ([b, a], 13)  # whole, in index order
    assert decisions.record(13, a, [(DECISION_ID, b"d2"), (DECISION_SIZE, b"3"), (DECISION_INDEX, b"2")]) == ([], 13)
    assert decisions.end() == [a] and decisions.resume_at(20) == 20  # compacted: the rest applied at the end


def test_headers_that_do_not_say_a_decision_consistently_are_a_record_alone():
    for headers in (
        None,
        [],
        [(DECISION_ID, b"d"), (DECISION_SIZE, b"2")],
        [(DECISION_ID, b"d"), (DECISION_SIZE, b"two"), (DECISION_INDEX, b"0")],
        [(DECISION_ID, b"d"), (DECISION_SIZE, b"2"), (DECISION_INDEX, b"2")],
        [(DECISION_ID, b""), (DECISION_SIZE, b"1"), (DECISION_INDEX, b"0")],
    ):
        assert decision_of(headers) is None
    assert decision_of([(DECISION_ID, b"d"), (DECISION_SIZE, b"2"), (DECISION_INDEX, b"1")]) == (b"d", 2, 1)


def _password_of(img: TenancyImage, name: str, password: str) -> bool:
    """Whether `password` logs `name` in (its SCRAM-SHA-512 keys in the image)."""
    import hashlib

    stored = img.users.users[name].scram["SCRAM-SHA-512"]
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), stored.salt, stored.iterations)
    try:
        derived = credential_from_salted("SCRAM-SHA-512", stored.salt, stored.iterations, salted)
    except CredentialError:
        return False
    return (derived.stored_key, derived.server_key) == (stored.stored_key, stored.server_key)


async def _replicas(log: FakeLog, nursery: trio.Nursery) -> tuple[TenancyService, TenancyService]:
    one, two = TenancyService(FakeStore(log)), TenancyService(FakeStore(log))  # type: ignore[arg-type]
    await nursery.start(one.run)
    await nursery.start(two.run)
    return one, two


def _decided(body: bytes) -> AlterUserScramCredentialsResponse:
    return codec.decode(AlterUserScramCredentialsResponse, body, 0)[0]


async def test_two_admins_on_two_replicas_one_fenced_decides_again_and_gets_the_planes_refusal(caplog):
    caplog.set_level(logging.INFO, logger="proxy.management.users")
    log = FakeLog(image_records(image()))
    async with trio.open_nursery() as nursery:
        one, two = await _replicas(log, nursery)
        # Both replicas' images say the name is free: each admin's local answer is a success.
        alice, got = call(session(one.image, "User:alice"), 51, alter_request(upsert(NEW, "a-pw")), _RESPONSE)
        assert errors(got) == {NEW: (0, None)} and alice.decide is not None
        bob, got = call(session(two.image, "User:bob"), 51, alter_request(upsert(NEW, "b-pw")), _RESPONSE)
        assert errors(got) == {NEW: (0, None)} and bob.decide is not None

        # alice's replica decides first but commits only after bob's replica began deciding and committed.
        alice_ready, bob_done = threading.Event(), threading.Event()

        def hold_alice() -> None:
            alice_ready.set()
            assert bob_done.wait(30)

        one.store.before_commit = hold_alice
        answers: dict[str, Any] = {}

        async def decide_alice() -> None:
            answers["alice"] = await one.decide(alice.decide)

        async def decide_bob() -> None:
            await trio.to_thread.run_sync(alice_ready.wait, 30)
            answers["bob"] = await two.decide(bob.decide)
            bob_done.set()

        with trio.fail_after(30):
            async with trio.open_nursery() as racing:
                racing.start_soon(decide_alice)
                racing.start_soon(decide_bob)
        nursery.cancel_scope.cancel()

    (bob_body, bob_records), (alice_body, alice_records) = answers["bob"], answers["alice"]
    assert errors(_decided(bob_body)) == {NEW: (0, None)} and len(bob_records) == 2
    assert one.fenced == 1 and one.store.commits == 0 and alice_records == []  # nothing of alice's was written
    # alice's answer is the plane's for a user in another VC, against the image both replicas hold now.
    for replica in (one, two):
        assert replica.image.principals[f"User:{NEW}"] == "team-b" and _password_of(replica.image, NEW, "b-pw")
        assert not _password_of(replica.image, NEW, "a-pw")
    # The audit log says what was committed: bob's credential once; alice's run that was fenced says nothing.
    audit = [r.getMessage() for r in caplog.records if r.name == "proxy.management.users" and NEW in r.getMessage()]
    assert [m for m in audit if "set the" in m] == [f"User:bob set the SCRAM-SHA-512 credential of user '{NEW}'"]
    assert not any("User:alice set" in m for m in audit)
    expected, _ = users.alter(one.image, _alice_scope(one.image), alter_request(upsert(NEW, "a-pw")))
    assert errors(_decided(alice_body)) == errors(expected) == {NEW: (31, errors(expected)[NEW][1])}


async def test_two_admins_on_one_replica_are_decided_one_after_the_other():
    log = FakeLog(image_records(image()))
    async with trio.open_nursery() as nursery:
        one, _ = await _replicas(log, nursery)
        alice, _ = call(session(one.image, "User:alice"), 51, alter_request(upsert(NEW, "a-pw")), _RESPONSE)
        bob, _ = call(session(one.image, "User:bob"), 51, alter_request(upsert(NEW, "b-pw")), _RESPONSE)
        answers: list[tuple[str, Any]] = []

        async def decide(who: str, ex: Any) -> None:
            answers.append((who, await one.decide(ex.decide)))

        with trio.fail_after(30):
            async with trio.open_nursery() as racing:
                racing.start_soon(decide, "alice", alice)
                racing.start_soon(decide, "bob", bob)
        nursery.cancel_scope.cancel()
    (first, (body, records)), (second, (refused, none)) = answers
    assert errors(_decided(body)) == {NEW: (0, None)} and len(records) == 2
    assert errors(_decided(refused))[NEW][0] == 31 and none == []
    assert one.image.principals[f"User:{NEW}"] == {"alice": "team-a", "bob": "team-b"}[first] and first != second
    assert one.fenced == 0 and one.store.commits == 1


async def test_a_decision_is_answered_only_once_applied_and_seen_by_no_one_half_applied():
    log = FakeLog(image_records(image()))
    async with trio.open_nursery() as nursery:
        one, two = await _replicas(log, nursery)
        seen: list[tuple[str | None, bool]] = []

        async def watch() -> None:  # every image version replica two's loop ever shows
            version = two.image.version
            while True:
                version = await two.wait_for_change(version)
                seen.append((two.image.principals.get(f"User:{NEW}"), NEW in two.image.users.users))

        nursery.start_soon(watch)
        alice, _ = call(session(one.image, "User:alice"), 51, alter_request(upsert(NEW, "a-pw")), _RESPONSE)
        with trio.fail_after(30):
            body, records = await one.decide(alice.decide)
        assert errors(_decided(body)) == {NEW: (0, None)} and len(records) == 2
        assert one.image.principals[f"User:{NEW}"] == "team-a"  # applied here before the answer
        with trio.fail_after(30):
            while not seen:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert seen == [("team-a", True)]  # the binding and the credential in one change, never one alone


async def test_a_decision_after_a_commit_does_not_wait_for_the_follower_to_pass_its_marker():
    # The real follower reports the end of the partition (past a commit's marker, which no record shows) only
    # from its next fetch, which the broker parks while nothing new comes. The next decision reads that only
    # the marker lies there (holds_records) instead of waiting: with a follower that never reports the end,
    # each decision after the first would wait for ever.
    log = FakeLog(image_records(image()))
    async with trio.open_nursery() as nursery:
        one, _ = await _replicas(log, nursery)
        one.store.reports_end = False
        with trio.fail_after(30):
            for name in ("first", "second", "third"):
                ex, _ = call(session(one.image, "User:alice"), 51, alter_request(upsert(name, "pw")), _RESPONSE)
                body, records = await one.decide(ex.decide)
                assert errors(_decided(body)) == {name: (0, None)} and len(records) == 2
        nursery.cancel_scope.cancel()
    assert one.store.commits == 3 and {"first", "second", "third"} <= set(one.image.users.users)


async def test_a_decision_waits_for_a_record_its_follower_has_not_applied():
    # bob's replica is behind the log (its follower held): alice's decision is committed on the other replica.
    # The read between what it applied and the end finds that record, so bob's decision waits for it and is
    # made against it: the plane's refusal of a user in another VC, not a second creation.
    log = FakeLog(image_records(image()))
    async with trio.open_nursery() as nursery:
        one, two = await _replicas(log, nursery)
        two.store.gate.clear()
        alice, _ = call(session(one.image, "User:alice"), 51, alter_request(upsert(NEW, "a-pw")), _RESPONSE)
        bob, got = call(session(two.image, "User:bob"), 51, alter_request(upsert(NEW, "b-pw")), _RESPONSE)
        assert errors(got) == {NEW: (0, None)}  # bob's replica has not seen alice's user
        answers: list[Any] = []
        answered = trio.Event()

        async def decide_bob() -> None:
            answers.append(await two.decide(bob.decide))
            answered.set()

        with trio.fail_after(30):
            await one.decide(alice.decide)
            nursery.start_soon(decide_bob)
            await trio.to_thread.run_sync(two.store.probed.wait, 30)
            assert not answers  # the record was found: bob's decision waits for the follower
            two.store.gate.set()
            await answered.wait()
        nursery.cancel_scope.cancel()
    ((body, records),) = answers
    assert errors(_decided(body))[NEW][0] == 31 and records == []
    assert two.image.principals[f"User:{NEW}"] == "team-a" and two.store.commits == 0


def _alice_scope(img: TenancyImage) -> users.Scope:
    from proxy.management.plane import Caller

    from .test_users import SUPERS

    return users.Scope(Caller("User:alice", SUPERS, "*", img), "team-a", "vcproxy")


_RESPONSE = AlterUserScramCredentialsResponse


# -- every stage that decides hands the shell its decision, made again against the image at call time ----


def test_a_management_change_is_decided_again_against_the_image_of_the_moment():
    from proxy.core.session import Action
    from proxy.protocol import management as m

    from .test_management_plane import _local_body, _session
    from .test_management_plane import image as plane_image
    from .wire import request_frame

    img = plane_image()
    create = m.CreateVirtualClustersRequest(virtual_clusters=(m.CreatableVirtualCluster(name="team-c"),))
    session = _session("User:admin", img)
    decision = session.on_request(memoryview(bytearray(request_frame(ApiKey.CREATE_VIRTUAL_CLUSTERS, 0, 4, create))))
    assert decision.action is Action.LOCAL
    body, reply = _local_body(session, ApiKey.CREATE_VIRTUAL_CLUSTERS)
    assert int(body.virtual_clusters[0].error_code) == 0 and reply.decide is not None
    first, records = reply.decide()  # against the same image: the same answer, the same change
    assert int(codec.decode(m.CreateVirtualClustersResponse, first, 0)[0].virtual_clusters[0].error_code) == 0
    assert [k for k, _ in records] == [k for k, _ in reply.writes]
    img.apply(*vc_record("team-c"))  # another replica's decision, applied before this one is made again
    again, none = reply.decide()
    assert int(codec.decode(m.CreateVirtualClustersResponse, again, 0)[0].virtual_clusters[0].error_code) != 0
    assert none == []

    listing = request_frame(ApiKey.LIST_VIRTUAL_CLUSTERS, 0, 5, m.ListVirtualClustersRequest())
    assert session.on_request(memoryview(bytearray(listing))).action is Action.LOCAL
    _, reply = _local_body(session, ApiKey.LIST_VIRTUAL_CLUSTERS)
    assert reply.decide is None  # a read: answered from the image as it is


def test_an_admin_who_lost_the_right_meanwhile_is_refused_when_decided_again():
    img = image()
    alice, got = call(session(img, "User:alice"), 51, alter_request(upsert(NEW, "a-pw")), _RESPONSE)
    assert errors(got) == {NEW: (0, None)} and alice.decide is not None
    for key, _ in image_records(img):  # alice's admin right (team-a's ACL on kafka-cluster) revoked
        if key.startswith('["acl"') and "User:alice" in key:
            img.apply(key, None)
    body, records = alice.decide()
    assert errors(_decided(body)) == {NEW: (31, errors(_decided(body))[NEW][1])} and records == []


def test_a_tenants_delete_that_only_unlinks_is_decided_again():
    import uuid as uuid_

    from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
    from kio.schema.delete_topics.v6.response import DeleteTopicsResponse

    from proxy.tenancy.model import gen_record, link_record

    from .test_create_topics_once import _create
    from .test_tenant_rewrite import answer, forward, make_image, tenant_session
    from .wire import request_frame

    img, _ = make_image()
    session = tenant_session(img)
    created = forward(session, 19, 7, _create("payments")).topics[0].name
    result = codec._empty(CreatableTopicResult, name=created, topic_id=uuid_.uuid4())
    _, answered = answer(session, 19, 7, codec._empty(CreateTopicsResponse, topics=(result,)))
    for record in answered.writes:
        img.apply(*record)
    delete = codec._empty(DeleteTopicsRequest, topics=(codec._empty(DeleteTopicState, name="payments"),))
    session.on_request(memoryview(request_frame(20, 6, 2, delete)))
    reply = session.next_local_reply()
    assert reply.decide is not None
    body, records = reply.decide()  # nothing changed meanwhile: the same unlink
    unlink = [gen_record("team-a", "payments", 1), link_record("team-a", "payments", None)]
    assert records[:2] == reply.writes[:2] == unlink
    # ...and the physical topic it leaves behind, orphaned by team-a (its time is the decision's own)
    (key, orphan), (local_key, local_orphan) = records[2], reply.writes[2]
    assert (
        key == local_key == json.dumps(["orphan", created], separators=(",", ":"))
        and orphan["vc"] == local_orphan["vc"] == "team-a"
    )
    for record in records:  # another replica's delete of the same topic, applied first
        img.apply(*record)
    body, records = reply.decide()
    (topic,) = codec.decode(DeleteTopicsResponse, body, 0)[0].responses
    assert int(topic.error_code) == 3 and records == []  # UNKNOWN_TOPIC_OR_PARTITION, unlinked once
