"""Every API and version a virtual-cluster principal may use, through the sans-I/O session.

For each one, a request is built with every annotated identifier set to the tenant's names and
passed through the session: what would be forwarded must carry only physical names. A response
built with physical names must come back with only the tenant's names. Then golden cases for the
APIs with extra logic.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import typing
import uuid
from types import NoneType, UnionType
from typing import Any

import pytest

from proxy.core.apiversions import tenant_versions
from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProxySession
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.headers import parse_request_header, response_body_offset
from proxy.tenancy import engine as engine_module
from proxy.tenancy.engine import Policy, TenantEngine, tenant_rules
from proxy.tenancy.fields import identifier_paths
from proxy.tenancy.handlers import registry
from proxy.tenancy.model import TenancyImage, gen_record, link_record, principal_record, topic_record, vc_record
from proxy.tenancy.names import DESCRIBED_INTERNAL
from proxy.tenancy.translate import ZERO_UUID

from .wire import request_frame, response_frame

LAYOUT = ListenerLayout("127.0.0.1", 9192, 9193)
TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")


@dataclasses.dataclass
class Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


def make_image() -> tuple[TenancyImage, dict[str, str]]:
    image = TenancyImage()
    physical = {}
    for vc in ("team-a", "team-b"):
        image.apply(*vc_record(vc))
        image.apply(*principal_record(f"User:{vc}-user", vc))
        physical[vc] = f"{uuid.uuid4()}.orders"
        image.apply(*link_record(vc, "orders", physical[vc]))
    image.apply(*topic_record(physical["team-a"], TOPIC_ID))
    return image, physical


def tenant_session(image: TenancyImage, principal: str = "User:team-a-user", broker: Any = 1) -> ProxySession:
    """A VC principal's session on the listener of upstream broker `broker` (None: a bootstrap connection
    whose upstream is not connected yet)."""
    return ProxySession(LAYOUT, tenancy=Tenancy(image), principal=principal, broker=broker)


# -- building sample messages ----------------------------------------------------------------------


def _strip(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (UnionType, typing.Union):
        return next(a for a in typing.get_args(tp) if a is not NoneType), True
    return tp, False


SPECIAL = {
    "replica_id": -1,
    "key_type": 0,
    "endpoint_type": 1,
    "resource_type": 2,
    "error_code": 0,
    "protocol_type": "consumer",
    "acks": -1,
    "leader_id": 1,
    "node_id": 1,
    "broker_id": 1,
    "port": 9092,
}


def sample(cls: type, values: dict[str, Any], depth: int = 0) -> Any:
    hints = typing.get_type_hints(cls)
    kinds = {}
    kwargs = {}
    for f in dataclasses.fields(cls):
        tp, _ = _strip(hints[f.name])
        kinds = dict(identifier_paths(cls))
        if typing.get_origin(tp) is tuple:
            inner, _ = _strip(typing.get_args(tp)[0])
            if dataclasses.is_dataclass(inner):
                kwargs[f.name] = (sample(inner, values, depth + 1),) if depth < 6 else ()
            elif f"{f.name}[]" in kinds:
                kwargs[f.name] = (values[kinds[f"{f.name}[]"]],)
            else:
                kwargs[f.name] = ()
        elif dataclasses.is_dataclass(tp):
            kwargs[f.name] = sample(tp, values, depth + 1)
        elif f.name in kinds:
            kwargs[f.name] = values[kinds[f.name]]
        elif f.name == "resource_name":
            kwargs[f.name] = values["topic"]
        elif f.name.endswith("message") and tp is str:  # error messages quote names: scrubbed, spliced or not
            kwargs[f.name] = f"{values['topic']} failed"
        elif f.name in SPECIAL:
            kwargs[f.name] = _coerce(tp, SPECIAL[f.name])
        else:
            kwargs[f.name] = codec._zero(tp)
    return cls(**kwargs)


def _coerce(tp: Any, value: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if tp in (datetime.timedelta,):
        return datetime.timedelta(0)
    return tp(value) if isinstance(tp, type) else value


def values_at(entity: Any, path: str) -> list[Any]:
    head, dot, rest = path.partition(".")
    name = head.removesuffix("[]")
    value = getattr(entity, name, None)
    if value is None:
        return []
    items = list(value) if head.endswith("[]") else [value]
    return [v for item in items for v in (values_at(item, rest) if dot else [item])]


def advertised_rewrites() -> list[tuple[int, int]]:
    out = []
    for key, (low, high) in sorted(tenant_versions().items()):
        if tenant_rules()[key].action == "rewrite":
            out += [(key, v) for v in range(low, high + 1)]
    return out


def both_sides(image: TenancyImage, physical: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """team-a's names as its clients say them, and as the broker knows them."""
    vc = image.vcs["team-a"]
    virtual = {"topic": "orders", "group": "g1", "txn": "tx1", "topic_id": TOPIC_ID}
    return virtual, {
        "topic": physical["team-a"],
        "group": vc.physical_id("g1"),
        "txn": vc.physical_id("tx1"),
        "topic_id": TOPIC_ID,
    }


