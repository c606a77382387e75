"""Broker endpoints in responses point at the proxy (proxy/core/endpoints.py): the last stage, so its
edits come after every other (a decoded body is edited once, when it is encoded)."""

from __future__ import annotations

from ...protocol.apikey import ApiKey
from ..endpoints import BrokerEndpoint, EndpointRewriter, rules_for
from ..exchange import Exchange, RequestDecision, ResponseMessage


class EndpointStage:
    def __init__(self, rewriter: EndpointRewriter):
        self.rewriter = rewriter

    def on_request(self, ex: Exchange) -> RequestDecision | None:
        rule = rules_for(ex.api_key, ex.api_version)
        ex.endpoint_rule = None if rule is None or rule.mode == "keep" else rule
        return None

    def on_response(self, ex: Exchange, msg: ResponseMessage) -> None:
        rule = ex.endpoint_rule
        if rule is None:
            return
        msg.full_broker_list = ex.api_key == ApiKey.METADATA
        if rule.mode == "splice":
            pieces, msg.brokers = self.rewriter.rewrite_body(
                rule, ex.api_key, ex.api_version, msg.frame, msg.body_offset
            )  # type: ignore[arg-type]
            msg.replace(pieces)
            return
        seen: list[BrokerEndpoint] = []
        msg.brokers = seen  # filled when the body is encoded
        msg.post.append(lambda body: self.rewriter.rewrite_entity(rule, body, seen))
