"""Broker endpoints in responses point at the proxy (proxy/core/endpoints.py): the last stage, so its
edits come after every other (a decoded body is edited once, when it is encoded)."""

from __future__ import annotations

from typing import Any

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
        if rule.mode == "splice" and self.rewriter.nothing_to_splice(
            rule, ex.api_key, ex.api_version, msg.received, msg.body_offset
        ):
            # Decided on the answer as received: no stage after this one adds a tagged field.
            return
        msg.full_broker_list = ex.api_key == ApiKey.METADATA
        seen: list[BrokerEndpoint] = []
        msg.brokers = seen  # filled when the body is spliced or encoded

        def entity_edit(body: Any) -> Any:
            return self.rewriter.rewrite_entity(rule, body, seen)

        if rule.mode == "splice":  # spliced unless another stage decodes the body anyway (then edited there)
            api_key, version = ex.api_key, ex.api_version
            msg.deferred.append(
                (
                    lambda frame, offset: self.rewriter.splice_edits(rule, api_key, version, frame, offset, seen),
                    entity_edit,
                )
            )
            return
        msg.post.append(entity_edit)
