"""The golden cases of golden/tenant.yaml through the sans-I/O session (see the file for the format)."""

from __future__ import annotations

import dataclasses
import re
import typing
import uuid
from pathlib import Path
from types import NoneType, UnionType
from typing import Any

import pytest
import yaml

from proxy.core.session import Action
from proxy.protocol import codec
from proxy.protocol.apis import api_info, request_type, response_type
from proxy.protocol.headers import parse_request_header, response_body_offset

from .test_tenant_rewrite import make_image, tenant_session
from .wire import request_frame, response_frame

CASES = yaml.safe_load((Path(__file__).parent / "golden" / "tenant.yaml").read_text())
_PLACEHOLDER = re.compile(r"\{(phys|prefix):([^}:]+)(?::([^}]+))?\}")


def _bare(tp: Any) -> Any:
    if typing.get_origin(tp) in (UnionType, typing.Union):
        return next(a for a in typing.get_args(tp) if a is not NoneType)
    return tp


def build(cls: type, data: dict[str, Any]) -> Any:
    """An entity of `cls` with the given fields (nested dicts and lists too), the rest empty."""
    hints = typing.get_type_hints(cls)
    values = {}
    for name, value in data.items():
        tp = _bare(hints[name])
        if typing.get_origin(tp) is tuple:
            inner = _bare(typing.get_args(tp)[0])
            values[name] = tuple(
                build(inner, v) if dataclasses.is_dataclass(inner) else _scalar(inner, v) for v in value
            )
        elif dataclasses.is_dataclass(tp):
            values[name] = build(tp, value)
        else:
            values[name] = _scalar(tp, value)
    return dataclasses.replace(codec._empty(cls), **values)


def _scalar(tp: Any, value: Any) -> Any:
    if tp is uuid.UUID or getattr(tp, "__supertype__", None) is uuid.UUID:
        return uuid.UUID(value)
    return tp(value) if isinstance(tp, type) else value


def matches(entity: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        return all(matches(getattr(entity, k), v) for k, v in expected.items())
    if isinstance(expected, list):
        return len(entity) == len(expected) and all(matches(e, x) for e, x in zip(entity, expected, strict=True))
    if isinstance(entity, uuid.UUID):
        return entity == uuid.UUID(expected)
    return entity == expected


def resolve(data: Any, image: Any, physical: dict[str, str]) -> Any:
    if isinstance(data, dict):
        return {k: resolve(v, image, physical) for k, v in data.items()}
    if isinstance(data, list):
        return [resolve(v, image, physical) for v in data]
    if isinstance(data, str):

        def sub(m: re.Match[str]) -> str:
            kind, vc, link = m.groups()
            return image.vcs[vc].links[link] if kind == "phys" else image.vcs[vc].prefix

        return _PLACEHOLDER.sub(sub, data)
    return data


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden(case: dict[str, Any]) -> None:
    image, physical = make_image()
    case = resolve(case, image, physical)
    api, version = case["api"], case["version"]
    session = tenant_session(image)
    request = build(request_type(api, version), case["request"])
    decision = session.on_request(memoryview(bytearray(request_frame(api, version, 7, request))))
    if "local" in case:
        assert decision.action is Action.LOCAL
        reply = session.next_local_reply()
        assert reply is not None and reply.reply is not None
        offset = response_body_offset(reply.reply, api_info(api).response_header_version(version))
        body, _ = codec.decode(response_type(api, version), reply.reply, offset)
        assert matches(body, case["local"]), body
        return
    assert decision.action is Action.FORWARD
    sent = b"".join(bytes(p) for p in decision.pieces) if decision.pieces else bytes(decision.frame or b"")
    if decision.pieces is None and decision.frame is None:
        sent = request_frame(api, version, 7, request)
    offset = parse_request_header(sent, api_info(api).request_header_version(version)).body_offset
    upstream, _ = codec.decode(request_type(api, version), sent, offset)
    if "upstream" in case:
        assert matches(upstream, case["upstream"]), upstream
    if "upstream_not" in case:
        assert not matches(upstream, case["upstream_not"]), upstream
    if "response" in case:
        response = build(response_type(api, version), case["response"])
        result = session.on_response(memoryview(bytearray(response_frame(api, version, 7, response))))
        frame = b"".join(bytes(p) for p in result.pieces)
        got, _ = codec.decode(
            response_type(api, version),
            frame,
            response_body_offset(frame, api_info(api).response_header_version(version)),
        )
        assert matches(got, case["client"]), got
