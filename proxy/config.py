"""The proxy's YAML configuration, validated at start.

Every error names the file, the key path and the reason (pydantic's ``extra="forbid"`` turns an
unknown key into an error instead of a silently ignored typo).
"""

from __future__ import annotations

import dataclasses
import re
import ssl
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .auth import SASL_MECHANISMS
from .auth.credentials import MAX_ITERATIONS, MIN_ITERATIONS, CredentialError, ScramCredential
from .errors import MalformedInput
from .tenancy.policy import LIMIT_MINIMUMS
from .tenancy.settings import SettingError, check_description, check_labels


class ConfigError(MalformedInput):
    """A configuration file that cannot be used; the message says where and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Port = Annotated[int, Field(ge=1, le=65535)]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
ScramMechanismName = Literal["SCRAM-SHA-256", "SCRAM-SHA-512"]


def _file(value: str | None, info: ValidationInfo) -> str | None:
    """A path relative to the config file's directory, which must exist."""
    if value is None:
        return None
    path = Path(value).expanduser()
    base = (info.context or {}).get("base_dir")
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    if not path.is_file():
        raise ValueError(f"file not found: {path}")
    return str(path)


def _uses_tls(protocol: str) -> bool:
    return protocol in ("SSL", "SASL_SSL")


def _uses_sasl(protocol: str) -> bool:
    return protocol.startswith("SASL_")


class ListenerTlsConfig(_Strict):
    certfile: str
    """PEM certificate chain the proxy presents to clients."""
    keyfile: str | None = None
    """PEM private key (unencrypted); omit if it is in certfile."""
    cafile: str | None = None
    """CA bundle that signs client certificates (needed unless client_auth is none)."""
    client_auth: Literal["required", "requested", "none"] = "none"
    """Kafka's ssl.client.auth: required = mTLS, requested = optional client certificate."""
    principal_mapping_rules: str | list[str] = "DEFAULT"
    """Kafka's ssl.principal.mapping.rules, mapping the certificate subject DN to a user name."""
    handshake_timeout_seconds: float = Field(10.0, gt=0)
    engine: Literal["auto", "native", "openssl"] = "auto"
    """Whose TLS serves the listener: native (rustls, in the compiled parts: the forwarder then serves TLS connections'
    plain requests too), openssl (Python's ssl: every request on the Python path), or auto (native where the compiled
    parts are built and load this certificate, key and CA; else openssl, said once at start)."""

    _files = field_validator("certfile", "keyfile", "cafile")(_file)

    @field_validator("principal_mapping_rules")
    @classmethod
    def _rules(cls, rules: str | list[str]) -> str | list[str]:
        from .auth.tls import parse_rules

        parse_rules(rules)  # PrincipalMappingError is a ValueError: reported with this key's path
        return rules

    @model_validator(mode="after")
    def _loadable(self) -> ListenerTlsConfig:
        if self.client_auth != "none" and self.cafile is None:
            raise ValueError(f"client_auth {self.client_auth} needs cafile (the CA that signs client certificates)")
        from .auth.tls import server_context

        try:
            server_context(self.certfile, self.keyfile, self.cafile, self.client_auth)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"cannot load the certificate, key or CA: {exc}") from None
        if self.engine == "native":
            from .auth.tls import native_context

            native_context(self)  # ValueError: why the compiled TLS cannot serve it
        return self


NODE_ID_PLACEHOLDER = "$(nodeId)"
_DNS_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


def _dns_name(name: str) -> bool:
    return len(name) <= 253 and all(_DNS_LABEL.fullmatch(label) for label in name.lower().split("."))


class ListenerSniConfig(_Strict):
    """One TLS port for the bootstrap and every broker: the broker is picked by the TLS server name (SNI)."""

    broker_host_pattern: str
    """Name of broker N, with $(nodeId) standing for N: e.g. broker-$(nodeId).kafka.example.com."""
    bootstrap_host: str | None = None
    """Name of the bootstrap; when set, a server name that is neither it nor a broker's is refused.
    When not set, such names (and clients that send none) get the bootstrap."""
    advertised_port: Port | None = None
    """Port clients are told to connect to (e.g. a load balancer's); default listeners.bootstrap_port."""

    @field_validator("broker_host_pattern")
    @classmethod
    def _pattern(cls, pattern: str) -> str:
        if pattern.count(NODE_ID_PLACEHOLDER) != 1:
            raise ValueError(
                f"must hold {NODE_ID_PLACEHOLDER} exactly once, e.g. broker-{NODE_ID_PLACEHOLDER}.example.com"
            )
        if not _dns_name(pattern.replace(NODE_ID_PLACEHOLDER, "0")):
            raise ValueError(f"{pattern!r} does not make DNS names (letters, digits, '-' and '.')")
        return pattern

    @field_validator("bootstrap_host")
    @classmethod
    def _bootstrap(cls, name: str | None) -> str | None:
        if name is not None and not _dns_name(name):
            raise ValueError(f"{name!r} is not a DNS name")
        return name


