"""A VC's own settings (issue 19, point 3): values checked like the static config's, vcconfig records
replayed, exported and seeded once, the run-time lookups (stored first, then the config), who may set
what through AlterVirtualClusters, the RPC on the wire, and the tool's arguments."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kio.static.primitive import i8

from proxy.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, acl_record
from proxy.config import TenancyConfig
from proxy.management.plane import Caller, handle
from proxy.protocol import codec
from proxy.protocol import management as m
from proxy.state.backup import image_records, replay_records
from proxy.state.seed import seed_records
from proxy.tenancy import settings
from proxy.tenancy.model import (
    TenancyImage,
    admin_record,
    principal_record,
    setting_delete,
    setting_record,
    vc_delete,
    vc_record,
)
from proxy.tenancy.policy import SAFE_DEFAULT
from vcproxy_tools import virtual_clusters as vc_cli
from vcproxy_tools.cli import build_parser

SUPERS = frozenset({"User:admin"})
ADMIN = Caller("User:admin", SUPERS)  # super-admin
OPS = Caller("User:ops", SUPERS)  # an operator: ALTER_VIRTUAL_CLUSTER on kafka-cluster by ACL
DAVE = Caller("User:dave", SUPERS)  # team-a's VC admin
ALICE = Caller("User:alice", SUPERS)  # a member of team-a
BOB = Caller("User:bob", SUPERS)  # team-b's VC admin
INVALID_CONFIG, CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, RESOURCE_NOT_FOUND = 40, 31, 42, 91


def apply(img: TenancyImage, records) -> TenancyImage:
    for key, value in records:
        img.apply(key, value)
    return img


def image() -> TenancyImage:
    ops = AclBinding(
        ResourceType.CLUSTER,
        "kafka-cluster",
        PatternType.LITERAL,
        "User:ops",
        "*",
        Operation.ALTER_VIRTUAL_CLUSTER,
        Permission.ALLOW,
    )
    return apply(
        TenancyImage(),
        [
            vc_record("team-a"),
            vc_record("team-b"),
            principal_record("User:alice", "team-a"),
            principal_record("User:dave", "team-a"),
            principal_record("User:bob", "team-b"),
            principal_record("User:ops", "kafka-cluster"),
            admin_record("team-a", "User:dave", True),
            admin_record("team-b", "User:bob", True),
            acl_record("kafka-cluster", ops, True),
        ],
    )


def alter(vc: str, *changes: tuple[str, str | None], validate_only: bool = False) -> m.AlterVirtualClustersRequest:
    configs = tuple(
        m.VirtualClusterConfig(name=k, config_operation=i8(0 if v is not None else 1), value=v) for k, v in changes
    )
    return m.AlterVirtualClustersRequest(
        virtual_clusters=(m.AlterableVirtualCluster(name=vc, configs=configs),), validate_only=validate_only
    )


def outcome(img: TenancyImage, caller: Caller, request) -> tuple[int, str | None, list]:
    response, records = handle(img, caller, request)
    result = response.virtual_clusters[0]
    return int(result.configs_error_code), result.configs_error_message, records


# -- values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("allow_everyone_if_no_acl_found", "false", False),
        ("delete_physical_topics", "TRUE", True),
        ("allow_unlisted_configs", "true", True),
        ("max_topics", "0", 0),
        ("max_topics", "null", None),
        ("max_partitions", "100", 100),
        ("max_partitions_per_topic", "1", 1),
        ("description", "Payments team, prod", "Payments team, prod"),
        ("labels", "team=payments, cost-center=42", {"team": "payments", "cost-center": "42"}),
        ("labels", "", {}),
        ("max_fetch_sessions", "5000", 5000),
    ],
)
def test_values_parse_to_what_is_stored_and_show_back(key, text, value):
    assert settings.parse(key, text) == value
    assert settings.parse(key, settings.show(key, value)) == value


@pytest.mark.parametrize(
    ("key", "text", "why"),
    [
        ("max_topic", "1", "unknown virtual cluster setting"),
        ("allow_everyone_if_no_acl_found", "yes", "must be true or false"),
        ("max_partitions_per_topic", "0", "greater than or equal to 1"),  # the static config's bound
        ("max_topics", "-1", "greater than or equal to 0"),
        ("max_partitions", "lots", "whole number"),
        ("labels", "team", "not key=value"),
        ("labels", "-x=1", "label key"),
        ("labels", "team=a b", "label value"),
        ("description", "x" * 1025, "at most 1024"),
        ("description", "a\nb", "control characters"),
        ("max_fetch_sessions", "0", "at least 1"),
        ("max_fetch_sessions", "null", "whole number"),  # no "no limit": the table's total bounds every VC
    ],
)
def test_bad_keys_and_values_are_refused_naming_the_key(key, text, why):
    with pytest.raises(settings.SettingError) as refused:
        settings.parse(key, text)
    assert str(refused.value).startswith(f"{key}: ") and why in str(refused.value)


# -- records: replay, delete, backup, seed ---------------------------------------------------------


def test_records_replay_and_go_with_their_vc():
    img = apply(image(), [setting_record("team-a", "max_topics", 3), setting_record("team-a", "labels", {"a": "b"})])
    assert img.vcs["team-a"].settings == {"max_topics": 3, "labels": {"a": "b"}}
    apply(img, [setting_delete("team-a", "labels"), setting_record("nowhere", "max_topics", 1)])
    assert img.vcs["team-a"].settings == {"max_topics": 3}
    apply(img, [vc_delete("team-a"), vc_record("team-a")])  # a later VC of the same name starts clean
    assert img.vcs["team-a"].settings == {}


def test_backup_keeps_settings():
    img = apply(image(), [setting_record("team-a", "max_topics", None), setting_record("team-b", "description", "d")])
    again = replay_records(image_records(img))
    assert again.vcs["team-a"].settings == {"max_topics": None}
    assert again.vcs["team-b"].settings == {"description": "d"}


def seed_entry(**extra):
    config = TenancyConfig.model_validate({"virtual_clusters": [{"name": "team-a", **extra}]})
    return config.virtual_clusters


def test_seed_writes_settings_once_and_a_changed_seed_value_again():
    img = image()
    seed = seed_entry(
        allow_everyone_if_no_acl_found=False,
        description="Team A",
        labels={"team": "a"},
        topic_policy={"max_topics": 10, "configs": {"flush.ms": {"settable": False}}},
    )
    apply(img, seed_records(img, seed))
    assert img.vcs["team-a"].settings == {
        "allow_everyone_if_no_acl_found": False,
        "description": "Team A",
        "labels": {"team": "a"},
        "max_topics": 10,
    }
    apply(img, [setting_record("team-a", "max_topics", 20)])  # a runtime change
    assert seed_records(img, seed) == []  # a restart undoes nothing
    apply(img, seed_records(img, seed_entry(topic_policy={"max_topics": 30})))  # an edited seed value applies
    assert img.vcs["team-a"].settings["max_topics"] == 30


def test_seed_entry_values_are_checked():
    with pytest.raises(ValueError, match="label key"):
        seed_entry(labels={"": "x"})


# -- run-time lookups --------------------------------------------------------------------------------


def test_lookups_read_the_stored_setting_first_then_the_config():
    img = image()
    config = TenancyConfig.model_validate(
        {
            "allow_everyone_if_no_acl_found": True,
            "topic_policy": {"max_topics": 50},
            "virtual_clusters": [{"name": "team-b", "delete_physical_topics": True}],
        }
    )
    lookups = settings.VcSettings(config, lambda: img)
    assert lookups.allow_if_no_acl("team-a") is True
    assert lookups.delete_physical_topics("team-b") is True
    assert lookups.topic_policy("team-a").max_topics == 50
    apply(
        img,
        [
            setting_record("team-a", "allow_everyone_if_no_acl_found", False),
            setting_record("team-a", "max_topics", 5),
            setting_record("team-a", "allow_unlisted_configs", True),
            setting_record("team-b", "delete_physical_topics", False),
        ],
    )
    assert lookups.allow_if_no_acl("team-a") is False
    assert lookups.delete_physical_topics("team-b") is False
    policy = lookups.topic_policy("team-a")
    assert (policy.max_topics, policy.allow_unlisted_configs) == (5, True)
    assert policy.configs == SAFE_DEFAULT.configs  # the rules stay the config's
    assert lookups.topic_policy("team-b").max_topics == 50
    apply(img, [setting_delete("team-a", "max_topics")])
    assert lookups.topic_policy("team-a").max_topics == 50


# -- who may set what (AlterVirtualClusters) ---------------------------------------------------------

REACH = [
    ("allow_everyone_if_no_acl_found", "true"),
    ("delete_physical_topics", "true"),
    ("max_partitions_per_topic", "1000"),
    ("max_topics", "100000"),
    ("max_partitions", "null"),
    ("allow_unlisted_configs", "true"),
    ("max_fetch_sessions", "5000"),
]


@pytest.mark.parametrize("change", [*REACH, *((k, None) for k, _ in REACH)])
def test_a_vc_admin_never_changes_its_reach_or_limits(change):
    code, message, records = outcome(image(), DAVE, alter("team-a", change))
    assert code == CLUSTER_AUTHORIZATION_FAILED and records == []
    assert change[0] in (message or "")


@pytest.mark.parametrize("caller", [ADMIN, OPS])
@pytest.mark.parametrize("change", REACH)
def test_operators_change_reach_and_limits(caller, change):
    img = image()
    code, _, records = outcome(img, caller, alter("team-a", change))
    assert code == 0
    apply(img, records)
    assert img.vcs["team-a"].settings[change[0]] == settings.parse(*change)


@pytest.mark.parametrize("caller", [DAVE, ADMIN])
def test_description_and_labels_are_the_vc_admins(caller):
    img = image()
    code, _, records = outcome(img, caller, alter("team-a", ("description", "Team A"), ("labels", "team=a")))
    assert code == 0
    apply(img, records)
    assert img.vcs["team-a"].settings == {"description": "Team A", "labels": {"team": "a"}}


@pytest.mark.parametrize(
    ("caller", "vc"),
    [(ALICE, "team-a"), (BOB, "team-a"), (Caller("User:eve", SUPERS), "team-a"), (DAVE, "team-b")],
)
def test_others_are_refused_without_learning_anything(caller, vc):
    code, message, records = outcome(image(), caller, alter(vc, ("description", "mine")))
    assert (code, message, records) == (CLUSTER_AUTHORIZATION_FAILED, "not authorized", [])


def test_a_request_applies_all_its_settings_or_none():
    img = image()
    code, message, records = outcome(img, ADMIN, alter("team-a", ("max_topics", "5"), ("max_partitions", "-3")))
    assert code == INVALID_CONFIG and message.startswith("max_partitions: ") and records == []
    code, message, _ = outcome(img, ADMIN, alter("team-a", ("colour", "blue")))
    assert code == INVALID_CONFIG and message.startswith("colour: unknown")
    code, _, _ = outcome(img, ADMIN, alter("team-a", ("max_topics", "5"), ("max_topics", None)))
    assert code == INVALID_REQUEST
    assert outcome(img, ADMIN, alter("kafka-cluster", ("description", "x")))[0] == INVALID_REQUEST
    assert outcome(img, ADMIN, alter("team-z", ("description", "x")))[0] == RESOURCE_NOT_FOUND
    assert outcome(img, ADMIN, alter("team-a", ("max_topics", "5"), validate_only=True))[2] == []


def test_deleting_a_vc_deletes_its_settings():
    img = apply(image(), [vc_record("team-c"), setting_record("team-c", "max_topics", 1)])
    response, records = handle(
        img, ADMIN, m.DeleteVirtualClustersRequest(virtual_clusters=(m.DeletableVirtualCluster(name="team-c"),))
    )
    assert int(response.responses[0].error_code) == 0, response
    assert records.index(setting_delete("team-c", "max_topics")) < records.index(vc_delete("team-c"))


def test_the_rpc_round_trip_on_the_wire():
    """Alter's tagged Configs and its outcome, and Describe's settings, through the codec."""
    img = image()
    request = alter("team-a", ("max_topics", "7"), ("labels", "env=prod"))
    request, _ = codec.decode(m.AlterVirtualClustersRequest, codec.encode(request))
    response, records = handle(img, ADMIN, request)
    response, _ = codec.decode(m.AlterVirtualClustersResponse, codec.encode(response))
    assert int(response.virtual_clusters[0].configs_error_code) == 0
    apply(img, records)
    refused, _ = handle(img, DAVE, alter("team-a", ("max_topics", "8")))
    refused, _ = codec.decode(m.AlterVirtualClustersResponse, codec.encode(refused))
    assert int(refused.virtual_clusters[0].configs_error_code) == CLUSTER_AUTHORIZATION_FAILED
    described, _ = handle(
        img, DAVE, m.DescribeVirtualClustersRequest(virtual_clusters=(m.DescribableVirtualCluster(name="team-a"),))
    )
    described, _ = codec.decode(m.DescribeVirtualClustersResponse, codec.encode(described))
    shown = {c.name: c.value for c in described.virtual_clusters[0].configs}
    assert shown == {"labels": "env=prod", "max_topics": "7"}


# -- the tool ------------------------------------------------------------------------------------------


def parse(*argv: str):
    return build_parser().parse_args(["virtual-clusters", *argv, "--bootstrap-server", "localhost:9092"])


def test_the_tool_sends_settings_to_set_and_delete():
    args = parse(
        "alter", "--virtual-cluster", "team-a", "--config", "labels=team=a,env=prod", "--config", "max_topics=5"
    )
    args.delete_config.append("description")
    request = vc_cli._request(args)
    configs = request.virtual_clusters[0].configs
    assert [(c.name, int(c.config_operation), c.value) for c in configs] == [
        ("labels", 0, "team=a,env=prod"),
        ("max_topics", 0, "5"),
        ("description", 1, None),
    ]
    assert request.virtual_clusters[0].resources == ()


@pytest.mark.parametrize(
    "argv",
    [
        ("--config", "max_topics"),  # no value
        ("--config", "max_topics=1", "--delete-config", "max_topics"),  # twice
        ("--add",),  # --add without a resource
        (),  # nothing to change
        ("--user", "alice"),  # a resource without --add or --remove
    ],
)
def test_the_tool_refuses_bad_arguments(argv):
    with pytest.raises(ValueError):
        vc_cli._request(parse("alter", "--virtual-cluster", "team-a", *argv))


def test_the_tool_still_alters_resources_with_settings():
    request = vc_cli._request(
        parse("alter", "--virtual-cluster", "team-a", "--add", "--user", "carol", "--config", "description=x")
    )
    data = request.virtual_clusters[0]
    assert [r.resource_name for r in data.resources] == ["carol"] and [c.name for c in data.configs] == ["description"]


def test_the_tool_shows_settings():
    args = SimpleNamespace(vc_command="describe", virtual_cluster="team-a")
    described = m.DescribeVirtualClustersResponse(
        virtual_clusters=(
            m.DescribedVirtualCluster(
                name="team-a", configs=(m.DescribedVirtualClusterConfig(name="description", value="Team A"),)
            ),
        )
    )
    out, codes = vc_cli._result(args, described)
    assert out["settings"] == {"description": "Team A"} and codes == [0]
    assert "Settings:          description=Team A" in vc_cli._text(args, out)
