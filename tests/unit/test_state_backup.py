"""Backups replay to the same image; orphan detection (issue 8, classes 8 and 10), sans-I/O."""

from __future__ import annotations

import uuid

import pytest

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.state.backup import dump_lines, find_orphans, image_records, parse_lines, replay_records, unlink_records
from proxy.tenancy.model import (
    TenancyImage,
    admin_record,
    client_record,
    gen_record,
    group_record,
    link_record,
    principal_record,
    quota_record,
    seeded_record,
    topic_record,
    txn_record,
    vc_record,
)


def sample_image() -> TenancyImage:
    image = TenancyImage()
    for record in (
        vc_record("team-a"),
        vc_record("team-b"),
        principal_record("User:alice", "team-a"),
        client_record("billing", "team-b"),
        principal_record("User:ghost", "gone"),  # a binding to a VC that no longer exists is kept
        link_record("team-a", "orders", "11111111-1111-1111-1111-111111111111.orders"),
        link_record("team-b", "view", "11111111-1111-1111-1111-111111111111.orders"),
        link_record("team-a", "alias", "11111111-1111-1111-1111-111111111111.orders"),
        topic_record("11111111-1111-1111-1111-111111111111.orders", uuid.uuid4()),
        gen_record("team-a", "payments", 3),
        group_record("team-a", "legacy-group", True),
        txn_record("team-a", "legacy-txn", True),
        admin_record("team-a", "User:dave", True),
        seeded_record("team-a", {"principals": ["User:alice"]}),
        acl_record(
            "team-a",
            AclBinding(
                ResourceType.TOPIC, "ord", PatternType.PREFIXED, "User:alice", "*", Operation.READ, Permission.DENY
            ),
            True,
        ),
        quota_record((("user", "alice"), ("virtual-cluster", "team-a")), "producer_byte_rate", 1024.0),
    ):
        image.apply(*record)
    return image


def test_a_backup_replays_to_the_same_image():
    image = sample_image()
    text = "".join(dump_lines(image_records(image)))
    again = replay_records(parse_lines(text.splitlines()))
    assert image_records(again) == image_records(image)
    for name, vc in image.vcs.items():
        assert (again.vcs[name].id, again.vcs[name].cluster_id) == (vc.id, vc.cluster_id)
        assert again.vcs[name].physical_links == vc.physical_links  # link order: the first names it back
    assert again.generation("team-a", "payments") == 3
    assert again.principals["User:ghost"] == "gone"
    a = again.vcs["team-a"]  # migration, admins, ACLs and quotas come back too
    assert (a.groups, a.txns, a.admins, len(a.acls)) == ({"legacy-group"}, {"legacy-txn"}, {"User:dave"}, 1)
    assert again.seeded == image.seeded and again.quotas.values == image.quotas.values


@pytest.mark.parametrize("line", ["not json", '{"key": "vc", "value": {}}', '{"key": ["vc", "a"], "value": 3}', "{}"])
def test_a_bad_backup_line_is_refused_with_its_number(line):
    with pytest.raises(ValueError, match="line 2"):
        parse_lines(['{"key":["vc","a"],"value":{"id":"x","cluster_id":"y"}}', line])


def test_orphans_are_unlinked_vc_topics_seen_in_both_listings_and_links_without_topics():
    image = sample_image()
    linked = "11111111-1111-1111-1111-111111111111.orders"
    image.apply(*link_record("team-b", "lost", "22222222-2222-2222-2222-222222222222.lost"))
    orphan = f"{uuid.uuid4()}.orders"
    born_during = f"{uuid.uuid4()}.new"  # created (and maybe linked) while the state was replayed
    before = {linked, orphan, "plain-topic", "__consumer_offsets"}
    after = before | {born_during}
    found = find_orphans(image, before, after)
    assert found.topics == [orphan]
    assert found.links == [("team-b", "lost", "22222222-2222-2222-2222-222222222222.lost")]
    records = unlink_records(image, found.links)
    assert records == [gen_record("team-b", "lost", 1), link_record("team-b", "lost", None)]
