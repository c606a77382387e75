"""What the Trio shell costs per small Produce request: proxy CPU, system calls and context switches.

Starts one proxy per (checkout, mode) in front of a running cluster, all at once, and drives each in
turn with the same client: a librdkafka producer sending single ~3.3 KB records, one record per
Produce request (`batch.num.messages=1`, `linger.ms=0`, a 1-partition topic), either one request at a
time (`depth 1`: produce, flush) or with up to 5 in flight (`depth 5`). Around each run it reads the
proxy's utime+stime (/proc/PID/stat) and voluntary + involuntary context switches (/proc/PID/status);
the order of the proxies rotates every round, so the machine's load hits all alike; medians reported.
With --strace, one more run per proxy and depth under `strace -c -f`, counting system calls only
(strace inflates CPU: that run's CPU is not used). With --kroxylicious LIBS (its jars, as bench_peers.py
installs them), Kroxylicious runs beside, without and with its MultiTenant filter, driven alike (the JVMs
get a longer warm-up, for their JIT). With --idle SECONDS, it first measures what each proxy spends with
its connections open and nothing sent (its background work: the state topic's clients, timers), by
thread name, from each thread's schedstat (nanoseconds, unlike /proc's 10 ms ticks); --rounds 0 then
measures only that. With --clients N, each round also makes N fresh librdkafka admin clients one after another,
each connecting and asking Metadata (a connection storm's unit: its connections, their ApiVersions and the
session's set-up), and reports the proxy's CPU per client; --requests 0 measures only that. With --transactions N,
each round also runs N transactions of a transactional librdkafka producer one after another, as a
consume-transform-produce loop's (begin, one record, a group's offset, commit: AddPartitionsToTxn, Produce,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn each), and reports the proxy's CPU per transaction. With --offsets N, each
round also asks a librdkafka consumer N times for the topic's watermarks (a lag monitor's loop: a ListOffsets each for
the earliest and the latest offset), and reports the proxy's CPU per ListOffsets request. With --share N (KIP-932),
each round also produces N records (not measured), then a share consumer takes N and acknowledges each as it comes
(explicit mode, a commit each: a ShareAcknowledge a record, besides the ShareFetch requests), and reports the proxy's
CPU per record. Each of those three also shows its CPU above idle when --idle measured it: the proxy's idle CPU a
second (the whole process') times the item's wall time, taken off, so that an item that waits (a transaction's commit,
~90 ms) is not charged the instance's background work (a tenancy's state topic clients: about 2 ms a second).
Modes: `passthrough`,
`tenant` (a VC bound by client id), `quota` (a VC over SASL PLAIN whose user has a producer's byte rate it never
reaches: what metering costs), `rate` (the same with a request rate). A mode followed by `+tls-native` or
`+tls-openssl` (e.g. `passthrough+tls-native`) has TLS listeners served by that engine (`listeners.tls.engine`), the
clients on TLS (a CA and certificate made for the run); followed by `+up-native` or `+up-openssl`, its upstream is TLS
on that engine (`upstream.tls.engine`): a helper proxy of the same checkout, not measured, with a TLS listener (rustls)
in front of the cluster.

Run (a cluster from `vcproxy kafka start --dir D --brokers 1`):
    PYTHONPATH=. .venv/bin/python benchmarks/shell_cost.py --bootstrap 127.0.0.1:29092 \
        --checkout before=/path/to/main --checkout after=. --rounds 5 --requests 3000 --strace
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from bench_peers import kroxylicious_argv, kroxylicious_config  # this directory is on sys.path (a script's)
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from proxy.auth.credentials import make_entry
from vcproxy_tools.admin_client import Connection, Login
from vcproxy_tools.process import wait_ready

CLIENT_ID = "vcbench"
USER, PASSWORD = "bench", "bench-secret"  # modes `quota` and `rate`
# Per mode, the quota its user sets itself, never reached (what metering costs, not throttling).
QUOTAS = {"quota": ("producer_byte_rate", 1e9), "rate": ("request_rate", 1e6)}
TOPIC = "shellcost"
T = TypeVar("T")
RECORD = b"x" * 3300
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Proxy:
    checkout: str
    mode: str
    port: int
    proc: subprocess.Popen[bytes]
    # depth -> (µs, vol, invol, µs in the kernel)
    runs: dict[int, list[tuple[float, float, float, float]]] = field(default_factory=dict)
    clients: list[float] = field(default_factory=list)  # ms of CPU per client, a run each round (--clients)
    # (µs of CPU, s of wall time) per transaction, ListOffsets, or record taken and acknowledged: a run each round
    txns: list[tuple[float, float]] = field(default_factory=list)  # --transactions
    offsets: list[tuple[float, float]] = field(default_factory=list)  # --offsets
    shared: list[tuple[float, float]] = field(default_factory=list)  # --share
    idle_ms: float | None = None  # ms of CPU a second sent nothing (--idle)
    syscalls: dict[int, tuple[float, dict[str, float]]] = field(default_factory=dict)
    cafile: Path | None = None  # a TLS mode's CA
    helper: subprocess.Popen[bytes] | None = None  # an upstream TLS mode's TLS front of the cluster

    @property
    def name(self) -> str:
        return f"{self.checkout}/{self.mode}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def base(self) -> str:
        """The mode without its TLS (`tenant+tls-native` -> `tenant`)."""
        return self.mode.partition("+")[0]

    @property
    def tls(self) -> str:
        """The TLS engine of the mode's listeners, or "" (plaintext)."""
        return engines(self.mode)[1]

    def client_conf(self) -> dict[str, object]:
        """A client's config: with a quota, logged in as the VC's user; with TLS, trusting the run's CA."""
        conf: dict[str, object] = {"bootstrap.servers": self.bootstrap, "client.id": CLIENT_ID}
        if self.base in QUOTAS:
            conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
            conf.update({"sasl.username": USER, "sasl.password": PASSWORD})
        if self.tls:
            conf.update({"security.protocol": "SSL", "ssl.ca.location": str(self.cafile)})
        return conf

    def cpu(self) -> tuple[float, float]:
        """(user, system) seconds of the proxy process."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) / TICK, int(fields[12]) / TICK

    def threads(self) -> dict[str, float]:
        """CPU seconds so far of the live threads, summed by name (a thread pool's are one row)."""
        out: dict[str, float] = {}
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that just ended
                name = re.sub(r"[-\s]?\d+$", "", (task / "comm").read_text().strip())  # "rdk:broker1" -> "rdk:broker"
                out[name] = out.get(name, 0.0) + int((task / "schedstat").read_text().split()[0]) / 1e9
        return out

    def switches(self) -> tuple[int, int]:
        """Voluntary and involuntary context switches of all the process' threads (a JVM's event loops, the
        state topic's client threads)."""
        vol = invol = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that just ended
                status = (task / "status").read_text()
                vol += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
                invol += int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
        return vol, invol


def start_checkout(
    work: Path, spec: str, mode: str, port: int, upstream: str, settings: dict[str, dict] | None = None
) -> Proxy:
    """A proxy of a `--checkout` spec (NAME=DIR[,VAR=VALUE...]; python=PATH: its interpreter) in `mode`."""
    name, _, rest = spec.partition("=")
    src, *assignments = rest.split(",")
    extra_env = dict(a.split("=", 1) for a in assignments)
    python = extra_env.pop("python", sys.executable)
    return start_proxy(work, name, Path(src).resolve(), mode, port, upstream, extra_env, python, settings)


def start_proxy(
    work: Path,
    checkout: str,
    src: Path,
    mode: str,
    port: int,
    upstream: str,
    extra_env: dict[str, str],
    python: str = sys.executable,
    settings: dict[str, dict] | None = None,
) -> Proxy:
    """`settings`: config sections to add (their keys over the mode's)."""
    name = mode
    mode, engine, up = engines(mode)
    helper = None
    if up:  # the cluster behind a TLS listener: a proxy of the same checkout, ten ports up
        cafile, certfile = certificates(work)
        front = {"security_protocol": "SSL", "tls": {"certfile": str(certfile), "engine": "native"}}
        front_settings = {"listeners": front, "limits": {"max_connections_per_ip": 100_000}}
        helper = start_proxy(
            work, f"{checkout}-front", src, "passthrough", port + 10, upstream, extra_env, python, front_settings
        ).proc
        upstream = f"127.0.0.1:{port + 10}"
    cfg: dict[str, object] = {
        "listeners": {"host": "127.0.0.1", "bootstrap_port": port, "broker_port_base": port},
        "upstream": {"bootstrap_servers": [upstream]},
        "logging": {"level": "INFO"},
    }
    if mode == "tenant":
        cfg["tenancy"] = {"enabled": True, "virtual_clusters": [{"name": "bench", "client_ids": [CLIENT_ID]}]}
    if mode.startswith("traced"):  # "traced1": tracing on, 1% of requests sampled, spans to JSON Lines files
        ratio = int(mode.removeprefix("traced")) / 100
        cfg["tracing"] = {"enabled": True, "sample_ratio": ratio, "jsonl_dir": str(work / f"{checkout}-{mode}-traces")}
    if mode in QUOTAS:  # SASL, the VC's user its admin, who sets itself a quota it never reaches
        cfg["listeners"] |= {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanisms": ["PLAIN"]}
        cfg["credentials"] = {"users": {USER: make_entry(PASSWORD, 4096)}}
        principal = f"User:{USER}"
        vc = {"name": "bench", "principals": [principal], "admins": [principal]}
        cfg["tenancy"] = {"enabled": True, "virtual_clusters": [vc]}
    cafile = None
    if engine and mode in QUOTAS:
        raise SystemExit(f"{mode}: TLS is measured without a quota's SASL login")
    if engine:
        cafile, certfile = certificates(work)
        cfg["listeners"]["security_protocol"] = "SSL"  # type: ignore[index]
        cfg["listeners"]["tls"] = {"certfile": str(certfile), "engine": engine}  # type: ignore[index]
    if up:
        cafile, _ = certificates(work)
        cfg["upstream"] = {
            "bootstrap_servers": [upstream],
            "security_protocol": "SSL",
            "tls": {"cafile": str(cafile), "engine": up},
        }
    mode = name
    for section, values in (settings or {}).items():
        cfg[section] = {**cfg.get(section, {}), **values}  # type: ignore[dict-item]
    path = work / f"{checkout}-{mode}.json"
    path.write_text(json.dumps(cfg))
    log = (work / f"{checkout}-{mode}.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONUNBUFFERED": "1", **extra_env}
    argv = [python, "-m", "proxy", "serve", "--config", str(path)]
    proc = subprocess.Popen(argv, cwd=src, env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_ready(proc, work / f"{checkout}-{mode}.log", 1200, f"{checkout}/{mode}")
    proxy = Proxy(checkout, mode, port, proc, cafile=cafile, helper=helper)
    if proxy.base in QUOTAS:
        set_quota(proxy.bootstrap, *QUOTAS[proxy.base])
    return proxy


def engines(mode: str) -> tuple[str, str, str]:
    """A mode's base, its listeners' TLS engine and its upstream's ("" for plaintext)."""
    base, *parts = mode.split("+")
    tls = next((p.removeprefix("tls-") for p in parts if p.startswith("tls-")), "")
    up = next((p.removeprefix("up-") for p in parts if p.startswith("up-")), "")
    return base, tls, up


def certificates(work: Path) -> tuple[Path, Path]:
    """The run's CA and the proxies' certificate (127.0.0.1, key and chain in one PEM), made once."""
    cafile, certfile = work / "ca.pem", work / "proxy.pem"
    if not cafile.exists():
        import trustme

        ca = trustme.CA()
        ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(certfile))
        ca.cert_pem.write_to_path(str(cafile))
    return cafile, certfile


def set_quota(bootstrap: str, key: str, value: float) -> None:
    from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData

    entity = (EntityData(entity_type="user", entity_name=USER),)
    ops = (OpData(key=key, value=value, remove=False),)
    request = AlterClientQuotasRequest(entries=(EntryData(entity=entity, ops=ops),), validate_only=False)
    with Connection(bootstrap, Login("SASL_PLAINTEXT", "PLAIN", USER, PASSWORD), apis=[(49, 1)]) as admin:
        answer = admin.request(49, 1, request)
    if [int(e.error_code) for e in answer.entries] != [0]:
        raise SystemExit(f"could not set the quota: {answer}")


def start_kroxylicious(work: Path, libs: Path, mode: str, port: int, upstream: str) -> Proxy:
    """Kroxylicious in front of `upstream` (as bench_peers.py runs it): a port per node; `multitenant` adds
    its MultiTenant filter (topics prefixed by the virtual cluster's name)."""
    ids = sorted(AdminClient({"bootstrap.servers": upstream}).list_topics(timeout=30).brokers)
    path = work / f"kroxylicious-{mode}.yaml"
    path.write_text(kroxylicious_config(upstream, port, ids, multitenant=mode == "multitenant"))
    log_path = work / f"kroxylicious-{mode}.log"
    argv = kroxylicious_argv(libs, path)
    proc = subprocess.Popen(argv, cwd=work, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"kroxylicious/{mode} did not start: see {log_path}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        time.sleep(0.2)
    return Proxy("kroxylicious", mode, port, proc)


def create_topic(proxy: Proxy) -> None:
    admin = AdminClient(proxy.client_conf())
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        with contextlib.suppress(Exception):  # already there (a rerun)
            future.result(60)


def producer(proxy: Proxy, depth: int) -> Producer:
    p = Producer(
        {
            **proxy.client_conf(),
            "linger.ms": 0,
            "batch.num.messages": 1,
            "acks": 1,
            "compression.type": "none",
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": depth,
        }
    )
    p.produce(TOPIC, RECORD)  # connect and learn the leader before anything is measured
    p.flush(60)
    return p


def drive(p: Producer, depth: int, n: int) -> None:
    failed: list[object] = []

    def done(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    if depth == 1:
        for _ in range(n):
            p.produce(TOPIC, RECORD, on_delivery=done)
            p.flush(60)
    else:
        for _ in range(n):
            while True:
                try:
                    p.produce(TOPIC, RECORD, on_delivery=done)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        p.flush(60)
    if failed:
        raise SystemExit(f"{len(failed)} deliveries failed, e.g. {failed[0]}")


def measure(proxy: Proxy, p: Producer, depth: int, n: int, tail: float = 0) -> tuple[float, float, float, float]:
    (u0, s0), (v0, i0) = proxy.cpu(), proxy.switches()
    drive(p, depth, n)
    if tail:
        time.sleep(tail)  # the work a run leaves behind (spans made and written in batches) is the run's
    (u1, s1), (v1, i1) = proxy.cpu(), proxy.switches()
    return (u1 - u0 + s1 - s0) * 1e6 / n, (v1 - v0) / n, (i1 - i0) / n, (s1 - s0) * 1e6 / n


def transactional(proxy: Proxy) -> tuple[Producer, object]:
    """A transactional producer, its id's first transactions done (the coordinators found, the ids let through), and
    the group whose offsets its transactions commit (not a member: generation -1)."""
    conf = proxy.client_conf()
    p = Producer({**conf, "transactional.id": f"{CLIENT_ID}-tx-{proxy.port}", "linger.ms": 0, "acks": "all"})
    p.init_transactions(60)
    group = Consumer({**conf, "group.id": f"{CLIENT_ID}-txg-{proxy.port}"}).consumer_group_metadata()
    transactions((p, group), 3)
    return p, group


def transactions(txn: tuple[Producer, object], n: int) -> None:
    p, group = txn
    for i in range(n):
        p.begin_transaction()
        p.produce(TOPIC, RECORD)
        p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, i + 1)], group, 60)
        p.commit_transaction(60)


def watermarks(proxy: Proxy) -> Consumer:
    """A consumer that asked the topic's watermarks once (connected to the leader, the name let through)."""
    c = Consumer({**proxy.client_conf(), "group.id": f"{CLIENT_ID}-lag"})
    offsets(c, 3)
    return c


def offsets(c: Consumer, n: int) -> None:
    for _ in range(n):
        c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30, cached=False)