class ListenerConfig(_Strict):
    host: str = "127.0.0.1"
    """Address the listeners bind to (0.0.0.0 in containers)."""
    advertised_host: str | None = None
    """Host name clients are told to connect to; defaults to `host` (must not be 0.0.0.0 then)."""
    bootstrap_port: Port = 9192
    broker_port_base: Port | None = None
    """Broker with node id N is served on broker_port_base + N; default bootstrap_port + 1."""
    security_protocol: SecurityProtocol = "PLAINTEXT"
    """What clients speak to the proxy: SASL and TLS are terminated here."""
    sasl_mechanisms: list[SaslMechanism] = Field(default_factory=lambda: list(SASL_MECHANISMS), min_length=1)
    tls: ListenerTlsConfig | None = None
    """Certificate and client authentication for SSL and SASL_SSL listeners."""
    sni: ListenerSniConfig | None = None
    """SNI routing: bootstrap_port is then the one port for the bootstrap and every broker (needs TLS)."""
    refuse_unbound_principals: bool | None = None
    """Gone: with tenancy on, a principal in no virtual cluster (nor in kafka-cluster) is always refused.
    `true` is accepted (it is what happens); `false` is an error (docs/security.md#migration)."""
    unknown_principals: Literal["refuse", "relay"] = "refuse"
    """What a SASL login as a user not in `credentials.users` gets. `refuse`: a failed login, as for a wrong
    password. `relay`: its SASL exchange (and OAUTHBEARER's, then offered) goes unchanged to the broker on a
    connection of its own, without the proxy's login; the broker authenticates it and applies its own ACLs
    and quotas, and the proxy only relays (broker addresses rewritten; no VC, proxy ACLs or quotas). Needs a
    SASL listener and a SASL upstream. The proxy's own upstream user name is never relayed."""
    request_header_v3: bool = False
    """KIP-1313: advertise each API's next version with request header v3 and translate it for the
    brokers. Off by default: the KIP's version numbers are not fixed yet (docs/observability.md)."""

    @model_validator(mode="after")
    def _check(self) -> ListenerConfig:
        advertised = self.advertised_host or self.host
        if advertised in ("0.0.0.0", "::"):
            raise ValueError("advertised_host must be set when host is a wildcard address")
        if _uses_tls(self.security_protocol) and self.tls is None:
            raise ValueError(f"security_protocol {self.security_protocol} needs tls (certfile, keyfile)")
        if not _uses_tls(self.security_protocol) and self.tls is not None:
            raise ValueError(f"tls is set but security_protocol {self.security_protocol} does not use TLS")
        if len(set(self.sasl_mechanisms)) != len(self.sasl_mechanisms):
            raise ValueError("sasl_mechanisms lists a mechanism twice")
        if self.refuse_unbound_principals is False:
            raise ValueError(
                "refuse_unbound_principals: false is no longer possible: every principal is in a virtual cluster "
                "or in kafka-cluster, or is refused; remove the key (docs/security.md#migration)"
            )
        if self.unknown_principals == "relay" and not self.security_protocol.startswith("SASL_"):
            raise ValueError(
                "unknown_principals: relay needs a SASL listener (security_protocol SASL_PLAINTEXT or SASL_SSL), "
                f"not {self.security_protocol}: there is no login to relay"
            )
        if self.sni is not None:
            if not _uses_tls(self.security_protocol):
                raise ValueError(f"sni needs a TLS security_protocol (SSL or SASL_SSL), not {self.security_protocol}")
            if self.broker_port_base is not None:
                raise ValueError("broker_port_base is not used with sni (every broker is on bootstrap_port)")
        return self

    @property
    def effective_advertised_host(self) -> str:
        return self.advertised_host or self.host

    @property
    def effective_broker_port_base(self) -> int:
        return self.broker_port_base if self.broker_port_base is not None else self.bootstrap_port + 1


