"""What the stages of one connection share: who the client is, and what was agreed with it."""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from .. import apiversions


@dataclass
class ConnectionState:
    principal: str | None = None  # without SASL: User:ANONYMOUS or the mTLS principal; else set at login
    client_id: str | None = None  # the first request's: KIP-1313 v3 requests may omit it later
    # The client instance: the client's own id from request header v3, else the one its KIP-714
    # telemetry requests carry (or the broker assigned), else one the proxy gives the connection.
    client_instance_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    client_instance_id_source: str = "proxy"
    header_instance_id: bytes | None = None  # set by the first request with header v3
    supported: apiversions.VersionTable = field(default_factory=dict)  # what the proxy can handle here
    versions: apiversions.VersionTable = field(default_factory=dict)  # agreed with the client (ApiVersions)
    v3_keys: set[int] | None = None  # APIs whose header-v3 version ApiVersions offered
    vc: Any = None  # the principal's virtual cluster, bound at its first request after login
    place: str | None = None  # where the binding put it: a VC's name, or "kafka-cluster" (vc stays None)
    relayed: bool = False  # its SASL exchange went to the broker: the broker judges it, the proxy relays
    engine: Any = None  # the tenancy engine of `vc`
    image: Any = None  # the tenancy image (proxy.tenancy.model.TenancyImage) when VCs are served, else None
    authenticator: Any = None  # the SASL exchange (proxy/auth/sasl.py), if the listener has one
    # The upstream broker this connection reaches: its listener's node id, or for a bootstrap connection the
    # key the shell sets once connected (proxy/net/discovery.py, BrokerRegistry.broker_key); None until known.
    # Fetch sessions are per broker.
    broker: Hashable | None = None
    # The topic ids this VC connection's requests named and the session let through unchanged, per API, while the
    # state is as it was (vcproxy_native.Grant: what the forwarder may serve for it; proxy/core/forward_table.py).
    grant: Any = None
