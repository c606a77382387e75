"""`vcproxy credentials add`: its output loads back into the config and authenticates; no plaintext."""

from __future__ import annotations

import base64
import io
import json

import pytest
import yaml

from proxy.auth.credentials import CredentialError, CredentialStore, ScramCredential, make_entry
from proxy.config import ConfigError, parse_config
from vcproxy_tools.cli import main

PASSWORD = "s3cret pass-phrase"


def _add(monkeypatch, capsys, *args: str, stdin: str = PASSWORD + "\n") -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(["credentials", "add", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_command_output_loads_back_and_authenticates(monkeypatch, capsys):
    code, out, _ = _add(monkeypatch, capsys, "--user", "alice", "--password-stdin", "--iterations", "4096")
    assert code == 0
    assert PASSWORD not in out and PASSWORD.encode().hex() not in out
    snippet = yaml.safe_load(out)
    entry = snippet["credentials"]["users"]["alice"]
    assert set(entry) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert all(e["iterations"] == 4096 for e in entry.values())
    assert entry["SCRAM-SHA-256"]["salt"] != entry["SCRAM-SHA-512"]["salt"]

    config = parse_config(
        {
            "listeners": {"security_protocol": "SASL_PLAINTEXT"},
            "upstream": {"bootstrap_servers": ["k:9092"]},
            **snippet,
        },
        "f.yaml",
    )
    store = CredentialStore.from_mapping(config.credentials.as_mapping())
    assert store.verify_plain("alice", PASSWORD)
    assert not store.verify_plain("alice", PASSWORD + "x")
    assert not store.verify_plain("bob", PASSWORD)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        credential = store.scram_credential(mechanism, "alice")
        assert credential is not None and credential.matches_password(PASSWORD)
        assert "salt" not in repr(credential) and credential.stored_key.hex() not in repr(credential)


def test_one_mechanism_only_and_default_iterations(monkeypatch, capsys):
    code, out, _ = _add(monkeypatch, capsys, "--user", "bob", "--password-stdin", "--mechanism", "SCRAM-SHA-512")
    assert code == 0
    entry = yaml.safe_load(out)["credentials"]["users"]["bob"]
    assert list(entry) == ["SCRAM-SHA-512"] and entry["SCRAM-SHA-512"]["iterations"] == 8192
    assert CredentialStore.from_mapping({"bob": entry}).verify_plain("bob", PASSWORD)  # PLAIN via the SHA-512 keys


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["--iterations", "100"], PASSWORD, "iterations must be from 4096"),
        ([], "\n", "the password is empty"),
    ],
)
def test_command_refuses_bad_input(monkeypatch, capsys, args, stdin, message):
    code, out, err = _add(monkeypatch, capsys, "--user", "alice", "--password-stdin", *args, stdin=stdin)
    assert code == 2 and out == "" and message in err


def test_command_without_terminal_or_stdin_flag_says_how(monkeypatch, capsys):
    code, _, err = _add(monkeypatch, capsys, "--user", "alice")
    assert code == 2 and "--password-stdin" in err


def test_entries_with_bad_fields_are_config_errors():
    good = make_entry(PASSWORD, 4096, ["SCRAM-SHA-256"])["SCRAM-SHA-256"]
    cases = [
        ({**good, "stored_key": "!!"}, "stored_key is not valid base64"),
        ({**good, "server_key": good["server_key"][:8]}, "server_key must be 32 bytes"),
    ]
    for fields, message in cases:
        with pytest.raises(CredentialError, match=message):
            ScramCredential.from_fields("SCRAM-SHA-256", fields)
        data = {"upstream": {"bootstrap_servers": ["k:1"]}, "credentials": {"users": {"al": {"SCRAM-SHA-256": fields}}}}
        with pytest.raises(ConfigError, match=f"f.yaml: credentials.users.al: .*{message}"):
            parse_config(data, "f.yaml")


def test_an_entry_with_any_salt_is_taken_as_kafka_takes_it():
    good = make_entry(PASSWORD, 4096, ["SCRAM-SHA-256"])["SCRAM-SHA-256"]
    for salt in ("c2FsdA==", ""):  # 4 bytes (librdkafka's tests), none
        assert ScramCredential.from_fields("SCRAM-SHA-256", {**good, "salt": salt}).salt == base64.b64decode(salt)


def test_sasl_listener_needs_users_and_config_never_holds_passwords():
    with pytest.raises(ConfigError, match=r"needs at least one user in credentials\.users"):
        parse_config({"listeners": {"security_protocol": "SASL_PLAINTEXT"}, "upstream": {"bootstrap_servers": ["k:1"]}})
    config = parse_config(
        {
            "upstream": {
                "bootstrap_servers": ["k:1"],
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "vcproxy",
                "sasl_password": "vcproxy-secret",
            }
        }
    )
    assert config.upstream.password() == "vcproxy-secret"
    assert "vcproxy-secret" not in repr(config) and "vcproxy-secret" not in json.dumps(config.model_dump(mode="json"))


def test_upstream_password_file_is_relative_to_the_config(tmp_path):
    (tmp_path / "pw").write_text("from-file\n")
    config_file = tmp_path / "proxy.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "upstream": {
                    "bootstrap_servers": ["k:1"],
                    "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "PLAIN",
                    "sasl_username": "vcproxy",
                    "sasl_password_file": "pw",
                }
            }
        )
    )
    from proxy.config import load_config

    assert load_config(config_file).upstream.password() == "from-file"
