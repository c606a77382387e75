"""What the tenancy tests share: a proxy config with virtual clusters on a fresh state topic, and
the state topic replayed independently of the proxy (the oracle for what each VC owns)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from proxy.auth.credentials import make_entry
from proxy.state.store import StateStore
from proxy.tenancy.model import TenancyImage
from proxy.tenancy.names import DESCRIBED_INTERNAL
from vcproxy_tools.demo import java_client_properties
from vcproxy_tools.process import ProxyProcess, proxy_config


def own(topics: Iterable[str]) -> set[str]:
    """A VC's listing without Kafka's internal topics, which every VC describes (never reads) as a cluster
    does to a principal with DESCRIBE on them."""
    return set(topics) - DESCRIBED_INTERNAL


def by_client_id(tenants: Iterable[str], *suffixes: str) -> list[dict[str, Any]]:
    """VCs bound by client id: tenant T owns client ids `T-<suffix>` (default `T-app`)."""
    return [{"name": t, "client_ids": [f"{t}-{s}" for s in suffixes or ("app",)]} for t in tenants]


def tenancy_config(kafka_cluster: Any, port: int, virtual_clusters: list[dict[str, Any]], **sections: Any) -> dict:
    """A proxy config with tenancy on, these VCs, and a state topic of its own."""
    tenancy = {"enabled": True, "state_topic": f"__vcproxy_state_{uuid.uuid4().hex[:6]}"}
    return proxy_config(
        kafka_cluster.bootstrap,
        port,
        tenancy={**tenancy, "virtual_clusters": virtual_clusters, **sections.pop("tenancy", {})},
        **sections,
    )


def replayed(kafka_cluster: Any, proxy: ProxyProcess) -> TenancyImage:
    image = TenancyImage()
    StateStore({"bootstrap.servers": kafka_cluster.bootstrap}, proxy.config["tenancy"]["state_topic"]).replay(image)
    return image


ALICE_AND_BOB = {"alice": "alice-secret", "bob": "bob-secret"}


def sasl_tenants_config(
    kafka_cluster: Any,
    port: int,
    users: dict[str, str] = ALICE_AND_BOB,
    mechanisms: tuple[str, ...] = ("PLAIN",),
    **sections: Any,
) -> dict:
    """A SASL_PLAINTEXT tenancy proxy where each user has a VC of its own: alice in team-a, bob in team-b."""
    vcs = {"alice": "team-a", "bob": "team-b"}
    return tenancy_config(
        kafka_cluster,
        port,
        [{"name": vcs.get(user, f"team-{user}"), "principals": [f"User:{user}"]} for user in users],
        listeners={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": list(mechanisms)},
        credentials={"users": {user: make_entry(password, 4096) for user, password in users.items()}},
        **sections,
    )


def tap_bytes(proxy: ProxyProcess, vc: str, timeout: float = 120) -> bytes:
    """Every byte the proxy sent to `vc`'s connections, read once none is open any more: a connection's
    tap file is written out and named after its VC only when the proxy has seen it close."""
    tap = Path(proxy.config["debug"]["tap_dir"])
    deadline = time.monotonic() + timeout
    while open_ := list(tap.glob("*.open")):
        assert time.monotonic() < deadline, f"connections still open at the proxy: {[p.name for p in open_]}"
        time.sleep(0.1)
    return b"".join(p.read_bytes() for p in sorted(tap.glob(f"*.{vc}.bin")))


def login_files(workdir: Path, users: dict[str, str]) -> dict[str, Path]:
    """Per user, a --command-config file as Kafka's tools take it (SASL_PLAINTEXT, SCRAM-SHA-512)."""
    paths = {}
    for user, password in users.items():
        paths[user] = workdir / f"{user}.properties"
        paths[user].write_text(java_client_properties(user, password))
    return paths


def scram_conf(proxy: ProxyProcess, user: str, password: str, **extra: Any) -> dict[str, Any]:
    """confluent-kafka settings for `user` through the proxy (SASL_PLAINTEXT, SCRAM-SHA-512)."""
    return {
        "bootstrap.servers": proxy.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


def assert_clean_log(process: ProxyProcess) -> None:
    """A proxy that ran a test module logged no traceback and no ERROR."""
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, process.log_tail(lines=60)
