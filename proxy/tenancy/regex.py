"""Client regular expressions the tenancy layer evaluates or wraps, sans-I/O.

KIP-848 `SubscribedTopicRegex` and KIP-1071 source-topic regexes are evaluated by the proxy over
the VC's link names (the broker would see every tenant's physical topics); KIP-1152 transactional-id
patterns are wrapped in the VC's prefix and evaluated by the broker. Either way the pattern is a
tenant's input, so:

* **RE2 semantics, linear time** (google-re2; the broker uses RE2/J): no backtracking, so no
  pattern costs more than length of name x size of the compiled program.
* **Bounded**: at most `MAX_REGEX_LENGTH` characters and `MAX_PROGRAM_SIZE` RE2 instructions
  (one match of a 212-character name then stays in the low milliseconds), compiled with
  `RE2_MAX_MEM` of memory. A pattern RE2 refuses, or too big, is `InvalidRegex`: the API answers
  INVALID_REGULAR_EXPRESSION with the reason.
* **Cached** per (VC, regex, links version): a heartbeat looks the expansion up; when the VC's links
  change only the added names are matched. At most `MAX_REGEXES_PER_VC` of a VC and `MAX_REGEXES` in
  all, least recently used first (proxy/tenancy/per_vc_lru.py: one VC's churn drops only its own). A
  compiled pattern is kept only while names are left to match, so cached expansions hold no RE2
  memory (and RE2's own module cache is kept empty).
* **Budgeted**: matching runs in slices of at most `SLICE_SECONDS` per request, and a VC may spend
  at most `VC_RATE` seconds of matching per second (burst `VC_BURST`), per instance: each of N workers
  (`serve --workers N`) grants a VC 1/N of it (`RegexCache.share`). An expansion that is not
  finished yet is a subset of the final one; callers re-send it when it grows (heartbeats do).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import re2

from ..errors import Refusal
from .per_vc_lru import PerVcLru

MAX_REGEX_LENGTH = 4096  # characters of one client pattern
MAX_PROGRAM_SIZE = 5000  # RE2 instructions of one compiled pattern
RE2_MAX_MEM = 1 << 20  # bytes RE2 may use for one pattern (program and DFA cache)
SLICE_SECONDS = 0.010  # matching one request may do
VC_RATE = 0.050  # seconds of matching per second a VC may use on average ...
VC_BURST = 0.200  # ... and at once
MAX_REGEXES_PER_VC = 256  # cached evaluations per VC (least recently used dropped): limits.max_regexes_per_vc
MAX_REGEXES = 4096  # cached evaluations in all, and remembered expansions in all: limits.max_regexes


class InvalidRegex(Refusal, ValueError):
    """A client pattern RE2 refuses or the proxy's bounds exceed; the message says why."""


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False  # a tenant's bad pattern is the tenant's error, not the proxy's log
    options.never_capture = True  # only "does it match": the DFA, never the slower capturing engines
    return options


_OPTIONS = _options()


def compile_client_regex(pattern: str, what: str = "regular expression") -> Any:
    """RE2-compile a tenant's pattern, or raise InvalidRegex saying why (in the client's terms)."""
    if len(pattern) > MAX_REGEX_LENGTH:
        raise InvalidRegex(f"{what} is {len(pattern)} characters long; the limit is {MAX_REGEX_LENGTH}")
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InvalidRegex(f"{what} `{pattern}` is not a valid regular expression: {reason}") from None
    finally:
        re2.purge()  # the module's own cache would keep up to 128 tenant patterns (and their DFAs) alive
    size = compiled._regexp.ProgramSize()
    if size > MAX_PROGRAM_SIZE:
        raise InvalidRegex(f"{what} `{pattern}` is too complex ({size} RE2 instructions, limit {MAX_PROGRAM_SIZE})")
    return compiled


def _literal(topic: str) -> str:
    """A topic name as an RE2 literal. Topic names are `[a-zA-Z0-9._-]` (Kafka refuses others), and of
    those only `.` means something outside a character class: much cheaper than a general escape."""
    return topic.replace(".", "\\.")


@dataclasses.dataclass
class _Evaluation:
    """One regex over one VC's link names: what matched, and what is still to be matched."""

    compiled: Any  # only while names are left to match: a finished pattern holds no RE2 memory
    version: int = -1
    names: frozenset[str] = frozenset()  # the link names of `version`
    matched: set[str] = dataclasses.field(default_factory=set)
    todo: list[str] = dataclasses.field(default_factory=list)
    expansion: str | None = None  # built from `matched` once per change


@dataclasses.dataclass
class _Bucket:
    tokens: float = VC_BURST
    at: float = 0.0


@dataclasses.dataclass(frozen=True)
class Expansion:
    pattern: str  # the alternation of the matching physical topics, for the broker
    complete: bool  # False: matching continues on later requests (the VC's budget ran out)


