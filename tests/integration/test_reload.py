"""Reloading a running proxy (docs/security.md#reloading): a rotated listener certificate is presented to new
TLS clients while a connection opened before keeps working, SIGHUP applies an edit at once, an edit of a key
that cannot change at run time is refused with the key and the reason while the proxy keeps serving, and a
rotated upstream CA is used by new upstream connections.

Two proxies: `front` (SSL listener, PLAINTEXT to Kafka) and `chain` (PLAINTEXT listener, SSL to front)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from kio.schema.metadata.v12.request import MetadataRequest

from vcproxy_tools.process import ProxyProcess, proxy_config

from .ports import free_port_block
from .rawclient import RawClient

DEADLINE = 60.0  # the proxy polls every few seconds; a loaded machine may take longer


class TlsClient(RawClient):
    """RawClient over TLS, verifying the proxy against `cafile`."""

    def __init__(self, port: int, cafile: Path):
        context = ssl.create_default_context(cafile=str(cafile))
        raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        try:
            self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        except BaseException:
            raw.close()
            raise

    def certificate(self) -> bytes:
        der = self.sock.getpeercert(binary_form=True)  # type: ignore[attr-defined]
        assert der
        return der


def _metadata(client: RawClient, correlation_id: int) -> Any:
    """A Metadata request through the proxy to the brokers: the connection works end to end."""
    request = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    got, response = client.request(3, 12, correlation_id, request)
    assert got == correlation_id and response.brokers, response
    return response


@dataclass
class Setup:
    workdir: Path
    ca: trustme.CA
    cafile: Path  # what TLS clients of `front` trust
    certfile: Path  # front's certificate and key (one PEM)
    front: ProxyProcess
    chain: ProxyProcess
    chain_cafile: Path  # what `chain` trusts upstream

    def port(self, process: ProxyProcess) -> int:
        return int(process.bootstrap.rpartition(":")[2])


def _issue(ca: trustme.CA, path: Path) -> bytes:
    """A new certificate for 127.0.0.1 written over `path` in place (as a rotation does); its DER."""
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(path))
    return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


@pytest.fixture(scope="module")
def setup(kafka_cluster, tmp_path_factory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("reload")
    ca = trustme.CA(organization_name="vcproxy reload test CA")
    cafile, certfile, chain_cafile = workdir / "ca.pem", workdir / "front.pem", workdir / "chain-ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    ca.cert_pem.write_to_path(str(chain_cafile))
    _issue(ca, certfile)
    listeners = {"security_protocol": "SSL", "tls": {"certfile": str(certfile)}}
    front = ProxyProcess(
        proxy_config(kafka_cluster.bootstrap, free_port_block(), listeners=listeners), workdir, name="front"
    )
    front.start(timeout=120)
    upstream = {"security_protocol": "SSL", "tls": {"cafile": str(chain_cafile)}}
    chain = ProxyProcess(proxy_config(front.bootstrap, free_port_block(), upstream=upstream), workdir, name="chain")
    try:
        chain.start(timeout=120)
        yield Setup(workdir, ca, cafile, certfile, front, chain, chain_cafile)
    finally:
        chain.stop()
        front.stop()


def _wait(condition: Callable[[], Any], what: str, process: ProxyProcess, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = condition()
        except (OSError, ConnectionError, AssertionError):
            result = None
        if result:
            return result
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}\n{process.log_tail()}"
        time.sleep(0.1)


def _logged(process: ProxyProcess, offset: int, text: str, timeout: float = DEADLINE) -> str:
    """The first log line after `offset` holding `text`."""

    def line() -> str | None:
        for candidate in process.log_path.read_text(errors="replace")[offset:].splitlines():
            if text in candidate:
                return candidate
        return None

    return _wait(line, f"{text!r} in {process.log_path}", process, timeout)


def _log_size(process: ProxyProcess) -> int:
    return len(process.log_path.read_text(errors="replace"))


def _alive(process: ProxyProcess) -> None:
    assert process.proc is not None and process.proc.poll() is None, f"proxy died:\n{process.log_tail()}"


def test_rotated_listener_certificate_is_presented_to_new_clients_only(setup):
    port = setup.port(setup.front)
    with TlsClient(port, setup.cafile) as before:
        _metadata(before, 1)
        old = before.certificate()
        offset = _log_size(setup.front)
        new = _issue(setup.ca, setup.certfile)
        assert new != old

        def presented() -> bool:
            with TlsClient(port, setup.cafile) as after:
                return after.certificate() == new

        _wait(presented, "a new TLS client sees the new certificate", setup.front)
        line = _logged(setup.front, offset, "configuration reloaded:")
        assert f"listeners.tls.certfile ({setup.certfile})" in line
        # The connection opened before the rotation is still up, on its own handshake, and still works.
        assert before.certificate() == old
        for i in range(2, 5):
            _metadata(before, i)
    _alive(setup.front)


def _rewrite_unnoticed(path: Path, config: dict[str, Any]) -> None:
    """Write `config` over `path` keeping its inode, size and mtime, so that only SIGHUP can reveal it."""
    before = path.stat()
    text = yaml.safe_dump(config, sort_keys=False)
    assert len(text) <= before.st_size - 2, "the original config needs its padding"
    text += "#" * (before.st_size - len(text) - 1) + "\n"
    with path.open("r+") as f:  # in place: same inode
        f.write(text)
        f.truncate()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    stat = path.stat()
    assert (stat.st_ino, stat.st_size, stat.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def test_sighup_applies_an_edit_at_once(setup):
    front = setup.front
    # Pad the config so that an edit of the same size can be written without a stamp change.
    offset = _log_size(front)
    front.config_path.write_text(yaml.safe_dump(front.config, sort_keys=False) + "#" * 200 + "\n")
    _logged(front, offset, "configuration reloaded: nothing changed")  # the padding is seen by the poll
    offset = _log_size(front)
    edited = {**front.config, "logging": {"level": "DEBUG"}}
    _rewrite_unnoticed(front.config_path, edited)
    assert front.proc is not None  # the poll cannot see the edit: SIGHUP must apply it
    front.proc.send_signal(signal.SIGHUP)
    _logged(front, offset, "received SIGHUP: reloading the configuration", timeout=15)
    line = _logged(front, offset, "configuration reloaded: logging.level", timeout=15)
    assert line.endswith("configuration reloaded: logging.level")
    front.config = edited
    _alive(front)


def test_an_unchangeable_edit_is_refused_and_the_proxy_keeps_serving(setup):
    front = setup.front
    port = setup.port(front)
    offset = _log_size(front)
    moved = {**front.config, "listeners": {**front.config["listeners"], "bootstrap_port": port + 1000}}
    front.config_path.write_text(yaml.safe_dump(moved, sort_keys=False))
    line = _logged(front, offset, "configuration reload refused")
    assert "listeners.bootstrap_port: the listeners are bound and their protocol chosen at start" in line
    assert "the running configuration is kept" in line
    with TlsClient(port, setup.cafile) as client:  # still on the old port, with the running config
        _metadata(client, 1)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port + 1000), timeout=5).close()
    # Put the file back: applied (nothing to change), and the proxy is as before.
    offset = _log_size(front)
    front.config_path.write_text(yaml.safe_dump(front.config, sort_keys=False))
    _logged(front, offset, "configuration reloaded: nothing changed")
    _alive(front)


def test_new_upstream_connections_use_a_rotated_upstream_ca(setup):
    """front's certificate moves to a new CA: chain fails to reach it until chain's CA file follows; a
    client connection of chain opened before both changes keeps working throughout."""
    chain_port = setup.chain.bootstrap
    new_ca = trustme.CA(organization_name="vcproxy reload test CA 2")
    with RawClient(chain_port) as before:
        _metadata(before, 1)
        offset = _log_size(setup.chain)
        front_offset = _log_size(setup.front)
        _issue(new_ca, setup.certfile)
        _logged(setup.front, front_offset, f"listeners.tls.certfile ({setup.certfile})")
        _logged(setup.chain, offset, "certificate verify failed")  # chain's old CA refuses the new certificate
        new_ca.cert_pem.write_to_path(str(setup.chain_cafile))
        line = _logged(setup.chain, offset, "configuration reloaded:")
        assert f"upstream.tls.cafile ({setup.chain_cafile})" in line

        def reachable() -> bool:
            with RawClient(chain_port, timeout=10) as after:
                return bool(_metadata(after, 1))

        _wait(reachable, "a new client of chain reaches the brokers through front", setup.chain)
        for i in range(2, 5):
            _metadata(before, i)
    _alive(setup.chain)