class UpstreamTlsConfig(_Strict):
    cafile: str | None = None
    """CA bundle that signs the brokers' certificates; the system CAs when omitted."""
    certfile: str | None = None
    """Client certificate for brokers that require one (ssl.client.auth=required)."""
    keyfile: str | None = None
    check_hostname: bool = True
    """False is Kafka's ssl.endpoint.identification.algorithm= (the chain is still verified)."""
    engine: Literal["auto", "native", "openssl"] = "auto"
    """Whose TLS the proxy's broker connections use: native (rustls: the forwarder then serves their plain requests),
    openssl (Python's ssl), or auto (native where the compiled parts are built and load these files, else openssl)."""

    _files = field_validator("cafile", "certfile", "keyfile")(_file)

    @model_validator(mode="after")
    def _loadable(self) -> UpstreamTlsConfig:
        if self.keyfile is not None and self.certfile is None:
            raise ValueError("keyfile needs certfile")
        from .auth.tls import client_context

        try:
            client_context(self.cafile, self.certfile, self.keyfile, self.check_hostname)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"cannot load the CA, certificate or key: {exc}") from None
        if self.engine == "native":
            from .auth.tls import native_client_context

            native_client_context(self)  # ValueError: why the compiled TLS cannot serve it
        return self


class UpstreamConfig(_Strict):
    bootstrap_servers: list[str] = Field(min_length=1)
    connect_timeout_seconds: float = Field(10.0, gt=0)
    metadata_refresh_seconds: float = Field(30.0, gt=0)
    security_protocol: SecurityProtocol = "PLAINTEXT"
    """How the proxy connects to the brokers, with its own credentials (not the clients')."""
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: str | None = None
    """File holding the password (trailing newline ignored); instead of sasl_password."""
    tls: UpstreamTlsConfig | None = None

    _password: str | None = PrivateAttr(None)
    _password_file = field_validator("sasl_password_file")(_file)

    @model_validator(mode="after")
    def _security(self) -> UpstreamConfig:
        protocol = self.security_protocol
        if not _uses_tls(protocol) and self.tls is not None:
            raise ValueError(f"tls is set but security_protocol {protocol} does not use TLS")
        sasl_keys = ("sasl_mechanism", "sasl_username", "sasl_password", "sasl_password_file")
        if not _uses_sasl(protocol):
            given = [k for k in sasl_keys if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} set but security_protocol {protocol} does not use SASL")
            return self
        if self.sasl_mechanism is None or not self.sasl_username:
            raise ValueError(f"security_protocol {protocol} needs sasl_mechanism and sasl_username")
        if (self.sasl_password is None) == (self.sasl_password_file is None):
            raise ValueError(f"security_protocol {protocol} needs exactly one of sasl_password, sasl_password_file")
        if self.sasl_password is not None:
            self._password = self.sasl_password.get_secret_value()
        else:
            assert self.sasl_password_file is not None
            try:
                text = Path(self.sasl_password_file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"cannot read sasl_password_file: {exc}") from None
            self._password = text.rstrip("\r\n")
        if not self._password:
            raise ValueError("the SASL password is empty")
        return self

    def password(self) -> str | None:
        """The upstream SASL password (from sasl_password or sasl_password_file)."""
        return self._password

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port(cls, servers: list[str]) -> list[str]:
        for server in servers:
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{server!r} is not host:port")
        return servers


