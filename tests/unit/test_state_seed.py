"""Seeding from YAML, the state config section, record encoding and the dump view (no Kafka)."""

from __future__ import annotations

import json
import logging

import pytest

from proxy.acl.model import Operation
from proxy.config import ConfigError, VirtualClusterSeedConfig, parse_config
from proxy.state.seed import seed_records
from proxy.state.service import TenancyService
from proxy.state.store import StateStore, StateStoreError, decode, encode_value
from proxy.tenancy.model import TenancyError, TenancyImage, link_record, principal_record, vc_delete, vc_record
from vcproxy_tools.state import image_to_dict


def _seed(*vcs: dict) -> list[VirtualClusterSeedConfig]:
    return [VirtualClusterSeedConfig(**vc) for vc in vcs]


def _apply(image: TenancyImage, records) -> TenancyImage:
    for key, value in records:
        image.apply(key, value)
    return image


SEED = _seed(
    {"name": "team-a", "principals": ["User:alice"], "client_ids": ["app-a"]},
    {"name": "team-b", "principals": ["User:bob", "User:carol"]},
)


def test_seed_creates_vcs_before_bindings_and_is_idempotent():
    image = TenancyImage()
    records = seed_records(image, SEED)
    kinds = [json.loads(key)[0] for key, _ in records]
    assert kinds == ["vc", "vc", "principal", "client", "seeded", "principal", "principal", "seeded"]
    _apply(image, records)
    assert image.vc_for("User:alice", None).name == "team-a"
    assert image.vc_for(None, "app-a").name == "team-a"
    assert image.vc_for("User:carol").name == "team-b"
    assert seed_records(image, SEED) == []  # a restart with the same YAML writes nothing


def test_existing_vc_keeps_its_ids():
    image = _apply(TenancyImage(), [vc_record("team-a", "11111111-1111-1111-1111-111111111111", "cid")])
    records = seed_records(image, SEED[:1])
    assert all(json.loads(key)[0] != "vc" for key, _ in records)
    _apply(image, records)
    assert (image.vcs["team-a"].id, image.vcs["team-a"].cluster_id) == ("11111111-1111-1111-1111-111111111111", "cid")


def test_seed_entries_apply_once_and_never_undo_runtime_changes():
    image = _apply(TenancyImage(), seed_records(TenancyImage(), SEED))
    _apply(image, [principal_record("User:dave", "team-a"), link_record("team-a", "orders", "u.orders")])
    # At runtime: alice is unbound, carol moves to team-a, and team-b gets an admin.
    _apply(image, [principal_record("User:alice", None), principal_record("User:carol", "team-a")])
    assert seed_records(image, SEED) == []  # a restart re-applies nothing
    assert image.vc_for("User:alice") is None and image.vc_for("User:carol").name == "team-a"
    # An entry new to the seed applies once, unless the runtime has bound it elsewhere since.
    moved = _seed(
        {"name": "team-a", "principals": ["User:alice"], "admins": ["User:ops"]},
        {"name": "team-b", "principals": ["User:bob", "User:carol", "User:erin"], "client_ids": ["app-a"]},
    )
    records = seed_records(image, moved)
    _apply(image, records)
    from proxy.tenancy.rights import Rights

    assert Rights(image).holders(Operation.ALTER_VIRTUAL_CLUSTER, "team-a") == {"User:ops"}  # admins are ACLs
    assert image.vc_for("User:erin").name == "team-b"
    assert image.vc_for(None, "app-a").name == "team-a"  # bound to team-a already: left there
    assert seed_records(image, moved) == []
    assert image.vc_for("User:dave").name == "team-a"  # not in the seed: left alone
    assert image.vcs["team-a"].links == {"orders": "u.orders"}
    assert seed_records(image, []) == []  # an empty seed deletes nothing
    # A seeded VC deleted at runtime stays deleted.
    _apply(image, [vc_delete("team-b")])
    assert seed_records(image, moved) == []


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (_seed({"name": "a"}, {"name": "a"}), "seeded twice"),
        (_seed({"name": "a", "principals": ["User:x"]}, {"name": "b", "principals": ["User:x"]}), "both 'a' and 'b'"),
        (_seed({"name": "a", "client_ids": ["c"]}, {"name": "b", "client_ids": ["c"]}), "client id 'c'"),
    ],
)
def test_invalid_seed(seed, message):
    with pytest.raises(TenancyError, match=message):
        seed_records(TenancyImage(), seed)


