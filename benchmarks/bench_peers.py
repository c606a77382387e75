#!/usr/bin/env python3
# ruff: noqa: E501, RUF001  (wide report tables and en dashes in its markdown, as the workplace tool writes them)
"""bench-peers: vcproxy side by side with other Kafka proxies, on the same broker, in one run.

The workplace's `bench-peers` (../shared/tools), kept here as issue 27 asks, for this layout: the tools' entry
point is `python -m vcproxy_tools` (the launcher, `kafka start`) and the Kafka tools resolve through
`vcproxy_tools.kafka.tools`. Run: `KROXYLICIOUS_SRC=... KAFKA_PROXY_SRC=... .venv/bin/python benchmarks/bench_peers.py`.

Systems ("variants"), all in front of one Kafka cluster started with vcproxy's own launcher:

  direct           the broker itself (the baseline)
  vcproxy          vcproxy, PLAINTEXT, tenancy off, tracing off (its defaults)
  vcproxy-tenant   vcproxy with tenancy on: one virtual cluster bound by client id, tracing off
  kroxylicious     Kroxylicious, portIdentifiesNode gateway, no filters (passthrough)
  kroxylicious-mt  Kroxylicious, the same plus its MultiTenant filter
  kafka-proxy      grepplabs/kafka-proxy, one --bootstrap-server-mapping per broker
  relay            by name only: benchmarks/relay.py, a cut-through byte relay (splice, nothing read or rewritten)
                   in front of a second broker listener that advertises the relay: what one hop costs at least
                   (the bench's own one-broker cluster only)
  (--metrics: every vcproxy variant with its Prometheus metrics on, as the chart deploys it)
  vcproxy-base, vcproxy-base-tenant
                   with --baseline DIR: vcproxy and vcproxy-tenant from another checkout (before a change), in
                   the same rotating rounds, so a before/after comparison shares the machine's moment

Workloads (Kafka's own perf tools, run as vcproxy's `bench` runs them: fresh JVM, G1, 512m heap):

  a  producer throughput  N x 1 KiB records, acks=1, linger.ms=5, batch.size default, unthrottled
  b  consumer throughput  the same N records read back with a new group, fetch defaults
  c  small requests       100 B records, linger.ms=0, --throughput 5000 for 20 s (+1 s warm-up excluded)
  d  fixed-rate latency   1 KiB records at 2000/s for 20 s (+1 s warm-up excluded)
  e  librdkafka's small   3,300 B records, one Produce each, one at a time, 3,000 requests (rdkafka_small.py):
                          librdkafka names topics by name (Produce v10), Kafka's Java producer by id (v13)

Every round runs every variant once, workload by workload (a for all variants, then b, c, d), the order of
the variants rotating by one place per round, so drifting load hits all variants alike; ratios are taken
against direct within the same round, then the median and range over rounds are reported. Each proxy's CPU comes from /proc/PID/stat (utime+stime) around every tool run, its
RSS from /proc/PID/status. `uptime` is recorded at the start and end of every round.

Peers are installed idempotently into ${XDG_CACHE_HOME:-~/.cache}/peers:
  kafka-proxy   `go install github.com/grepplabs/kafka-proxy@VERSION`; if the module proxy refuses it,
                built from a git clone given as KAFKA_PROXY_SRC (the repo vendors its dependencies).
  kroxylicious  kroxylicious-app + kroxylicious-multitenant from Maven Central (dependency:copy-dependencies
                from a small pom); if Central lacks them, built from a git clone given as KROXYLICIOUS_SRC
                (Maven >= 3.9 is fetched from Central when the installed one is older).

Environment: CHECKOUT (vcproxy checkout with .venv; default: the current directory), XDG_CACHE_HOME,
KROXYLICIOUS_VERSION (0.21.0: the newest that runs on Java 17), KAFKA_PROXY_VERSION (v0.4.3),
KROXYLICIOUS_SRC, KAFKA_PROXY_SRC, KROXYLICIOUS_JAVA_OPTS (extra JVM flags for Kroxylicious).

Pinning (--pin KAFKA/PROXY, taskset CPU lists such as 0/1): the broker's threads and every client tool run on the
first CPUs, every proxy and the relay on the second, in every variant alike (direct's broker and tools too). On a
machine of two cores that gives each hop a core of its own: what it costs in latency, not in CPU taken from the
broker and the clients (docs/performance.md, "Throughput with the proxy on its own core").

Exit status: 0 when the bench completed (even with some runs failed: they are reported), 1 when it could
not run at all, 130 when interrupted. Everything it started is stopped by PID.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "peers"
KROXY_VERSION = os.environ.get("KROXYLICIOUS_VERSION", "0.21.0")
KAFKA_PROXY_VERSION = os.environ.get("KAFKA_PROXY_VERSION", "v0.4.3")
MAVEN_MIN = (3, 9)
MAVEN_FETCH_VERSION = "3.9.9"
ALL_VARIANTS = ["direct", "vcproxy", "vcproxy-tenant", "kroxylicious", "kroxylicious-mt", "kafka-proxy"]
BASELINE_VARIANTS = ["vcproxy-base", "vcproxy-base-tenant"]  # --baseline DIR; ports after the others'
RELAY = "relay"  # asked for by name only: a byte relay (relay.py) on the broker's own port plan (start_cluster)
RELAY_LISTENER, RELAY_OFFSET = 3, 4  # the broker's RELAY listener at base port + 3, advertised at + 4 (the relay's)
CLIENT_ID = "vcbench"  # every client uses it; vcproxy-tenant binds it to its virtual cluster
VC_NAME = "bench"  # vcproxy's virtual cluster and Kroxylicious's virtual cluster (MultiTenant prefix "bench-")
TOPIC_PARTITIONS = 6
TOOL_TIMEOUT = 600
GB = 1_000_000_000  # CPU per 10^9 record bytes, as vcproxy's own bench
QUIET_CORES = 0.3  # a run is "quiet" when other work on the machine took less than this many cores
MIB = 1024 * 1024

# vcproxy's bench runs the perf tools with these (kafka-*-perf-test.sh defaults); the launcher's default
# tool flags (C1 only, serial GC) would cap the client.
PERF_JVM_FLAGS = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35"]
FAST_START_FLAGS = {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def kroxylicious_config(upstream: str, port: int, node_ids: list[int], multitenant: bool) -> str:
    """Kroxylicious in front of `upstream`: one virtual cluster, a port per node from `port` + 1; `multitenant`
    adds its MultiTenant filter (topic names prefixed by the virtual cluster's). Also shell_cost.py's."""
    lines = [
        "virtualClusters:",
        f"  - name: {VC_NAME}",
        "    targetCluster:",
        f"      bootstrapServers: {upstream}",
        "    gateways:",
        "      - name: default",
        "        portIdentifiesNode:",
        f"          bootstrapAddress: 127.0.0.1:{port}",
        f"          nodeStartPort: {port + 1}",
        "          nodeIdRanges:",
        f"            - {{name: brokers, start: {node_ids[0]}, end: {node_ids[-1]}}}",
        "    logNetwork: false",
        "    logFrames: false",
    ]
    if multitenant:
        lines += [
            "filterDefinitions:",
            "  - name: multitenant",
            "    type: MultiTenant",
            "    config:",
            '      prefixResourceNameSeparator: "-"',
            "defaultFilters:",
            "  - multitenant",
        ]
    return "\n".join(lines) + "\n"


def kroxylicious_argv(libs: Path, config: Path, opts: tuple[str, ...] = ()) -> list[str]:
    """What kroxylicious-start.sh/run-java.sh give it outside a container: JVM defaults + ExitOnOutOfMemoryError."""
    main = "io.kroxylicious.app.Kroxylicious"
    return ["java", "-XX:+ExitOnOutOfMemoryError", *opts, "-cp", f"{libs}/*", main, "--config", str(config)]


class BenchError(RuntimeError):
    pass


class InstallError(RuntimeError):
    pass


def run(
    argv: list[str], timeout: float, cwd: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
    )


def tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


# ------------------------------------------------------------------------------------------------
# Installing the peers


def install_kafka_proxy() -> tuple[Path, str]:
    dest = CACHE / f"kafka-proxy-{KAFKA_PROXY_VERSION}"
    binary, stamp = dest / "kafka-proxy", dest / "INSTALLED"
    if binary.is_file() and stamp.is_file():
        return binary, stamp.read_text().strip()
    if not shutil.which("go"):
        raise InstallError("no `go` on PATH")
    dest.mkdir(parents=True, exist_ok=True)
    say(f"kafka-proxy: go install github.com/grepplabs/kafka-proxy@{KAFKA_PROXY_VERSION} ...")
    p = run(
        ["go", "install", f"github.com/grepplabs/kafka-proxy@{KAFKA_PROXY_VERSION}"],
        timeout=1800,
        env={**os.environ, "GOBIN": str(dest), "CGO_ENABLED": "0"},
    )
    if p.returncode == 0 and binary.is_file():
        how = f"go install github.com/grepplabs/kafka-proxy@{KAFKA_PROXY_VERSION}"
    else:
        why = tail(p.stderr or p.stdout, 3)
        src = os.environ.get("KAFKA_PROXY_SRC")
        if not src:
            raise InstallError(
                f"`go install` failed ({why}); set KAFKA_PROXY_SRC to a git clone of github.com/grepplabs/kafka-proxy "
                f"to build {KAFKA_PROXY_VERSION} from source"
            )
        say(f"kafka-proxy: module proxy refused ({why.splitlines()[0] if why else '?'}); building from {src}")
        with tempfile.TemporaryDirectory(prefix="kafka-proxy-src-") as tmp:
            export_git(src, KAFKA_PROXY_VERSION, Path(tmp))
            p = run(
                ["go", "build", "-mod=vendor", "-trimpath", "-o", str(binary),
                 "-ldflags", f"-X github.com/grepplabs/kafka-proxy/config.Version={KAFKA_PROXY_VERSION}", "."],
                timeout=1800, cwd=Path(tmp), env={**os.environ, "CGO_ENABLED": "0"},
            )  # fmt: skip
            if p.returncode != 0 or not binary.is_file():
                raise InstallError(f"go build failed:\n{tail(p.stderr or p.stdout)}")
        how = f"built from source (git tag {KAFKA_PROXY_VERSION}, vendored deps, go build -mod=vendor)"
    stamp.write_text(how + "\n")
    return binary, how


def export_git(src: str, ref: str, out: Path) -> None:
    """Export a tag of a git clone (bare or not) into OUT."""
    archive = subprocess.Popen(["git", "-C", src, "archive", ref], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(out)], stdin=archive.stdout, check=False)
    archive.stdout.close()  # type: ignore[union-attr]
    if archive.wait() != 0 or untar.returncode != 0:
        raise InstallError(f"cannot export {ref} from git clone {src}")


def java_major() -> int:
    p = run(["java", "-version"], timeout=60)
    m = re.search(r'version "(\d+)', p.stderr + p.stdout)
    return int(m.group(1)) if m else 0


def maven_version(mvn: str) -> tuple[int, ...]:
    p = run([mvn, "-v"], timeout=120)
    m = re.search(r"Apache Maven (\d+)\.(\d+)", p.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def find_maven() -> str:
    """A Maven >= 3.9 (Kroxylicious' build needs it): the installed one, or one fetched from Central."""
    mvn = shutil.which("mvn")
    if not mvn:
        raise InstallError("no `mvn` on PATH")
    if maven_version(mvn) >= MAVEN_MIN:
        return mvn
    home = CACHE / f"apache-maven-{MAVEN_FETCH_VERSION}"
    if not (home / "bin" / "mvn").is_file():
        say(f"fetching Maven {MAVEN_FETCH_VERSION} from Maven Central (installed one is older than 3.9) ...")
        with tempfile.TemporaryDirectory(prefix="mvn-fetch-") as tmp:
            (Path(tmp) / "pom.xml").write_text(
                '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion><groupId>local</groupId>'
                "<artifactId>fetch-maven</artifactId><version>1</version><packaging>pom</packaging></project>\n"
            )
            p = run(
                [mvn, "-B", "-q", "dependency:copy",
                 f"-Dartifact=org.apache.maven:apache-maven:{MAVEN_FETCH_VERSION}:tar.gz:bin", f"-DoutputDirectory={tmp}"],
                timeout=900, cwd=Path(tmp),
            )  # fmt: skip
            tars = list(Path(tmp).glob("apache-maven-*-bin.tar.gz"))
            if p.returncode != 0 or not tars:
                raise InstallError(f"cannot fetch Maven {MAVEN_FETCH_VERSION}:\n{tail(p.stdout + p.stderr)}")
            subprocess.run(["tar", "-xzf", str(tars[0]), "-C", str(CACHE)], check=True)
    return str(home / "bin" / "mvn")


KROXY_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.bench-peers</groupId>
  <artifactId>kroxylicious-runner</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>io.kroxylicious</groupId><artifactId>kroxylicious-app</artifactId><version>{v}</version></dependency>
    <dependency><groupId>io.kroxylicious</groupId><artifactId>kroxylicious-multitenant</artifactId><version>{v}</version></dependency>
  </dependencies>
</project>
"""

# Modules of Kroxylicious' reactor that app + multitenant do not need (and whose POMs import BOMs that a
# partial mirror of Central may lack).
KROXY_DROP_MODULES = [
    "kroxylicious-kubernetes", "kroxylicious-docs", "kroxylicious-openmessaging-benchmarks",
    "kroxylicious-filter-archetype", "kroxylicious-kms-providers", "kroxylicious-authorizer-providers",
    "kroxylicious-integration-test-support",
]  # fmt: skip


def copy_kroxy_deps(mvn: str, dest: Path) -> subprocess.CompletedProcess:
    pom_dir = dest / "pom"
    pom_dir.mkdir(parents=True, exist_ok=True)
    (pom_dir / "pom.xml").write_text(KROXY_POM.format(v=KROXY_VERSION))
    libs = dest / "libs"
    shutil.rmtree(libs, ignore_errors=True)
    return run(
        # kroxylicious-app's POM pulls in every other filter through a profile that is on unless this is false.
        [mvn, "-B", "-q", "dependency:copy-dependencies", "-DincludeScope=runtime", "-DwithAdditionalFilters=false",
         f"-DoutputDirectory={libs}"],
        timeout=1800, cwd=pom_dir,
    )  # fmt: skip


def kroxy_origin(mvn: str) -> str:
    """Where Maven got kroxylicious-app: Central, or a local `mvn install` (e.g. an earlier source build)."""
    with contextlib.suppress(Exception):
        p = run(
            [mvn, "-B", "-q", "help:evaluate", "-Dexpression=settings.localRepository", "-DforceStdout"], timeout=300
        )
        repo = Path(re.sub(r"\x1b\[[0-9;]*m", "", p.stdout).strip())
        marker = repo / "io" / "kroxylicious" / "kroxylicious-app" / KROXY_VERSION / "_remote.repositories"
        text = marker.read_text()
        if f"kroxylicious-app-{KROXY_VERSION}.jar>=" in text:
            return "the local Maven repository (installed by a local build from source, not downloaded)"
        if ">central=" in text:
            return "Maven Central"
    return "Maven (origin unknown)"


def install_kroxylicious() -> tuple[Path, str]:
    dest = CACHE / f"kroxylicious-{KROXY_VERSION}"
    stamp = dest / "INSTALLED"
    if stamp.is_file() and any((dest / "libs").glob("kroxylicious-app-*.jar")):
        return dest / "libs", stamp.read_text().strip()
    major, needed = java_major(), 21 if tuple(map(int, KROXY_VERSION.split(".")[:2])) >= (0, 22) else 17
    if major < needed:
        raise InstallError(f"Kroxylicious {KROXY_VERSION} needs Java {needed}; `java` here is {major}")
    mvn = shutil.which("mvn")
    if not mvn:
        raise InstallError("no `mvn` on PATH")
    dest.mkdir(parents=True, exist_ok=True)
    say(
        f"kroxylicious: resolving io.kroxylicious:kroxylicious-app:{KROXY_VERSION} (+ multitenant) from Maven Central ..."
    )
    p = copy_kroxy_deps(mvn, dest)
    if p.returncode == 0:
        origin = kroxy_origin(mvn)
        how = (
            f"io.kroxylicious:kroxylicious-app:{KROXY_VERSION} + kroxylicious-multitenant via dependency:copy-dependencies, "
            f"from {origin}"
        )
    else:
        why = next((ln for ln in (p.stdout + p.stderr).splitlines() if "Could not" in ln or "ERROR" in ln), "?")
        src = os.environ.get("KROXYLICIOUS_SRC")
        if not src:
            raise InstallError(
                f"Maven Central does not serve it here ({why.strip()[:300]}); set KROXYLICIOUS_SRC to a git clone of "
                f"github.com/kroxylicious/kroxylicious to build v{KROXY_VERSION} from source"
            )
        say(f"kroxylicious: not on Central here; building v{KROXY_VERSION} from {src} (several minutes) ...")
        build_mvn = find_maven()
        with tempfile.TemporaryDirectory(prefix="kroxylicious-src-") as tmp:
            root = Path(tmp)
            export_git(src, f"v{KROXY_VERSION}", root)
            pom = (root / "pom.xml").read_text()
            for m in KROXY_DROP_MODULES:
                pom = pom.replace(f"<module>{m}</module>", "")
            (root / "pom.xml").write_text(pom)
            # The app's test-scope dependencies (integration test support and its test-only artifacts) are not
            # needed to run it, and some are missing from a partial mirror of Central.
            apom = root / "kroxylicious-app" / "pom.xml"
            apom.write_text(
                re.sub(r"\s*<dependency>(?:(?!</dependency>).)*?<scope>test</scope>(?:(?!</dependency>).)*?</dependency>", "",
                       apom.read_text(), flags=re.S)
            )  # fmt: skip
            fpom = root / "kroxylicious-filters" / "pom.xml"
            fpom.write_text(
                re.sub(r"<modules>.*?</modules>", "<modules><module>kroxylicious-multitenant</module></modules>",
                       fpom.read_text(), count=1, flags=re.S)
            )  # fmt: skip
            log = dest / "build.log"
            with log.open("w") as fh:
                b = subprocess.run(
                    [build_mvn, "-B", "-Dquick", "-Dmaven.test.skip=true", "-Derrorprone.skip=true", "-Dmaven.gitcommitid.skip=true",
                     "-DwithAdditionalFilters=false", "-pl", "kroxylicious-bom,kroxylicious-app,kroxylicious-filters/kroxylicious-multitenant",
                     "-am", "install"],
                    cwd=root, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, timeout=3600, check=False,
                )  # fmt: skip
            if b.returncode != 0:
                raise InstallError(f"Kroxylicious build failed (log {log}):\n{tail(log.read_text())}")
        p = copy_kroxy_deps(mvn, dest)
        if p.returncode != 0:
            raise InstallError(f"copy-dependencies after the build failed:\n{tail(p.stdout + p.stderr)}")
        how = (
            f"built from source (git tag v{KROXY_VERSION}, `mvn -Dquick install` of kroxylicious-app + kroxylicious-multitenant "
            f"with Maven >= 3.9), runtime deps copied with dependency:copy-dependencies"
        )
    stamp.write_text(how + "\n")
    return dest / "libs", how


# ------------------------------------------------------------------------------------------------
# /proc


class Proc:
    tick = os.sysconf("SC_CLK_TCK")

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu(self) -> tuple[float, float]:
        """(user, system) CPU seconds so far, threads included."""
        text = Path(f"/proc/{self.pid}/stat").read_text()
        fields = text[text.rindex(")") + 2 :].split()
        return int(fields[11]) / self.tick, int(fields[12]) / self.tick

    def status_kib(self, key: str) -> int | None:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return None


def parse_pin(text: str) -> tuple[list[int], list[int]]:
    """`--pin KAFKA/PROXY`: two taskset CPU lists (`0`, `0-3`, `0,2`), each of CPUs this process may use."""
    allowed = os.sched_getaffinity(0)

    def cpus(part: str) -> list[int]:
        out: set[int] = set()
        for item in part.split(","):
            lo, dash, hi = item.partition("-")
            if not lo.isdigit() or (dash and not hi.isdigit()):
                raise BenchError(f"--pin {text!r}: {item!r} is not a CPU or a range of CPUs")
            out |= set(range(int(lo), int(hi or lo) + 1))
        if not out or not out <= allowed:
            raise BenchError(f"--pin {text!r}: CPUs {sorted(out)} are not among this machine's {sorted(allowed)}")
        return sorted(out)

    kafka, sep, proxy = text.partition("/")
    if not sep:
        raise BenchError(f"--pin {text!r}: expected KAFKA/PROXY, e.g. 0/1")
    return cpus(kafka), cpus(proxy)


def taskset(cpus: list[int]) -> list[str]:
    return ["taskset", "-c", ",".join(map(str, cpus))]


def pin_threads(pid: int, cpus: list[int]) -> None:
    """Every thread of a running process onto `cpus` (threads made later inherit their maker's); twice, for
    threads started while the first pass ran."""
    for _ in range(2):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), cpus)


def settle() -> float:
    """Writes out the page cache's dirty pages before a run (--settle), and returns how long that took: a gigabyte
    produced stays dirty for the kernel's 30 s (vm.dirty_expire_centisecs), so without it the next run, whichever
    system's, runs beside its write-back."""
    started = time.monotonic()
    os.sync()
    return time.monotonic() - started


def system_busy() -> float:
    """CPU seconds the whole machine has been busy (all but idle and iowait)."""
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(vals) - vals[3] - vals[4]) / Proc.tick


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def uptime_line() -> str:
    with contextlib.suppress(Exception):
        return run(["uptime"], timeout=10).stdout.strip()
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------------------------------------
# Tool output


PRODUCER_RE = re.compile(
    r"(?P<records>\d+) (?P<steady>steady state )?records sent, (?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>[\d.]+) ms 50th, (?P<p95>[\d.]+) ms 95th, "
    r"(?P<p99>[\d.]+) ms 99th, (?P<p999>[\d.]+) ms 99\.9th"
)
REQUEST_TOTAL_RE = re.compile(r"^producer-metrics:request-total:\{[^}]*\}\s*:\s*([\d.]+)", re.M)


def parse_producer(out: str) -> dict[str, float]:
    ms = list(PRODUCER_RE.finditer(out))
    if not ms:
        raise BenchError("no summary line in producer perf output")
    whole, last = ms[0], ms[-1]  # with --warmup-records the last is the steady-state line
    res = {
        "records": int(whole["records"]),
        "mb_s": float(whole["mbps"]),
        "rec_s": float(whole["rps"]),
        "avg_ms": float(last["avg"]),
        "p50_ms": float(last["p50"]),
        "p95_ms": float(last["p95"]),
        "p99_ms": float(last["p99"]),
        "p999_ms": float(last["p999"]),
        "max_ms": float(last["max"]),
        "steady_state": last["steady"] is not None,
    }
    m = REQUEST_TOTAL_RE.search(out)
    if m:
        res["requests"] = float(m.group(1))
    return res


def parse_consumer(out: str) -> dict[str, float]:
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.startswith("start.time,"):
            header = [h.strip() for h in line.split(",")]
            for row in lines[i + 1 :]:
                cells = [c.strip() for c in row.split(",")]
                if len(cells) == len(header):
                    v = dict(zip(header, cells, strict=True))
                    return {
                        "records": int(float(v["data.consumed.in.nMsg"])),
                        "mib": float(v["data.consumed.in.MB"]),
                        "mb_s_total": float(v["MB.sec"]),
                        "mb_s": float(v["fetch.MB.sec"]),
                        "rec_s": float(v["fetch.nMsg.sec"]),
                        "fetch_ms": float(v["fetch.time.ms"]),
                        "rebalance_ms": float(v["rebalance.time.ms"]),
                    }
    raise BenchError("no summary row in consumer perf output")


# ------------------------------------------------------------------------------------------------
# The bench


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.checkout = Path(os.environ.get("CHECKOUT") or os.getcwd()).resolve()
        self.py = self.checkout / ".venv" / "bin" / "python"
        if not self.py.exists():
            raise BenchError(f"{self.checkout} has no .venv/bin/python (set CHECKOUT to a vcproxy checkout)")
        self.baseline = Path(args.baseline).resolve() if args.baseline else None
        self.relay = False  # the relay variant asked for (main): the broker gets its listener
        self.pin = parse_pin(args.pin) if args.pin else None  # (Kafka's and the tools' CPUs, the proxies')
        if self.baseline is not None and not (self.baseline / "proxy").is_dir():
            raise BenchError(f"--baseline {self.baseline}: not a vcproxy checkout (no proxy/)")
        self.work = Path(tempfile.mkdtemp(prefix="bench-peers-"))
        self.logs = self.work / "logs"
        self.logs.mkdir()
        self.run_id = f"pb{int(time.time()) % 100000:05d}"
        self.procs: dict[str, subprocess.Popen] = {}  # variant -> proxy process we started
        self.probes: dict[str, Proc] = {}
        self.bootstraps: dict[str, str] = {}
        self.broker_probes: list[Proc] = []
        self.own_cluster = False
        self.cluster: dict[str, Any] = {}
        self.cluster_dir: Path | None = None
        self.tool_prefix: dict[str, list[str]] = {}
        self.skipped: dict[str, str] = {}
        self.installed: dict[str, str] = {}
        self.dead: dict[str, str] = {}
        self.versions: dict[str, str] = {}
        self.tenancy_check: dict[str, list[str]] = {}
        self.configs: dict[str, str] = {}  # variant -> its config file, or its command line
        self.cmd_config = self.work / "client.properties"
        self.cmd_config.write_text(f"client.id={CLIENT_ID}\n")

    # -- setup ------------------------------------------------------------------------------------

    def vcproxy_cli(self, base: bool = False) -> list[str]:
        """`python -m vcproxy_tools`: the baseline's with its own .venv where it has one (its compiled walker
        may differ from this checkout's), else this checkout's."""
        py = self.baseline / ".venv" / "bin" / "python" if base and self.baseline is not None else self.py
        return [str(py if py.exists() else self.py), "-m", "vcproxy_tools"]

    def resolve_tools(self) -> None:
        """The exact java argv vcproxy's bench uses for each perf tool (and the launcher's for kafka-topics)."""
        code = (
            "import json,sys\n"
            "from vcproxy_tools.kafka.tools import tool_argv\n"
            "out={}\n"
            "for n in sys.argv[1:]:\n"
            "    a=tool_argv(n,[],heap='512m') if n.endswith('perf-test') else tool_argv(n,[])\n"
            "    out[n]=a\n"
            "print(json.dumps(out))\n"
        )
        self.tool_prefix["rdkafka-small"] = [str(self.py), str(Path(__file__).resolve().with_name("rdkafka_small.py"))]
        names = ["kafka-producer-perf-test", "kafka-consumer-perf-test", "kafka-topics"]
        p = run([str(self.py), "-c", code, *names], timeout=900, cwd=self.checkout)
        if p.returncode != 0:
            raise BenchError(f"cannot resolve Kafka tools through {self.checkout}:\n{tail(p.stderr)}")
        argvs = json.loads(p.stdout.strip().splitlines()[-1])
        for n, a in argvs.items():
            if n.endswith("perf-test"):
                a = [x for x in a if x not in FAST_START_FLAGS]
                a = [a[0], *PERF_JVM_FLAGS, *a[1:]]
            self.tool_prefix[n] = a

    def start_cluster(self) -> None:
        if self.a.cluster_dir:
            self.cluster_dir = Path(self.a.cluster_dir).resolve()
            if not (self.cluster_dir / "cluster.json").exists():
                raise BenchError(f"{self.cluster_dir}/cluster.json not found")
            say(f"using the running cluster in {self.cluster_dir}")
        else:
            self.cluster_dir = self.work / "kafka"
            say(f"starting a {self.a.brokers}-broker Kafka on 127.0.0.1:{self.a.base_port} ...")
            p = run(
                [*self.vcproxy_cli(), "kafka", "start", "--dir", str(self.cluster_dir), "--brokers", str(self.a.brokers),
                 "--base-port", str(self.a.base_port), *self.relay_properties()],
                timeout=600, cwd=self.checkout,
            )  # fmt: skip
            self.own_cluster = (self.cluster_dir / "cluster.json").exists()
            if p.returncode != 0:
                raise BenchError(f"kafka start failed:\n{tail(p.stderr + p.stdout)}")
        self.cluster = json.loads((self.cluster_dir / "cluster.json").read_text())
        self.bootstraps["direct"] = self.cluster["bootstrap"]
        self.broker_probes = [Proc(int(n["pid"])) for n in self.cluster["nodes"] if n.get("pid")]
        if self.pin is not None:
            for n in self.cluster["nodes"]:
                if n.get("pid"):
                    pin_threads(int(n["pid"]), self.pin[0])
        self.versions["kafka"] = self.cluster.get("version", "?")

    def relay_properties(self) -> list[str]:
        """With the relay variant, the broker's second listener, RELAY, which advertises the relay's address: a
        client that bootstraps through the relay is sent back to it by every Metadata answer (the launcher's own
        listeners spelled out again beside it; one broker only, as `listeners` is every node's)."""
        if not self.relay:
            return []
        b = self.a.base_port
        listeners = f"PLAINTEXT://127.0.0.1:{b},CONTROLLER://127.0.0.1:{b + 1},RELAY://127.0.0.1:{b + RELAY_LISTENER}"
        advertised = f"PLAINTEXT://127.0.0.1:{b},RELAY://127.0.0.1:{b + RELAY_OFFSET}"
        protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,RELAY:PLAINTEXT"
        props = {
            "listeners": listeners,
            "advertised.listeners": advertised,
            "listener.security.protocol.map": protocols,
        }
        return [x for k, v in props.items() for x in ("--property", f"{k}={v}")]

    def stop_cluster(self) -> None:
        if self.own_cluster and self.cluster_dir is not None:
            say("stopping the Kafka cluster ...")
            run([*self.vcproxy_cli(), "kafka", "stop", "--dir", str(self.cluster_dir)], timeout=300, cwd=self.checkout)
            for data in self.cluster_dir.glob("n*/data"):
                shutil.rmtree(data, ignore_errors=True)

    def port(self, variant: str, shift: int = 0) -> int:
        return self.a.proxy_port_base + 100 * (ALL_VARIANTS + BASELINE_VARIANTS).index(variant) + 10 * shift

    def free_port_block(self, variant: str) -> int:
        """The variant's bootstrap port: the first of its 100-port block whose bootstrap and broker ports can be
        bound now (ports in the ephemeral range may be held for a while by other programs' client sockets)."""
        n = max(b[0] for b in self.brokers()) + 1
        for shift in range(9):
            base = self.port(variant, shift)
            try:
                for q in range(base, base + n + 1):
                    with socket.socket() as s:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                        s.bind(("127.0.0.1", q))
                return base
            except OSError:
                say(f"{variant}: a port in {base}..{base + n} is taken; trying the next block of 10")
        raise BenchError(f"no free port block for {variant}")

    def install(self, variants: list[str]) -> None:
        CACHE.mkdir(parents=True, exist_ok=True)
        if any(v.startswith("kroxylicious") for v in variants):
            try:
                libs, how = install_kroxylicious()
                self.kroxy_libs = libs
                self.installed["kroxylicious"] = how
                self.versions["kroxylicious"] = KROXY_VERSION
            except (InstallError, subprocess.TimeoutExpired) as exc:
                for v in ("kroxylicious", "kroxylicious-mt"):
                    self.skipped[v] = f"install failed: {exc}"
        if "kafka-proxy" in variants:
            try:
                self.kafka_proxy_bin, how = install_kafka_proxy()
                self.installed["kafka-proxy"] = how
                self.versions["kafka-proxy"] = KAFKA_PROXY_VERSION
            except (InstallError, subprocess.TimeoutExpired) as exc:
                self.skipped["kafka-proxy"] = f"install failed: {exc}"
        with contextlib.suppress(Exception):
            rev = run(["git", "-C", str(self.checkout), "rev-parse", "--short", "HEAD"], timeout=30).stdout.strip()
            dirty = run(["git", "-C", str(self.checkout), "status", "--porcelain"], timeout=30).stdout.strip()
            self.versions["vcproxy"] = rev + (" (+ uncommitted changes)" if dirty else "")
        if self.baseline is not None:
            with contextlib.suppress(Exception):
                rev = run(["git", "-C", str(self.baseline), "rev-parse", "--short", "HEAD"], timeout=30).stdout.strip()
                self.versions["vcproxy-base"] = f"{rev} ({self.baseline})"
        with contextlib.suppress(Exception):
            self.versions["java"] = run(["java", "-version"], timeout=60).stderr.splitlines()[0]
        with contextlib.suppress(Exception):
            self.versions["python (vcproxy)"] = run([str(self.py), "-V"], timeout=30).stdout.strip()

    # -- proxies ----------------------------------------------------------------------------------

    def brokers(self) -> list[tuple[int, str, int]]:
        return [(int(n["node_id"]), n["host"], int(n["port"])) for n in self.cluster["nodes"] if "broker" in n["roles"]]

    def start_proxy(self, variant: str) -> None:
        if variant == RELAY:
            return self._start_proxy(variant, self.a.base_port + RELAY_OFFSET)
        for attempt in range(3):
            try:
                return self._start_proxy(variant, self.free_port_block(variant))
            except BenchError as exc:
                if (
                    "Address already in use" not in str(exc) and "address already in use" not in str(exc)
                ) or attempt == 2:
                    raise
                say(f"{variant}: lost a port race at start; retrying")

    def _start_proxy(self, variant: str, port: int) -> None:
        upstream = self.cluster["bootstrap"]
        log = self.logs / f"{variant}.log"
        cfg_dir = self.work / "config"
        cfg_dir.mkdir(exist_ok=True)
        ready_line = None
        env = dict(os.environ)
        if variant.startswith("vcproxy"):
            cfg: dict[str, Any] = {
                "listeners": {"host": "127.0.0.1", "bootstrap_port": port, "broker_port_base": port},
                "upstream": {"bootstrap_servers": upstream.split(",")},
                "logging": {"level": "INFO"},
            }
            if variant.endswith("-tenant"):
                cfg["tenancy"] = {"enabled": True, "virtual_clusters": [{"name": VC_NAME, "client_ids": [CLIENT_ID]}]}
            if self.a.metrics:  # as deployed (the chart's probes need them): /metrics on a port of the variant's block
                cfg["metrics"] = {"enabled": True, "host": "127.0.0.1", "port": port + 9}
            path = cfg_dir / f"{variant}.yaml"
            path.write_text(json.dumps(cfg, indent=2) + "\n")  # JSON is YAML
            # `python -m` imports from its working directory first: the baseline's code (and its venv, if any)
            base = variant.startswith("vcproxy-base")
            argv = [*self.vcproxy_cli(base), "serve", "--config", str(path)]
            cwd, ready_line = (self.baseline if base and self.baseline else self.checkout), "proxy ready:"
            env["PYTHONUNBUFFERED"] = "1"
            bootstrap = f"127.0.0.1:{port}"
        elif variant.startswith("kroxylicious"):
            ids = sorted(b[0] for b in self.brokers())
            path = cfg_dir / f"{variant}.yaml"
            path.write_text(kroxylicious_config(upstream, port, ids, multitenant=variant == "kroxylicious-mt"))
            opts = tuple(os.environ.get("KROXYLICIOUS_JAVA_OPTS", "").split())
            argv = kroxylicious_argv(self.kroxy_libs, path, opts)
            cwd = self.work
            bootstrap = f"127.0.0.1:{port}"
        elif variant == RELAY:
            argv = [str(self.py), str(Path(__file__).with_name("relay.py")), "--listen", f"127.0.0.1:{port}",
                    "--target", f"127.0.0.1:{self.a.base_port + RELAY_LISTENER}"]  # fmt: skip
            cwd, ready_line = self.checkout, "relay ready:"
            bootstrap = f"127.0.0.1:{port}"
        elif variant == "kafka-proxy":
            argv = [str(self.kafka_proxy_bin), "server"]
            for node_id, host, bport in sorted(self.brokers()):
                argv += ["--bootstrap-server-mapping", f"{host}:{bport},127.0.0.1:{port + node_id}"]
            argv += [
                "--dynamic-listeners-disable",
                "--http-disable",
                "--default-listener-ip",
                "127.0.0.1",
                "--log-level",
                "info",
            ]
            cwd = self.work
            bootstrap = f"127.0.0.1:{port + sorted(self.brokers())[0][0]}"
        else:
            raise AssertionError(variant)
        shown = [Path(x).name if x.startswith("/") and not x.endswith("/*") else x for x in argv]
        shown = [x if not x.endswith("/*") else "<libs>/*" for x in shown]
        self.configs[variant] = (
            "$ " + " ".join(shown) + "\n" + (path.read_text() if variant not in ("kafka-proxy", RELAY) else "")
        )
        if self.pin is not None:
            argv = [*taskset(self.pin[1]), *argv]
        fh = log.open("ab")
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
        fh.close()
        self.procs[variant] = proc
        self.probes[variant] = Proc(proc.pid)
        self.bootstraps[variant] = bootstrap
        host, p = bootstrap.rsplit(":", 1)
        deadline = time.monotonic() + self.a.start_timeout
        while True:
            if proc.poll() is not None:
                raise BenchError(
                    f"{variant} exited with {proc.returncode} at start:\n{tail(log.read_text(errors='replace'))}"
                )
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{variant} not ready after {self.a.start_timeout}s:\n{tail(log.read_text(errors='replace'))}"
                )
            ok = ready_line is None or ready_line in log.read_text(errors="replace")
            if ok:
                with contextlib.suppress(OSError), socket.create_connection((host, int(p)), timeout=1):
                    break
            time.sleep(0.2)
        say(f"{variant}: pid {proc.pid}, bootstrap {bootstrap}")

    def stop_proxies(self) -> None:
        for variant, proc in list(self.procs.items()):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(30)
            self.procs.pop(variant)

    def alive(self, variant: str) -> bool:
        if variant == "direct":
            return True
        proc = self.procs.get(variant)
        if proc is None:
            return False
        if proc.poll() is not None and variant not in self.dead:
            self.dead[variant] = (
                f"exited with {proc.returncode}; log tail:\n{tail((self.logs / f'{variant}.log').read_text(errors='replace'))}"
            )
        return proc.poll() is None

    # -- tools --------------------------------------------------------------------------------------

    def tool(self, label: str, name: str, args: list[str], timeout: float = TOOL_TIMEOUT) -> str:
        argv = [*(taskset(self.pin[0]) if self.pin is not None else []), *self.tool_prefix[name], *args]
        t0 = time.monotonic()
        try:
            p = run(argv, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{label}: {name} did not finish within {timeout}s") from None
        (self.logs / f"{label}.log").write_text(
            f"$ {' '.join(argv)}\n# exit {p.returncode} after {time.monotonic() - t0:.1f}s\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}\n"
        )
        if p.returncode != 0:
            raise BenchError(f"{label}: {name} exited with {p.returncode}:\n{tail(p.stderr or p.stdout)}")
        return p.stdout

    @contextlib.contextmanager
    def measure(self, variant: str):
        """CPU of the variant's proxy, every proxy, the broker(s), the tool and the machine over the block."""
        probes = {f"proxy:{v}": pr for v, pr in self.probes.items() if self.procs[v].poll() is None}
        probes |= {f"broker{i}": pr for i, pr in enumerate(self.broker_probes)}
        before = {}
        for k, pr in probes.items():
            with contextlib.suppress(OSError):
                before[k] = pr.cpu()
        sys0, kids0, t0 = system_busy(), children_cpu(), time.monotonic()
        used: dict[str, float] = {}
        yield used
        wall = time.monotonic() - t0
        used["wall_s"] = wall
        used["machine_cores"] = (system_busy() - sys0) / wall
        used["tool_cpu_s"] = children_cpu() - kids0
        deltas: dict[str, tuple[float, float]] = {}
        for k, pr in probes.items():
            with contextlib.suppress(OSError):
                (u0, s0), (u1, s1) = before[k], pr.cpu()
                deltas[k] = (u1 - u0, s1 - s0)
        used["broker_cpu_s"] = sum(sum(d) for k, d in deltas.items() if k.startswith("broker"))
        all_proxies = sum(sum(d) for k, d in deltas.items() if k.startswith("proxy:"))
        # Every proxy's CPU over the block: the others idled through it, which is what their idle rate is read from.
        used["proxies_cpu_s"] = {k.removeprefix("proxy:"): sum(d) for k, d in deltas.items() if k.startswith("proxy:")}
        ours = used["broker_cpu_s"] + all_proxies + used["tool_cpu_s"]
        used["other_cores"] = max(0.0, used["machine_cores"] * wall - ours) / wall
        if f"proxy:{variant}" in deltas:
            u, s = deltas[f"proxy:{variant}"]
            used["proxy_cpu_s"], used["proxy_sys_s"] = u + s, s
            used["proxy_rss_kib"] = self.probes[variant].status_kib("VmRSS") or 0

    def create_topics(self, topics: list[tuple[str, str]]) -> None:
        """(variant, topic): each created through that variant, so tenant proxies create it in their VC."""
        pending = list(topics)
        while pending:
            batch, pending = pending[:4], pending[4:]
            procs = []
            for variant, topic in batch:
                argv = [*self.tool_prefix["kafka-topics"], "--bootstrap-server", self.bootstraps[variant],
                        "--command-config", str(self.cmd_config), "--create", "--topic", topic,
                        "--partitions", str(TOPIC_PARTITIONS), "--replication-factor", "1"]  # fmt: skip
                procs.append((variant, topic, subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                               stderr=subprocess.STDOUT, text=True)))  # fmt: skip
            for variant, topic, proc in procs:
                out, _ = proc.communicate(timeout=300)
                if proc.returncode != 0:
                    raise BenchError(f"creating {topic} through {variant} failed:\n{tail(out)}")

    def check_tenancy(self) -> None:
        """What the broker really holds: tenant variants' topics must carry their physical prefixes."""
        out = self.tool(
            "topics-list-direct", "kafka-topics", ["--bootstrap-server", self.bootstraps["direct"], "--list"]
        )
        names = [n for n in out.split() if self.run_id in n]
        for v in ("vcproxy-tenant", "kroxylicious-mt", "vcproxy-base-tenant"):
            mine = [n for n in names if f"-{v}" in n.split(".")[-1]]
            self.tenancy_check[v] = sorted(mine)[:2]

    # -- the suite ----------------------------------------------------------------------------------

    def suite(self, rnd: int, variant: str, topic: str, workloads: str = "abcde") -> list[dict[str, Any]]:
        a, boot = self.a, self.bootstraps[variant]
        common = ["--bootstrap-server", boot, "--topic", topic]
        cid = ["--command-property", f"client.id={CLIENT_ID}"]
        out_rows: list[dict[str, Any]] = []
        tag = f"r{rnd}-{variant}"

        def one(work: str, fn) -> None:
            row: dict[str, Any] = {"round": rnd, "variant": variant, "workload": work}
            if not self.alive(variant):
                row["error"] = f"proxy dead: {self.dead.get(variant, '?').splitlines()[0]}"
                out_rows.append(row)
                return
            try:
                if self.a.settle:
                    row["settle_s"] = settle()
                with self.measure(variant) as used:
                    row |= fn()
                row |= used
            except (BenchError, KeyError, ValueError, OSError) as exc:
                row["error"] = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
                say(f"  {tag} {work}: FAILED {row['error']}")
            self.alive(variant)
            out_rows.append(row)

        def producer():
            out = self.tool(f"{tag}-a-producer", "kafka-producer-perf-test", [
                *common, "--num-records", str(a.records), "--record-size", "1024", "--throughput", "-1",
                "--command-property", "acks=1", "--command-property", "linger.ms=5", *cid, "--print-metrics"])  # fmt: skip
            r = parse_producer(out)
            if r["records"] != a.records:
                raise BenchError(f"producer sent {r['records']} of {a.records}")
            r["bytes"] = a.records * 1024
            say(f"  {tag} a producer: {r['mb_s']:.1f} MB/s, p99 {r['p99_ms']:g} ms")
            return r

        def consumer():
            out = self.tool(f"{tag}-b-consumer", "kafka-consumer-perf-test", [
                *common, "--num-records", str(a.records), "--group", f"{self.run_id}-{tag}", "--timeout", "30000", *cid])  # fmt: skip
            r = parse_consumer(out)
            if r["records"] < a.records:
                raise BenchError(f"consumer read {r['records']} of {a.records}")
            r["bytes"] = r["records"] * 1024
            say(f"  {tag} b consumer: {r['mb_s']:.1f} MB/s (fetch)")
            return r

        def small():
            rate, secs = a.small_rate, a.latency_seconds
            out = self.tool(f"{tag}-c-small", "kafka-producer-perf-test", [
                *common, "--num-records", str(rate * (secs + 1)), "--warmup-records", str(rate), "--record-size", "100",
                "--throughput", str(rate), "--command-property", "acks=1", "--command-property", "linger.ms=0", *cid,
                "--print-metrics"])  # fmt: skip
            r = parse_producer(out)
            say(
                f"  {tag} c small: p50 {r['p50_ms']:g} ms, p99 {r['p99_ms']:g} ms, {r.get('requests', 0):,.0f} requests"
            )
            return r

        def fixed():
            rate, secs = a.fixed_rate, a.latency_seconds
            out = self.tool(f"{tag}-d-fixed", "kafka-producer-perf-test", [
                *common, "--num-records", str(rate * (secs + 1)), "--warmup-records", str(rate), "--record-size", "1024",
                "--throughput", str(rate), "--command-property", "acks=1", *cid])  # fmt: skip
            r = parse_producer(out)
            say(f"  {tag} d fixed: p50 {r['p50_ms']:g}, p99 {r['p99_ms']:g}, p99.9 {r['p999_ms']:g} ms")
            return r

        def rdkafka():
            out = self.tool(f"{tag}-e-rdkafka", "rdkafka-small", [
                "--bootstrap", boot, "--topic", topic, "--client-id", CLIENT_ID, "--requests", str(a.rdkafka_requests)])  # fmt: skip
            r = json.loads(out.strip().splitlines()[-1])
            say(f"  {tag} e librdkafka: p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, {r['requests']:,} requests")
            return r

        for w in workloads:
            one(w, {"a": producer, "b": consumer, "c": small, "d": fixed, "e": rdkafka}[w])
        return out_rows

    def warm_up(self, variant: str, topic: str) -> None:
        boot = self.bootstraps[variant]
        with contextlib.suppress(BenchError):
            self.tool(f"warmup-{variant}-producer", "kafka-producer-perf-test", [
                "--bootstrap-server", boot, "--topic", topic, "--num-records", str(self.a.records), "--record-size", "1024",
                "--throughput", "-1", "--command-property", "acks=1", "--command-property", "linger.ms=5",
                "--command-property", f"client.id={CLIENT_ID}"])  # fmt: skip
            self.tool(f"warmup-{variant}-consumer", "kafka-consumer-perf-test", [
                "--bootstrap-server", boot, "--topic", topic, "--num-records", str(self.a.records),
                "--group", f"{self.run_id}-warmup-{variant}", "--timeout", "30000",
                "--command-property", f"client.id={CLIENT_ID}"])  # fmt: skip

    def main(self) -> dict[str, Any]:
        a = self.a
        variants = [v.strip() for v in a.variants.split(",") if v.strip()]
        if self.baseline is not None and not any(v in BASELINE_VARIANTS for v in variants):
            ours = [i for i, v in enumerate(variants) if v.startswith("vcproxy")]
            at = ours[-1] + 1 if ours else len(variants)  # beside this checkout's
            variants[at:at] = BASELINE_VARIANTS
        known = ALL_VARIANTS + [RELAY] + (BASELINE_VARIANTS if self.baseline is not None else [])
        bad = [v for v in variants if v not in known]
        if bad:
            raise BenchError(f"unknown variants {bad}; known: {known} (vcproxy-base*: with --baseline)")
        self.relay = RELAY in variants
        if self.relay and (a.brokers != 1 or a.cluster_dir):
            raise BenchError("the relay variant needs the bench's own cluster of one broker (its listener)")
        t_start = time.time()
        load_start = uptime_line()
        self.install(variants)
        if a.install_only:
            return {}
        self.resolve_tools()
        self.start_cluster()
        for v in variants:
            if v == "direct" or v in self.skipped:
                continue
            try:
                self.start_proxy(v)
            except BenchError as exc:
                self.skipped[v] = f"did not start: {exc}"
                say(f"{v}: {self.skipped[v]}")
        active = [v for v in variants if v not in self.skipped]
        topics = {(r, v): f"{self.run_id}-r{r}-{v}" for r in range(1, a.rounds + 1) for v in active}
        warm = {v: f"{self.run_id}-warm-{v}" for v in active}
        say(f"creating {len(topics) + len(warm)} topics, each through its own variant ...")
        todo = [(v, t) for v, t in warm.items()] + [(v, t) for (r, v), t in topics.items()]
        ok_topics: list[tuple[str, str]] = []
        for v in list(active):
            mine = [x for x in todo if x[0] == v]
            try:
                self.create_topics(mine)
                ok_topics += mine
            except BenchError as exc:
                self.skipped[v] = f"topic creation failed: {exc}"
                active.remove(v)
                say(f"{v}: {self.skipped[v]}")
        self.check_tenancy()
        if not a.no_warmup:
            say("warm-up: one unmeasured full produce + consume per variant ...")
            for v in active:
                self.warm_up(v, warm[v])
        rows: list[dict[str, Any]] = []
        loads: list[dict[str, Any]] = []
        for r in range(1, a.rounds + 1):
            k = (r - 1) % len(active)
            order = active[k:] + active[:k]
            ld = {"round": r, "order": order, "start": uptime_line(), "start_time": time.strftime("%H:%M:%S")}
            say(f"round {r}/{a.rounds}: {', '.join(order)}   [{ld['start']}]")
            # Workload by workload, every variant in turn: each proxy's run is at most a few minutes from
            # direct's, so load that drifts (other work on the machine) hits the pairs alike.
            for w in a.workloads:
                for v in order:
                    rows += self.suite(r, v, topics[(r, v)], w)
            ld["end"], ld["end_time"] = uptime_line(), time.strftime("%H:%M:%S")
            loads.append(ld)
        peaks = {v: self.probes[v].status_kib("VmHWM") for v in active if v in self.probes}
        return {
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "seconds": round(time.time() - t_start, 1),
            "options": {k: v for k, v in vars(a).items()},
            "variants": active,
            "skipped": self.skipped,
            "dead": self.dead,
            "installed": self.installed,
            "versions": self.versions,
            "tenancy_check": self.tenancy_check,
            "configs": self.configs,
            "bootstraps": self.bootstraps,
            "cpus": os.cpu_count(),
            "load": {"start": load_start, "end": uptime_line(), "rounds": loads},
            "peak_rss_kib": peaks,
            "rows": rows,
            "work_dir": str(self.work),
        }

    def close(self) -> None:
        try:
            self.stop_proxies()
        finally:
            if self.own_cluster:
                self.stop_cluster()
            elif self.cluster_dir is not None and self.tool_prefix:
                with contextlib.suppress(Exception):
                    self.tool("cleanup", "kafka-topics", ["--bootstrap-server", self.bootstraps["direct"], "--delete",
                                                          "--topic", f".*{self.run_id}-.*"])  # fmt: skip


# ------------------------------------------------------------------------------------------------
# Report


def med(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x: float | None, nd: int = 1) -> str:
    if x is None:
        return "–"
    return f"{x:,.{nd}f}"


def rng(xs: list[float], nd: int = 2) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    return f"{statistics.median(xs):.{nd}f} ({min(xs):.{nd}f}–{max(xs):.{nd}f})"


def against_relay(
    variants: list[str],
    ratios: Callable[[str, str, str, str], list[float]],
    per_gb: Callable[[str, str], list[float]],
) -> list[str]:
    """Each system against the relay, per round: what a proxy adds to, or takes from, one hop that does nothing (on a
    small machine the hop's own cost is most of any proxy's gap to direct)."""
    out = ["### Against the relay (one hop that does nothing)", ""]
    out.append("| system | producer ÷ relay (per round) | consumer ÷ relay (per round) | CPU/GB produced ÷ relay's "
               "| CPU/GB consumed ÷ relay's |")  # fmt: skip
    out.append("|---|---|---|---|---|")
    for v in variants:
        cpu = []
        for w in "ab":
            mine, hop = med(per_gb(v, w)), med(per_gb(RELAY, w))
            cpu.append(fmt(mine / hop, 2) if mine and hop else "–")
        a, b = rng(ratios(v, "a", "mb_s", RELAY)), rng(ratios(v, "b", "mb_s", RELAY))
        out.append(f"| {v} | {a} | {b} | {cpu[0]} | {cpu[1]} |")
    return [*out, ""]


def report(res: dict[str, Any]) -> str:
    rows, variants = res["rows"], res["variants"]
    ok = [r for r in rows if "error" not in r]
    rounds = sorted({r["round"] for r in rows})

    def val(v: str, w: str, key: str, rnd: int | None = None) -> list[float]:
        return [
            r[key]
            for r in ok
            if r["variant"] == v and r["workload"] == w and key in r and (rnd is None or r["round"] == rnd)
        ]

    def ratios(v: str, w: str, key: str, against: str = "direct") -> list[float]:
        out = []
        for rnd in rounds:
            x, d = val(v, w, key, rnd), val(against, w, key, rnd)
            if x and d and d[0]:
                out.append(x[0] / d[0])
        return out

    def per_gb(v: str, w: str) -> list[float]:
        return [
            r["proxy_cpu_s"] / (r["bytes"] / GB)
            for r in ok
            if r["variant"] == v and r["workload"] == w and "proxy_cpu_s" in r
        ]

    def us_per_req(v: str, w: str) -> list[float]:
        return [1e6 * r["proxy_cpu_s"] / r["requests"] for r in ok
                if r["variant"] == v and r["workload"] == w and r.get("requests") and "proxy_cpu_s" in r]  # fmt: skip

    def idle_rate(v: str) -> float | None:
        """CPU seconds a second of `v`'s proxy while the other systems' workloads ran (timers, its state topic's
        follower, metrics): not the cost of any request, and in the figures of a long, sparse run."""
        spans = [
            (r["proxies_cpu_s"][v], r["wall_s"]) for r in ok if r["variant"] != v and v in r.get("proxies_cpu_s", {})
        ]
        wall = sum(w for _, w in spans)
        return sum(c for c, _ in spans) / wall if wall else None

    def us_per_req_above_idle(v: str, w: str) -> list[float]:
        rate = idle_rate(v)
        if rate is None:
            return []
        return [1e6 * (r["proxy_cpu_s"] - rate * r["wall_s"]) / r["requests"] for r in ok
                if r["variant"] == v and r["workload"] == w and r.get("requests") and "proxy_cpu_s" in r]  # fmt: skip

    def kernel_pct(v: str, w: str) -> list[float]:
        return [100 * r["proxy_sys_s"] / r["proxy_cpu_s"] for r in ok
                if r["variant"] == v and r["workload"] == w and r.get("proxy_cpu_s")]  # fmt: skip

    o = res["options"]
    L = []
    L.append(
        f"## bench-peers, {res['date']}: {len(rounds)} rotating round(s), {res['cpus']} CPUs, {res['seconds'] / 60:.1f} min"
    )
    L.append("")
    L.append(
        f"Workloads: a) producer {o['records']:,} x 1 KiB, acks=1, linger.ms=5, unthrottled; b) consumer reads them back "
        f"(fetch MB/s, group join excluded); c) {o['small_rate']}/s x 100 B, linger.ms=0, acks=1, {o['latency_seconds']} s "
        f"(+1 s warm-up excluded); d) {o['fixed_rate']}/s x 1 KiB, acks=1, linger.ms default (5), {o['latency_seconds']} s "
        f"(+1 s warm-up excluded). Ratios: per round against direct in the same round; median (min–max) over rounds."
    )
    L.append("")
    if o.get("pin"):
        kafka, proxy = o["pin"].split("/")
        L.append(
            f"Pinned (`--pin {o['pin']}`): the broker and every client tool on CPUs {kafka}, every proxy and the relay "
            f"on CPUs {proxy}, in every variant (direct's broker and tools too)."
        )
        L.append("")
    L.append("### Throughput and latency vs direct")
    L.append("")
    L.append(
        "| system | producer MB/s | producer ratio (per-round: median, min–max) | ÷ direct median | consumer MB/s "
        "| consumer ratio (per-round) | ÷ direct median | c p50 / p99 ms | c p99 ratio | d p50 / p99 / p99.9 ms | d p99 ratio |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    dpm, dcm = med(val("direct", "a", "mb_s")), med(val("direct", "b", "mb_s"))
    for v in variants:
        pm, cm = med(val(v, "a", "mb_s")), med(val(v, "b", "mb_s"))
        pr = "1" if v == "direct" else rng(ratios(v, "a", "mb_s"))
        cr = "1" if v == "direct" else rng(ratios(v, "b", "mb_s"))
        pmr = fmt(pm / dpm, 2) if pm and dpm else "–"
        cmr = fmt(cm / dcm, 2) if cm and dcm else "–"
        c50, c99 = med(val(v, "c", "p50_ms")), med(val(v, "c", "p99_ms"))
        d50, d99, d999 = med(val(v, "d", "p50_ms")), med(val(v, "d", "p99_ms")), med(val(v, "d", "p999_ms"))
        c99r = "1" if v == "direct" else rng(ratios(v, "c", "p99_ms"))
        d99r = "1" if v == "direct" else rng(ratios(v, "d", "p99_ms"))
        L.append(
            f"| {v} | {fmt(pm)} | {pr} | {pmr} | {fmt(cm)} | {cr} | {cmr} | {fmt(c50, 0)} / {fmt(c99, 0)} | {c99r} | "
            f"{fmt(d50, 0)} / {fmt(d99, 0)} / {fmt(d999, 0)} | {d99r} |"
        )
    L.append("")
    if RELAY in variants:
        L += against_relay([v for v in variants if v not in ("direct", RELAY)], ratios, per_gb)
    q = QUIET_CORES
    L.append(
        f"Quiet runs only: the same medians over the runs during which other work on the machine took under {q} "
        "cores (n = runs kept); on a shared box these are the least disturbed figures, but n is small."
    )
    L.append("")
    L.append("| system | producer MB/s (n) | ÷ direct | consumer MB/s (n) | ÷ direct | c p99 ms (n) | d p99 ms (n) |")
    L.append("|---|---|---|---|---|---|---|")

    def quiet(v: str, w: str, key: str) -> list[float]:
        return [
            r[key] for r in ok if r["variant"] == v and r["workload"] == w and key in r and r.get("other_cores", 9) < q
        ]

    qd = {w: med(quiet("direct", w, "mb_s")) for w in "ab"}
    for v in variants:
        cells = []
        for w in "ab":
            xs = quiet(v, w, "mb_s")
            m = med(xs)
            cells += [f"{fmt(m)} ({len(xs)})", fmt(m / qd[w], 2) if m and qd[w] else "–"]
        for w in "cd":
            xs = quiet(v, w, "p99_ms")
            cells.append(f"{fmt(med(xs), 0)} ({len(xs)})")
        L.append(f"| {v} | " + " | ".join(cells) + " |")
    L.append("")
    L.append("### Proxy cost (medians, min–max over rounds)")
    L.append("")
    L.append(
        "| system | CPU s/GB produced (a) | CPU s/GB consumed (b) | µs CPU per small request (c) | CPU s per 10k small req (c) "
        "| µs CPU per Produce req (a) | kernel % (a / b / c) | idle ms CPU/s | µs per small request above idle (c) "
        "| RSS MiB after runs | peak RSS MiB |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for v in variants:
        if v == "direct":
            continue
        uc = us_per_req(v, "c")
        rss = [r["proxy_rss_kib"] / 1024 for r in ok if r["variant"] == v and r.get("proxy_rss_kib")]
        peak = (res["peak_rss_kib"].get(v) or 0) / 1024
        kp = " / ".join(fmt(med(kernel_pct(v, w)), 0) for w in "abc")
        L.append(
            f"| {v} | {rng(per_gb(v, 'a'))} | {rng(per_gb(v, 'b'))} | {rng(uc, 0)} | {rng([u / 100 for u in uc], 3)} | "
            f"{rng(us_per_req(v, 'a'), 0)} | {kp} | {fmt(1000 * rate if (rate := idle_rate(v)) is not None else None, 2)} | "
            f"{rng(us_per_req_above_idle(v, 'c'), 0)} | {fmt(med(rss), 0)} | {peak:.0f} |"
        )
    L.append("")
    rpr = [r["records"] / r["requests"] for r in ok if r["workload"] == "c" and r.get("requests")]
    L.append(
        "Small-request count (c) is the producer's own `request-total` metric (Produce plus a few Metadata/ApiVersions); "
        f"the tool's pacing (it sleeps in whole milliseconds) put a median {fmt(med(rpr), 0)} records "
        f"({fmt((med(rpr) or 0) * 0.1, 1)} KB) in each request. "
        "µs per Produce request (a) uses the same metric in the unthrottled 1 KiB run. Idle: each proxy's CPU a second "
        "while the other systems' workloads ran; above idle: a small request's CPU less that rate over its run (c is "
        "sparse, about 150 requests a second, so a proxy's timers are a part of its raw figure)."
    )
    L.append("")
    if any(r["workload"] == "e" for r in ok):
        L.append(f"### librdkafka's small requests (e): {o.get('rdkafka_requests', 3000):,} x 3,300 B, one at a time")
        L.append("")
        L.append("| system | p50 / p99 ms | p99 ratio (per round) | µs CPU per request | ÷ the same proxy's (c) |")
        L.append("|---|---|---|---|---|")
        for v in variants:
            e50, e99 = med(val(v, "e", "p50_ms")), med(val(v, "e", "p99_ms"))
            e99r = "1" if v == "direct" else rng(ratios(v, "e", "p99_ms"))
            ue, uc = us_per_req(v, "e"), med(us_per_req(v, "c"))
            per = "–" if v == "direct" else rng(ue, 0)
            vs_c = fmt(med(ue) / uc, 2) if ue and uc else "–"
            L.append(f"| {v} | {fmt(e50, 2)} / {fmt(e99, 2)} | {e99r} | {per} | {vs_c} |")
        L.append("")
    L.append("### Load")
    L.append("")
    L.append(f"* at start: `{res['load']['start']}`")
    L.append(f"* at end: `{res['load']['end']}`")
    for ld in res["load"]["rounds"]:
        L.append(f"* round {ld['round']} ({', '.join(ld['order'])}): start `{ld['start']}`; end `{ld['end']}`")
    L.append("")
    L.append(
        "Machine CPU busy (cores, of the whole box) and busy with *other* work (not the broker, the proxies or the tool), medians per workload:"
    )
    L.append("")
    ran = [w for w in "abcde" if any(r["workload"] == w for r in ok)]
    L.append("| system | " + " | ".join(f"{w} busy / other" for w in ran) + " |")
    L.append("|---|" + "---|" * len(ran))
    for v in variants:
        cells = [f"{fmt(med(val(v, w, 'machine_cores')), 2)} / {fmt(med(val(v, w, 'other_cores')), 2)}" for w in ran]
        L.append(f"| {v} | " + " | ".join(cells) + " |")
    L.append("")
    L.append("### Versions and set-up")
    L.append("")
    for k, v in res["versions"].items():
        L.append(f"* {k}: {v}")
    for k, v in res["installed"].items():
        L.append(f"* {k} installed: {v}")
    for k, v in res["tenancy_check"].items():
        L.append(f"* {k}: physical topic names on the broker, e.g. {', '.join(v) or '(none found)'}")
    for k, v in res["skipped"].items():
        L.append(f"* **{k} skipped**: {v}")
    for k, v in res["dead"].items():
        L.append(f"* **{k} died**: {v}")
    L.append("")
    L.append("Configurations (each proxy ran as one process for the whole bench, in front of the same broker):")
    for k, v in res.get("configs", {}).items():
        L.append("")
        L.append(f"{k}:")
        L.append("```")
        L.append(v.rstrip())
        L.append("```")
    errs = [r for r in rows if "error" in r]
    for r in errs:
        L.append(f"* run failed: round {r['round']} {r['variant']} {r['workload']}: {r['error']}")
    L.append("")
    L.append("### Every run")
    L.append("")
    L.append(
        "| round | system | wl | MB/s | rec/s | p50 | p99 | p99.9 | requests | proxy CPU s | proxy sys s | broker CPU s | busy cores | other cores | proxy RSS MiB |"
    )
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            L.append(f"| {r['round']} | {r['variant']} | {r['workload']} | error: {r['error'][:80]} |" + " |" * 11)
            continue
        L.append(
            f"| {r['round']} | {r['variant']} | {r['workload']} | {fmt(r.get('mb_s'), 2)} | {fmt(r.get('rec_s'), 0)} | "
            f"{fmt(r.get('p50_ms'), 0)} | {fmt(r.get('p99_ms'), 0)} | {fmt(r.get('p999_ms'), 0)} | {fmt(r.get('requests'), 0)} | "
            f"{fmt(r.get('proxy_cpu_s'), 2)} | {fmt(r.get('proxy_sys_s'), 2)} | {fmt(r.get('broker_cpu_s'), 2)} | "
            f"{fmt(r.get('machine_cores'), 2)} | {fmt(r.get('other_cores'), 2)} | {fmt((r.get('proxy_rss_kib') or 0) / 1024 or None, 0)} |"
        )
    return "\n".join(L)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default=",".join(ALL_VARIANTS), help=f"comma-separated, from {','.join(ALL_VARIANTS)}")
    # A million records (1 GiB): the consumer's run lasts seconds, not the 1-2 s of 300,000, whose ratios to direct
    # spread from 0.5 to 1.6 across rounds (docs/performance.md, the nineteenth session's section).
    p.add_argument("--records", type=int, default=1_000_000, help="records of workloads a and b (default 1000000)")
    p.add_argument("--small-rate", type=int, default=5000, help="records/s of workload c (default 5000)")
    p.add_argument("--fixed-rate", type=int, default=2000, help="records/s of workload d (default 2000)")
    p.add_argument("--latency-seconds", type=int, default=20, help="measured seconds of workloads c and d (default 20)")
    p.add_argument("--rdkafka-requests", type=int, default=3000, help="requests of workload e (default 3000)")
    p.add_argument("--workloads", default="abcde", help="which of a-e to run (b reads what a wrote; default abcde)")
    p.add_argument("--brokers", type=int, default=1)
    p.add_argument("--base-port", type=int, default=43092, help="the broker's port (launcher: node n on +10(n-1))")
    p.add_argument("--proxy-port-base", type=int, default=43200,
                   help="vcproxy listens on base+100, vcproxy-tenant +200, kroxylicious +300, kroxylicious-mt +400, "
                        "kafka-proxy +500, vcproxy-base +600, vcproxy-base-tenant +700 (+10 per try if a port is "
                        "taken); broker N on bootstrap+N")  # fmt: skip
    p.add_argument("--baseline", metavar="DIR",
                   help="also run vcproxy and vcproxy-tenant from checkout DIR (variants vcproxy-base, "
                        "vcproxy-base-tenant; DIR/.venv if it has one, else this checkout's), in the same rounds: before and after "
                        "a change")  # fmt: skip
    p.add_argument("--cluster-dir", help="use a cluster already running from `vcproxy kafka start --dir DIR`")
    p.add_argument("--start-timeout", type=float, default=180)
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument(
        "--metrics", action="store_true", help="vcproxy variants with /metrics on, as deployed (tracing off)"
    )
    p.add_argument("--quick", action="store_true", help="smoke test: 1 round, 20000 records, 3 s latency runs")
    p.add_argument("--install-only", action="store_true", help="install the peers into the cache and exit")
    p.add_argument("--json", type=Path, help="also write the raw results as JSON here")
    p.add_argument("--settle", action="store_true", help="write the page cache out (sync) before every run")
    p.add_argument("--report", type=Path, help="also write the markdown report here")
    p.add_argument("--pin", metavar="KAFKA/PROXY",
                   help="CPU lists (taskset's) for the broker and the client tools, and for every proxy: e.g. 0/1")  # fmt: skip
    a = p.parse_args()
    if a.quick:
        a.rounds, a.records, a.latency_seconds, a.rdkafka_requests = 1, 20_000, 3, 300
    if not a.workloads or set(a.workloads) - set("abcde") or ("b" in a.workloads and "a" not in a.workloads):
        p.error(f"--workloads {a.workloads!r}: letters of abcde, with a wherever b (b reads what a wrote)")
    if a.pin:
        try:
            parse_pin(a.pin)
        except BenchError as exc:
            p.error(str(exc))
    ports = [a.proxy_port_base + 100 * i for i in range(len(ALL_VARIANTS))]
    if min(ports) < 1024 or max(ports) + 99 > 65535:
        p.error("ports out of range")
    bench = Bench(a)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        res = bench.main()
    except KeyboardInterrupt:
        say("interrupted; stopping everything we started")
        return 130
    except BenchError as exc:
        say(f"bench-peers: {exc}")
        return 1
    finally:
        bench.close()
    if a.install_only:
        for k, v in bench.installed.items():
            print(f"{k}: {v}")
        for k, v in bench.skipped.items():
            print(f"{k}: SKIPPED: {v}")
        shutil.rmtree(bench.work, ignore_errors=True)
        return 0
    text = report(res)
    print(text)
    if a.report:
        a.report.write_text(text + "\n")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2, default=str) + "\n")
    say(f"tool logs and proxy logs kept in {bench.logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