class LimitsConfig(_Strict):
    """What one peer may cost the proxy (docs/security.md). Kafka's broker setting of the same name, where
    one exists, has the same meaning and default."""

    max_frame_bytes: int = Field(100 * 1024 * 1024, ge=1024)
    """Kafka's socket.request.max.bytes: the largest request once a client has logged in."""
    sasl_server_max_receive_size: int = Field(512 * 1024, ge=1024)
    """Kafka's sasl.server.max.receive.size: the largest frame before authentication."""
    receive_buffer_bytes: int = Field(1024 * 1024, ge=4096)
    """The most a connection's receive buffer grows to; it starts small and grows with traffic."""
    initial_buffer_bytes: int = Field(16 * 1024, ge=1024)
    """A new connection's receive buffer (per direction)."""
    # Tables every tenant fills, kept per process (proxy/tenancy/per_vc_lru.py): past a VC's bound its own least
    # recently used entry goes; past the total, one of the VC holding the most.
    max_fetch_sessions: int = Field(10_000, ge=1)
    """Fetch sessions (KIP-227) whose owning VC the proxy remembers, in all."""
    max_fetch_sessions_per_vc: int = Field(1_000, ge=1)
    """The same, of one VC (Kafka's max.incremental.fetch.session.cache.slots is per broker)."""
    max_placeholders: int = Field(10_000, ge=1)
    """Placeholders remembered for topic ids a VC named and does not own, in all."""
    max_placeholders_per_vc: int = Field(1_000, ge=1)
    """The same, of one VC."""
    max_regexes: int = Field(4096, ge=1)
    """Client topic regexes (KIP-848, KIP-1071) whose evaluation the proxy keeps, in all."""
    max_regexes_per_vc: int = Field(256, ge=1)
    """The same, of one VC."""
    drain_timeout_seconds: float = Field(10.0, ge=0)
    authentication_timeout_ms: int = Field(10_000, ge=1)
    """A connection that has not logged in this long after it opened is closed (SASL listeners)."""
    connections_max_idle_ms: int = Field(600_000, ge=1)
    """Kafka's connections.max.idle.ms: a connection with nothing in flight for this long is closed."""
    max_connections: int = Field(10_000, ge=1)
    """Kafka's max.connections: more connections than this are refused at accept."""
    max_connections_per_ip: int = Field(1_000, ge=1)
    """Kafka's max.connections.per.ip."""
    max_connection_creation_rate: float = Field(500.0, gt=0)
    """Kafka's max.connection.creation.rate, per second over all listeners: accepting waits beyond it."""
    max_in_flight_requests_per_connection: int = Field(100, ge=1)
    """Requests read from one client and not yet answered; the proxy stops reading that client beyond it."""
    connection_failed_authentication_delay_ms: int = Field(100, ge=0)
    """Kafka's connection.failed.authentication.delay.ms: a failed login is answered after this delay."""
    max_failed_authentications: int = Field(60, ge=1)
    """Failed logins per client address allowed in `failed_authentication_window_seconds`; beyond it, failures
    from the address are answered ten times later (docs/security.md#failed-logins)."""
    max_failed_authentications_per_user: int | None = Field(None, ge=1)
    """Failed logins per user name (from any address) in the window; beyond it, that user's password checks
    are paced to this many per window. Default: `max_failed_authentications`."""
    max_failed_authentications_per_ip_and_user: int | None = Field(None, ge=1)
    """Failed logins per (client address, user name) in the window; beyond it, that pair's password checks
    are paced to this many per window. Default: `max_failed_authentications`."""
    failed_authentication_window_seconds: float = Field(60.0, gt=0)
    failed_authentication_log_interval_ms: int = Field(10_000, ge=0)
    """Failed logins are logged once per (client address, user name, mechanism) per interval, with a count."""
    num_password_check_threads: int = Field(1, ge=1, le=64)
    """Threads per process for PLAIN password checks (a key derivation each); more checks wait their turn."""
    max_password_checks_per_ip: int = Field(1, ge=1)
    """Of those, how many one client address may use at once (its fair share); the rest waits, in turn."""


class LoggingConfig(_Strict):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


def _principal_list(principals: list[str]) -> list[str]:
    for principal in principals:
        kind, sep, name = principal.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"principal {principal!r} must be TYPE:NAME, e.g. User:alice")
    return principals


class TopicConfigRuleConfig(_Strict):
    """What tenants may set one topic config key to (a key `configs` does not list follows
    `allow_unlisted_configs`). A value passes when it is one of `values`, or a number within `min` and
    `max`; with none of these, any value (the broker still validates it)."""

    settable: bool = True
    """False: tenants may not set the key at all (the cluster's default applies)."""
    min: float | None = None
    """The smallest number allowed (e.g. segment.ms: 3600000)."""
    max: float | None = None
    """The largest number allowed."""
    values: list[str] | None = None
    """Values allowed besides the bounds (e.g. "-1"); without bounds, the only ones allowed (for a list
    config such as cleanup.policy, each comma-separated element)."""

    @model_validator(mode="after")
    def _bounds(self) -> TopicConfigRuleConfig:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self

    def build(self) -> Any:
        from .tenancy.policy import ConfigRule

        values = frozenset(self.values) if self.values is not None else None
        return ConfigRule(self.settable, self.min, self.max, values)


_CONFIG_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class TopicPolicyConfig(_Strict):
    """A virtual cluster's topic policy, like Kafka's CreateTopicPolicy and AlterConfigPolicy (proxy/tenancy/
    policy.py; docs/tenancy.md, "Topic policy"). `tenancy.topic_policy` is every VC's; a VC's seed entry may
    override any key of it (`configs` key by key). Unset: the safe default documented there."""

    configs: dict[str, TopicConfigRuleConfig] = {}
    """Topic config keys tenants may set and their bounds, merged key by key over the default's (which
    allows cleanup.policy, compression.*, retention.*, segment.ms >= 1 h, segment.bytes >= 16 MiB,
    max.message.bytes <= 8 MiB... and no flush.*, preallocate, index or tiered-storage settings)."""
    allow_unlisted_configs: bool = False
    """Keys no rule names: settable (true) or refused with POLICY_VIOLATION (false, the default)."""
    max_partitions_per_topic: int | None = Field(128, ge=LIMIT_MINIMUMS["max_partitions_per_topic"])
    """Partitions a topic may have (CreateTopics, CreatePartitions, Streams topics); null: no limit."""
    max_topics: int | None = Field(500, ge=LIMIT_MINIMUMS["max_topics"])
    """Topics a VC may have, links included (CreateTopics, Metadata auto-creation, Streams); null: no limit."""
    max_partitions: int | None = Field(5000, ge=LIMIT_MINIMUMS["max_partitions"])
    """Partitions a VC may have in all its topics; null: no limit."""

    @field_validator("configs")
    @classmethod
    def _keys(cls, configs: dict[str, TopicConfigRuleConfig]) -> dict[str, TopicConfigRuleConfig]:
        for key in configs:
            if not _CONFIG_KEY.match(key):
                raise ValueError(f"{key!r} is not a topic config name (lower case, digits, '.', '_', '-')")
        return configs

    def build(self, base: Any = None) -> Any:
        """The policy: this section's keys over `base` (a TopicPolicy; default the safe default)."""
        from .tenancy.policy import SAFE_DEFAULT

        base = base if base is not None else SAFE_DEFAULT
        fields = self.model_fields_set
        rules = dict(base.configs)
        rules.update({key: rule.build() for key, rule in self.configs.items()})
        return dataclasses.replace(
            base,
            configs=MappingProxyType(rules),
            **{
                name: getattr(self, name)
                for name in ("allow_unlisted_configs", "max_partitions_per_topic", "max_topics", "max_partitions")
                if name in fields
            },
        )


