"""Transactions: ListTransactions' TransactionalIdPattern, confined to the VC's prefix."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from ...quoting import cut
from ..engine import TenantCall, TenantEngine
from ..regex import InvalidRegex, compile_client_regex
from .calls import api_name, error_answer

log = logging.getLogger(__name__)


def txn_regex_kind(engine: TenantEngine, ex: TenantCall, value: str | None, to_physical: bool) -> str | None:
    if value is None or not to_physical:
        return value
    # The broker evaluates it, wrapped in the VC's fixed prefix. Checked first: a pattern that does
    # not stand on its own (`x)|(.*`) would otherwise escape the group around it.
    try:
        compile_client_regex(value, "TransactionalIdPattern")
    except InvalidRegex as exc:
        log.info("virtual cluster %s: %s refused: %s", engine.vc.name, api_name(ex), cut(exc))
        raise error_answer(ex, int(ErrorCode.invalid_regular_expression), str(exc)) from None
    return f"{engine.vc.id}\\.(?:{value})"
