"""The state topic, guarded from the members of kafka-cluster (the physical cluster), super-admins included (sans-I/O).

Such principals (operators, the demo's `admin`) see the physical cluster, which holds the state topic:
one link record written there would hand one tenant another's topic. So, through the proxy:

* nobody may write, delete, truncate, reconfigure or add partitions to it, nor write transactional
  offsets or markers into it (`state_guard.writes` in proxy/catalogue.py): TOPIC_AUTHORIZATION_FAILED in the
  API's shape;
* nobody may use the transactional id the replicas decide under (`decisions_id`, docs/state.md): with it a
  client could fence the replicas' decisions one after another (TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  as a broker answers an id the principal may not use);
* only `tenancy.state_topic_readers` may read or describe it (any other request naming it, by name or
  topic id, is refused the same way), and it is left out of everyone else's topic listings (Metadata,
  DescribeTopicPartitions).

`check()` decides from the API key, version and the request's annotated topic fields (walked without
decoding record batches); `filter_response()` hides the topic from listings. The session calls both.

The replicas' other topic, the quota usage topic (proxy/state/quota_sharing.py), is guarded the same way
(`also`): a usage report written into it would throttle a tenant, or hide what another replica used.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..catalogue import ApiSpec, StateGuardRule, spec
from ..protocol import codec, entities, splice
from ..protocol.apikey import ApiKey
from ..protocol.apis import request_type, response_type
from .fields import apply_path, identifier_paths

log = logging.getLogger(__name__)
_NOTHING = StateGuardRule()  # an API the catalogue does not know (the session closes on it first)

TOPIC_RESOURCE = 2


def decisions_id(topic: str) -> str:
    """The transactional.id every replica's decisions share: one holder at a time (docs/state.md)."""
    return f"vcproxy-state-decisions.{topic}"


@dataclass
class StateTopicGuard:
    topic: str
    readers: frozenset[str] = frozenset()
    topic_id: uuid.UUID | None = None  # requests may name the topic by id (Produce v13, Fetch v13+)
    also: tuple[tuple[str, uuid.UUID | None], ...] = ()  # other topics of the replicas', guarded the same

    def __post_init__(self) -> None:
        self.names = frozenset([self.topic, *(name for name, _ in self.also)])
        self.ids = frozenset(i for i in (self.topic_id, *(i for _, i in self.also)) if i is not None)
        # A request can only name a guarded topic if its name's or id's bytes occur in the frame: a C
        # scan (re searches the receive buffer in place, no copy; one literal each, which re finds
        # fastest) spares every other request a decode. Not for Produce: its records are walked over.
        needles = [n.encode() for n in sorted(self.names)] + [i.bytes for i in sorted(self.ids)]
        self._needles = [re.compile(re.escape(n)) for n in needles]
        self.decisions_id = decisions_id(self.topic)
        self._decisions_needle = re.compile(re.escape(self.decisions_id.encode()))

    def guarding(self, name: str, topic_id: uuid.UUID | None) -> StateTopicGuard:
        """This guard, guarding topic `name` (by its id too, when known) as well."""
        kept = tuple((n, i) for n, i in self.also if n != name)
        return dataclasses.replace(self, also=(*kept, (name, topic_id)))

    def mentioned(self, frame: memoryview) -> bool:
        return any(n.search(frame) is not None for n in self._needles)


@dataclass
class Refusal:
    """Answer locally with `body` (a response entity), or close the connection when it is None."""

    body: Any
    why: str
    acks: int = -1  # Produce: acks=0 expects no answer, so the connection is closed instead


@dataclass
class ListingFilter:
    """Forward the request; hide the state topic in the response. Used by the session as a tenant
    exchange and its engine at once (`response`, `writes`)."""

    guard: StateTopicGuard
    api_key: int
    version: int
    all_topics: bool
    writes: list[Any] = field(default_factory=list)  # never any

    def response(
        self, ex: Any, frame: memoryview, body_offset: int, post: Callable[[Any], Any] | None = None
    ) -> list[bytes | memoryview]:
        body, _ = codec.decode(response_type(self.api_key, self.version), frame, body_offset)
        body = filter_response(self.guard, self, body)
        if post is not None:
            body = post(body)  # broker endpoints
        new_body = codec.encode(body)
        head = frame[4:body_offset]
        return [(len(head) + len(new_body)).to_bytes(4, "big"), head, new_body]


def check(
    guard: StateTopicGuard,
    principal: str | None,
    api_key: int,
    version: int,
    frame: memoryview,
    body_offset: int,
    decoded: Callable[[], Any] | None = None,
) -> Refusal | ListingFilter | None:
    """What to do with one request of a principal bound to no VC: refuse, filter its answer, or pass (None).
    `decoded`: the request's body decoded (the exchange's one decode), else decoded here, once."""
    if decoded is None:
        decoded = functools.cache(lambda: codec.decode(request_type(api_key, version), frame, body_offset)[0])
    api = spec(api_key)
    rules = api.state_guard if api is not None else _NOTHING
    if rules.uses_txn_id and guard._decisions_needle.search(frame) is not None:
        refused = _uses_decisions_id(guard, principal, api_key, version, decoded())
        if refused is not None:
            return refused
    reader = principal is not None and principal in guard.readers
    if rules.lists_topics and not reader:
        if not guard.mentioned(frame) and not _may_list_all(api_key, version, decoded()):
            return None
        body = decoded()
        if not _names_state_topic(guard, api_key, version, body, None):
            topics = getattr(body, "topics", None)
            everything = topics is None or (api_key == ApiKey.METADATA and version == 0 and not topics)
            return ListingFilter(guard, api_key, version, all_topics=everything)
        # Named explicitly: the broker's answer shows it with TOPIC_AUTHORIZATION_FAILED (filter_response).
        return ListingFilter(guard, api_key, version, all_topics=False)
    if reader and not rules.writes:
        return None
    if not _paths(api_key, version) or (api_key != ApiKey.PRODUCE and not guard.mentioned(frame)):
        return None
    if api_key == ApiKey.PRODUCE:  # record batches are walked over, never decoded
        if not _names_state_topic(guard, api_key, version, None, (frame, body_offset)):
            return None
        body = decoded()
    else:
        body = decoded()
        if not _names_state_topic(guard, api_key, version, body, None):
            return None
    what = "write to" if rules.writes else "read"
    named = f"the state topic {guard.topic}"
    if guard.also:
        named = f"the replicas' topics {'/'.join(sorted(guard.names))}"
    why = f"{principal} may not {what} {named} (api {api_key} v{version})"
    return Refusal(_refusal_body(api, version, body), why, int(getattr(body, "acks", -1)))