class StateLimitsConfig(_Strict):
    """What the state topic may hold (proxy/tenancy/limits.py; docs/state.md, "Limits"): the defaults of
    every VC, which a cluster operator may change per VC (`vcproxy virtual-clusters alter --config`).
    null for a count: no limit."""

    max_user_name_bytes: int = Field(256, ge=1, le=0x7FFF)
    """A SCRAM user name's length in UTF-8 bytes (Kafka's record field holds at most 32767)."""
    max_users: int | None = Field(1000, ge=0)
    """Users with a proxy credential per VC (and bound to no VC, for cluster-wide callers)."""
    max_acls: int | None = Field(1000, ge=0)
    """ACL bindings per VC."""
    max_client_ids: int | None = Field(1000, ge=0)
    """Client ids bound per VC."""
    max_quota_entities: int | None = Field(1000, ge=0)
    """Client quota entities per VC (and for the global levels)."""
    max_records: int | None = Field(100_000, ge=0)
    """Records in the whole state, cluster-wide (not settable per VC)."""
    max_record_bytes: int = Field(4096, ge=256, le=1 << 20)
    """One state record's key and value as written (not settable per VC)."""
    orphan_grace_seconds: float | None = Field(None, ge=0)
    """After this long the proxy deletes a physical topic a VC's DeleteTopics left behind; null (the
    default, as the KIP leaves deletion to administrators): never."""

    def build(self) -> Any:
        from .tenancy.limits import StateLimits

        return StateLimits(**self.model_dump())


class QuotaSharingConfig(_Strict):
    """Client quotas across replicas (docs/quotas.md, "Across replicas"): each replica reports what every
    quota entity used to the others through a topic on the upstream cluster, so that N replicas together
    hold an entity to its quota, not N times it."""

    enabled: bool = True
    """Off: each replica holds its own clients to each whole quota (right for one replica only)."""
    topic: str | None = Field(None, pattern=r"^[a-zA-Z0-9._-]{1,249}$")
    """The usage topic; default: the state topic's name + ".quota-usage". Created at start when missing
    (one partition, reports deleted after five minutes) and guarded like the state topic."""
    replicas: int = Field(1, ge=1, le=10_000)
    """How many replicas the deployment runs (the chart sets it). While the topic is slow or down, a
    replica holds its clients to 1/N of each quota, N the larger of this and the replicas it last heard."""
    report_interval_ms: int = Field(500, ge=50, le=10_000)
    """How often a replica reports its use; the others see it about this much later."""
    stale_after_ms: int = Field(3000, ge=100, le=600_000)
    """A replica whose own report has not come back from the topic this long falls back to its share."""

    @model_validator(mode="after")
    def _stale_after_reports(self) -> QuotaSharingConfig:
        if self.stale_after_ms < 2 * self.report_interval_ms:
            raise ValueError("stale_after_ms must be at least twice report_interval_ms (a report takes a while)")
        return self


