"""Bounded state end to end (issue 23, point 4; docs/state.md#limits): a real proxy on the session's Kafka,
an operator setting a VC's limits with `vcproxy virtual-clusters alter --config`, and the VC's admin and
members meeting them through confluent-kafka: users beyond the VC's limit and a 30,000-character name
refused by AlterUserScramCredentials; a deleted topic's physical topic counted against the VC's topic
limit until the proxy deletes it after the grace period the operator set."""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from proxy.auth.credentials import make_entry
from vcproxy_tools.cli import main as vcproxy_main
from vcproxy_tools.process import ProxyProcess

from .polling import until
from .ports import free_port_block
from .tenants import assert_clean_log, login_files, replayed, scram_conf, tenancy_config

USERS = {"admin": "admin-secret", "dave": "dave-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("state-limits")


@pytest.fixture(scope="module")
def proxy(kafka_cluster, workdir) -> Iterator[ProxyProcess]:
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        [{"name": "team-a", "principals": ["User:alice", "User:dave"], "admins": ["User:dave"]}],
        tenancy={"super_admins": ["User:admin"], "state_check_interval_seconds": 0.5},
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["SCRAM-SHA-512"]},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
    )
    process = ProxyProcess(config, workdir, name="state-limits").start(timeout=120)
    yield process
    process.stop()
    assert_clean_log(process)
    assert "n" * 201 not in process.log_path.read_text(errors="replace")  # names are cut in log lines


@pytest.fixture(scope="module")
def logins(workdir) -> dict[str, Path]:
    return login_files(workdir, USERS)


def operator(proxy: ProxyProcess, logins: dict[str, Path], *settings: str) -> None:
    """The super-admin sets team-a's settings with `vcproxy virtual-clusters alter --config`."""
    argv = ["virtual-clusters", "alter", "--virtual-cluster", "team-a", "--bootstrap-server", proxy.bootstrap]
    argv += ["--command-config", str(logins["admin"]), "--output", "json"]
    for setting in settings:
        argv += ["--config", setting]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = vcproxy_main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    assert code == 0, out.getvalue()


def admin_as(proxy: ProxyProcess, user: str) -> AdminClient:
    return AdminClient(scram_conf(proxy, user, USERS[user]))


