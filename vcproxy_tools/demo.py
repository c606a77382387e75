"""`vcproxy demo`: a local 3-broker Kafka plus the proxy, in the foreground.

The Kafka cluster lives in DIR/kafka (default ``.vcproxy/demo/kafka``) and is kept when the demo stops:
the next run starts the same cluster again (same cluster id; the virtual clusters, their topics, records
and groups are still there, the proxy's state being a topic on it). ``--fresh`` (or ``make clean``,
which removes ``.vcproxy/``) starts over with a new, empty cluster.

Ctrl-C, SIGTERM and SIGHUP (the terminal closing) all stop the proxy and then the brokers, which run in
sessions of their own and would otherwise outlive the demo.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proxy.config import ProxyConfig
    from vcproxy_tools.kafka.cluster import ClusterInfo

log = logging.getLogger(__name__)

DEMO_KAFKA_BASE_PORT = 29092  # below Linux's ephemeral range (32768-60999): no outgoing connection holds it
DEMO_BROKERS = 3
DEMO_RACKS = ["r1", "r2", "r3"]


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop the demo: SIGINT, SIGTERM, and SIGHUP unless it is ignored (``nohup``)."""
    hup = () if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hup)


def demo_password(user: str) -> str:
    """The demo's password convention (config/demo.yaml holds only salted keys derived from it)."""
    return f"{user}-secret"


def demo_logins(config: ProxyConfig) -> dict[str, str]:
    """Users of a SASL listener whose password is the demo's, with it; others cannot be shown."""
    from proxy.auth.credentials import ScramCredential

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
    if not config.tenancy.enabled:
        return "the cluster"
    if f"User:{user}" in config.tenancy.super_admins:
        return "kafka-cluster, the physical cluster (a super-admin)"
    return "refused at login (in no virtual cluster)"


def _shown(path: Path) -> str:
    """``path`` as the user would type it from here: relative when it is under the working directory."""
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


def _executables() -> tuple[str, str]:
    """(vcproxy, python) of this installation, as the banner prints them (``.venv/bin/...`` under make run)."""
    bindir = Path(sys.executable).parent
    vcproxy = bindir / "vcproxy"
    return (
        _shown(vcproxy) if vcproxy.exists() else "vcproxy",
        _shown(Path(sys.executable)),
    )


def _command(*lines: str) -> str:
    """One shell command over several lines: continuation backslashes, the later lines indented."""
    return " \\\n       ".join(lines)


