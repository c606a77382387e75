"""One exception root: every error the proxy's runtime raises on purpose is malformed input, a refusal or an
internal fault (proxy/errors.py), and keeps the built-in base its callers catch."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import proxy
from proxy.errors import InternalFault, MalformedInput, ProxyError, Refusal

# The tools (Kafka launcher, analytics, command-line clients) and control flow that is no error.
NOT_RUNTIME = (
    "vcproxy_tools.kafka",
    "vcproxy_tools.analytics",
    "vcproxy_tools.bench",
    "vcproxy_tools.demo",
    "vcproxy_tools.probe",
)
TOOL_MODULES = ("cli", "client", "admin_client", "migrate", "__main__", "bench_results")
NOT_ERRORS = {"LocalAnswer"}  # a tenancy handler's answer, raised to end the handler


def _runtime_exceptions() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(proxy.__path__, "proxy."):
        name = info.name
        if name == "proxy.errors" or name.rsplit(".", 1)[-1] in TOOL_MODULES:
            continue
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == name and issubclass(cls, Exception) and cls.__name__ not in NOT_ERRORS:
                found.append(cls)
    return found


def test_every_runtime_exception_has_the_one_root_and_one_kind():
    found = _runtime_exceptions()
    assert len(found) >= 15
    for cls in found:
        assert issubclass(cls, ProxyError), cls
        kinds = [k for k in (MalformedInput, Refusal, InternalFault) if issubclass(cls, k)]
        assert len(kinds) == 1, (cls, kinds)


def test_the_built_in_bases_callers_catch_are_kept():
    from proxy.acl.model import AclError
    from proxy.protocol.primitives import TruncatedError
    from proxy.state.store import StateStoreError

    assert issubclass(AclError, ValueError) and issubclass(TruncatedError, ValueError)
    assert issubclass(StateStoreError, OSError)
