"""Fuzz the sans-I/O ProxySession with generated and mutated frames, in both directions.

Every API and version the proxy knows is generated (random field values, encoded by kio), then
mutated: length fields set to huge or negative values, truncation, bit flips, random bytes after a
valid header, and frames spliced together. Requests go to `on_request`; each forwarded request gets
a generated (often mutated) broker response through `on_response`. Sessions: plain proxy, a tenant
bound to a virtual cluster, a tenant behind an authenticated listener, and a SASL listener before
login. The only acceptable outcomes are an answer, a CLOSE decision or `ProtocolViolation`; any other
exception, or an ERROR log line, is an internal error. Batches run in subprocesses, so an abort in
native code (kio) is a failure with the seed to reproduce it, not a silent end.

Run: .venv/bin/python benchmarks/fuzz_session.py --frames 1000000 [--seed N] [--batch 100000]
Reproduce one batch: .venv/bin/python benchmarks/fuzz_session.py --worker --seed N --frames M
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import enum
import functools
import json
import logging
import os
import random
import resource
import subprocess
import sys
import time
import traceback
import typing
import uuid
from collections.abc import Callable
from types import NoneType, UnionType
from typing import Any

from proxy.auth.credentials import CredentialStore, make_entry
from proxy.auth.sasl import Preauthenticated, SaslServer
from proxy.core.endpoints import ListenerLayout
from proxy.core.session import Action, ProtocolViolation, ProxySession
from proxy.protocol import codec, kip1313
from proxy.protocol.apis import api_info, known_apis, request_type, response_type
from proxy.protocol.headers import encode_request_header, encode_response_header
from proxy.tenancy.engine import Policy
from proxy.tenancy.model import TenancyImage, link_record, principal_record, topic_record, vc_record

LAYOUT = ListenerLayout("127.0.0.1", 9192, 9193)
TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")
INSTANCE_ID = uuid.UUID("66666666-7777-8888-9999-000000000000").bytes  # a client's KIP-1313 instance id
STRINGS = ("orders", "t", "", "__consumer_offsets", "a.b", "a_b", "group-1", "é☃", "x" * 300, "orders.x")
HUGE = (b"\xfe\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00")
HUGE += (b"\x7f\xff", b"\xff\xff", b"\x00", b"\x80\x80\x80\x80\x80\x01", b"\x01")
MIB = 1024 * 1024


# -- sessions --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Tenancy:
    image: TenancyImage
    policy: Policy = dataclasses.field(default_factory=Policy)
    refuse_unbound: bool = False


@functools.cache
def tenancy_image() -> TenancyImage:
    image = TenancyImage()
    for i, vc in enumerate(("team-a", "team-b")):
        image.apply(*vc_record(vc))
        image.apply(*principal_record(f"User:{vc}-user", vc))
        physical = f"{uuid.UUID(int=i + 1)}.orders"
        image.apply(*link_record(vc, "orders", physical))
        image.apply(*topic_record(physical, TOPIC_ID if i == 0 else uuid.UUID(int=99)))
    return image


@functools.cache
def credential_store() -> CredentialStore:
    return CredentialStore.from_mapping({"alice": make_entry("alice-secret", 4096)})


SESSIONS: dict[str, Callable[[], ProxySession]] = {
    "plain": lambda: ProxySession(LAYOUT),
    "tenant": lambda: ProxySession(LAYOUT, tenancy=Tenancy(tenancy_image()), principal="User:team-a-user"),
    "sasl-tenant": lambda: ProxySession(
        LAYOUT, Preauthenticated("User:team-b-user"), tenancy=Tenancy(tenancy_image(), refuse_unbound=True)
    ),
    "sasl-login": lambda: ProxySession(LAYOUT, SaslServer(credential_store(), ["PLAIN", "SCRAM-SHA-256"])),
}


# -- generated messages ----------------------------------------------------------------------------


def _strip(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (UnionType, typing.Union):
        return next(a for a in typing.get_args(tp) if a is not NoneType), True
    return tp, False


@functools.cache
def _plan(cls: type) -> list[tuple[str, Any, str | None]]:
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name], f.metadata.get("kafka_type")) for f in dataclasses.fields(cls)]


@functools.cache
def _members(tp: type[enum.Enum]) -> tuple[enum.Enum, ...]:
    return tuple(tp)


def _int(rng: random.Random, bits: int) -> int:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return rng.choice((0, 1, -1, rng.randint(0, 100), rng.randint(low, high), low, high))


def _scalar(tp: Any, kafka_type: str | None, rng: random.Random) -> Any:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return rng.choice(_members(tp))
    match kafka_type:
        case "bool":
            return rng.random() < 0.5
        case "int8" | "int16" | "int32" | "int64":
            return tp(_int(rng, int(kafka_type[3:])))
        case "uint16":
            return tp(rng.randint(0, 65535))
        case "float64":
            return tp(rng.random())
        case "timedelta_i32" | "timedelta_i64":
            return datetime.timedelta(milliseconds=rng.randint(0, 100_000))
        case "datetime_i64":
            return datetime.datetime.fromtimestamp(rng.randint(0, 2_000_000_000), datetime.UTC)
        case "uuid":
            return rng.choice((TOPIC_ID, uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))))
        case "string":
            if rng.random() < 0.002:
                return "y" * 32767  # the longest name a classic string holds: one more prefix byte breaks it
            text = rng.choice(STRINGS) if rng.random() < 0.8 else "".join(rng.choices("ab.-_xyz", k=rng.randint(0, 30)))
            return tp(text) if isinstance(tp, type) and tp is not str else text
        case "bytes" | "records":
            return rng.randbytes(rng.choice((0, 1, 8, 61, 200)))
    raise ValueError(f"cannot generate {kafka_type!r}")


def generate(cls: type, rng: random.Random, depth: int = 0) -> Any:
    kwargs = {}
    for name, hint, kafka_type in _plan(cls):
        tp, nullable = _strip(hint)
        if nullable and rng.random() < 0.1:
            kwargs[name] = None
        elif typing.get_origin(tp) is tuple:
            inner, _ = _strip(typing.get_args(tp)[0])
            count = 0 if depth > 4 else rng.choice((0, 1, 1, 2, 3))
            if dataclasses.is_dataclass(inner):
                kwargs[name] = tuple(generate(inner, rng, depth + 1) for _ in range(count))  # type: ignore[arg-type]
            else:
                kwargs[name] = tuple(_scalar(inner, kafka_type, rng) for _ in range(count))
        elif dataclasses.is_dataclass(tp):
            kwargs[name] = generate(tp, rng, depth + 1)  # type: ignore[arg-type]
        else:
            kwargs[name] = _scalar(tp, kafka_type, rng)
    return cls(**kwargs)


def _body(cls: type, rng: random.Random) -> bytes:
    try:
        return codec.encode(generate(cls, rng))
    except codec.CodecError:  # a value kio's writer refuses (e.g. a string too long for its prefix)
        return codec.encode(codec._empty(cls))


def request_frame(api_key: int, version: int, correlation_id: int, rng: random.Random) -> bytes:
    info = api_info(api_key)
    assert info is not None
    client_id = rng.choice(("c", None, "é", "x" * 100))
    if kip1313.uses_header_v3(info, version):  # KIP-1313: the body of the version before, header v3
        instance = rng.choice((INSTANCE_ID, INSTANCE_ID, kip1313.ZERO, rng.randbytes(16)))
        header = kip1313.encode_header_v3(api_key, version, correlation_id, client_id, instance)
        payload = header + _body(request_type(api_key, info.max_version), rng)
        return len(payload).to_bytes(4, "big") + payload
    header = encode_request_header(api_key, version, correlation_id, client_id, info.request_header_version(version))
    payload = header + _body(request_type(api_key, version), rng)
    return len(payload).to_bytes(4, "big") + payload


def response_frame(api_key: int, version: int, correlation_id: int, rng: random.Random) -> bytes:
    info = api_info(api_key)
    assert info is not None
    header = encode_response_header(correlation_id, info.response_header_version(version))
    payload = header + _body(response_type(api_key, version), rng)
    return len(payload).to_bytes(4, "big") + payload


# -- mutations -------------------------------------------------------------------------------------


def mutate(frame: bytes, rng: random.Random, keep: int, other: bytes) -> bytes:
    """A mutant of `frame`, its first `keep` bytes of payload (api key, version, correlation id) mostly
    kept; the size prefix always matches, as the framing layer guarantees."""
    body = bytearray(frame[4:])
    start = keep if rng.random() < 0.9 else 0
    size = len(body)
    kind = rng.randrange(6)
    if kind == 0 and size > start:  # a length or count set to a huge or negative value
        at = rng.randrange(start, size)
        huge = rng.choice(HUGE)
        body[at : at + len(huge)] = huge
    elif kind == 1:  # truncation
        del body[rng.randint(0, size) :]
    elif kind == 2 and size:  # bit flips
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(size)
            body[at] ^= 1 << rng.randrange(8)
    elif kind == 3:  # random bytes after a valid header
        del body[min(size, start + rng.randint(0, 16)) :]
        body += rng.randbytes(rng.randint(0, 64))
    elif kind == 4:  # spliced frames
        cut = rng.randint(start, max(start, size))
        body = body[:cut] + other[4 + rng.randint(0, max(0, len(other) - 4)) :]
    else:  # bytes inserted or deleted
        at = rng.randint(min(start, size), size)
        if rng.random() < 0.5:
            body[at:at] = rng.randbytes(rng.randint(1, 8))
        else:
            del body[at : at + rng.randint(1, 8)]
    return len(body).to_bytes(4, "big") + bytes(body)


# -- the run ---------------------------------------------------------------------------------------


class InternalError(Exception):
    """An outcome other than an answer, CLOSE or ProtocolViolation."""


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclasses.dataclass
class Stats:
    seed: int
    frames: int = 0
    requests: int = 0
    responses: int = 0
    closed: int = 0  # connections ended by CLOSE or ProtocolViolation
    seconds: float = 0.0
    rss_start: float = 0.0  # after the warm-up (first tenth)
    rss_end: float = 0.0
    peak_start: float = 0.0
    peak_end: float = 0.0


def _api_versions() -> list[tuple[int, int]]:
    """Every version kio knows, plus each API's KIP-1313 header-v3 version."""
    out = []
    for key, info in sorted(known_apis().items()):
        out += [(key, v) for v in range(info.min_version, info.max_version + 1)]
        if kip1313.header_v3_version(info) is not None:
            out.append((key, info.max_version + 1))
    return out