def _steps(config: ProxyConfig, properties: dict[str, Path]) -> tuple[str, list[tuple[str, list[str]]]]:
    """(intro, [(title, commands)]): what to try, in an order that works top to bottom."""
    lc = config.listeners
    bootstrap = f"{lc.effective_advertised_host}:{lc.bootstrap_port}"
    vcproxy, python = _executables()
    tool = f"{vcproxy} kafka tool"
    sasl = lc.security_protocol.startswith("SASL_") and bool(properties)
    if sasl:
        user = "alice" if "alice" in properties else next(iter(properties))
        password = demo_password(user)
        props = properties[user]
        java_login = f"--bootstrap-server {bootstrap} --command-config {props}"
        rdk = props.with_suffix(".librdkafka.conf")
        kcat_list = _command(
            f"kcat -b {bootstrap} -X security.protocol={lc.security_protocol} -X sasl.mechanisms={KCAT_MECHANISM}",
            f"-X sasl.username={user} -X sasl.password={password} -L",
        )
        kcat = f"kcat -F {rdk}"
        py_conf = [
            f"conf = {{'bootstrap.servers': '{bootstrap}', 'security.protocol': '{lc.security_protocol}',",
            f"'sasl.mechanism': 'SCRAM-SHA-512', 'sasl.username': '{user}', 'sasl.password': '{password}'}};",
        ]
        intro = (
            f"Try it as {user}, top to bottom (the others: change the name; docs/tenancy.md walks through it).\n"
            f"Client settings per user: {props.parent}/<user>.properties (Kafka's tools, SCRAM-SHA-512)\n"
            f"and {props.parent}/<user>.librdkafka.conf (kcat -F)."
        )
        kcat_title = (
            f"Produce and consume with kcat (apt-get install kcat; it logs in with {KCAT_MECHANISM}, which any "
            "kcat can):"
        )
        py_title = "From Python (confluent-kafka, SCRAM-SHA-512):"
    else:
        java_login = f"--bootstrap-server {bootstrap}"
        kcat_list = f"kcat -b {bootstrap} -L"
        kcat = f"kcat -b {bootstrap}"
        py_conf = [f"conf = {{'bootstrap.servers': '{bootstrap}'}};"]
        intro = "Try it, top to bottom:"
        kcat_title = "Produce and consume with kcat (apt-get install kcat):"
        py_title = "From Python (confluent-kafka):"
    steps = [
        (
            "Create a topic, with Kafka's own tools (from the jars the demo resolved):",
            [
                _command(
                    f"{tool} kafka-topics",
                    java_login,
                    "--create --if-not-exists --topic demo --partitions 3 --replication-factor 3",
                ),
                _command(f"{tool} kafka-topics", java_login, "--list"),
            ],
        ),
        (
            kcat_title,
            [kcat_list, f"echo hello | {kcat} -t demo -P", f"{kcat} -t demo -C -e"],
        ),
        (
            "...or with Kafka's console tools (the consumer prints every record, then waits for more: Ctrl-C):",
            [
                _command(f"echo hi | {tool} kafka-console-producer", java_login, "--topic demo"),
                _command(f"{tool} kafka-console-consumer", java_login, "--topic demo --from-beginning"),
            ],
        ),
        (
            py_title,
            [
                _command(
                    f'{python} -c "from confluent_kafka.admin import AdminClient;',
                    *py_conf,
                    'print(AdminClient(conf).list_topics(timeout=10).topics)"',
                )
            ],
        ),
    ]
    vc_admin = _vc_admin_with_member(config, properties) if sasl else None
    if vc_admin is not None:
        admin, member, vc = vc_admin
        admin_login = f"--bootstrap-server {bootstrap} --command-config {properties[admin]}"
        member_login = f"--bootstrap-server {bootstrap} --command-config {properties[member]}"
        steps.append(
            (
                f"ACLs inside {vc}, as {admin} (its admin), with Kafka's own tool: {member} may now read demo but "
                "not write it (docs/acls.md):",
                [
                    _command(
                        f"{tool} kafka-acls",
                        admin_login,
                        f"--add --allow-principal User:{member} --operation Read --topic demo --group {member}-app",
                    ),
                    _command(f"{tool} kafka-acls", admin_login, "--list --topic demo"),
                    _command(
                        f"{tool} kafka-console-consumer",
                        member_login,
                        f"--topic demo --group {member}-app --from-beginning --max-messages 1",
                    ),
                ],
            )
        )
        steps.append(
            (
                f"Quotas inside {vc}, as {admin}, with Kafka's own tool: {member} may produce 1 MB/s (docs/quotas.md):",
                [
                    _command(
                        f"{tool} kafka-configs",
                        admin_login,
                        f"--alter --entity-type users --entity-name {member} --add-config producer_byte_rate=1048576",
                    ),
                    _command(
                        f"{tool} kafka-configs", admin_login, f"--describe --entity-type users --entity-name {member}"
                    ),
                ],
            )
        )
    admins = [u for u in properties if f"User:{u}" in config.tenancy.super_admins] if config.tenancy.enabled else []
    if sasl and admins and config.tenancy.virtual_clusters:
        login = f"--bootstrap-server {bootstrap} --command-config {properties[admins[0]]}"
        vc = config.tenancy.virtual_clusters[0].name
        steps.append(
            (
                f"Manage virtual clusters while the proxy runs, as {admins[0]} (a super-admin; docs/management.md):",
                [
                    _command(f"{vcproxy} virtual-clusters list", login),
                    _command(f"{vcproxy} virtual-clusters describe", login, f"--virtual-cluster {vc}"),
                ],
            )
        )
        if vc_admin is not None:
            _, member, member_vc = vc_admin
            member_login = f"--bootstrap-server {bootstrap} --command-config {properties[member]}"
            steps.append(
                (
                    f"Rights are ACLs (KIP-1134), in kafka-cluster's own: {admins[0]} lets {member} describe "
                    f"{member_vc} (and nothing more), and {member} does (docs/security.md#rights):",
                    [
                        _command(
                            f"{vcproxy} acls",
                            login,
                            f"--add --virtual-cluster kafka-cluster --allow-principal User:{member} "
                            f"--operation DescribeVirtualCluster --cluster-name {member_vc}",
                        ),
                        _command(f"{vcproxy} acls", login, "--list --virtual-cluster kafka-cluster"),
                        _command(
                            f"{vcproxy} virtual-clusters describe", member_login, f"--virtual-cluster {member_vc}"
                        ),
                    ],
                )
            )
    return intro, steps