class VirtualClusterSeedConfig(_Strict):
    """A virtual cluster to create if missing (ids are generated once, then kept in the state topic)."""

    name: str
    principals: list[str] = []
    """Principals bound to this VC, e.g. "User:alice" (moved here if bound elsewhere)."""
    client_ids: list[str] = []
    admins: list[str] = []
    """Principals that may describe and alter this VC with the management RPCs (`vcproxy virtual-clusters`)."""
    allow_everyone_if_no_acl_found: bool | None = None
    """What this VC's ACLs say of a resource no ACL names: allowed (true) or denied (false, like a broker's
    `allow.everyone.if.no.acl.found=false`). Unset: `tenancy.allow_everyone_if_no_acl_found`."""
    topic_policy: TopicPolicyConfig | None = None
    """This VC's topic policy: the keys given here override `tenancy.topic_policy`'s (configs key by key)."""
    delete_physical_topics: bool | None = None
    """Whether deleting this VC's last link to a physical topic deletes the topic too. Unset:
    `tenancy.delete_physical_topics`."""
    description: str | None = None
    """Free text shown by `vcproxy virtual-clusters describe` (showback)."""
    labels: dict[str, str] = {}
    """key: value labels for showback, e.g. {team: payments, cost-center: "42"}."""

    @field_validator("description")
    @classmethod
    def _description(cls, description: str | None) -> str | None:
        if description is None:
            return None
        try:
            return check_description("description", description)
        except SettingError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        try:
            return check_labels(labels)
        except SettingError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        from .tenancy.model import validate_vc_name

        validate_vc_name(name)
        return name

    _principals = field_validator("principals", "admins")(_principal_list)

    @field_validator("client_ids")
    @classmethod
    def _client_ids(cls, client_ids: list[str]) -> list[str]:
        if "" in client_ids:
            raise ValueError("a client id must not be empty")
        return client_ids


class TenancyConfig(_Strict):
    enabled: bool = False
    """Serve virtual clusters (KIP-1134) from the state topic; off: a transparent proxy."""
    state_topic: str = Field("__vcproxy_state", pattern=r"^[a-zA-Z0-9._-]{1,249}$")
    state_replication_factor: int | None = Field(None, ge=1)
    """Default min(3, brokers); only used when the proxy creates the state topic."""
    virtual_clusters: list[VirtualClusterSeedConfig] = []
    """Seed: created or re-bound at start, never deleted (see docs/state.md). Its per-VC settings are
    written to the state topic once; `vcproxy virtual-clusters alter --config` changes them at runtime."""
    auto_create_topics: bool = False
    """Metadata requests with AllowAutoTopicCreation create missing topics in the VC (needs the broker's
    auto.create.topics.enable); false: they get UNKNOWN_TOPIC_OR_PARTITION, as with auto-creation off."""
    delete_physical_topics: bool = False
    """DeleteTopics in a VC removes the VC's link (KIP-1134). True also deletes the physical topic when its
    last link goes; false (the KIP's default) keeps it, for an operator to delete from kafka-cluster
    (`vcproxy state orphans`). A VC's seed entry may say otherwise for that VC."""
    state_topic_readers: list[str] = []
    """Principals bound to no VC that may read and describe the state topic through the proxy (operators,
    e.g. "User:ops"). Nobody may write, delete or reconfigure it through the proxy."""
    create_state_topic: bool = True
    """Create the state topic at start when it is missing (a first start). False: a missing state topic is
    an error until an operator restores it (`vcproxy state import`). A running proxy never re-creates it."""
    state_check_interval_seconds: float = Field(5.0, gt=0, le=3600)
    """How often a running proxy checks that its state topic still exists, is compacted and is the one it
    replayed; when not, /readyz says why and topic changes in VCs are refused."""
    quota_sharing: QuotaSharingConfig = QuotaSharingConfig()
    """Replicas share what each client quota entity used (see QuotaSharingConfig)."""

    allow_everyone_if_no_acl_found: bool = True
    """Inside a VC, a resource that none of the VC's ACLs names is open to every principal of the VC (true,
    today's behaviour and Kafka's default with an authorizer that allows it) or closed (false); a VC's
    seed entry may say otherwise for that VC (see docs/acls.md)."""

    super_admins: list[str] = []
    """The bootstrap of the trust model: principals in kafka-cluster (the physical cluster) holding every
    right on every VC, e.g. "User:admin". Everyone else's rights are ACLs (docs/security.md). They must be
    bound to no VC, and User:ANONYMOUS cannot be one."""

    topic_policy: TopicPolicyConfig = TopicPolicyConfig()
    """What members of every VC may do with topics: config keys and bounds, partitions per topic, topics and
    partitions per VC (see TopicPolicyConfig; a VC's seed entry may override it)."""

    state_limits: StateLimitsConfig = StateLimitsConfig()
    """Users, ACLs, client ids and quota entities per VC, a user name's length, the state's records in all,
    and when orphaned physical topics are deleted (see StateLimitsConfig; per VC: a VC's settings)."""

    _readers = field_validator("state_topic_readers", "super_admins")(_principal_list)
    _policies: dict[str, Any] = PrivateAttr(default_factory=dict)

    def topic_policy_for(self, vc: str) -> Any:
        """A VC's topic policy (proxy/tenancy/policy.TopicPolicy): its seed entry's over the global one."""
        policy = self._policies.get(vc)
        if policy is None:
            policy = self._policies.get("")
            if policy is None:
                policy = self._policies[""] = self.topic_policy.build()
            for seed in self.virtual_clusters:
                if seed.name == vc and seed.topic_policy is not None:
                    policy = seed.topic_policy.build(policy)
            self._policies[vc] = policy
        return policy

    def delete_physical_topics_for(self, vc: str) -> bool:
        """A VC's choice for the physical topic of its last link (its seed entry, else the default)."""
        for seed in self.virtual_clusters:
            if seed.name == vc and seed.delete_physical_topics is not None:
                return seed.delete_physical_topics
        return self.delete_physical_topics

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        # An old config's key: an explicit error rather than a silent change of what deletes do.
        if isinstance(data, dict) and "delete_physical_topic_with_last_link" in data:
            raise ValueError(
                "delete_physical_topic_with_last_link was renamed delete_physical_topics (default false: "
                "deleting a topic in a VC removes only its link)"
            )
        return data

    def allow_if_no_acl(self, vc: str) -> bool:
        """A VC's choice for resources none of its ACLs names (its seed entry, else the default)."""
        for seed in self.virtual_clusters:
            if seed.name == vc and seed.allow_everyone_if_no_acl_found is not None:
                return seed.allow_everyone_if_no_acl_found
        return self.allow_everyone_if_no_acl_found

    @model_validator(mode="after")
    def _bound_once(self) -> TenancyConfig:
        seen: dict[tuple[str, str], str] = {}  # (kind, principal or client id) -> path of its first binding
        for i, vc in enumerate(self.virtual_clusters):
            here = f"virtual_clusters.{i}"
            first = seen.setdefault(("name", vc.name), here)
            if first != here:
                raise ValueError(f"{here}.name: virtual cluster {vc.name!r} is already defined at {first}")
            for kind, values in (("principals", vc.principals), ("client_ids", vc.client_ids)):
                for j, value in enumerate(values):
                    path = f"{here}.{kind}.{j}"
                    first = seen.setdefault((kind, value), path)
                    if first != path:
                        raise ValueError(f"{path}: {value!r} is already bound at {first} (one virtual cluster each)")
        for i, admin in enumerate(self.super_admins):
            if admin == "User:ANONYMOUS":
                raise ValueError(f"super_admins.{i}: User:ANONYMOUS is nobody's identity and cannot hold rights")
            if ("principals", admin) in seen:
                where = seen[("principals", admin)]
                raise ValueError(f"super_admins.{i}: {admin!r} is bound to a virtual cluster at {where}")
        return self


