"""Authentication at the proxy (SASL, TLS, mTLS) and the proxy's own upstream login, with real clients
through real `vcproxy serve` processes in front of the session's Kafka cluster.

Each proxy here owns a free block of 10 ports chosen at run time: bootstrap P, broker N on P + 1 + N.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.auth.credentials import make_entry
from vcproxy_tools.process import READY_LINE, ProxyProcess, proxy_config

from .polling import refused
from .ports import free_port, free_port_block
from .test_observability import metrics_port, scrape, total
from .tool_jvm import run_tool

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
PASSWORDS = [*USERS.values(), "vcproxy-secret", "wrong-password"]
MESSAGES = 200


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("auth")


@pytest.fixture(scope="module")
def certs(workdir) -> dict[str, str]:
    """A CA, the proxy's server certificate (127.0.0.1) and alice's client certificate."""
    ca = trustme.CA(organization_name="vcproxy test CA")
    server = ca.issue_cert("127.0.0.1", "localhost")
    alice = ca.issue_cert("alice", common_name="alice", organization_unit_name="eng", organization_name="Acme")
    paths = {
        "ca": workdir / "ca.pem",
        "server": workdir / "server.pem",
        "client_cert": workdir / "alice-cert.pem",
        "client_key": workdir / "alice-key.pem",
    }
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.private_key_and_cert_chain_pem.write_to_path(str(paths["server"]))
    alice.cert_chain_pems[0].write_to_path(str(paths["client_cert"]))
    alice.private_key_pem.write_to_path(str(paths["client_key"]))
    return {k: str(v) for k, v in paths.items()}


@pytest.fixture(scope="module")
def credentials() -> dict[str, Any]:
    return {"users": {user: make_entry(password, 4096) for user, password in USERS.items()}}


def _start(workdir: Path, name: str, config: dict[str, Any]) -> ProxyProcess:
    process = ProxyProcess(config, workdir, name=name)
    process.start(timeout=120)
    return process


@pytest.fixture(scope="module")
def proxies(kafka_cluster, workdir, certs, credentials) -> Iterator[dict[str, ProxyProcess]]:
    assert kafka_cluster.sasl_bootstrap, "the Kafka cluster has no SASL listener"
    started: dict[str, ProxyProcess] = {}

    def config(name: str, bootstrap: str, listeners: dict[str, Any] | None = None, **sections: Any) -> dict:
        out = proxy_config(bootstrap, free_port_block(), **sections)
        out["listeners"].update(listeners or {})
        return out

    server_tls = {"certfile": certs["server"], "cafile": certs["ca"]}
    try:
        started["sasl"] = _start(
            workdir,
            "sasl",
            config(
                "sasl",
                kafka_cluster.bootstrap,
                {"security_protocol": "SASL_PLAINTEXT"},
                credentials=credentials,
                # librdkafka retries a wrong password ~8 times a second and every test here comes from
                # 127.0.0.1: the failure budget (tests/integration/test_availability.py) is not under test.
                limits={"max_failed_authentications": 10_000},
            ),
        )
        started["mtls"] = _start(
            workdir,
            "mtls",
            config(
                "mtls",
                kafka_cluster.bootstrap,
                {
                    "security_protocol": "SSL",
                    "tls": {
                        **server_tls,
                        "client_auth": "required",
                        "principal_mapping_rules": "RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$3/L,DEFAULT",
                    },
                },
            ),
        )
        started["sasl-ssl"] = _start(
            workdir,
            "sasl-ssl",
            config(
                "sasl-ssl",
                kafka_cluster.bootstrap,
                {"security_protocol": "SASL_SSL", "sasl_mechanisms": ["PLAIN"], "tls": server_tls},
                credentials=credentials,
            ),
        )
        started["upstream-scram"] = _start(
            workdir,
            "upstream-scram",
            config(
                "upstream-scram",
                kafka_cluster.sasl_bootstrap,
                upstream={
                    "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "SCRAM-SHA-512",
                    "sasl_username": "vcproxy",
                    "sasl_password": "vcproxy-secret",
                },
            ),
        )
        (workdir / "vcproxy.password").write_text("vcproxy-secret\n")
        started["upstream-plain"] = _start(
            workdir,
            "upstream-plain",
            config(
                "upstream-plain",
                kafka_cluster.sasl_bootstrap,
                upstream={
                    "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "PLAIN",
                    "sasl_username": "vcproxy",
                    "sasl_password_file": "vcproxy.password",  # relative to the config file's directory
                },
            ),
        )
        # Proxies whose upstream is the SASL_SSL proxy: upstream TLS (CA-verified) plus upstream SASL, on each engine.
        for name, engine in (("chain", "auto"), ("chain-openssl", "openssl")):
            started[name] = _start(
                workdir,
                name,
                config(
                    name,
                    started["sasl-ssl"].bootstrap,
                    upstream={
                        "security_protocol": "SASL_SSL",
                        "sasl_mechanism": "PLAIN",
                        "sasl_username": "alice",
                        "sasl_password": "alice-secret",
                        "tls": {"cafile": certs["ca"], "engine": engine},
                    },
                    metrics={"enabled": True, "port": free_port()},
                ),
            )
        yield started
    finally:
        for process in reversed(started.values()):
            process.stop()


def _sasl(mechanism: str, user: str = "alice", password: str | None = None, protocol: str = "SASL_PLAINTEXT") -> dict:
    return {
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": USERS.get(user, "") if password is None else password,
    }


def _alive(process: ProxyProcess) -> str:
    assert process.proc is not None and process.proc.poll() is None, f"proxy died:\n{process.log_tail()}"
    return process.bootstrap


def _roundtrip(bootstrap: str, client: dict[str, Any], messages: int = MESSAGES) -> None:
    """Create a topic, produce with acks=all, consume it back in a group: all through the proxy."""
    conf = {"bootstrap.servers": bootstrap, **client}
    topic, group = f"auth-{uuid.uuid4().hex[:8]}", f"auth-g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 3, 3)], operation_timeout=30)[topic].result(timeout=60)
    # The producer's own view, not the admin client's: brokers learn a new topic one by one, and a producer
    # whose metadata came from one that had not yet fails its records UNKNOWN_PARTITION (seen on a loaded
    # machine). Its metadata requests fill its cache, so it produces once it has seen every partition led.
    producer = Producer({**conf, "acks": "all", "linger.ms": 5})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        partitions = producer.list_topics(topic, timeout=10).topics[topic].partitions
        if len(partitions) == 3 and all(p.leader >= 0 for p in partitions.values()):
            break
        time.sleep(0.2)
    errors: list[str] = []
    for i in range(messages):
        producer.produce(topic, str(i).encode(), on_delivery=lambda err, _m: err and errors.append(str(err)))
    assert producer.flush(60) == 0 and not errors, errors
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(seen) < messages and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            seen.add(int(msg.value()))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert seen == set(range(messages))


def _no_passwords(*processes: ProxyProcess) -> None:
    for process in processes:
        text = process.log_path.read_text(errors="replace")
        for secret in PASSWORDS:
            assert secret not in text, f"{process.log_path} contains a password"


def _auth_error(
    bootstrap: str, client: dict[str, Any], expected: Callable[[KafkaError], bool] = lambda e: True
) -> list[KafkaError]:
    """Connect with `client` settings (none expected to succeed) and return the errors librdkafka has
    reported once one is `expected` (or after a generous deadline: the caller's assertion says what is missing)."""
    errors: list[KafkaError] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "error_cb": errors.append, **client})
    refused(admin, errors, expected)
    return errors


