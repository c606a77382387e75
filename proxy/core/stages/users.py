"""The proxy's users at runtime: AlterUserScramCredentials and DescribeUserScramCredentials from the
proxy's own principals are answered here (proxy/management/users.py decides; the shell writes the state
records before the answer leaves: an alteration is decided again against the log, one replica at a time,
docs/security.md#the-write-protocol). A relayed principal's go to the broker, which owns its users; a VC
member who may not manage its VC's users is refused by the tenancy stage as before; a member of
`kafka-cluster` has passed kafka-cluster's ACLs (ALTER or DESCRIBE on the cluster) in the authorization
stage, as on a broker."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ... import audit
from ...management import users
from ...protocol import codec
from ...protocol.apikey import ApiKey
from ...protocol.apis import request_type
from ...protocol.codec import CodecError
from ...protocol.primitives import MALFORMED
from ...tenancy.model import KAFKA_CLUSTER
from ..exchange import Exchange, RequestDecision, answer, close, refusal
from .context import ConnectionState
from .management import Caller


class UsersStage:
    def __init__(self, ctx: ConnectionState, caller: Caller, upstream_user: str | None, relays_unknown: bool):
        self.ctx = ctx
        self.caller = caller
        self.upstream_user = upstream_user
        self.relays_unknown = relays_unknown

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        api = ex.spec
        if api is None or api.answered_by != "users" or self.ctx.relayed:
            return None
        scope = self._scope()
        if scope is None:
            return None
        assert ex.header is not None and ex.frame is not None
        try:
            request, _ = codec.decode(request_type(ex.api_key, ex.api_version), ex.frame, ex.header.body_offset)
        except (CodecError, *MALFORMED):
            return close(f"malformed {api.name} request")
        image = self.caller.image()
        if ex.api_key == ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS:
            return answer(ex, codec.encode(users.describe(image, scope, request)))
        (response, records), ex.audit = audit.collect(lambda: users.alter(image, scope, request))
        ex.writes = list(records)
        ex.decide = lambda: self._decide(ex, request)
        return answer(ex, codec.encode(response))

    def _decide(self, ex: Exchange, request: Any) -> tuple[bytes, list[Any]]:
        """The alteration again, against the image the shell brought up to the log's end: who may alter
        whom, and who exists where, as they stand now."""
        scope = self._scope()
        if scope is None:  # the caller lost the right meanwhile
            return refusal(ex, ErrorCode.cluster_authorization_failed) or b"", []
        response, records = users.alter(self.caller.image(), scope, request)
        return codec.encode(response), list(records)

    def _scope(self) -> users.Scope | None:
        """Cluster-wide for kafka-cluster's members; a VC's users for those who may alter their VC."""
        ctx = self.ctx
        if ctx.place == KAFKA_CLUSTER:
            return users.Scope(self.caller.now(), None, self.upstream_user, self.relays_unknown)
        vc = ctx.vc
        if vc is not None and self.caller.rights().vc_admin(ctx.principal, vc.name, self.caller.host):
            return users.Scope(self.caller.now(), vc.name, self.upstream_user, self.relays_unknown)
        return None