class ScramEntryConfig(_Strict):
    """One mechanism's SCRAM keys (RFC 5802), as printed by `vcproxy credentials add`."""

    salt: str
    iterations: int = Field(ge=MIN_ITERATIONS, le=MAX_ITERATIONS)
    stored_key: str
    server_key: str


class UserCredentialConfig(_Strict):
    """A user's salted credential; PLAIN logins are checked against the same keys."""

    scram_sha_256: ScramEntryConfig | None = Field(None, alias="SCRAM-SHA-256")
    scram_sha_512: ScramEntryConfig | None = Field(None, alias="SCRAM-SHA-512")

    @model_validator(mode="after")
    def _usable(self) -> UserCredentialConfig:
        entries = self.entries()
        if not entries:
            raise ValueError("needs a SCRAM-SHA-256 or SCRAM-SHA-512 entry (see `vcproxy credentials add`)")
        for mechanism, fields in entries.items():
            try:
                ScramCredential.from_fields(mechanism, fields)
            except CredentialError as exc:
                raise ValueError(f"{mechanism}: {exc}") from None
        return self

    def entries(self) -> dict[str, dict[str, Any]]:
        out = {}
        if self.scram_sha_256 is not None:
            out["SCRAM-SHA-256"] = self.scram_sha_256.model_dump()
        if self.scram_sha_512 is not None:
            out["SCRAM-SHA-512"] = self.scram_sha_512.model_dump()
        return out


class CredentialsConfig(_Strict):
    users: dict[str, UserCredentialConfig] = Field(default_factory=dict)
    """User name -> salted credential, for SASL listeners (never a plaintext password)."""
    users_file: str | None = None
    """A YAML file holding the same mapping as `users` (e.g. a Kubernetes Secret mounted as a file);
    instead of `users`."""

    _file_users: dict[str, UserCredentialConfig] = PrivateAttr(default_factory=dict)
    _users_file = field_validator("users_file")(_file)

    @model_validator(mode="after")
    def _load_users_file(self) -> CredentialsConfig:
        if self.users_file is None:
            return self
        if self.users:
            raise ValueError("set users or users_file, not both")
        self._file_users = _read_users_file(self.users_file)
        return self

    def all_users(self) -> dict[str, UserCredentialConfig]:
        return self._file_users if self.users_file is not None else self.users

    def as_mapping(self) -> dict[str, dict[str, dict[str, Any]]]:
        return {name: user.entries() for name, user in self.all_users().items()}


