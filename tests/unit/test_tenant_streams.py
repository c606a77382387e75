"""Kafka Streams groups (KIP-1071) for a virtual-cluster principal: golden cases.

StreamsGroupHeartbeat and StreamsGroupDescribe have one version (v0) in Kafka 4.2; the cases below
cover each version the proxy advertises. tests/unit/test_tenant_rewrite.py additionally sends a
sample of every advertised API and version through the engine.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
from kio.schema.errors import ErrorCode

from proxy.core.apiversions import tenant_versions
from proxy.core.session import Action
from proxy.protocol import codec
from proxy.protocol.apis import request_type, response_type
from proxy.tenancy.model import derived_topic_for, link_record, partitions_record

from .test_tenant_rewrite import answer, forward, make_image, tenant_session

HEARTBEAT, DESCRIBE = 88, 89
CHANGELOG, REPARTITION = "app-counts-changelog", "app-words-repartition"


def versions(key: int) -> list[int]:
    low, high = tenant_versions()[key]
    return list(range(low, high + 1))


def _types(version: int, key: int = HEARTBEAT, side: str = "request") -> dict[str, type]:
    cls = request_type(key, version) if side == "request" else response_type(key, version)
    module = __import__(cls.__module__, fromlist=["*"])
    return {name: getattr(module, name) for name in dir(module) if isinstance(getattr(module, name), type)}


def topology(version: int, *, sources=("orders",), regexes=(), changelog=CHANGELOG, repartition=REPARTITION):
    t = _types(version)
    info = t["TopicInfo"]
    subtopologies = (
        codec._empty(
            t["Subtopology"],
            subtopology_id="0",
            source_topics=tuple(sources),
            source_topic_regex=tuple(regexes),
            repartition_sink_topics=(repartition,),
            copartition_groups=(codec._empty(t["CopartitionGroup"], source_topics=(0,), source_topic_regex=(0,)),),
        ),
        codec._empty(
            t["Subtopology"],
            subtopology_id="1",
            state_changelog_topics=(codec._empty(info, name=changelog),),
            repartition_source_topics=(codec._empty(info, name=repartition, partitions=3),),
        ),
    )
    return codec._empty(t["Topology"], epoch=0, subtopologies=subtopologies)


def join(version: int, **kwargs) -> object:
    return codec._empty(
        request_type(HEARTBEAT, version),
        group_id="app",
        member_id="m1",
        member_epoch=0,
        topology=topology(version, **kwargs),
    )


@pytest.mark.parametrize("version", versions(HEARTBEAT))
def test_join_translates_the_topology_and_links_the_internal_topics(version):
    image, physical = make_image()
    a = image.vcs["team-a"]
    session = tenant_session(image)
    sent = forward(session, HEARTBEAT, version, join(version))
    assert sent.group_id == f"{a.id}.app"
    source, internal = sent.topology.subtopologies
    assert source.source_topics == (physical["team-a"],)
    changelog, repartition = derived_topic_for(a.id, CHANGELOG), derived_topic_for(a.id, REPARTITION)
    assert source.repartition_sink_topics == (repartition,)
    assert internal.state_changelog_topics[0].name == changelog
    assert internal.repartition_source_topics[0].name == repartition
    assert internal.repartition_source_topics[0].partitions == 3  # everything else untouched
    assert source.copartition_groups == topology(version).subtopologies[0].copartition_groups

    status = codec._empty(_types(version, side="response")["Status"], status_code=3)
    detail = f"Internal topics are missing: {repartition}, {changelog}; group {a.id}.app"
    response = codec._empty(
        response_type(HEARTBEAT, version),
        member_id="m1",
        member_epoch=1,
        status=(codec._empty(type(status), status_code=3, status_detail=detail),),
    )
    got, result = answer(session, HEARTBEAT, version, response)
    # Durable before the member hears back: the broker creates these topics for the VC (and the
    # repartition topic's partition count, for the VC's partition limit).
    assert sorted(result.writes) == sorted(
        [
            link_record("team-a", CHANGELOG, changelog),
            link_record("team-a", REPARTITION, repartition),
            partitions_record(repartition, 3),
        ]
    )
    assert got.status[0].status_detail == f"Internal topics are missing: {REPARTITION}, {CHANGELOG}; group app"


@pytest.mark.parametrize("version", versions(HEARTBEAT))
def test_derived_names_are_stable_per_vc_and_differ_between_vcs(version):
    image, _ = make_image()
    first = forward(tenant_session(image), HEARTBEAT, version, join(version))
    again = forward(tenant_session(image), HEARTBEAT, version, join(version))  # another member or replica
    other = forward(tenant_session(image, "User:team-b-user"), HEARTBEAT, version, join(version))
    assert first.topology == again.topology
    names = {t.name for s in first.topology.subtopologies for t in s.state_changelog_topics}
    other_names = {t.name for s in other.topology.subtopologies for t in s.state_changelog_topics}
    assert names.isdisjoint(other_names)


@pytest.mark.parametrize("version", versions(HEARTBEAT))
def test_linked_internal_topics_are_used_and_not_linked_again(version):
    image, _ = make_image()
    existing = f"{uuid.uuid4()}.{CHANGELOG}"  # e.g. created by the classic protocol through CreateTopics
    image.apply(*link_record("team-a", CHANGELOG, existing))
    image.apply(*link_record("team-a", REPARTITION, derived_topic_for(image.vcs["team-a"].id, REPARTITION)))
    session = tenant_session(image)
    sent = forward(session, HEARTBEAT, version, join(version))
    assert sent.topology.subtopologies[1].state_changelog_topics[0].name == existing
    _, result = answer(session, HEARTBEAT, version, codec._empty(response_type(HEARTBEAT, version)))
    assert result.writes == []


@pytest.mark.parametrize("version", versions(HEARTBEAT))
def test_links_are_written_only_if_the_broker_accepted_the_topology(version):
    image, _ = make_image()
    session = tenant_session(image)
    forward(session, HEARTBEAT, version, join(version))
    refused = codec._empty(response_type(HEARTBEAT, version), error_code=ErrorCode.streams_invalid_topology)
    _, result = answer(session, HEARTBEAT, version, refused)
    assert result.writes == []


@pytest.mark.parametrize("version", versions(HEARTBEAT))
def test_missing_source_topic_gets_a_stable_unlinked_name(version):
    image, _ = make_image()
    a = image.vcs["team-a"]
    session = tenant_session(image)
    sent = forward(session, HEARTBEAT, version, join(version, sources=("later",)))
    assert sent.topology.subtopologies[0].source_topics == (derived_topic_for(a.id, "later"),)
    status = _types(version, side="response")["Status"]
    detail = f"Source topics {derived_topic_for(a.id, 'later')} are missing."
    response = codec._empty(
        response_type(HEARTBEAT, version), status=(codec._empty(status, status_code=1, status_detail=detail),)
    )
    got, result = answer(session, HEARTBEAT, version, response)
    assert got.status[0].status_detail == "Source topics later are missing."
    assert link_record("team-a", "later", derived_topic_for(a.id, "later")) not in result.writes  # not internal
    # A later heartbeat (no topology) still names it the VC's way.
    plain = codec._empty(request_type(HEARTBEAT, version), group_id="app", member_id="m1", member_epoch=1)
    forward(session, HEARTBEAT, version, plain, cid=2)
    got, _ = answer(session, HEARTBEAT, version, response, cid=2)
    assert got.status[0].status_detail == "Source topics later are missing."


@pytest.mark.parametrize("version", versions(HEARTBEAT))
def test_source_regex_is_confined_to_the_vcs_topics(version):
    image, physical = make_image()
    image.apply(*link_record("team-a", "order-archive", f"{uuid.uuid4()}.order-archive"))
    session = tenant_session(image)
    sent = forward(session, HEARTBEAT, version, join(version, sources=(), regexes=("order.*", "nothing-.*")))
    matching, nothing = sent.topology.subtopologies[0].source_topic_regex
    assert re.fullmatch(matching, physical["team-a"])
    assert re.fullmatch(matching, image.vcs["team-a"].links["order-archive"])
    assert not re.fullmatch(matching, physical["team-b"])  # b's "orders" has the same link name
    assert not any(re.fullmatch(nothing, p) for p in physical.values())
    # Copartition groups index into the regex list: still the same positions.
    assert sent.topology.subtopologies[0].copartition_groups[0].source_topic_regex == (0,)


@pytest.mark.parametrize("version", versions(HEARTBEAT))
def test_adversarial_topology_names_stay_in_the_vc(version):
    image, physical = make_image()
    a, b = image.vcs["team-a"], image.vcs["team-b"]
    # Team-b's physical names, its group prefix and illegal names as team-a's source topics.
    names = (physical["team-b"], f"{b.id}.app-x-changelog", "..", "bad name")
    session = tenant_session(image)
    sent = forward(session, HEARTBEAT, version, join(version, sources=names))
    sent_names = sent.topology.subtopologies[0].source_topics
    assert physical["team-b"] not in sent_names
    assert sent_names[0] == derived_topic_for(a.id, physical["team-b"])  # just a name in team-a
    assert all(not n.startswith(b.id) for n in sent_names)
    assert sent_names[2].endswith("...") and all("!" not in n for n in sent_names)  # a random name: nowhere
    _, result = answer(session, HEARTBEAT, version, codec._empty(response_type(HEARTBEAT, version)))
    linked = {json.loads(key)[2] for key, _ in result.writes if json.loads(key)[0] == "link"}
    assert linked == {CHANGELOG, REPARTITION}  # only the topology's internal topics, never a source


@pytest.mark.parametrize("version", versions(HEARTBEAT))
@pytest.mark.parametrize(
    ("internal", "reason"),
    [
        ("..", "'..' is not allowed"),
        ("bad name", "other than ASCII"),
        ("x" * 213, "max allowed length 212"),
        ("__consumer_offsets", "internal topic __consumer_offsets"),
    ],
)
def test_internal_topics_kafka_would_refuse_are_an_invalid_topology(version, internal, reason):
    image, _ = make_image()
    session = tenant_session(image)
    decision = session.on_request(memoryview(bytearray(_request(version, join(version, changelog=internal)))))
    assert decision.action is Action.LOCAL
    raw = session.next_local_reply().reply
    got = codec.decode(response_type(HEARTBEAT, version), raw, _offset(version, raw))[0]
    assert got.error_code == ErrorCode.streams_invalid_topology
    assert reason in got.error_message and "!" not in got.error_message


def _request(version, body):
    from .wire import request_frame

    return request_frame(HEARTBEAT, version, 1, body)


def _offset(version, raw):
    from proxy.protocol.apis import api_info
    from proxy.protocol.headers import response_body_offset

    return response_body_offset(raw, api_info(HEARTBEAT).response_header_version(version))


@pytest.mark.parametrize("version", versions(HEARTBEAT))
def test_heartbeat_response_iq_partitions_come_back_virtual(version):
    image, physical = make_image()
    a = image.vcs["team-a"]
    image.apply(*link_record("team-a", CHANGELOG, derived_topic_for(a.id, CHANGELOG)))
    session = tenant_session(image)
    plain = codec._empty(request_type(HEARTBEAT, version), group_id="app", member_id="m1", member_epoch=4)
    assert forward(session, HEARTBEAT, version, plain).topology is None
    t = _types(version, side="response")
    tp = t["TopicPartition"]
    by_endpoint = codec._empty(
        t["EndpointToPartitions"],
        user_endpoint=codec._empty(t["Endpoint"], host="app-host", port=8080),
        active_partitions=(codec._empty(tp, topic=physical["team-a"], partitions=(0,)),),
        standby_partitions=(
            codec._empty(tp, topic=derived_topic_for(a.id, CHANGELOG), partitions=(1,)),
            codec._empty(tp, topic=physical["team-b"], partitions=(2,)),
        ),
    )
    response = codec._empty(response_type(HEARTBEAT, version), partitions_by_user_endpoint=(by_endpoint,))
    got, result = answer(session, HEARTBEAT, version, response)
    entry = got.partitions_by_user_endpoint[0]
    assert entry.user_endpoint.host == "app-host" and entry.user_endpoint.port == 8080  # an app, not a broker
    assert [p.topic for p in entry.active_partitions] == ["orders"]
    assert [p.topic for p in entry.standby_partitions] == [CHANGELOG, "<hidden>"]
    assert result.writes == []


@pytest.mark.parametrize("version", versions(DESCRIBE))
def test_describe_translates_groups_and_topology_and_hides_foreign_names(version):
    image, physical = make_image()
    a, b = image.vcs["team-a"], image.vcs["team-b"]
    image.apply(*link_record("team-a", CHANGELOG, derived_topic_for(a.id, CHANGELOG)))
    session = tenant_session(image)
    request = codec._empty(request_type(DESCRIBE, version), group_ids=("app", f"{b.id}.app"))
    sent = forward(session, DESCRIBE, version, request)
    # Every id is prefixed with team-a's VC id: naming team-b's group names one of team-a's own.
    assert sent.group_ids == (f"{a.id}.app", f"{a.id}.{b.id}.app")

    t = _types(version, DESCRIBE, "response")
    subtopology = codec._empty(
        t["Subtopology"],
        subtopology_id="0",
        source_topics=(physical["team-a"],),
        state_changelog_topics=(codec._empty(t["TopicInfo"], name=derived_topic_for(a.id, CHANGELOG)),),
    )
    groups = (
        codec._empty(
            t["DescribedGroup"],
            group_id=f"{a.id}.app",
            group_state="Stable",
            topology=codec._empty(t["Topology"], epoch=0, subtopologies=(subtopology,)),
        ),
        codec._empty(
            t["DescribedGroup"],
            group_id=f"{a.id}.{b.id}.app",
            error_code=ErrorCode.group_id_not_found,
            error_message=f"Group {a.id}.{b.id}.app not found.",
        ),
    )
    got, _ = answer(session, DESCRIBE, version, codec._empty(response_type(DESCRIBE, version), groups=groups))
    found, missing = got.groups
    assert found.group_id == "app"
    assert found.topology.subtopologies[0].source_topics == ("orders",)
    assert found.topology.subtopologies[0].state_changelog_topics[0].name == CHANGELOG
    assert missing.group_id == f"{b.id}.app" and missing.error_code == ErrorCode.group_id_not_found
    assert a.id not in (missing.error_message or "")


def test_list_groups_filters_streams_groups_like_any_other():
    from kio.schema.list_groups.v5.request import ListGroupsRequest
    from kio.schema.list_groups.v5.response import ListedGroup, ListGroupsResponse

    image, _ = make_image()
    a, b = image.vcs["team-a"], image.vcs["team-b"]
    session = tenant_session(image)
    sent = forward(session, 16, 5, codec._empty(ListGroupsRequest, types_filter=("streams",)))
    assert sent.types_filter == ("streams",)  # the broker filters by type, the proxy by VC
    groups = tuple(
        codec._empty(ListedGroup, group_id=g, protocol_type="streams", group_type="streams")
        for g in (a.physical_id("app"), b.physical_id("app"))
    )
    got, _ = answer(session, 16, 5, codec._empty(ListGroupsResponse, groups=groups))
    assert [(g.group_id, g.group_type) for g in got.groups] == [("app", "streams")]


def test_streams_group_apis_are_advertised_to_tenants():
    assert tenant_versions()[HEARTBEAT][0] == 0 and tenant_versions()[DESCRIBE][0] == 0