def _vc_admin_with_member(config: ProxyConfig, properties: dict[str, Path]) -> tuple[str, str, str] | None:
    """(admin, member, vc) of the first seeded VC that has an admin and another member with client settings."""
    if not config.tenancy.enabled:
        return None
    for vc in config.tenancy.virtual_clusters:
        users = [p.removeprefix("User:") for p in vc.principals if p.removeprefix("User:") in properties]
        admins = [u for u in users if f"User:{u}" in vc.admins]
        members = [u for u in users if u not in admins]
        if admins and members:
            return admins[0], members[0], vc.name
    return None


def banner_commands(banner: str) -> list[str]:
    """The shell commands of a banner, continuation lines joined (what tests/integration/test_demo.py runs)."""
    commands, current = [], ""
    for line in banner.splitlines():
        if current:
            current += "\n" + line
        elif line.startswith("   ") and not line.startswith("    ") and line.strip():
            current = line.strip()
        if current and not current.endswith("\\"):
            commands.append(current)
            current = ""
    return commands


def _instructions(
    config: ProxyConfig, properties: dict[str, Path], cluster: ClusterInfo, kept: bool, kafka_dir: Path
) -> str:
    lc = config.listeners
    bootstrap = f"{lc.effective_advertised_host}:{lc.bootstrap_port}"
    lines = [
        "",
        f"vcproxy is ready. Bootstrap servers: {bootstrap} ({lc.security_protocol}"
        + (f": {', '.join(lc.sasl_mechanisms)})" if lc.security_protocol.startswith("SASL_") else ")"),
        "",
    ]
    if properties:
        lines += [f"  {user:<8} password {demo_password(user):<15} -> {_where(config, user)}" for user in properties]
        lines.append("")
    intro, steps = _steps(config, properties)
    lines += [intro, ""]
    for number, (title, commands) in enumerate(steps, 1):
        lines.append(f"{number}. {title}")
        lines += [f"   {command}" for command in commands]
        lines.append("")
    racks = ", ".join(b.rack for b in cluster.brokers if b.rack)
    state = "as the last run left it: its topics, records, groups and virtual clusters" if kept else "new and empty"
    lines += [
        f"Kafka: cluster {cluster.cluster_id} ({len(cluster.brokers)} brokers, racks {racks}) in {kafka_dir},",
        f"{state}. The cluster is kept when the demo stops and started again by the next run;",
        "`vcproxy demo --fresh` (or `make clean`) starts over with an empty one.",
        "Ctrl-C (or closing the terminal) stops the proxy and the brokers.",
        "",
    ]
    return "\n".join(lines)


# -- running -------------------------------------------------------------------------------------------------


