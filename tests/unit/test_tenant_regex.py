"""Client regexes in a virtual cluster (issue 8, class 3): RE2, bounded, cached, budgeted."""

from __future__ import annotations

import time
import uuid

import pytest
import re2
from kio.schema.errors import ErrorCode

from proxy.core.session import Action
from proxy.protocol import codec
from proxy.protocol.apis import request_type, response_type
from proxy.tenancy import regex
from proxy.tenancy.model import TenancyImage, link_record
from proxy.tenancy.regex import MAX_REGEX_LENGTH, InvalidRegex, RegexCache, compile_client_regex

from .test_tenant_rewrite import answer, forward, make_image, tenant_session

HEARTBEAT, DESCRIBE, LIST_TXNS = 68, 69, 66


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    monkeypatch.setattr(regex, "REGEXES", RegexCache())
    monkeypatch.setattr("proxy.tenancy.handlers.groups.REGEXES", regex.REGEXES)


def heartbeat(version: int = 1, **fields):
    return codec._empty(request_type(HEARTBEAT, version), group_id="g", member_id="m", **fields)


def refused(session, key: int, version: int, body) -> object:
    decision = session.on_request(memoryview(bytearray(_frame(key, version, body))))
    assert decision.action is Action.LOCAL, decision.reason
    raw = session.next_local_reply().reply
    return codec.decode(response_type(key, version), raw, _body_offset(key, version, raw))[0]


def _frame(key, version, body):
    from .wire import request_frame

    return request_frame(key, version, 1, body)


def _body_offset(key, version, raw):
    from proxy.protocol.apis import api_info
    from proxy.protocol.headers import response_body_offset

    return response_body_offset(raw, api_info(key).response_header_version(version))


def test_catastrophic_backtracking_pattern_is_linear():
    image, _ = make_image()
    image.apply(*link_record("team-a", "a" * 25, f"{uuid.uuid4()}.{'a' * 25}"))
    session = tenant_session(image)
    start = time.perf_counter()
    sent = forward(session, HEARTBEAT, 1, heartbeat(subscribed_topic_regex="(a+)+b"))
    assert time.perf_counter() - start < 0.5  # Python's re takes seconds (2^25 paths)
    a = image.vcs["team-a"]
    assert not any(re2.fullmatch(sent.subscribed_topic_regex, p) for p in a.links.values())


@pytest.mark.parametrize("version", [1])
@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(?<=a)b", "not a valid regular expression"),
        ("(", "not a valid regular expression"),
        ("a" * (MAX_REGEX_LENGTH + 1), "the limit is"),
        ("(((a{100}){100}){100})", ""),
    ],
)
def test_a_pattern_re2_refuses_is_invalid_regular_expression(version, pattern, reason):
    session = tenant_session(make_image()[0])
    got = refused(session, HEARTBEAT, version, heartbeat(version, subscribed_topic_regex=pattern))
    assert got.error_code == ErrorCode.invalid_regular_expression
    assert reason in got.error_message
    assert "SubscribedTopicRegex" in got.error_message


def test_program_size_is_bounded():
    with pytest.raises(InvalidRegex, match=r"too complex|not a valid"):
        compile_client_regex("(?:.{0,9}a){600}")
    compile_client_regex("orders-.*|payments-[0-9]+")


def test_expansion_is_cached_per_links_version_and_only_new_names_are_matched(monkeypatch):
    image, physical = make_image()
    vc = image.vcs["team-a"]
    cache = RegexCache()
    calls: list[str] = []
    real = compile_client_regex

    class Counting:
        def __init__(self, compiled):
            self.compiled = compiled

        def fullmatch(self, name):
            calls.append(name)
            return self.compiled.fullmatch(name)

    monkeypatch.setattr(regex, "compile_client_regex", lambda p, w="": Counting(real(p, w)))
    first = cache.expand(vc, "ord.*")
    assert first.complete and re2.fullmatch(first.pattern, physical["team-a"])
    assert calls == ["orders"]
    for _ in range(100):  # heartbeats: no matching at all while the links stay the same
        assert cache.expand(vc, "ord.*") == first
    assert calls == ["orders"]
    image.apply(*link_record("team-a", "order-archive", f"{uuid.uuid4()}.order-archive"))
    second = cache.expand(vc, "ord.*")
    assert calls == ["orders", "order-archive"]  # only the new name
    assert second.pattern.count("|") == 1
    image.apply(*link_record("team-a", "orders", None))
    assert cache.expand(vc, "ord.*").pattern.count("|") == 0
    assert calls == ["orders", "order-archive"]


def test_matching_is_budgeted_per_vc_and_finishes_on_later_calls():
    image = TenancyImage()
    image.apply(*('["vc","big"]', {"id": str(uuid.uuid4()), "cluster_id": "c"}))
    vc = image.vcs["big"]
    for i in range(200):
        image.apply(*link_record("big", f"t{i:03d}", f"{uuid.uuid4()}.t{i:03d}"))
    now = [0.0]

    def clock() -> float:
        now[0] += 0.001  # every reading costs a millisecond: a slow machine
        return now[0]

    cache = RegexCache(clock)
    sizes = []
    for _ in range(400):
        result = cache.expand(vc, "t.*")
        sizes.append(result.pattern.count("|") + 1)
        if result.complete:
            break
    assert result.complete and sizes[-1] == 200
    assert sizes[0] < 20  # one slice is at most SLICE_SECONDS of work
    assert sizes == sorted(sizes)  # partial answers only grow
    # The VC's budget is VC_RATE of the time that passed: far less than one slice per call.
    assert len(sizes) * regex.SLICE_SECONDS > 2 * 200 * 0.002


