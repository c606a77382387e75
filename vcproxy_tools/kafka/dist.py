"""Resolve the jars of an Apache Kafka release from Maven Central into a per-version cache.

There is no tarball: a small rendered pom.xml plus ``maven-dependency-plugin:copy-dependencies``
gives one ``libs`` directory that serves the broker, StorageTool and every CLI tool through
``java -cp '<libs>/*' <MainClass>``.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from vcproxy_tools.kafka.errors import KafkaLauncherError
from vcproxy_tools.kafka.progress import Progress, elapsed

log = logging.getLogger("vcproxy_tools.kafka")

# 4.2.1 fixed a deadlock of the broker's share-group path (KAFKA-20505) that 4.2.0 hit under franz-go's suite.
DEFAULT_KAFKA_VERSION = "4.2.2"
MIN_JAVA = 17
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
MAVEN_TIMEOUT = 900.0

# Kafka's published POMs carry no SLF4J binding; pin the log4j2 version each release's tarball ships.
LOG4J_BY_MINOR = {"4.1": "2.24.3", "4.2": "2.25.3"}

_PACKAGE_DIR = Path(__file__).resolve().parent
POM_TEMPLATE = _PACKAGE_DIR / "pom.xml.in"
STREAMS_POM_TEMPLATE = _PACKAGE_DIR / "streams-pom.xml.in"
TOOLS_LOG4J = _PACKAGE_DIR / "tools-log4j2.properties"
BROKER_LOG4J = _PACKAGE_DIR / "broker-log4j2.properties"

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:[-.][0-9A-Za-z.-]+)?$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_JAR_VERSION = re.compile(r"^(.+?)-(\d+\.\d+[^-]*(?:-[A-Za-z0-9.]+)?)\.jar$")  # artifact-version.jar
_MARKER = ".complete"

# Substrings of Maven's output that mean it could not talk to the repository at all.
_NETWORK_HINTS = (
    "could not transfer",
    "transfer failed",
    "in offline mode",
    "connection refused",
    "connect timed out",
    "read timed out",
    "name or service not known",
    "unknownhostexception",
    "temporary failure in name resolution",
    "network is unreachable",
    "no route to host",
    "pkix path building failed",
)


def parse_version(version: str) -> tuple[int, int]:
    """(major, minor) of a supported Kafka version, else KafkaLauncherError."""
    m = _VERSION_RE.match(version)
    if not m:
        raise KafkaLauncherError(f"Kafka version {version!r} is not of the form X.Y.Z (e.g. {DEFAULT_KAFKA_VERSION})")
    major, minor = int(m.group(1)), int(m.group(2))
    if (major, minor) < (4, 1):
        raise KafkaLauncherError(
            f"Kafka {version} is not supported: the launcher needs Kafka 4.1 or newer (default {DEFAULT_KAFKA_VERSION})"
        )
    return major, minor


def log4j_version(version: str) -> str:
    """The log4j2 version to pair with a Kafka release (newer releases get the newest one known)."""
    major, minor = parse_version(version)
    return LOG4J_BY_MINOR.get(f"{major}.{minor}", LOG4J_BY_MINOR[max(LOG4J_BY_MINOR)])


def render_pom(version: str) -> str:
    return (
        POM_TEMPLATE.read_text(encoding="utf-8")
        .replace("@KAFKA_VERSION@", version)
        .replace("@LOG4J_VERSION@", log4j_version(version))
    )


def cache_root(cache_dir: Path | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("VCPROXY_KAFKA_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "vcproxy" / "kafka"


def parse_java_major(version_output: str) -> int | None:
    """Major version from ``java -version`` output ("1.8.0_292" -> 8, "17.0.15" -> 17, "21-ea" -> 21)."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not m:
        return None
    major = int(m.group(1))
    if major == 1 and m.group(2):
        major = int(m.group(2))
    return major


@functools.lru_cache(maxsize=8)
def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_java_major(out.stderr + out.stdout)