def _logged(process: ProxyProcess, text: str, timeout: float = 60) -> None:
    """`text` reaches the proxy's log (it may come after what the client saw)."""
    deadline = time.monotonic() + timeout
    while text not in process.log_path.read_text():
        assert time.monotonic() < deadline, f"{text!r} not in {process.log_path}:\n{process.log_tail()}"
        time.sleep(0.1)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_plaintext_produce_consume(proxies, mechanism):
    proxy = proxies["sasl"]
    _roundtrip(_alive(proxy), _sasl(mechanism))
    assert f"authenticated User:alice with {mechanism}" in proxy.log_path.read_text()
    _no_passwords(proxy)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_is_an_authentication_error(proxies, mechanism):
    proxy = proxies["sasl"]
    errors = _auth_error(
        _alive(proxy), _sasl(mechanism, password="wrong-password"), lambda e: "invalid credentials" in e.str()
    )
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("invalid credentials" in e.str() for e in errors), errors
    _logged(proxy, f"authentication failed for user 'alice' with {mechanism}")
    _logged(proxy, "closing after failed authentication")
    _no_passwords(proxy)


def test_unknown_user_and_disabled_mechanism(proxies, certs):
    errors = _auth_error(
        _alive(proxies["sasl"]),
        _sasl("SCRAM-SHA-256", "mallory", password="wrong-password"),
        lambda e: e.code() == KafkaError._AUTHENTICATION,
    )
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    # The SASL_SSL proxy enables PLAIN only: the handshake answers UNSUPPORTED_SASL_MECHANISM with that list.
    client = {**_sasl("SCRAM-SHA-512", protocol="SASL_SSL"), "ssl.ca.location": certs["ca"]}
    errors = _auth_error(
        _alive(proxies["sasl-ssl"]), client, lambda e: "PLAIN" in e.str() and "SCRAM-SHA-512" in e.str()
    )
    assert any("PLAIN" in e.str() and "SCRAM-SHA-512" in e.str() for e in errors), errors


