"""Hostile bytes (issue 8, classes 1 and 2): a bounded run of the session fuzz target, and the named cases.

Every malformed frame must end as a clean protocol error for its connection (CLOSE or
ProtocolViolation, or the API's error code), never an internal error and never an abort.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from benchmarks import fuzz_session
from proxy.core.session import Action, ProtocolViolation, ProxySession
from proxy.protocol import codec, walker
from proxy.protocol.apis import request_type
from proxy.protocol.headers import encode_request_header

from .wire import every_schema, request_frame

ROOT = Path(__file__).resolve().parents[2]
# Metadata v12 whose compact topics array claims 2^32-2 entries, then the two booleans: 7 bytes.
METADATA_V12_HUGE = b"\xff\xff\xff\xff\x0f\x01\x01"


def plain() -> ProxySession:
    return fuzz_session.SESSIONS["plain"]()


def tenant() -> ProxySession:
    return fuzz_session.SESSIONS["tenant"]()


def outcome(session: ProxySession, frame: bytes) -> str:
    """'close' for a clean protocol error; other exceptions propagate (and fail the test)."""
    try:
        decision = session.on_request(memoryview(frame))
    except ProtocolViolation:
        return "close"
    return "close" if decision.action is Action.CLOSE else decision.action.value


# -- the validator agrees with kio on valid bodies -----------------------------------------------------


def test_validator_accepts_every_valid_body_of_every_api_and_version():
    rng = random.Random(7)
    for cls in every_schema():
        for _ in range(3):
            body = codec.encode(fuzz_session.generate(cls, rng))
            assert walker.validate(cls, body, 0) == len(body), cls
            codec.decode(cls, body)  # kio reads what the validator let through


def test_counts_and_lengths_past_the_frame_are_refused_before_kio():
    cls = request_type(3, 12)
    with pytest.raises(codec.CodecError, match="cannot fit"):
        codec.decode(cls, METADATA_V12_HUGE)
    # A string whose length runs past the frame, a null where the schema allows none.
    with pytest.raises(codec.CodecError, match="past end"):
        codec.decode(request_type(19, 7), b"\x02\x7f" + b"n" * 20)
    with pytest.raises(codec.CodecError, match="null array"):
        codec.decode(request_type(19, 7), b"\x00\x00\x00\x00\x00\x00\x00")


# -- the examples the issue names ----------------------------------------------------------------------


@pytest.mark.parametrize("make", [plain, tenant])
def test_metadata_v12_with_a_huge_topics_count_is_a_protocol_error(make):
    session = make()
    result = outcome(session, request_frame(3, 12, 1, METADATA_V12_HUGE))
    # The tenant path decodes the request: refused. The plain path forwards requests untouched.
    assert result == ("close" if make is tenant else "forward")


def test_broker_response_with_a_huge_count_is_a_protocol_violation():
    session = plain()
    decision = session.on_request(memoryview(request_frame(3, 12, 5, b"\x01\x01\x01\x00")))
    assert decision.action is Action.FORWARD
    # Metadata v12 response: header v1 (correlation id, tags), throttle, brokers array of 2^32-2.
    payload = (5).to_bytes(4, "big") + b"\x00" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff\x0f"
    with pytest.raises(ProtocolViolation, match="cannot fit"):
        session.on_response(memoryview(len(payload).to_bytes(4, "big") + payload))


def test_the_abort_case_leaves_the_process_alive():
    """Before the fix this ended the interpreter with a Rust abort: run it where that would show."""
    script = textwrap.dedent(
        f"""
        from benchmarks import fuzz_session
        from tests.unit.wire import request_frame
        session = fuzz_session.SESSIONS["tenant"]()
        decision = session.on_request(memoryview(request_frame(3, 12, 1, {METADATA_V12_HUGE!r})))
        print("alive", decision.action.value)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["alive", "close"]


def _raw_request(api_key: int, version: int, client_id: bytes, body: bytes, header_version: int = 2) -> bytes:
    head = encode_request_header(api_key, version, 1, None, header_version)[:8]
    payload = head + len(client_id).to_bytes(2, "big") + client_id + (b"\x00" if header_version >= 2 else b"") + body
    return len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize("make", [plain, tenant])
def test_header_with_bad_utf8_client_id_is_a_protocol_error(make):
    assert outcome(make(), _raw_request(3, 12, b"\xff\xfe", b"\x01\x01\x01\x00")) == "close"


def test_bad_client_id_on_a_later_request_is_a_protocol_error():
    # (A plain session reads only the first request's header: later ones go to the broker untouched.)
    session = tenant()
    assert outcome(session, request_frame(3, 12, 1, b"\x01\x01\x01\x00")) == "forward"
    assert outcome(session, _raw_request(3, 12, b"\xc3", b"\x01\x01\x01\x00")) == "close"


@pytest.mark.parametrize("make", [plain, tenant])
def test_truncated_header_is_a_protocol_error(make):
    frame = _raw_request(3, 12, b"client", b"")
    cut = frame[:14]  # in the middle of the client id
    assert outcome(make(), len(cut[4:]).to_bytes(4, "big") + cut[4:]) == "close"
    short = b"\x00\x03\x00"  # shorter than api key, version and correlation id
    assert outcome(make(), len(short).to_bytes(4, "big") + short) == "close"


def test_null_array_where_the_schema_forbids_one_is_a_protocol_error():
    # CreateTopics v7: topics is not nullable; compact length 0 means null.
    assert outcome(tenant(), request_frame(19, 7, 1, b"\x00\x00\x00\x75\x30\x00\x00")) == "close"


def test_produce_v8_with_a_32767_byte_topic_name_is_a_protocol_error():
    name = b"y" * 32767
    partition = (0).to_bytes(4, "big") + (0).to_bytes(4, "big")  # index 0, null-ish empty records
    topic = len(name).to_bytes(2, "big") + name + (1).to_bytes(4, "big") + partition
    body = b"\xff\xff" + b"\xff\xff" + (30000).to_bytes(4, "big") + (1).to_bytes(4, "big") + topic
    assert outcome(tenant(), request_frame(0, 8, 1, body)) == "close"


def test_api_versions_with_a_negative_version_gets_the_v0_error_answer():
    session = plain()
    frame = _raw_request(18, 0, b"c", b"", header_version=1)
    frame = frame[:6] + (-3).to_bytes(2, "big", signed=True) + frame[8:]
    decision = session.on_request(memoryview(frame))
    assert decision.action is Action.LOCAL
    assert decision.pending is not None and decision.pending.reply is not None
    reply = decision.pending.reply
    assert int.from_bytes(reply[8:10], "big") == ErrorCode.unsupported_version  # v0 body opens with the error code


# -- a bounded run of the fuzz target ------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 20261123])
def test_fuzz_session_bounded_run(seed):
    stats = fuzz_session.run(seed, 1500)
    assert stats.frames >= 1500
    assert stats.closed > 0  # the mutants did reach the error paths
    assert stats.responses > 0


def test_create_topics_v4_with_a_32767_byte_name_is_a_protocol_error():
    """The local answer quotes the name in its message: too long for a classic string, so the
    connection closes instead of the encoder failing (found by the fuzz target, seed 20261123)."""
    cls = request_type(19, 4)
    topic_cls = typing.get_args(typing.get_type_hints(cls)["topics"])[0]
    topic = codec._empty(topic_cls, name="y" * 32767, num_partitions=1, replication_factor=1)
    body = codec.encode(codec._empty(cls, topics=(topic,)))
    assert outcome(tenant(), request_frame(19, 4, 1, body)) == "close"
