"""Principals the proxy does not know, relayed to the broker (listeners.unknown_principals: relay).

One proxy with tenancy on (alice, a proxy user, in VC team-a) whose listener relays unknown users, upstream
over the brokers' SASL listener as the proxy's broker user (vcproxy, a broker super user). The broker has a
StandardAuthorizer (vcproxy_tools/kafka/cluster.py): relayuser may read, write and describe one topic and use one
group prefix; nothing else. The same commands run as relayuser directly against the brokers' SASL listener
and through the proxy, with confluent-kafka (SCRAM-SHA-512 and PLAIN) and with Kafka's Java tools, and
every allow/deny outcome must be the same: the broker judges relayed principals, not the proxy.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from proxy.auth.credentials import make_entry
from proxy.protocol import codec
from proxy.protocol.apis import request_type
from vcproxy_tools.demo import java_client_properties
from vcproxy_tools.process import ProxyProcess

from ..unit.sasl_corpus import bearer, jws, oauth
from .ports import free_port_block
from .rawclient import RawClient
from .tenants import assert_clean_log, own, tenancy_config
from .tool_jvm import run_tool

RUN = uuid.uuid4().hex[:6]
ALLOWED, DENIED, GROUPS = f"relay-allowed-{RUN}", f"relay-denied-{RUN}", f"relay-g-{RUN}"
RELAY_USER, PASSWORD = "relayuser", "relayuser-secret"
TOOL_TIMEOUT = 120.0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("relay")


@pytest.fixture(scope="module")
def broker_acls(kafka_cluster) -> None:
    """Topics and relayuser's ACLs, set on the broker over the PLAINTEXT listener (User:ANONYMOUS, a super user)."""
    assert kafka_cluster.sasl_bootstrap and RELAY_USER in kafka_cluster.sasl_users, "no SASL listener with test users"
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in (ALLOWED, DENIED)]).values():
        future.result(timeout=60)
    principal = f"User:{RELAY_USER}"
    bindings = [
        AclBinding(
            ResourceType.TOPIC, ALLOWED, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW
        )
        for op in (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    bindings.append(
        AclBinding(
            ResourceType.GROUP,
            GROUPS,
            ResourcePatternType.PREFIXED,
            principal,
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    )
    for future in admin.create_acls(bindings).values():
        future.result(timeout=60)
    # ACLs reach every broker through the metadata log: wait until each one lets relayuser see its topic.
    deadline = time.monotonic() + 60
    for address in kafka_cluster.sasl_bootstrap.split(","):
        conf = {**_direct_conf(kafka_cluster, "SCRAM-SHA-512"), "bootstrap.servers": address}
        while ALLOWED not in AdminClient(conf).list_topics(timeout=20).topics:
            assert time.monotonic() < deadline, f"ACLs not applied on broker {address}"
            time.sleep(0.2)


def _direct_conf(kafka_cluster, mechanism: str, user: str = RELAY_USER, password: str = PASSWORD) -> dict[str, Any]:
    conf = {"bootstrap.servers": kafka_cluster.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT"}
    if mechanism == "OAUTHBEARER":  # the brokers take Kafka's unsecured tokens: `sub` is the principal
        return {
            **conf,
            "sasl.mechanism": mechanism,
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": f"principal={user}",
        }
    return {**conf, "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


@pytest.fixture(scope="module")
def proxy(kafka_cluster, workdir, broker_acls) -> Iterator[ProxyProcess]:
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        [{"name": "team-a", "principals": ["User:alice"], "admins": ["User:alice"]}],
        listeners={"security_protocol": "SASL_PLAINTEXT", "unknown_principals": "relay"},
        credentials={"users": {"alice": make_entry("alice-secret", 4096)}},
        upstream={
            "bootstrap_servers": kafka_cluster.sasl_bootstrap.split(","),
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "vcproxy",
            "sasl_password": kafka_cluster.sasl_users["vcproxy"],
        },
    )
    process = ProxyProcess(config, workdir, name="relay").start(timeout=120)
    yield process
    process.stop()
    assert_clean_log(process)


Target = Callable[[str], dict[str, Any]]  # mechanism -> librdkafka settings (bootstrap and login)


@pytest.fixture(scope="module")
def targets(kafka_cluster, proxy) -> dict[str, Target]:
    def through_proxy(mechanism: str, user: str = RELAY_USER, password: str = PASSWORD) -> dict[str, Any]:
        return {**_direct_conf(kafka_cluster, mechanism, user, password), "bootstrap.servers": proxy.bootstrap}

    def direct(mechanism: str, user: str = RELAY_USER, password: str = PASSWORD) -> dict[str, Any]:
        return _direct_conf(kafka_cluster, mechanism, user, password)

    return {"direct": direct, "proxy": through_proxy}


# -- the commands, with confluent-kafka: each gives its outcome (an error name, or what it saw) ---------


def _code(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].name()
    return type(exc).__name__


def produce(conf: dict[str, Any], topic: str) -> str:
    results: list[str] = []
    producer = Producer({**conf, "message.timeout.ms": 20000, "log_level": 0})
    for i in range(3):
        producer.produce(
            topic, f"m{i}".encode(), on_delivery=lambda err, _msg: results.append(err.name() if err else "OK")
        )
    assert producer.flush(40) == 0, "deliveries outstanding"
    assert len(set(results)) == 1, results
    return results[0]


def consume(conf: dict[str, Any], topic: str, group: str) -> str:
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "log_level": 0})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                return msg.error().name()
            consumer.commit(msg, asynchronous=False)
            return "OK"
        return "TIMEOUT"
    except KafkaException as exc:
        return _code(exc)
    finally:
        consumer.close()


def admin_call(conf: dict[str, Any], call: Callable[[AdminClient], Any]) -> str:
    try:
        result = call(AdminClient(conf))
    except KafkaException as exc:
        return _code(exc)
    return "OK" if result is None else str(result)


def commands(conf: dict[str, Any], run: str) -> dict[str, str]:
    """The same list of commands, in order: what each one got."""
    new_topic = f"relay-new-{RUN}-{run}"

    def list_topics(admin: AdminClient) -> Any:
        return sorted(t for t in admin.list_topics(timeout=20).topics if t.startswith("relay-"))

    def describe_acls(admin: AdminClient) -> Any:
        flt = AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
        )
        found = admin.describe_acls(flt, request_timeout=20).result(timeout=30)
        return sorted(f"{b.name}:{b.operation.name}" for b in found)

    def create_topic(admin: AdminClient) -> Any:
        admin.create_topics([NewTopic(new_topic, 1, 1)], request_timeout=20)[new_topic].result(timeout=30)

    def alter_config(admin: AdminClient) -> Any:
        entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.TOPIC, ALLOWED, incremental_configs=[entry])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=30)

    return {
        "produce allowed": produce(conf, ALLOWED),
        "produce denied": produce(conf, DENIED),
        "consume allowed": consume(conf, ALLOWED, f"{GROUPS}-{run}"),
        "consume denied topic": consume(conf, DENIED, f"{GROUPS}-{run}-x"),
        "consume denied group": consume(conf, ALLOWED, f"other-{RUN}-{run}"),
        "list topics": admin_call(conf, list_topics),
        "describe acls": admin_call(conf, describe_acls),
        "create topic": admin_call(conf, create_topic),
        "alter config": admin_call(conf, alter_config),
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"])
def test_relayed_principal_gets_the_brokers_answers(targets, proxy, mechanism):
    run = mechanism.split("-")[-1].lower()
    direct = commands(targets["direct"](mechanism), f"direct-{run}")
    relayed = commands(targets["proxy"](mechanism), f"proxy-{run}")
    assert relayed == direct
    # And the ACLs did decide (not a proxy that refuses everything, or a broker that allows everything).
    assert direct["produce allowed"] == direct["consume allowed"] == "OK"
    assert direct["produce denied"] == "TOPIC_AUTHORIZATION_FAILED"
    assert direct["consume denied group"] == "GROUP_AUTHORIZATION_FAILED"
    assert direct["list topics"] == str([ALLOWED])
    assert direct["describe acls"] == "[]"  # Kafka 4 answers a principal without DESCRIBE on the cluster with none
    for denied in ("consume denied topic", "create topic", "alter config"):
        assert "AUTHORIZATION_FAILED" in direct[denied], (denied, direct[denied])
    log = proxy.log_path.read_text()
    assert f"relaying the {mechanism} login of user '{RELAY_USER}'" in log
    assert f"authenticated User:{RELAY_USER} with {mechanism} (relayed" in log


def test_a_relayed_principal_without_acls_is_denied_alike(kafka_cluster, targets):
    user, password = "relaydenied", kafka_cluster.sasl_users["relaydenied"]
    outcomes = {
        where: (
            produce(targets[where]("SCRAM-SHA-512", user, password), ALLOWED),
            admin_call(
                targets[where]("SCRAM-SHA-512", user, password),
                lambda a: sorted(t for t in a.list_topics(timeout=20).topics if t.startswith("relay-")),
            ),
        )
        for where in ("direct", "proxy")
    }
    assert outcomes["proxy"] == outcomes["direct"] == ("TOPIC_AUTHORIZATION_FAILED", "[]")


def _auth_error(conf: dict[str, Any]) -> str:
    """The login failure librdkafka reports (its text from "SASL" on: the broker's words, not its address)."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + 30  # the client logs in to its bootstrap servers by itself
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        admin.poll(0.2)
    found = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert found, [str(e) for e in errors]
    return re.sub(r"^.*?SASL", "SASL", found[0].str()).split(" (after")[0]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_fails_as_it_does_directly(targets, mechanism):
    direct = _auth_error(targets["direct"](mechanism, RELAY_USER, "wrong"))
    relayed = _auth_error(targets["proxy"](mechanism, RELAY_USER, "wrong"))
    assert relayed == direct
    assert "invalid credentials" in direct or "Authentication failed" in direct


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"])
def test_the_proxys_upstream_user_is_refused_through_the_proxy(kafka_cluster, targets, proxy, mechanism):
    password = kafka_cluster.sasl_users["vcproxy"]
    assert AdminClient(targets["direct"](mechanism, "vcproxy", password)).list_topics(timeout=20).brokers
    refused = _auth_error(targets["proxy"](mechanism, "vcproxy", password))
    assert "invalid credentials" in refused
    assert "upstream user is never relayed" in proxy.log_path.read_text()


def test_a_proxy_user_in_a_vc_still_sees_only_its_vc(targets, proxy):
    alice = targets["proxy"]("SCRAM-SHA-512", "alice", "alice-secret")
    admin = AdminClient(alice)
    admin.create_topics([NewTopic(f"alice-own-{RUN}", 1, 1)])[f"alice-own-{RUN}"].result(timeout=60)
    assert produce(alice, f"alice-own-{RUN}") == "OK"  # team-a's topic, on the same listener
    seen = set(admin.list_topics(timeout=20).topics)
    assert f"alice-own-{RUN}" in seen and ALLOWED not in seen and DENIED not in seen
    assert not any(t.startswith("__") for t in own(seen))  # Kafka's internal topics: described, never read
    relayed = set(AdminClient(targets["proxy"]("SCRAM-SHA-512")).list_topics(timeout=20).topics)
    assert ALLOWED in relayed and f"alice-own-{RUN}" not in relayed  # physically prefixed, and not relayuser's


def test_a_vc_admin_cannot_give_a_relayed_user_a_proxy_credential(targets):
    """A proxy credential for relayuser would turn its logins from the broker's check to the proxy's: the real
    relayuser shut out, and team-a's admin (who set the password) logging in under its name."""
    alice = AdminClient(targets["proxy"]("SCRAM-SHA-512", "alice", "alice-secret"))
    upsert = UserScramCredentialUpsertion(
        RELAY_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-knows-this", b"salt-0123456789"
    )
    with pytest.raises(KafkaException) as refused:
        alice.alter_user_scram_credentials([upsert])[RELAY_USER].result(timeout=30)
    assert _code(refused.value) == "CLUSTER_AUTHORIZATION_FAILED"
    assert produce(targets["proxy"]("SCRAM-SHA-512"), ALLOWED) == "OK"  # still the broker's relayuser


# -- logins spelt to be read two ways (issue 23): raw requests, as no client would send them ----------------

SASL_AUTHENTICATION_FAILED = 58


def raw_login(bootstrap: str, mechanism: str, *messages: bytes) -> tuple[list[tuple[int, bytes]], bool]:
    """SaslHandshake v1, then each SaslAuthenticate v2 until one fails: the (error, auth bytes) answers, and
    whether the connection was closed after a failure."""
    with RawClient(bootstrap, timeout=60) as raw:
        _, handshake = raw.request(17, 1, 1, codec._empty(request_type(17, 1), mechanism=mechanism))
        assert int(handshake.error_code) == 0, handshake
        answers = []
        for i, message in enumerate(messages):
            body = codec._empty(request_type(36, 2), auth_bytes=message)
            _, answer = raw.request(36, 2, 2 + i, body)
            answers.append((int(answer.error_code), bytes(answer.auth_bytes)))
            if answer.error_code:
                return answers, raw.is_closed()
        return answers, False


ISSUE_MESSAGE = oauth(bearer("nobody-relayed"), bearer("vcproxy"))  # the broker keeps the last auth=


def test_the_issues_two_token_message_is_refused(kafka_cluster, proxy):
    # Straight to the broker the message is a working login (as vcproxy: the differential test reads it so).
    direct = kafka_cluster.sasl_bootstrap.split(",")[0]
    assert raw_login(direct, "OAUTHBEARER", ISSUE_MESSAGE) == ([(0, b"")], False)
    before = len(proxy.log_path.read_text())
    answers, closed = raw_login(proxy.bootstrap, "OAUTHBEARER", ISSUE_MESSAGE)
    assert answers == [(SASL_AUTHENTICATION_FAILED, b"")] and closed
    log = proxy.log_path.read_text()[before:]
    assert "key 'auth' given twice" in log
    assert "relaying" not in log and "authenticated User:" not in log  # nothing reached the broker


@pytest.mark.parametrize(
    ("mechanism", "message"),
    [
        ("OAUTHBEARER", oauth(bearer("vcproxy"), bearer("nobody-relayed"))),
        ("OAUTHBEARER", oauth(bearer("nobody-relayed"), b"AUTH=Bearer " + jws({"sub": "vcproxy", "exp": 2**40}))),
        ("OAUTHBEARER", oauth(b"auth=Bearer " + jws(b'{"sub":"nobody","sub":"vcproxy","exp":1099511627776}'))),
        ("OAUTHBEARER", oauth(b"auth=BEARER " + jws({"sub": "vcproxy", "exp": 2**40}))),
        ("OAUTHBEARER", oauth(bearer("nobody-relayed", email="vcproxy"))),  # another claim a broker may read
        ("OAUTHBEARER", oauth(bearer("alice"))),  # a proxy user: logs in at the proxy, with her password
        ("OAUTHBEARER", oauth(bearer("nobody-relayed"), gs2=b"n,a=vcproxy,")),
        ("PLAIN", b"\0vcproxy\0whatever"),
        ("PLAIN", b"vcproxy\0vcproxy\0whatever"),
        ("PLAIN", b"vcproxy\0nobody-relayed\0whatever"),  # authzid unlike authcid
        ("PLAIN", b"\0nobody-relayed\0whatever\0vcproxy"),  # a fourth part
        ("SCRAM-SHA-512", b"n,,n=vcproxy,r=abcdef"),
        ("SCRAM-SHA-512", b"n,a=vcproxy,n=vcproxy,r=abcdef"),
        ("SCRAM-SHA-512", b"n,a=vcproxy,n=nobody-relayed,r=abcdef"),
        ("SCRAM-SHA-512", b"n,,n=vcproxy,r=abcdef,tokenauth=true"),  # the login would be the token's owner
        ("SCRAM-SHA-512", b"n,,n=nobody-relayed,r=abcdef,tokenauth=true"),
        ("SCRAM-SHA-512", b"y,,n=nobody-relayed,r=abcdef"),
    ],
)
def test_the_upstream_user_and_proxy_users_are_never_relayed_however_spelt(proxy, mechanism, message):
    before = len(proxy.log_path.read_text())
    answers, closed = raw_login(proxy.bootstrap, mechanism, message)
    assert answers == [(SASL_AUTHENTICATION_FAILED, b"")] and closed
    log = proxy.log_path.read_text()[before:]
    assert "relaying" not in log and "authenticated User:" not in log


def test_a_second_oauthbearer_token_after_the_brokers_error_is_refused(proxy):
    expired = oauth(b"auth=Bearer " + jws({"sub": "nobody-relayed", "exp": 1}))
    before = len(proxy.log_path.read_text())
    answers, closed = raw_login(proxy.bootstrap, "OAUTHBEARER", expired, oauth(bearer("vcproxy")))
    # The broker's error challenge comes back through the relay; the second token goes no further.
    assert answers[0][0] == 0 and b"invalid_token" in answers[0][1]
    assert answers[1] == (SASL_AUTHENTICATION_FAILED, b"") and closed
    log = proxy.log_path.read_text()[before:]
    assert "an OAUTHBEARER exchange takes one token" in log and "authenticated User:" not in log


# -- the same with Kafka's Java tools -----------------------------------------------------------------------


EXCEPTION = re.compile(r"\b(\w+(?:Authorization|Authentication)\w*Exception)\b")


def java(bootstrap: str, name: str, *args: str, input: str | None = None) -> tuple[int, list[str], str]:
    result = run_tool(name, ["--bootstrap-server", bootstrap, *args], timeout=TOOL_TIMEOUT, input=input)
    text = result.stdout + result.stderr
    return result.returncode, sorted(set(EXCEPTION.findall(text))), result.stdout


def java_commands(bootstrap: str, config: Path, run: str, every: bool = True) -> dict[str, Any]:
    """The Java tools' commands; not `every`: only producing (allowed and denied) and listing."""
    cc = ["--command-config", str(config)]
    pc = ["--producer.config", str(config)]
    out: dict[str, Any] = {}
    out["produce allowed"] = java(bootstrap, "kafka-console-producer", "--topic", ALLOWED, *pc, input="a\nb\n")[:2]
    out["produce denied"] = java(
        bootstrap,
        "kafka-console-producer",
        "--topic",
        DENIED,
        *pc,
        "--producer-property",
        "max.block.ms=15000",
        input="a\n",
    )[:2]
    code, errors, stdout = java(bootstrap, "kafka-topics", "--list", *cc)
    out["list topics"] = (code, errors, sorted(t for t in stdout.split() if t.startswith("relay-")))
    if not every:
        return out
    code, errors, stdout = java(
        bootstrap,
        "kafka-console-consumer",
        "--topic",
        ALLOWED,
        "--group",
        f"{GROUPS}-java-{run}",
        "--from-beginning",
        "--max-messages",
        "1",
        "--timeout-ms",
        "30000",
        "--consumer.config",
        str(config),
    )
    out["consume allowed"] = (code, errors, len(stdout.splitlines()))
    out["create topic"] = java(
        bootstrap, "kafka-topics", "--create", "--topic", f"relay-java-{RUN}-{run}", "--partitions", "1", *cc
    )[:2]
    return out


def _java_login(workdir: Path, mechanism: str) -> Path:
    config = workdir / f"relayuser-{mechanism}.properties"
    if mechanism == "PLAIN":
        config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{RELAY_USER}" password="{PASSWORD}";\n'
        )
    elif mechanism == "OAUTHBEARER":  # Kafka's unsecured token, made by the client (the brokers take those)
        config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="{RELAY_USER}";\n'
        )
    else:
        config.write_text(java_client_properties(RELAY_USER, PASSWORD))
    return config


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"])
def test_java_tools_get_the_same_answers(kafka_cluster, proxy, broker_acls, workdir, mechanism):
    config = _java_login(workdir, mechanism)
    run = mechanism.split("-")[-1].lower()
    every = mechanism == "SCRAM-SHA-512"  # the whole list once; the other logins produce and list
    direct = java_commands(kafka_cluster.sasl_bootstrap, config, f"direct-{run}", every)
    relayed = java_commands(proxy.bootstrap, config, f"proxy-{run}", every)
    assert relayed == direct
    assert direct["produce allowed"] == (0, [])
    assert "TopicAuthorizationException" in direct["produce denied"][1]
    assert direct["list topics"] == (0, [], [ALLOWED])
    if every:
        assert direct["consume allowed"][:2] == (0, []) and direct["consume allowed"][2] >= 1
        assert direct["create topic"][0] != 0 and direct["create topic"][1]
