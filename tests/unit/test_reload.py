"""Reloading the configuration: the decision (proxy/reload.py) on valid, invalid and unchangeable edits,
and the reloader's polling of real files with a stand-in server (no sockets)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from proxy import reload
from proxy.auth.credentials import CredentialStore, make_entry
from proxy.config import ConfigError, ProxyConfig, load_config
from proxy.net.reloader import Reloader

ENTRY = make_entry("alice-secret", 4096, ["SCRAM-SHA-256"])
OTHER = make_entry("alice-new-secret", 4096, ["SCRAM-SHA-256"])


def _issue(ca: trustme.CA, directory: Path, name: str) -> tuple[str, str]:
    cert = ca.issue_cert("proxy.test")
    certfile, keyfile = directory / f"{name}.crt", directory / f"{name}.key"
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    return str(certfile), str(keyfile)


class Setup:
    def __init__(self, tmp_path: Path):
        self.dir = tmp_path
        self.ca = trustme.CA()
        self.certfile, self.keyfile = _issue(self.ca, tmp_path, "server")
        self.users_file = tmp_path / "users.yaml"
        self.users_file.write_text(yaml.safe_dump({"alice": ENTRY}))
        self.path = tmp_path / "proxy.yaml"
        self.data: dict[str, Any] = {
            "listeners": {
                "bootstrap_port": 9192,
                "security_protocol": "SASL_SSL",
                "tls": {"certfile": self.certfile, "keyfile": self.keyfile},
            },
            "upstream": {"bootstrap_servers": ["k:9092"]},
            "credentials": {"users_file": str(self.users_file)},
        }
        self.write()

    def write(self, **changes: Any) -> None:
        for dotted, value in changes.items():
            *parents, last = dotted.split("__")
            section = self.data
            for part in parents:
                section = section.setdefault(part, {})
            section[last] = value
        self.path.write_text(yaml.safe_dump(self.data))

    def load(self) -> ProxyConfig | ConfigError:
        try:
            return load_config(self.path)
        except ConfigError as exc:
            return exc


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def _decide(setup: Setup, before: ProxyConfig, changed: list[str] | None = None) -> reload.Decision:
    files = reload.watched_files(before, str(setup.path))
    return reload.decide(before, setup.load(), files, changed if changed is not None else [str(setup.path)])


def test_watched_files_are_the_config_and_every_file_it_names(setup):
    files = reload.watched_files(load_config(setup.path), str(setup.path))
    assert files == {
        str(setup.path): "(config file)",
        setup.certfile: "listeners.tls.certfile",
        setup.keyfile: "listeners.tls.keyfile",
        str(setup.users_file): "credentials.users_file",
    }


def test_a_certificate_rotated_in_place_is_applied_and_named(setup):
    before = load_config(setup.path)
    stamps = {path: reload.stamp(path) for path in (setup.certfile, setup.keyfile)}
    _issue(setup.ca, setup.dir, "server")  # same paths, new certificate and key
    changed = reload.changed_files(stamps, stamps)
    assert sorted(changed) == sorted([setup.certfile, setup.keyfile])
    decision = _decide(setup, before, changed)
    assert decision.config is not None
    assert decision.changed == (
        f"listeners.tls.certfile ({setup.certfile})",
        f"listeners.tls.keyfile ({setup.keyfile})",
    )
    assert decision.message.startswith("configuration reloaded: listeners.tls.certfile")


def test_a_file_replaced_by_rename_changes_its_stamp(setup):
    before = reload.stamp(setup.certfile)
    fresh = setup.dir / "fresh.crt"
    fresh.write_bytes(Path(setup.certfile).read_bytes())  # same content and size
    os.replace(fresh, setup.certfile)
    assert reload.stamp(setup.certfile) != before
    assert reload.stamp(str(setup.dir / "missing")) is None


def test_users_file_edit_names_the_users_never_their_keys(setup):
    before = load_config(setup.path)
    setup.users_file.write_text(yaml.safe_dump({"alice": OTHER, "bob": ENTRY}))
    decision = _decide(setup, before, [str(setup.users_file)])
    assert decision.config is not None and decision.users == ("alice", "bob")
    assert "users added, changed or removed: alice, bob" in decision.message
    assert OTHER["SCRAM-SHA-256"]["stored_key"] not in decision.message


def test_users_in_the_config_file_are_reloadable(setup):
    setup.write(credentials={"users": {"alice": ENTRY}})
    before = load_config(setup.path)
    setup.write(credentials={"users": {"alice": ENTRY, "carol": OTHER}})
    decision = _decide(setup, before)
    assert decision.config is not None
    assert decision.changed == ("credentials.users.carol",) and decision.users == ("carol",)


def test_upstream_password_change_is_applied_without_showing_it(setup):
    setup.write(
        upstream={
            "bootstrap_servers": ["k:9092"],
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "proxy",
            "sasl_password": "old-password",
        }
    )
    before = load_config(setup.path)
    setup.write(upstream__sasl_password="new-password")
    decision = _decide(setup, before)
    assert decision.changed == ("upstream.sasl_password",)
    assert "new-password" not in decision.message and "old-password" not in decision.message


def test_log_level_and_principal_rules_are_reloadable(setup):
    before = load_config(setup.path)
    setup.write(logging={"level": "DEBUG"}, listeners__tls__principal_mapping_rules="RULE:^CN=(.*)$/$1/L,DEFAULT")
    decision = _decide(setup, before)
    assert decision.config is not None
    assert decision.changed == ("listeners.tls.principal_mapping_rules", "logging.level")


def test_the_tls_engine_is_reloadable(setup):
    """New handshakes are served by the new engine; an open connection keeps its session (and its path)."""
    before = load_config(setup.path)
    setup.write(listeners__tls__engine="openssl")
    decision = _decide(setup, before)
    assert decision.config is not None and decision.changed == ("listeners.tls.engine",)


def test_nothing_changed_is_said_so(setup):
    before = load_config(setup.path)
    decision = _decide(setup, before)
    assert decision.config is not None and decision.changed == ()
    assert decision.message == "configuration reloaded: nothing changed"


@pytest.mark.parametrize(
    ("changes", "key", "reason"),
    [
        ({"listeners__bootstrap_port": 9300}, "listeners.bootstrap_port", "the listeners are bound"),
        ({"upstream__bootstrap_servers": ["other:9092"]}, "upstream.bootstrap_servers", "upstream cluster"),
        ({"tenancy": {"enabled": True}}, "tenancy.enabled", "state topic"),
        ({"limits": {"max_connections": 5}}, "limits.max_connections", "connection limits"),
    ],
)
def test_an_unchangeable_key_refuses_the_whole_edit(setup, changes, key, reason):
    before = load_config(setup.path)
    # A reloadable change in the same edit is refused with it: applied whole or not at all.
    setup.users_file.write_text(yaml.safe_dump({"alice": ENTRY, "bob": OTHER}))
    setup.write(**changes)
    decision = _decide(setup, before, [str(setup.path), str(setup.users_file)])
    assert decision.config is None
    assert decision.message.startswith("configuration reload refused, the running configuration is kept")
    assert f"{key}: " in decision.message and reason in decision.message
    assert "bob" not in decision.message


def test_switching_a_listener_between_tls_and_plaintext_is_unchangeable(setup):
    before = load_config(setup.path)
    setup.write(listeners={"bootstrap_port": 9192, "security_protocol": "SASL_PLAINTEXT"})
    decision = _decide(setup, before)
    assert decision.config is None
    assert "listeners.security_protocol: " in decision.message and "listeners.tls: " in decision.message


def test_unparseable_yaml_is_refused_with_the_file(setup):
    before = load_config(setup.path)
    setup.path.write_text("listeners: [unclosed\n")
    decision = _decide(setup, before)
    assert decision.config is None and f"{setup.path}: not valid YAML" in decision.message


def test_a_bad_value_is_refused_with_the_key(setup):
    before = load_config(setup.path)
    setup.write(logging={"level": "LOUD"})
    decision = _decide(setup, before)
    assert decision.config is None and f"{setup.path}: logging.level: " in decision.message


def test_a_mismatched_certificate_and_key_is_refused(setup):
    before = load_config(setup.path)
    _, other_key = _issue(setup.ca, setup.dir, "other")
    Path(setup.keyfile).write_bytes(Path(other_key).read_bytes())  # half a rotation: the key of another cert
    decision = _decide(setup, before, [setup.keyfile])
    assert decision.config is None
    assert f"{setup.path}: listeners.tls: " in decision.message and "cannot load the certificate" in decision.message


def test_a_bad_users_file_is_refused_with_its_key(setup):
    before = load_config(setup.path)
    setup.users_file.write_text("alice: {SCRAM-SHA-256: {salt: x}}\n")
    decision = _decide(setup, before, [str(setup.users_file)])
    assert decision.config is None
    assert "credentials: " in decision.message and f"users_file {setup.users_file}: alice" in decision.message


def test_diff_names_keys_only():
    assert reload.diff({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": 4}) == ["b.c", "d"]
    assert reload.reloadable("upstream.tls.cafile") and not reload.reloadable("upstream.tls_extra")
    assert reload.fixed_reason("metrics.port") == "the HTTP port is bound at start"


def test_credential_store_replace_is_seen_by_the_next_login():
    store = CredentialStore.from_mapping({"alice": ENTRY})
    assert store.plain_credential("bob") is None
    store.replace(CredentialStore.from_mapping({"bob": ENTRY}).users)
    assert store.plain_credential("alice") is None and store.plain_credential("bob") is not None


class _Server:
    """What the reloader needs of ProxyServer."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        self.applied: list[reload.Decision] = []

    def reconfigure(self, decision: reload.Decision) -> None:
        assert decision.config is not None
        self.config = decision.config
        self.applied.append(decision)