@pytest.mark.parametrize(("key", "version"), advertised_rewrites())
def test_request_and_response_carry_only_the_right_side_names(key, version):
    image, physical = make_image()
    vc = image.vcs["team-a"]
    virtual, phys = both_sides(image, physical)

    session = tenant_session(image)
    request = sample(request_type(key, version), virtual)
    decision = session.on_request(memoryview(request_frame(key, version, 7, request)))
    if decision.action is Action.LOCAL:
        return  # answered by the proxy itself (e.g. a policy refusal): nothing forwarded
    assert decision.action is Action.FORWARD, decision.reason
    forwarded = b"".join(bytes(p) for p in decision.pieces)
    info = api_info(key)
    offset = parse_request_header(forwarded, info.request_header_version(version)).body_offset
    if key != 0:  # Produce requests are spliced; decode to check all the same
        pass
    body, end = codec.decode(request_type(key, version), forwarded, offset)
    assert end == len(forwarded)
    for path, kind in identifier_paths(request_type(key, version)):
        for value in values_at(body, path):
            assert value == phys[kind], (path, value)

    response = sample(response_type(key, version), phys)
    result = session.on_response(memoryview(bytearray(response_frame(key, version, 7, response))))
    out = b"".join(bytes(p) for p in result.pieces)
    back, end = codec.decode(
        response_type(key, version), out, response_body_offset(out, info.response_header_version(version))
    )
    assert end == len(out)
    for path, kind in identifier_paths(response_type(key, version)):
        for value in values_at(back, path):
            assert value == virtual[kind], (path, value)
    text = repr(back)
    assert physical["team-a"] not in text and vc.id not in text


def _spliced_apis() -> list[tuple[int, int]]:
    return [(key, version) for key, version in advertised_rewrites() if "response" in tenant_rules()[key].splice]


@pytest.mark.parametrize(("key", "version"), _spliced_apis())
def test_a_spliced_answer_is_the_decoded_answer_byte_for_byte(key, version, monkeypatch):
    """Produce, Fetch and the share answers are spliced: names translated and error messages scrubbed in place.
    The same answer through the decoding path (decode, translate, scrub, encode) must come out identical."""
    image, physical = make_image()
    virtual, phys = both_sides(image, physical)
    out = {}
    for spliced in (True, False):
        if not spliced:
            monkeypatch.setattr(TenantEngine, "splices_response", lambda self, ex: False)
        session = tenant_session(image)
        request = sample(request_type(key, version), virtual)
        assert session.on_request(memoryview(request_frame(key, version, 7, request))).action is Action.FORWARD
        response = sample(response_type(key, version), phys)
        result = session.on_response(memoryview(bytearray(response_frame(key, version, 7, response))))
        out[spliced] = b"".join(bytes(p) for p in result.pieces)
    assert out[True] == out[False]
    assert physical["team-a"].encode() not in out[True]


def _spliced_requests() -> list[tuple[int, int]]:
    return [(key, version) for key, version in advertised_rewrites() if "request" in tenant_rules()[key].splice]


@pytest.mark.parametrize(("key", "version"), _spliced_requests())
def test_a_spliced_request_is_the_decoded_request_byte_for_byte(key, version, monkeypatch):
    """Produce, the offset commits, the group heartbeats and leaves, and the transactions' requests are spliced:
    their names translated in place. The same request through the decoding path (decode, translate, encode)
    must go upstream identical."""
    image, _ = make_image()
    virtual, _ = both_sides(image, make_image()[1])
    out = {}
    for spliced in (True, False):
        if not spliced:
            rules = {k: dataclasses.replace(r, splice=r.splice - {"request"}) for k, r in tenant_rules().items()}
            monkeypatch.setattr(engine_module, "tenant_rules", lambda rules=rules: rules)
        session = tenant_session(image)
        request = sample(request_type(key, version), virtual)
        decision = session.on_request(memoryview(request_frame(key, version, 7, request)))
        assert decision.action is Action.FORWARD, decision.reason
        out[spliced] = b"".join(bytes(p) for p in decision.pieces)
    assert out[True] == out[False]
    assert out[True] != request_frame(key, version, 7, request)  # something was translated