def run(seed: int, frames: int, configs: tuple[str, ...] = tuple(SESSIONS)) -> Stats:
    """Feed `frames` frames; raises InternalError (with what reproduces it) on anything but a clean outcome."""
    rng = random.Random(seed)
    apis = _api_versions()
    errors = _ErrorLog()
    logging.getLogger("proxy").addHandler(errors)
    stats = Stats(seed)
    pool: list[bytes] = [request_frame(18, 3, 0, rng)]
    config = rng.choice(configs)
    session = SESSIONS[config]()
    correlation = 0
    began = time.perf_counter()
    stats.peak_start = peak_rss_mib()
    warm = frames // 10
    try:
        while stats.frames < frames:
            if stats.frames >= warm and not stats.rss_start:
                stats.rss_start, stats.peak_start = rss_mib(), peak_rss_mib()
            correlation += 1
            if config == "sasl-login" and rng.random() < 0.6:
                key, version = rng.choice(((17, rng.randint(0, 1)), (36, rng.randint(0, 2)), (18, 3)))
            else:
                key, version = rng.choice(apis)
            frame = request_frame(key, version, correlation, rng)
            if rng.random() < 0.7:
                frame = mutate(frame, rng, 8, rng.choice(pool))
            if len(pool) < 256:
                pool.append(frame)
            else:
                pool[rng.randrange(256)] = frame
            stats.frames += 1
            stats.requests += 1
            closed = _request(session, frame, config)
            if not closed:
                closed, sent = _responses(session, rng, pool)
                stats.frames += sent
                stats.responses += sent
            if errors.records:
                record = errors.records[0]
                raise InternalError(f"ERROR logged: {record.getMessage()}\n{_exc_text(record)}")
            if closed or rng.random() < 0.01:  # a new connection
                stats.closed += closed
                config = rng.choice(configs)
                session = SESSIONS[config]()
    except InternalError as exc:
        raise InternalError(f"seed {seed}, frame {stats.frames}, session {config}: {exc}") from None
    finally:
        logging.getLogger("proxy").removeHandler(errors)
    stats.seconds = time.perf_counter() - began
    stats.rss_end, stats.peak_end = rss_mib(), peak_rss_mib()
    return stats