async def test_reloader_applies_once_and_logs_a_refusal_once(setup, caplog):
    server = _Server(load_config(setup.path))
    reloader = Reloader(server, setup.path, keep_log_level=True)  # type: ignore[arg-type]
    assert await reloader.reload() is None  # nothing touched: a poll does nothing
    _issue(setup.ca, setup.dir, "server")
    decision = await reloader.reload()
    assert decision is not None and server.applied == [decision]
    assert await reloader.reload() is None  # the new stamps are taken: not applied twice

    setup.write(listeners__bootstrap_port=9300)
    with caplog.at_level("ERROR"):
        refused = await reloader.reload()
        assert refused is not None and refused.config is None
        assert await reloader.reload() is None  # the same refused edit is not logged at every poll
    assert [r.message for r in caplog.records if r.levelname == "ERROR"] == [refused.message]
    assert server.config.listeners.bootstrap_port == 9192 and len(server.applied) == 1

    forced = await reloader.reload(forced=True)  # SIGHUP: evaluated again even if nothing was touched
    assert forced is not None and forced.config is None


async def test_reloader_follows_a_new_certificate_path(setup):
    server = _Server(load_config(setup.path))
    reloader = Reloader(server, setup.path, keep_log_level=True)  # type: ignore[arg-type]
    certfile, keyfile = _issue(setup.ca, setup.dir, "next")
    setup.write(listeners__tls__certfile=certfile, listeners__tls__keyfile=keyfile)
    decision = await reloader.reload()
    assert decision is not None and decision.changed == ("listeners.tls.certfile", "listeners.tls.keyfile")
    assert certfile in reloader.files and setup.certfile not in reloader.files
    Path(certfile).write_bytes(Path(certfile).read_bytes() + b"\n")
    again = await reloader.reload()
    assert again is not None and again.changed == (f"listeners.tls.certfile ({certfile})",)