def test_a_splice_that_would_skip_what_a_decode_does_is_refused_at_load():
    """A spliced body is never decoded: a rule may not splice what needs the decoded body (a request hook,
    extra paths, filters) or names a splice cannot reach (a struct's field, an array of strings)."""
    reg = registry()
    by_name = {api_info(key).name: key for key in tenant_rules()}
    cases = {
        "offset_fetch": "response",  # its answer is filtered
        "list_offsets": "request",  # its request hook refuses replica ids
        "describe_groups": "request",  # group ids in an array of strings
        "describe_topic_partitions": "request",  # a name in a struct (the cursor)
    }
    for name, side in cases.items():
        key = by_name[name]
        rule = tenant_rules()[key]
        with pytest.raises(ValueError, match=f"api {key}"):
            reg.check({**tenant_rules(), key: dataclasses.replace(rule, splice=rule.splice | {side})})
    reg.check(tenant_rules())  # the rules as shipped pass


def test_every_advertised_api_has_a_tenant_rule():
    for key in tenant_versions():
        assert key in tenant_rules(), api_info(key).name


def test_unlisted_and_denied_apis_are_refused_locally():
    image, _ = make_image()
    session = tenant_session(image)
    # DescribeAcls: denied with CLUSTER_AUTHORIZATION_FAILED, nothing forwarded.
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest

    req = codec._empty(DescribeAclsRequest)
    decision = session.on_request(memoryview(request_frame(29, 3, 5, req)))
    assert decision.action is Action.LOCAL and decision.pieces is None
    reply = session.next_local_reply().reply
    assert int.from_bytes(reply[13:15], "big") == 31


# -- golden cases ----------------------------------------------------------------------------------


def forward(session: ProxySession, key: int, version: int, body: Any, cid: int = 1) -> Any:
    decision = session.on_request(memoryview(request_frame(key, version, cid, body)))
    assert decision.action is Action.FORWARD, decision.reason
    raw = b"".join(bytes(p) for p in decision.pieces)
    offset = parse_request_header(raw, api_info(key).request_header_version(version)).body_offset
    return codec.decode(request_type(key, version), raw, offset)[0]


def answer(session: ProxySession, key: int, version: int, body: Any, cid: int = 1):
    result = session.on_response(memoryview(bytearray(response_frame(key, version, cid, body))))
    raw = b"".join(bytes(p) for p in result.pieces)
    hv = api_info(key).response_header_version(version)
    return codec.decode(response_type(key, version), raw, response_body_offset(raw, hv))[0], result


def test_metadata_all_topics_asks_only_for_the_vcs_topics_and_shows_the_vc_cluster_id():
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic

    image, physical = make_image()
    session = tenant_session(image)
    sent = forward(
        session,
        3,
        12,
        MetadataRequest(topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False),
    )
    # The VC's topics and Kafka's internal ones (described as themselves, never readable): nothing else.
    assert [t.name for t in sent.topics] == [physical["team-a"], *sorted(DESCRIBED_INTERNAL)]
    assert sent.allow_auto_topic_creation is False
    new_id = uuid.uuid4()
    from kio.schema.errors import ErrorCode

    topic = MetadataResponseTopic(error_code=ErrorCode.none, name=physical["team-a"], topic_id=new_id, partitions=())
    body = codec._empty(MetadataResponse, cluster_id="PHYSICAL-cluster", topics=(topic,))
    got, result = answer(session, 3, 12, body)
    assert got.cluster_id == image.vcs["team-a"].cluster_id
    assert [(t.name, t.topic_id) for t in got.topics] == [("orders", new_id)]
    assert topic_record(physical["team-a"], new_id) in result.writes  # the ownership table learns the id


