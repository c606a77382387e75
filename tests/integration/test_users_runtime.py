"""Users at runtime through Kafka's own `kafka-configs` (issue 19): two proxy replicas on one state topic,
a super-admin creating, changing and deleting a user, a VC admin creating a member of its VC and refused
on a foreign user; logins with confluent-kafka and raw PLAIN, on the other replica, within a second."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from proxy.auth.credentials import make_entry
from vcproxy_tools.process import ProxyProcess, proxy_config

from .hardening_attacks import login
from .polling import seconds_until
from .ports import free_port_block
from .tenants import assert_clean_log, login_files, replayed, scram_conf
from .tool_jvm import run_tool

USERS = {
    "admin": "admin-secret",  # super-admin
    "dave": "dave-secret",  # team-a's admin
    "alice": "alice-secret",  # team-a
    "bob": "bob-secret",  # team-b
}
TIMEOUT = 120.0
ENTRIES = {user: make_entry(password, 4096) for user, password in USERS.items()}  # one config for both replicas


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("users-runtime")


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
                {"name": "team-a", "principals": ["User:alice", "User:dave"], "admins": ["User:dave"]},
                {"name": "team-b", "principals": ["User:bob"]},
            ],
        },
    )
    return ProxyProcess(config, workdir, name=name).start(timeout=120)


@pytest.fixture(scope="module")
def replicas(kafka_cluster, workdir) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    state_topic = f"__vcproxy_state_users_{uuid.uuid4().hex[:6]}"
    first = _replica(kafka_cluster, workdir, "users-1", state_topic)
    second = _replica(kafka_cluster, workdir, "users-2", state_topic)
    yield first, second
    second.stop()
    first.stop()
    for process in (first, second):
        assert_clean_log(process)
        log = process.log_path.read_text(errors="replace")
        for secret in ("first-pw", "second-pw", "member-pw", *USERS.values()):
            assert secret not in log


@pytest.fixture(scope="module")
def logins(workdir) -> dict[str, Path]:
    return login_files(workdir, USERS)


def configs(proxy: ProxyProcess, login_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Kafka's `kafka-configs` through the proxy, as an operator runs it."""
    argv = ["--bootstrap-server", proxy.bootstrap, "--command-config", str(login_file), *args]
    return run_tool("kafka-configs", argv, timeout=TIMEOUT)


def set_password(proxy: ProxyProcess, login_file: Path, user: str, password: str) -> subprocess.CompletedProcess[str]:
    spec = f"SCRAM-SHA-512=[iterations=8192,password={password}]"
    return configs(proxy, login_file, "--alter", "--entity-type", "users", "--entity-name", user, "--add-config", spec)


def logs_in(proxy: ProxyProcess, user: str, password: str) -> bool:
    """A SCRAM-SHA-512 login with confluent-kafka, then a metadata request."""
    admin = AdminClient(scram_conf(proxy, user, password, **{"socket.timeout.ms": 10000}))
    try:
        admin.list_topics(timeout=10)
    except KafkaException:
        return False
    return True


def plain_logs_in(proxy: ProxyProcess, user: str, password: str) -> bool:
    try:
        login(proxy.bootstrap, user, password).close()
    except (AssertionError, OSError):
        return False
    return True


def test_a_super_admin_creates_changes_and_deletes_a_user(kafka_cluster, replicas, logins):
    one, two = replicas
    user = f"u-{uuid.uuid4().hex[:6]}"
    # Placed first (everyone is somewhere: a user in no VC is refused at login), the other replica warmed up.
    bind = configs_vc(one, logins["admin"], "alter", "--virtual-cluster", "team-a", "--add", "--user", user)
    assert bind.returncode == 0, bind
    assert plain_logs_in(two, "alice", USERS["alice"])
    done = set_password(one, logins["admin"], user, "first-pw")
    assert done.returncode == 0 and f"Completed updating config for user {user}." in done.stdout, done
    # The login works on the other replica within a second; stored as salted keys only.
    assert (
        seconds_until(lambda: plain_logs_in(two, user, "first-pw"), "the first password on the other replica", 10) < 1.0
    )
    image = replayed(kafka_cluster, one)
    (credential,) = image.users.users[user].scram.values()
    assert credential.iterations == 8192 and len(credential.salt) >= 12
    assert logs_in(two, user, "first-pw") and logs_in(one, user, "first-pw")
    described = configs(one, logins["admin"], "--describe", "--entity-type", "users", "--entity-name", user)
    assert f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-512=iterations=8192" in (
        described.stdout
    ), described

    # A new password: the session that logged in with the old one is closed, the old password refused.
    session = login(two.bootstrap, user, "first-pw")
    done = set_password(one, logins["admin"], user, "second-pw")
    assert done.returncode == 0, done
    assert session.is_closed(timeout=10)  # idle since its login: closed all the same
    assert not logs_in(two, user, "first-pw") and not plain_logs_in(one, user, "first-pw")
    assert logs_in(two, user, "second-pw")

    # Delete it: nobody logs in as it; deleting it again is Kafka's RESOURCE_NOT_FOUND.
    delete = ("--alter", "--entity-type", "users", "--entity-name", user, "--delete-config", "SCRAM-SHA-512")
    assert configs(one, logins["admin"], *delete).returncode == 0
    seconds_until(
        lambda: not plain_logs_in(two, user, "second-pw"), "the second password refused on the other replica", 10
    )
    again = configs(one, logins["admin"], *delete)
    assert again.returncode != 0
    assert "Attempt to delete a user credential that does not exist" in again.stdout + again.stderr


def test_kafkas_errors_for_bad_iterations(replicas, logins):
    one, _ = replicas
    spec = "SCRAM-SHA-512=[iterations=100000,password=x-pw]"
    done = configs(
        one, logins["admin"], "--alter", "--entity-type", "users", "--entity-name", "it", "--add-config", spec
    )
    assert done.returncode != 0 and "Too many iterations" in done.stdout + done.stderr, done


def test_a_vc_admin_creates_a_member_and_is_refused_on_a_foreign_user(kafka_cluster, replicas, logins):
    one, two = replicas
    member = f"m-{uuid.uuid4().hex[:6]}"
    done = set_password(one, logins["dave"], member, "member-pw")
    assert done.returncode == 0, done
    assert replayed(kafka_cluster, one).principals[f"User:{member}"] == "team-a"  # joined dave's VC
    seconds_until(lambda: logs_in(two, member, "member-pw"), "the member to log in on the other replica", 10)
    for foreign in ("bob", "admin"):  # another VC's member, a super-admin
        refused = set_password(one, logins["dave"], foreign, "stolen-pw")
        assert refused.returncode != 0 and "Cluster authorization failed" in refused.stdout + refused.stderr
        assert logs_in(two, foreign, USERS[foreign])
    # Describe shows dave only team-a's users.
    listing = configs(two, logins["dave"], "--describe", "--entity-type", "users")
    assert listing.returncode == 0, listing
    assert f"user-principal '{member}'" in listing.stdout and "user-principal 'alice'" in listing.stdout
    assert "user-principal 'bob'" not in listing.stdout and "user-principal 'admin'" not in listing.stdout


def configs_vc(proxy: ProxyProcess, login_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`vcproxy virtual-clusters ARGS` as an operator runs it."""
    command, *rest = args
    argv = [sys.executable, "-m", "vcproxy_tools", "virtual-clusters", command, "--bootstrap-server", proxy.bootstrap]
    argv += ["--command-config", str(login_file), *rest]
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