class _Stopped(BaseException):
    """SIGTERM or SIGHUP outside the proxy's event loop: unwinds like Ctrl-C's KeyboardInterrupt, so the
    brokers started so far are stopped on the way out."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped(signal.Signals(signum).name)


@contextlib.contextmanager
def _signals(handler: object, signals: tuple[signal.Signals, ...]) -> Iterator[None]:
    """``signals`` handled by ``handler`` (SIGINT keeps Python's KeyboardInterrupt unless the handler is
    SIG_IGN) for the duration; the previous handlers afterwards."""
    previous = {sig: signal.getsignal(sig) for sig in signals}
    try:
        for sig in signals:
            if sig != signal.SIGINT or handler is signal.SIG_IGN:
                signal.signal(sig, handler)  # type: ignore[arg-type]
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _say(text: str) -> None:
    """A line on stderr; nothing if the terminal is gone (SIGHUP: writes fail, the cleanup must not)."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def _start_kafka(kafka_dir: Path, shown_dir: Path, args: argparse.Namespace) -> tuple[ClusterInfo, bool]:
    """The demo's cluster: the kept one started again, or a new one; (cluster, kept)."""
    from vcproxy_tools.kafka.cluster import has_cluster, restart_cluster, running_pids, start_cluster, stop_cluster
    from vcproxy_tools.kafka.errors import KafkaLauncherError

    if running_pids(kafka_dir):  # a demo killed without its cleanup (kill -9) left its brokers running
        _say(f"stopping the brokers a previous demo left running in {shown_dir}...")
        stop_cluster(kafka_dir)
    if args.fresh and kafka_dir.exists():
        _say(f"--fresh: removing the kept cluster in {shown_dir}")
        shutil.rmtree(kafka_dir)
    if has_cluster(kafka_dir):
        _say(f"starting the demo's Kafka cluster kept in {shown_dir} again ({DEMO_BROKERS} brokers)...")
        try:
            return restart_cluster(kafka_dir, base_port=args.kafka_base_port), True
        except KafkaLauncherError as exc:
            raise KafkaLauncherError(
                f"{exc}\nThe kept cluster in {shown_dir} did not start again; `vcproxy demo --fresh` (or `make clean`) "
                "starts over with a new one."
            ) from None
    shutil.rmtree(kafka_dir, ignore_errors=True)  # a start that failed before formatting left a partial dir
    _say(f"starting a new local {DEMO_BROKERS}-broker Kafka (racks {', '.join(DEMO_RACKS)}) in {shown_dir}...")
    cluster = start_cluster(kafka_dir, brokers=DEMO_BROKERS, racks=DEMO_RACKS, base_port=args.kafka_base_port)
    return cluster, False


def _stop_kafka(kafka_dir: Path, shown_dir: Path, stops: tuple[signal.Signals, ...]) -> None:
    """Stop the brokers (controlled shutdown); a second Ctrl-C, SIGTERM or SIGHUP meanwhile kills them."""
    from vcproxy_tools.kafka.cluster import running_pids, stop_cluster

    if not running_pids(kafka_dir):
        return
    _say(f"stopping Kafka (its data stays in {shown_dir} for the next run)...")
    try:
        with _signals(_raise_stopped, stops):
            stop_cluster(kafka_dir)
    except (KeyboardInterrupt, _Stopped):
        with _signals(signal.SIG_IGN, stops):
            _say("stopping Kafka at once (SIGKILL)...")
            stop_cluster(kafka_dir, hard=True)


async def _serve(config: ProxyConfig, banner: str, stops: tuple[signal.Signals, ...]) -> None:
    """The proxy until SIGINT, SIGTERM or SIGHUP, then drained; the banner once it is ready."""
    import trio

    from proxy.net.server import ProxyServer

    server = ProxyServer(config)

    async def announce() -> None:
        await server.ready.wait()
        with contextlib.suppress(OSError, ValueError):
            print(banner, flush=True)

    with trio.open_signal_receiver(*stops) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.run)  # not start(): a signal must work while tenancy replays
            nursery.start_soon(announce)
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                await server.drain()
                nursery.cancel_scope.cancel()
                break


def _create_state_topic(config: ProxyConfig) -> None:
    """A new cluster has no state topic, and the proxy would warn that it made one (which on a cluster
    that had one means lost state): the demo knows its cluster is new and makes it first."""
    from proxy.state.service import client_config
    from proxy.state.store import StateStore

    tc = config.tenancy
    StateStore(client_config(config), tc.state_topic, tc.state_replication_factor).ensure_topic(60, new_cluster=True)


