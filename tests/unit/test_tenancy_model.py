"""The sans-I/O virtual-cluster model: records in, image out; the id mappings are injective."""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.tenancy.model import (
    MAX_LINK_NAME,
    TenancyError,
    TenancyImage,
    client_record,
    link_record,
    new_cluster_id,
    physical_topic_for,
    principal_record,
    topic_record,
    validate_link_name,
    validate_vc_name,
    vc_delete,
    vc_record,
)


def _image(*records: tuple[str, dict | None]) -> TenancyImage:
    image = TenancyImage()
    for key, value in records:
        image.apply(key, value)
    return image


def test_vc_and_bindings():
    image = _image(
        vc_record("team-a"),
        vc_record("team-b"),
        principal_record("User:alice", "team-a"),
        client_record("billing", "team-b"),
    )
    assert image.vc_for("User:alice").name == "team-a"
    assert image.vc_for(None, "billing").name == "team-b"
    assert image.vc_for("User:alice", "billing").name == "team-a"  # the principal wins
    assert image.vc_for("User:mallory", "billing").name == "team-b"  # unbound principal: client id decides
    assert image.vc_for("User:mallory", "other") is None
    assert image.vc_for(None) is None
    assert image.version == 4


def test_vc_ids_are_immutable():
    key, first = vc_record("team-a")
    image = _image((key, first))
    _, second = vc_record("team-a")
    image.apply(key, second)
    vc = image.vcs["team-a"]
    assert (vc.id, vc.cluster_id) == (first["id"], first["cluster_id"])


def test_vc_tombstone_removes_its_bindings_only():
    image = _image(
        vc_record("team-a"),
        vc_record("team-b"),
        principal_record("User:alice", "team-a"),
        principal_record("User:bob", "team-b"),
        client_record("app-a", "team-a"),
    )
    image.apply(*vc_delete("team-a"))
    assert "team-a" not in image.vcs
    assert image.principals == {"User:bob": "team-b"}
    assert image.client_ids == {}
    image.apply(*vc_delete("team-a"))  # deleting again is harmless
    assert list(image.vcs) == ["team-b"]


def test_binding_moves_and_tombstones():
    image = _image(vc_record("a"), vc_record("b"), principal_record("User:x", "a"), client_record("c", "a"))
    image.apply(*principal_record("User:x", "b"))
    assert image.vc_for("User:x").name == "b"
    image.apply(*principal_record("User:x", None))
    image.apply(*client_record("c", None))
    assert image.vc_for("User:x", "c") is None


def test_links_and_reverse_links():
    physical = physical_topic_for("orders")
    image = _image(vc_record("a"), vc_record("b"), link_record("a", "orders", physical))
    a, b = image.vcs["a"], image.vcs["b"]
    assert a.physical_topic("orders") == physical
    assert a.link_for(physical) == "orders"
    assert b.link_for(physical) is None

    # An alias in the same VC and a share into another VC.
    image.apply(*link_record("a", "orders-v2", physical))
    image.apply(*link_record("b", "their-orders", physical))
    assert a.physical_links[physical] == ["orders", "orders-v2"]
    assert a.link_for(physical) == "orders"
    assert sorted(image.links_to(physical)) == [("a", "orders"), ("a", "orders-v2"), ("b", "their-orders")]

    # Re-pointing a link updates the reverse map.
    other = physical_topic_for("orders")
    image.apply(*link_record("a", "orders", other))
    assert a.physical_links == {physical: ["orders-v2"], other: ["orders"]}
    image.apply(*link_record("a", "orders-v2", None))
    assert physical not in a.physical_links
    assert image.links_to(physical) == [("b", "their-orders")]


def test_link_to_unknown_vc_is_ignored():
    image = _image(link_record("ghost", "t", physical_topic_for("t")))
    assert image.vcs == {}


def test_topic_ids():
    physical = physical_topic_for("orders")
    topic_id = uuid.uuid4()
    image = _image(
        vc_record("a"), vc_record("b"), topic_record(physical, topic_id), link_record("a", "orders", physical)
    )
    a, b = image.vcs["a"], image.vcs["b"]
    assert image.physical_for_id(topic_id) == physical
    assert image.owns_topic_id(a, topic_id)
    assert not image.owns_topic_id(b, topic_id)
    assert not image.owns_topic_id(a, uuid.uuid4())
    image.apply(*topic_record(physical, None))
    assert image.physical_for_id(topic_id) is None
    assert not image.owns_topic_id(a, topic_id)


