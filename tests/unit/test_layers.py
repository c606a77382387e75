"""The import structure of proxy/ is layered (docs/architecture.md, "Layers"): no module imports one that
imports it back, directly or around a loop, and neither does a package (a folder of proxy/, taken whole) or
a top-level module. Every import counts: at the top, inside a function, or only for type checking."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROXY = ROOT / "proxy"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The proxy modules `path` imports (a name imported from a package counts as its module where it is one)."""
    name = _module(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    paths = sorted(PROXY.rglob("*.py"))
    modules = {_module(p) for p in paths}
    return {_module(p): _imports(p, modules) for p in paths}


def _unit(module: str) -> str:
    """A package of proxy/ (its folder, whole), or a top-level module."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (PROXY / parts[1]).is_dir()):
        return f"proxy/{parts[1]}/"
    return module.replace(".", "/") + ".py" if len(parts) > 1 else "proxy/__init__.py"


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts with more than one member (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _ties(edges: dict[str, set[str]], members: Iterable[str]) -> list[str]:
    inside = set(members)
    return [f"{a} -> {b}" for a in sorted(inside) for b in sorted(edges.get(a, ())) if b in inside]


def test_no_module_imports_one_that_imports_it_back():
    edges = _graph()
    circles = _circles(edges)
    assert not circles, [_ties(edges, c) for c in circles]


def test_packages_are_layered_with_no_import_up():
    edges: dict[str, set[str]] = {}
    for module, imported in _graph().items():
        edges.setdefault(_unit(module), set()).update(
            _unit(other) for other in imported if _unit(other) != _unit(module)
        )
    circles = _circles(edges)
    assert not circles, [_ties(edges, c) for c in circles]


def test_the_check_sees_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
    assert _unit("proxy.core.stages.tenancy") == "proxy/core/"
    assert _unit("proxy.config") == "proxy/config.py"