def test_internal_topics_are_described_as_internal_and_read_nowhere():
    """franz-go's TestConsumeRegex looks for `__consumer_offsets` in Metadata (issue 18): a VC describes
    Kafka's internal topics as a cluster does, but no other API reaches them (their records are every
    tenant's offsets and transactions)."""
    from kio.schema.errors import ErrorCode
    from kio.schema.list_offsets.v9.request import ListOffsetsRequest
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic

    image, _ = make_image()
    session = tenant_session(image)
    named = (MetadataRequestTopic(topic_id=ZERO_UUID, name="__consumer_offsets"),)
    sent = forward(
        session,
        3,
        12,
        MetadataRequest(topics=named, allow_auto_topic_creation=True, include_topic_authorized_operations=False),
    )
    assert [t.name for t in sent.topics] == ["__consumer_offsets"]
    offsets_id = uuid.uuid4()
    topic = MetadataResponseTopic(
        error_code=ErrorCode.none, name="__consumer_offsets", topic_id=offsets_id, is_internal=True, partitions=()
    )
    got, result = answer(session, 3, 12, codec._empty(MetadataResponse, cluster_id="PHYSICAL", topics=(topic,)))
    assert [(t.name, t.is_internal, t.topic_id) for t in got.topics] == [("__consumer_offsets", True, None)]
    assert not result.writes  # never a link, a partition count or an owned id

    listing = sample(
        ListOffsetsRequest, {"topic": "__consumer_offsets", "group": "g", "txn": "t", "topic_id": ZERO_UUID}
    )
    name = forward(tenant_session(image), 2, 9, listing).topics[0].name
    assert name.endswith(".__consumer_offsets") and name != "__consumer_offsets"

    # Their configs are described (kafka-topics --describe asks for every listed topic's), never altered.
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig,
        AlterConfigsResource,
        IncrementalAlterConfigsRequest,
    )

    describe = codec._empty(
        DescribeConfigsRequest,
        resources=(codec._empty(DescribeConfigsResource, resource_type=2, resource_name="__consumer_offsets"),),
    )
    assert forward(tenant_session(image), 32, 4, describe).resources[0].resource_name == "__consumer_offsets"
    config = codec._empty(AlterableConfig, name="retention.ms", value="1000")
    resource = codec._empty(
        AlterConfigsResource, resource_type=2, resource_name="__consumer_offsets", configs=(config,)
    )
    alter = codec._empty(IncrementalAlterConfigsRequest, resources=(resource,))
    assert forward(tenant_session(image), 44, 1, alter).resources[0].resource_name != "__consumer_offsets"


def test_foreign_topic_id_and_unknown_name_never_reach_the_broker_as_themselves():
    from kio.schema.fetch.v16.request import FetchRequest
    from kio.schema.list_offsets.v9.request import ListOffsetsRequest

    image, physical = make_image()
    b_id = uuid.uuid4()
    image.apply(*topic_record(physical["team-b"], b_id))
    session = tenant_session(image)
    fetch = sample(FetchRequest, {"topic": "x", "group": "g", "txn": "t", "topic_id": b_id})
    sent = forward(session, 1, 16, fetch)
    assert all(t.topic_id not in (b_id, TOPIC_ID) for t in sent.topics)
    listing = sample(ListOffsetsRequest, {"topic": "not-linked", "group": "g", "txn": "t", "topic_id": b_id})
    sent = forward(tenant_session(image), 2, 9, listing)
    name = sent.topics[0].name
    assert name.endswith(".not-linked") and name not in (physical["team-a"], physical["team-b"])


def test_list_groups_shows_only_the_vcs_groups_without_prefix():
    from kio.schema.list_groups.v5.request import ListGroupsRequest
    from kio.schema.list_groups.v5.response import ListedGroup, ListGroupsResponse

    image, _ = make_image()
    a, b = image.vcs["team-a"], image.vcs["team-b"]
    session = tenant_session(image)
    forward(session, 16, 5, codec._empty(ListGroupsRequest))
    groups = tuple(
        codec._empty(ListedGroup, group_id=g, protocol_type="consumer")
        for g in (a.physical_id("g1"), b.physical_id("g1"), "physical-group", a.id + "x.g")
    )
    got, _ = answer(session, 16, 5, codec._empty(ListGroupsResponse, groups=groups))
    assert [g.group_id for g in got.groups] == ["g1"]


