"""Users at runtime (proxy/auth/users.py, proxy/management/users.py, the users stage): the credential store
as state records (salted keys only, Kafka's bounds, replay), Kafka's answers to AlterUserScramCredentials
and DescribeUserScramCredentials, who may change whose credentials, and logins that a change undoes."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os

import pytest
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.alter_user_scram_credentials.v0.response import AlterUserScramCredentialsResponse
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.describe_user_scram_credentials.v0.response import DescribeUserScramCredentialsResponse
from kio.static.primitive import i8, i32

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.auth.credentials import CredentialStore, make_entry
from proxy.auth.sasl import SaslServer
from proxy.auth.users import UserBook, credential_from_salted, seed_user_records
from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession
from proxy.management import users
from proxy.management.plane import Caller
from proxy.protocol import codec
from proxy.protocol.headers import response_body_offset
from proxy.state.backup import image_records, replay_records
from proxy.tenancy.engine import Policy
from proxy.tenancy.guard import StateTopicGuard
from proxy.tenancy.model import KAFKA_CLUSTER, TenancyImage, admin_record, principal_record, vc_record
from proxy.tenancy.rights import admin_bindings

from .test_sasl import _authenticate, _handshake, _metadata_frame, _scram_login
from .wire import request_frame

SUPERS = frozenset({"User:admin"})
SHA512, SHA256 = 2, 1
LAYOUT = ListenerLayout("proxy.example", 9192, 9193)


def salted(password: str, salt: bytes, iterations: int = 4096, hash_name: str = "sha512") -> bytes:
    """What a client sends: PBKDF2 of the password (Kafka's ScramFormatter.saltedPassword)."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def upsert(name: str, password: str = "pw", mechanism: int = SHA512, iterations: int = 4096, salt: bytes = b""):
    salt = salt or os.urandom(24)
    hash_name = "sha512" if mechanism == SHA512 else "sha256"
    return ScramCredentialUpsertion(
        name=name,
        mechanism=i8(mechanism),
        iterations=i32(iterations),
        salt=salt,
        salted_password=salted(password, salt, max(iterations, 1), hash_name) if mechanism in (1, 2) else b"x" * 64,
    )


def alter_request(*upserts, deletions=()) -> AlterUserScramCredentialsRequest:
    return AlterUserScramCredentialsRequest(
        deletions=tuple(ScramCredentialDeletion(name=n, mechanism=i8(m)) for n, m in deletions),
        upsertions=tuple(upserts),
    )


def image() -> TenancyImage:
    img = TenancyImage()
    records = [
        vc_record("team-a"),
        vc_record("team-b"),
        principal_record("User:alice", "team-a"),  # team-a's admin
        principal_record("User:carol", "team-a"),
        principal_record("User:bob", "team-b"),
        principal_record("User:ops", KAFKA_CLUSTER),  # ALTER on the cluster: Kafka's right for these APIs
        principal_record("User:oper", KAFKA_CLUSTER),  # an operator: ALTER_VIRTUAL_CLUSTER on kafka-cluster
        *(acl_record(KAFKA_CLUSTER, b, True) for b in admin_bindings("team-a", "User:alice")),
        admin_record("team-b", "User:bob", True),
        acl_record(KAFKA_CLUSTER, _cluster(KAFKA_CLUSTER, "User:ops", Operation.ALTER), True),
        acl_record(KAFKA_CLUSTER, _cluster(KAFKA_CLUSTER, "User:oper", Operation.ALTER_VIRTUAL_CLUSTER), True),
    ]
    for record in records:
        img.apply(*record)
    for name in ("alice", "carol", "bob", "ops", "oper", "admin", "loner"):
        apply(img, users.alter(img, scope(None, "User:admin"), alter_request(upsert(name, f"{name}-pw")))[1])
    img.guard = StateTopicGuard("__vcproxy_state", frozenset({"User:reader"}))
    return img


def _cluster(name: str, principal: str, op: Operation) -> AclBinding:
    return AclBinding(ResourceType.CLUSTER, name, PatternType.LITERAL, principal, "*", op, Permission.ALLOW)


def scope(vc: str | None, principal: str, upstream: str | None = "vcproxy") -> users.Scope:
    return users.Scope(Caller(principal, SUPERS), vc, upstream)


def apply(img: TenancyImage, records) -> None:
    for key, value in records:
        img.apply(key, value)


def errors(response) -> dict[str, tuple[int, str | None]]:
    return {r.user: (int(r.error_code), r.error_message) for r in response.results}


# -- the store: salted keys only, replay ----------------------------------------------------------------


def test_an_upsert_stores_the_salted_keys_never_the_password_nor_the_salted_password():
    img = TenancyImage()
    salt = os.urandom(24)
    request = alter_request(upsert("dora", "dora-secret", salt=salt, iterations=8192))
    response, records = users.alter(img, scope(None, "User:admin"), request)
    assert errors(response) == {"dora": (0, None)}
    assert [key for key, _ in records] == ['["scram","dora","SCRAM-SHA-512"]']
    value = records[0][1]
    assert set(value) == {"salt", "iterations", "stored_key", "server_key"}
    assert value["iterations"] == 8192 and base64.b64decode(value["salt"]) == salt
    text = json.dumps(records)
    assert "dora-secret" not in text
    assert base64.b64encode(salted("dora-secret", salt, 8192)).decode() not in text
    assert salted("dora-secret", salt, 8192).hex() not in text
    apply(img, records)
    # The keys are RFC 5802's: a PLAIN check derives the same from the password, a wrong one fails.
    store = CredentialStore(source=lambda: img.users.users)
    assert store.verify_plain("dora", "dora-secret") and not store.verify_plain("dora", "dora-secreT")
    assert store.scram_credential("SCRAM-SHA-512", "dora").iterations == 8192


def test_keys_from_a_salted_password_are_those_scramp_derives_from_the_password():
    entry = make_entry("s3cret", 4096, ["SCRAM-SHA-256"])["SCRAM-SHA-256"]
    salt = base64.b64decode(entry["salt"])
    derived = credential_from_salted("SCRAM-SHA-256", salt, 4096, salted("s3cret", salt, 4096, "sha256"))
    assert derived.to_fields() == entry


def test_replay_and_compaction_give_the_same_users():
    img = image()
    log = []
    steps = [
        alter_request(upsert("dora", "one")),
        alter_request(upsert("dora", "two", mechanism=SHA256)),
        alter_request(upsert("erin", "e")),
        alter_request(deletions=[("erin", SHA512)]),
        alter_request(upsert("dora", "three")),
    ]
    for request in steps:
        _, records = users.alter(img, scope(None, "User:admin"), request)
        apply(img, records)
        log += records
    replayed, compacted = TenancyImage(), TenancyImage()
    apply(replayed, log)
    apply(compacted, {key: value for key, value in log}.items())  # the latest per key, as compaction keeps
    for other in (replayed, compacted):
        assert other.users.users["dora"] == img.users.users["dora"]
        assert "erin" not in other.users.users
    assert sorted(img.users.users["dora"].scram) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def test_a_backup_keeps_the_users():
    img = image()
    apply(img, seed_user_records(img.users, {"seeded": make_entry("s-pw", 4096)}))
    restored = replay_records(image_records(img))
    assert restored.users.users == img.users.users and restored.users.seeded == img.users.seeded


def test_a_record_that_is_not_a_credential_is_skipped_by_the_service_not_applied():
    book = UserBook()
    with pytest.raises(ValueError):
        book.apply_scram("x", "SCRAM-SHA-512", {"salt": "AAAA", "iterations": 1, "stored_key": "", "server_key": ""})
    assert book.users == {}


def test_static_users_are_seeds_applied_once():
    entry = make_entry("carol-pw", 4096)
    book = UserBook()
    first = seed_user_records(book, {"carol": entry})
    img = TenancyImage()
    apply(img, first)
    assert sorted(img.users.users["carol"].scram) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert seed_user_records(img.users, {"carol": entry}) == []  # a restart writes nothing
    # Deleted at runtime: stays deleted at the next start with the same config.
    apply(img, [('["scram","carol","SCRAM-SHA-256"]', None), ('["scram","carol","SCRAM-SHA-512"]', None)])
    assert seed_user_records(img.users, {"carol": entry}) == [] and "carol" not in img.users.users
    # An entry edited in the config (a new password: new salts) is a new entry: applied, replacing the user's.
    edited = make_entry("carol-pw2", 4096, ["SCRAM-SHA-512"])
    apply(img, seed_user_records(img.users, {"carol": edited}))
    assert sorted(img.users.users["carol"].scram) == ["SCRAM-SHA-512"]
    assert CredentialStore(source=lambda: img.users.users).verify_plain("carol", "carol-pw2")


# -- Kafka's answers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (upsert("u", iterations=4095), (93, "Too few iterations")),
        (upsert("u", iterations=16385), (93, "Too many iterations")),
        (upsert("u", iterations=4096), (0, None)),
        (upsert("u", iterations=16384), (0, None)),
        (upsert("u", mechanism=0), (33, "Unknown SCRAM mechanism")),
        (upsert("u", mechanism=3), (33, "Unknown SCRAM mechanism")),
        (upsert(""), (93, "Username must not be empty")),
        # Salt and salted password are any bytes, as Kafka takes them (librdkafka's 0081_admin: a 4-byte salt).
        (upsert("u", salt=b"salt"), (0, None)),
        (dataclasses.replace(upsert("u"), salt=b""), (0, None)),
        (dataclasses.replace(upsert("u"), salt=b"s" * 2000), (0, None)),
        # ...within the one bound of ours, the state record's size (docs/state.md, "Limits"): POLICY_VIOLATION.
        (
            dataclasses.replace(upsert("u"), salt=b"s" * 5000),
            (44, "A state record of 6934 bytes: the limit max_record_bytes is 4096"),
        ),
        (dataclasses.replace(upsert("u"), salted_password=b"x" * 10), (0, None)),
        (dataclasses.replace(upsert("u"), salted_password=b""), (-1, "Empty key")),  # Kafka's HMAC refuses it
    ],
)
def test_upsertions_are_checked_as_kafka_checks_them(item, expected):
    response, records = users.alter(TenancyImage(), scope(None, "User:admin"), alter_request(item))
    assert list(errors(response).values()) == [expected]
    assert bool(records) == (expected[0] == 0)


