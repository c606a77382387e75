"""`vcproxy demo`: a local 3-broker Kafka plus the proxy, in the foreground, until Ctrl-C."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import ProxyConfig

DEMO_KAFKA_BASE_PORT = 29092  # below Linux's ephemeral range (32768-60999): no outgoing connection holds it


def _plaintext_instructions(bootstrap: str) -> str:
    return f"""
vcproxy is running. Bootstrap servers: {bootstrap}

  kcat:            kcat -b {bootstrap} -L
  confluent-kafka: .venv/bin/python -c "from confluent_kafka.admin import AdminClient; \\
                   print(AdminClient({{'bootstrap.servers': '{bootstrap}'}}).list_topics(timeout=10).brokers)"
  Kafka's tools:   .venv/bin/vcproxy kafka tool kafka-topics --bootstrap-server {bootstrap} --list
                   .venv/bin/vcproxy kafka tool kafka-console-producer --bootstrap-server {bootstrap} --topic demo
                   .venv/bin/vcproxy kafka tool kafka-console-consumer --bootstrap-server {bootstrap} \\
                       --topic demo --from-beginning

Ctrl-C stops the proxy and the Kafka brokers.
"""


def demo_password(user: str) -> str:
    """The demo's password convention (config/demo.yaml holds only salted keys derived from it)."""
    return f"{user}-secret"


def demo_logins(config: ProxyConfig) -> dict[str, str]:
    """Users of a SASL listener whose password is the demo's, with it; others cannot be shown."""
    from .auth.credentials import ScramCredential

    logins = {}
    for user, entries in config.credentials.as_mapping().items():
        mechanism, fields = next(iter(entries.items()))
        if ScramCredential.from_fields(mechanism, fields).matches_password(demo_password(user)):
            logins[user] = demo_password(user)
    return logins


def java_client_properties(user: str, password: str, protocol: str = "SASL_PLAINTEXT") -> str:
    """A --command-config file for Kafka's Java tools: SCRAM-SHA-512 login as `user`."""
    return (
        f"security.protocol={protocol}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";\n'
    )


# librdkafka before 2.6.1 (kcat 1.7.1 on Debian 12 has 2.0.2) sends a wrong nonce in its SCRAM
# client-final-message, which Kafka 4 and the proxy refuse (librdkafka PR #4895); PLAIN works with any.
KCAT_MECHANISM = "PLAIN"


def librdkafka_properties(bootstrap: str, user: str, password: str, protocol: str = "SASL_PLAINTEXT") -> str:
    """The same login for librdkafka clients (``kcat -F FILE``), as `user` with PLAIN (see KCAT_MECHANISM)."""
    return (
        f"bootstrap.servers={bootstrap}\n"
        f"security.protocol={protocol}\n"
        f"sasl.mechanisms={KCAT_MECHANISM}\n"
        f"sasl.username={user}\n"
        f"sasl.password={password}\n"
    )


def write_client_properties(config: ProxyConfig, demo_dir: Path) -> dict[str, Path]:
    """Per demo user, `<user>.properties` (Java tools' --command-config) and `<user>.librdkafka.conf`
    (kcat -F) in the demo directory; returns user -> the .properties path."""
    lc = config.listeners
    bootstrap = f"{lc.effective_advertised_host}:{lc.bootstrap_port}"
    paths = {}
    for user, password in demo_logins(config).items():
        files = {
            demo_dir / f"{user}.properties": java_client_properties(user, password, lc.security_protocol),
            demo_dir / f"{user}.librdkafka.conf": librdkafka_properties(
                bootstrap, user, password, lc.security_protocol
            ),
        }
        for path, text in files.items():
            path.touch(mode=0o600)  # it holds a password: never readable by others, not even briefly
            path.chmod(0o600)
            path.write_text(text)
        paths[user] = demo_dir / f"{user}.properties"
    return paths


def _where(config: ProxyConfig, user: str) -> str:
    for vc in config.tenancy.virtual_clusters:
        if f"User:{user}" in vc.principals:
            return f"virtual cluster {vc.name}"
    if config.tenancy.enabled and config.listeners.refuse_unbound_principals:
        return "refused (bound to no virtual cluster)"
    return "the physical cluster (bound to no virtual cluster)" if config.tenancy.enabled else "the cluster"


