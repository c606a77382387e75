"""What every tenancy handler does with its call: answer it with an error, name its response class and API,
ask the VC's ACLs."""

from __future__ import annotations

import dataclasses

from ...protocol import codec, entities
from ..engine import LocalAnswer, TenantCall
from ..model import TenancyError


def error_answer(ex: TenantCall, error: int, message: str | None = None) -> LocalAnswer:
    body = codec.error_response_body(ex.api_key, ex.version, error)
    if body is None:
        raise TenancyError(f"api {ex.api_key} v{ex.version} cannot carry error {error}")
    cls = response_cls(ex)
    entity, _ = codec.decode(cls, body)
    if message is not None and "error_message" in entities.field_names(cls):
        entity = dataclasses.replace(entity, error_message=message)
    return LocalAnswer(entity)


def response_cls(ex: TenantCall) -> type:
    from ...protocol.apis import response_type

    return response_type(ex.api_key, ex.version)


def api_name(ex: TenantCall) -> str:
    return ex.rule.api


def acl_allows(ex: TenantCall, kind: str, name: str | None) -> bool:
    """What the request's API needs of `kind` (proxy/acl/access.py), on `name`; no ACLs: allowed."""
    access = ex.tx.access
    if access is None or name is None:
        return True
    from ...acl.access import RESOURCE_OF_KIND

    op = access.need.ops.get(kind)
    return op is None or access.allows(op, RESOURCE_OF_KIND[kind], name)


NOT_OWNER = (
    "Topic '{name}' is shared with other virtual clusters: only the one that owns it (or the physical "
    "cluster's operators) may delete, truncate, reconfigure or grow it."
)