def test_consumer_protocol_bytes_in_join_and_sync_are_translated():
    from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment
    from kio.schema.consumer_protocol_assignment.v3.data import TopicPartition as AssignedTP
    from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription
    from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
    from kio.schema.sync_group.v5.response import SyncGroupResponse

    image, physical = make_image()
    session = tenant_session(image)
    subscription = (3).to_bytes(2, "big") + codec.encode(codec._empty(ConsumerProtocolSubscription, topics=("orders",)))
    join = codec._empty(
        JoinGroupRequest,
        group_id="g1",
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=subscription),),
    )
    sent = forward(session, 11, 9, join)
    assert sent.group_id == image.vcs["team-a"].physical_id("g1")
    decoded, _ = codec.decode(ConsumerProtocolSubscription, sent.protocols[0].metadata, 2)
    assert decoded.topics == (physical["team-a"],)

    session.on_response(
        memoryview(bytearray(response_frame(11, 9, 1, codec._empty(response_type(11, 9), protocol_name="range"))))
    )
    assignment = (3).to_bytes(2, "big") + codec.encode(
        codec._empty(ConsumerProtocolAssignment, assigned_partitions=(AssignedTP(topic="orders", partitions=(0,)),))
    )
    sync = codec._empty(
        SyncGroupRequest,
        group_id="g1",
        protocol_type="consumer",
        assignments=(SyncGroupRequestAssignment(member_id="m", assignment=assignment),),
    )
    sent = forward(session, 14, 5, sync, cid=2)
    decoded, _ = codec.decode(ConsumerProtocolAssignment, sent.assignments[0].assignment, 2)
    assert decoded.assigned_partitions[0].topic == physical["team-a"]
    phys_assignment = (3).to_bytes(2, "big") + codec.encode(
        codec._empty(
            ConsumerProtocolAssignment, assigned_partitions=(AssignedTP(topic=physical["team-a"], partitions=(0,)),)
        )
    )
    got, _ = answer(session, 14, 5, codec._empty(SyncGroupResponse, assignment=phys_assignment), cid=2)
    decoded, _ = codec.decode(ConsumerProtocolAssignment, got.assignment, 2)
    assert decoded.assigned_partitions[0].topic == "orders"


def test_create_topics_links_a_new_uuid_topic_and_delete_removes_link_and_topic_when_opted_in():
    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
    from kio.schema.delete_topics.v6.response import DeletableTopicResult, DeleteTopicsResponse

    image, _ = make_image()
    session = tenant_session(image)
    request = codec._empty(
        CreateTopicsRequest,
        topics=(codec._empty(CreatableTopic, name="payments", num_partitions=3, replication_factor=3),),
    )
    sent = forward(session, 19, 7, request)
    physical = sent.topics[0].name
    uuid.UUID(physical[:36])
    assert physical[36:] == ".payments"
    new_id = uuid.uuid4()
    got, result = answer(
        session,
        19,
        7,
        codec._empty(
            CreateTopicsResponse, topics=(codec._empty(CreatableTopicResult, name=physical, topic_id=new_id),)
        ),
    )
    assert got.topics[0].name == "payments"
    assert got.topics[0].topic_id == new_id  # its own new topic's id, before the image has it
    assert link_record("team-a", "payments", physical) in result.writes
    for record in result.writes:
        image.apply(*record)
    assert image.vcs["team-a"].physical_topic("payments") == physical

    # tenancy.delete_physical_topics for team-a: the physical topic goes with its last link.
    opted_in = Policy(delete_physical_topic=lambda vc: vc == "team-a")
    session = ProxySession(LAYOUT, tenancy=Tenancy(image, opted_in), principal="User:team-a-user", broker=1)
    sent = forward(
        session,
        20,
        6,
        codec._empty(DeleteTopicsRequest, topics=(DeleteTopicState(name="payments", topic_id=uuid.UUID(int=0)),)),
    )
    assert sent.topics[0].name == physical
    got, result = answer(
        session,
        20,
        6,
        codec._empty(
            DeleteTopicsResponse, responses=(codec._empty(DeletableTopicResult, name=physical, topic_id=new_id),)
        ),
    )
    assert got.responses[0].name == "payments"
    assert link_record("team-a", "payments", None) in result.writes
    assert topic_record(physical, None) in result.writes


def test_delete_topics_by_default_unlinks_and_keeps_the_physical_topic():
    """KIP-1134: deleting in a VC removes the link; the broker is not asked to delete anything."""
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState

    image, physical = make_image()
    topic_id = uuid.uuid4()
    image.apply(*topic_record(physical["team-a"], topic_id))
    session = tenant_session(image)
    by_id = codec._empty(DeleteTopicsRequest, topics=(DeleteTopicState(name=None, topic_id=topic_id),))
    decision = session.on_request(memoryview(request_frame(20, 6, 9, by_id)))
    assert decision.action is Action.LOCAL
    pending = session.next_local_reply()
    assert pending.writes[:2] == [gen_record("team-a", "orders", 1), link_record("team-a", "orders", None)]
    assert topic_record(physical["team-a"], None) not in pending.writes  # the topic (and its id) stays
    # ...remembered as the VC's orphan, which counts against its topic and partition limits until deleted
    (key, value), *more = pending.writes[2:]
    assert not more and key == f'["orphan","{physical["team-a"]}"]' and value["vc"] == "team-a"


