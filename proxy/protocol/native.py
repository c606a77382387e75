"""The compiled walker, where it is built: ``vcproxy_native`` (native/, Rust with PyO3, built by maturin).

Plans (plans.py) run on it instead of the pure-Python closures of walker.py and splice.py, which stay
the reference: tests/unit/test_native_walk.py shows the two agree byte for byte on every API and
version. Where it is not installed, or ``VCPROXY_PURE=1`` is set, everything runs on the pure path and
`vcproxy serve` says so once at start (``describe``).
"""

from __future__ import annotations

import os
import uuid
from types import ModuleType
from typing import Any

from .plans import Node
from .primitives import MalformedError, TruncatedError

PURE_ENV = "VCPROXY_PURE"
FORWARDER_ENV = "VCPROXY_FORWARDER"  # "0": the forwarder off, the walker on (proxy/net/forwarder.py)


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None, f"{PURE_ENV} is set"
    try:
        import vcproxy_native
    except ImportError as exc:
        return None, f"vcproxy_native is not installed ({exc}; `make` builds it from native/ with cargo)"
    return vcproxy_native, ""


_MODULE, REASON = _load()
COMPILED = _MODULE is not None


def module() -> ModuleType | None:
    """vcproxy_native where it is in use (its forwarder, proxy/net/forwarder.py), else None."""
    return _MODULE


def forwarding() -> ModuleType | None:
    """vcproxy_native where its forwarder is in use (not turned off by VCPROXY_FORWARDER=0), else None."""
    if _MODULE is None or os.environ.get(FORWARDER_ENV, "") == "0" or not hasattr(_MODULE, "Forwarder"):
        return None
    return _MODULE


def plan(node: Node, module: ModuleType | None = None) -> Any:
    """A compiled ``Plan`` of `node`, raising the pure walker's exception classes."""
    module = module or _MODULE
    if module is None:
        raise RuntimeError(f"the compiled walker is not available: {REASON}")
    return module.Plan(node, MalformedError, TruncatedError, uuid.UUID)


def describe() -> str:
    """One line for the start log: which path walks and splices bodies."""
    if COMPILED:
        forwarder = os.environ.get(FORWARDER_ENV, "") != "0"
        return "compiled walker: vcproxy_native (validation, skips and splices of message bodies{})".format(
            "; the forwarder for plain passthrough requests and virtual clusters' Produce and Fetch"
            if forwarder
            else f"; the forwarder is off: {FORWARDER_ENV}=0"
        )
    return f"compiled walker not in use, running on the pure-Python path: {REASON}"