def _read_users_file(path: str) -> dict[str, UserCredentialConfig]:
    """The users of `credentials.users_file`; a problem names the file and the key within it."""
    from pydantic import TypeAdapter

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read users_file {path}: {exc}") from None
    if isinstance(data, dict) and set(data) == {"users"}:  # a copy of a config's credentials section
        data = data["users"]
    try:
        return TypeAdapter(dict[str, UserCredentialConfig]).validate_python(data or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise ValueError(f"users_file {path}: {where}: {reason}") from None


class DebugConfig(_Strict):
    tap_dir: str | None = None
    """Write every byte sent to each client into a file per connection (named after its virtual cluster).
    For debugging and the leak oracle test; never in production: it records message data."""


class TracingConfig(_Strict):
    """OpenTelemetry spans: one per request, plus connection and authentication (docs/observability.md)."""

    enabled: bool = False
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)
    """Share of requests traced (TraceIdRatioBased); connection and authentication spans are always kept."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP collector, e.g. http://127.0.0.1:4318 (/v1/traces is added when the URL has no path)."""
    jsonl_dir: str | None = None
    """Directory for OTLP JSON Lines files (traces.jsonl, rotated); relative to the working directory."""
    jsonl_max_bytes: int = Field(10 * 1024 * 1024, ge=4096)
    jsonl_keep: int = Field(10, ge=1)
    """Files kept in all, the one being written included."""

    @field_validator("otlp_endpoint")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s):// URL")
        return url

    @model_validator(mode="after")
    def _exporter(self) -> TracingConfig:
        if self.enabled and self.otlp_endpoint is None and self.jsonl_dir is None:
            raise ValueError("enabled tracing needs an exporter: otlp_endpoint, jsonl_dir or both")
        return self


class MetricsConfig(_Strict):
    """Prometheus /metrics and the /healthz and /readyz probes, on their own HTTP port."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: Port = 9404


class ProxyConfig(_Strict):
    listeners: ListenerConfig = ListenerConfig()
    upstream: UpstreamConfig
    credentials: CredentialsConfig = CredentialsConfig()
    limits: LimitsConfig = LimitsConfig()
    logging: LoggingConfig = LoggingConfig()
    tenancy: TenancyConfig = TenancyConfig()
    tracing: TracingConfig = TracingConfig()
    metrics: MetricsConfig = MetricsConfig()
    debug: DebugConfig = DebugConfig()

    @model_validator(mode="after")
    def _sasl_needs_users(self) -> ProxyConfig:
        protocol = self.listeners.security_protocol
        relay = self.listeners.unknown_principals == "relay"
        if relay and not _uses_sasl(self.upstream.security_protocol):
            raise ValueError(
                "listeners.unknown_principals: relay needs an upstream that speaks SASL (upstream.security_protocol "
                f"SASL_PLAINTEXT or SASL_SSL), not {self.upstream.security_protocol}: the broker must authenticate "
                "the relayed principals itself"
            )
        if _uses_sasl(protocol) and not relay and not self.credentials.all_users():
            raise ValueError(
                f"listeners.security_protocol {protocol} needs at least one user in credentials.users (or users_file)"
            )
        return self

    @model_validator(mode="after")
    def _metrics_port(self) -> ProxyConfig:
        if self.metrics.enabled and self.metrics.port == self.listeners.bootstrap_port:
            raise ValueError(f"metrics.port {self.metrics.port} is the bootstrap port (listeners.bootstrap_port)")
        return self


def parse_config(data: object, source: str = "<config>", base_dir: str | Path | None = None) -> ProxyConfig:
    """Validate a parsed config; relative file paths are taken from ``base_dir`` (the config's directory)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections, got {type(data).__name__}")
    try:
        return ProxyConfig.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"]) or "(top level)"
            reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{source}: {path}: {reason}")
        raise ConfigError("\n".join(problems)) from None


def load_config(path: str | Path) -> ProxyConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(data, str(path), path.resolve().parent)


def load_for_command(path: str | Path, log_level: str | None = None, tag: str | None = None) -> ProxyConfig | None:
    """For the commands that run the proxy: the config, with logging set up; None after printing why
    the file cannot be used (the caller exits 2)."""
    import logging
    import sys

    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"vcproxy: invalid configuration:\n{exc}", file=sys.stderr)
        return None
    logging.basicConfig(
        level=getattr(logging, log_level or config.logging.level),
        format=f"%(asctime)s %(levelname)s {tag + ' ' if tag else ''}%(name)s: %(message)s",
        stream=sys.stderr,
    )
    return config
