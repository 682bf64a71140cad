"""The ``ltvlib`` modules import one another without cycles.

A cycle between modules works only as long as every module on it defers its imports into functions or imports
names the others have already defined; one new module-level import turns it into an ``ImportError`` that depends
on which module a caller imports first. The graph here counts every import a module makes (module level and inside
functions), except those under ``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ltvlib

PKG_DIR = Path(ltvlib.__file__).resolve().parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG_DIR.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG_DIR.rglob("*.py")) if "__pycache__" not in p.parts}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import under ``node`` that can run: the bodies of ``if TYPE_CHECKING:`` are skipped (their ``else``
    branch is kept)."""
    found: list[ast.Import | ast.ImportFrom] = []
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [node]
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        children: list[ast.AST] = list(node.orelse)
    else:
        children = list(ast.iter_child_nodes(node))
    for child in children:
        found.extend(_import_nodes(child))
    return found


def _targets(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ``ltvlib`` modules that ``name`` (at ``path``) imports. ``from pkg import x`` counts as an import of
    ``pkg.x`` when that is a module, else of ``pkg``; the parent packages Python initialises on the way are not
    counted (a package's ``__init__`` importing its own submodules is no cycle)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
            continue
        if node.level:
            base = package.split(".")
            if node.level - 1 >= len(base):
                continue
            base = base[: len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        if module.split(".")[0] != "ltvlib":
            continue
        for alias in node.names:
            sub = f"{module}.{alias.name}"
            out.add(sub if sub in modules else module)
    return {m for m in out if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    """Module name -> the ``ltvlib`` modules it imports."""
    modules = _modules()
    return {name: _targets(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan), each written as a path
    through the component that returns to its start."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, set(c)) for c in sorted(components)]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_the_graph_sees_module_and_function_level_imports() -> None:
    graph = import_graph()
    assert "ltvlib.ltv" in graph and "ltvlib.study.plans" in graph
    assert "ltvlib.stats" in graph["ltvlib.ltv"]  # module level
    assert graph["ltvlib.baselines"] >= {"ltvlib.baselines.function_vector", "ltvlib.baselines.vanilla_tv"}


def test_cycles_are_found(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_type_checking_imports_are_not_edges() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .a import A\nelse:\n    from .b import B\n"
        "def f():\n    from .c import C\n"
    )
    assert sorted(n.module or "" for n in _import_nodes(tree) if isinstance(n, ast.ImportFrom)) == ["b", "c", "typing"]


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles in ltvlib (module -> what it imports):\n" + "\n".join(
        " -> ".join(c) for c in found
    )