def test_shared_topic_delete_only_unlinks_without_touching_the_broker():
    from kio.schema.delete_topics.v5.request import DeleteTopicsRequest

    image, physical = make_image()
    image.apply(*link_record("team-b", "shared-view", physical["team-a"]))  # b links a's topic too
    session = tenant_session(image)
    decision = session.on_request(
        memoryview(request_frame(20, 5, 9, codec._empty(DeleteTopicsRequest, topic_names=("orders",))))
    )
    assert decision.action is Action.LOCAL
    pending = session.next_local_reply()
    # The next CreateTopics of "orders" must not land on the kept topic: a new generation first.
    assert pending.writes == [gen_record("team-a", "orders", 1), link_record("team-a", "orders", None)]


def test_regex_subscription_is_confined_to_the_vcs_topics():
    from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest

    image, physical = make_image()
    image.apply(*link_record("team-a", "order-archive", f"{uuid.uuid4()}.order-archive"))
    session = tenant_session(image)
    sent = forward(
        session, 68, 1, codec._empty(ConsumerGroupHeartbeatRequest, group_id="g", subscribed_topic_regex="order.*")
    )
    pattern = sent.subscribed_topic_regex
    import re

    assert re.fullmatch(pattern, physical["team-a"])
    assert not re.fullmatch(pattern, physical["team-b"])  # b's "orders" has the same link name
    assert re.fullmatch(pattern, image.vcs["team-a"].links["order-archive"])


def test_only_kafka_cluster_members_see_the_physical_cluster():
    from kio.schema.errors import ErrorCode
    from kio.schema.list_offsets.v9.request import ListOffsetsRequest
    from kio.schema.list_offsets.v9.response import ListOffsetsResponse

    image, physical = make_image()
    request = request_frame(
        2,
        9,
        1,
        sample(ListOffsetsRequest, {"topic": physical["team-b"], "group": "g", "txn": "t", "topic_id": TOPIC_ID}),
    )
    # In no VC: refused (the trust model: nobody borrows the proxy's identity).
    decision = tenant_session(image, principal="User:operator").on_request(memoryview(request))
    assert decision.action is Action.CLOSE and "in no virtual cluster" in decision.reason
    # A super-admin is in kafka-cluster with every right: the original bytes go to the broker.
    admin = ProxySession(LAYOUT, tenancy=Tenancy(image), principal="User:root", super_admins=("User:root",))
    decision = admin.on_request(memoryview(request))
    assert decision.action is Action.FORWARD and decision.pieces is None
    # A member added to kafka-cluster holds only what kafka-cluster's ACLs give: none yet.
    image.apply(*principal_record("User:monitor", "kafka-cluster"))
    member = tenant_session(image, principal="User:monitor")
    decision = member.on_request(memoryview(request))
    assert decision.action is Action.FORWARD  # the refused topic as a placeholder that exists nowhere
    raw = b"".join(bytes(p) for p in decision.pieces)
    sent, _ = codec.decode(ListOffsetsRequest, raw, parse_request_header(raw, 2).body_offset)
    placeholder = sent.topics[0].name
    assert placeholder != physical["team-b"] and placeholder.endswith(".orders")
    answer = sample(ListOffsetsResponse, {"topic": placeholder})
    answer = dataclasses.replace(
        answer,
        topics=tuple(
            dataclasses.replace(
                t, partitions=tuple(dataclasses.replace(p, error_code=ErrorCode(3)) for p in t.partitions)
            )
            for t in answer.topics
        ),
    )
    result = member.on_response(memoryview(bytearray(response_frame(2, 9, 1, answer))))
    back = b"".join(bytes(p) for p in result.pieces)
    body, _ = codec.decode(ListOffsetsResponse, back, 9)  # size, correlation id, tagged fields
    assert [t.name for t in body.topics] == [physical["team-b"]]
    assert {p.error_code for t in body.topics for p in t.partitions} == {29}  # TOPIC_AUTHORIZATION_FAILED
    # Granted DESCRIBE on that physical topic: forwarded as it is.
    from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record

    grant = AclBinding(
        ResourceType.TOPIC,
        physical["team-b"],
        PatternType.LITERAL,
        "User:monitor",
        "*",
        Operation.DESCRIBE,
        Permission.ALLOW,
    )
    image.apply(*acl_record("kafka-cluster", grant, True))
    decision = member.on_request(
        memoryview(request_frame(2, 9, 2, sample(ListOffsetsRequest, {"topic": physical["team-b"]})))
    )
    assert decision.action is Action.FORWARD and decision.pieces is None


