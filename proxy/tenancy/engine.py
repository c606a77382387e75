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
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol import codec, splice
from ..protocol.apis import request_type, response_type
from ..rules import api_rules, load_yaml
from .fields import DROP, apply_path, identifier_paths
from .model import TenancyImage, VirtualCluster
from .translate import Translation

Record = tuple[str, dict[str, Any] | None]


@dataclass(frozen=True)
class TenantRule:
    api: str
    action: str
    error: int = 0
    request: tuple[tuple[str, str], ...] = ()
    response: tuple[tuple[str, str], ...] = ()
    filters: tuple[tuple[str, str, str], ...] = ()  # (array path, item field, kind)
    splice: frozenset[str] = frozenset()
    handler: str | None = None


@functools.cache
def tenant_rules() -> dict[int, TenantRule]:
    by_name = {r.name: key for key, r in api_rules().items()}
    rules = {}
    for name, entry in load_yaml("tenant.yaml")["tenant"].items():
        if name not in by_name:
            raise ValueError(f"tenant.yaml: unknown API {name!r}")
        error = entry.get("error")
        rules[by_name[name]] = TenantRule(
            api=name,
            action=entry["action"],
            error=int(getattr(ErrorCode, error.lower())) if error else 0,
            request=tuple((entry.get("request") or {}).items()),
            response=tuple((entry.get("response") or {}).items()),
            filters=tuple((p, f, k) for p, (f, k) in (entry.get("filter") or {}).items()),
            splice=frozenset(entry.get("splice") or ()),
            handler=entry.get("handler"),
        )
        if rules[by_name[name]].action not in ("rewrite", "deny", "pass"):
            raise ValueError(f"tenant.yaml: {name}: unknown action {entry['action']!r}")
    return rules


@dataclass
class Policy:
    # Metadata requests that ask for a missing topic with AllowAutoTopicCreation: create it in the VC
    # (through the broker's own auto-creation, under a physical name derived from VC and link, so
    # concurrent requests agree on it) or answer UNKNOWN_TOPIC_OR_PARTITION.
    auto_create_topics: bool = False
    delete_physical_topic: bool = True  # when its last link goes


@dataclass
class Exchange:
    """One request/response pair of a tenant connection."""

    api_key: int
    version: int
    rule: TenantRule
    tx: Translation
    state: dict[str, Any] = field(default_factory=dict)  # handler scratch space
    writes: list[Record] = field(default_factory=list)  # records to write before replying
    local_response: Any = None  # a handler answered without the broker


class LocalAnswer(Exception):
    """Raised by a request handler that answers itself; carries the response entity."""

    def __init__(self, response: Any):
        self.response = response


class TenantEngine:
    def __init__(self, vc: VirtualCluster, image: TenancyImage, policy: Policy, session: Any = None):
        self.vc = vc
        self.image = image
        self.policy = policy
        self.session = session  # for per-connection facts handlers need (group protocol types)
        self.group_protocols: dict[str, str] = {}  # virtual group id -> protocol type (JoinGroup)
        # group -> (regex, expansion last sent), least recently used first (bounded by the handler)
        self.regex_subscriptions: OrderedDict[str, tuple[str, str]] = OrderedDict()

    # -- requests ---------------------------------------------------------------------------------

    def request(self, api_key: int, version: int, frame: memoryview, body_offset: int) -> tuple[Exchange, Any]:
        """Returns the exchange and either new frame pieces (forward) or a response entity (answer)."""
        from . import handlers

        rule = tenant_rules()[api_key]
        ex = Exchange(api_key, version, rule, Translation(self.vc, self.image))
        if rule.action == "pass":
            return ex, [frame]
        cls = request_type(api_key, version)
        paths = identifier_paths(cls) + tuple((p, k) for p, k in rule.request if _has_path(cls, p))
        if "request" in rule.splice:
            return ex, splice.rewrite_fields(cls, frame, body_offset, frozenset(paths), self._to_physical(ex))
        body, _ = codec.decode(cls, frame, body_offset)
        hook = getattr(handlers, f"{rule.handler}_request", None) if rule.handler else None
        try:
            if hook is not None:
                body = hook(self, ex, body)
            for path, kind in () if ex.state.get("skip_generic") else paths:
                body = self._translate(body, path, kind, ex, to_physical=True)
        except LocalAnswer as answer:
            return ex, answer.response
        new_body = codec.encode(body)
        head = frame[4:body_offset]
        return ex, [(len(head) + len(new_body)).to_bytes(4, "big"), head, new_body]

    def _to_physical(self, ex: Exchange):  # type: ignore[no-untyped-def]
        return lambda kind, value: ex.tx.to_physical(kind, value)

    def _translate(self, body: Any, path: str, kind: str, ex: Exchange, *, to_physical: bool) -> Any:
        from . import handlers

        if kind in handlers.SPECIAL_KINDS:
            fn = handlers.SPECIAL_KINDS[kind]
            return apply_path(body, path, lambda v: fn(self, ex, v, to_physical))
        translate = ex.tx.to_physical if to_physical else ex.tx.to_virtual
        return apply_path(body, path, lambda v: translate(kind, v))

    # -- responses --------------------------------------------------------------------------------

    def response(
        self, ex: Exchange, frame: memoryview, body_offset: int, post: Callable[[Any], Any] | None = None
    ) -> list[bytes | memoryview]:
        """Translate a broker response into frame pieces; `post` edits the decoded body last (endpoints)."""
        rule = ex.rule
        if rule.action == "pass":
            return [frame]
        cls = response_type(ex.api_key, ex.version)
        if "response" in rule.splice:
            from . import handlers

            hook = getattr(handlers, f"{rule.handler}_spliced", None) if rule.handler else None
            if hook is not None:  # facts at fixed offsets (fetch session ids), read without decoding
                hook(self, ex, frame, body_offset)
            paths = frozenset(identifier_paths(cls))
            return splice.rewrite_fields(cls, frame, body_offset, paths, lambda k, v: ex.tx.to_virtual(k, v))
        body, _ = codec.decode(cls, frame, body_offset)
        body = self.translate_response(ex, body)
        if post is not None:
            body = post(body)
        new_body = codec.encode(body)
        head = frame[4:body_offset]
        return [(len(head) + len(new_body)).to_bytes(4, "big"), head, new_body]

    def translate_response(self, ex: Exchange, body: Any) -> Any:
        from . import handlers

        rule = ex.rule
        cls = type(body)
        hook = getattr(handlers, f"{rule.handler}_response", None) if rule.handler else None
        if hook is not None:
            body = hook(self, ex, body)
        for array, item_field, kind in rule.filters:
            if _has_path(cls, array.removesuffix("[]")):
                body = apply_path(body, array, lambda item, f=item_field, k=kind: _keep(ex, item, f, k))
        extra = tuple((p, k) for p, k in rule.response if _has_path(cls, p))
        for path, kind in identifier_paths(cls) + extra:
            body = self._translate(body, path, kind, ex, to_physical=False)
        finish = getattr(handlers, f"{rule.handler}_finish", None) if rule.handler else None
        if finish is not None:  # additions that are already in the client's terms
            body = finish(self, ex, body)
        return scrub_messages(body, ex.tx)

    # -- local answers ----------------------------------------------------------------------------

    def deny_body(self, api_key: int, version: int, error: int) -> bytes | None:
        return codec.error_response_body(api_key, version, error)


def _keep(ex: Exchange, item: Any, field_name: str, kind: str) -> Any:
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
