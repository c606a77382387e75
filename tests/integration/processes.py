"""Processes the tests look for: the JVMs a launcher started under a directory."""

from __future__ import annotations

from pathlib import Path


def java_processes_mentioning(path: Path) -> list[int]:
    """Pids of running JVMs whose command line names a file under `path`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "java" in cmdline and f"{path}/" in cmdline:
                pids.append(int(proc.name))
    return pids