def test_a_user_twice_in_one_request_and_deleting_what_does_not_exist():
    img = image()
    request = alter_request(upsert("carol"), upsert("dora"), upsert("dora"), deletions=[("carol", SHA512), ("bob", 1)])
    response, records = users.alter(img, scope(None, "User:admin"), request)
    assert errors(response) == {
        "carol": (92, "A user credential cannot be altered twice in the same request"),
        "dora": (92, "A user credential cannot be altered twice in the same request"),
        "bob": (91, "Attempt to delete a user credential that does not exist"),
    }
    assert records == []
    response, records = users.alter(img, scope(None, "User:admin"), alter_request(deletions=[("carol", SHA512)]))
    assert errors(response) == {"carol": (0, None)}
    assert records == [('["scram","carol","SCRAM-SHA-512"]', None)]


def test_describe_as_kafka_does():
    img = image()
    everyone = users.describe(img, scope(None, "User:admin"), DescribeUserScramCredentialsRequest(users=None))
    assert [r.user for r in everyone.results] == sorted(img.users.users)
    request = DescribeUserScramCredentialsRequest(
        users=(UserName(name="carol"), UserName(name="nobody"), UserName(name="nobody"))
    )
    response = users.describe(img, scope(None, "User:admin"), request)
    (carol, nobody) = response.results
    assert [(int(c.mechanism), int(c.iterations)) for c in carol.credential_infos] == [(2, 4096)]
    assert (int(nobody.error_code), nobody.error_message) == (
        92,
        "Cannot describe SCRAM credentials for the same user twice in a single request: nobody",
    )
    single = users.describe(
        img, scope(None, "User:admin"), DescribeUserScramCredentialsRequest(users=(UserName(name="x"),))
    )
    assert (int(single.results[0].error_code), single.results[0].error_message) == (
        91,
        "Attempt to describe a user credential that does not exist: x",
    )


