"""What the proxy answered itself: the API, its error codes and the VC, for a metric and a DEBUG line.

A client that loops on a local answer (a refusal it retries, an error it treats as transient) never
reaches a broker, so nothing on the broker side shows it. `vcproxy_local_answers` (per API, VC and error
code) and one DEBUG log line per local answer make the loop visible from the proxy (issue 18).
"""

from __future__ import annotations

import logging
from typing import Any

from ..protocol.apis import response_type
from ..protocol.headers import response_body_offset
from ..rules import api_rules
from .metrics import PHYSICAL_VC
from .scan import scan

log = logging.getLogger("proxy.local_answers")


def answer_errors(api_key: int, api_version: int, header_version: int, frame: bytes) -> list[int]:
    """The distinct non-zero error codes of a locally answered frame, in wire order ([] if none, or if the
    reply is not in the API's response shape: a SASL step, an unsupported-version answer)."""
    try:
        offset = response_body_offset(frame, header_version)
        codes = scan(response_type(api_key, api_version), frame, offset).error_codes
    except Exception:  # a shape the scanner does not know (a SASL step) is reported as no error
        return []
    return list(dict.fromkeys(codes))


def error_label(errors: list[int]) -> str:
    """The metric's `error_code`: the first non-zero code, "0" for a successful answer."""
    return str(errors[0]) if errors else "0"


def log_local_answer(ex: Any, connection: str) -> None:
    """One DEBUG line per request answered by the proxy (a no-op unless DEBUG is on for this logger)."""
    if not log.isEnabledFor(logging.DEBUG) or ex.reply is None:
        return
    rule = api_rules().get(ex.api_key)
    api_name = rule.name if rule is not None else str(ex.api_key)
    errors = answer_errors(ex.api_key, ex.api_version, ex.response_header_version, ex.reply)
    vc = getattr(ex.vc, "name", None) or PHYSICAL_VC
    log.debug(
        "%s: answered %s v%d itself with error %s (vc %s)",
        connection,
        api_name,
        ex.version_seen_by_client,
        ",".join(map(str, errors)) or "0",
        vc,
    )
