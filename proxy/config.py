"""The proxy's YAML configuration, validated at start.

Every error names the file, the key path and the reason (pydantic's ``extra="forbid"`` turns an
unknown key into an error instead of a silently ignored typo).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(Exception):
    """A configuration file that cannot be used; the message says where and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Port = Annotated[int, Field(ge=1, le=65535)]


class ListenerConfig(_Strict):
    host: str = "127.0.0.1"
    """Address the listeners bind to (0.0.0.0 in containers)."""
    advertised_host: str | None = None
    """Host name clients are told to connect to; defaults to `host` (must not be 0.0.0.0 then)."""
    bootstrap_port: Port = 9192
    broker_port_base: Port | None = None
    """Broker with node id N is served on broker_port_base + N; default bootstrap_port + 1."""

    @model_validator(mode="after")
    def _check(self) -> ListenerConfig:
        advertised = self.advertised_host or self.host
        if advertised in ("0.0.0.0", "::"):
            raise ValueError("advertised_host must be set when host is a wildcard address")
        return self

    @property
    def effective_advertised_host(self) -> str:
        return self.advertised_host or self.host

    @property
    def effective_broker_port_base(self) -> int:
        return self.broker_port_base if self.broker_port_base is not None else self.bootstrap_port + 1


class UpstreamConfig(_Strict):
    bootstrap_servers: list[str] = Field(min_length=1)
    connect_timeout_seconds: float = Field(10.0, gt=0)
    metadata_refresh_seconds: float = Field(30.0, gt=0)

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port(cls, servers: list[str]) -> list[str]:
        for server in servers:
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{server!r} is not host:port")
        return servers


class LimitsConfig(_Strict):
    max_frame_bytes: int = Field(100 * 1024 * 1024, ge=1024)
    receive_buffer_bytes: int = Field(1024 * 1024, ge=4096)
    drain_timeout_seconds: float = Field(10.0, ge=0)


class LoggingConfig(_Strict):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class ProxyConfig(_Strict):
    listeners: ListenerConfig = ListenerConfig()
    upstream: UpstreamConfig
    limits: LimitsConfig = LimitsConfig()
    logging: LoggingConfig = LoggingConfig()


def parse_config(data: object, source: str = "<config>") -> ProxyConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections, got {type(data).__name__}")
    try:
        return ProxyConfig.model_validate(data)
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
    return parse_config(data, str(path))