# -- who may change whose credentials ---------------------------------------------------------------------

REFUSED = (31, "Cluster authorization failed.")


def test_a_vc_admin_manages_its_vcs_users_and_new_users_join_its_vc():
    img = image()
    response, records = users.alter(img, scope("team-a", "User:alice"), alter_request(upsert("carol"), upsert("dora")))
    assert errors(response) == {"carol": (0, None), "dora": (0, None)}
    assert [k for k, _ in records] == [
        '["scram","carol","SCRAM-SHA-512"]',
        '["scram","dora","SCRAM-SHA-512"]',
        '["principal","User:dora"]',
    ]
    apply(img, records)
    assert img.principals["User:dora"] == "team-a"
    seen = users.describe(img, scope("team-a", "User:alice"), DescribeUserScramCredentialsRequest(users=None))
    assert [r.user for r in seen.results] == ["alice", "carol", "dora"]
    response, _ = users.alter(img, scope("team-a", "User:alice"), alter_request(deletions=[("dora", SHA512)]))
    assert errors(response) == {"dora": (0, None)}


@pytest.mark.parametrize(
    "target",
    [
        "admin",  # a super-admin
        "bob",  # another VC's member (and admin)
        "ops",  # kafka-cluster's member, holding ALTER on the cluster
        "oper",  # an operator
        "loner",  # has credentials, is in no VC: an operator's to place
        "vcproxy",  # the proxy's own upstream user
        "reader",  # a state topic reader
    ],
)
def test_a_vc_admin_never_reaches_beyond_its_vc(target):
    img = image()
    for request in (alter_request(upsert(target)), alter_request(deletions=[(target, SHA512)])):
        response, records = users.alter(img, scope("team-a", "User:alice"), request)
        assert errors(response) == {target: REFUSED} and records == []
    seen = users.describe(
        img, scope("team-a", "User:alice"), DescribeUserScramCredentialsRequest(users=(UserName(name=target),))
    )
    assert int(seen.results[0].error_code) == 91  # another's user looks like no user


