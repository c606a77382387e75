"""The fork server the suite starts its proxies from (vcproxy_tools/proxy_forks.py): a forked proxy gets the
request's arguments, working directory, environment and log, and its end is reported as Popen reports one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.polling import until
from vcproxy_tools.process import proxy_config
from vcproxy_tools.proxy_forks import ForkServer


@pytest.fixture
def forks():
    server = ForkServer()
    yield server
    server.close()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its new parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_bad_config_exits_2_naming_the_file_relative_to_the_requests_directory(forks, tmp_path):
    (tmp_path / "bad.yaml").write_text("listeners: [\n")
    log = tmp_path / "proxy.log"
    child = forks.spawn(["serve", "--config", "bad.yaml"], tmp_path, dict(os.environ), log)
    assert child.wait(60) == 2 and child.poll() == 2
    assert "bad.yaml" in log.read_text()
    assert forks.children_cpu > 0


def test_a_running_proxy_is_waited_for_signalled_and_killed(forks, tmp_path):
    # Nothing listens upstream: the proxy keeps trying, and runs until told.
    config = proxy_config("127.0.0.1:9", _port())
    (tmp_path / "proxy.yaml").write_text(yaml.safe_dump(config))
    log = tmp_path / "proxy.log"
    child = forks.spawn(["serve", "--config", "proxy.yaml"], tmp_path, dict(os.environ), log)
    until(lambda: log.exists() and "listening on" in log.read_text(), "the proxy to listen", timeout=30)
    assert Path(f"/proc/{child.pid}/cwd").resolve() == tmp_path.resolve()
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.2)
    child.kill()
    assert child.wait(30) == -signal.SIGKILL
    child.kill()  # after its end: nothing is signalled


def test_closing_the_server_stops_the_proxies_it_forked(tmp_path):
    server = ForkServer()
    (tmp_path / "proxy.yaml").write_text(yaml.safe_dump(proxy_config("127.0.0.1:9", _port())))
    child = server.spawn(["serve", "--config", "proxy.yaml"], tmp_path, dict(os.environ), tmp_path / "proxy.log")
    assert child.poll() is None
    server.close()
    until(lambda: _gone(child.pid), "the proxy to stop with its server", timeout=30)
