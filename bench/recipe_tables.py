"""The tables ``bench/layer_recipes.py --single-run`` prints, read back: one header line, then Markdown rows.

``bench/step_rules.py``, ``bench/step_blend.py`` and ``bench/check_grid.py`` each compare step sizes from such
tables; this module is the one place that knows their layout (header: model, number of layers, seed, ``single
runs``; a run row: 14 cells, task, layer, stream RMS, recipe, lr, init, validation, test accuracy, trained, best
step, steps, wall, stopped by, validation score).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_HEADER = re.compile(r"model (\S+) \((\d+) layers\);.*\bseed (\d+);")


@dataclass(frozen=True)
class RunTable:
    """One file: its header's model, number of layers and seed, and the cells of its run rows (``cells[1]`` the task,
    ``cells[2]`` the layer, ..., ``cells[14]`` the validation score; ``cells[0]`` is empty)."""

    path: Path
    model: str
    n_layers: int
    seed: int
    rows: list[list[str]]


def read_tables(paths: list[Path]) -> Iterator[RunTable]:
    """Each path's table; ``SystemExit`` naming the file when it is not a ``--single-run`` table."""
    for path in paths:
        lines = path.read_text().splitlines()
        head = _HEADER.search(lines[0]) if lines else None
        if head is None or "single runs" not in lines[0]:
            raise SystemExit(f"{path}: not a `layer_recipes.py --single-run` table "
                             f"(its first line: {lines[0] if lines else ''!r})")
        rows = [c for c in ([x.strip() for x in line.split("|")] for line in lines) if len(c) >= 16 and c[2].isdigit()]
        yield RunTable(path, head.group(1), int(head.group(2)), int(head.group(3)), rows)
