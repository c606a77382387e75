"""Refusals in each API's own shape, as a broker answers a caller it does not authorize."""

from __future__ import annotations

from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.describe_user_scram_credentials.v0.response import DescribeUserScramCredentialsResponse

from proxy.core.exchange import Action, Exchange, refuse
from proxy.protocol import codec
from proxy.protocol.apis import api_info
from proxy.protocol.headers import parse_request_header, response_body_offset

from .wire import request_frame


def _refused(request: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    info = api_info(50)
    assert info is not None
    frame = request_frame(50, 0, 7, request)
    ex = Exchange(50, 0, 7, info.response_header_version(0), info=info, frame=frame)
    ex.header = parse_request_header(frame, info.request_header_version(0))
    decision = refuse(ex, 31, "test")
    assert decision.action is Action.LOCAL and ex.reply is not None
    body, _ = codec.decode(DescribeUserScramCredentialsResponse, ex.reply, response_body_offset(ex.reply, 1))
    return body


def test_describe_user_scram_credentials_is_refused_per_user_as_kafka_does():
    """Kafka 4.2 answers a caller without DESCRIBE on the cluster with the error at the top and once per
    asked user (name left empty)."""
    body = _refused(DescribeUserScramCredentialsRequest(users=(UserName(name="alice"), UserName(name="nobody"))))
    assert int(body.error_code) == 31
    assert [(r.user, int(r.error_code), r.error_message, r.credential_infos) for r in body.results] == [
        ("", 31, None, ()),
        ("", 31, None, ()),
    ]


def test_describe_all_user_scram_credentials_is_refused_at_the_top():
    for users in (None, ()):
        body = _refused(DescribeUserScramCredentialsRequest(users=users))
        assert int(body.error_code) == 31 and body.results == ()
