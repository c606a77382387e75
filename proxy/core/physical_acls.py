"""kafka-cluster's own ACLs for its members whom the proxy authenticated and who are not super-admins
(sans-I/O). Their requests reach the broker under the proxy's identity, so the proxy authorizes them as
a broker with `allow.everyone.if.no.acl.found=false` would, on physical names:

* every topic, group and transactional id a request names needs the API's operation (the same table
  as inside a VC, the API's `acl_need` in proxy/catalogue.py); a topic id needs it on the topic the connection learned
  that id for (from Metadata, DescribeTopicPartitions or CreateTopics answers it was allowed to see), so
  an id it was never shown is refused;
* cluster APIs need their operation on CLUSTER `kafka-cluster` (Kafka's KafkaApis checks: the
  `cluster_acl` of rewrite_rules/apis.yaml, which also says which APIs need nothing);
  config resources need it on the topic, group or cluster they name;
* listings (Metadata of all topics, ListGroups, ListTransactions) leave out what may not be described;
* anything else (inter-broker, delegation tokens, APIs the table does not name) is refused: fail closed.

A refused topic goes to the broker as a placeholder that exists nowhere (a refused id as a random id), so
the broker answers that item in the API's own shape and its error becomes TOPIC_AUTHORIZATION_FAILED on
the way back, as inside a VC (proxy/acl/access.py); a refused group or transactional id refuses the
request with the API's error.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..acl.access import ERROR_OF_KIND, RESOURCE_OF_KIND, Listing, _fix, may_write_idempotently
from ..acl.model import CLUSTER_NAME, AclSet, Operation, ResourceType
from ..catalogue import spec
from ..protocol import codec, splice
from ..protocol.apikey import ApiKey
from ..protocol.apis import request_type
from ..tenancy.fields import apply_path, identifier_paths
from ..tenancy.rights import decide

Op = Operation
CONFIG_RESOURCE = {2: ResourceType.TOPIC, 32: ResourceType.GROUP}  # any other resource type: the cluster
MAX_LEARNED_IDS = 200_000  # topic ids a connection remembers (a cluster's topics, with room)


@dataclass
class Verdict:
    """One request's outcome: refused (error, why), or forwarded (rewritten when `pieces` is set) with
    its answer fixed: placeholders named back with TOPIC_AUTHORIZATION_FAILED, listings filtered."""

    error: int = 0
    why: str = ""
    filter_topics: bool = False  # a listing of topics: leave out what may not be described
    all_topics: bool = False  # the listing asked for every topic (else for named ones: refused ones stay, refused)
    pieces: list[bytes | memoryview] | None = None  # the request with refused topics as placeholders (spliced)
    body: Any = None  # or the decoded request with them, for the session to encode once
    placeholders: dict[str, str] = field(default_factory=dict)  # placeholder name -> the name asked
    fake_ids: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)  # placeholder id -> the id asked

    @property
    def fixes_response(self) -> bool:
        return bool(self.placeholders or self.fake_ids)

    def fix_response(self, body: Any, paths: tuple[tuple[str, str], ...]) -> Any:
        """Placeholders named back; their items get TOPIC_AUTHORIZATION_FAILED."""
        for path, kind in paths:
            if kind == "topic":
                body = apply_path(body, path, lambda v: self.placeholders.get(v, v))
            elif kind == "topic_id":
                body = apply_path(body, path, lambda v: self.fake_ids.get(v, v))
        names = {"topic": set(self.placeholders.values()) | set(self.fake_ids.values()), "group": set(), "txn": set()}
        return _fix(body, names)


@dataclass
class PhysicalAuthorizer:
    """One connection's authorization against kafka-cluster's ACLs."""

    principal: str
    host: str
    acls: AclSet
    topic_ids: dict[uuid.UUID, str] = field(default_factory=dict)  # ids this connection was shown

    def allows(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        granted = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}, Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}
        return decide(
            self.acls, self.principal, self.host, op, rtype, (name,), {k: frozenset(v) for k, v in granted.items()}
        )

    # -- requests -------------------------------------------------------------------------------------
    def check(
        self, api_key: int, version: int, frame: memoryview, body_offset: int, decoded: Callable[[], Any] | None = None
    ) -> Verdict:
        """`decoded`: the request's body decoded (the exchange's one decode), else decoded here."""
        api = spec(api_key)
        acl = api.rule.cluster_acl if api is not None else None
        if acl == "none":
            return Verdict()
        need = api.acl_need if api is not None else None
        if acl is not None and need is None:  # a cluster API
            op = _operation(acl)
            if self.allows(op, ResourceType.CLUSTER, CLUSTER_NAME):
                return Verdict()
            return Verdict(ErrorCode.cluster_authorization_failed, f"{op.name} on the cluster")
        if need is None:
            return Verdict(
                ErrorCode.cluster_authorization_failed, f"API {api_key} is not open to kafka-cluster's members"
            )
        cls = request_type(api_key, version)
        decode = decoded or (lambda: codec.decode(cls, frame, body_offset)[0])
        verdict = Verdict()
        if acl is not None:  # config APIs: per resource, a topic's, a group's or the cluster's operation
            body = decode()
            return self._configs(_operation(acl), body, verdict)
        assert need is not None
        refused: list[tuple[str, Any]] = []  # (kind, name) of a group or transactional id

        def see(kind: str, value: Any) -> Any:
            op = need.ops.get(kind)
            if op is None or value is None or value == "" or refused:
                return value
            if kind == "topic_id":
                name = self.topic_ids.get(value)
                if value == uuid.UUID(int=0) or (name is not None and self.allows(op, ResourceType.TOPIC, name)):
                    return value
                fake = uuid.uuid4()  # an id this connection was never shown, or a topic it may not use
                verdict.fake_ids[fake] = value
                return fake
            if self.allows(op, RESOURCE_OF_KIND[kind], value):
                return value
            if kind == "topic":
                placeholder = f"{uuid.uuid4()}.{value}"[:249]  # exists nowhere: the broker answers it unknown
                verdict.placeholders[placeholder] = value
                return placeholder
            refused.append((kind, value))
            return value

        paths = frozenset(identifier_paths(cls))
        body = None
        if api_key == ApiKey.PRODUCE:  # record batches are walked over, never decoded
            pieces = splice.rewrite_fields(cls, frame, body_offset, paths, see)
        else:
            body = decode()
            for path, kind in identifier_paths(cls):
                body = apply_path(body, path, lambda v, kind=kind: see(kind, v))
            pieces = None
        if refused:
            kind, name = refused[0]
            verdict.error, verdict.why = ERROR_OF_KIND[kind], f"{need.ops[kind].name} on {kind} {name!r}"
            return verdict
        if verdict.fixes_response:
            verdict.pieces, verdict.body = (pieces, None) if pieces is not None else (None, body)
        if api_key == ApiKey.CREATE_TOPICS and body is not None:
            for topic in body.topics:
                if not (
                    self.allows(Op.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
                    or self.allows(Op.CREATE, ResourceType.TOPIC, topic.name)
                ):
                    verdict.error, verdict.why = ERROR_OF_KIND["topic"], f"CREATE on topic {topic.name!r}"
                    return verdict
        if (
            api_key == ApiKey.INIT_PRODUCER_ID
            and body is not None
            and not body.transactional_id
            and not self._idempotent()
        ):
            verdict.error, verdict.why = ErrorCode.cluster_authorization_failed, "IDEMPOTENT_WRITE on the cluster"
            return verdict
        if api_key in (ApiKey.METADATA, ApiKey.DESCRIBE_TOPIC_PARTITIONS):
            verdict.filter_topics = True
            topics = getattr(body, "topics", None)
            verdict.all_topics = topics is None or (not topics and (api_key != ApiKey.METADATA or version == 0))
        return verdict

    def _idempotent(self) -> bool:
        return may_write_idempotently(self.allows, self.acls)

    def _configs(self, op: Operation, body: Any, verdict: Verdict) -> Verdict:
        for resource in body.resources:
            rtype = CONFIG_RESOURCE.get(int(resource.resource_type), ResourceType.CLUSTER)
            name = CLUSTER_NAME if rtype is ResourceType.CLUSTER else resource.resource_name
            if not self.allows(op, rtype, name):
                kinds = {ResourceType.TOPIC: "topic", ResourceType.GROUP: "group"}
                error = ERROR_OF_KIND[kinds[rtype]] if rtype in kinds else ErrorCode.cluster_authorization_failed
                verdict.error, verdict.why = error, f"{op.name} on {rtype.name.lower()} {name!r}"
                return verdict
        return verdict

    # -- responses ------------------------------------------------------------------------------------
    def filter_topics(self, body: Any, all_topics: bool = True) -> Any:
        """A topic listing without what may not be described (a topic asked for by name stays, with
        TOPIC_AUTHORIZATION_FAILED and nothing else, as a broker answers); the ids of the rest are learned."""
        kept = []
        for topic in body.topics:
            name = getattr(topic, "name", None)
            if name is not None and not self.allows(Op.DESCRIBE, ResourceType.TOPIC, name):
                if not all_topics:
                    kept.append(_refused_topic(topic))
                continue
            self.learn([topic])
            kept.append(topic)
        return dataclasses.replace(body, topics=tuple(kept))

    def learn(self, topics: Iterable[Any]) -> None:
        for topic in topics:
            name, topic_id = getattr(topic, "name", None), getattr(topic, "topic_id", None)
            if name and isinstance(topic_id, uuid.UUID) and topic_id.int and len(self.topic_ids) < MAX_LEARNED_IDS:
                self.topic_ids[topic_id] = name

    def filter_listing(self, listing: Listing, body: Any) -> Any:
        array, item_field, kind = listing
        kept = tuple(
            item
            for item in getattr(body, array)
            if self.allows(Op.DESCRIBE, RESOURCE_OF_KIND[kind], getattr(item, item_field))
        )
        return dataclasses.replace(body, **{array: kept})


def _operation(name: str) -> Operation:
    """apis.yaml's spelling (AlterConfigs) as the enum (ALTER_CONFIGS)."""
    return Operation[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]


def _refused_topic(topic: Any) -> Any:

    changes: dict[str, Any] = {"error_code": ErrorCode.topic_authorization_failed}
    names = {f.name for f in dataclasses.fields(topic)}
    if "partitions" in names:
        changes["partitions"] = ()
    if "topic_id" in names:
        changes["topic_id"] = uuid.UUID(int=0)
    return dataclasses.replace(topic, **changes)