def java_executable() -> str:
    """Path of a Java >= 17 ``java`` on PATH, else KafkaLauncherError."""
    java = shutil.which("java")
    if java is None:
        raise KafkaLauncherError(
            f"no `java` on PATH: Kafka needs Java {MIN_JAVA} or newer. Install a JDK/JRE "
            f"(e.g. `apt-get install openjdk-17-jre-headless`) and put its bin/ on PATH."
        )
    major = _java_major(java)
    if major is None or major < MIN_JAVA:
        found = f"Java {major}" if major is not None else "a java whose version could not be read"
        raise KafkaLauncherError(
            f"{java} is {found}; Kafka 4.x needs Java {MIN_JAVA} or newer. Put a newer JDK's bin/ first on PATH."
        )
    return java


def _maven_executable() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaLauncherError(
            "no `mvn` on PATH: the launcher fetches Kafka's jars from Maven Central with Maven. "
            "Install Apache Maven (e.g. `apt-get install maven`), or point VCPROXY_KAFKA_CACHE at a "
            "cache that already holds this Kafka version."
        )
    return mvn


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    # Two test sessions may resolve the same version at once; one resolves, the other waits and reuses.
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _maven_error(version: str, returncode: int, output: str) -> KafkaLauncherError:
    text = _ANSI_RE.sub("", output)
    lines = [ln for ln in text.splitlines() if ln.strip() and ln.strip() != "[ERROR]"]
    tail = "\n".join(lines[-15:])
    lower = text.lower()
    if "could not find artifact org.apache.kafka" in lower:
        return KafkaLauncherError(
            f"Kafka {version} is not on Maven Central (no org.apache.kafka:kafka_2.13:{version}); "
            f"check the version, e.g. {DEFAULT_KAFKA_VERSION}.\n{tail}"
        )
    if any(hint in lower for hint in _NETWORK_HINTS):
        return KafkaLauncherError(
            f"Maven could not download Kafka {version} and its dependencies from Maven Central; "
            f"check network/proxy settings in ~/.m2/settings.xml.\n{tail}"
        )
    return KafkaLauncherError(f"mvn failed (exit {returncode}) resolving Kafka {version}:\n{tail}")


def ensure_dist(version: str = DEFAULT_KAFKA_VERSION, cache_dir: Path | None = None) -> Path:
    """Return the ``libs`` directory holding every jar for broker, StorageTool and CLI tools.

    Resolved once per version into ``<cache>/<version>/libs`` and reused; the marker file is written
    only after a complete copy, so an interrupted or failed run is redone next time.
    """
    parse_version(version)
    java_executable()  # fail early: nothing in the dist is usable without it
    vdir = cache_root(cache_dir) / version
    required = (f"kafka_2.13-{version}.jar", f"kafka-tools-{version}.jar", "log4j-slf4j-impl-")
    return _resolve(version, vdir, render_pom(version), required, vdir.parent / f"{version}.lock", f"Kafka {version}")


def ensure_streams_libs(version: str = DEFAULT_KAFKA_VERSION, cache_dir: Path | None = None) -> Path:
    """The ``libs`` directory of Kafka Streams (and RocksDB) for ``version``, without what
    ``ensure_dist`` already has: a Streams application runs with ``-cp '<dist>/*:<this>/*'``.

    A separate resolution (``<cache>/<version>/streams/libs``) so that it never changes the broker's
    jars: a checkout whose pom lacks Streams leaves it alone, and the other way round.
    """
    parse_version(version)
    java_executable()
    vdir = cache_root(cache_dir) / version / "streams"
    pom = STREAMS_POM_TEMPLATE.read_text(encoding="utf-8").replace("@KAFKA_VERSION@", version)
    return _resolve(
        version, vdir, pom, (f"kafka-streams-{version}.jar",), vdir.parent / "streams.lock", f"Kafka Streams {version}"
    )


EXTRAS_POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Rendered by vcproxy_tools/kafka/dist.py (ensure_extra_libs): Kafka artifacts some tools need beyond the dist
     (Connect, the metadata shell, Trogdor); run with -cp '<dist>/*:<this>/*'. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.vcproxy</groupId>
  <artifactId>kafka-extras</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
