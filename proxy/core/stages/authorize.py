"""The authorization stage: who may do what (sans-I/O).

* The KIP-1134 management RPCs: a caller who may use none of them is refused here (the plane then
  checks each item).
* Inside a virtual cluster, Kafka's ACL model on the VC's own names (proxy/acl/): CreateAcls,
  DescribeAcls and DeleteAcls are answered here, and every other request gets an `Access` that the
  tenancy translation asks about each name it translates (the body is decoded once, by the tenancy
  stage); on the way back, refused items get the API's authorization error, listings lose what the
  caller may not describe, and authorized-operations fields say what the VC's ACLs allow.
* A VC that has no ACLs and allows what no ACL covers (the default) costs one check per request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...acl.access import Access
from ...acl.model import AclSet, Authorizer, ResourceType, Subject
from ...management import acl_plane, plane
from ...protocol import codec
from ...protocol.apikey import ApiKey
from ...protocol.codec import CodecError
from ...protocol.primitives import MALFORMED
from ...tenancy import limits
from ...tenancy.fields import identifier_paths
from ...tenancy.model import KAFKA_CLUSTER
from ..exchange import Exchange, RequestDecision, ResponseMessage, answer, close, refusal, refuse
from ..physical_acls import PhysicalAuthorizer
from .context import ConnectionState
from .management import Caller, refuse_all

log = logging.getLogger(__name__)
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


class AuthorizationStage:
    def __init__(
        self,
        ctx: ConnectionState,
        caller: Caller,
        image: Callable[[], Any],
        allow_if_no_acl: Callable[[str], bool],
        host: str,
    ):
        self.ctx = ctx
        self.caller = caller
        self.image = image
        self.allow_if_no_acl = allow_if_no_acl  # vc name -> its `allow_everyone_if_no_acl_found`
        self.host = host
        # Each VC's choice, looked up again when the image changes (a VC's setting may have).
        self._allow: dict[str, tuple[tuple[int, int], bool]] = {}
        self._subject: tuple[tuple[int, int, str], Subject] | None = None  # (image, version, vc) -> who
        self._physical_authorizer: PhysicalAuthorizer | None = None  # kafka-cluster members the proxy authorizes

    def advertised(self) -> dict[int, tuple[int, int]]:
        """The management APIs this caller may use, for ApiVersions."""
        return {key: (0, 0) for key in plane.advertised(self.image(), self.caller.now())}

    def subject(self, vc: Any) -> Subject:
        """Super users inside a VC: the super-admins and whoever may alter the VC (its admins). Decided
        once per image version: the rights change only with a state record."""
        image = self.image()
        key = (id(image), image.version, vc.name)
        if self._subject is None or self._subject[0] != key:
            principal = self.ctx.principal or ""
            admin = self.caller.rights().vc_admin(principal, vc.name, self.host)
            self._subject = (key, Subject(principal, self.host, admin))
        return self._subject[1]

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        if self.ctx.relayed:  # the broker applies its own ACLs
            return None
        api = ex.spec
        assert api is not None
        if api.management:
            if ex.api_key in plane.advertised(self.image(), self.caller.now()):
                return None
            return refuse_all(ex, ErrorCode.cluster_authorization_failed, "not authorized to manage virtual clusters")
        vc = self.ctx.vc
        if vc is None:
            if self.ctx.place == KAFKA_CLUSTER and not self.caller.rights().is_super(self.ctx.principal):
                return self._physical(ex)
            return None  # a super-admin, or not bound yet (before login), or relayed: the broker judges
        if api.answered_by == "acls":
            return self._acls(ex, vc)
        need = api.acl_need
        if need is None:
            return None
        allow = self._allowed(vc.name)
        if allow and not vc.acls.by_type:
            return None  # an open VC without ACLs: nothing to check, nothing to fix on the way back
        who = self.subject(vc)
        ex.access = Access(Authorizer(vc.acls, allow), who, ex.api_key, ex.api_version, need, api.acl_listing)
        return None

    def _allowed(self, vc: str) -> bool:
        image = self.image()
        version = (id(image), image.version)
        cached = self._allow.get(vc)
        if cached is None or cached[0] != version:
            cached = self._allow[vc] = (version, self.allow_if_no_acl(vc))
        return cached[1]

    def _physical(self, ex: Exchange) -> RequestDecision | None:
        """A member of kafka-cluster whom the proxy authenticated: kafka-cluster's ACLs, as a broker would."""
        assert ex.header is not None and ex.frame is not None and ex.info is not None
        auth = self._physical_authorizer
        if auth is None:
            auth = self._physical_authorizer = PhysicalAuthorizer(self.ctx.principal or "", self.host, AclSet())
        auth.acls = self.image().cluster_acls
        try:
            verdict = auth.check(ex.api_key, ex.api_version, memoryview(ex.frame), ex.header.body_offset, ex.request)
        except (CodecError, *MALFORMED) as exc:
            return close(f"malformed {ex.info.name} request: {exc}")
        if verdict.error:
            return refuse(ex, verdict.error, f"{ex.info.name} in kafka-cluster: not authorized: {verdict.why}")
        if verdict.pieces is not None:
            ex.pieces = verdict.pieces
        if verdict.body is not None:
            ex.edit_request(verdict.body)
        if (
            verdict.fixes_response
            or verdict.filter_topics
            or ex.spec.acl_listing is not None
            or ex.api_key == ApiKey.CREATE_TOPICS
        ):
            ex.access = (auth, verdict)
        return None

    def _acls(self, ex: Exchange, vc: Any) -> RequestDecision:
        assert ex.header is not None and ex.frame is not None and ex.info is not None
        try:
            request, _ = codec.decode(type_of(ex), ex.frame, ex.header.body_offset)
        except (CodecError, *MALFORMED):
            return close(f"malformed {ex.info.name} request")
        room = limits.room(self.image(), vc.name)
        who = self.subject(vc)
        response, records = acl_plane.handle(vc.name, vc.acls, who, ex.api_key, ex.api_version, request, room)
        ex.writes = records
        if ex.api_key != ApiKey.DESCRIBE_ACLS:
            ex.decide = lambda: self._decide_acls(ex, vc.name, request)
        return answer(ex, codec.encode(response))

    def _decide_acls(self, ex: Exchange, name: str, request: Any) -> tuple[bytes, list[Any]]:
        """CreateAcls/DeleteAcls again, against the log's image: the VC's ACLs and the caller's rights now."""
        vc = self.image().vcs.get(name)
        if vc is None:  # deleted meanwhile
            return refusal(ex, ErrorCode.cluster_authorization_failed) or b"", []
        response, records = acl_plane.handle(vc.name, vc.acls, self.subject(vc), ex.api_key, ex.api_version, request)
        return codec.encode(response), list(records)

    def on_response(self, ex: Exchange, msg: ResponseMessage) -> None:
        access = ex.access
        if access is None:
            return
        if isinstance(access, tuple):  # a kafka-cluster member's request (proxy/core/physical_acls.py)
            auth, verdict = access
            body = msg.entity()
            if verdict.fixes_response:
                body = verdict.fix_response(body, identifier_paths(type(body)))
            if ex.spec.acl_listing is not None:
                body = auth.filter_listing(ex.spec.acl_listing, body)
            elif ex.api_key == ApiKey.CREATE_TOPICS:
                auth.learn(body.topics)
            elif verdict.filter_topics:
                body = auth.filter_topics(body, verdict.all_topics)
            msg.set_entity(body)
            return
        if access.any_denied or access.listing is not None:
            msg.set_entity(access.filter_listing(access.fix_response(msg.entity())))
        fix = ex.spec.authorized_operations
        if fix is not None:
            msg.set_entity(fix(access, msg.entity()))


def type_of(ex: Exchange) -> type:
    from ...protocol.apis import request_type

    return request_type(ex.api_key, ex.api_version)
