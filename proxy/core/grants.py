"""What the forwarder may serve for a virtual cluster's connection (sans-I/O): the API versions, and the grant.

An API version is a tenant's to forward when its translation (tenant.yaml) is a splice both ways and nothing
else, and its request names nothing but topic ids and ids that may be null: Produce v13+. Such a request goes to
the broker as the client sent it exactly when every topic id in it is one the VC owns and the caller may use for
the API (the VC's ACLs), and its transactional id is null. The tenancy stage says which ids those are as it lets
them through (`grant_for(ctx).add`): a grant is of one state of the virtual clusters, void once it changes
(`TenancyImage.changes`, bumped with every record applied), so a right revoked or a topic unlinked takes effect
at the next request. The forwarder (native/src/forward.rs) reads a request with the plans made here, as the
tenancy stage reads it: a body the strict walker accepts, each name null or granted; an answer with a message
or an id the grant does not hold goes back to the session's rewrite.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..catalogue import catalogue
from ..protocol import native, plans
from ..protocol.apis import request_type, response_type
from ..rules import tenant_rules
from ..tenancy.engine import MESSAGE, message_paths, response_paths, splice_paths

if TYPE_CHECKING:
    from .stages.context import ConnectionState

# A tenant's plans: the request body's strict plan (walker.validate), the request's names and the answer's names
# and messages (the tenancy splice's walks), for vcproxy_native to read as the tenancy stage reads them.
TenantPlans = tuple[Any, Any, Any]

NAMES = frozenset({"topic_id", "txn"})  # what a served tenant request may name: granted ids, and null ids


@functools.cache
def tenant_plans(key: int, version: int) -> TenantPlans | None:
    """The plans of an API version the forwarder may serve for a VC, or None: one whose translation (tenant.yaml)
    is a splice both ways with nothing else (no handler, extra paths or filters), whose request names nothing
    but topic ids and ids that may be null, whose answer names nothing but topic ids and messages within the
    splice's reach, and that no stage reads otherwise (ACL listings, authorized operations, mutation quotas)."""
    rule = tenant_rules().get(key)
    spec = catalogue().get(key)
    if rule is None or spec is None or rule.action != "rewrite" or set(rule.splice) != {"request", "response"}:
        return None
    if rule.handler or rule.request or rule.response or rule.filters:
        return None
    if spec.acl_listing is not None or spec.authorized_operations is not None or spec.mutation_items is not None:
        return None
    request, response = request_type(key, version), response_type(key, version)
    names = splice_paths(request)
    kinds = {kind for _, kind in names}
    # At least one topic id: a request that names none would be served on a grant it has nothing to do with
    # (InitProducerId without a transactional id is IDEMPOTENT_WRITE's to decide).
    if "topic_id" not in kinds or kinds - NAMES or not message_paths(response)[1]:
        return None
    answer = response_paths(response)
    if {kind for _, kind in answer} - {"topic_id", MESSAGE}:
        return None
    return plans.check_entity(request)[0], plans.splice_entity(request, names), plans.splice_entity(response, answer)


def grant_for(ctx: ConnectionState) -> Any:
    """The connection's grant for the state as it is now (a new one once it changed); None without the forwarder."""
    module = native.forwarding()
    image = ctx.image
    if module is None or image is None:
        return None
    if image.changes is None:
        image.changes = module.Generation()
    current = ctx.grant
    if current is None or not current.valid():
        current = ctx.grant = module.Grant(image.changes)
    return current
