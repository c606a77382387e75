"""The tenancy stage: a tenant's requests and answers translated between its virtual cluster and the
physical one (proxy/tenancy/engine.py), and the state topic guarded from principals in no VC."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from ...catalogue import catalogue
from ...protocol import codec, name_rules, native
from ...protocol.apikey import ApiKey
from ...protocol.apis import response_type
from ...protocol.codec import CodecError
from ...protocol.primitives import MALFORMED
from ...protocol.splice import Edits
from ...rules import tenant_rules
from ...tenancy import guard as state_guard
from ...tenancy import linked
from ...tenancy.engine import TenantEngine
from ...tenancy.fetch_sessions import FETCH_SESSIONS
from ...tenancy.handlers import registry
from ...tenancy.model import TenancyError
from .. import grants
from ..exchange import Exchange, RequestDecision, ResponseMessage, answer, close, refusal, refuse
from .binding import Tenancy
from .context import ConnectionState

log = logging.getLogger(__name__)


def _topic_error(ex: Exchange, call: Any, topic: str) -> int | None:
    """What the broker answers about a topic before it checks a request's group id: not authorized, or unknown."""
    if ex.access is not None and topic in ex.access.denied.get("topic", ()):
        return int(ErrorCode.topic_authorization_failed)
    return int(ErrorCode.unknown_topic_or_partition) if topic in call.tx.unknown_topics else None


