"""Per-API rewriting for a principal bound to a virtual cluster (sans-I/O).

For each request the engine decides, from rewrite_rules/tenant.yaml and the annotated fields of the
message schema: deny it locally, pass it, or translate it (decode with kio, or splice bodies that
carry record batches) and forward; for the response it translates back, filters listings, scrubs
error messages and returns state changes (new topic links, learned topic ids) for the shell to write
durably before the client sees the answer.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ..protocol import codec, plans, splice, walker
from ..protocol.apis import known_apis, request_type, response_type
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

    def check(self, rules: dict[int, TenantRule], *, schemas: bool = True) -> None:
        """Rules and handlers must match one to one (by name): a typo must fail the load, not be ignored. With
        `schemas`, also every spliced version's names must be within a splice's reach: that loads each one's
        schemas (most of a second) and depends on the code alone, so the suite checks it for the rules as shipped
        (tests/unit/test_rules.py) and a proxy's start does not."""
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
        for key, rule in rules.items():
            problems += self._splice_problems(key, rule, schemas)
        if problems:
            raise ValueError("; ".join(problems))

    def _splice_problems(self, key: int, rule: TenantRule, schemas: bool) -> list[str]:
        """A spliced body is walked, not decoded: nothing that needs the decoded body may be asked of it
        (a request hook, extra paths, response filters), and (`schemas`) every name of every version must be
        within a splice's reach (a top-level field or an "array[].field" chain). A rule that asks more fails."""
        handler = self.handlers.get(rule.handler) if rule.handler else None
        problems = []
        if "request" in rule.splice and (rule.request or (handler is not None and handler.request is not None)):
            problems.append(f"api {key}: a spliced request has a request hook or extra paths, which need a decode")
        if "response" in rule.splice and (rule.response or rule.filters):
            problems.append(f"api {key}: a spliced response has extra paths or filters, which need a decode")
        for version in _versions(key) if rule.splice and schemas else ():
            try:
                if "request" in rule.splice:
                    cls = request_type(key, version)
                    plans.splice_entity(cls, splice_paths(cls))
                if "response" in rule.splice:
                    plans.splice_entity(response_type(key, version), response_paths(response_type(key, version)))
            except KeyError as exc:
                problems.append(f"api {key} v{version}: a name out of a splice's reach: {exc}")
        return problems


PLAIN_KINDS = frozenset({"topic", "group", "txn", "topic_id"})  # translate.Translation's own


def _versions(key: int) -> range:
    info = known_apis()[key]
    return range(info.min_version, info.max_version + 1)


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
        if "request" in rule.splice:
            # Spliced, not decoded: validated first, so a tagged field the proxy's schema does not name (which a
            # newer broker might read as a name to translate) is refused, as a decode refuses it (docs/security.md).
            walker.validate(cls, frame, body_offset)
            return ex, splice.rewrite_fields(cls, frame, body_offset, splice_paths(cls), self._to_physical(ex))
        paths = _request_paths(cls, rule.request)
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

    def forwarded(self, api_key: int, version: int) -> TenantCall:
        """The call of a request the forwarder sent as the client sent it (it named only the VC's own topic ids, which
        the caller may use: proxy/core/forward_table.py): its answer is translated like that of any such request."""
        return TenantCall(api_key, version, tenant_rules()[api_key], Translation(self.vc, self.image))

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
        """Spliced where the rule says so and every error message of the answer's schema is within the
        splice's reach (`message_paths`): they are scrubbed of physical names as a decoded answer is."""
        return "response" in ex.rule.splice and message_paths(response_type(ex.api_key, ex.version))[1]

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
        paths = response_paths(cls)
        hidden = False

        def names(kind: str, value: Any) -> Any:
            return ex.tx.scrub(value) if kind == MESSAGE else ex.tx.to_virtual(kind, value)

        def translate(kind: str, value: Any) -> Any:
            nonlocal hidden
            if unseen is not None and kind in ("topic", "topic_id") and not ex.tx.visible(kind, value):
                hidden = True
            return names(kind, value)

        edits = splice.edits_for(cls, frame, body_offset, paths, translate)  # type: ignore[arg-type]
        if hidden and (again := unseen(self, ex, frame, body_offset)) is not None:  # type: ignore[misc, arg-type]
            return splice.edits_for(cls, memoryview(again), body_offset, paths, names), again  # type: ignore[arg-type]
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


