"""A small blocking Kafka-protocol client for `vcproxy virtual-clusters`: connect, log in the way Kafka's
tools do (`--command-config`), ask ApiVersions, send one management RPC, read its answer.

Blocking sockets, no event loop: the tool makes a handful of round trips and exits.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from proxy import __version__
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.framing import frame
from proxy.protocol.headers import encode_request_header, response_body_offset

MAX_RESPONSE = 100 * 1024 * 1024  # a management answer is small; a bigger length prefix is not Kafka
CLIENT_ID = "vcproxy-virtual-clusters"
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class ConfigProblem(ValueError):
    """A --command-config file that cannot be used: the message names the file, the key and why."""


# As Kafka's clients do (reconnect.backoff.ms), a connection lost before the command's request was
# sent is opened again, a few times, with a growing pause: on a busy machine a login can miss the
# proxy's deadline once. A refused login or a bad TLS certificate is not retried.
TRIES = 3
BACKOFF_SECONDS = 1.0  # then 2 s
# The APIs every connection uses: ApiVersions v3, SaslHandshake v1, SaslAuthenticate v2.
_SETUP_APIS = ((18, 3), (17, 1), (36, 2))


class ConnectError(OSError):
    """The proxy cannot be reached, or the login failed; `retriable` when another try may work."""

    def __init__(self, message: str, retriable: bool = False):
        super().__init__(message)
        self.retriable = retriable


@dataclass(frozen=True)
class Login:
    protocol: str = "PLAINTEXT"  # PLAINTEXT, SASL_PLAINTEXT, SASL_SSL, SSL
    mechanism: str | None = None  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    username: str | None = None
    password: str | None = None
    cafile: str | None = None
    cadata: str | None = None  # PEM certificates given inline (ssl.truststore.certificates)
    certfile: str | None = None
    keyfile: str | None = None
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def read_properties(text: str) -> dict[str, str]:
    """Java properties: `key=value` or `key: value`, # and ! comments, backslash line continuations."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        parts = re.split(r"\s*[=:]\s*|\s+", line, maxsplit=1)
        key, value = parts[0], parts[1] if len(parts) > 1 else ""
        props[key] = value
    return props


