"""Per-API rewriting for a principal bound to a virtual cluster (sans-I/O).

For each request the engine decides, from rewrite_rules/tenant.yaml and the annotated fields of the
message schema: deny it locally, pass it, or translate it (decode with kio, or splice bodies that
carry record batches) and forward; for the response it translates back, filters listings, scrubs
error messages and returns state changes (new topic links, learned topic ids) for the shell to write
durably before the client sees the answer.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ..protocol import codec, splice, walker
from ..protocol.apis import request_type, response_type
from ..protocol.framing import with_body
from ..rules import TenantRule, tenant_rules
from .fields import DROP, apply_path, identifier_paths
from .model import TenancyImage, VirtualCluster
from .policy import SAFE_DEFAULT, Budget, TopicPolicy, usage_of
from .subscribed_names import NameSubscriptions
from .translate import Translation

Record = tuple[str, dict[str, Any] | None]


KindFn = Callable[["TenantEngine", "TenantCall", Any, bool], Any]


@dataclass(frozen=True)
class Handler:
    """An API's extra logic (proxy/tenancy/handlers/), each part optional: `request` edits the decoded
    request (or raises LocalAnswer), `response` edits the decoded response before the generic
    translation, `finish` after it, `spliced` reads a spliced response's fixed fields, `unseen` re-encodes a
    spliced response that names a topic the VC may not see (None: nothing to re-encode)."""

    request: Callable[[TenantEngine, TenantCall, Any], Any] | None = None
    response: Callable[[TenantEngine, TenantCall, Any], Any] | None = None
    finish: Callable[[TenantEngine, TenantCall, Any], Any] | None = None
    spliced: Callable[[TenantEngine, TenantCall, memoryview, int], None] | None = None
    unseen: Callable[[TenantEngine, TenantCall, memoryview, int], bytes | None] | None = None


@dataclass(frozen=True)
class Registry:
    """The handlers by the name tenant.yaml gives them, and the identifier kinds that need code."""

    handlers: dict[str, Handler]
    kinds: dict[str, KindFn]

    def check(self, rules: dict[int, TenantRule]) -> None:
        """Rules and handlers must match one to one (by name): a typo must fail the load, not be ignored."""
        named = {rule.handler for rule in rules.values() if rule.handler}
        missing = sorted(named - set(self.handlers))
        unused = sorted(set(self.handlers) - named)
        kinds = {kind for rule in rules.values() for _, kind in rule.request + rule.response}
        unknown_kinds = sorted(kinds - set(self.kinds) - PLAIN_KINDS)
        problems = []
        if missing:
            problems.append(f"tenant.yaml names handlers that do not exist: {missing}")
        if unused:
            problems.append(f"handlers no rule in tenant.yaml uses: {unused}")
        if unknown_kinds:
            problems.append(f"tenant.yaml names identifier kinds nothing translates: {unknown_kinds}")
        if problems:
            raise ValueError("; ".join(problems))


PLAIN_KINDS = frozenset({"topic", "group", "txn", "topic_id"})  # translate.Translation's own


@dataclass
class Policy:
    # Metadata requests that ask for a missing topic with AllowAutoTopicCreation: create it in the VC
    # (through the broker's own auto-creation, under a physical name derived from VC and link, so
    # concurrent requests agree on it) or answer UNKNOWN_TOPIC_OR_PARTITION.
    auto_create_topics: bool = False
    # vc name -> whether the physical topic goes with the VC's last link to it (KIP-1134: kept by default,
    # for an operator to delete from kafka-cluster); the config's `delete_physical_topics` and seed entries.
    delete_physical_topic: Callable[[str], bool] = field(default=lambda _vc: False)
    # vc name -> that VC's topic policy (proxy/tenancy/policy.py): the config's `tenancy.topic_policy`
    # and the VC's seed entry's override; a callable so that it can come from the state topic later.
    topic_policy: Callable[[str], TopicPolicy] = field(default=lambda _vc: SAFE_DEFAULT)


@dataclass
class TenantCall:
    """The tenancy stage's state for one request/response pair of a tenant connection."""

    api_key: int
    version: int
    rule: TenantRule
    tx: Translation
    state: dict[str, Any] = field(default_factory=dict)  # handler scratch space
    writes: list[Record] = field(default_factory=list)  # records to write before replying
    local_response: Any = None  # a handler answered without the broker
    # Partitions the broker creates for this request beyond what its response counts (Metadata
    # auto-creation, Streams internal topics): charged to the controller-mutation quota too.
    mutations: int = 0


