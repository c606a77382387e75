from proxy.protocol.apis import api_info, known_apis
from proxy.protocol.headers import (
    encode_request_header,
    parse_request_header,
    peek_request,
    response_body_offset,
)


def test_request_header_v2_roundtrip_with_tagged_section():
    raw = b"\x00\x00\x00\x00" + encode_request_header(3, 12, 77, "client-1", 2) + b"BODY"
    h = parse_request_header(raw, 2)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 12, 77, "client-1")
    assert raw[h.body_offset :] == b"BODY"
    assert peek_request(raw) == (3, 12, 77)


def test_request_header_v1_null_client_id():
    raw = b"\x00\x00\x00\x00" + encode_request_header(0, 8, 5, None, 1) + b"B"
    h = parse_request_header(raw, 1)
    assert h.client_id is None and raw[h.body_offset :] == b"B"


def test_header_versions_follow_flexible_versions():
    metadata = api_info(3)
    assert metadata.request_header_version(8) == 1 and metadata.request_header_version(9) == 2
    assert metadata.response_header_version(8) == 0 and metadata.response_header_version(9) == 1
    # ApiVersions responses always use header v0, even for flexible versions (KIP-511).
    assert api_info(18).response_header_version(3) == 0
    assert api_info(18).request_header_version(3) == 2


def test_response_body_offset_skips_tagged_header():
    raw = b"\x00\x00\x00\x09" + b"\x00\x00\x00\x01" + b"\x00" + b"BODY"
    assert raw[response_body_offset(raw, 1) :] == b"BODY"
    assert raw[response_body_offset(raw, 0) :] == b"\x00BODY"


def test_known_apis_cover_kafka_4_client_apis():
    apis = known_apis()
    for key in (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 20, 22, 60, 68, 78, 79):
        assert key in apis
    assert apis[0].max_version >= 13 and apis[1].max_version >= 18