def test_where_unknown_users_are_relayed_a_vc_admin_creates_no_user_the_broker_may_have():
    """A relaying listener sends a name without a proxy credential to the broker: a credential made at the proxy
    would shut that broker user out, and let the VC admin log in under its name. Her own users she still keeps."""
    img = image()
    relaying = dataclasses.replace(scope("team-a", "User:alice"), relays_unknown=True)
    response, records = users.alter(img, relaying, alter_request(upsert("relayuser"), upsert("carol")))
    assert errors(response) == {"relayuser": REFUSED, "carol": (0, None)}
    assert not any("relayuser" in k for k, _ in records)
    response, _ = users.alter(img, relaying, alter_request(deletions=[("relayuser", SHA512)]))
    assert errors(response) == {"relayuser": REFUSED}
    operator = dataclasses.replace(scope(None, "User:oper"), relays_unknown=True)
    response, _ = users.alter(img, operator, alter_request(upsert("relayuser")))
    assert errors(response) == {"relayuser": (0, None)}  # an operator gives a name a proxy credential on purpose


def test_a_vc_admin_cannot_take_over_a_member_holding_rights_beyond_the_vc():
    img = image()
    apply(img, [acl_record(KAFKA_CLUSTER, _cluster("team-b", "User:carol", Operation.DESCRIBE_VIRTUAL_CLUSTER), True)])
    response, _ = users.alter(img, scope("team-a", "User:alice"), alter_request(upsert("carol")))
    assert errors(response) == {"carol": REFUSED}


def test_cluster_wide_callers_reach_everyone_but_who_holds_more_than_they_do():
    img = image()
    names = ["carol", "bob", "loner", "newbie", "admin", "oper", "reader", "vcproxy"]
    response, _ = users.alter(img, scope(None, "User:ops"), alter_request(*(upsert(n) for n in names)))
    assert errors(response) == {
        "carol": (0, None),
        "bob": REFUSED,  # an admin of team-b (older state): ops does not hold ALTER_VIRTUAL_CLUSTER on it
        "loner": (0, None),
        "newbie": (0, None),
        "admin": REFUSED,
        "oper": REFUSED,  # holds ALTER_VIRTUAL_CLUSTER on kafka-cluster, which ops does not
        "reader": REFUSED,
        "vcproxy": REFUSED,
    }
    response, records = users.alter(img, scope(None, "User:oper"), alter_request(upsert("bob"), upsert("newbie")))
    assert errors(response) == {"bob": (0, None), "newbie": (0, None)}
    assert not any(k.startswith('["principal"') for k, _ in records)  # a cluster-wide caller places nobody
    response, _ = users.alter(img, scope(None, "User:admin"), alter_request(upsert("admin"), upsert("vcproxy")))
    assert errors(response) == {"admin": (0, None), "vcproxy": REFUSED}


# -- through the session: the stage, and logins a change undoes ---------------------------------------------


@dataclasses.dataclass
class _Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)


def call(s: ProxySession, api_key: int, body, response_cls):
    decision = s.on_request(memoryview(bytearray(request_frame(api_key, 0, 7, body))))
    if decision.action is not Action.LOCAL:
        return decision, None
    reply = s.next_local_reply()
    assert reply is not None and reply.reply is not None
    return reply, codec.decode(response_cls, reply.reply, response_body_offset(reply.reply, 1))[0]


def session(img: TenancyImage, principal: str, authenticator=None) -> ProxySession:
    return ProxySession(
        LAYOUT,
        authenticator,
        tenancy=_Tenancy(img),
        principal=principal,
        super_admins=SUPERS,
        upstream_user="vcproxy",
    )