def share_consumer(proxy: Proxy) -> ShareConsumer:
    """A share consumer of the topic, in a group of its own that starts at its earliest record."""
    group = f"{CLIENT_ID}-share-{proxy.port}"
    earliest = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])
    admin = AdminClient(proxy.client_conf())  # held until its answer: a client let go ends its requests
    admin.incremental_alter_configs([resource])[resource].result(60)
    c = ShareConsumer({**proxy.client_conf(), "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([TOPIC])
    return c


def acknowledged(c: ShareConsumer, n: int) -> None:
    """`n` records taken, each acknowledged (accepted) and committed as it comes."""
    taken, deadline = 0, time.monotonic() + 120
    while taken < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"the share consumer took {taken} of {n} records")
        for msg in c.poll(1.0):
            if msg.error():
                raise SystemExit(f"share consumer: {msg.error()}")
            c.acknowledge(msg, AcknowledgeType.ACCEPT)
            c.commit_sync()
            taken += 1


def clients_run(proxy: Proxy, n: int) -> float:
    """ms of the proxy's CPU per client: a fresh admin client that connects and asks Metadata, then goes."""

    def clients() -> None:
        for _ in range(n):
            AdminClient({**proxy.client_conf(), "log_level": 0}).list_topics(timeout=30)

    return cpu_us(proxy, n, clients)[0] / 1000


def timed_us(proxy: Proxy, n: int, run: Callable[[], object]) -> tuple[float, float]:
    """µs of the proxy's CPU and s of wall time per item of `run`'s `n`."""
    started = time.monotonic()
    us = cpu_us(proxy, n, run)[0]
    return us, (time.monotonic() - started) / n


def cpu_us(proxy: Proxy, n: int, run: Callable[[], T]) -> tuple[float, T]:
    """µs of the proxy's CPU (user and system) per item of `run`'s `n`, and what `run` gave."""
    u0, s0 = proxy.cpu()
    out = run()
    u1, s1 = proxy.cpu()
    return (u1 - u0 + s1 - s0) * 1e6 / n, out


def rotated(proxies: list[Proxy], r: int) -> list[Proxy]:
    """Round `r`'s order: each proxy first in turn, so that the machine's load hits all alike."""
    return proxies[r % len(proxies) :] + proxies[: r % len(proxies)]


def rounds_of(
    proxies: list[Proxy], rounds: int, n: int, runs: Callable[[Proxy], dict[str, Callable[[], object]]]
) -> dict[tuple[str, str], list[float]]:
    """Per (proxy, kind): µs of CPU per request of each round's run of `n` requests (`runs(proxy)`: each kind's run),
    the proxies in `rotated` order."""
    out: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for x in rotated(proxies, r):
            for kind, run in runs(x).items():
                out.setdefault((x.name, kind), []).append(cpu_us(x, n, run)[0])
        print(f"round {r + 1}/{rounds} done ({os.getloadavg()[0]:.1f} load)", file=sys.stderr)
    return out


def spread(values: list[float]) -> str:
    """A run's figures as "median (lowest..highest)"."""
    return f"{statistics.median(values):.0f} ({min(values):.0f}..{max(values):.0f})"


CHECKOUT_HELP = (
    "NAME=DIR[,VAR=VALUE...]: a source tree of vcproxy and its environment (e.g. VCPROXY_PURE=1);"
    " python=PATH runs it on another interpreter (one with vcproxy's dependencies: a virtualenv's)"
)


def checkout_args(description: str | None, port: int) -> argparse.ArgumentParser:
    """A bench's arguments for proxies of checkouts side by side: the cluster, the checkouts, the first port, rounds."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--checkout", action="append", required=True, help=CHECKOUT_HELP)
    ap.add_argument("--port", type=int, default=port)
    ap.add_argument("--rounds", type=int, default=5)
    return ap


def start_checkouts(work: Path, args: argparse.Namespace, modes: list[str]) -> list[Proxy]:
    """A proxy of each `--checkout` in each mode, side by side (20 ports apart from `--port`), each with the bench's
    topic."""
    proxies = []
    for i, (mode, spec) in enumerate((m, s) for m in modes for s in args.checkout):
        proxies.append(start_checkout(work, spec, mode, args.port + 20 * i, args.bootstrap))
    for proxy in proxies:
        create_topic(proxy)
    return proxies


def strace_run(proxy: Proxy, p: Producer, depth: int, n: int, work: Path) -> tuple[float, dict[str, float]]:
    out = work / f"strace-{proxy.checkout}-{proxy.mode}-{depth}.txt"
    tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(proxy.proc.pid), "-o", str(out)], stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached (strace prints nothing on success)
    drive(p, depth, n)
    tracer.send_signal(signal.SIGINT)
    tracer.wait(60)
    calls: dict[str, float] = {}
    total = 0.0
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3]) / n
        elif parts and parts[-1] == "total":
            total = int(parts[3]) / n
    return total, calls


def main() -> None:
    global RECORD
    ap = checkout_args(__doc__, 29600)
    ap.add_argument("--modes", default="passthrough,tenant", help="also quota, rate, tracedP (tracing, P%% sampled)")
    ap.add_argument("--depths", default="1,5")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("--idle", type=float, default=0, help="first measure idle CPU for this many seconds")
    ap.add_argument("--tail", type=float, default=0, help="read a run's CPU this many seconds after its last answer")
    ap.add_argument("--clients", type=int, default=0, help="and per round this many fresh clients' CPU each")
    ap.add_argument("--transactions", type=int, default=0, help="and per round this many transactions' CPU each")
    ap.add_argument("--offsets", type=int, default=0, help="and per round this many watermark queries' CPU each")
    ap.add_argument("--share", type=int, default=0, help="and per round this many records a share consumer takes")
    ap.add_argument(
        "--kroxylicious", type=Path, help="Kroxylicious' jars (e.g. ~/.cache/peers/kroxylicious-0.21.0/libs)"
    )
    ap.add_argument("--record-bytes", type=int, default=len(RECORD), help="each request's one record (CPU per GB)")
    ap.add_argument("--json")
    args = ap.parse_args()
    RECORD = b"x" * args.record_bytes
    depths = [int(d) for d in args.depths.split(",")]
    work = Path(tempfile.mkdtemp(prefix="shell-cost-"))
    proxies: list[Proxy] = []
    try:
        proxies += start_checkouts(work, args, args.modes.split(","))
        if args.kroxylicious is not None:
            for i, mode in enumerate(("passthrough", "multitenant")):
                port = args.port + 20 * (len(proxies) + i)
                proxies.append(start_kroxylicious(work, args.kroxylicious.resolve(), mode, port, args.bootstrap))
                create_topic(proxies[-1])
        producers = {(x.name, d): producer(x, d) for x in proxies for d in depths}
        txn = {x.name: transactional(x) for x in proxies} if args.transactions else {}
        lag = {x.name: watermarks(x) for x in proxies} if args.offsets else {}
        queues = {x.name: share_consumer(x) for x in proxies} if args.share else {}
        for x in proxies:  # warm-up, unmeasured (longer for a JVM's JIT)
            for d in depths:
                drive(
                    producers[x.name, d], d, args.requests * 2 if x.checkout == "kroxylicious" else args.requests // 3
                )
        if args.idle:
            idle(proxies, args.idle)
        for r in range(args.rounds):
            for x in rotated(proxies, r):
                for d in depths if args.requests else ():
                    x.runs.setdefault(d, []).append(measure(x, producers[x.name, d], d, args.requests, args.tail))
                if args.clients:
                    x.clients.append(clients_run(x, args.clients))
                if args.share:  # records made first, not measured
                    p = producers[x.name, depths[-1]]
                    drive(p, depths[-1], args.share)
                    run = functools.partial(acknowledged, queues[x.name], args.share)
                    x.shared.append(timed_us(x, args.share, run))
                if args.offsets:  # two ListOffsets requests a query
                    run = functools.partial(offsets, lag[x.name], args.offsets)
                    x.offsets.append(timed_us(x, 2 * args.offsets, run))
                if args.transactions:
                    run = functools.partial(transactions, txn[x.name], args.transactions)
                    x.txns.append(timed_us(x, args.transactions, run))
            print(f"round {r + 1}/{args.rounds} done ({os.getloadavg()[0]:.1f} load)", file=sys.stderr)
        if args.strace:
            for x in proxies:
                for d in depths:
                    x.syscalls[d] = strace_run(x, producers[x.name, d], d, args.requests, work)
        if args.rounds and args.requests:
            report(proxies, depths, args)
        if args.rounds and args.clients:
            print(f"{args.clients} fresh clients per run (connect, ApiVersions, Metadata), {args.rounds} rounds")
            for x in proxies:
                ms = x.clients
                print(f"  {x.name:24} {statistics.median(ms):6.2f} ms CPU per client ({min(ms):.2f}..{max(ms):.2f})")
        if args.rounds and args.transactions:
            print(f"{args.transactions} transactions per run (one record, a group's offset), {args.rounds} rounds")
            for x in proxies:
                print(f"  {x.name:24} {per_item(x, x.txns)} per transaction")
        if args.rounds and args.offsets:
            print(f"{args.offsets} watermark queries per run (2 ListOffsets each), {args.rounds} rounds")
            for x in proxies:
                print(f"  {x.name:24} {per_item(x, x.offsets)} per ListOffsets")
        if args.rounds and args.share:
            print(f"{args.share} records per run taken by a share consumer, each acknowledged, {args.rounds} rounds")
            for x in proxies:
                print(f"  {x.name:24} {per_item(x, x.shared)} per record (ShareFetch and ShareAcknowledge)")
        producers.clear()  # closed before their proxies stop: no reconnect noise
        for q in queues.values():
            q.close()
        txn.clear()
        for c in lag.values():
            c.close()
    finally:
        stop_proxies(proxies, work)


def stop_proxies(proxies: list[Proxy], work: Path) -> None:
    """SIGTERM to every proxy at once (each drains), then wait for each; one that outlives 30 s is killed."""
    procs = [x.proc for x in proxies] + [x.helper for x in proxies if x.helper is not None]
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"logs: {work}", file=sys.stderr)


def idle(proxies: list[Proxy], seconds: float) -> None:
    """Every proxy at once, connected and sent nothing: ms of CPU per second, the whole process and by thread
    (threads that ended meanwhile count in the whole only)."""
    time.sleep(3)  # the warm-up's last answers and timers settle
    before = [(x.cpu(), x.threads()) for x in proxies]
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    print(f"idle for {elapsed:.0f} s, ms of CPU per second (by thread: the largest)")
    for x, ((user, system), threads) in zip(proxies, before, strict=True):
        now_user, now_system = x.cpu()
        whole = (now_user + now_system - user - system) * 1000 / elapsed
        x.idle_ms = whole  # the whole process' (a thread that ended is in it; by thread, it is not)
        spent = {k: (v - threads.get(k, 0.0)) * 1000 / elapsed for k, v in x.threads().items()}
        top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])[:6] if v >= 0.01)
        print(f"  {x.name:24} {whole:6.2f}   {top}")


def per_item(x: Proxy, runs: list[tuple[float, float]]) -> str:
    """µs of CPU per item, median (range); with --idle, also above the proxy's idle CPU over the item's wall time:
    a tenancy's state topic follower and checks (about 1-2 ms a second) are the instance's, not the request's, and
    an item that waits (a transaction's commit: ~100 ms) would be charged them."""
    out = f"{spread([us for us, _ in runs])} µs CPU"
    if x.idle_ms is not None:
        above = [us - x.idle_ms * 1000 * wall for us, wall in runs]
        wall = statistics.median(w for _, w in runs) * 1e3
        out += f", {spread(above)} above idle ({x.idle_ms:.2f} ms/s, {wall:.1f} ms each)"
    return out


def report(proxies: list[Proxy], depths: list[int], args: argparse.Namespace) -> None:
    size = f"{len(RECORD) / 1024:.1f} KiB"
    print(f"{args.requests} Produce requests of one {size} record per run, {args.rounds} rounds, medians (range)")
    print(
        f"{'proxy':24} {'depth':>5} {'CPU µs/req':>22} {'of it kernel':>12} {'vol cs/req':>10} {'invol cs/req':>12}"
        f" {'syscalls/req':>12}"
    )
    out = []
    for x in proxies:
        for d in depths:
            us = [r[0] for r in x.runs[d]]
            vol = statistics.median(r[1] for r in x.runs[d])
            invol = statistics.median(r[2] for r in x.runs[d])
            sc = x.syscalls.get(d, (float("nan"), {}))[0]
            kernel = statistics.median(r[3] for r in x.runs[d])
            cpu = f"{statistics.median(us):.0f} ({min(us):.0f}..{max(us):.0f})"
            print(f"{x.name:24} {d:>5} {cpu:>22} {kernel:>12.0f} {vol:>10.2f} {invol:>12.2f} {sc:>12.1f}")
            out.append({"proxy": x.name, "depth": d, "cpu_us": us, "kernel_us": kernel, "vol": vol, "invol": invol,
                        "syscalls": x.syscalls.get(d)})  # fmt: skip
    for x in proxies:
        for d, (_total, calls) in x.syscalls.items():
            top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v >= 0.05)
            print(f"  {x.name} depth {d}: {top}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