def _hex(frame: bytes) -> str:
    text = frame.hex()
    return text if len(text) <= 4000 else f"{text[:2000]}...({len(frame)} bytes)...{text[-2000:]}"


def _exc_text(record: logging.LogRecord) -> str:
    return "".join(traceback.format_exception(*record.exc_info)) if record.exc_info else ""


def _request(session: ProxySession, frame: bytes, config: str) -> bool:
    """True if the connection ends."""
    try:
        decision = session.on_request(memoryview(bytearray(frame)))  # writable, as the shell's buffer
        if decision.action is Action.CHECK:
            assert decision.resume is not None
            decision = decision.resume(False)  # a wrong password: the key derivation itself is not fuzzed
    except ProtocolViolation:
        return True
    except Exception as exc:
        raise InternalError(f"on_request({_hex(frame)}): {traceback.format_exc()}") from exc
    return decision.action is Action.CLOSE


def _responses(session: ProxySession, rng: random.Random, pool: list[bytes]) -> tuple[bool, int]:
    """Answer outstanding requests as a broker would (often with a mutant); (connection ends, frames sent)."""
    sent = 0
    while session.in_flight:
        while session.next_local_reply() is not None:
            pass
        if not session.in_flight or rng.random() < 0.1:
            return False, sent
        pending = session.in_flight[0]
        frame = response_frame(pending.api_key, pending.api_version, pending.correlation_id, rng)
        if rng.random() < 0.6:
            frame = mutate(frame, rng, 4, rng.choice(pool))
        sent += 1
        try:
            session.on_response(memoryview(bytearray(frame)))
        except ProtocolViolation:
            return True, sent
        except Exception as exc:
            raise InternalError(
                f"on_response(api {pending.api_key} v{pending.api_version}, {_hex(frame)}): {traceback.format_exc()}"
            ) from exc
    return False, sent