def run_demo(args: argparse.Namespace) -> int:
    from proxy.config import load_for_command

    config = load_for_command(args.config)
    if config is None:
        return 2
    demo_dir = _demo_dir(Path(args.dir))
    shown_dir = demo_dir / "kafka"  # as the user gave it, for messages
    kafka_dir = shown_dir.resolve()
    with _exclusive(demo_dir) as other:
        if other is not None:
            _say(f"vcproxy demo: another demo (pid {other}) runs with {demo_dir}; stop it first, or pass --dir")
            return 2
        return _run_demo(args, config, demo_dir, shown_dir, kafka_dir)


@contextlib.contextmanager
def _exclusive(demo_dir: Path) -> Iterator[str | None]:
    """Holds DIR/demo.lock while the demo runs; yields None, or the pid of the demo holding it (two demos
    on one directory would stop and wipe each other's brokers)."""
    import fcntl

    path = demo_dir / "demo.lock"
    with path.open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            yield lock.read().strip() or "?"
            return
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        try:
            yield None
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run_demo(args: argparse.Namespace, config: ProxyConfig, demo_dir: Path, shown_dir: Path, kafka_dir: Path) -> int:
    import trio

    from vcproxy_tools.kafka.errors import KafkaLauncherError

    stops = stop_signals()
    try:
        with _signals(_raise_stopped, stops):
            cluster, kept = _start_kafka(kafka_dir, shown_dir, args)
            upstream = config.upstream.model_copy(update={"bootstrap_servers": cluster.bootstrap.split(",")})
            config = config.model_copy(update={"upstream": upstream})
            properties = write_client_properties(config, demo_dir)
            if config.tenancy.enabled and not kept:
                _create_state_topic(config)
            banner = _instructions(config, properties, cluster, kept, shown_dir)
            _say("starting the proxy...")
            trio.run(_serve, config, banner, stops)
    except KafkaLauncherError as exc:
        _say(f"vcproxy demo: {exc}")
        return 2
    except (KeyboardInterrupt, _Stopped) as exc:  # before the proxy ran (it handles them itself)
        _say(f"vcproxy demo: {exc or 'SIGINT'} received: stopping")
    finally:
        _stop_kafka(kafka_dir, shown_dir, stops)
    return 0


def _demo_dir(path: Path) -> Path:
    """The demo directory, created, and kept as the user gave it (so the printed paths stay short)."""
    path.mkdir(parents=True, exist_ok=True)
    return path


def register(sub: argparse._SubParsersAction) -> None:
    description = (
        "Run a local 3-broker Apache Kafka (racks r1, r2, r3, from Maven Central jars) and the proxy in front "
        "of it, in the foreground, and print how to connect. This is what `make run` runs. The Kafka cluster "
        "is kept in DIR/kafka when the demo stops and started again by the next run (same cluster id; the "
        "virtual clusters' topics and records are still there); --fresh starts over. Ctrl-C, SIGTERM and SIGHUP "
        "(closing the terminal) stop the proxy and the brokers."
    )
    demo = sub.add_parser(
        "demo",
        help="run a local Kafka and the proxy with the demo config (Ctrl-C stops both)",
        description=description,
    )
    demo.add_argument(
        "--config",
        default="config/demo.yaml",
        help="the proxy's configuration (default %(default)s); its upstream is replaced by the demo's Kafka",
    )
    demo.add_argument(
        "--dir",
        default=".vcproxy/demo",
        help="working directory: the Kafka cluster (DIR/kafka) and the users' client settings (default %(default)s)",
    )
    demo.add_argument(
        "--kafka-base-port",
        type=int,
        default=DEMO_KAFKA_BASE_PORT,
        help="first port of the Kafka brokers: node n listens on BASE+10*(n-1), the controller on BASE+1 "
        "(default %(default)s)",
    )
    demo.add_argument(
        "--fresh",
        action="store_true",
        help="start over: remove the cluster kept in DIR/kafka (its topics, records and virtual clusters) "
        "and format a new one",
    )
    demo.set_defaults(func=run_demo)
