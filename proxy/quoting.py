"""Client-supplied names in log lines, bounded (issue 23, point 4).

A user, topic, group or principal name comes from a client: a 30,000-character name would make a
30,000-character log line on every replica, and a control character would forge one. Every log call
that quotes such a name passes it through `shown`: quoted with escapes (repr), cut to `limit`
characters with how many more there were.
"""

from __future__ import annotations

LIMIT = 200


def shown(name: object, limit: int = LIMIT) -> str:
    """`name` quoted for a log line: escaped, at most `limit` characters of it, then "…(N more)"."""
    if name is None:
        return "None"
    text = name if isinstance(name, str) else str(name)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}…({len(text) - limit} more)"


def bare(name: object, limit: int = LIMIT) -> str:
    """A principal as log lines have always shown it (`User:alice`, unquoted) when it is printable and short;
    else quoted and cut as `shown` does, so that no name forges a line or makes a long one."""
    text = "None" if name is None else str(name)
    return text if len(text) <= limit and text.isprintable() else shown(text, limit)


def cut(text: object, limit: int = 2 * LIMIT) -> str:
    """A message that may quote client-supplied names (a refusal's), at most `limit` characters of it."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}…({len(text) - limit} more)"