def test_invalid_vc_name_is_refused_even_without_config_validation():
    class Raw:
        name, principals, client_ids = "kafka-cluster", [], []

    with pytest.raises(TenancyError, match="reserved"):
        seed_records(TenancyImage(), [Raw()])


def _config(tenancy: dict):
    return parse_config({"upstream": {"bootstrap_servers": ["k:9092"]}, "tenancy": tenancy}, "f.yaml")


def test_tenancy_config_defaults_and_values():
    tc = parse_config({"upstream": {"bootstrap_servers": ["k:9092"]}}).tenancy
    assert (tc.enabled, tc.state_topic, tc.state_replication_factor, tc.virtual_clusters) == (
        False,
        "__vcproxy_state",
        None,
        [],
    )
    tc = _config({"enabled": True, "state_topic": "s", "state_replication_factor": 1, "virtual_clusters": []}).tenancy
    assert (tc.enabled, tc.state_topic, tc.state_replication_factor) == (True, "s", 1)


@pytest.mark.parametrize(
    ("tenancy", "expected"),
    [
        (
            {"virtual_clusters": [{"name": "a", "principals": ["User:x"]}, {"name": "b", "principals": ["User:x"]}]},
            "f.yaml: tenancy: Value error, virtual_clusters.1.principals.0: 'User:x' is already bound at "
            "virtual_clusters.0.principals.0",
        ),
        (
            {"virtual_clusters": [{"name": "a", "client_ids": ["c", "c"]}]},
            "virtual_clusters.0.client_ids.1: 'c' is already bound at virtual_clusters.0.client_ids.0",
        ),
        (
            {"virtual_clusters": [{"name": "a"}, {"name": "a"}]},
            "virtual_clusters.1.name: virtual cluster 'a' is already defined at virtual_clusters.0",
        ),
        ({"virtual_clusters": [{"name": "kafka-cluster"}]}, "f.yaml: tenancy.virtual_clusters.0.name: Value error"),
        ({"virtual_clusters": [{"name": "a b"}]}, "tenancy.virtual_clusters.0.name"),
        ({"virtual_clusters": [{"name": "a", "principals": ["alice"]}]}, "must be TYPE:NAME"),
        ({"virtual_clusters": [{"name": "a", "topics": ["t"]}]}, "tenancy.virtual_clusters.0.topics: unknown key"),
        ({"state_topic": "bad topic"}, "f.yaml: tenancy.state_topic:"),
        ({"state_replication_factor": 0}, "f.yaml: tenancy.state_replication_factor:"),
        ({"enabeld": True}, "f.yaml: tenancy.enabeld: unknown key"),
    ],
)
def test_invalid_tenancy_config_names_the_path(tenancy, expected):
    with pytest.raises(ConfigError) as info:
        _config(tenancy)
    assert expected in str(info.value)


def test_record_encoding_round_trip():
    key, value = vc_record("a")
    assert decode(key.encode(), encode_value(value)) == (key, value)
    assert decode(b'["principal","User:x"]', None) == ('["principal","User:x"]', None)
    for bad_key, bad_value in [(None, b"{}"), (b"not json", b"{}"), (b'"x"', b"{}"), (b"[]", None), (b'["a"]', b"[1]")]:
        with pytest.raises(ValueError):
            decode(bad_key, bad_value)


