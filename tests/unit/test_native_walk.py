"""The compiled walker (vcproxy_native) against the pure-Python one, the reference: byte for byte.

For every request and response class of every API and version the catalogue knows, the same plan
(plans.py) runs on both backends: the strict validation kio's decode relies on, the lenient skips of
the layout walks, and the splice walks that rename fields. On valid bodies and on mutants of them
(truncated, flipped, huge counts, random tails) both give the same offset, the same edits, the same
calls of the translation, or the same exception with the same message.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import os
import pickle
import random
import typing
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.fetch.v13 import request as fetch13
from kio.static.primitive import i32

from benchmarks import fuzz_session
from proxy.protocol import codec, native, plans, splice, walker
from proxy.protocol.apis import request_type
from proxy.protocol.entities import unwrap
from proxy.protocol.primitives import read_uvarint

from .wire import every_schema

try:
    import vcproxy_native
except ImportError:  # CI builds it: missing there is a failure, not a skip
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("vcproxy_native is not built (make .venv/.installed-test builds it)", allow_module_level=True)


SCHEMAS = every_schema()


def _paths(cls: type, prefix: str = "") -> list[str]:
    """Every string or uuid field a splice can name: top-level, or through arrays of structs."""
    out = []
    for f in plans.regular_fields(cls):
        tp, _ = unwrap(f.type)
        if typing.get_origin(tp) is tuple:
            inner, _ = unwrap(typing.get_args(tp)[0])
            if dataclasses.is_dataclass(inner):
                out += _paths(inner, f"{prefix}{f.name}[].")  # type: ignore[arg-type]
        elif f.metadata.get("kafka_type") in ("string", "uuid"):
            out.append(prefix + f.name)
    return out


@functools.cache
def _backends(cls: type) -> dict[str, tuple]:
    """(pure, compiled) runners of each plan kind for `cls`."""
    check = plans.check_entity(cls)[0]
    skip = plans.skip_entity(cls)
    paths = frozenset((p, p) for p in _paths(cls))
    walk = plans.splice_entity(cls, paths)
    return {
        "validate": (walker.pure_checker(check), native.plan(check, vcproxy_native).validate),
        "skip": (walker.pure_skipper(skip), native.plan(skip, vcproxy_native).skip),
        "splice": (splice.pure_step(walk), native.plan(walk, vcproxy_native).splice),
    }


def _translate(calls: list) -> typing.Callable:
    """Renames some values (longer, shorter, equal) and records every call, in order."""

    def fn(kind: str, value: typing.Any) -> typing.Any:
        calls.append((kind, value))
        if isinstance(value, uuid.UUID):
            return value if value.int % 3 == 0 else uuid.UUID(int=value.int ^ 0xFF)
        match len(value) % 3:
            case 0:
                return value
            case 1:
                return f"0b6a2c31-0d34-4f2b-9a53-4f8f8f0a8f11.{value}"
            case _:
                return value[1:]

    return fn


def _outcome(run: typing.Callable, *args: object) -> object:
    try:
        return ("ok", run(*args))
    except Exception as exc:  # the same class and message on both sides is the claim
        return ("raised", type(exc), str(exc))


def _spliced(run: typing.Callable, view: bytes | memoryview) -> tuple:
    """What a splice walk gives: its outcome, its edits, the translation's calls, the frame it makes."""
    edits: list = []
    calls: list = []
    result = _outcome(run, view, 0, edits, _translate(calls))
    frame = len(view).to_bytes(4, "big") + bytes(view)
    spliced = b"".join(bytes(p) for p in splice.apply(frame, [(start + 4, end + 4, new) for start, end, new in edits]))
    return result, edits, calls, spliced


def _agree(cls: type, body: bytes) -> None:
    runners = _backends(cls)
    for view in (body, memoryview(bytearray(body))):
        pure, compiled = runners["validate"]
        assert _outcome(pure, view, 0, len(view)) == _outcome(compiled, view, 0, len(view)), cls
        pure, compiled = runners["skip"]
        assert _outcome(pure, view, 0) == _outcome(compiled, view, 0), cls
        pure, compiled = runners["splice"]
        assert _spliced(pure, view) == _spliced(compiled, view), cls


def _mutants(body: bytes, rng: random.Random, other: bytes, n: int) -> list[bytes]:
    frame = len(body).to_bytes(4, "big") + body
    return [fuzz_session.mutate(frame, rng, 0, other)[4:] for _ in range(n)]


def test_every_api_and_version_agrees_on_valid_bodies_and_their_mutants():
    rng = random.Random(1313)
    seen = 0
    for cls in SCHEMAS:
        bodies = [fuzz_session._body(cls, rng) for _ in range(3)]
        for body in bodies:
            _agree(cls, body)
            for mutant in _mutants(body, rng, bodies[0], 6):
                _agree(cls, mutant)
            seen += 1
    assert seen == 3 * len(SCHEMAS) > 1000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(SCHEMAS) - 1), seed=st.integers(0, 2**32), cuts=st.lists(st.integers(0, 4096)))
