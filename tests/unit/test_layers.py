"""The import structure of proxy/ is layered (docs/architecture.md, "Layers"): no module imports one that
imports it back, directly or around a loop, and neither does a package (a folder of proxy/, taken whole) or
a top-level module. Every import counts: at the top, inside a function, or only for type checking. The tools
(vcproxy_tools/) stand above the whole runtime: proxy/ never imports them."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROXY = ROOT / "proxy"
TOOLS = "vcproxy_tools"


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


def _unit_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, imported in _graph().items():
        edges.setdefault(_unit(module), set()).update(
            _unit(other) for other in imported if _unit(other) != _unit(module)
        )
    return edges


def floors(edges: dict[str, set[str]]) -> dict[str, int]:
    """Each unit's floor: one above the highest it imports (1: imports none); defined where there is no circle."""

    @functools.cache
    def floor(unit: str) -> int:
        return 1 + max((floor(other) for other in edges.get(unit, ())), default=0)

    return {unit: floor(unit) for unit in edges}


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
    edges = _unit_edges()
    circles = _circles(edges)
    assert not circles, [_ties(edges, c) for c in circles]


def test_the_check_sees_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
    assert _unit("proxy.core.stages.tenancy") == "proxy/core/"
    assert _unit("proxy.config") == "proxy/config.py"
    assert floors({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == {"a": 3, "b": 2, "c": 1}


def _tool_imports(source: str, filename: str = "<source>") -> list[str]:
    """The imports of the tools package in `source` (relative imports stay inside proxy/: never the tools)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        found += [f"{filename}:{node.lineno}: {n}" for n in names if n == TOOLS or n.startswith(f"{TOOLS}.")]
    return found


def test_the_runtime_never_imports_the_tools():
    assert (ROOT / TOOLS).is_dir()
    found = [hit for p in sorted(PROXY.rglob("*.py")) for hit in _tool_imports(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []


def test_the_check_sees_an_import_of_the_tools():
    source = "import vcproxy_tools.kafka\ndef f():\n    from vcproxy_tools import demo\nfrom vcproxy_toolsx import y\n"
    assert _tool_imports(source) == ["<source>:1: vcproxy_tools.kafka", "<source>:3: vcproxy_tools"]


if __name__ == "__main__":  # the floors of proxy/ as docs/architecture.md lists them
    edges = _unit_edges()
    by_floor: dict[int, list[str]] = {}
    for unit, level in floors(edges).items():
        by_floor.setdefault(level, []).append(unit)
    for level in sorted(by_floor, reverse=True):
        print(level, " ".join(sorted(by_floor[level])))
    print(f"{len(edges)} units, {sum(map(len, edges.values()))} imports between them, {len(by_floor)} floors")
