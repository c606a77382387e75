"""The command-line tools on a busy machine (issue 24): they load only the schemas a command uses,
before connecting, and a connection that cannot be set up is retried a bounded number of times with
a message that names the cause. (A login closed at the proxy's deadline, then retried, is in
tests/integration/test_availability.py.)"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proxy.protocol import apis
from vcproxy_tools.admin_client import ConnectError, Connection, Login

ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter, as `vcproxy virtual-clusters list` runs: the parser (every tool's module),
# then everything the connection prepares, then one management request encoded with its header.
_TOOL_START = textwrap.dedent(
    """
    import json, sys
    from proxy.serve import without_test_tools
    from vcproxy_tools.cli import build_parser
    without_test_tools()
    build_parser().parse_args(["virtual-clusters", "list", "--bootstrap-server", "h:1"])
    from proxy.protocol import management as m
    from proxy.protocol.apikey import ApiKey
    from vcproxy_tools.admin_client import Login, prepare
    from proxy.protocol import codec
    from proxy.protocol.apis import api_info
    from proxy.protocol.headers import encode_request_header
    prepare(Login("SASL_SSL", "SCRAM-SHA-512", "u", "p"), [(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS, 0)])
    request = m.DescribeVirtualClustersRequest(virtual_clusters=())
    info = api_info(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS)
    encode_request_header(ApiKey.DESCRIBE_VIRTUAL_CLUSTERS, 0, 1, "t", info.request_header_version(0))
    codec.encode(request)
    schemas = [name for name in sys.modules if name.startswith("kio.schema")]
    print(json.dumps({"schemas": len(schemas), "hypothesis": sys.modules.get("hypothesis") is not None}))
    """
)


def test_a_tool_loads_only_the_schemas_of_its_apis():
    done = subprocess.run(
        [sys.executable, "-c", _TOOL_START], capture_output=True, text=True, cwd=ROOT, timeout=300, check=True
    )
    seen = json.loads(done.stdout.splitlines()[-1])
    # The server's table loads every request schema (~1000 kio.schema modules); a tool's handful of
    # APIs (ApiVersions, SaslHandshake, SaslAuthenticate and the ones it parses at import) far fewer.
    assert seen["schemas"] < 150, seen
    assert seen["hypothesis"] is False  # kio's optional test-tool import, not paid by a tool


def test_one_api_loads_only_its_own_schemas():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from proxy.protocol.apis import api_info; info = api_info(36); "
            "print(info.first_flexible, info.max_version, "
            "sorted({n.split('.')[2] for n in sys.modules if n.startswith('kio.schema.') and n.count('.') > 2}))",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    )
    assert done.stdout.split(" ", 2)[:2] == ["2", "2"]  # SaslAuthenticate: flexible from v2
    assert "produce" not in done.stdout and "fetch" not in done.stdout


def test_the_server_table_is_unchanged():
    table = apis.known_apis()
    assert len(table) > 80
    for key, info in table.items():
        assert apis.api_info(key) == info
    assert apis.api_info(-5) is None
    assert table[1].name == "fetch" and table[1].first_flexible == 12  # Fetch: flexible from v12


def _closed_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    return sock, sock.getsockname()[1]


def test_a_refused_connection_is_retried_then_named():
    sock, port = _closed_port()
    with sock, pytest.raises(ConnectError) as caught:
        Connection(f"127.0.0.1:{port}", Login(), timeout=5, backoff=0)
    message = str(caught.value)
    assert f"127.0.0.1:{port}: connection refused (is a proxy listening there?)" in message
    assert message.endswith("(3 tries)")
    assert caught.value.retriable


def test_a_bad_address_is_not_retried():
    with pytest.raises(ConnectError) as caught:
        Connection("127.0.0.1:notaport", Login(), timeout=5, backoff=0)
    assert "tries" not in str(caught.value) and not caught.value.retriable
