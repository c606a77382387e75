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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from proxy.kafka.errors import KafkaLauncherError

log = logging.getLogger("proxy.kafka")

DEFAULT_KAFKA_VERSION = "4.2.0"
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
    return _resolve(version, vdir, render_pom(version), required, vdir.parent / f"{version}.lock")


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
    return _resolve(version, vdir, pom, (f"kafka-streams-{version}.jar",), vdir.parent / "streams.lock")


def _resolve(version: str, vdir: Path, pom: str, required: tuple[str, ...], lock: Path) -> Path:
    """``mvn copy-dependencies`` of ``pom`` into ``vdir/libs``, once per pom (its hash is the marker)."""
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
        argv = [
            mvn,
            "-B",
            "-q",
            "-Dstyle.color=never",
            "-f",
            str(vdir / "pom.xml"),
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        log.info("resolving Kafka %s from Maven Central into %s", version, libs)
        try:
            proc = subprocess.run(
                argv,
                cwd=vdir,
                capture_output=True,
                text=True,
                timeout=MAVEN_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise KafkaLauncherError(
                f"mvn did not finish within {MAVEN_TIMEOUT:.0f}s resolving Kafka {version}; "
                f"check network/proxy settings in ~/.m2/settings.xml"
            ) from exc
        if proc.returncode != 0:
            raise _maven_error(version, proc.returncode, proc.stdout + proc.stderr)
        for jar in required:
            if not any(p.name.startswith(jar) for p in staging.glob("*.jar")):
                raise KafkaLauncherError(
                    f"mvn finished but {staging} lacks {jar}*; delete {vdir} and retry.\n"
                    + _ANSI_RE.sub("", proc.stdout + proc.stderr)[-2000:]
                )
        _swap_in(staging, libs)
        tmp = vdir / (_MARKER + ".tmp")
        tmp.write_text(stamp + "\n")
        tmp.replace(marker)
    return libs


def _swap_in(staging: Path, libs: Path) -> None:
    """Replace ``libs`` by ``staging`` with two renames, so ``libs`` is missing only for an instant."""
    old = libs.with_name("libs.old")
    shutil.rmtree(old, ignore_errors=True)
    if libs.exists():
        libs.rename(old)
    staging.rename(libs)
    shutil.rmtree(old, ignore_errors=True)