def test_java_kafka_topics_over_scram_sha_512(proxies, workdir):
    bootstrap = _alive(proxies["sasl"])
    command_config = workdir / "java-scram.properties"
    command_config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="alice-secret";\n'
    )
    topic = f"auth-java-{uuid.uuid4().hex[:8]}"
    common = ["--bootstrap-server", bootstrap, "--command-config", str(command_config)]
    created = run_tool(
        "kafka-topics", [*common, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "3"]
    )
    assert created.returncode == 0, created.stderr
    listed = run_tool("kafka-topics", [*common, "--list"])
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()
    assert "authenticated User:alice with SCRAM-SHA-512" in proxies["sasl"].log_path.read_text()


def test_mtls_client_certificate_principal(proxies, certs):
    proxy = proxies["mtls"]
    client = {
        "security.protocol": "SSL",
        "ssl.ca.location": certs["ca"],
        "ssl.certificate.location": certs["client_cert"],
        "ssl.key.location": certs["client_key"],
    }
    _roundtrip(_alive(proxy), client)
    log = proxy.log_path.read_text()
    assert "TLS client certificate 'CN=alice,OU=eng,O=Acme' -> principal User:alice@acme" in log
    # Without a client certificate the handshake fails (client_auth: required): only that connection closes.
    _auth_error(proxy.bootstrap, {"security.protocol": "SSL", "ssl.ca.location": certs["ca"]})
    _logged(proxy, "TLS handshake failed")
    _alive(proxy)


def test_sasl_ssl_plain(proxies, certs):
    proxy = proxies["sasl-ssl"]
    _roundtrip(_alive(proxy), {**_sasl("PLAIN", "bob", protocol="SASL_SSL"), "ssl.ca.location": certs["ca"]})
    assert "authenticated User:bob with PLAIN" in proxy.log_path.read_text()
    _no_passwords(proxy)


@pytest.mark.parametrize("name", ["upstream-scram", "upstream-plain"])
def test_upstream_sasl_login_with_plaintext_clients(proxies, kafka_cluster, name):
    proxy = proxies[name]
    bootstrap = _alive(proxy)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=20)
    assert sorted(metadata.brokers) == sorted(b.node_id for b in kafka_cluster.brokers)
    assert all(
        b.host == "127.0.0.1" and b.port == proxy.config["listeners"]["bootstrap_port"] + 1 + b.id
        for b in metadata.brokers.values()
    )
    _roundtrip(bootstrap, {})
    _no_passwords(proxy)


