"""Client quotas in virtual clusters (proxy/quotas/model.py): entities, the KIP-1134 precedence, records."""

from __future__ import annotations

import json

import pytest

from proxy.quotas.model import (
    FETCH,
    MUTATION,
    PRODUCE,
    REQUEST,
    QuotaBook,
    QuotaError,
    check_entity,
    entity,
    record,
    user_name,
)
from proxy.tenancy.model import TenancyImage, quota_record

# The KIP's precedence list, top to bottom, as (vc, user, client) with "*" for <default> and None absent.
LEVELS = [
    ("a", "carol", "app"),
    ("a", "carol", "*"),
    ("a", "carol", None),
    ("a", "*", "app"),
    ("a", "*", "*"),
    ("a", "*", None),
    ("a", None, "app"),
    ("a", None, "*"),
    (None, "carol", "app"),
    (None, "carol", "*"),
    (None, "carol", None),
    (None, "*", "app"),
    (None, "*", "*"),
    (None, "*", None),
    (None, None, "app"),
    (None, None, "*"),
]


def level_entity(vc, user, client):
    parts = {}
    if vc is not None:
        parts["virtual_cluster"] = vc
    if user is not None:
        parts["user"] = None if user == "*" else user
    if client is not None:
        parts["client_id"] = None if client == "*" else client
    return entity(**parts)


def book_with(levels) -> QuotaBook:
    book = QuotaBook()
    for i in levels:
        book.apply(level_entity(*LEVELS[i]), PRODUCE, 1000.0 + i)
    return book


@pytest.mark.parametrize("top", range(len(LEVELS)))
def test_precedence_first_defining_level_wins(top):
    # Every level from `top` down defines the key: the top one wins.
    book = book_with(range(top, len(LEVELS)))
    limits = book.resolve("a", "User:carol", "app")
    assert limits.limits[PRODUCE].quota == 1000.0 + top


def test_meter_is_per_user_and_or_client_as_the_level_says():
    book = QuotaBook()
    book.apply(entity(virtual_cluster="a", user=None), PRODUCE, 1.0)  # users/<default>: per user
    book.apply(entity(client_id=None), FETCH, 2.0)  # global clients/<default>: per client id (and VC)
    book.apply(entity(virtual_cluster="a", user="carol", client_id="app"), REQUEST, 3.0)
    limits = book.resolve("a", "User:carol", "app").limits
    assert limits[PRODUCE].meter == (PRODUCE, "a", "carol", "")
    assert limits[FETCH].meter == (FETCH, "a", "", "app")
    assert limits[REQUEST].meter == (REQUEST, "a", "carol", "app")
    assert MUTATION not in limits
    # Another VC's client with the same id is measured apart; other VCs' levels do not apply.
    other = book.resolve("b", "User:dan", "app").limits
    assert set(other) == {FETCH} and other[FETCH].meter == (FETCH, "b", "", "app")


def test_vc_cap_and_vc_default():
    book = QuotaBook()
    book.apply(entity(virtual_cluster=None), PRODUCE, 100.0)
    book.apply(entity(virtual_cluster=None), FETCH, 200.0)
    book.apply(entity(virtual_cluster="a"), PRODUCE, 50.0)
    a = book.resolve("a", "User:carol", None)
    assert a.limits == {} and a.caps[PRODUCE].quota == 50.0 and a.caps[FETCH].quota == 200.0
    assert a.caps[PRODUCE].meter == (PRODUCE, "vc", "a")
    b = book.resolve("b", "User:dan", None)
    assert b.caps[PRODUCE].quota == 100.0 and b.caps[PRODUCE].meter == (PRODUCE, "vc", "b")


def test_nothing_defined_resolves_to_nothing():
    assert not QuotaBook().resolve("a", "User:carol", "x")
    book = QuotaBook()
    book.apply(entity(virtual_cluster="b", user="carol"), PRODUCE, 1.0)
    assert not book.resolve("a", "User:carol", "x")


def test_user_entity_names_are_kafkas():
    assert user_name("User:carol") == "carol"
    assert user_name("User:CN=x,O=y") == "CN=x,O=y"
    assert user_name(None) == ""


@pytest.mark.parametrize(
    "bad",
    [
        (),
        (("user", "a"), ("user", "b")),
        (("ip", "1.2.3.4"),),
        (("virtual-cluster", "kafka-cluster"),),
        (("user", "carol"), ("virtual-cluster", None)),
        (("virtual-cluster", "bad name"),),
        (("user", ""),),
    ],
)
def test_entities_refused(bad):
    with pytest.raises(QuotaError):
        check_entity(tuple(sorted(bad)))


def test_values_refused():
    for key, value in ((PRODUCE, 0), (PRODUCE, -1), (PRODUCE, float("nan")), ("request_percentage", 10.0), ("x", 1)):
        with pytest.raises(QuotaError):
            record(entity(user="carol"), key, value)


def test_records_replay_into_the_image_and_tombstones_remove():
    image = TenancyImage()
    ent = entity(virtual_cluster="a", user="carol", client_id=None)
    key, value = quota_record(ent, PRODUCE, 1048576)
    assert json.loads(key) == ["quota", "client-id", "user=carol", "virtual-cluster=a", PRODUCE]
    assert value == {"value": 1048576}
    image.apply(key, value)
    image.apply(*quota_record(ent, FETCH, 5.0))
    assert image.quotas.get(ent) == {PRODUCE: 1048576.0, FETCH: 5.0}
    version = image.quotas.version
    image.apply(*quota_record(ent, PRODUCE, None))
    assert image.quotas.get(ent) == {FETCH: 5.0} and image.quotas.version > version
    image.apply(*quota_record(ent, FETCH, None))
    assert image.quotas.values == {}
    # A malformed quota record (a newer proxy's) is skipped, not fatal.
    image.apply('["quota","user=c","k"]', {"value": 1})
    image.apply('["quota","user=c","producer_byte_rate"]', {"other": 1})
    image.apply('["quota","producer_byte_rate"]', {"value": 1})
    assert image.quotas.values == {}


def test_book_records_replay_to_the_same_book():
    book = QuotaBook()
    book.apply(entity(client_id=None), FETCH, 2.0)
    book.apply(entity(client_id="x"), FETCH, 3.0)
    book.apply(entity(virtual_cluster="a", user="carol"), PRODUCE, 1.0)
    image = TenancyImage()
    for key, value in book.records():
        image.apply(key, value)
    assert image.quotas.values == book.values