class _Connection:
    def __init__(self, stale: str | None):
        self.session = type("Session", (), {"authenticator": type("Auth", (), {"stale_login": lambda _: stale})()})()
        self.closed: str | None = None

    def close_now(self, reason: str) -> None:
        self.closed = reason


async def test_server_reconfigure_swaps_what_new_connections_use(setup):
    from proxy.net.server import ProxyServer

    server = ProxyServer(load_config(setup.path))
    context, security, store = server.tls_context, server.upstream_security, server.credentials
    kept, gone = _Connection(None), _Connection("the credential was changed or deleted: reconnect")
    server.connections |= {kept, gone}  # type: ignore[arg-type]
    setup.users_file.write_text(yaml.safe_dump({"bob": ENTRY}))
    _issue(setup.ca, setup.dir, "server")
    decision = _decide(setup, server.config, [setup.certfile, str(setup.users_file)])
    server.reconfigure(decision)
    assert server.config is decision.config
    assert server.tls_context is not context and server.upstream_security is not security
    assert server.listings.security is server.upstream_security
    # The same store (every open session holds it) with the file's users: the next login sees them.
    assert server.credentials is store and set(store.users) == {"bob"}
    assert gone.closed is not None and kept.closed is None


async def test_tenancy_reseeds_only_the_changed_users_of_a_reloaded_file():
    from proxy.state.service import TenancyService

    service = TenancyService(store=None)  # type: ignore[arg-type]  # writes are captured below
    written: list[list[Any]] = []

    async def write(records: list[Any], timeout: float | None = None) -> None:
        written.append(records)
        for key, value in records:
            service._apply(key, value)

    service.write = write  # type: ignore[method-assign]
    service.ready.set()  # replayed
    await service.reseed_users({"alice": ENTRY})
    await service.reseed_users({"alice": ENTRY, "bob": OTHER})  # alice was seeded already: bob only
    await service.reseed_users({"bob": OTHER})  # a user removed from the file stays (kafka-configs deletes)
    assert len(written) == 2 and all("bob" in str(key) for key, _ in written[1])
    assert set(service.image.users.users) == {"alice", "bob"}


async def test_a_failure_while_applying_keeps_the_running_config(setup, caplog):
    server = _Server(load_config(setup.path))

    def broken(decision: reload.Decision) -> None:
        raise ssl.SSLError("the key changed again since it was checked")

    server.reconfigure = broken  # type: ignore[method-assign]
    reloader = Reloader(server, setup.path, keep_log_level=True)  # type: ignore[arg-type]
    before = server.config
    _issue(setup.ca, setup.dir, "server")
    assert await reloader.reload() is None
    assert server.config is before and "the key changed again" in caplog.text
    assert reloader.stamps == {}  # the next poll tries again