@DEPENDENCIES@
  </dependencies>
</project>
"""
# Left to the dist: one SLF4J binding and one kafka-clients on the classpath.
_EXTRAS_EXCLUSIONS = (("org.apache.kafka", "kafka-clients"), ("org.slf4j", "*"), ("org.apache.logging.log4j", "*"))


def render_extras_pom(artifacts: Sequence[str], version: str) -> str:
    exclusions = "".join(
        f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>" for g, a in _EXTRAS_EXCLUSIONS
    )
    deps = "\n".join(
        f"    <dependency><groupId>org.apache.kafka</groupId><artifactId>{a}</artifactId>"
        f"<version>{version}</version><exclusions>{exclusions}</exclusions></dependency>"
        for a in dict.fromkeys(artifacts)
    )
    return EXTRAS_POM.replace("@DEPENDENCIES@", deps)


def ensure_extra_libs(
    artifacts: Sequence[str], version: str = DEFAULT_KAFKA_VERSION, cache_dir: Path | None = None
) -> Path:
    """The ``libs`` directory of Kafka artifacts (``org.apache.kafka:<artifact>:<version>``) that some
    tools need beyond ``ensure_dist`` (Connect, ``kafka-shell``, ``trogdor``), resolved on first use into
    ``<cache>/<version>/extras/<names>/libs``; run with ``-cp '<dist>/*:<this>/*'``."""
    if not artifacts:
        raise ValueError("no artifacts")
    parse_version(version)
    java_executable()
    names = list(dict.fromkeys(artifacts))  # the first names the directory: connect-runtime+5
    key = names[0] if len(names) == 1 else f"{names[0]}+{len(names) - 1}"
    vdir = cache_root(cache_dir) / version / "extras" / key
    extras = extras_version(version)
    required = tuple(f"{a}-{extras}.jar" for a in names)
    pom = render_extras_pom(names, extras)
    dist = ensure_dist(version, cache_dir)
    what = f"{', '.join(names)} {extras}"
    return _resolve(version, vdir, pom, required, vdir.parent / f"{key}.lock", what, prune=dist)


def extras_version(version: str) -> str:
    """The release whose extra artifacts a tool of `version` runs with. Kafka's patch releases leave some
    artifacts off Maven Central (4.2.1 and 4.2.2 lack connect-file and trogdor, 4.2.2 kafka-shell), so the
    extras come from the minor's first release, beside the patch release's dist (whose jars come first)."""
    major, minor = parse_version(version)
    return f"{major}.{minor}.0"


def _artifact(jar: str) -> str:
    """`kafka-clients-4.2.0.jar` -> `kafka-clients`: a jar's artifact, whatever its version."""
    match = _JAR_VERSION.match(jar)
    return match.group(1) if match else jar


def _resolve(
    version: str, vdir: Path, pom: str, required: tuple[str, ...], lock: Path, what: str, prune: Path | None = None
) -> Path:
    """``mvn copy-dependencies`` of ``pom`` into ``vdir/libs``, once per pom (its hash is the marker);
    ``what`` names it in progress and log lines. Jars that ``prune`` (a libs dir used next to this one)
    already holds under the same file name are left out."""
    libs = vdir / "libs"
    marker = vdir / _MARKER
    stamp = hashlib.sha256(pom.encode()).hexdigest()

    def complete() -> bool:
        # The stamp ties the cache to the pom: changing the template re-resolves.
        return marker.is_file() and marker.read_text().strip() == stamp and libs.is_dir()

    if complete():
        return libs
    with _locked(lock):
        if complete():
            return libs
        mvn = _maven_executable()
        vdir.mkdir(parents=True, exist_ok=True)
        marker.unlink(missing_ok=True)
        staging = vdir / "libs.partial"
        # The old libs stay until the new ones are complete: brokers and tools of another session
        # may be running from them.
        shutil.rmtree(staging, ignore_errors=True)
        (vdir / "pom.xml").write_text(pom, encoding="utf-8")
        log.info("resolving %s from Maven Central into %s", what, libs)
        t0 = time.monotonic()
        with Progress() as progress:
            returncode, output = _run_maven(mvn, vdir, staging, what, progress)
        if returncode != 0:
            raise _maven_error(version, returncode, output)
        if prune is not None:
            # By artifact, not file name: the extras may be of another release than the dist.
            pruned = {_artifact(jar.name) for jar in prune.glob("*.jar")}
            for jar in staging.glob("*.jar"):
                if _artifact(jar.name) in pruned:
                    jar.unlink()
        jars = list(staging.glob("*.jar"))
        for jar in required:
            if not any(p.name.startswith(jar) for p in jars):
                raise KafkaLauncherError(
                    f"mvn finished but {staging} lacks {jar}*; delete {vdir} and retry.\n"
                    + _ANSI_RE.sub("", output)[-2000:]
                )
        _swap_in(staging, libs)
        tmp = vdir / (_MARKER + ".tmp")
        tmp.write_text(stamp + "\n")
        tmp.replace(marker)
        log.info("resolved %s in %s: %d jars in %s", what, elapsed(t0), len(jars), libs)
    return libs


