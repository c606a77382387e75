"""Class-data-sharing (AppCDS) archives for Kafka's short-lived CLI tools.

A cold tool JVM reads, parses and verifies a few thousand classes from the dist's jars before it does
anything; mapped from an archive written by an earlier run of the same tool, they cost a fraction of that.

One dynamic archive per (Kafka version, Java, class path with each jar's size and mtime, main class) in
``<cache>/<version>/cds/``: a tool loads its own classes, so it gets its own archive, and any change of
the jars or the JVM names a new one. Writing one costs a run about 2.5 s of CPU and each later run saves
about 1.1 s, so the first run of a tool only leaves a marker and the second writes the archive
(``-XX:ArchiveClassesAtExit``): a tool run once never pays for it. It goes to a temporary name; after a
clean exit a second JVM must map it (``-Xshare:on`` with checksums) before it is renamed into place,
because a truncated archive crashes a JVM (SIGBUS) where a mismatched one is merely ignored. Later runs
map it with ``-Xshare:auto``: a JVM that cannot use it runs without. The JVM reports both (and the
classes it leaves out of an archive it writes) as ``[cds]`` lines on stdout, where the tools print their
data, so those lines are turned off. ``VCPROXY_KAFKA_TOOL_CDS=0`` turns the archives off, and
``VCPROXY_KAFKA_TOOL_CDS_DIR`` puts them in another directory (a test that watches one tool's archive
appear keeps it from other processes' runs of the same tool).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("vcproxy_tools.kafka")

ENV = "VCPROXY_KAFKA_TOOL_CDS"
DIR_ENV = "VCPROXY_KAFKA_TOOL_CDS_DIR"
QUIET = "-Xlog:cds*=off"  # stdout is the tool's: no "[warning][cds] ..." lines in it
REFUSED = ".refused"  # beside an archive that could not be written: no further attempts for it
SEEN = ".seen"  # beside an archive not written yet: the tool has run once
VALIDATE_TIMEOUT = 120.0
STALE_TMP = 3600.0  # seconds; the JVM creates its file at exit: one this old is left from a killed caller


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Archives are on unless ``VCPROXY_KAFKA_TOOL_CDS`` is 0, false, no or off."""
    return env.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def fingerprint(java: str, lib_dirs: Sequence[Path], main: str) -> str:
    """What an archive is valid for: the JVM binary, the class path (each jar's name, size and mtime, as
    the JVM checks them) and the main class."""
    h = hashlib.sha256()
    real = os.path.realpath(java)
    st = os.stat(real)
    h.update(f"{real}\0{st.st_size}\0{st.st_mtime_ns}\0{main}\n".encode())
    for lib in lib_dirs:
        h.update(f"{lib}\n".encode())
        for jar in sorted(lib.glob("*.jar")):
            js = jar.stat()
            h.update(f"{jar.name}\0{js.st_size}\0{js.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def archive_dir(default: Path, env: Mapping[str, str] = os.environ) -> Path:
    """``VCPROXY_KAFKA_TOOL_CDS_DIR`` if set, else ``default`` (``<cache>/<version>/cds``)."""
    override = env.get(DIR_ENV, "").strip()
    return Path(override).expanduser() if override else default


def archive_path(cache: Path, main: str, key: str) -> Path:
    return cache / f"{main}-{key}.jsa"


@dataclass(frozen=True)
class Plan:
    """How one tool run uses its archive: ``flags`` for its JVM and, when the archive does not exist
    yet, the temporary file this run writes it to (``writing``)."""

    archive: Path
    flags: tuple[str, ...]
    writing: Path | None = None


def plan(archive: Path) -> Plan | None:
    """Map ``archive`` if it exists, else write it from this run if the tool ran before; None on its
    first run, when an earlier attempt failed, or when the cache directory cannot be written."""
    if archive.is_file():
        return Plan(archive, (f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", QUIET))
    if archive.with_name(archive.name + REFUSED).exists():
        return None
    seen = archive.with_name(archive.name + SEEN)
    if not seen.exists():
        try:
            archive.parent.mkdir(parents=True, exist_ok=True)
            seen.touch()
        except OSError as exc:
            _refuse(archive, f"cannot write to {archive.parent}: {exc}", mark=False)
        return None
    tmp = archive.with_name(f"{archive.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    return Plan(archive, (f"-XX:ArchiveClassesAtExit={tmp}", "-XX:+VerifySharedSpaces", QUIET), tmp)


def finish(p: Plan | None, returncode: int | None, jvm: Sequence[str], classpath: str) -> None:
    """After the tool's run: keep the archive it wrote if it exited cleanly (0) and a JVM started with
    ``jvm`` and ``classpath`` maps it; else drop it. ``returncode`` None: the run did not end normally."""
    if p is None or p.writing is None:
        return
    tmp = p.writing
    try:
        if returncode != 0:
            return  # a failed run is no sample of the tool's classes; the next one writes the archive
        if not tmp.is_file():
            _refuse(p.archive, "the JVM wrote no archive")
            return
        check = [
            jvm[0],
            f"-XX:SharedArchiveFile={tmp}",
            "-Xshare:on",  # fail, not fall back, if it cannot be mapped
            "-XX:+VerifySharedSpaces",
            QUIET,
            "-XX:ErrorFile=/dev/null",
            "-XX:-CreateCoredumpOnCrash",
            *jvm[1:],
            "-cp",
            classpath,
            "-version",
        ]
        try:
            proc = subprocess.run(check, capture_output=True, text=True, timeout=VALIDATE_TIMEOUT)
        except subprocess.TimeoutExpired:
            return  # a slow machine, not a bad archive: the next run tries again
        except OSError as exc:
            _refuse(p.archive, f"cannot run {jvm[0]}: {exc}")
            return
        if proc.returncode != 0:
            lines = (proc.stderr + proc.stdout).strip().splitlines()
            _refuse(p.archive, f"a JVM refused it ({lines[-1] if lines else f'exit {proc.returncode}'})")
            return
        os.replace(tmp, p.archive)  # atomic: a racing run's archive, if any, is as good as this one
        log.info("kafka tool: wrote class-data archive %s", p.archive)
        with contextlib.suppress(OSError):
            _prune(p.archive)
    except OSError as exc:
        _refuse(p.archive, str(exc), mark=False)
    finally:
        tmp.unlink(missing_ok=True)


def _refuse(archive: Path, why: str, *, mark: bool = True) -> None:
    """One log line, and (``mark``) a marker so that later runs do not pay for writing it again."""
    log.warning("kafka tool: no class-data archive %s: %s; the tool runs without one", archive.name, why)
    if mark:
        with contextlib.suppress(OSError):
            archive.with_name(archive.name + REFUSED).write_text(why + "\n")


def _prune(archive: Path) -> None:
    """Remove the same tool's archives for older jars or JVMs (a running JVM keeps its mapping), and
    temporary files of runs whose caller was killed before it could remove them."""
    main = archive.name.rsplit("-", 1)[0]
    stale = time.time() - STALE_TMP
    for old in archive.parent.glob(f"{main}-*.jsa*"):
        if old.name.endswith(".tmp"):
            if old.stat().st_mtime < stale:
                old.unlink(missing_ok=True)
        elif old.name.rsplit("-", 1)[0] == main and old != archive:
            old.unlink(missing_ok=True)
