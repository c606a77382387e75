"""Management writes are decided once, in log order (issue 23, docs/security.md#the-write-protocol): two VC
admins create the same new user at the same moment, with different passwords, through confluent-kafka's
AlterUserScramCredentials — on two proxy replicas of one state topic, and on one replica. Every time: exactly
one success, the other admin gets Kafka's per-user error, and the user is in the winner's VC with the
winner's password on both replicas (logins) and in the log (a replay)."""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from proxy.auth.credentials import make_entry
from proxy.auth.users import credential_from_salted
from vcproxy_tools.process import ProxyProcess, proxy_config

from .hardening_attacks import login
from .polling import until
from .ports import free_port_block
from .tenants import assert_clean_log, replayed, scram_conf

USERS = {"alice": "alice-secret", "bob": "bob-secret"}  # team-a's admin, team-b's admin
VC_OF = {"alice": "team-a", "bob": "team-b"}
ENTRIES = {user: make_entry(password, 4096) for user, password in USERS.items()}
# How many races per test (VCPROXY_DECISION_RACES for longer runs); 100 fit in about a minute each.
RACES = int(os.environ.get("VCPROXY_DECISION_RACES", "100"))
CLUSTER_AUTHORIZATION_FAILED = 31


@pytest.fixture(scope="module")
def replicas(kafka_cluster, tmp_path_factory) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    workdir = tmp_path_factory.mktemp("decisions-race")
    state_topic = f"__vcproxy_state_race_{uuid.uuid4().hex[:6]}"
    started = [_replica(kafka_cluster, workdir, f"race-{n}", state_topic) for n in (1, 2)]
    yield started[0], started[1]
    for process in reversed(started):
        process.stop()
    for process in started:
        assert_clean_log(process)
        log = process.log_path.read_text(errors="replace")
        assert "-pw-" not in log  # no password of the races


def _replica(kafka_cluster: Any, workdir: Path, name: str, state_topic: str) -> ProxyProcess:
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["PLAIN", "SCRAM-SHA-512"]},
        credentials={"users": ENTRIES},
        tenancy={
            "enabled": True,
            "state_topic": state_topic,
            "super_admins": ["User:admin"],
            "virtual_clusters": [
                {"name": "team-a", "principals": ["User:alice"], "admins": ["User:alice"]},
                {"name": "team-b", "principals": ["User:bob"], "admins": ["User:bob"]},
            ],
        },
    )
    return ProxyProcess(config, workdir, name=name).start(timeout=120)


def _admin(proxy: ProxyProcess, user: str) -> AdminClient:
    return AdminClient(scram_conf(proxy, user, USERS[user], **{"socket.timeout.ms": 30000}))


def _create(admin: AdminClient, name: str, password: str) -> int:
    """AlterUserScramCredentials creating `name`: its per-user error code (0: created)."""
    upsert = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    future = admin.alter_user_scram_credentials([upsert], request_timeout=60)[name]
    try:
        future.result(90)
    except KafkaException as exc:
        return exc.args[0].code()
    return 0


def _described(admin: AdminClient, name: str) -> bool:
    """Whether DescribeUserScramCredentials shows `name` to this VC admin (only its VC's users)."""
    try:
        admin.describe_user_scram_credentials([name], request_timeout=60)[name].result(90)
    except KafkaException:
        return False
    return True


def _logs_in(proxy: ProxyProcess, user: str, password: str) -> bool:
    """One raw PLAIN login (checked against the user's SCRAM keys), not retried as a client would."""
    try:
        login(proxy.bootstrap, user, password).close()
    except (AssertionError, OSError):
        return False
    return True


def _has_password(image: Any, name: str, password: str) -> bool:
    stored = image.users.users[name].scram["SCRAM-SHA-512"]
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), stored.salt, stored.iterations)
    derived = credential_from_salted("SCRAM-SHA-512", stored.salt, stored.iterations, salted)
    return (derived.stored_key, derived.server_key) == (stored.stored_key, stored.server_key)


@pytest.mark.parametrize("where", ["two replicas", "one replica"])
def test_two_admins_creating_one_user_at_once_one_wins_everywhere(kafka_cluster, replicas, where):
    one, two = replicas
    bob_replica = two if where == "two replicas" else one
    admins = {"alice": _admin(one, "alice"), "bob": _admin(bob_replica, "bob")}
    describers = {(who, id(proxy)): _admin(proxy, who) for who in USERS for proxy in (one, two)}
    winners: dict[str, str] = {}
    started = time.monotonic()
    for race in range(RACES):
        name = f"race-{uuid.uuid4().hex[:8]}"
        barrier = threading.Barrier(2)
        codes: dict[str, Any] = {}

        def create(who: str, name: str = name, barrier: threading.Barrier = barrier, codes: dict = codes) -> None:
            try:
                barrier.wait(30)
                codes[who] = _create(admins[who], name, f"{who}-pw-{name}")
            except Exception as exc:  # reported by the assertion below
                codes[who] = repr(exc)

        threads = [threading.Thread(target=create, args=(who,)) for who in admins]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert sorted(codes.values(), key=str) == [0, CLUSTER_AUTHORIZATION_FAILED], (race, codes)
        winner = next(who for who, code in codes.items() if code == 0)
        winners[name] = winner
        loser = "bob" if winner == "alice" else "alice"
        for proxy in (one, two):  # each replica's image: the user is in the winner's VC, not the loser's
            described = describers[(winner, id(proxy))]
            if proxy is one or proxy is bob_replica:  # it answered: the change is applied there (read your writes)
                assert _described(described, name)
            else:  # it answered neither: it applies the log's record within tens of ms (docs/security.md)
                until(functools.partial(_described, described, name), f"{name} described by {proxy.log_path.stem}", 10)
            assert not _described(describers[(loser, id(proxy))], name)
        # The winner's password logs in on both replicas: a user has one credential per mechanism, so neither
        # holds the loser's (failed logins are not tried: they would spend the address's login budget).
        for proxy in (one, two):
            assert _logs_in(proxy, name, f"{winner}-pw-{name}")
    elapsed = time.monotonic() - started
    # The log agrees with every answer: each user in its winner's VC, with the winner's password only.
    image = replayed(kafka_cluster, one)
    for name, winner in winners.items():
        loser = "bob" if winner == "alice" else "alice"
        assert image.principals[f"User:{name}"] == VC_OF[winner]
        assert _has_password(image, name, f"{winner}-pw-{name}")
        assert not _has_password(image, name, f"{loser}-pw-{name}")
    print(
        f"\n{where}: {RACES} races in {elapsed:.1f} s; alice won {list(winners.values()).count('alice')}, "
        f"bob {list(winners.values()).count('bob')}"
    )
