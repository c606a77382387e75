"""The proxy's OTLP JSON Lines files, read while the proxy may still be writing them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def complete_records(directory: Path, pattern: str = "*.jsonl*") -> Iterator[dict[str, Any]]:
    """Each whole line's document, file by file. A line with no newline after it yet is one the exporter is still
    writing (a batch's line can be larger than one write), so it is left for the next read."""
    for path in sorted(directory.glob(pattern)):
        try:
            text = path.read_text()
        except FileNotFoundError:  # rotated away between the listing and the read: the next read finds it
            continue
        for line in text.split("\n")[:-1]:
            if line:
                yield json.loads(line)
