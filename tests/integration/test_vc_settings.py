"""A VC's settings at runtime (issue 19, point 3) through two real proxy replicas on one state topic:
`vcproxy virtual-clusters alter --config` as a super-admin closes a VC without ACLs, and a member is
refused on the other replica within seconds (and let in again by --delete-config); a VC admin is refused
raising its own limits; description and labels are shown by describe on either replica."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from proxy.auth.credentials import make_entry
from vcproxy_tools.process import ProxyProcess, proxy_config

from .polling import until
from .ports import free_port_block
from .tenants import assert_clean_log, login_files, scram_conf
from .test_management import vc_tool

USERS = {"admin": "admin-secret", "alice": "alice-secret", "dave": "dave-secret"}
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
FOLLOW_DEADLINE = 10.0  # seconds for the other replica to act on a change (it follows within about one)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vc-settings")


def _replica(kafka_cluster: Any, workdir: Path, name: str, state_topic: str) -> ProxyProcess:
    config = proxy_config(
        kafka_cluster.bootstrap,
        free_port_block(),
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["SCRAM-SHA-512"]},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        tenancy={
            "enabled": True,
            "state_topic": state_topic,
            "super_admins": ["User:admin"],
            "virtual_clusters": [
                {
                    "name": "team-a",
                    "principals": ["User:alice", "User:dave"],
                    "admins": ["User:dave"],
                    "topic_policy": {"max_topics": 10},  # a seeded setting
                }
            ],
        },
    )
    return ProxyProcess(config, workdir, name=name).start(timeout=120)


@pytest.fixture(scope="module")
def replicas(kafka_cluster, workdir) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    state_topic = f"__vcproxy_state_settings_{uuid.uuid4().hex[:6]}"
    first = _replica(kafka_cluster, workdir, "settings-1", state_topic)
    second = _replica(kafka_cluster, workdir, "settings-2", state_topic)
    yield first, second
    second.stop()
    first.stop()
    for process in (first, second):
        assert_clean_log(process)


@pytest.fixture(scope="module")
def logins(workdir) -> dict[str, Path]:
    return login_files(workdir, USERS)


def topic_error(admin: AdminClient, topic: str) -> int:
    """The error Metadata answers for one topic (0: described)."""
    found = admin.list_topics(topic, timeout=30).topics[topic]
    return 0 if found.error is None else found.error.code()


def test_closing_a_vc_reaches_a_member_on_the_other_replica(replicas, logins):
    first, second = replicas
    alice = AdminClient(scram_conf(second, "alice", USERS["alice"]))  # one connection throughout
    alice.create_topics([NewTopic("orders", 1, 3)], operation_timeout=30)["orders"].result(60)
    until(lambda: topic_error(alice, "orders") == 0, "alice sees her topic", FOLLOW_DEADLINE)

    code, out = vc_tool(
        first,
        logins["admin"],
        "alter",
        "--virtual-cluster",
        "team-a",
        "--config",
        "allow_everyone_if_no_acl_found=false",
    )
    assert code == 0, out
    until(
        lambda: topic_error(alice, "orders") == TOPIC_AUTHORIZATION_FAILED,
        "alice refused on replica 2",
        FOLLOW_DEADLINE,
    )

    code, out = vc_tool(
        first,
        logins["admin"],
        "alter",
        "--virtual-cluster",
        "team-a",
        "--delete-config",
        "allow_everyone_if_no_acl_found",
    )
    assert code == 0, out
    until(lambda: topic_error(alice, "orders") == 0, "the config's default (open) applies again", FOLLOW_DEADLINE)


def test_a_vc_admin_is_refused_raising_its_limits(replicas, logins):
    first, second = replicas
    code, out = vc_tool(first, logins["dave"], "alter", "--virtual-cluster", "team-a", "--config", "max_topics=100000")
    assert code == 4, out  # not authorized
    assert out["results"][0]["error_code"] == CLUSTER_AUTHORIZATION_FAILED
    assert "max_topics" in out["results"][0]["error_message"]
    code, out = vc_tool(second, logins["admin"], "describe", "--virtual-cluster", "team-a")
    assert code == 0 and out["settings"]["max_topics"] == "10", out  # the seed's, unchanged


def test_description_and_labels_are_shown_by_describe(replicas, logins):
    first, second = replicas
    code, out = vc_tool(
        first,
        logins["dave"],
        "alter",
        "--virtual-cluster",
        "team-a",
        "--config",
        "description=Payments, prod",
        "--config",
        "labels=team=payments,cost-center=42",
    )
    assert code == 0, out

    def shown() -> bool:
        code, out = vc_tool(second, logins["dave"], "describe", "--virtual-cluster", "team-a")
        assert code == 0, out
        return out["settings"].get("description") == "Payments, prod"

    until(shown, "the other replica shows the description", timeout=30)  # each try starts the tool
    code, out = vc_tool(second, logins["dave"], "describe", "--virtual-cluster", "team-a")
    assert out["settings"]["labels"] == "cost-center=42,team=payments"

    code, out = vc_tool(first, logins["dave"], "alter", "--virtual-cluster", "team-a", "--config", "labels=bad label")
    assert code == 1 and out["results"][0]["error_code"] == 40, out  # INVALID_CONFIG, naming the key
    assert out["results"][0]["error_message"].startswith("labels: ")
