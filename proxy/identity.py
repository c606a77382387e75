"""The proxy process's own client instance id (KIP-1313) and the client id it uses upstream.

One id per process lifetime, like a client's: it is the ``service.instance.id`` of the proxy's spans
and travels on every connection the proxy opens for itself (cluster discovery, its SASL logins, the
state topic's clients). Stock brokers have no request header v3, so it travels in the client id,
which brokers show in request logs and quota metrics: ``vcproxy-<instance id>``.
"""

from __future__ import annotations

import uuid

INSTANCE_ID = uuid.uuid4()
CLIENT_ID = f"vcproxy-{INSTANCE_ID}"