def _instructions(config: ProxyConfig, properties: dict[str, Path]) -> str:
    lc = config.listeners
    bootstrap = f"{lc.effective_advertised_host}:{lc.bootstrap_port}"
    if not lc.security_protocol.startswith("SASL_") or not properties:
        return _plaintext_instructions(bootstrap)
    users = "\n".join(
        f"  {user:<8} password {demo_password(user):<15} -> {_where(config, user)}" for user in properties
    )
    user = "alice" if "alice" in properties else next(iter(properties))
    password = demo_password(user)
    props = properties[user]
    tool = ".venv/bin/vcproxy kafka tool"
    rdk = props.with_suffix(".librdkafka.conf")
    sasl = (
        f"-X security.protocol={lc.security_protocol} -X sasl.mechanisms={KCAT_MECHANISM} \\\n"
        f"                       -X sasl.username={user} -X sasl.password={password}"
    )
    return f"""
vcproxy is starting; clients can connect once the log says "proxy ready".
Bootstrap servers: {bootstrap} ({lc.security_protocol}: {", ".join(lc.sasl_mechanisms)})

{users}

As {user} (the others: change the name and password; docs/tenancy.md walks through it):

  kcat:            kcat -b {bootstrap} {sasl} -L
                   echo hello | kcat -F {rdk} -t demo -P      (-F: the same settings from a file)
                   kcat -F {rdk} -t demo -C -e
                   (SCRAM-SHA-512 needs a kcat built with librdkafka >= 2.6.1)
  confluent-kafka: .venv/bin/python -c "from confluent_kafka.admin import AdminClient; \\
                   conf = {{'bootstrap.servers': '{bootstrap}', 'security.protocol': '{lc.security_protocol}', \\
                   'sasl.mechanism': 'SCRAM-SHA-512', 'sasl.username': '{user}', 'sasl.password': '{password}'}}; \\
                   print(AdminClient(conf).list_topics(timeout=10).topics)"
  Kafka's tools:   (client settings for each user: {props.parent}/<user>.properties)
                   {tool} kafka-topics --bootstrap-server {bootstrap} --command-config {props} \\
                       --create --topic demo --partitions 3 --replication-factor 3
                   {tool} kafka-topics --bootstrap-server {bootstrap} --command-config {props} --list
                   {tool} kafka-console-producer --bootstrap-server {bootstrap} --command-config {props} --topic demo
                   {tool} kafka-console-consumer --bootstrap-server {bootstrap} --command-config {props} \\
                       --topic demo --from-beginning

Ctrl-C stops the proxy and the Kafka brokers.
"""


def run_demo(args: argparse.Namespace) -> int:
    import trio

    from .config import load_for_command
    from .kafka.cluster import start_cluster, stop_cluster
    from .kafka.errors import KafkaLauncherError
    from .net.server import serve

    config = load_for_command(args.config)
    if config is None:
        return 2
    kafka_dir = Path(args.dir).resolve() / "kafka"
    if (kafka_dir / "cluster.json").exists():  # a previous demo killed without cleanup
        stop_cluster(kafka_dir)
    shutil.rmtree(kafka_dir, ignore_errors=True)
    try:
        print("starting a local 3-broker Kafka (racks r1, r2, r3)...", file=sys.stderr)
        cluster = start_cluster(kafka_dir, brokers=3, racks=["r1", "r2", "r3"], base_port=args.kafka_base_port)
        upstream = config.upstream.model_copy(update={"bootstrap_servers": cluster.bootstrap.split(",")})
        config = config.model_copy(update={"upstream": upstream})
        properties = write_client_properties(config, _demo_dir(Path(args.dir)))
        if config.tenancy.enabled:
            # The tenant API table imports every response schema (seconds): build it now rather than
            # on the first client's connection, which would stall the event loop (and time out kcat -L).
            from .core.apiversions import tenant_versions

            tenant_versions()
        print(_instructions(config, properties), flush=True)
        trio.run(serve, config)
    except KafkaLauncherError as exc:
        print(f"vcproxy demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping Kafka...", file=sys.stderr)
        stop_cluster(kafka_dir)
    return 0


def _demo_dir(path: Path) -> Path:
    """The demo directory, created, and kept as the user gave it (so the printed paths stay short)."""
    path.mkdir(parents=True, exist_ok=True)
    return path


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="run a local Kafka and the proxy with the demo config (Ctrl-C stops both)")
    demo.add_argument("--config", default="config/demo.yaml")
    demo.add_argument("--dir", default=".vcproxy/demo", help="working directory for the Kafka brokers")
    demo.add_argument("--kafka-base-port", type=int, default=DEMO_KAFKA_BASE_PORT)
    demo.set_defaults(func=run_demo)