class LocalAnswer(Exception):
    """Raised by a request handler that answers itself; carries the response entity."""

    def __init__(self, response: Any):
        self.response = response


class TenantEngine:
    """One tenant connection's translator: per-connection facts (group protocols, regex expansions) live here."""

    def __init__(
        self,
        vc: VirtualCluster,
        image: TenancyImage,
        policy: Policy,
        registry: Registry,
        broker: Callable[[], Hashable | None] = lambda: None,
    ):
        self.vc = vc
        self.image = image
        self.policy = policy
        self.registry = registry
        self.broker = broker  # the upstream broker of this connection (fetch sessions are per broker), None: unknown
        self.group_protocols: dict[str, str] = {}  # virtual group id -> protocol type (JoinGroup)
        # group -> (regex, expansion last sent), least recently used first (bounded by the handler)
        self.regex_subscriptions: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self.name_subscriptions = NameSubscriptions()  # group -> names and their physical topics last sent

    # -- the VC's topic policy ----------------------------------------------------------------------

    @property
    def topic_policy(self) -> TopicPolicy:
        return self.policy.topic_policy(self.vc.name)

    def budget(self) -> Budget:
        """The VC's topic policy and what the VC has now, for one request's checks."""
        orphans = self.image.orphans_of(self.vc.name)  # what its deletes left behind counts until deleted
        return Budget(self.topic_policy, usage_of(self.vc, self.image.partitions, orphans))

    # -- requests ---------------------------------------------------------------------------------

    def request(
        self,
        api_key: int,
        version: int,
        frame: memoryview | bytes,
        body_offset: int,
        access: Any = None,
        decoded: Callable[[], Any] | None = None,
    ) -> tuple[TenantCall, Any]:
        """Returns the call and either new frame pieces (forward) or a response entity (answer).
        `access` (proxy/acl/access.py) is asked about each name translated: the VC's ACLs. `decoded`:
        the request's body decoded (the exchange's one decode), else decoded here."""
        rule = tenant_rules()[api_key]
        ex = TenantCall(api_key, version, rule, Translation(self.vc, self.image, access=access))
        if rule.action == "pass":
            return ex, [frame]
        cls = request_type(api_key, version)
        paths = identifier_paths(cls) + tuple((p, k) for p, k in rule.request if _has_path(cls, p))
        if "request" in rule.splice:
            # Spliced, not decoded: validated first, so a tagged field the proxy's schema does not name (which a
            # newer broker might read as a name to translate) is refused, as a decode refuses it (docs/security.md).
            walker.validate(cls, frame, body_offset)
            return ex, splice.rewrite_fields(cls, frame, body_offset, frozenset(paths), self._to_physical(ex))
        body = decoded() if decoded is not None else codec.decode(cls, frame, body_offset)[0]
        hook = self.registry.handlers[rule.handler].request if rule.handler else None
        try:
            if hook is not None:
                body = hook(self, ex, body)
            for path, kind in () if ex.state.get("skip_generic") else paths:
                body = self._translate(body, path, kind, ex, to_physical=True)
        except LocalAnswer as answer:
            return ex, answer.response
        return ex, with_body(frame, body_offset, codec.encode(body))

    def _to_physical(self, ex: TenantCall) -> Callable[[str, Any], Any]:
        return lambda kind, value: ex.tx.to_physical(kind, value)

    def _translate(self, body: Any, path: str, kind: str, ex: TenantCall, *, to_physical: bool) -> Any:
        fn = self.registry.kinds.get(kind)
        if fn is not None:
            return apply_path(body, path, lambda v: fn(self, ex, v, to_physical))
        translate = ex.tx.to_physical if to_physical else ex.tx.to_virtual
        return apply_path(body, path, lambda v: translate(kind, v))

    # -- responses --------------------------------------------------------------------------------

    def splices_response(self, ex: TenantCall) -> bool:
        return "response" in ex.rule.splice

    def response_facts(self, ex: TenantCall, frame: memoryview | bytes, body_offset: int) -> None:
        """A spliced response's facts at fixed offsets (fetch session ids), read without decoding."""
        rule = ex.rule
        handler = self.registry.handlers[rule.handler] if rule.handler else None
        if handler is not None and handler.spliced is not None:
            handler.spliced(self, ex, frame, body_offset)  # type: ignore[arg-type]

    def response_edits(
        self, ex: TenantCall, frame: memoryview | bytes, body_offset: int, answer_unseen: bool = True
    ) -> tuple[splice.Edits, bytes | None]:
        """A spliced response's names, to the client's terms: edits for the response's one splice. Where
        it names a topic the VC may not see and its handler answers that as a broker would (`unseen`),
        the new frame comes too, and the edits are of it (`answer_unseen=False`: names only)."""
        handler = self.registry.handlers[ex.rule.handler] if ex.rule.handler and answer_unseen else None
        unseen = handler.unseen if handler is not None else None
        cls = response_type(ex.api_key, ex.version)
        paths = frozenset(identifier_paths(cls))
        hidden = False

        def translate(kind: str, value: Any) -> Any:
            nonlocal hidden
            if unseen is not None and kind in ("topic", "topic_id") and not ex.tx.visible(kind, value):
                hidden = True
            return ex.tx.to_virtual(kind, value)

        edits = splice.edits_for(cls, frame, body_offset, paths, translate)  # type: ignore[arg-type]
        if hidden and (again := unseen(self, ex, frame, body_offset)) is not None:  # type: ignore[misc, arg-type]
            return splice.edits_for(cls, memoryview(again), body_offset, paths, ex.tx.to_virtual), again  # type: ignore[arg-type]
        return edits, None

    def translate_response(self, ex: TenantCall, body: Any) -> Any:
        rule = ex.rule
        if rule.action == "pass":
            return body
        cls = type(body)
        handler = self.registry.handlers[rule.handler] if rule.handler else None
        hook = handler.response if handler is not None else None
        if hook is not None:
            body = hook(self, ex, body)
        for array, item_field, kind in rule.filters:
            if _has_path(cls, array.removesuffix("[]")):
                body = apply_path(body, array, lambda item, f=item_field, k=kind: _keep(ex, item, f, k))
        extra = tuple((p, k) for p, k in rule.response if _has_path(cls, p))
        for path, kind in identifier_paths(cls) + extra:
            body = self._translate(body, path, kind, ex, to_physical=False)
        finish = handler.finish if handler is not None else None
        if finish is not None:  # additions that are already in the client's terms
            body = finish(self, ex, body)
        return scrub_messages(body, ex.tx)

    # -- local answers ----------------------------------------------------------------------------

    def deny_body(self, api_key: int, version: int, error: int) -> bytes | None:
        return codec.error_response_body(api_key, version, error)


def _keep(ex: TenantCall, item: Any, field_name: str, kind: str) -> Any:
    value = getattr(item, field_name, None)
    return item if ex.tx.visible(kind, value) else DROP


def _has_path(cls: type, path: str) -> bool:
    head = path.split(".")[0].removesuffix("[]")
    return head in {f.name for f in dataclasses.fields(cls)}


def scrub_messages(entity: Any, tx: Translation) -> Any:
    """Error messages can quote physical names: rewrite them in every *message field, at any depth."""
    if not dataclasses.is_dataclass(entity):
        return entity
    changes = {}
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if isinstance(value, str) and f.name.endswith("message"):
            new = tx.scrub(value)
            if new != value:
                changes[f.name] = new
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            new_items = tuple(scrub_messages(v, tx) for v in value)
            if any(a is not b for a, b in zip(new_items, value, strict=True)):
                changes[f.name] = new_items
        elif dataclasses.is_dataclass(value):
            new_value = scrub_messages(value, tx)
            if new_value is not value:
                changes[f.name] = new_value
    return dataclasses.replace(entity, **changes) if changes else entity
