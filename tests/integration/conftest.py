"""The proxy in front of the session's Kafka cluster, as a real `vcproxy serve` process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from vcproxy_tools.process import ProxyProcess, proxy_config

from ..gobuild import go_build
from . import librdkafka, tool_jvm
from .ports import free_port_block


@pytest.fixture(scope="session", autouse=True)
def warm_tool_jvm(tmp_path_factory) -> Iterator[None]:
    """Kafka's admin tools in one warm JVM for this test process (tool_jvm.py); started at its first call."""
    if not tool_jvm.enabled():
        yield
        return
    jvm = tool_jvm.ToolJvm(tmp_path_factory.mktemp("tool-jvm"), os.environ.get("VCPROXY_KAFKA_VERSION") or None)
    tool_jvm.use(jvm)
    yield
    tool_jvm.use(None)
    jvm.stop()


@pytest.fixture(scope="session")
def proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("proxy")
    process = ProxyProcess(proxy_config(kafka_cluster.bootstrap, free_port_block()), workdir)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def proxy_bootstrap(proxy: ProxyProcess) -> str:
    assert proxy.proc is not None and proxy.proc.poll() is None, f"proxy died:\n{proxy.log_tail()}"
    return proxy.bootstrap


@pytest.fixture(scope="session")
def go_client(tmp_path_factory) -> Path:
    """The franz-go tenant client (tests/integration/go), built once per session."""
    return go_build(Path(__file__).parent / "go", tmp_path_factory.mktemp("go") / "tenantclient")


def pytest_terminal_summary(terminalreporter, config) -> None:
    """librdkafka's suite three ways (test_librdkafka_suite.py: `make compat`, one process), as the table of
    docs/compatibility.md. franz-go's table is printed by tests/conftest.py, from report properties."""
    table = config.stash.get(librdkafka.REPORT_KEY, None)
    if table:
        terminalreporter.section("librdkafka " + librdkafka.VERSION + " tests: direct, proxy, virtual cluster")
        terminalreporter.write_line(table)
