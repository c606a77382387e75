"""Tenant-side attacks for tests/integration/test_tenant_hardening.py, run as processes of their own
(`python -m tests.integration.hardening_attacks NAME ...`) so their CPU and GIL never count against
the tenant whose latency the test measures. Each prints one JSON line with what it saw."""

from __future__ import annotations

import argparse
import datetime
import json
import time
import uuid
from collections import Counter
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from proxy.protocol import codec

from .rawclient import RawClient

HEARTBEAT, FIND_COORDINATOR = 68, 10


def login(bootstrap: str, user: str, password: str) -> RawClient:
    client = RawClient(bootstrap, timeout=30)
    client.request(18, 3, 0, ApiVersionsRequest(client_software_name="raw", client_software_version="1"))
    _, handshake = client.request(17, 1, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert int(handshake.error_code) == 0
    _, auth = client.request(36, 2, 2, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()))
    assert int(auth.error_code) == 0, auth.error_message
    return client


def coordinator(bootstrap: str, user: str, password: str, group: str) -> str:
    """host:port (the proxy's port for that broker) of `group`'s coordinator."""
    with login(bootstrap, user, password) as client:
        deadline = time.monotonic() + 60
        while True:
            _, found = client.request(
                FIND_COORDINATOR, 6, 3, codec._empty(FindCoordinatorRequest, key_type=0, coordinator_keys=(group,))
            )
            (entry,) = found.coordinators
            if int(entry.error_code) == 0:
                return f"{entry.host}:{entry.port}"
            assert time.monotonic() < deadline, f"no coordinator for {group}: {entry.error_code}"
            time.sleep(0.2)


def heartbeat(group: str, member: str, epoch: int, regex: str | None) -> ConsumerGroupHeartbeatRequest:
    return codec._empty(
        ConsumerGroupHeartbeatRequest,
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        rebalance_timeout=datetime.timedelta(seconds=30),
        subscribed_topic_regex=regex,
        topic_partitions=() if epoch == 0 else None,
    )


def regex_heartbeats(bootstrap: str, user: str, password: str, regex: str, seconds: float) -> dict[str, Any]:
    """One KIP-848 member sending `regex` (and variants of it, so no cache can help) for `seconds`."""
    group = f"regex-{uuid.uuid4().hex[:8]}"
    client = login(coordinator(bootstrap, user, password, group), user, password)
    member, epoch = str(uuid.uuid4()), 0
    codes: Counter[int] = Counter()
    slowest = 0.0
    cid, end = 10, time.monotonic() + seconds
    while time.monotonic() < end:
        cid += 1
        pattern = regex if cid % 2 else f"{regex}{cid}"
        started = time.perf_counter()
        _, response = client.request(HEARTBEAT, 1, cid, heartbeat(group, member, epoch, pattern))
        slowest = max(slowest, time.perf_counter() - started)
        codes[int(response.error_code)] += 1
        if int(response.error_code) == 0:
            epoch = int(response.member_epoch)
    client.request(HEARTBEAT, 1, cid + 1, heartbeat(group, member, -1, None))  # leave
    client.close()
    return {"heartbeats": sum(codes.values()), "codes": dict(codes), "slowest": slowest, "epoch": epoch}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("attack", choices=["regex"])
    parser.add_argument("bootstrap")
    parser.add_argument("user")
    parser.add_argument("password")
    parser.add_argument("regex")
    parser.add_argument("seconds", type=float)
    args = parser.parse_args()
    print(json.dumps(regex_heartbeats(args.bootstrap, args.user, args.password, args.regex, args.seconds)))


if __name__ == "__main__":
    main()