def test_unknown_record_kind_is_ignored():
    image = TenancyImage()
    image.apply('["wormhole","a"]', {"bytes": 1})
    assert image.version == 0 and image.vcs == {}


def test_names():
    validate_vc_name("team.a_b-1")
    for bad in ("", "kafka-cluster", "has space", "x" * 101, "slash/"):
        with pytest.raises(TenancyError):
            validate_vc_name(bad)
    validate_link_name("x" * MAX_LINK_NAME)
    for bad in (".", "..", "", "x" * (MAX_LINK_NAME + 1), "a/b"):
        with pytest.raises(TenancyError):
            validate_link_name(bad)
    physical = physical_topic_for("orders")
    assert physical.endswith(".orders") and uuid.UUID(physical[:36])
    assert len(physical_topic_for("x" * MAX_LINK_NAME)) == 249
    with pytest.raises(TenancyError):
        vc_record("kafka-cluster")


def test_cluster_ids_look_like_kafkas():
    for _ in range(200):
        cid = new_cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_group_and_transactional_ids_are_injective_with_adversarial_names():
    # VC names that are prefixes of each other and contain the separator.
    image = _image(vc_record("team"), vc_record("team.a"), vc_record("t"), vc_record("team.a.b"))
    vcs = list(image.vcs.values())
    other = vcs[1]
    names = [
        "",
        "x",
        "a.x",
        "x.",
        ".x",
        "a",
        "team.a",
        f"{other.id}",  # the 36-character prefix of another VC's ids
        f"{other.id}.x",
        f"{vcs[0].id}.x",
        "..",
    ]
    mapped: dict[str, tuple[str, str]] = {}
    for vc, name in itertools.product(vcs, names):
        physical = vc.physical_id(name)
        assert physical not in mapped, f"{(vc.name, name)} and {mapped[physical]} collide on {physical!r}"
        mapped[physical] = (vc.name, name)
    for physical, (owner, name) in mapped.items():
        for vc in vcs:
            # Only the owner maps the physical id back, and to the original name.
            assert vc.virtual_id(physical) == (name if vc.name == owner else None)
    assert all(len(vc.prefix) == 37 for vc in vcs)
    assert vcs[0].virtual_id("plain-group") is None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["vc", "vc-delete", "link", "unlink"]),
            st.sampled_from(["a", "b", "c"]),  # VCs
            st.sampled_from(["l1", "l2", "l3"]),  # link names
            st.sampled_from(["p1.x", "p2.x", "p3.x"]),  # physical topics, shared between VCs and links
        ),
        max_size=40,
    )
)
def test_who_links_a_topic_is_indexed_as_every_vc_would_answer(steps):
    """`linked_by` (what topic_owner and links_to ask) is, after any sequence of records, what asking every VC
    finds: no VC deleted, unlinked or re-pointed elsewhere is left in it, none linking is missing."""
    image = TenancyImage()
    for kind, vc, link, physical in steps:
        if kind == "vc":
            record = vc_record(vc)
        elif kind == "vc-delete":
            record = vc_delete(vc)
        else:
            record = link_record(vc, link, physical if kind == "link" else None)
        image.apply(*record)
        for topic in ("p1.x", "p2.x", "p3.x"):
            scanned = [v.name for v in image.vcs.values() if topic in v.physical_links]
            assert sorted(image.linked_by.get(topic, {})) == sorted(scanned)
            assert sorted(image.links_to(topic)) == sorted(
                (v.name, name) for v in image.vcs.values() for name in v.physical_links.get(topic, [])
            )
            assert image.topic_owner(topic) == (scanned[0] if len(scanned) == 1 else None)  # none created them
    assert set(image.linked_by) <= {"p1.x", "p2.x", "p3.x"}


def test_an_image_made_from_anothers_vcs_knows_who_links_their_topics():
    image = _image(vc_record("a"), vc_record("b"), link_record("a", "t", "p.t"), link_record("b", "u", "p.t"))
    what_if = TenancyImage(vcs=image.vcs, principals=image.principals)  # as the management plane makes one
    assert what_if.linked_by == image.linked_by == {"p.t": {"a": None, "b": None}}
    assert sorted(what_if.links_to("p.t")) == [("a", "t"), ("b", "u")]
