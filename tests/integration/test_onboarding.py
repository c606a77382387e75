"""Onboard and offboard a team with zero restarts (issue 19's proof; the walkthrough in docs/management.md).

Two proxy replicas on one state topic, a SASL_SSL listener (SCRAM-SHA-512, a trustme certificate), a
super-admin `admin`, and team-b's `bob` producing through one replica and consuming through the other for
the whole test. Meanwhile: team-c is created; its admin `carl` is created with Kafka's `kafka-configs`,
placed and made its admin; carl creates his member `cora` (`kafka-configs`) and grants her ACLs
(`kafka-acls`); cora produces and consumes; team-c gets a quota; the listener certificate is rotated; cora's
password changes (her open session is closed); cora, her topic (its link: the physical topic stays) and
team-c are deleted. Bob's clients see no error and no reconnect, and get every record in order."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from proxy.auth.credentials import make_entry
from vcproxy_tools import cli
from vcproxy_tools.admin_client import ConnectError, Connection, login_from
from vcproxy_tools.demo import java_client_properties
from vcproxy_tools.process import ProxyProcess, proxy_config

from .polling import until
from .ports import free_port_block
from .tenants import assert_clean_log, replayed
from .tool_jvm import run_tool

SCRAM_SHA_512 = ScramMechanism.SCRAM_SHA_512
QUOTA_KEYS = "producer_byte_rate,consumer_byte_rate"
TOPIC, GROUP, READ = ResourceType.TOPIC, ResourceType.GROUP, AclOperation.READ
CORA_ACLS = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, "User:cora", None, AclOperation.ANY, AclPermissionType.ANY
)
USERS = {"admin": "admin-secret", "bob": "bob-secret"}  # static: the super-admin and team-b's bob
PASSWORDS = {"carl": "carl-secret", "cora": "cora-secret"}  # made at run time
CORA_NEW = "cora-new-secret"
DEADLINE = 60.0  # a condition on a loaded 2-core machine; each is normally met in about a second
TOOL_TIMEOUT = 120.0


@dataclass
class Team:
    workdir: Path
    ca: trustme.CA
    cafile: Path
    certfile: Path
    one: ProxyProcess
    two: ProxyProcess
    logins: dict[str, Path] = field(default_factory=dict)

    def login_file(self, user: str, password: str) -> Path:
        """A --command-config file for `user` (Kafka's tools and vcproxy's): SASL_SSL, SCRAM-SHA-512."""
        path = self.workdir / f"{user}-{hashlib.sha256(password.encode()).hexdigest()[:6]}.properties"
        trust = f"ssl.truststore.type=PEM\nssl.truststore.location={self.cafile}\n"
        path.write_text(java_client_properties(user, password, protocol="SASL_SSL") + trust)
        return path

    def conf(self, proxy: ProxyProcess, user: str, password: str, **extra: Any) -> dict[str, Any]:
        """confluent-kafka settings for `user` through `proxy`."""
        return {
            "bootstrap.servers": proxy.bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.cafile),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
            **extra,
        }


def _issue(ca: trustme.CA, path: Path) -> str:
    """A certificate for 127.0.0.1 put in place of `path` (key and chain, one PEM) at once, as cert-manager
    and a Secret's update do (a reload never reads half a file); its SHA-256 fingerprint."""
    cert = ca.issue_cert("127.0.0.1", "localhost")
    staged = path.with_name(path.name + ".new")
    cert.private_key_and_cert_chain_pem.write_to_path(str(staged))
    os.replace(staged, path)
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())).hexdigest()


def _replica(kafka_cluster: Any, workdir: Path, name: str, state_topic: str, certfile: Path) -> ProxyProcess:
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        listeners={
            "security_protocol": "SASL_SSL",
            "sasl_mechanisms": ["SCRAM-SHA-512"],
            "tls": {"certfile": str(certfile)},
        },
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        tenancy={
            "enabled": True,
            "state_topic": state_topic,
            "super_admins": ["User:admin"],
            "virtual_clusters": [{"name": "team-b", "principals": ["User:bob"]}],
        },
    )
    return ProxyProcess(config, workdir, name=name)