class RegexCache:
    """Per proxy: the expansions of every VC's topic regexes, and each VC's matching budget."""

    def __init__(
        self, clock: Callable[[], float] = time.perf_counter, limit: int = MAX_REGEXES, per_vc: int = MAX_REGEXES_PER_VC
    ):
        self.clock = clock
        self._evaluations: PerVcLru[tuple[str, str], _Evaluation] = PerVcLru(limit, per_vc)  # (VC, regex) ->
        self._buckets: dict[str, _Bucket] = {}
        # (VC, digest of an expansion) -> the regex
        self._regex_of: PerVcLru[tuple[str, bytes], str] = PerVcLru(limit, per_vc)
        self.share = 1.0  # of each VC's budget this process grants: 1/N in each of N workers
        # With workers: told each expansion's regex, for the others' `learn` (a group described through
        # another worker than its heartbeats' shows the client's regex, not HIDDEN).
        self.tell: Callable[[list[object]], None] | None = None

    def expand(self, vc: Any, regex: str, what: str = "SubscribedTopicRegex") -> Expansion:
        """The physical names of `vc`'s links that fully match `regex`, as an RE2 alternation."""
        ev = self._evaluations.get((vc.id, regex))
        if ev is None:
            ev = _Evaluation(compile_client_regex(regex, what))
            self._evaluations.put(vc.id, (vc.id, regex), ev)
        else:
            self._evaluations.touch((vc.id, regex))
        if ev.version != vc.links_version:
            current = frozenset(vc.links)
            ev.matched &= current
            ev.todo = [n for n in ev.todo if n in current] + sorted(current - ev.names)
            ev.names, ev.version, ev.expansion = current, vc.links_version, None
        if ev.todo:
            if ev.compiled is None:
                ev.compiled = compile_client_regex(regex, what)
            if self._match(vc.id, ev):
                ev.expansion = None
            if not ev.todo:
                ev.compiled = None
        if ev.expansion is None:
            ev.expansion = self._alternation(vc, ev.matched)
            self._remember(vc.id, ev.expansion, regex)
        return Expansion(ev.expansion, not ev.todo)

    def bound(self, total: int, per_vc: int) -> None:
        """The limits from now on (the config's `limits.max_regexes*`)."""
        for table in (self._evaluations, self._regex_of):
            table.total, table.per_vc = total, per_vc

    def regex_for(self, vc: Any, expansion: str) -> str | None:
        """The client regex behind an expansion this proxy sent (ConsumerGroupDescribe shows it back)."""
        return self._regex_of.get((vc.id, _digest(expansion)))

    def _match(self, vc_id: str, ev: _Evaluation) -> bool:
        """Match what the VC's budget allows; True if anything new matched."""
        bucket = self._buckets.setdefault(vc_id, _Bucket(tokens=VC_BURST * self.share, at=self.clock()))
        now = self.clock()
        bucket.tokens = min(VC_BURST * self.share, bucket.tokens + (now - bucket.at) * VC_RATE * self.share)
        bucket.at = now
        allowed = min(SLICE_SECONDS, bucket.tokens)
        if allowed <= 0:
            return False
        fullmatch, todo, done, before = ev.compiled.fullmatch, ev.todo, 0, len(ev.matched)
        while done < len(todo):
            name = todo[done]
            done += 1
            if fullmatch(name):
                ev.matched.add(name)
            if self.clock() - now >= allowed:
                break
        del todo[:done]
        spent = self.clock() - now
        bucket.tokens -= spent
        bucket.at = now + spent
        return len(ev.matched) > before

    @staticmethod
    def _alternation(vc: Any, matched: set[str]) -> str:
        physical = sorted(vc.links[link] for link in matched if link in vc.links)
        if not physical:
            return _literal(f"{uuid.uuid5(uuid.UUID(vc.id), 'no-topic')}.none")  # exists nowhere
        return "|".join(map(_literal, physical))

    def _remember(self, vc_id: str, expansion: str, regex: str) -> None:
        key = _digest(expansion)
        if self.tell is not None and self._regex_of.get((vc_id, key)) != regex:
            self.tell(["regex", vc_id, key.hex(), regex])
        self._keep(vc_id, key, regex)

    def learn(self, told: object) -> None:
        """Another worker's expansion, as its `tell` gave it; anything else is ignored."""
        if not (isinstance(told, list) and len(told) == 4 and told[0] == "regex"):
            return
        _, vc_id, digest, regex = told
        if not (isinstance(vc_id, str) and isinstance(digest, str) and isinstance(regex, str)):
            return
        if len(vc_id) > 64 or len(regex) > MAX_REGEX_LENGTH or len(digest) != 32:
            return
        try:
            key = bytes.fromhex(digest)
        except ValueError:
            return
        self._keep(vc_id, key, regex)

    def _keep(self, vc_id: str, key: bytes, regex: str) -> None:
        self._regex_of.put(vc_id, (vc_id, key), regex)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


REGEXES = RegexCache()  # one per proxy process: shared by every connection of a VC