def test_image_to_dict():
    image = _apply(
        TenancyImage(),
        [
            vc_record("a", "11111111-1111-1111-1111-111111111111", "cid-a"),
            principal_record("User:x", "a"),
            principal_record("User:y", "gone"),
            link_record("a", "orders", "u.orders"),
        ],
    )
    assert image_to_dict(image) == {
        "virtual_clusters": {
            "a": {
                "id": "11111111-1111-1111-1111-111111111111",
                "cluster_id": "cid-a",
                "principals": ["User:x"],
                "client_ids": [],
                "links": {"orders": "u.orders"},
            }
        },
        "topic_ids": {},
        "unbound": {"principals": {"User:y": "gone"}},
    }


def test_service_queues_a_repair_when_a_vc_is_created_twice(caplog):
    service = TenancyService(StateStore({"bootstrap.servers": "unused:9092"}, "t"))
    first, second = vc_record("a"), vc_record("a")
    with caplog.at_level(logging.INFO, logger="proxy.state.service"):
        service._apply(*first)
        service._apply(*first)  # the same record again (replayed or written back): no repair
        service._apply(*second)
        service._apply(*second)  # repaired once per VC and id: replicas never loop
        service._apply('["principal","User:x"]', {"wrong": "field"})  # skipped, not raised
    assert service._repairs == [first]
    assert service.image.vcs["a"].id == first[1]["id"]
    assert "virtual cluster a cluster id " + first[1]["cluster_id"] in caplog.text
    assert "created twice" in caplog.text
    assert "skipping record" in caplog.text


def test_state_clients_connect_like_the_proxy(tmp_path):
    from proxy.identity import INSTANCE_ID
    from proxy.state.service import client_config

    own = f"vcproxy-{INSTANCE_ID}-state"  # the proxy's instance id travels in its client id (KIP-1313)
    plain = parse_config({"upstream": {"bootstrap_servers": ["k1:9092", "k2:9092"]}})
    assert client_config(plain) == {
        "bootstrap.servers": "k1:9092,k2:9092",
        "client.id": own,
        "security.protocol": "plaintext",
    }
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    sasl = parse_config(
        {
            "upstream": {
                "bootstrap_servers": ["k:9093"],
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "vcproxy",
                "sasl_password_file": str(secret),
            }
        }
    )
    assert client_config(sasl) == {
        "bootstrap.servers": "k:9093",
        "client.id": own,
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "vcproxy",
        "sasl.password": "s3cret",
        "ssl.ca.location": "probe",
        "ssl.endpoint.identification.algorithm": "https",
    }


class _FakeStore:
    topic = "t"

    def __init__(self) -> None:
        self.written: list = []

    def write(self, records, timeout):
        start = len(self.written)
        self.written.extend(records)
        return list(range(start, len(self.written)))

    def close(self) -> None:
        pass


async def test_service_write_returns_once_the_follower_applied_it():
    import trio

    store = _FakeStore()
    service = TenancyService(store)  # type: ignore[arg-type]
    await service.write([vc_record("direct")])  # not following: applied at once
    assert "direct" in service.image.vcs

    service._thread = object()  # type: ignore[assignment]  # "following": write() waits for the log
    done = trio.Event()

    async def write() -> None:
        await service.write([vc_record("followed")])
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        # The store's write runs in a worker thread: wait until write() is waiting for the follower.
        with trio.fail_after(60):
            while not service._waiters:
                await trio.sleep(0.001)
        assert not done.is_set() and "followed" not in service.image.vcs
        for offset, record in enumerate(store.written):
            service._from_log([record], offset + 1)  # applied and advanced in one call, as the follower does
        with trio.fail_after(60):
            await done.wait()
        assert "followed" in service.image.vcs

    with pytest.raises(StateStoreError, match=r"not applied back within 0\.05 s"):
        await service.write([vc_record("lagging")], timeout=0.05)