@pytest.fixture(scope="module")
def team(kafka_cluster, tmp_path_factory) -> Iterator[Team]:
    workdir = tmp_path_factory.mktemp("onboarding")
    ca = trustme.CA(organization_name="vcproxy onboarding test CA")
    cafile, certfile = workdir / "ca.pem", workdir / "listener.pem"
    ca.cert_pem.write_to_path(str(cafile))
    _issue(ca, certfile)
    state_topic = f"__vcproxy_state_onboard_{uuid.uuid4().hex[:6]}"
    one = _replica(kafka_cluster, workdir, "replica-1", state_topic, certfile)
    two = _replica(kafka_cluster, workdir, "replica-2", state_topic, certfile)
    one.start(timeout=120)
    try:
        two.start(timeout=120)
        team = Team(workdir, ca, cafile, certfile, one, two)
        team.logins = {user: team.login_file(user, password) for user, password in USERS.items()}
        yield team
    finally:
        two.stop()
        one.stop()
    for process in (one, two):
        assert_clean_log(process)
        log = process.log_path.read_text(errors="replace")
        for secret in (*USERS.values(), *PASSWORDS.values(), CORA_NEW):
            assert secret not in log


# -- helpers -------------------------------------------------------------------------------------


def vcproxy(proxy: ProxyProcess, login: Path, *args: str) -> Any:
    """`vcproxy TOOL COMMAND --output json ...` as an operator types it, run in this process (the same code
    as the command; an interpreter start costs seconds on a loaded 2-core machine); must succeed."""
    tool, command, *rest = args
    argv = [tool, command, "--bootstrap-server", proxy.bootstrap, "--command-config", str(login), "--output", "json"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([*argv, *rest])
    assert code == 0, f"vcproxy {' '.join(args)}: exit {code}\n{out.getvalue()}\n{err.getvalue()}"
    return json.loads(out.getvalue())


def kafka_tool(name: str, proxy: ProxyProcess, login: Path, *args: str) -> str:
    """One of Kafka's own tools through the proxy; must succeed; its stdout."""
    argv = ["--bootstrap-server", proxy.bootstrap, "--command-config", str(login), *args]
    done = run_tool(name, argv, timeout=TOOL_TIMEOUT)
    assert done.returncode == 0, f"{name} {args}: exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


def create(admin: AdminClient, name: str) -> None:
    """A one-partition topic, created and led (`admin` is referenced until its future is done)."""
    admin.create_topics([NewTopic(name, 1, 3)], operation_timeout=30)[name].result(60)

    def led() -> bool:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        return topic is not None and topic.error is None and all(p.leader >= 0 for p in topic.partitions.values())

    until(led, f"{name} to have a leader")


def logs_in(team: Team, proxy: ProxyProcess, user: str, password: str) -> bool:
    """A SCRAM-SHA-512 login over TLS, then ApiVersions (a user in no VC is refused too)."""
    try:
        Connection(proxy.bootstrap, login_from(team.login_file(user, password)), timeout=30).close()
    except ConnectError:
        return False
    return True


def is_closed(connection: Connection) -> bool:
    """The proxy closed this connection (which sent nothing since its login)."""
    connection.sock.settimeout(0.1)
    try:
        return connection.sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:  # reset, or TLS torn down
        return True


def fingerprint(proxy: ProxyProcess, cafile: Path) -> str:
    """The SHA-256 fingerprint of the certificate a new TLS client of `proxy` is shown (verified)."""
    host, _, port = proxy.bootstrap.rpartition(":")
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der
    return hashlib.sha256(der).hexdigest()


def authenticated(proxy: ProxyProcess, user: str, offset: int = 0) -> list[str]:
    """The proxy's names of the connections that logged in as `user` (after log offset `offset`)."""
    text = proxy.log_path.read_text(errors="replace")[offset:]
    return re.findall(rf" (conn-\d+) [^\n]*: authenticated User:{re.escape(user)} with ", text)


def closed(proxy: ProxyProcess, names: list[str]) -> list[str]:
    """The log lines of the proxy closing any of these connections."""
    lines = proxy.log_path.read_text(errors="replace").splitlines()
    return [line for line in lines for name in names if f" {name} " in line and ": closing" in line]


def name(proxy: ProxyProcess) -> str:
    return proxy.log_path.stem


def physical_topics(kafka_cluster: Any) -> set[str]:
    return set(AdminClient({"bootstrap.servers": kafka_cluster.bootstrap}).list_topics(timeout=10).topics)


def refused_login(errors: list[KafkaError]) -> bool:
    """librdkafka reported a failed login (its reconnect with the old password)."""
    return any(e.code() == KafkaError._AUTHENTICATION for e in errors)


def log_size(proxy: ProxyProcess) -> int:
    return len(proxy.log_path.read_text(errors="replace"))


def produce_and_consume(team: Team, user: str, password: str, topic: str, group: str, values: list[str]) -> None:
    """Produce through replica one, consume through replica two, as `user`: the same values back."""
    errors: list[Any] = []
    producer = Producer(team.conf(team.one, user, password, **{"enable.idempotence": True, "linger.ms": 5}))
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda e, _m: errors.append(e) if e else None)
    assert producer.flush(DEADLINE) == 0 and not errors, errors
    consumer = Consumer(team.conf(team.two, user, password, **{"group.id": group, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + DEADLINE
    try:
        while len(seen) < len(values):
            assert time.monotonic() < deadline, f"{user} consumed only {seen}"
            for msg in consumer.consume(100, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                seen.append(msg.value().decode())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert seen == values


class Traffic:
    """Bob's producer (through replica one) and consumer (through replica two), each in a thread of its own,
    running from before team-c exists until it is gone: every record numbered, every error counted."""

    def __init__(self, team: Team, topic: str):
        self.topic = topic
        self.stop_producing, self.stop_consuming = threading.Event(), threading.Event()
        self.produced = 0
        self.consumed: list[int] = []
        self.delivery_errors: list[Any] = []
        self.client_errors: list[Any] = []  # librdkafka's error callbacks, both clients
        self.failures: list[BaseException] = []
        common = {"error_cb": self.client_errors.append, "client.id": "bob-app"}
        self.producer_conf = team.conf(
            team.one, "bob", USERS["bob"], **common, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5}
        )
        self.consumer_conf = team.conf(
            team.two,
            "bob",
            USERS["bob"],
            **common,
            **{"group.id": "bob-app", "auto.offset.reset": "earliest", "enable.auto.commit": True},
        )
        self.threads = [
            threading.Thread(target=self._guard, args=(f,), daemon=True) for f in (self._produce, self._consume)
        ]

    def _guard(self, run: Callable[[], None]) -> None:
        try:
            run()
        except BaseException as exc:  # reported by the test
            self.failures.append(exc)

    def _produce(self) -> None:
        producer = Producer(self.producer_conf)

        def delivered(error: Any, _msg: Any) -> None:
            if error is not None:
                self.delivery_errors.append(error)

        while not self.stop_producing.is_set():
            producer.produce(self.topic, str(self.produced).encode(), on_delivery=delivered)
            self.produced += 1
            producer.poll(0.02)
        assert producer.flush(DEADLINE) == 0, "bob's producer could not deliver everything"

    def _consume(self) -> None:
        consumer = Consumer(self.consumer_conf)
        consumer.subscribe([self.topic])
        try:
            while not self.stop_consuming.is_set():
                for msg in consumer.consume(100, timeout=0.2):
                    if msg.error():
                        self.client_errors.append(msg.error())
                    else:
                        self.consumed.append(int(msg.value()))
        finally:
            consumer.close()

    def start(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def healthy(self) -> None:
        assert not self.failures and not self.delivery_errors and not self.client_errors, (
            self.failures,
            self.delivery_errors,
            self.client_errors,
        )

    def flowing(self, what: str) -> None:
        """Records produced from now on reach bob's consumer: the traffic still flows after `what`."""
        target = self.produced + 10
        until(lambda: len(self.consumed) >= target, f"bob's records to flow after {what}")
        self.healthy()

    def finish(self) -> None:
        self.stop_producing.set()
        self.threads[0].join(DEADLINE)
        until(lambda: len(self.consumed) >= self.produced, "bob's consumer to read every record")
        self.stop_consuming.set()
        self.threads[1].join(DEADLINE)
        assert not any(thread.is_alive() for thread in self.threads)


# -- the walkthrough ----------------------------------------------------------------------------------


@pytest.fixture
def traffic(team) -> Iterator[Traffic]:
    """team-b at work: bob's producer through replica 1, his consumer through replica 2."""
    create(AdminClient(team.conf(team.one, "bob", USERS["bob"])), "events")
    traffic = Traffic(team, "events").start()
    try:
        yield traffic
    finally:
        traffic.stop_producing.set()
        traffic.stop_consuming.set()
        for thread in traffic.threads:
            thread.join(DEADLINE)


def test_onboard_and_offboard_a_team_with_zero_restarts(kafka_cluster, team, traffic):
    one, two, admin = team.one, team.two, team.logins["admin"]
    pids = (one.pid, two.pid)
    traffic.flowing("start")
    bobs = {name(proxy): authenticated(proxy, "bob") for proxy in (one, two)}
    assert bobs[name(one)] and bobs[name(two)], bobs  # his producer's connections; his consumer's

    # 1. The VC, closed (only what its ACLs allow: an operator's setting, stored with the VC).
    created = vcproxy(one, admin, "virtual-clusters", "create", "--virtual-cluster", "team-c")
    assert [(r["name"], r["error_code"]) for r in created["results"]] == [("team-c", 0)], created
    closed_vc = ("--virtual-cluster", "team-c", "--config", "allow_everyone_if_no_acl_found=false")
    vcproxy(one, admin, "virtual-clusters", "alter", *closed_vc)
    assert "team-c" in vcproxy(two, admin, "virtual-clusters", "list")["virtual_clusters"]  # the other replica

    # 2. Its admin: a SCRAM user made with Kafka's kafka-configs by the super-admin, placed in team-c and
    # made its admin (a user created by a super-admin is in no VC until placed).
    out = kafka_tool(
        "kafka-configs", one, admin, "--alter", "--entity-type", "users", "--entity-name", "carl",
        "--add-config", f"SCRAM-SHA-512=[iterations=8192,password={PASSWORDS['carl']}]",
    )  # fmt: skip
    assert "Completed updating config for user carl." in out, out
    vcproxy(one, admin, "virtual-clusters", "alter", "--virtual-cluster", "team-c", "--add", "--user", "carl")
    vcproxy(one, admin, "virtual-clusters", "alter", "--virtual-cluster", "team-c", "--add", "--admin", "User:carl")
    carl = team.login_file("carl", PASSWORDS["carl"])
    until(lambda: logs_in(team, two, "carl", PASSWORDS["carl"]), "carl to log in on the other replica")
    described = vcproxy(two, carl, "virtual-clusters", "describe", "--virtual-cluster", "team-c")
    assert described["users"] == ["User:carl"] and described["admins"] == ["User:carl"], described
    assert described["settings"] == {"allow_everyone_if_no_acl_found": "false"}, described

    # 3. carl makes a topic, his member cora with kafka-configs (she joins team-c), and cora's ACLs with
    # kafka-acls; cora produces and consumes.
    carl_admin = AdminClient(team.conf(one, "carl", PASSWORDS["carl"]))
    create(carl_admin, "orders")
    out = kafka_tool(
        "kafka-configs", two, carl, "--alter", "--entity-type", "users", "--entity-name", "cora",
        "--add-config", f"SCRAM-SHA-512=[iterations=8192,password={PASSWORDS['cora']}]",
    )  # fmt: skip
    assert "Completed updating config for user cora." in out, out
    image = replayed(kafka_cluster, one)
    assert image.principals["User:cora"] == "team-c"
    (credential,) = image.users.users["cora"].scram.values()  # salted keys only
    assert credential.iterations == 8192
    physical = image.vcs["team-c"].links["orders"]
    until(lambda: logs_in(team, one, "cora", PASSWORDS["cora"]), "cora to log in")
    cora_views = [AdminClient(team.conf(proxy, "cora", PASSWORDS["cora"])) for proxy in (one, two)]
    for view in cora_views:
        assert "orders" not in view.list_topics(timeout=10).topics  # a closed VC: nothing granted yet
    kafka_tool(
        "kafka-acls", one, carl, "--add", "--allow-principal", "User:cora",
        "--producer", "--consumer", "--topic", "orders", "--group", "cora-app",
    )  # fmt: skip
    granted = {(b.restype, b.name, b.operation) for b in carl_admin.describe_acls(CORA_ACLS).result(60)}
    for acl in ((TOPIC, "orders", AclOperation.WRITE), (TOPIC, "orders", AclOperation.READ), (GROUP, "cora-app", READ)):
        assert acl in granted, granted
    for view in cora_views:  # both replicas follow the grant
        until(lambda v=view: "orders" in v.list_topics(timeout=10).topics, "cora to see orders")
    produce_and_consume(team, "cora", PASSWORDS["cora"], "orders", "cora-app", ["o1", "o2", "o3"])
    del cora_views, view
    traffic.flowing("team-c's onboarding")

    # 4. A quota for team-c: a cap on all its clients together, set by the operator.
    caps = "producer_byte_rate=1048576,consumer_byte_rate=2097152"
    vcproxy(one, admin, "quotas", "alter", "--virtual-cluster", "team-c", "--add-config", caps)
    (entry,) = vcproxy(two, admin, "quotas", "describe", "--virtual-cluster", "team-c")["entries"]
    assert entry["entity"] == {"virtual-cluster": "team-c"}, entry
    assert entry["quotas"] == {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}, entry

    # 5. The listener certificate rotated in place (as cert-manager does): new TLS clients see the new one
    # on both replicas; bob's connections keep their old handshakes.
    before = {name(proxy): fingerprint(proxy, team.cafile) for proxy in (one, two)}
    offsets = {name(proxy): log_size(proxy) for proxy in (one, two)}
    new = _issue(team.ca, team.certfile)
    assert new not in before.values()
    for proxy in (one, two):
        until(lambda p=proxy: fingerprint(p, team.cafile) == new, f"{name(proxy)} to present the new certificate")
        text = proxy.log_path.read_text(errors="replace")[offsets[name(proxy)] :]
        assert f"configuration reloaded: listeners.tls.certfile ({team.certfile})" in text
    assert logs_in(team, two, "carl", PASSWORDS["carl"])  # a new SASL_SSL login on the new certificate
    traffic.flowing("the certificate's rotation")

    # 6. cora's password changes (carl changes it): her open sessions are closed (a raw one idle since its
    # login, and a producer's, which then fails to log in again), the old password is refused, the new works.
    idle = Connection(two.bootstrap, login_from(team.login_file("cora", PASSWORDS["cora"])), timeout=30)
    offset = log_size(two)
    cora_errors: list[KafkaError] = []
    session = Producer(team.conf(two, "cora", PASSWORDS["cora"], error_cb=cora_errors.append))
    session.produce("orders", b"o4")
    assert session.flush(DEADLINE) == 0
    cora_connections = authenticated(two, "cora", offset)
    assert cora_connections
    change = UserScramCredentialUpsertion("cora", ScramCredentialInfo(SCRAM_SHA_512, 8192), CORA_NEW.encode())
    carl_admin.alter_user_scram_credentials([change])["cora"].result(60)
    until(lambda: is_closed(idle), "cora's idle session to be closed")
    until(lambda: closed(two, cora_connections), "cora's producer's connections to be closed")
    until(lambda s=session: s.poll(0.1) >= 0 and refused_login(cora_errors), "cora's producer to be refused")
    del session
    assert not logs_in(team, one, "cora", PASSWORDS["cora"]) and not logs_in(team, two, "cora", PASSWORDS["cora"])
    assert logs_in(team, one, "cora", CORA_NEW) and logs_in(team, two, "cora", CORA_NEW)

    # 7. Offboarding: cora's credential, the topic (its link: the physical topic stays), the quota, carl,
    # the VC (with cora's group, whose offsets go with it).
    deletion = UserScramCredentialDeletion("cora", SCRAM_SHA_512)
    carl_admin.alter_user_scram_credentials([deletion])["cora"].result(60)
    until(lambda: not logs_in(team, two, "cora", CORA_NEW), "cora's login to be refused")
    carl_admin.delete_topics(["orders"], operation_timeout=30)["orders"].result(60)
    del carl_admin
    until(lambda: "orders" not in replayed(kafka_cluster, one).vcs["team-c"].links, "the link to go")
    assert physical in physical_topics(kafka_cluster)  # the KIP's default
    vcproxy(one, admin, "quotas", "alter", "--virtual-cluster", "team-c", "--delete-config", QUOTA_KEYS)
    for resource in (("--user", "cora"), ("--admin", "User:carl"), ("--user", "carl")):
        vcproxy(one, admin, "virtual-clusters", "alter", "--virtual-cluster", "team-c", "--remove", *resource)
    left = vcproxy(two, admin, "virtual-clusters", "describe", "--virtual-cluster", "team-c")
    assert left["consumer_groups"] == ["cora-app"] and not left["users"] + left["admins"] + left["topic_links"], left
    vcproxy(one, admin, "virtual-clusters", "delete", "--virtual-cluster", "team-c", "--force")
    assert vcproxy(two, admin, "virtual-clusters", "list")["virtual_clusters"] == ["team-b"]
    operator = AdminClient(team.conf(one, "admin", USERS["admin"]))  # referenced until its future is done
    operator.alter_user_scram_credentials([UserScramCredentialDeletion("carl", SCRAM_SHA_512)])["carl"].result(60)
    assert not logs_in(team, two, "carl", PASSWORDS["carl"])
    assert physical in physical_topics(kafka_cluster)

    # Bob, throughout: no error, no reconnect, every record once and in order, the same two proxy processes.
    traffic.flowing("team-c's offboarding")
    for proxy in (one, two):
        assert authenticated(proxy, "bob") == bobs[name(proxy)], "bob logged in again: a reconnect"
        assert not closed(proxy, bobs[name(proxy)])
    traffic.finish()
    traffic.healthy()
    assert traffic.produced >= 100  # one every 20 ms or so, the whole test long
    assert traffic.consumed == list(range(traffic.produced)), "bob's records lost, repeated or reordered"
    assert (one.pid, two.pid) == pids and all(p.proc is not None and p.proc.poll() is None for p in (one, two))