@functools.cache
def _request_paths(cls: type, extra: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A decoded request's names: those its schema marks, and the rule's extras that this version has."""
    return identifier_paths(cls) + tuple((p, k) for p, k in extra if _has_path(cls, p))


@functools.cache
def splice_paths(cls: type) -> frozenset[tuple[str, str]]:
    """A spliced request's names: its schema's (the registry refuses extras with a splice)."""
    return frozenset(identifier_paths(cls))


def _has_path(cls: type, path: str) -> bool:
    head = path.split(".")[0].removesuffix("[]")
    return head in {f.name for f in dataclasses.fields(cls)}


def scrub_messages(entity: Any, tx: Translation) -> Any:
    """Error messages can quote physical names: rewrite them in every *message field, at any depth."""
    if not dataclasses.is_dataclass(entity):
        return entity
    messages, nested = _scrub_plan(type(entity))
    changes = {}
    for name in messages:
        value = getattr(entity, name)
        if isinstance(value, str):
            new = tx.scrub(value)
            if new != value:
                changes[name] = new
    for name in nested:
        value = getattr(entity, name)
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            new_items = tuple(scrub_messages(v, tx) for v in value)
            if any(a is not b for a, b in zip(new_items, value, strict=True)):
                changes[name] = new_items
        elif dataclasses.is_dataclass(value):
            new_value = scrub_messages(value, tx)
            if new_value is not value:
                changes[name] = new_value
    return dataclasses.replace(entity, **changes) if changes else entity


@functools.cache
def _scrub_plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An entity class's *message fields, and the fields that may hold entities with one at some depth: read
    once per class from its fields and their types (a Produce answer was walked field by field, a third of its
    translation's CPU). A kio field with a Kafka type is a primitive; an entity class without messages at any
    depth (a Metadata partition) is not entered. Where types cannot be read, every other field is looked at."""
    fields = dataclasses.fields(cls)
    try:
        hints: dict[str, Any] | None = typing.get_type_hints(cls)
    except Exception:  # a type the hints cannot resolve: no pruning, the values decide
        hints = None
    messages = tuple(f.name for f in fields if f.name.endswith("message"))
    nested = []
    for f in fields:
        if f.name.endswith("message") or "kafka_type" in f.metadata:
            continue
        inner = _entity_classes(hints.get(f.name)) if hints is not None else []
        if inner and not any(_scrub_plan(c) != ((), ()) for c in inner):
            continue  # schemas are trees (Kafka's JSON cannot nest a type in itself): the recursion ends
        nested.append(f.name)
    return messages, tuple(nested)


MESSAGE = "message"  # the splice's kind for an error message: scrubbed, not translated


@functools.cache
def response_paths(cls: type) -> frozenset[tuple[str, str]]:
    """What a spliced answer's walk rewrites: its names and its messages (made once per class)."""
    return frozenset(identifier_paths(cls)) | message_paths(cls)[0]


@functools.cache
def message_paths(cls: type) -> tuple[frozenset[tuple[str, str]], bool]:
    """The splice paths (splice.py: "array[].field" chains) of every *message string of an entity class, and
    whether they are all of them: a message in a tagged field or below a struct that is not an array item is
    out of the splice's reach, and such an answer is decoded instead."""
    hints = typing.get_type_hints(cls)
    regular = {f.name for f in plans.regular_fields(cls)}
    paths: set[tuple[str, str]] = set()
    complete = True
    for f in dataclasses.fields(cls):
        if f.name.endswith("message"):
            if f.name in regular and f.metadata.get("kafka_type") == "string":
                paths.add((f.name, MESSAGE))
            else:
                complete = False
            continue
        inner = _entity_classes(hints[f.name]) if "kafka_type" not in f.metadata else []
        if not inner:
            continue
        below, whole = message_paths(inner[0])
        if not below and whole:
            continue
        if f.name in regular and typing.get_origin(_without_none(hints[f.name])) is tuple:
            paths |= {(f"{f.name}[].{path}", kind) for path, kind in below}
            complete = complete and whole
        else:
            complete = False
    return frozenset(paths), complete


def _without_none(hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1 else hint


def _entity_classes(hint: Any) -> list[type]:
    """The entity classes a field's type names: X, X | None, tuple[X, ...]."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return [hint]
    return [c for arg in typing.get_args(hint) if arg is not Ellipsis for c in _entity_classes(arg)]