_DOWNLOADED = re.compile(r"Downloaded from \S+: (\S+) \((\d+(?:\.\d+)?) (B|kB|KB|MB|GB)")
_COPYING = re.compile(r"Copying (\S+\.jar) to ")
_UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def _run_maven(mvn: str, vdir: Path, staging: Path, what: str, progress: Progress) -> tuple[int, str]:
    """Run ``copy-dependencies`` into ``staging``: (exit code, output). On a terminal Maven runs without
    -q and its download and copy lines become the status line (files and MB so far); elsewhere it is
    quiet. Batch mode either way: no colours and no transfer bars in the output."""
    argv = [
        mvn,
        "-B",
        *([] if progress.enabled else ["-q"]),
        "-Dstyle.color=never",
        "-f",
        str(vdir / "pom.xml"),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    proc = subprocess.Popen(
        argv,
        cwd=vdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(MAVEN_TIMEOUT, kill)
    timer.daemon = True
    timer.start()
    lines: list[str] = []
    files, size, copied, t0 = 0, 0.0, 0, time.monotonic()
    status = [f"kafka: resolving {what} from Maven Central"]
    done = threading.Event()

    def tick() -> None:  # the clock moves on while Maven is silent (resolving its plugin, slow downloads)
        while not done.wait(1.0):
            progress.update(f"{status[0]} ({elapsed(t0)})", force=True)

    ticker = threading.Thread(target=tick, name="maven-progress", daemon=True)
    if progress.enabled:
        ticker.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if len(lines) > 400:
                del lines[:200]
            if (m := _DOWNLOADED.search(line)) is not None:
                files += 1
                size += float(m.group(2)) * _UNITS[m.group(3)]
                name = m.group(1).rsplit("/", 1)[-1]
                status[0] = f"kafka: resolving {what}: {files} files downloaded ({size / 1e6:.1f} MB), {name}"
            elif (m := _COPYING.search(line)) is not None:
                copied += 1
                status[0] = f"kafka: resolving {what}: {copied} jars copied into the cache, {m.group(1)}"
            else:
                continue
            progress.update(f"{status[0]} ({elapsed(t0)})")
        returncode = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        timer.cancel()
        done.set()
        if ticker.is_alive():
            ticker.join()
    if timed_out.is_set():
        raise KafkaLauncherError(
            f"mvn did not finish within {MAVEN_TIMEOUT:.0f}s resolving {what}; "
            f"check network/proxy settings in ~/.m2/settings.xml"
        )
    return returncode, "".join(lines)


def _swap_in(staging: Path, libs: Path) -> None:
    """Replace ``libs`` by ``staging`` with two renames, so ``libs`` is missing only for an instant."""
    old = libs.with_name("libs.old")
    shutil.rmtree(old, ignore_errors=True)
    if libs.exists():
        libs.rename(old)
    staging.rename(libs)
    shutil.rmtree(old, ignore_errors=True)