@pytest.mark.parametrize("name", ["chain", "chain-openssl"])
def test_upstream_tls_and_sasl_through_a_chain_of_proxies(proxies, name):
    # client --PLAINTEXT--> chain --SASL_SSL (PLAIN as alice, CA-verified)--> sasl-ssl proxy --> Kafka
    _roundtrip(_alive(proxies[name]), {})
    front = proxies["sasl-ssl"].log_path.read_text()
    assert "authenticated User:alice with PLAIN" in front
    _no_passwords(proxies[name], proxies["sasl-ssl"])
    # The compiled TLS (auto): the forwarder serves the chain's plain requests through its session to the broker,
    # and both ends of that session are rustls (the sasl-ssl proxy's listener too). OpenSSL's: the Python path's.
    forwarded = total(scrape(metrics_port(proxies[name])), "vcproxy_forwarded_requests_total")
    assert forwarded >= 5 if name == "chain" else forwarded == 0, forwarded


def test_wire_rules_before_login(proxies):
    """Exact bytes against the SASL proxy: what a client may send before it has logged in."""
    from kio.schema.errors import ErrorCode

    from proxy.protocol.apis import request_type

    from .rawclient import RawClient

    bootstrap = _alive(proxies["sasl"])
    with RawClient(bootstrap) as raw:
        _, versions = raw.request(
            18, 3, 1, request_type(18, 3)(client_software_name="raw", client_software_version="1")
        )
        assert versions.error_code == ErrorCode.none
        assert {17, 36} <= {int(k.api_key) for k in versions.api_keys}
        metadata = request_type(3, 12)(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        raw.send_raw(raw.encode(3, 12, 2, metadata))
        assert raw.is_closed(), "Metadata before authentication must close the connection"
    with RawClient(bootstrap) as raw:
        _, handshake = raw.request(17, 1, 1, request_type(17, 1)(mechanism="GSSAPI"))
        assert handshake.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(handshake.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert raw.is_closed()
    with RawClient(bootstrap) as raw:
        _, handshake = raw.request(17, 0, 1, request_type(17, 0)(mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.unsupported_version
        assert raw.is_closed()
    with RawClient(bootstrap) as raw:
        _, handshake = raw.request(17, 1, 1, request_type(17, 1)(mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.none
        _, login = raw.request(36, 2, 2, request_type(36, 2)(auth_bytes=b"\0alice\0wrong-password"))
        assert login.error_code == ErrorCode.sasl_authentication_failed and "invalid credentials" in login.error_message
        assert raw.is_closed()
    with RawClient(bootstrap) as raw:
        raw.request(17, 1, 1, request_type(17, 1)(mechanism="PLAIN"))
        _, login = raw.request(36, 2, 2, request_type(36, 2)(auth_bytes=b"\0alice\0alice-secret"))
        assert login.error_code == ErrorCode.none
        _, metadata_response = raw.request(3, 12, 3, metadata)
        assert len(metadata_response.brokers) >= 1
    _no_passwords(proxies["sasl"])


def test_wrong_upstream_password_keeps_the_proxy_unready(kafka_cluster, workdir):
    config = proxy_config(
        kafka_cluster.sasl_bootstrap,
        free_port_block(),
        upstream={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "vcproxy",
            "sasl_password": "wrong-password",
        },
    )
    process = ProxyProcess(config, workdir, name="upstream-wrong")
    process.log_path.touch()  # start() appends to it from its thread
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(process.start, 300)  # never ready: stopped below once the broker has refused it
        try:
            _logged(process, "broker refused the proxy's SCRAM-SHA-512 login as 'vcproxy': SASL_AUTHENTICATION_FAILED")
            assert READY_LINE not in process.log_path.read_text()
        finally:
            process.stop(timeout=60)
        with pytest.raises(RuntimeError, match="exited"):  # still not ready when stopped
            starting.result()
    _no_passwords(process)
