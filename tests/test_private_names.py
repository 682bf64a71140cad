"""No module uses another module's private names.

A name with one leading underscore (``_train_runs``, ``_as_matrix``) is its module's own: it may change or go
without notice. What another module, a bench script or a chapter needs is public. Checked by reading the source
(no imports run) of every ``ltvlib`` module, bench script, chapter and test file:

- ``from M import _x`` and ``M._x`` (``M`` a module of ``ltvlib`` or a bench script, or a name imported from one,
  such as a class: ``PromptRunner._first_pass``) count as uses of ``M``'s private ``_x``; dunders do not.
- A module may use its own private names.
- A test file ``tests/test_<s>.py`` may also use the private names of the modules it is named after, to spy on
  or build their internals: the modules whose name, or dotted path below ``ltvlib`` joined by ``_``, is ``s`` or
  a ``_``-separated prefix of it (``test_ltv_seeds.py``: ``ltvlib.ltv_seeds`` and ``ltvlib.ltv``;
  ``test_book_runner.py``: ``ltvlib.book.runner``; ``test_bench_floor.py``: ``bench/floor.py``). Test helper
  modules (``tests/*.py`` not named ``test_*``) test nothing and use public names only.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "ltvlib"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _ltvlib_modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts).removesuffix(".__init__")] = p
    return out


MODULES = _ltvlib_modules()
BENCH = {f"bench.{p.stem}": p for p in sorted((ROOT / "bench").glob("*.py"))}
TARGETS = set(MODULES) | set(BENCH)


def _sources() -> list[Path]:
    return [*MODULES.values(), *BENCH.values(), *sorted((ROOT / "chapters").glob("*.py")),
            *sorted((ROOT / "scripts").glob("*.py")), *sorted((ROOT / "tests").glob("*.py"))]


def _own_module(path: Path) -> str | None:
    for name, p in {**MODULES, **BENCH}.items():
        if p == path:
            return name
    return None


def _subjects(path: Path) -> set[str]:
    """The modules a test file is named after (see the module docstring); empty for anything else."""
    if path.parent.name != "tests" or not path.stem.startswith("test_"):
        return set()
    s = path.stem.removeprefix("test_")
    found = set()
    for name in TARGETS:
        parts = name.split(".")[1:]  # below ltvlib, or the script's name below bench
        if not parts:
            continue
        for alias in {parts[-1], "_".join(parts), "_".join(["bench", *parts]) if name.startswith("bench.") else ""}:
            if alias and (s == alias or s.startswith(alias + "_")):
                found.add(name)
    return found


def _resolve_from(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` reads from (relative imports resolved against ``path``)."""
    if not node.level:
        return node.module or ""
    package = list(path.relative_to(ROOT).with_suffix("").parts[:-1])
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _private_uses(path: Path, text: str) -> list[tuple[int, str, str]]:
    """``(line, module, name)`` for every use in ``text`` (the source of ``path``, which resolves relative
    imports) of a private name of a module in :data:`TARGETS`."""
    tree = ast.parse(text)
    bound: dict[str, str] = {}  # local name -> the target module it is (or comes from)
    uses: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = _resolve_from(path, node)
            for alias in node.names:
                local = alias.asname or alias.name
                if f"{module}.{alias.name}" in TARGETS:
                    bound[local] = f"{module}.{alias.name}"  # a module imported from its package
                elif module in TARGETS:
                    bound[local] = module  # a function or class: its attributes are its module's
                    if _is_private(alias.name):
                        uses.append((node.lineno, module, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in TARGETS:
                    bound[alias.asname] = alias.name
                elif not alias.asname:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "load_bench"
              and node.value.args and isinstance(node.value.args[0], ast.Constant)):
            bound[node.targets[0].id] = f"bench.{node.value.args[0].value}"  # tests.bench_scripts.load_bench

    def dotted(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return bound.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = dotted(expr.value)
            if base is not None and f"{base}.{expr.attr}" in TARGETS:
                return f"{base}.{expr.attr}"
            return base if base in TARGETS and not _is_private(expr.attr) else None
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            module = dotted(node.value)
            if module in TARGETS:
                uses.append((node.lineno, module, node.attr))
    return uses


def _violations(path: Path) -> list[str]:
    allowed = {_own_module(path), *_subjects(path)}
    rel = path.relative_to(ROOT)
    return [f"{rel}:{line}: {module}.{name}" for line, module, name in _private_uses(path, path.read_text(encoding="utf-8")) if module not in allowed]


def test_no_module_uses_another_modules_private_names() -> None:
    found = [v for p in _sources() for v in _violations(p)]
    assert not found, "private names used outside their module (make them public or move them):\n" + "\n".join(found)


def test_the_scan_sees_imports_attributes_and_classes() -> None:
    text = ("from ltvlib.stats import _as_matrix, wilson_interval\n"
            "from ltvlib import ltv\nfrom ltvlib.forward import PromptRunner\nimport ltvlib.cache\n"
            "ltv._attempt\nPromptRunner._first_pass\nltvlib.cache._PKG_DIR\nltv.__name__\nwilson_interval\n")
    assert [(m, n) for _, m, n in _private_uses(ROOT / "chapters" / "probe.py", text)] == [
        ("ltvlib.stats", "_as_matrix"), ("ltvlib.ltv", "_attempt"), ("ltvlib.forward", "_first_pass"),
        ("ltvlib.cache", "_PKG_DIR")]
    relative = "from ..stats import _percentiles\nfrom . import extracted\nextracted._test_evalset\n"
    assert [(m, n) for _, m, n in _private_uses(PKG / "study" / "ltvs.py", relative)] == [
        ("ltvlib.stats", "_percentiles"), ("ltvlib.study.extracted", "_test_evalset")]


def test_a_test_file_may_use_the_privates_of_the_modules_it_is_named_after() -> None:
    tests = ROOT / "tests"
    assert _subjects(tests / "test_ltv_seeds.py") >= {"ltvlib.ltv_seeds", "ltvlib.ltv"}
    assert "ltvlib.stats" not in _subjects(tests / "test_ltv_seeds.py")
    assert _subjects(tests / "test_book_runner.py") >= {"ltvlib.book.runner"}
    assert _subjects(tests / "test_bench_floor.py") == {"bench.floor"}
    assert _subjects(tests / "bench_scripts.py") == set()
    assert _subjects(ROOT / "chapters" / "00_overview.py") == set()