def test_produce_is_spliced_records_untouched():
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    image, physical = make_image()
    records = bytes(range(256)) * 20
    request = ProduceRequest(
        transactional_id="tx",
        acks=-1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(TopicProduceData(name="orders", partition_data=(PartitionProduceData(index=0, records=records),)),),
    )
    session = tenant_session(image)
    decision = session.on_request(memoryview(request_frame(0, 9, 1, request)))
    assert any(isinstance(p, memoryview) and len(p) >= len(records) for p in decision.pieces)
    raw = b"".join(bytes(p) for p in decision.pieces)
    body, _ = codec.decode(ProduceRequest, raw, parse_request_header(raw, 2).body_offset)
    assert body.topic_data[0].name == physical["team-a"]
    assert body.transactional_id == image.vcs["team-a"].physical_id("tx")
    assert body.topic_data[0].partition_data[0].records == records


@pytest.mark.parametrize("where", ["top level", "a topic"])
def test_a_spliced_request_with_a_tagged_field_the_proxy_does_not_know_closes_the_connection(where):
    """A newer broker might read a tagged field the proxy's schema does not name (a name to translate): a
    spliced request is validated first and such a field refused, as a decoded one is (docs/security.md)."""
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    from proxy.core.exchange import Action

    image, _ = make_image()
    topic = TopicProduceData(name="orders", partition_data=(PartitionProduceData(index=0, records=b"r" * 70),))
    request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=1), topic_data=(topic,))
    frame = bytearray(request_frame(0, 9, 1, request))
    unknown = b"\x01\x63\x01\x00"  # one tagged field: tag 99, one byte
    if where == "top level":  # the body's last byte is its (empty) tag section
        frame[-1:] = unknown
    else:  # the topic's tag section follows its partitions' (each entity ends with an empty one)
        at = len(frame) - 2
        assert frame[at:] == b"\x00\x00"
        frame[at : at + 1] = unknown
    frame[:4] = (len(frame) - 4).to_bytes(4, "big")
    decision = tenant_session(image).on_request(memoryview(bytes(frame)))
    assert decision.action is Action.CLOSE and "unknown tagged field 99" in decision.reason
    # ...and the same request without it is forwarded
    assert tenant_session(image).on_request(memoryview(request_frame(0, 9, 1, request))).action is Action.FORWARD