def test_heartbeat_resends_the_regex_when_the_expansion_grows():
    image, _ = make_image()
    session = tenant_session(image)
    assert forward(session, HEARTBEAT, 1, heartbeat(subscribed_topic_regex="ord.*")).subscribed_topic_regex
    assert forward(session, HEARTBEAT, 1, heartbeat(), cid=2).subscribed_topic_regex is None
    image.apply(*link_record("team-a", "orders-2", f"{uuid.uuid4()}.orders-2"))
    assert forward(session, HEARTBEAT, 1, heartbeat(), cid=3).subscribed_topic_regex.count("|") == 1


def test_empty_regex_passes_as_the_broker_means_it():
    session = tenant_session(make_image()[0])
    assert forward(session, HEARTBEAT, 1, heartbeat(subscribed_topic_regex="")).subscribed_topic_regex == ""


def test_describe_shows_the_regex_on_any_connection_of_the_vc():
    image, _ = make_image()
    sent = forward(tenant_session(image), HEARTBEAT, 1, heartbeat(subscribed_topic_regex="ord.*"))
    cls = response_type(DESCRIBE, 1)
    module = __import__(cls.__module__, fromlist=["*"])
    member = codec._empty(module.Member, member_id="m", subscribed_topic_regex=sent.subscribed_topic_regex)
    group = codec._empty(module.DescribedGroup, group_id=f"{image.vcs['team-a'].id}.g", members=(member,))
    other = tenant_session(image)  # another connection (e.g. the admin client)
    forward(other, DESCRIBE, 1, codec._empty(request_type(DESCRIBE, 1), group_ids=("g",)))
    got, _ = answer(other, DESCRIBE, 1, codec._empty(cls, groups=(group,)))
    assert got.groups[0].members[0].subscribed_topic_regex == "ord.*"


def test_transactional_id_pattern_cannot_escape_the_vc_prefix():
    image, _ = make_image()
    session = tenant_session(image)
    body = codec._empty(request_type(LIST_TXNS, 2), transactional_id_pattern="x)|(.*")
    got = refused(session, LIST_TXNS, 2, body)
    assert got.error_code == ErrorCode.invalid_regular_expression
    sent = forward(session, LIST_TXNS, 2, codec._empty(request_type(LIST_TXNS, 2), transactional_id_pattern="tx-.*"))
    prefix = image.vcs["team-a"].id
    assert re2.fullmatch(sent.transactional_id_pattern, f"{prefix}.tx-1")
    assert not re2.fullmatch(sent.transactional_id_pattern, f"{image.vcs['team-b'].id}.tx-1")


def test_another_worker_shows_the_regex_behind_an_expansion_it_did_not_send():
    """With `serve --workers N` a group's heartbeats and its describe can go through different workers: the one
    that expanded a regex tells the others (proxy/core/handoff.py), once per expansion."""
    image, _ = make_image()
    vc = image.vcs["team-a"]
    here, there = RegexCache(), RegexCache()
    told: list[list[object]] = []
    here.tell = lambda message: (told.append(message), there.learn(message))
    expansion = here.expand(vc, "ord.*").pattern
    here.expand(vc, "ord.*")
    assert len(told) == 1
    assert there.regex_for(vc, expansion) == "ord.*"
    assert there.regex_for(image.vcs["team-b"], expansion) is None  # another VC's question: not its regex


@pytest.mark.parametrize(
    "told",
    [None, ["regex"], ["regex", "vc", "00" * 16], ["regex", 1, "00" * 16, "x"], ["regex", "vc", "zz" * 16, "x"],
     ["regex", "vc", "00" * 15, "x"], ["regex", "vc", "00" * 16, "x" * (MAX_REGEX_LENGTH + 1)],
     ["regex", "v" * 65, "00" * 16, "x"], ["fetch", "vc", "00" * 16, "x"]],
)  # fmt: skip
def test_what_is_not_a_told_regex_is_ignored(told):
    cache = RegexCache()
    cache.learn(told)
    assert len(cache._regex_of) == 0


def test_each_of_n_workers_grants_a_vc_one_nth_of_its_matching_budget():
    image = TenancyImage()
    image.apply(*('["vc","big"]', {"id": str(uuid.uuid4()), "cluster_id": "c"}))
    vc = image.vcs["big"]
    for i in range(400):
        image.apply(*link_record("big", f"t{i:04d}", f"{uuid.uuid4()}.t{i:04d}"))

    def calls(share: float) -> int:
        now = [0.0]

        def clock() -> float:
            now[0] += 0.001
            return now[0]

        cache = RegexCache(clock)
        cache.share = share
        for n in range(1, 100_000):
            if cache.expand(vc, "t.*").complete:
                return n
        raise AssertionError("never complete")

    # Half the rate and half the burst: at least twice the calls (more: each call's own clock readings).
    alone, of_two = calls(1.0), calls(0.5)
    assert of_two >= 2 * alone, (alone, of_two)
