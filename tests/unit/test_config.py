from pathlib import Path

import pytest

from proxy.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_minimal_config_defaults():
    config = parse_config({"upstream": {"bootstrap_servers": ["k:9092"]}})
    assert config.listeners.bootstrap_port == 9192
    assert config.listeners.effective_broker_port_base == 9193
    assert config.listeners.effective_advertised_host == "127.0.0.1"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"upstream": {"bootstrap_servers": ["k:9092"]}, "listner": {}}, "f.yaml: listner: unknown key"),
        ({"upstream": {"bootstrap_servers": ["k:9092"], "tlss": True}}, "f.yaml: upstream.tlss: unknown key"),
        ({"upstream": {"bootstrap_servers": ["k"]}}, "f.yaml: upstream.bootstrap_servers: Value error, 'k' is not"),
        ({"upstream": {"bootstrap_servers": []}}, "f.yaml: upstream.bootstrap_servers:"),
        ({}, "f.yaml: upstream: Field required"),
        (
            {"upstream": {"bootstrap_servers": ["k:1"]}, "listeners": {"bootstrap_port": 70000}},
            "f.yaml: listeners.bootstrap_port: Input should be less than or equal to 65535",
        ),
        ({"upstream": {"bootstrap_servers": ["k:1"]}, "listeners": {"host": "0.0.0.0"}}, "advertised_host must be set"),
        ([1, 2], "f.yaml: the top level must be a mapping"),
    ],
)
def test_bad_config_names_file_key_and_reason(data, expected):
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    assert expected in str(info.value)


def test_load_config_reports_unreadable_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("listeners: [unclosed")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize("name", ["demo.yaml", "example.yaml"])
def test_shipped_configs_are_valid(name):
    load_config(ROOT / "config" / name)


def test_cli_exits_2_with_message_on_bad_config(tmp_path, capsys):
    from proxy.cli import main

    bad = tmp_path / "c.yaml"
    bad.write_text("upstream: {bootstrap_servers: ['k:1']}\nlisteners: {bogus: 1}\n")
    assert main(["serve", "--config", str(bad)]) == 2
    assert f"{bad}: listeners.bogus: unknown key" in capsys.readouterr().err
