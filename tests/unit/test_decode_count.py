"""One decode per message (issue 26): how often the session decodes, validates and rebuilds a message.

Each API a client uses is sent through the sans-I/O session as three kinds of client: one with no tenancy
(a plain passthrough proxy), a tenant (a principal bound to a virtual cluster) and a member of
kafka-cluster whom the proxy authorizes with kafka-cluster's ACLs. For the request and then for its
response the test counts body decodes (codec.decode), validation walks (walker.validate, which every
decode runs first) and frame rebuilds (a body encoded, a frame spliced, or split pieces joined into one
buffer). Each must be at most one per message.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType
from proxy.core import exchange
from proxy.core.session import Action, ProxySession
from proxy.protocol import codec, splice, walker
from proxy.protocol.apikey import ApiKey
from proxy.protocol.apis import request_type, response_type
from proxy.tenancy.guard import StateTopicGuard
from proxy.tenancy.model import principal_record

from .test_session import LAYOUT as PLAIN_LAYOUT
from .test_tenant_rewrite import TOPIC_ID, make_image, sample, tenant_session
from .wire import request_frame, response_frame

# The APIs a client's ordinary work goes through, at the newest version a tenant may use.
APIS = {
    ApiKey.PRODUCE: 13,
    ApiKey.FETCH: 18,
    ApiKey.LIST_OFFSETS: 10,
    ApiKey.METADATA: 13,
    ApiKey.OFFSET_COMMIT: 9,
    ApiKey.OFFSET_FETCH: 9,
    ApiKey.FIND_COORDINATOR: 6,
    ApiKey.JOIN_GROUP: 9,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 6,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.API_VERSIONS: 4,
}


class Counts:
    """Counters around the codec, the splicer and the frame (monkeypatched for the test only)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.counts: Counter[str] = Counter()
        decode, validate, encode, apply = codec.decode, walker.validate, codec.encode, splice.apply
        joined = exchange.ResponseMessage._joined

        def message(cls: Any) -> bool:  # not an item decoded or encoded alone inside a splice
            return cls.__type__.name != "nested"

        def counted_decode(cls: Any, *args: Any) -> Any:
            self.counts["decode"] += message(cls)
            return decode(cls, *args)

        def counted_validate(*args: Any) -> Any:
            self.counts["validate"] += 1
            return validate(*args)

        def counted_encode(entity: Any) -> Any:
            self.counts["rebuild"] += message(type(entity))  # a message encoded again is a frame rebuilt
            return encode(entity)

        def counted_apply(frame: Any, edits: Any) -> Any:
            self.counts["rebuild"] += bool(edits)
            return apply(frame, edits)

        def counted_join(msg: exchange.ResponseMessage) -> Any:
            self.counts["rebuild"] += len(msg._pieces) > 1  # a copy of the whole message
            return joined(msg)

        monkeypatch.setattr(codec, "decode", counted_decode)
        monkeypatch.setattr(walker, "validate", counted_validate)
        monkeypatch.setattr(codec, "encode", counted_encode)
        monkeypatch.setattr(splice, "apply", counted_apply)
        monkeypatch.setattr(exchange.ResponseMessage, "_joined", counted_join)

    def take(self) -> Counter[str]:
        out, self.counts = self.counts, Counter()
        return out


def names(kind: str, image: Any, physical: dict[str, str]) -> dict[str, Any]:
    if kind == "tenant":
        return {"topic": "orders", "group": "g1", "txn": "tx1", "topic_id": TOPIC_ID}
    vc = image.vcs["team-a"]
    return {
        "topic": physical["team-a"],
        "group": vc.physical_id("g1"),
        "txn": vc.physical_id("tx1"),
        "topic_id": TOPIC_ID,
    }


def session(kind: str) -> tuple[ProxySession, dict[str, Any]]:
    image, physical = make_image()
    if kind == "plain":
        return ProxySession(PLAIN_LAYOUT), names(kind, image, physical)
    if kind == "tenant":
        return tenant_session(image), names(kind, image, physical)
    image.apply(*principal_record("User:ops", "kafka-cluster"))
    image.guard = StateTopicGuard("__vcproxy_state", frozenset(), uuid.UUID(int=9))  # a deployment's state topic
    for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID):
        name = "kafka-cluster" if rtype is ResourceType.CLUSTER else "*"
        image.cluster_acls.add(
            AclBinding(rtype, name, PatternType.LITERAL, "User:ops", "*", Operation.ALL, Permission.ALLOW)
        )
    return tenant_session(image, principal="User:ops"), names(kind, image, physical)


def cases() -> Iterator[Any]:
    for kind in ("plain", "tenant", "kafka-cluster"):
        for api, version in APIS.items():
            yield pytest.param(kind, api, version, id=f"{kind}-{api.name}-v{version}")


@pytest.mark.parametrize(("kind", "api", "version"), cases())
def test_each_message_is_decoded_validated_and_rebuilt_at_most_once(monkeypatch, kind, api, version):
    s, values = session(kind)
    request = request_frame(api, version, 7, sample(request_type(api, version), values))
    response = response_frame(api, version, 7, sample(response_type(api, version), values))
    counts = Counts(monkeypatch)

    decision = s.on_request(memoryview(bytearray(request)))
    assert decision.action in (Action.FORWARD, Action.LOCAL), decision.reason  # LOCAL: a DeleteTopics that unlinks
    seen = {"request": counts.take()}
    if decision.action is Action.FORWARD and decision.pending is not None:
        s.on_response(memoryview(bytearray(response)))
        seen["response"] = counts.take()
    over = {side: dict(c) for side, c in seen.items() if any(n > 1 for n in c.values())}
    assert not over, over


def test_the_counters_count(monkeypatch):
    """A Metadata request decoded by hand counts one decode and one validation: the counters are live."""
    counts = Counts(monkeypatch)
    body = sample(request_type(ApiKey.METADATA, 12), {"topic": "t", "topic_id": uuid.uuid4()})
    codec.decode(request_type(ApiKey.METADATA, 12), codec.encode(body))
    assert counts.take() == Counter(decode=1, validate=1, rebuild=1)