# -- command line ----------------------------------------------------------------------------------


def _worker(seed: int, frames: int) -> int:
    logging.basicConfig(handlers=[logging.NullHandler()])  # refusals are logged by the million: not printed
    logging.getLogger("proxy").setLevel(logging.WARNING)
    try:
        stats = run(seed, frames)
    except InternalError as exc:
        print(f"INTERNAL ERROR: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(dataclasses.asdict(stats)))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    parser.add_argument("--batch", type=int, default=100_000, help="frames per subprocess")
    parser.add_argument("--max-growth-mib", type=float, default=32.0, help="RSS growth that counts as a leak")
    parser.add_argument("--worker", action="store_true", help="run one batch in this process")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    if args.worker:
        return _worker(seed, args.frames)
    print(f"seed {seed}, {args.frames} frames in batches of {args.batch}", flush=True)
    done = 0
    batch = 0
    totals = {"frames": 0, "requests": 0, "responses": 0, "closed": 0, "seconds": 0.0}
    failed = False
    while done < args.frames:
        count = min(args.batch, args.frames - done)
        batch_seed = (seed + batch) % (1 << 32)
        command = [sys.executable, __file__, "--worker", "--seed", str(batch_seed), "--frames", str(count)]
        proc = subprocess.run(command, capture_output=True, text=True)
        reproduce = " ".join(command[1:])
        if proc.returncode != 0:
            how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
            print(f"FAIL batch {batch} ({how}); reproduce: {sys.executable} {reproduce}", flush=True)
            print(proc.stderr[-20000:], file=sys.stderr)
            failed = True
            break
        stats = json.loads(proc.stdout.strip().splitlines()[-1])
        for key in totals:
            totals[key] += stats[key]
        growth = stats["rss_end"] - stats["rss_start"]
        print(
            f"batch {batch} seed {batch_seed}: {stats['frames']} frames ({stats['responses']} responses, "
            f"{stats['closed']} connections closed) in {stats['seconds']:.1f} s = "
            f"{stats['frames'] / stats['seconds']:.0f} frames/s; RSS {stats['rss_start']:.1f} -> "
            f"{stats['rss_end']:.1f} MiB, peak {stats['peak_start']:.1f} -> {stats['peak_end']:.1f} MiB",
            flush=True,
        )
        if growth > args.max_growth_mib:
            print(f"FAIL batch {batch}: RSS grew {growth:.1f} MiB; reproduce: {sys.executable} {reproduce}")
            failed = True
            break
        done += stats["frames"]
        batch += 1
    print(
        f"seed {seed}: {totals['frames']} frames ({totals['requests']} requests, {totals['responses']} responses, "
        f"{totals['closed']} connections closed) in {totals['seconds']:.0f} s, "
        f"{totals['frames'] / max(totals['seconds'], 1e-9):.0f} frames/s: {'FAILED' if failed else 'no crash'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
