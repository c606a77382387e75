"""Per-tenant analytics over the proxy's exported OTLP spans (`vcproxy traces aggregate`).

`otlp` is pure Python (parsing and validation); `aggregate` is the PySpark job; `report` renders the HTML.
Nothing here is imported by the proxy itself, and only `aggregate` needs pyspark.
"""

from __future__ import annotations


class AnalyticsError(Exception):
    """A problem with the job's input or arguments that the user must fix (the CLI exits 2 with the message)."""
