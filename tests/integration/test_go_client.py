"""A third client family through the proxy: franz-go (pure Go, no librdkafka, no Java). Two tenants
(alice in team-a, bob in team-b, SCRAM-SHA-512) run the same Go program with the same topic and group
names at the same time (tests/integration/go/main.go); each sees exactly its own data and names."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from proxy.auth.credentials import make_entry
from vcproxy_tools.process import ProxyProcess

from .ports import free_port_block
from .tenants import tenancy_config

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
TENANTS = {"alice": "team-a", "bob": "team-b"}
COUNT = 200


@pytest.fixture(scope="module")
def go_proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("go-proxy")
    config = tenancy_config(
        kafka_cluster,
        free_port_block(),
        [{"name": vc, "principals": [f"User:{user}"]} for user, vc in TENANTS.items()],
        # KIP-1313 on (off by default): the versions it adds must not trip a client that knows newer Kafka.
        listeners={"security_protocol": "SASL_PLAINTEXT", "request_header_v3": True},
        credentials={"users": {user: make_entry(password, 4096) for user, password in USERS.items()}},
    )
    process = ProxyProcess(config, workdir, name="go").start(timeout=120)
    yield process
    process.stop()


def run(binary: Path, proxy: ProxyProcess, user: str, topic: str, group: str) -> dict[str, Any]:
    out = subprocess.run(
        [str(binary), proxy.bootstrap, user, USERS[user], topic, group, str(COUNT)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, f"{user}: {out.stderr}\nproxy log:\n{proxy.log_tail()}"
    return json.loads(out.stdout)


def test_franz_go_tenants_share_names_and_see_only_their_own(go_client, go_proxy):
    topic, group = f"go-orders-{uuid.uuid4().hex[:6]}", "go-group"
    with ThreadPoolExecutor(2) as pool:
        seen = dict(zip(USERS, pool.map(lambda u: run(go_client, go_proxy, u, topic, group), USERS), strict=True))
    for user, result in seen.items():
        assert sorted(result["consumed"]) == sorted(f"{user}-{i}" for i in range(COUNT))
        assert topic in result["topics"]
        assert not [t for t in result["topics"] if "." in t and len(t.partition(".")[0]) == 36], result["topics"]
        assert group in result["groups"]
    assert seen["alice"]["cluster_id"] != seen["bob"]["cluster_id"]  # each VC has its own (KIP-78)
    assert len(seen["alice"]["cluster_id"]) == 22