def _uses_decisions_id(
    guard: StateTopicGuard, principal: str | None, api_key: int, version: int, body: Any
) -> Refusal | None:
    found = False

    def see(value: Any) -> Any:
        nonlocal found
        found = found or value == guard.decisions_id
        return value

    for path, kind in identifier_paths(request_type(api_key, version)):
        if kind == "txn":
            apply_path(body, path, see)
    if not found:
        return None
    cls = response_type(api_key, version)
    why = f"{principal} may not use the replicas' transactional id {guard.decisions_id} (api {api_key} v{version})"
    error = ErrorCode.transactional_id_authorization_failed
    return Refusal(codec._empty(cls, error_code=error) if "error_code" in entities.field_names(cls) else None, why)


def _may_list_all(api_key: int, version: int, body: Any) -> bool:
    """Whether a Metadata/DescribeTopicPartitions request could ask for every topic (so its answer
    needs filtering): decoded, as these requests are small."""
    topics = getattr(body, "topics", None)
    return (
        topics is None or (api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS and not topics) or (version == 0 and not topics)
    )


@functools.cache
def _paths(api_key: int, version: int) -> tuple[tuple[str, str], ...]:
    cls = request_type(api_key, version)
    paths = tuple((p, k) for p, k in identifier_paths(cls) if k in ("topic", "topic_id"))
    api = spec(api_key)
    if api is not None and api.state_guard.config_resources:
        paths += (("resources[].resource_name", "config"),)
    return paths


def _names_state_topic(
    guard: StateTopicGuard, api_key: int, version: int, body: Any, raw: tuple[memoryview, int] | None
) -> bool:
    found = False

    def see(kind: str, value: Any) -> Any:
        nonlocal found
        if (kind in ("topic", "config") and value in guard.names) or (kind == "topic_id" and value in guard.ids):
            found = True
        return value

    paths = _paths(api_key, version)
    if raw is not None:
        frame, offset = raw
        splice.rewrite_fields(request_type(api_key, version), frame, offset, frozenset(paths), see)
        return found
    for path, kind in paths:
        if kind == "config":
            for resource in body.resources:
                if int(resource.resource_type) == TOPIC_RESOURCE:
                    see("config", resource.resource_name)
        else:
            apply_path(body, path, lambda value, kind=kind: see(kind, value))
    return found


# -- refusals in the API's shape -----------------------------------------------------------------------


def _refusal_body(api: ApiSpec, version: int, request: Any) -> Any:
    """TOPIC_AUTHORIZATION_FAILED for every item of the request, or None (close) where the API has no
    place for it. Every item is refused: a request that touches the state topic is refused whole."""
    cls = response_type(api.key, version)
    error = ErrorCode.topic_authorization_failed
    if api.key == ApiKey.PRODUCE:
        topic_cls = entities.item_type(cls, "responses")
        part_cls = entities.item_type(topic_cls, "partition_responses")
        topics = tuple(
            entities.build(
                topic_cls,
                name=getattr(t, "name", None),
                topic_id=getattr(t, "topic_id", None),
                partition_responses=tuple(
                    entities.build(
                        part_cls,
                        index=p.index,
                        error_code=error,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                    )
                    for p in t.partition_data
                ),
            )
            for t in request.topic_data
        )
        return codec._empty(cls, responses=topics)
    build = api.refuse_items  # CreateTopics, DeleteTopics, DeleteRecords, configs, ...
    if build is not None:
        return build(request, cls, error)
    if "error_code" in entities.field_names(cls):
        return codec._empty(cls, error_code=error)
    return None


# -- listings ------------------------------------------------------------------------------------------


def filter_response(guard: StateTopicGuard, listing: ListingFilter, body: Any) -> Any:
    """Leave the state topic out of a listing; named explicitly, it is TOPIC_AUTHORIZATION_FAILED
    (what Kafka answers for a topic the principal may not describe)."""
    kept = []
    for topic in body.topics:
        if topic.name not in guard.names and getattr(topic, "topic_id", None) not in guard.ids:
            kept.append(topic)
        elif not listing.all_topics:
            changes: dict[str, Any] = {"error_code": ErrorCode.topic_authorization_failed, "partitions": ()}
            if "topic_id" in entities.field_names(type(topic)):
                changes["topic_id"] = uuid.UUID(int=0)
            kept.append(dataclasses.replace(topic, **changes))
    return dataclasses.replace(body, topics=tuple(kept))