def outcomes(futures: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Per user (or topic): (error code, message), 0 for success."""
    out = {}
    for name, future in futures.items():
        try:
            future.result()
            out[name] = (0, "")
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            out[name] = (error.code(), error.str())
    return out


def test_a_vc_admin_creates_users_up_to_the_vcs_limit_and_no_name_beyond_its_bound(kafka_cluster, proxy, logins):
    operator(proxy, logins, "max_users=4")  # alice and dave are in team-a: two more
    dave = admin_as(proxy, "dave")
    news = [f"lim-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]
    upserts = [
        UserScramCredentialUpsertion(n, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw") for n in news
    ]
    got = outcomes(dave.alter_user_scram_credentials(upserts))
    assert [got[n][0] for n in news[:2]] == [0, 0]
    code, message = got[news[2]]
    assert code == KafkaError.POLICY_VIOLATION
    assert "max_users" in message and "is 4" in message, message

    long = "n" * 30_000  # the attack's name: refused whatever the counts
    upsert = UserScramCredentialUpsertion(long, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw")
    code, message = outcomes(dave.alter_user_scram_credentials([upsert]))[long]
    assert code == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert "max_user_name_bytes is 256" in message, message

    image = replayed(kafka_cluster, proxy)
    assert sorted(p for p, vc in image.principals.items() if vc == "team-a") == sorted(
        ["User:alice", "User:dave", *(f"User:{n}" for n in news[:2])]
    )
    assert news[2] not in image.users.users and long not in image.users.users
    # A new member logs in: the users the limit let in are real ones.
    member = AdminClient(scram_conf(proxy, news[0], "pw"))
    assert member.list_topics(timeout=30).cluster_id  # raises if the login is refused


def test_a_deleted_topic_counts_against_the_vc_until_the_proxy_deletes_it_after_the_grace(kafka_cluster, proxy, logins):
    operator(proxy, logins, "max_topics=2")
    alice = admin_as(proxy, "alice")
    suffix = uuid.uuid4().hex[:6]
    first, second, third = (f"orph-{suffix}-{i}" for i in range(3))
    assert outcomes(alice.create_topics([NewTopic(t, 1, 1) for t in (first, second)], operation_timeout=30)) == {
        first: (0, ""),
        second: (0, ""),
    }
    physical = replayed(kafka_cluster, proxy).vcs["team-a"].links[first]
    assert outcomes(alice.delete_topics([first], operation_timeout=30)) == {first: (0, "")}

    broker = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    assert physical in broker.list_topics(timeout=30).topics  # the KIP's unlink: the topic stays

    def orphaned() -> Any:
        image = replayed(kafka_cluster, proxy)
        return image if physical in image.orphans else None

    image = until(orphaned, "the orphan record")
    assert image.orphans[physical].vc == "team-a"

    code, message = outcomes(alice.create_topics([NewTopic(third, 1, 1)], operation_timeout=30))[third]
    assert code == KafkaError.POLICY_VIOLATION
    assert message == "This virtual cluster may have at most 2 topics (it has 2).", message

    operator(proxy, logins, "orphan_grace_seconds=1")
    until(lambda: physical not in broker.list_topics(timeout=30).topics, "the proxy deleting the orphan")
    until(lambda: physical not in replayed(kafka_cluster, proxy).orphans, "the orphan forgotten")

    def created() -> bool:
        return outcomes(alice.create_topics([NewTopic(third, 1, 1)], operation_timeout=30))[third][0] == 0

    until(created, "a third topic once the orphan is gone")
    assert second in alice.list_topics(timeout=30).topics  # the linked topic was never touched
    log = proxy.log_path.read_text(errors="replace")
    assert f"deleted physical topic {physical}, left by virtual cluster team-a past its grace period" in log


def test_an_operators_orphans_delete_forgets_the_orphan_and_frees_the_vcs_count(kafka_cluster, proxy, logins):
    import subprocess
    import sys

    operator(proxy, logins, "orphan_grace_seconds=null", "max_topics=null")  # the proxy deletes nothing now
    alice = admin_as(proxy, "alice")
    name = f"orph-cli-{uuid.uuid4().hex[:6]}"
    assert outcomes(alice.create_topics([NewTopic(name, 1, 1)], operation_timeout=30)) == {name: (0, "")}
    links = replayed(kafka_cluster, proxy).vcs["team-a"].links
    physical = links[name]
    operator(proxy, logins, f"max_topics={len(links)}")  # what team-a has now, this topic included
    assert outcomes(alice.delete_topics([name], operation_timeout=30)) == {name: (0, "")}
    until(lambda: physical in replayed(kafka_cluster, proxy).orphans, "the orphan record")
    spare = f"orph-spare-{uuid.uuid4().hex[:6]}"  # one link fewer, one orphan more: still at the limit
    code, message = outcomes(alice.create_topics([NewTopic(spare, 1, 1)], operation_timeout=30))[spare]
    assert code == KafkaError.POLICY_VIOLATION, message

    done = subprocess.run(
        [sys.executable, "-m", "vcproxy_tools", "state", "orphans", "--config", str(proxy.config_path), "--delete"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert physical in done.stdout
    broker = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    until(lambda: physical not in broker.list_topics(timeout=30).topics, "the orphan deleted")
    until(lambda: physical not in replayed(kafka_cluster, proxy).orphans, "the orphan forgotten")
    until(
        lambda: outcomes(alice.create_topics([NewTopic(spare, 1, 1)], operation_timeout=30))[spare][0] == 0,
        "the VC's count freed",
    )
