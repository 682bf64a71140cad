"""No verdict part without a measurement behind it: a rule's input in a chapter is never a typed-in constant.

Every chapter decides its claims with the rules of :mod:`ltvlib.book.scorecard`. A rule fed a literal (an
interval typed in, a check written as ``True``, a list of "missing" tasks typed in) would give a verdict that no
measurement supports. The chapters are scanned as source (their code cells), so the test needs no model.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(ROOT.glob("chapters/[0-9]*.py"))

#: rule -> the positional indices and keyword names of its measured inputs
MEASURED = {
    "direction_rule": ((0, 1), ("diff", "interval")),
    "threshold_rule": ((0, 1), ("value", "interval")),
    "checks_rule": ((0,), ("checks",)),
    "budget_rule": ((0,), ("missing",)),
}


def is_constant(node: ast.AST) -> bool:
    """A literal, or a container / arithmetic made only of literals (``0.1``, ``(0.0, 0.2)``, ``-0.05``,
    ``["rte"]``, ``{"a": True}``)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return is_constant(node.operand)
    if isinstance(node, ast.BinOp):
        return is_constant(node.left) and is_constant(node.right)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(is_constant(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(v is not None and is_constant(v) for v in node.values)
    return False


def constant_inputs(source: str) -> list[str]:
    """``"<rule>(...) line N: argument <name> is a constant"`` for every rule call fed a literal (for ``checks``,
    also a dict whose values include a literal bool)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if name not in MEASURED:
            continue
        positions, keywords = MEASURED[name]
        args = [(f"#{i}", a) for i, a in enumerate(node.args) if i in positions]
        args += [(k.arg, k.value) for k in node.keywords if k.arg in keywords]
        for arg, value in args:
            if is_constant(value):
                out.append(f"{name}(...) line {node.lineno}: argument {arg} is a constant")
            elif isinstance(value, ast.Dict) and any(isinstance(v, ast.Constant) and isinstance(v.value, bool)
                                                       for v in value.values):
                out.append(f"{name}(...) line {node.lineno}: argument {arg} holds a literal True/False")
    return out


def chapter_code(path: Path) -> str:
    nb = jupytext.read(path)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code" and not c.source.lstrip().startswith("%"))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_rule_input_is_a_constant(path: Path) -> None:
    problems = constant_inputs(chapter_code(path))
    assert not problems, f"{path.name}: verdict parts without a measurement: " + "; ".join(problems)


@pytest.mark.parametrize(
    "source",
    [
        "direction_rule(0.1, (0.05, 0.2))",
        "r = direction_rule(d.value, (0.0, 0.2))",
        "threshold_rule(x.value, x.interval, 0.8) or threshold_rule(value=0.9, interval=[0.85, -0.1], threshold=0.8)",
        "budget_rule(['rte'], 'over the budget')",
        "scorecard.checks_rule({'ran': True, 'beats': a > b})",
    ],
)
def test_the_scan_catches_a_typed_in_input(source: str) -> None:
    assert constant_inputs(source)


def test_the_scan_passes_measured_inputs() -> None:
    source = ("direction_rule(d.value, d.interval)\nthreshold_rule(p.value, p.interval, 0.10, at_least=False)\n"
              "budget_rule(sorted(set(planned) - set(ran)), reason)\nchecks_rule({'beats': bool(a > b)})\n"
              "direction_rule(diff=e.value, interval=(e.low, e.high), margin=0.05)")
    assert constant_inputs(source) == []