def login_from(path: Path | None) -> Login:
    if path is None:
        return Login()
    try:
        props = read_properties(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigProblem(f"{path}: cannot read: {exc.strerror or exc}") from exc
    where = str(path)

    def bad(key: str, why: str) -> ConfigProblem:
        return ConfigProblem(f"{where}: {key}: {why}")

    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise bad("security.protocol", f"{protocol!r} is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    fields: dict[str, Any] = {"protocol": protocol}
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise bad("sasl.mechanism", f"{mechanism!r} is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
        jaas = props.get("sasl.jaas.config")
        if not jaas:
            raise bad("sasl.jaas.config", "missing (a PlainLoginModule or ScramLoginModule with username and password)")
        options = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _JAAS.findall(jaas)}
        if "username" not in options or "password" not in options:
            raise bad("sasl.jaas.config", 'needs username="..." and password="..."')
        fields.update(mechanism=mechanism, username=options["username"], password=options["password"])
    if protocol.endswith("SSL"):
        store_type = props.get("ssl.truststore.type", "PEM").upper()
        if "ssl.truststore.certificates" in props:
            fields["cadata"] = props["ssl.truststore.certificates"]
        elif "ssl.truststore.location" in props:
            if store_type != "PEM":
                raise bad("ssl.truststore.type", f"{store_type} trust stores are not read here: use PEM")
            fields["cafile"] = props["ssl.truststore.location"]
        if "ssl.keystore.location" in props or "ssl.keystore.certificate.chain" in props:
            if props.get("ssl.keystore.type", "PEM").upper() != "PEM":
                raise bad("ssl.keystore.type", "only PEM key stores are read here")
            fields["certfile"] = props.get("ssl.keystore.location") or _pem_file(
                props["ssl.keystore.certificate.chain"]
            )
            fields["keyfile"] = _pem_file(props["ssl.keystore.key"]) if "ssl.keystore.key" in props else None
        fields["check_hostname"] = props.get("ssl.endpoint.identification.algorithm", "https") != ""
    return Login(**fields)


def _pem_file(pem: str) -> str:
    """Inline PEM (ssl.keystore.certificate.chain / .key) as a private temporary file for ssl."""
    import os
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".pem")
    with os.fdopen(fd, "w") as fh:
        fh.write(pem.replace("\\n", "\n"))
    return name


def prepare(login: Login, apis: Iterable[tuple[int, int]] = ()) -> None:
    """Load and build what a connection will use (the schemas of its APIs and their codecs, the SCRAM
    library), before it connects: a proxy gives a connection only so long to log in."""
    for key, version in (*_SETUP_APIS, *apis):
        api_info(key)
        codec.prepare(request_type(key, version))
        codec.prepare(response_type(key, version))
    if login.mechanism is not None and login.mechanism.startswith("SCRAM-"):
        import scramp  # noqa: F401  (imported here for its cost; used in _authenticate)


class Connection:
    """One logged-in connection to a proxy (or broker).

    `apis`: the (api key, version) pairs the caller will send, prepared before connecting."""

    def __init__(
        self,
        bootstrap: str,
        login: Login,
        timeout: float = 30.0,
        *,
        apis: Iterable[tuple[int, int]] = (),
        tries: int = TRIES,
        backoff: float = BACKOFF_SECONDS,
    ):
        self.login = login
        self.timeout = timeout
        self._correlation = 0
        self._stage: str | None = None  # "ApiVersions" or "login" while the connection is being set up
        self.retried: list[ConnectError] = []  # why each failed try failed
        prepare(login, apis)
        for attempt in range(1, tries + 1):
            try:
                self._open(bootstrap)
                return
            except ConnectError as exc:
                self.retried.append(exc)
                if not exc.retriable or attempt == tries:
                    if attempt == 1:
                        raise
                    raise ConnectError(f"{exc} ({attempt} tries)", exc.retriable) from exc
            time.sleep(backoff * 2 ** (attempt - 1))

    def _open(self, bootstrap: str) -> None:
        self.sock = self._connect(bootstrap)
        self._opened = time.monotonic()
        try:
            self._stage = "ApiVersions"
            self.versions = self._api_versions()
            if self.login.sasl:
                self._stage = "login"
                self._authenticate()
                self.versions = self._api_versions()  # what this principal may use, now that it is known
            self._stage = None
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connect(self, bootstrap: str) -> socket.socket:
        errors = []
        retriable = False
        for server in bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            try:
                sock = socket.create_connection((host.strip("[]"), int(port)), timeout=self.timeout)
            except ConnectionRefusedError:
                errors.append(f"{server}: connection refused (is a proxy listening there?)")
                retriable = True
                continue
            except TimeoutError:
                errors.append(f"{server}: no connection within {self.timeout:g} s")
                retriable = True
                continue
            except (OSError, ValueError) as exc:
                errors.append(f"{server}: {exc}")
                retriable = retriable or isinstance(exc, ConnectionError)
                continue
            if self.login.tls:
                context = ssl.create_default_context(cafile=self.login.cafile, cadata=self.login.cadata)
                context.check_hostname = self.login.check_hostname
                if self.login.certfile:
                    context.load_cert_chain(self.login.certfile, self.login.keyfile)
                try:
                    sock = context.wrap_socket(sock, server_hostname=host.strip("[]"))
                except ssl.SSLCertVerificationError as exc:
                    sock.close()
                    errors.append(f"{server}: TLS: the proxy's certificate does not verify: {exc.verify_message}")
                    continue
                except (OSError, ssl.SSLError) as exc:
                    sock.close()
                    # A handshake cut off (EOF, reset) is the transport; a refused one is the setup.
                    cut = isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError, TimeoutError))
                    errors.append(f"{server}: TLS handshake failed: {exc}")
                    retriable = retriable or cut
                    continue
            return sock
        raise ConnectError("cannot connect: " + "; ".join(errors), retriable)

    def request(self, api_key: int, version: int, body: Any) -> Any:
        self._correlation += 1
        info = api_info(api_key)
        assert info is not None
        header = encode_request_header(
            api_key, version, self._correlation, CLIENT_ID, info.request_header_version(version)
        )
        try:
            self.sock.sendall(frame(header + codec.encode(body)))
            raw = self._read_frame()
        except (OSError, TimeoutError) as exc:
            raise self._lost(info.name, exc) from exc
        if int.from_bytes(raw[4:8], "big", signed=True) != self._correlation:
            raise ConnectError("the server answered another request (correlation id mismatch)")
        offset = response_body_offset(raw, info.response_header_version(version))
        response, _ = codec.decode(response_type(api_key, version), raw, offset)
        return response

    def _lost(self, api: str, exc: BaseException) -> ConnectError:
        """A connection lost with a request in flight, named by when it was lost."""
        if isinstance(exc, ConnectError):  # an answer that is not Kafka's
            return exc
        how = f"no answer within {self.timeout:g} s" if isinstance(exc, TimeoutError) else str(exc)
        after = time.monotonic() - self._opened
        if self._stage == "login":
            return ConnectError(
                f"the proxy closed the connection during login, {after:.1f} s after it opened ({how}): a proxy "
                "ends a login that takes longer than its authentication_timeout_ms (10 s unless configured)",
                retriable=True,
            )
        if self._stage is not None:
            return ConnectError(f"connection lost during {self._stage}, {after:.1f} s after it opened: {how}", True)
        # The command's own request: it may have been applied, so it is not sent again.
        return ConnectError(f"connection lost during {api} (it may or may not have been applied): {how}")

    def _read_frame(self) -> bytes:
        size = int.from_bytes(self._read(4), "big", signed=True)
        if not 4 <= size <= MAX_RESPONSE:
            raise ConnectError(f"not a Kafka response (length {size})")
        return size.to_bytes(4, "big") + self._read(size)

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionResetError("the server closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        request = ApiVersionsRequest(
            client_software_name="vcproxy-virtual-clusters", client_software_version=__version__
        )
        response = self.request(18, 3, request)
        if int(response.error_code) != 0:
            raise ConnectError(f"ApiVersions failed with error {int(response.error_code)}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    def _authenticate(self) -> None:
        login = self.login
        assert login.mechanism is not None and login.username is not None and login.password is not None
        who = f"{login.mechanism} as {login.username}"
        handshake = self.request(17, 1, SaslHandshakeRequest(mechanism=login.mechanism))
        if int(handshake.error_code) != 0:
            raise ConnectError(f"login {who} refused: the server offers {list(handshake.mechanisms)}")
        if login.mechanism == "PLAIN":
            tokens = [f"\0{login.username}\0{login.password}".encode()]
            self._exchange(tokens, who)
            return
        from scramp import ScramClient

        client = ScramClient([login.mechanism], login.username, login.password)
        first = self._exchange([client.get_client_first().encode()], who)
        client.set_server_first(first.decode())
        final = self._exchange([client.get_client_final().encode()], who)
        try:
            client.set_server_final(final.decode())
        except Exception as exc:  # scramp raises ScramException: the server did not prove it knows the key
            raise ConnectError(f"login {who}: the server's SCRAM proof is wrong") from exc

    def _exchange(self, tokens: list[bytes], who: str) -> bytes:
        answer = b""
        for token in tokens:
            response = self.request(36, 2, SaslAuthenticateRequest(auth_bytes=token))
            if int(response.error_code) != 0:
                raise ConnectError(f"login {who} failed: {response.error_message or 'authentication failed'}")
            answer = bytes(response.auth_bytes)
        return answer