class TenancyStage:
    def __init__(self, ctx: ConnectionState, tenancy: Tenancy):
        self.ctx = ctx
        self.tenancy = tenancy
        self.registry = registry()  # checked against tenant.yaml: a mismatch fails here, not per request
        self.grants = native.forwarding() is not None  # what the forwarder may serve is learned only where it runs
        catalogue()  # built once and checked: every translated API says what it needs of ACLs

    def engine_for(self, vc: object) -> TenantEngine:
        return TenantEngine(
            vc,  # type: ignore[arg-type]
            self.tenancy.image,
            self.tenancy.policy,
            self.registry,
            lambda: self.ctx.broker,
        )

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        if self.ctx.relayed:  # the broker's principal: passed unchanged
            return None
        if self.ctx.engine is not None:
            return self._tenant(ex, self.ctx.engine)
        return self._guard(ex)

    def _tenant(self, ex: Exchange, engine: TenantEngine) -> RequestDecision | None:
        info, header = ex.info, ex.header
        assert info is not None and header is not None and ex.frame is not None
        rule = tenant_rules().get(ex.api_key)
        if rule is None or rule.action in ("deny", "local"):  # `local`: a stage before this one answers
            error = (rule.error if rule is not None else 0) or ErrorCode.cluster_authorization_failed
            return refuse(ex, error, f"{info.name} in virtual cluster {engine.vc.name}")
        try:
            call, out = engine.request(ex.api_key, ex.api_version, ex.frame, header.body_offset, ex.access, ex.received)
        except (CodecError, TenancyError, KeyError, *MALFORMED) as exc:
            return close(f"cannot translate {info.name} v{ex.api_version}: {exc}")
        ex.tenant = call
        refusal = ex.access.refusal() if ex.access is not None else None
        if refusal is not None:  # a group or transactional id the caller may not use (the VC's ACLs)
            return refuse(ex, refusal[0], f"{info.name} in virtual cluster {engine.vc.name}: {refusal[1]}")
        rules = ex.spec.name_rules if ex.spec is not None else ()
        if rules:  # Kafka's checks on the names as the client sent them (the translation renamed them)
            try:
                received, cls = ex.received(), response_type(ex.api_key, ex.api_version)
                refused = name_rules.refusal(rules, received, cls, lambda topic: _topic_error(ex, call, topic))
            except (CodecError, *MALFORMED) as exc:
                # A spliced request the walker accepts but kio does not decode (a string that is no UTF-8, which
                # Kafka reads anyway): the group ids the translation saw decide, as the forwarder would serve it.
                if name_rules.refuses_any(rules, call.tx.group_ids.values()):
                    return close(f"cannot check {info.name} v{ex.api_version}: {exc}")
                refused = None
            if refused is not None:  # never granted to the forwarder either: it did not pass
                log.info("refusing request: %s in virtual cluster %s: a name Kafka refuses", info.name, engine.vc.name)
                return answer(ex, codec.encode(refused))
        if isinstance(out, list) and self.grants:
            self._grant(ex, call, out)
        if not isinstance(out, list):  # answered by the proxy (already in the client's terms)
            try:
                body = codec.encode(out)
            except CodecError as exc:  # e.g. a message quoting the client's 32,767-byte name: too long to send
                return close(f"cannot answer {info.name} v{ex.api_version}: {exc}")
            ex.writes = list(call.writes)
            if call.writes:  # a change the proxy decides itself (a DeleteTopics that only unlinks)
                ex.decide = lambda: self._decide(ex, engine)
            return answer(ex, body)
        if rule.action != "pass":
            ex.pieces = out
        return None

    def _grant(self, ex: Exchange, call: Any, out: list[Any]) -> None:
        """A request let through as the client sent it, or with its topic names and transactional id renamed as the
        VC's: the topic ids and names it named may go unasked through the forwarder until the state changes, for this
        API, and so may its transactional id and fetch session (proxy/core/grants.py). Only where every id was one the
        VC owns and every name one of its links, each the caller may use, and nothing else was refused or changed."""
        plans = grants.tenant_plans(ex.api_key, ex.api_version)
        if plans is None or (ex.access is not None and ex.access.any_denied) or call.tx.fake_ids or call.tx.probed:
            return
        frame = ex.frame
        assert frame is not None
        names = None
        if call.tx.topics or call.tx.txn_ids or call.tx.group_ids:  # renamed as the VC's, nothing else changed
            names = grants.renames(call.tx.vc, call.tx)
            if names is None:
                return
        elif not (len(out) == 1 and out[0] is frame) and (sum(map(len, out)) != len(frame) or b"".join(out) != frame):
            return  # decoded and encoded again (a Fetch): granted only if the bytes are the same
        grant = grants.grant_for(self.ctx)
        if grant is None:
            return
        grant.add(ex.api_key, call.tx.kept_ids)
        for kind, pairs in (names or {}).items():
            if pairs:
                grant.add_names(ex.api_key, kind, pairs)
        session = call.state.get("fetch_session")
        if session is not None:  # the ownership table said the VC owns it on this broker
            self._grant_owned(grant, session[0])

    def _grant_session(self, frame: memoryview, body_offset: int) -> None:
        """A Fetch answer that opened a session the ownership table now gives the VC: the forwarder may serve it."""
        if len(frame) < body_offset + 10 or self.ctx.grant is None:
            return
        session = int.from_bytes(frame[body_offset + 6 : body_offset + 10], "big", signed=True)
        if session != 0:
            self._grant_owned(self.ctx.grant, session)

    def _grant_owned(self, grant: Any, session: int) -> None:
        """Asked of the table after its generation is read, so that a grant never holds a session the table let go
        since (both are changed on this thread only; the forwarder's thread reads the grant)."""
        engine = self.ctx.engine
        if engine is None:
            return
        seen = FETCH_SESSIONS.generation(engine.vc.id)
        if FETCH_SESSIONS.owns(engine.vc.id, self.ctx.broker, session):
            grant.add_session(session, seen)

    def _decide(self, ex: Exchange, engine: TenantEngine) -> tuple[bytes, list[Any]]:
        """The request again, against the log's image (one replica at a time). If it is no longer answered
        here (a link deleted meanwhile), the topics are unknown now: UNKNOWN_TOPIC_OR_PARTITION, as the
        broker answers for a placeholder; the VC deleted or re-created: CLUSTER_AUTHORIZATION_FAILED."""
        assert ex.header is not None and ex.frame is not None
        if self.tenancy.image.vcs.get(engine.vc.name) is not engine.vc:
            return refusal(ex, ErrorCode.cluster_authorization_failed) or b"", []
        call, out = engine.request(ex.api_key, ex.api_version, ex.frame, ex.header.body_offset, ex.access, ex.received)
        if isinstance(out, list):
            return refusal(ex, ErrorCode.unknown_topic_or_partition) or b"", []
        return codec.encode(out), list(call.writes)

    def _guard(self, ex: Exchange) -> RequestDecision | None:
        """A principal in no VC: the state topic is hidden, and only its readers may read it; linked
        physical topics are not deleted."""
        guard = getattr(self.tenancy.image, "guard", None)
        if guard is None:
            return self._linked(ex)
        info, header = ex.info, ex.header
        assert info is not None and header is not None and isinstance(ex.frame, memoryview)
        try:
            outcome = state_guard.check(
                guard, self.ctx.principal, ex.api_key, ex.api_version, ex.frame, header.body_offset, ex.received
            )
        except (CodecError, ValueError, IndexError, KeyError) as exc:  # TruncatedError is a ValueError
            # Fails closed: the broker might accept what kio does not (e.g. an unknown tagged field).
            return close(f"cannot check {info.name} v{ex.api_version} for the state topic: {exc}")
        if outcome is None:
            return self._linked(ex)
        if isinstance(outcome, state_guard.Refusal):
            log.warning("refusing %s: %s", info.name, outcome.why)
            if outcome.body is None or outcome.acks == 0:
                return close(outcome.why)
            return answer(ex, codec.encode(outcome.body))
        ex.tenant = outcome
        return None

    def _linked(self, ex: Exchange) -> RequestDecision | None:
        """DeleteTopics from kafka-cluster: topics a VC links are refused (proxy/tenancy/linked.py)."""
        if ex.api_key != ApiKey.DELETE_TOPICS:
            return None
        assert ex.info is not None and ex.header is not None and ex.frame is not None
        try:
            # The request as the stages before left it (kafka-cluster's ACLs may have swapped refused topics).
            found = linked.check(self.tenancy.image, ex.request())
        except (CodecError, *MALFORMED) as exc:
            return close(f"cannot check {ex.info.name} v{ex.api_version} for linked topics: {exc}")
        if found is None:
            return None
        body, ex.tenant = found
        ex.edit_request(body)
        return None

    def on_response(self, ex: Exchange, msg: ResponseMessage) -> None:
        call = ex.tenant
        if call is None:
            return
        if isinstance(call, linked.LinkedDeletes):
            msg.set_entity(linked.fix_response(call, msg.entity()))
            return
        if isinstance(call, state_guard.ListingFilter):
            msg.set_entity(state_guard.filter_response(call.guard, call, msg.entity()))
            return
        engine = self.ctx.engine
        assert engine is not None
        if call.rule.action == "pass":
            return
        if engine.splices_response(call):  # names spliced with any other stage's edits, in one pass
            frame = msg.unedited()
            engine.response_facts(call, frame, msg.body_offset)
            if ex.spec is not None and ex.spec.fetch_session is not None and self.grants:
                self._grant_session(frame, msg.body_offset)
            # Found now (one walk): a topic the VC may not see can change the frame itself.
            edits, again = engine.response_edits(call, frame, msg.body_offset)
            if again is not None:
                msg.replace([again])
                frame = msg.unedited()

            def find(buf: bytes | memoryview, offset: int, seen: bytes | memoryview = frame) -> Edits:
                # Another stage's edit came first: the names again, on its frame (already answered).
                return edits if buf is seen else engine.response_edits(call, buf, offset, answer_unseen=False)[0]

            msg.deferred.append((find, None))
        else:
            body = engine.translate_response(call, msg.entity())
            rules = ex.spec.name_rules if ex.spec is not None else ()
            if name_rules.has_items(rules):  # items naming an id Kafka refuses, answered as it does
                body = name_rules.fix_items(rules, ex.received(), body)
            msg.set_entity(body)
        msg.writes.extend(call.writes)
