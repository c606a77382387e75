"""VC-scoped ACLs for operators end to end: `vcproxy acls` and the ACL migration of `vcproxy virtual-clusters
alter`, against the real proxy in front of a real single-broker KRaft cluster that runs Kafka's
StandardAuthorizer (its own, module-scoped, with User:admin a super user too: the session's cluster has only
User:ANONYMOUS and User:vcproxy as super users).

The broker's super users are the proxy's upstream principal (User:vcproxy), the test's admin (User:admin,
who runs Kafka's kafka-acls against the broker directly) and User:ANONYMOUS (the brokers' own PLAINTEXT
listener: inter-broker and controller traffic).

At the proxy: admin is the super admin (in kafka-cluster); dave administers team-a, erin team-b (each in
the VC it administers: everyone is somewhere); alice is a member of team-a; jane and kim are the users
migrated into team-a.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.auth.credentials import make_entry
from vcproxy_tools.kafka.cluster import ClusterInfo, start_cluster, stop_cluster
from vcproxy_tools.process import ProxyProcess, proxy_config

from .ports import free_kafka_base_port, free_port_block
from .tenants import assert_clean_log, login_files
from .tool_jvm import run_tool

USERS = {
    "admin": "admin-secret",
    "dave": "dave-secret",
    "erin": "erin-secret",
    "alice": "alice-secret",
    "jane": "jane-secret",
    "kim": "kim-secret",
}
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("acl-admin")


@pytest.fixture(scope="module")
def authz_cluster(tmp_path_factory) -> Iterator[ClusterInfo]:
    """One broker (and controller) with StandardAuthorizer, a small heap, and a SASL listener."""
    info = start_cluster(
        tmp_path_factory.mktemp("acl-admin-kafka"),
        brokers=1,
        base_port=free_kafka_base_port(brokers=1, sasl=True),
        sasl=True,
        heap="384m",
        timeout=240,
        extra_properties={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS;User:vcproxy;User:admin",
        },
    )
    try:
        yield info
    finally:
        stop_cluster(info.dir)


@pytest.fixture(scope="module")
def proxy(authz_cluster, workdir) -> Iterator[ProxyProcess]:
    assert authz_cluster.sasl_bootstrap, "the launcher gave no SASL listener"
    config = proxy_config(
        authz_cluster.sasl_bootstrap,
        free_port_block(),
        upstream={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "vcproxy",
            "sasl_password": "vcproxy-secret",
        },
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["PLAIN", "SCRAM-SHA-512"]},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
        tenancy={
            "enabled": True,
            "state_topic": f"__vcproxy_state_acladmin_{uuid.uuid4().hex[:6]}",
            "super_admins": ["User:admin"],
            "virtual_clusters": [
                {"name": "team-a", "principals": ["User:alice", "User:dave"], "admins": ["User:dave"]},
                {"name": "team-b", "principals": ["User:erin"], "admins": ["User:erin"]},
            ],
        },
    )
    process = ProxyProcess(config, workdir, name="acl-admin").start(timeout=120)
    yield process
    process.stop()
    assert_clean_log(process)


@pytest.fixture(scope="module")
def logins(workdir) -> dict[str, Path]:
    return login_files(workdir, USERS)


def vcproxy(proxy: ProxyProcess, login: Path, *args: str) -> tuple[int, Any]:
    """`vcproxy ARGS --output json` as an operator runs it, stdin not a terminal: (exit code, parsed output)."""
    argv = [sys.executable, "-m", "vcproxy_tools", *args, "--bootstrap-server", proxy.bootstrap]
    argv += ["--command-config", str(login), "--output", "json"]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL, env=os.environ
    )
    assert done.returncode in (0, 1, 4), f"exit {done.returncode}: {done.stdout}\n{done.stderr}"
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None


def ok(proxy: ProxyProcess, login: Path, *args: str) -> Any:
    code, out = vcproxy(proxy, login, *args)
    assert code == 0, out
    return out


def listed(proxy: ProxyProcess, login: Path, vc: str, *args: str) -> set[tuple[str, str, str, str, str, str, str]]:
    """(vc, type, name, pattern, principal, operation, permission) of `vcproxy acls --list`."""
    out = ok(proxy, login, "acls", "--list", "--virtual-cluster", vc, *args)
    return {
        (
            a["virtual_cluster"],
            a["resource_type"],
            a["name"],
            a["pattern"],
            a["principal"],
            a["operation"],
            a["permission"],
        )
        for a in out["acls"]
    }


def broker_acls(cluster: ClusterInfo, logins: dict[str, Path], *args: str) -> str:
    """Kafka's kafka-acls against the broker itself, as its super user admin."""
    done = run_tool(
        "kafka-acls",
        ["--bootstrap-server", cluster.sasl_bootstrap or "", "--command-config", str(logins["admin"]), *args],
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_super_admin_adds_lists_and_removes_in_two_vcs(proxy, logins):
    admin = logins["admin"]
    added = ok(
        proxy, admin, "acls", "--add", "--virtual-cluster", "team-a",
        "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe", "--topic", "orders",
    )  # fmt: skip
    assert [r["error_code"] for r in added["results"]] == [0, 0]
    ok(
        proxy, admin, "acls", "--add", "--virtual-cluster", "team-b",
        "--allow-principal", "User:bob", "--producer", "--topic", "ev-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    team_a = {("team-a", "TOPIC", "orders", "LITERAL", "User:alice", op, "ALLOW") for op in ("READ", "DESCRIBE")}
    team_b = {("team-b", "TOPIC", "ev-", "PREFIXED", "User:bob", op, "ALLOW") for op in ("WRITE", "DESCRIBE", "CREATE")}
    assert listed(proxy, admin, "team-a") == team_a  # nothing of team-b's
    assert listed(proxy, admin, "team-b") == team_b  # nothing of team-a's
    assert listed(proxy, admin, "team-", "--virtual-cluster-pattern-type", "prefixed") == team_a | team_b
    # --remove asks first; without a terminal it needs --force and reads nothing
    code = subprocess.run(
        [sys.executable, "-m", "vcproxy_tools", "acls", "--remove", "--virtual-cluster", "team-a", "--topic", "orders",
         "--bootstrap-server", proxy.bootstrap, "--command-config", str(admin)],
        capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
    ).returncode  # fmt: skip
    assert code == 2 and listed(proxy, admin, "team-a") == team_a
    removed = ok(proxy, admin, "acls", "--remove", "--force", "--virtual-cluster", "team-a", "--topic", "orders")
    assert {(a["virtual_cluster"], a["operation"]) for a in removed["removed"]} == {
        ("team-a", "READ"),
        ("team-a", "DESCRIBE"),
    }
    assert listed(proxy, admin, "team-a") == set()
    assert listed(proxy, admin, "team-b") == team_b
    ok(proxy, admin, "acls", "--remove", "--force", "--virtual-cluster", "team-b", "--topic", "ev-",
       "--resource-pattern-type", "prefixed")  # fmt: skip
    assert listed(proxy, admin, "team-b") == set()


def test_a_vc_admin_manages_its_own_vc_and_a_member_nothing(proxy, logins):
    dave = logins["dave"]
    ok(proxy, dave, "acls", "--add", "--virtual-cluster", "team-a", "--allow-principal", "User:alice",
       "--consumer", "--topic", "audit", "--group", "auditors")  # fmt: skip
    mine = listed(proxy, dave, "team-a", "--principal", "User:alice")
    assert {(t, n, op) for _, t, n, _, _, op, _ in mine} == {
        ("TOPIC", "audit", "READ"),
        ("TOPIC", "audit", "DESCRIBE"),
        ("GROUP", "auditors", "READ"),
    }
    # a prefix reaches only the VCs dave administers; team-b is not his
    assert listed(proxy, dave, "team-", "--virtual-cluster-pattern-type", "prefixed") == mine
    code, out = vcproxy(proxy, dave, "acls", "--list", "--virtual-cluster", "team-b")
    assert code == 4 and out["errors"][0]["error_code"] == 31
    code, out = vcproxy(
        proxy, dave, "acls", "--add", "--virtual-cluster", "team-b", "--allow-principal", "User:x", "--topic", "t"
    )
    assert code == 4 and out["results"][0]["error_code"] == 31
    # alice is a member of team-a, no admin: not offered the RPCs, refused if she sends them anyway
    code, _ = vcproxy(proxy, logins["alice"], "acls", "--list", "--virtual-cluster", "team-a")
    assert code == 4
    code, _ = vcproxy(
        proxy, logins["alice"], "acls", "--add", "--virtual-cluster", "team-a",
        "--allow-principal", "User:alice", "--operation", "All", "--topic", "audit",
    )  # fmt: skip
    assert code == 4
    assert listed(proxy, logins["admin"], "team-a", "--principal", "User:alice") == mine
    ok(proxy, dave, "acls", "--remove", "--force", "--virtual-cluster", "team-a", "--allow-principal", "User:alice",
       "--consumer", "--topic", "audit", "--group", "auditors")  # fmt: skip
    assert listed(proxy, dave, "team-a") == set()


@pytest.fixture(scope="module")
def team_a_links(proxy, logins) -> None:
    admin = logins["admin"]
    for args in (
        ("--topic", "teamA.orders", "--link", "orders"),
        ("--topic", "teamA.payments", "--link", "payments"),
        (
            "--group",
            "orders-app",
        ),
    ):
        ok(proxy, admin, "virtual-clusters", "alter", "--virtual-cluster", "team-a", "--add", *args)


def test_migration_from_the_brokers_own_acls(authz_cluster, proxy, logins, team_a_links):
    # The broker's ACLs, made with Kafka's own tool: jane's (and bob's, which stay where they are).
    broker_acls(
        authz_cluster, logins,
        "--add", "--allow-principal", "User:jane", "--allow-principal", "User:bob", "--operation", "Read",
        "--topic", "teamA.orders", "--topic", "teamB.stock", "--group", "orders-app", "--group", "stranger",
    )  # fmt: skip
    broker_acls(
        authz_cluster, logins,
        "--add", "--allow-principal", "User:jane", "--operation", "Write", "--topic", "teamA.",
        "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    out = ok(
        proxy, logins["admin"], "virtual-clusters", "alter", "--virtual-cluster", "team-a", "--add", "--user", "jane",
        "--migrate-acls-from", "kafka-cluster", "--remove-old-acls-from", "kafka-cluster",
    )  # fmt: skip
    assert out["user_added"] is True and out["errors"] == []
    copied = {(c["resource_type"], c["name"], c["pattern"], c["operation"]) for c in out["copied"]}
    assert copied == {
        ("TOPIC", "orders", "LITERAL", "READ"),  # teamA.orders, linked as orders
        ("TOPIC", "orders", "PREFIXED", "WRITE"),  # teamA. on the links whose topics it matches
        ("TOPIC", "payments", "PREFIXED", "WRITE"),
        ("GROUP", "orders-app", "LITERAL", "READ"),  # assigned to team-a: the physical name
    }
    assert {(s["resource_type"], s["name"]) for s in out["skipped"]} == {
        ("TOPIC", "teamB.stock"),
        ("GROUP", "stranger"),
    }
    assert {(r["resource_type"], r["name"], r["pattern"]) for r in out["removed"]} == {
        ("TOPIC", "teamA.orders", "LITERAL"),
        ("TOPIC", "teamA.", "PREFIXED"),
        ("GROUP", "orders-app", "LITERAL"),
    }
    # The VC's side: jane's ACLs in team-a's names.
    in_vc = listed(proxy, logins["admin"], "team-a", "--principal", "User:jane")
    assert {(t, n, p, op) for _, t, n, p, _, op, _ in in_vc} == copied
    # The broker's side, with Kafka's tool against the broker itself: what was migrated is gone, the
    # rest (jane's skipped ACLs, bob's) is still there.
    jane = broker_acls(authz_cluster, logins, "--list", "--principal", "User:jane")
    assert "teamB.stock" in jane and "stranger" in jane
    assert "teamA.orders" not in jane and "name=teamA.," not in jane and "orders-app" not in jane, jane
    bob = broker_acls(authz_cluster, logins, "--list", "--principal", "User:bob")
    assert all(name in bob for name in ("teamA.orders", "teamB.stock", "orders-app", "stranger")), bob


def test_migration_from_another_vc(proxy, logins, team_a_links):
    admin = logins["admin"]
    ok(proxy, admin, "acls", "--add", "--virtual-cluster", "team-b", "--allow-principal", "User:kim",
       "--allow-principal", "User:erin", "--operation", "Read", "--topic", "events")  # fmt: skip
    ok(proxy, admin, "acls", "--add", "--virtual-cluster", "team-b", "--allow-principal", "User:kim",
       "--operation", "Write", "--topic", "ev", "--resource-pattern-type", "prefixed")  # fmt: skip
    # dave administers team-a but not team-b: he may not read (or empty) team-b's ACLs; nothing changes
    code, out = vcproxy(
        proxy, logins["dave"], "virtual-clusters", "alter", "--virtual-cluster", "team-a", "--add", "--user", "kim",
        "--copy-acls-from", "team-b", "--remove-old-acls-from", "team-b",
    )  # fmt: skip
    assert code == 4 and out["user_added"] is None and not out["copied"], out
    before = listed(proxy, admin, "team-b")
    assert len(before) == 3
    out = ok(
        proxy, admin, "virtual-clusters", "alter", "--virtual-cluster", "team-a", "--add", "--user", "kim",
        "--copy-acls-from", "team-b", "--remove-old-acls-from", "team-b",
    )  # fmt: skip
    assert out["user_added"] is True and out["skipped"] == [] and len(out["copied"]) == 2 and len(out["removed"]) == 2
    kim = {(t, n, p, op) for _, t, n, p, _, op, _ in listed(proxy, admin, "team-a", "--principal", "User:kim")}
    assert kim == {("TOPIC", "events", "LITERAL", "READ"), ("TOPIC", "ev", "PREFIXED", "WRITE")}
    assert listed(proxy, admin, "team-b") == {("team-b", "TOPIC", "events", "LITERAL", "User:erin", "READ", "ALLOW")}
    # Run again: kim is in team-a already (not added twice), nothing left to copy or remove.
    again = ok(
        proxy, admin, "virtual-clusters", "alter", "--virtual-cluster", "team-a", "--add", "--user", "kim",
        "--copy-acls-from", "team-b", "--remove-old-acls-from", "team-b",
    )  # fmt: skip
    assert again["user_added"] == "already" and again["copied"] == [] and again["removed"] == []