def test_generated_bodies_agree(index, seed, cuts):
    cls = SCHEMAS[index]
    rng = random.Random(seed)
    body = fuzz_session._body(cls, rng)
    _agree(cls, body)
    for cut in cuts:  # every prefix hypothesis picks: the short reads of each field
        _agree(cls, body[: cut % (len(body) + 1)])
    for mutant in _mutants(body, rng, fuzz_session._body(cls, rng), 4):
        _agree(cls, mutant)


@settings(max_examples=200, deadline=None)
@given(index=st.integers(0, len(SCHEMAS) - 1), raw=st.binary(max_size=256))
def test_arbitrary_bytes_agree(index, raw):
    _agree(SCHEMAS[index], raw)


def test_the_plans_in_use_are_the_compiled_ones():
    """Where it is built, the proxy's walks run compiled; the start log says which path is in use."""
    if not native.COMPILED:
        assert os.environ.get(native.PURE_ENV), native.REASON
        assert "pure-Python path" in native.describe()
        return
    assert "vcproxy_native" in native.describe()
    cls = request_type(0, 9)
    assert isinstance(walker.entity_validator(cls)[0].__self__, vcproxy_native.Plan)
    assert isinstance(walker.entity_skipper(cls).__self__, vcproxy_native.Plan)


def test_a_topic_id_read_by_the_compiled_splice_is_a_whole_uuid():
    """The compiled splice makes each id's UUID itself (not through UUID.__init__): it must be the UUID that
    UUID(bytes=...) makes, in every way the translation and the logs use one."""
    raw = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    body = codec.encode(
        fetch13.FetchRequest(
            max_wait=datetime.timedelta(0),
            min_bytes=i32(1),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(fetch13.FetchTopic(topic_id=raw, partitions=()),),
            forgotten_topics_data=(),
            rack_id="",
        )
    )
    seen: list = []
    walk = native.plan(plans.splice_entity(fetch13.FetchRequest, frozenset({("topics[].topic_id", "topic_id")})))
    walk.splice(body, 0, [], lambda kind, value: seen.append(value) or value)
    (made,) = seen
    assert type(made) is uuid.UUID and made == raw and hash(made) == hash(raw) and str(made) == str(raw)
    assert made.is_safe is uuid.SafeUUID.unknown and made.bytes == raw.bytes
    assert pickle.loads(pickle.dumps(made)) == raw
    with pytest.raises(TypeError):
        made.int = 0  # still immutable


def test_a_hostile_count_is_refused_before_any_walk():
    """A Metadata v12 request claiming 2^32-2 topics in 5 bytes: both refuse it with the same words."""
    cls = request_type(3, 12)
    body = b"\xff\xff\xff\xff\x0f" + b"\x00" * 4
    pure, compiled = _backends(cls)["validate"]
    with pytest.raises(walker.MalformedError, match="cannot fit") as expected:
        pure(body, 0, len(body))
    with pytest.raises(walker.MalformedError, match="cannot fit") as got:
        compiled(body, 0, len(body))
    assert str(expected.value) == str(got.value)


@pytest.mark.parametrize("pure", [False, True])
def test_serve_says_once_at_start_which_path_walks(pure, tmp_path):
    """`vcproxy serve` names the path in its first lines, once: compiled (INFO), or pure and why (WARNING)."""
    import socket
    import subprocess
    import sys
    import time

    import yaml

    from vcproxy_tools.process import proxy_config

    config = tmp_path / "config.yaml"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    config.write_text(yaml.safe_dump(proxy_config("127.0.0.1:1", port)))  # no broker there: it waits for one
    env = {**os.environ, native.PURE_ENV: "1" if pure else ""}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--config", str(config)], stderr=out, env=env)
    try:
        deadline = time.monotonic() + 60
        while "walker" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(30)
    lines = [line for line in log.read_text().splitlines() if "walker" in line]
    expected = (
        "WARNING proxy.serve: compiled walker not in use"
        if pure
        else "INFO proxy.serve: compiled walker: vcproxy_native"
    )
    assert len(lines) == 1 and expected in lines[0], lines


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=8))
def test_the_empty_list_check_agrees_and_stops_at_a_list_that_is_not(raw):
    """("empty",) (the forwarder's check of KIP-932's node_endpoints, plans.but_last_empty): a compact array skipped
    when it is empty or null, else the walk stops at its count, which is not zero; compiled and pure alike."""
    node = ("struct", False, (("fixed", 2), ("empty",)))
    pure, compiled = walker.pure_skipper(node), native.plan(node, vcproxy_native).skip
    assert _outcome(pure, raw, 0) == _outcome(compiled, raw, 0)
    outcome = _outcome(pure, raw, 0)
    if outcome[0] == "ok":
        count, after = read_uvarint(raw, 2)
        assert outcome[1] == (after if count <= 1 else 2)
        assert count <= 1 or raw[outcome[1]] != 0  # the tagged-section check then sends it to the session
