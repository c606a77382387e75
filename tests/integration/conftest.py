"""The proxy in front of the session's Kafka cluster, as a real `vcproxy serve` process."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from proxy.process import ProxyProcess, proxy_config

PROXY_PORT = int(os.environ.get("VCPROXY_TEST_PROXY_PORT", "29192"))


@pytest.fixture(scope="session")
def proxy(kafka_cluster, tmp_path_factory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("proxy")
    process = ProxyProcess(proxy_config(kafka_cluster.bootstrap, PROXY_PORT), workdir)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def proxy_bootstrap(proxy: ProxyProcess) -> str:
    assert proxy.proc is not None and proxy.proc.poll() is None, f"proxy died:\n{proxy.log_tail()}"
    return proxy.bootstrap
