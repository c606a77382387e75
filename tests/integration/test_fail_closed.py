"""Fail closed: what a virtual-cluster client may not use never reaches the broker.

A raw client bound to a VC (by client id) learns the advertised table from ApiVersions, then sends
every API key 0..94 at every version the proxy did not advertise, and every denied API with a real
body. Each must be answered by the proxy itself (an otherwise empty response carrying the API's
error) or end the connection, with the proxy's "refusing request:" / "closing:" log line for it.
Dangerous requests are also checked on the physical cluster: nothing they would change has changed.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import typing
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import NoneType, UnionType
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from proxy.catalogue import refusal_body
from proxy.core import apiversions
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, response_body_offset
from proxy.rules import api_rules
from proxy.tenancy.engine import tenant_rules
from tests.integration.rawclient import RawClient
from vcproxy_tools.process import ProxyProcess

from .ports import free_port_block
from .tenants import by_client_id, replayed, tenancy_config

CLIENT_ID = "team-a-app"
API_VERSIONS = 18
HIGHEST_KEY = 94
UNSUPPORTED_VERSION = int(ErrorCode.unsupported_version)
CLUSTER_AUTHORIZATION_FAILED = int(ErrorCode.cluster_authorization_failed)
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS = 2, 4, 8, 16


@pytest.fixture(scope="module")
def vc_proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("fail-closed")
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        by_client_id(("team-a", "team-b")),
    )
    process = ProxyProcess(config, workdir, name="fail-closed").start(timeout=120)
    yield process
    process.stop()


# -- helpers ---------------------------------------------------------------------------------------


def build(cls: type, **values: Any) -> Any:
    """A kio entity from plain values (nested dicts/lists); fields this version lacks are ignored."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    return codec._empty(cls, **{k: _coerce(hints[k], v) for k, v in values.items() if k in names})