def test_the_stage_answers_admins_and_leaves_members_to_the_tenancy_refusal():
    img = image()
    reply, response = call(
        session(img, "User:alice"), 51, alter_request(upsert("dora")), AlterUserScramCredentialsResponse
    )
    assert errors(response) == {"dora": (0, None)} and len(reply.writes) == 2
    _, refused = call(session(img, "User:carol"), 51, alter_request(upsert("carol")), AlterUserScramCredentialsResponse)
    assert errors(refused) == {"carol": (31, None)}  # as before: a member may not
    _, described = call(
        session(img, "User:carol"),
        50,
        DescribeUserScramCredentialsRequest(users=None),
        DescribeUserScramCredentialsResponse,
    )
    assert int(described.error_code) == 31
    _, described = call(
        session(img, "User:admin"),
        50,
        DescribeUserScramCredentialsRequest(users=None),
        DescribeUserScramCredentialsResponse,
    )
    assert int(described.error_code) == 0 and len(described.results) == len(img.users.users)


def test_a_malformed_request_closes_the_connection():
    img = image()
    s = session(img, "User:admin")
    frame = bytearray(request_frame(51, 0, 7, alter_request(upsert("dora"))))
    decision = s.on_request(memoryview(frame[:-20]))
    assert decision.action is Action.CLOSE and "malformed" in (decision.reason or "")


def _logged_in(img: TenancyImage, mechanism: str, user: str, password: str) -> SaslServer:
    server = SaslServer(CredentialStore(source=lambda: img.users.users), [mechanism])
    if mechanism == "PLAIN":
        _handshake(server, mechanism)
        _authenticate(server, f"\0{user}\0{password}".encode())
    else:
        _scram_login(server, mechanism, user, password)
    assert server.complete and server.principal == f"User:{user}"
    return server


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_changed_or_deleted_credential_closes_the_sessions_that_used_it(mechanism):
    img = image()
    server = _logged_in(img, mechanism, "carol", "carol-pw")
    s = session(img, "User:carol", server)
    assert s.stale_binding() is None
    # Another user's change, and carol getting a second mechanism, leave carol's login alone.
    apply(img, users.alter(img, scope(None, "User:admin"), alter_request(upsert("bob", "new")))[1])
    apply(img, users.alter(img, scope(None, "User:admin"), alter_request(upsert("carol", "x", SHA256)))[1])
    decision = s.on_request(memoryview(bytearray(_metadata_frame())))
    assert decision.action is not Action.CLOSE and s.stale_binding() is None
    apply(img, users.alter(img, scope(None, "User:admin"), alter_request(upsert("carol", "carol-new")))[1])
    assert "was changed or deleted" in (s.stale_binding() or "")
    decision = s.on_request(memoryview(bytearray(_metadata_frame())))
    assert decision.action is Action.CLOSE and "changed or deleted" in (decision.reason or "")
    # The old password no longer logs in, the new one does (PLAIN's remembered digest included).
    store = CredentialStore(source=lambda: img.users.users)
    assert not store.verified_before("carol", "carol-pw") and not store.verify_plain("carol", "carol-pw")
    assert store.verify_plain("carol", "carol-new")


def test_a_login_checked_just_before_a_change_is_closed_at_its_first_request():
    img = image()
    server = _logged_in(img, "SCRAM-SHA-512", "carol", "carol-pw")
    apply(img, users.alter(img, scope(None, "User:admin"), alter_request(deletions=[("carol", SHA512)]))[1])
    decision = session(img, "User:carol", server).on_request(memoryview(bytearray(_metadata_frame())))
    assert decision.action is Action.CLOSE and "changed or deleted" in (decision.reason or "")


def test_a_credential_with_a_short_salt_is_stored_replayed_and_checks_a_password():
    """librdkafka's 0081_admin upserts with a 4-byte salt: Kafka stores it; so does the proxy, and the record
    replays (a replay used to skip salts under 12 bytes)."""
    response, records = users.alter(
        TenancyImage(), scope(None, "User:admin"), alter_request(upsert("eve", "eve-pw", salt=b"salt"))
    )
    assert list(errors(response).values()) == [(0, None)]
    book = UserBook()
    for key, value in records:
        if key.startswith('["scram"'):
            book.apply_scram("eve", "SCRAM-SHA-512", value)
    assert book.users["eve"].scram["SCRAM-SHA-512"].salt == b"salt"
    assert CredentialStore(source=lambda: book.users).verify_plain("eve", "eve-pw")