@pytest.mark.parametrize("policy", [False, True])
def test_metadata_auto_creation_policy(policy):
    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic

    image, _ = make_image()
    session = ProxySession(
        LAYOUT, tenancy=Tenancy(image, Policy(auto_create_topics=policy)), principal="User:team-a-user"
    )
    request = MetadataRequest(
        topics=(MetadataRequestTopic(name="fresh", topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    sent = forward(session, 3, 12, request)
    name = sent.topics[0].name
    assert name.endswith(".fresh") and sent.allow_auto_topic_creation is policy
    if policy:  # deterministic: a second client asking at the same time picks the same physical topic
        second = ProxySession(
            LAYOUT, tenancy=Tenancy(image, Policy(auto_create_topics=True)), principal="User:team-a-user"
        )
        assert forward(second, 3, 12, request).topics[0].name == name
    error = ErrorCode.leader_not_available if policy else ErrorCode.unknown_topic_or_partition
    got, result = answer(
        session,
        3,
        12,
        codec._empty(
            MetadataResponse,
            topics=(MetadataResponseTopic(error_code=error, name=name, topic_id=uuid.UUID(int=0), partitions=()),),
        ),
    )
    assert got.topics[0].name == "fresh"
    assert (link_record("team-a", "fresh", name) in result.writes) is policy


def test_regex_is_sent_again_when_the_vc_gains_a_matching_topic(monkeypatch):
    from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
    from kio.schema.consumer_group_heartbeat.v1.response import ConsumerGroupHeartbeatResponse

    from proxy.tenancy.regex import REGEXES

    # The VC's matching budget is time: a pause while matching (a collection on a loaded machine) spent it,
    # and the new topic was matched only on a later heartbeat. Not what this test is about.
    monkeypatch.setattr(REGEXES, "clock", lambda: 0.0)
    image, _ = make_image()
    session = tenant_session(image)
    first = codec._empty(ConsumerGroupHeartbeatRequest, group_id="g", member_id="m", subscribed_topic_regex="ord.*")
    assert forward(session, 68, 1, first).subscribed_topic_regex.count("|") == 0
    answer(session, 68, 1, codec._empty(ConsumerGroupHeartbeatResponse))
    later = codec._empty(ConsumerGroupHeartbeatRequest, group_id="g", member_id="m", member_epoch=3)
    assert forward(session, 68, 1, later, cid=2).subscribed_topic_regex is None  # nothing changed
    answer(session, 68, 1, codec._empty(ConsumerGroupHeartbeatResponse), cid=2)
    image.apply(*link_record("team-a", "ordinals", f"{uuid.uuid4()}.ordinals"))
    sent = forward(session, 68, 1, later, cid=3).subscribed_topic_regex
    assert sent is not None and image.vcs["team-a"].links["ordinals"] in sent.replace("\\", "")


def test_list_config_resources_shows_only_the_vcs_topics_and_groups():
    from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest
    from kio.schema.list_config_resources.v1.response import ConfigResource, ListConfigResourcesResponse

    image, physical = make_image()
    a, b = image.vcs["team-a"], image.vcs["team-b"]
    session = tenant_session(image)
    sent = forward(session, 74, 1, ListConfigResourcesRequest(resource_types=()))
    assert sorted(int(t) for t in sent.resource_types) == [2, 32]
    listed = (
        ConfigResource(resource_name=physical["team-a"], resource_type=2),
        ConfigResource(resource_name=physical["team-b"], resource_type=2),
        ConfigResource(resource_name=a.physical_id("g"), resource_type=32),
        ConfigResource(resource_name=b.physical_id("g"), resource_type=32),
        ConfigResource(resource_name="1", resource_type=4),
    )
    got, _ = answer(session, 74, 1, codec._empty(ListConfigResourcesResponse, config_resources=listed))
    assert [(r.resource_name, int(r.resource_type)) for r in got.config_resources] == [("orders", 2), ("g", 32)]


@pytest.mark.parametrize("spliced", [True, False])
def test_a_spliced_request_is_held_to_the_vcs_acls_as_a_decoded_one(spliced, monkeypatch):
    """A VC's ACLs hold on a spliced request as on a decoded one: a group the caller may not read is refused
    before anything leaves, and a topic it may not read goes up as a placeholder no one has, never as the VC's
    physical topic (OffsetCommit, the offset commit a consumer repeats)."""
    from kio.schema.offset_commit.v8.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.schema.types import GroupId, TopicName
    from kio.static.primitive import i32, i64

    from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record

    if not spliced:
        rules = {k: dataclasses.replace(r, splice=r.splice - {"request"}) for k, r in tenant_rules().items()}
        monkeypatch.setattr(engine_module, "tenant_rules", lambda: rules)
    assert ("request" in engine_module.tenant_rules()[8].splice) is spliced
    image, physical = make_image()
    secret = f"{uuid.uuid4()}.secret"
    image.apply(*link_record("team-a", "secret", secret))
    # g1 and secret have ACLs, for someone else: the VC allows where no ACL is found, as Kafka's default does.
    grants = (("User:team-a-user", ResourceType.TOPIC, "orders"), ("User:team-a-user", ResourceType.GROUP, "g-ok"))
    others = (("User:other", ResourceType.TOPIC, "secret"), ("User:other", ResourceType.GROUP, "g1"))
    for user, kind, name in grants + others:
        binding = AclBinding(kind, name, PatternType.LITERAL, user, "*", Operation.READ, Permission.ALLOW)
        image.apply(*acl_record("team-a", binding, True))

    def commit(group: str, topics: tuple[str, ...]) -> Any:
        part = OffsetCommitRequestPartition(
            partition_index=i32(0), committed_offset=i64(1), committed_leader_epoch=i32(-1), committed_metadata=""
        )
        return OffsetCommitRequest(
            group_id=GroupId(group),
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=tuple(OffsetCommitRequestTopic(name=TopicName(t), partitions=(part,)) for t in topics),
        )

    def forwarded(group: str, topics: tuple[str, ...]) -> Any:
        decision = tenant_session(image).on_request(memoryview(request_frame(8, 8, 9, commit(group, topics))))
        assert decision.action is Action.FORWARD, decision.reason
        frame = b"".join(bytes(p) for p in decision.pieces)
        offset = parse_request_header(frame, api_info(8).request_header_version(8)).body_offset
        return frame, codec.decode(OffsetCommitRequest, frame, offset)[0]

    # A group it may not read: refused before anything leaves (v8's answer has no top-level error to carry it,
    # so the connection is closed, as the decoded path has always done).
    refused = tenant_session(image).on_request(memoryview(request_frame(8, 8, 7, commit("g1", ("orders",)))))
    assert refused.action is Action.CLOSE and refused.pieces is None and "not authorized: group 'g1'" in refused.reason

    vc = image.vcs["team-a"]
    frame, body = forwarded("g-ok", ("orders", "secret"))  # a topic it may not read: a placeholder too
    assert body.group_id == vc.physical_group("g-ok")
    names = [t.name for t in body.topics]
    assert names[0] == physical["team-a"]
    assert names[1].endswith(".secret") and names[1] != secret and secret.encode() not in frame
