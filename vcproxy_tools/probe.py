"""`vcproxy probe`: is a proxy (or a broker) answering? For `helm test`, container health checks and
scripts: one Kafka ApiVersions round trip (answered before any login), or one HTTP GET of a health path.
Exit 0 when answered, 1 when not, with one line saying why."""

from __future__ import annotations

import argparse
import socket
import ssl
import struct
import sys
import urllib.error
import urllib.request

from proxy.protocol.apikey import ApiKey


def api_versions(host: str, port: int, timeout: float, tls: ssl.SSLContext | None, server_name: str | None) -> int:
    """The number of APIs a Kafka listener advertises (ApiVersions v0: no login, any server version)."""
    raw = socket.create_connection((host, port), timeout=timeout)
    with raw:
        sock: socket.socket = raw
        if tls is not None:
            sock = tls.wrap_socket(raw, server_hostname=server_name or host)
        header = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 1, -1)  # key, version, correlation id, null client id
        sock.sendall(struct.pack(">i", len(header)) + header)
        size = struct.unpack(">i", _read(sock, 4))[0]
        if not 10 <= size <= 1 << 20:
            raise ValueError(f"not a Kafka response (size {size})")
        body = _read(sock, size)
        correlation, error, count = struct.unpack(">ihi", body[:10])
        if correlation != 1 or error != 0:
            raise ValueError(f"ApiVersions answered with correlation id {correlation}, error {error}")
        return count


def _read(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by the peer")
        out += chunk
    return bytes(out)


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    if not args.tls:
        return None
    context = ssl.create_default_context(cafile=args.cafile)
    if args.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _run(args: argparse.Namespace) -> int:
    try:
        if args.target.startswith(("http://", "https://")):
            with urllib.request.urlopen(args.target, timeout=args.timeout) as response:
                print(f"{args.target}: {response.status}")
            return 0
        host, _, port = args.target.rpartition(":")
        if not host or not port.isdigit():
            print(f"vcproxy probe: {args.target!r} is neither HOST:PORT nor an http(s) URL", file=sys.stderr)
            return 2
        count = api_versions(host, int(port), args.timeout, _tls_context(args), args.server_name)
        print(f"{args.target}: ApiVersions answered ({count} APIs)")
        return 0
    except (OSError, ValueError, urllib.error.URLError) as exc:
        print(f"vcproxy probe: {args.target}: {exc}", file=sys.stderr)
        return 1


def register(sub: argparse._SubParsersAction) -> None:
    probe = sub.add_parser(
        "probe",
        help="check that a Kafka listener (or a health URL) answers",
        description="Send one ApiVersions request to HOST:PORT (answered before any login) or GET an http(s) "
        "URL such as http://127.0.0.1:9404/readyz. Exit 0 when answered, 1 when not: for `helm test`, "
        "container health checks and scripts.",
    )
    probe.add_argument("target", help="HOST:PORT of a Kafka listener, or an http(s):// URL")
    probe.add_argument("--tls", action="store_true", help="connect with TLS (SSL and SASL_SSL listeners)")
    probe.add_argument("--cafile", help="CA bundle for the listener's certificate (default: the system's)")
    probe.add_argument("--server-name", help="TLS server name to send (SNI), default the host")
    probe.add_argument("--insecure", action="store_true", help="with --tls: do not verify the certificate")
    probe.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    probe.set_defaults(func=_run)
