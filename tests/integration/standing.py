"""What the standing checks (franz-go's and librdkafka's suites, three ways) share: a run's table cell and the
table's closing row of passes and total time per way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Outcome(Protocol):
    status: str
    seconds: float
    note: str


def cell(run: Outcome) -> str:
    return f"{run.status} {run.seconds:.1f} s" + (f" ({run.note})" if run.note else "")


def totals_row(runs: Mapping[object, Mapping[str, Outcome]], ways: list[str], lead: str) -> str:
    """`lead` (the row's first cells, e.g. "| **passed, total time** |"), then per way: passes of the rows run that
    way (a row not run that way, "-", is not counted), seconds."""
    totals = [sum(r[w].seconds for r in runs.values() if w in r) for w in ways]
    passed = [sum(r[w].status == "PASS" for r in runs.values() if w in r) for w in ways]
    ran = [sum(w in r for r in runs.values()) for w in ways]
    return f"{lead} " + " | ".join(f"{p}/{n}, {t:.0f} s" for p, n, t in zip(passed, ran, totals, strict=True)) + " |"