def _coerce(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    if typing.get_origin(tp) in (UnionType, typing.Union):
        tp = next(a for a in typing.get_args(tp) if a is not NoneType)
    if typing.get_origin(tp) is tuple:
        return tuple(_coerce(typing.get_args(tp)[0], v) for v in value)
    if dataclasses.is_dataclass(tp):
        return build(tp, **value)  # type: ignore[arg-type]
    base = tp
    while hasattr(base, "__supertype__"):  # NewType (BrokerId, TopicName, ...)
        base = base.__supertype__
    if isinstance(value, bool | str | bytes | float | datetime.timedelta | uuid.UUID):
        return value
    return base(value) if isinstance(base, type) and issubclass(base, int) else value


class ProxyLog:
    """The proxy's refusals, read incrementally from its log file."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = path.stat().st_size

    def refusals(self) -> list[str]:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        lines = data.decode(errors="replace").splitlines()
        return [line for line in lines if "refusing request:" in line or ": closing: " in line]


class Tenant:
    """A raw connection as a VC client; reconnects (and asks ApiVersions again) after a close."""

    def __init__(self, bootstrap: str, client_id: str = CLIENT_ID):
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.client: RawClient | None = None
        self.correlation = 0
        self.advertised: dict[int, tuple[int, int]] = {}
        self.connect()

    def connect(self) -> None:
        if self.client is not None:
            self.client.close()
        self.client = RawClient(self.bootstrap)
        body = build(request_type(API_VERSIONS, 3), client_software_name="fail-closed", client_software_version="1")
        response = self.ask(API_VERSIONS, 3, codec.encode(body))
        assert response is not None, "ApiVersions was refused"
        _, decoded = RawClient.decode(API_VERSIONS, 3, response)
        assert int(decoded.error_code) == 0
        self.advertised = apiversions.table_of(decoded)

    def is_advertised(self, key: int, version: int) -> bool:
        low, high = self.advertised.get(key, (0, -1))
        return low <= version <= high

    def ask(self, key: int, version: int, body: bytes) -> bytes | None:
        """The response frame, or None if the proxy closed the connection (then reconnected)."""
        assert self.client is not None
        self.correlation += 1
        info = api_info(key)
        header_version = info.request_header_version(version) if info is not None else 1
        self.client.send_raw(
            frame(encode_request_header(key, version, self.correlation, self.client_id, header_version) + body)
        )
        try:
            response = self.client.read_frame()
        except OSError:  # ConnectionError (EOF, reset) included
            if key != API_VERSIONS:
                self.connect()
            return None
        assert int.from_bytes(response[4:8], "big", signed=True) == self.correlation
        return response

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def body_of(key: int, version: int, response: bytes) -> bytes:
    info = api_info(key)
    assert info is not None
    return response[response_body_offset(response, info.response_header_version(version)) :]


def expected_unadvertised(key: int, version: int) -> bytes | None:
    """What the proxy must answer to a request it did not advertise (None: close the connection)."""
    info, rule = api_info(key), api_rules().get(key)
    if info is None or rule is None or not info.min_version <= version <= info.max_version:
        return None  # cannot even be parsed
    error = CLUSTER_AUTHORIZATION_FAILED if rule.physical == "reject" else UNSUPPORTED_VERSION
    return codec.error_response_body(key, version, error)


def names_of(key: int) -> tuple[str, ...]:
    info, rule = api_info(key), api_rules().get(key)
    if info is None:
        return (f"unknown API key {key}",)  # kio has no schema for it: the proxy knows only the number
    return tuple(n for n in (rule and rule.name, info.name) if n)


def check_refused(log: ProxyLog, key: int, version: int, response: bytes | None, expected: bytes | None) -> None:
    what = f"{'/'.join(names_of(key))} v{version}"
    lines = log.refusals()
    if expected is None:
        assert response is None, f"{what}: expected the connection to close, got {response!r}"
        assert len(lines) == 1 and ": closing: " in lines[0], f"{what}: {lines}"
    else:
        assert response is not None, f"{what}: connection closed, expected {expected!r}"
        assert body_of(key, version, response) == expected, f"{what}: {response!r}"
        assert len(lines) == 1 and "refusing request:" in lines[0], f"{what}: {lines}"
    assert any(name in lines[0] for name in names_of(key)), f"{what}: {lines[0]}"


# -- the physical cluster, asked directly --------------------------------------------------------------


def physical_ask(address: str, key: int, version: int, **values: Any) -> Any:
    with RawClient(address) as client:
        _, response = client.request(key, version, 1, build(request_type(key, version), **values))
    return response


def metadata_barrier(address: str, timeout: float = 120) -> None:
    """Wait until the broker has applied every metadata change committed before this call.

    A marker quota is set and removed through the controller; the broker applies the metadata log
    in order, so once it has seen both, it has seen anything a refused request could have changed.
    """
    entity = [{"entity_type": "client-id", "entity_name": f"barrier-{uuid.uuid4().hex[:8]}"}]
    components = [{"entity_type": "client-id", "match_type": 0, "match": entity[0]["entity_name"]}]
    for remove in (False, True):
        op = {"key": "producer_byte_rate", "value": 1024.0, "remove": remove}
        [entry] = physical_ask(address, 49, 1, entries=[{"entity": entity, "ops": [op]}]).entries
        assert int(entry.error_code) == 0, entry
        deadline = time.monotonic() + timeout
        while bool(physical_ask(address, 48, 1, components=components, strict=False).entries) == remove:
            assert time.monotonic() < deadline, "the broker never applied the barrier quota"
            time.sleep(0.05)


def physical_snapshot(kafka_cluster, physical_topic: str) -> dict[str, Any]:
    """Everything the dangerous requests below would change, read straight from the brokers."""
    broker1 = next(f"{b.host}:{b.port}" for b in kafka_cluster.brokers if b.node_id == 1)
    metadata_barrier(broker1)
    scram = physical_ask(broker1, 50, 0, users=None)
    quotas = physical_ask(broker1, 48, 1, components=[], strict=False)
    reassignments = physical_ask(broker1, 46, 0, timeout=datetime.timedelta(seconds=30), topics=None)
    versions = physical_ask(broker1, API_VERSIONS, 3, client_software_name="snapshot", client_software_version="1")
    metadata = physical_ask(broker1, 3, 12, topics=[{"name": physical_topic}])
    resources = [{"resource_type": BROKER, "resource_name": "1"}, {"resource_type": BROKER, "resource_name": ""}]
    resources.append({"resource_type": BROKER_LOGGER, "resource_name": "1"})
    configs = physical_ask(broker1, 32, 4, resources=resources)
    for response in (scram, quotas, reassignments, versions, metadata, configs):
        assert int(getattr(response, "error_code", 0)) == 0, response
    [topic] = metadata.topics
    assert int(topic.error_code) == 0, topic
    return {
        "scram users": sorted((r.user, sorted(int(c.mechanism) for c in r.credential_infos)) for r in scram.results),
        "client quotas": sorted(repr(e) for e in quotas.entries),
        "reassignments": [repr(t) for t in reassignments.topics],
        "features": sorted(
            (f.name, int(f.min_version_level), int(f.max_version_level)) for f in versions.finalized_features
        ),
        "brokers": sorted(int(b.node_id) for b in metadata.brokers),
        "replicas": sorted((int(p.partition_index), tuple(int(r) for r in p.replica_nodes)) for p in topic.partitions),
        "configs": {
            (int(r.resource_type), r.resource_name): sorted((c.name, c.value, int(c.config_source)) for c in r.configs)
            for r in configs.results
        },
    }


@pytest.fixture(scope="module")
def team_a_topic(kafka_cluster, vc_proxy) -> str:
    """team-a's "orders" (created through the proxy); returns its physical name."""

    admin = AdminClient({"bootstrap.servers": vc_proxy.bootstrap, "client.id": CLIENT_ID})
    admin.create_topics([NewTopic("orders", 3, 3)], operation_timeout=30)["orders"].result(60)
    return replayed(kafka_cluster, vc_proxy).vcs["team-a"].links["orders"]


# -- every unadvertised API version ------------------------------------------------------------------


def test_every_unadvertised_api_version_is_refused_by_the_proxy(vc_proxy):
    tenant = Tenant(vc_proxy.bootstrap)
    log = ProxyLog(vc_proxy.log_path)
    rejected = {key for key, rule in api_rules().items() if rule.physical == "reject"}
    assert rejected and not rejected & set(tenant.advertised), "internal APIs are advertised"
    assert set(tenant.advertised) <= set(apiversions.tenant_versions())
    probes = closed = 0
    try:
        for key in range(HIGHEST_KEY + 1):
            info = api_info(key)
            # max + 1 is the KIP-1313 (header v3) version, advertised where the broker has max; max + 2 is unknown.
            top = info.max_version + 2 if info is not None else 1
            for version in range(top + 1):
                if tenant.is_advertised(key, version):
                    continue
                if key == API_VERSIONS:
                    continue  # too new for the proxy: answered with a v0 body, see the next test
                parseable = info is not None and info.min_version <= version <= info.max_version
                body = codec.encode(codec._empty(request_type(key, version))) if parseable else b""
                response = tenant.ask(key, version, body)
                check_refused(log, key, version, response, expected_unadvertised(key, version))
                probes += 1
                closed += response is None
    finally:
        tenant.close()
    # Kafka 4.2 and kio agree on most of the table, so this is mostly too-old, too-new and internal.
    assert probes > 150 and closed > 100, (probes, closed)


def test_too_new_api_versions_gets_a_v0_answer_listing_nothing_a_tenant_cannot_use(vc_proxy):
    """KIP-511: an ApiVersions version the proxy cannot parse gets UNSUPPORTED_VERSION in a v0 body.

    Kafka lists only ApiVersions' own range there; whatever the proxy lists must at least not
    offer a VC client an API or version that the real table does not advertise."""
    tenant = Tenant(vc_proxy.bootstrap)
    try:
        # No KIP-1313 version for ApiVersions: newer Kafka's v5 is a real one (franz-go sends it).
        assert tenant.advertised[API_VERSIONS][1] == api_info(API_VERSIONS).max_version  # type: ignore[union-attr]
        too_new = api_info(API_VERSIONS).max_version + 1  # type: ignore[union-attr]
        response = tenant.ask(API_VERSIONS, too_new, b"")
    finally:
        tenant.close()
    assert response is not None
    answer, _ = codec.decode(response_type(API_VERSIONS, 0), response, response_body_offset(response, 0))
    assert int(answer.error_code) == UNSUPPORTED_VERSION
    listed = apiversions.table_of(answer)
    assert API_VERSIONS in listed
    over = {
        key: (low, high)
        for key, (low, high) in listed.items()
        if key not in tenant.advertised or low < tenant.advertised[key][0] or high > tenant.advertised[key][1]
    }
    assert not over, f"the KIP-511 fallback offers what the VC client is not advertised: {over}"


# -- denied APIs with real bodies -------------------------------------------------------------------


def dangerous_bodies(physical_topic: str, cluster_id: str) -> dict[int, dict[str, Any]]:
    """Requests that would change (or reveal) the physical cluster if they reached it."""
    timeout = datetime.timedelta(seconds=10)
    return {
        29: {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1},  # ANY
        30: {  # CreateAcls: allow everyone everything on every topic
            "creations": [
                {
                    "resource_type": TOPIC,
                    "resource_name": "*",
                    "resource_pattern_type": 3,
                    "principal": "User:mallory",
                    "host": "*",
                    "operation": 2,
                    "permission_type": 3,
                }
            ]
        },
        31: {"filters": [{"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1}]},
        34: {"dirs": [{"path": "/tmp/elsewhere", "topics": [{"name": physical_topic, "partitions": [0]}]}]},
        35: {"topics": None},
        38: {"renewers": [], "max_lifetime": datetime.timedelta(milliseconds=-1)},
        39: {"hmac": b"x" * 32, "renew_period": datetime.timedelta(hours=1)},
        40: {"hmac": b"x" * 32, "expiry_time_period": datetime.timedelta(milliseconds=-1)},
        41: {"owners": None},
        43: {"election_type": 0, "topic_partitions": None, "timeout": timeout},  # every partition of the cluster
        45: {  # drop a replica of team-a's topic
            "timeout": timeout,
            "topics": [{"name": physical_topic, "partitions": [{"partition_index": 0, "replicas": [1, 2]}]}],
        },
        46: {"timeout": timeout, "topics": None},
        48: {"components": [], "strict": False},
        49: {
            "entries": [
                {
                    "entity": [{"entity_type": "client-id", "entity_name": CLIENT_ID}],
                    "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
                }
            ]
        },
        50: {"users": None},
        51: {
            "upsertions": [
                {"name": "mallory", "mechanism": 2, "iterations": 8192, "salt": b"s" * 16, "salted_password": b"p" * 64}
            ],
            "deletions": [{"name": "alice", "mechanism": 1}],
        },
        55: {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
        57: {  # switch Kafka Streams groups off cluster-wide
            "timeout": timeout,
            "feature_updates": [
                {"feature": "streams.version", "max_version_level": 0, "upgrade_type": 2, "allow_downgrade": True}
            ],
        },
        64: {"broker_id": 99},
        80: {
            "cluster_id": cluster_id,
            "timeout": timeout,
            "voter_id": 99,
            "voter_directory_id": uuid.uuid4(),
            "listeners": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": 1}],
        },
        81: {"cluster_id": cluster_id, "voter_id": 99, "voter_directory_id": uuid.uuid4()},
    }


def test_denied_apis_are_answered_by_the_proxy_and_change_nothing(kafka_cluster, vc_proxy, team_a_topic):
    before = physical_snapshot(kafka_cluster, team_a_topic)
    bodies = dangerous_bodies(team_a_topic, kafka_cluster.cluster_id)
    denied = {key: rule for key, rule in tenant_rules().items() if rule.action == "deny"}
    # ACLs and client quotas are the VC's own (tests/integration/test_acls.py, test_quotas.py)
    own = {29, 30, 31, 48, 49}
    assert set(bodies) - own <= set(denied), set(bodies) - own - set(denied)
    tenant = Tenant(vc_proxy.bootstrap)
    log = ProxyLog(vc_proxy.log_path)
    answered = []
    try:
        for key, rule in sorted(denied.items()):
            info = api_info(key)
            assert info is not None
            for version in range(info.min_version, info.max_version + 1):
                body = codec.encode(build(request_type(key, version), **bodies.get(key, {})))
                if tenant.is_advertised(key, version):
                    expected = codec.error_response_body(key, version, rule.error) or refusal_body(
                        key, version, rule.error, body, 0
                    )  # per item where the response has no top-level error (proxy/protocol/refusals.py)
                    assert expected is not None, f"{rule.api} v{version} is advertised but cannot carry its error"
                else:
                    expected = expected_unadvertised(key, version)
                response = tenant.ask(key, version, body)
                check_refused(log, key, version, response, expected)
                if response is not None:
                    answered.append((rule.api, version))
    finally:
        tenant.close()
    # Most denials are answered in-band; the rest (no top-level error in the response) close.
    assert {"CreateDelegationToken", "ElectLeaders", "UpdateFeatures", "AlterPartitionReassignments"} <= {
        api for api, _ in answered
    }
    assert physical_snapshot(kafka_cluster, team_a_topic) == before


def test_proxy_answers_are_not_the_brokers(kafka_cluster, vc_proxy):
    """Read-only denied requests, asked of a broker directly, succeed: the refusals above are the proxy's."""
    broker = f"{kafka_cluster.brokers[0].host}:{kafka_cluster.brokers[0].port}"
    bodies = dangerous_bodies("unused", kafka_cluster.cluster_id)
    tenant = Tenant(vc_proxy.bootstrap)
    try:
        for key in (35, 46, 48, 50):  # DescribeLogDirs, ListPartitionReassignments, DescribeClientQuotas, ...Scram
            version = min(tenant.advertised[key][1], api_info(key).max_version)  # not the header-v3 one
            direct = physical_ask(broker, key, version, **bodies[key])
            assert int(direct.error_code) == 0, direct
            response = tenant.ask(key, version, codec.encode(build(request_type(key, version), **bodies[key])))
            assert response is not None
            _, via_proxy = RawClient.decode(key, version, response)
            assert int(via_proxy.error_code) == CLUSTER_AUTHORIZATION_FAILED
            assert via_proxy == codec._empty(type(via_proxy), error_code=ErrorCode.cluster_authorization_failed)
    finally:
        tenant.close()


# -- configs of the physical cluster, inside otherwise allowed APIs ---------------------------------------


def test_broker_configs_are_neither_readable_nor_writable(kafka_cluster, vc_proxy, team_a_topic):
    before = physical_snapshot(kafka_cluster, team_a_topic)
    broker_resources = [
        (BROKER, "1", "log.cleaner.threads", "3"),
        (BROKER, "", "message.max.bytes", "1234567"),
        (BROKER_LOGGER, "1", "kafka.server.KafkaApis", "TRACE"),
        (CLIENT_METRICS, "everything", "metrics", "*"),
    ]
    tenant = Tenant(vc_proxy.bootstrap)
    physical_values = {c[1] for resource in before["configs"].values() for c in resource if c[1]}
    try:
        for key, field_name in ((32, "results"), (33, "responses"), (44, "responses")):
            for version in range(
                tenant.advertised[key][0], min(tenant.advertised[key][1], api_info(key).max_version) + 1
            ):
                resources = [
                    {
                        "resource_type": rtype,
                        "resource_name": name,
                        "configuration_keys": None,
                        "configs": [{"name": config, "value": value, "config_operation": 0}],
                    }
                    for rtype, name, config, value in broker_resources
                    if key == 44 or rtype != BROKER_LOGGER  # loggers: IncrementalAlterConfigs only
                ]
                request = build(request_type(key, version), resources=resources, include_synonyms=True)
                response = tenant.ask(key, version, codec.encode(request))
                assert response is not None, f"api {key} v{version} closed the connection"
                _, decoded = RawClient.decode(key, version, response)
                results = getattr(decoded, field_name)
                assert [(int(r.resource_type), r.resource_name) for r in results] == [
                    (r["resource_type"], r["resource_name"]) for r in resources
                ]
                for result in results:
                    assert int(result.error_code) == CLUSTER_AUTHORIZATION_FAILED, (key, version, result)
                    assert not getattr(result, "configs", ()), (key, version, result)
                leaked = [v for v in physical_values if len(v) > 3 and v.encode() in response]
                assert not leaked, (key, version, leaked)
    finally:
        tenant.close()
    assert physical_snapshot(kafka_cluster, team_a_topic) == before
