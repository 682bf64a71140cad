"""Choose the LTV learning rate's stream blend offline, from single training runs at site-relative step sizes.

A stream-relative recipe's learning rate at a site is ``x * u * rms_site ** (1 - w) * rms_last ** w``
(``TrainConfig.lr_final_stream_weight = w``; ``u = 0.1 / 6.15``, lr 0.1 at SmolLM2's middle layer; ``rms_last`` the
stream entering the last block). Divided by ``u * rms_site`` that is the *site-relative factor*
``f = x * (rms_last / rms_site) ** w``: the factor a site-relative recipe (``w = 0``) would need to take the same
step. Every run of ``bench/layer_recipes.py --single-run`` records its site's RMS and its absolute learning rate, so
its site-relative factor is known whatever recipe made it (``lr / (u * rms)``), and the runs of one (task, layer)
point at several factors give that point's validation score as a function of ``f``.

For each candidate ``(w, x)`` this script evaluates, at every point, the seed-mean validation score at the
candidate's factor, interpolated linearly in ``log f`` between the two nearest measured factors (a candidate that
falls outside a point's measured range by more than ``--reach`` (a factor of 1.32 by default) is not evaluated
there), and prints the mean over the points, each weighted equally: the rule by which the default was chosen
(the highest mean validation score, what early stopping sees, never test accuracy). The scores are the runs'
``val score`` column (balanced accuracy for classification tasks, accuracy otherwise), for every run, trained or
not (a run that did not train keeps its random start, and that start's score is what it reports). A run that
diverged prints no learning rate, so its factor is unknown: it is left out and counted in the output.

    python bench/step_blend.py bench/runs16/*.md bench/runs18/pilot/*.md
    python bench/step_blend.py --weights 0,1 --factors 9,27 bench/runs16/*.md bench/runs18/pilot/*.md

The last block's RMS of a task is read from its rows at the model's last layer (the header names the number of
layers), so the tables must include that layer for every task.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other bench scripts, also when loaded by path
from recipe_tables import read_tables

UNIT = 0.1 / 6.15
"""The relative learning rate factors multiply (``bench/layer_recipes.py``'s ``RELATIVE_UNIT``)."""

Point = tuple[str, int]  # (task, layer)


class Runs:
    """Single runs read from layer_recipes tables: per point, factor -> validation scores (one per seed); per
    task, the RMS of the stream entering the last block; per point, the site's RMS."""

    def __init__(self) -> None:
        self.scores: dict[Point, dict[float, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        self.site_rms: dict[Point, float] = {}
        self.n_layers: int | None = None
        self.diverged = 0

    def last_rms(self, task: str) -> float:
        assert self.n_layers is not None
        rms = self.site_rms.get((task, self.n_layers - 1))
        if rms is None:
            raise SystemExit(f"no run of task {task!r} at the last layer ({self.n_layers - 1}): its stream RMS there "
                             "is what a blended learning rate is relative to; add that layer's runs")
        return rms

    def curve(self, point: Point) -> list[tuple[float, float, int]]:
        """``(log3 factor, seed-mean score, seeds)`` sorted by factor."""
        return sorted((math.log(f, 3), statistics.mean(s.values()), len(s)) for f, s in self.scores[point].items())


def site_factor(lr: float, rms: float) -> float:
    """A run's site-relative factor, snapped to the nearest power of 3 when within 2 % of it (the tables print
    3 significant digits)."""
    f = lr / (UNIT * rms)
    k = round(math.log(f, 3))
    return float(3**k) if abs(f / 3**k - 1) < 0.02 else float(f"{f:.3g}")


def read_runs(paths: list[Path]) -> Runs:
    """Rows of ``layer_recipes.py --single-run`` tables (later files win on a duplicate (point, factor, seed))."""
    runs = Runs()
    for table in read_tables(paths):
        n_layers, seed = table.n_layers, table.seed
        if runs.n_layers not in (None, n_layers):
            raise SystemExit(f"{table.path}: a model with {n_layers} layers among tables of one with {runs.n_layers}")
        runs.n_layers = n_layers
        for c in table.rows:
            if c[4] == "paper":
                continue  # the released (absolute) recipe
            if c[13] == "diverged":
                runs.diverged += 1
                continue
            point = (c[1], int(c[2]))
            runs.site_rms[point] = float(c[3])
            runs.scores[point][site_factor(float(c[5]), float(c[3]))][seed] = float(c[14])
    return runs


def interpolate(curve: list[tuple[float, float, int]], log3f: float, reach: float) -> float | None:
    """The score at ``log3f``, linear between the two nearest measured factors; the end value within ``reach``
    (in log3 units) beyond the ends; None further out or with fewer than one measured factor."""
    if not curve:
        return None
    if log3f <= curve[0][0]:
        return curve[0][1] if curve[0][0] - log3f <= reach else None
    if log3f >= curve[-1][0]:
        return curve[-1][1] if log3f - curve[-1][0] <= reach else None
    for (a, sa, _), (b, sb, _) in itertools.pairwise(curve):
        if a <= log3f <= b:
            return sa + (sb - sa) * (log3f - a) / (b - a)
    raise AssertionError("unreachable: log3f lies within the curve")


def candidate_scores(runs: Runs, w: float, x: float, reach: float) -> dict[Point, float | None]:
    """Per point, the interpolated seed-mean validation score of ``(w, x)``."""
    out: dict[Point, float | None] = {}
    for point in sorted(runs.scores):
        ratio = runs.last_rms(point[0]) / runs.site_rms[point]
        out[point] = interpolate(runs.curve(point), math.log(x * ratio**w, 3), reach)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tables", nargs="+", type=Path)
    ap.add_argument("--weights", default="0,0.25,0.5,0.75,1", help="lr_final_stream_weight values to try")
    ap.add_argument("--factors", default=",".join(f"{3 ** (j / 2):.4g}" for j in range(11)),
                    help="x values to try (default: powers of sqrt(3) from 1 to 243)")
    ap.add_argument("--reach", type=float, default=0.25,
                    help="how far beyond a point's measured factors a candidate may fall, in log3 units (the end "
                         "value is used there)")
    args = ap.parse_args()
    runs = read_runs(args.tables)
    weights = [float(v) for v in args.weights.split(",")]
    factors = [float(v) for v in args.factors.split(",")]
    points = sorted(runs.scores)
    print(f"{len(points)} points; site-relative factors measured per point (seeds); {runs.diverged} diverged runs "
          "left out (their factor is not in the table):\n")
    print("| task | layer | site RMS | last RMS | factors (seeds) |\n|---|---|---|---|---|")
    for p in points:
        measured = ", ".join(f"x{3 ** a:.4g} ({n})" for a, _, n in runs.curve(p))
        print(f"| {p[0]} | {p[1]} | {runs.site_rms[p]:.3g} | {runs.last_rms(p[0]):.3g} | {measured} |")
    print("\nMean validation score over the points (each weighted equally); '-' where a point is out of reach:\n")
    print("| w \\ x | " + " | ".join(f"{x:.3g}" for x in factors) + " |\n|---|" + "---|" * len(factors))
    best: tuple[float, float, float] | None = None
    table: dict[tuple[float, float], dict[Point, float | None]] = {}
    for w in weights:
        cells = []
        for x in factors:
            s = table[w, x] = candidate_scores(runs, w, x, args.reach)
            if any(v is None for v in s.values()):
                cells.append("-")
                continue
            mean = statistics.mean(v for v in s.values() if v is not None)
            cells.append(f"{mean:.1f}")
            if best is None or mean > best[2]:
                best = (w, x, mean)
        print(f"| {w:g} | " + " | ".join(cells) + " |")
    if best is None:
        print("\nNo candidate is within reach at every point.")
        return
    w, x, mean = best
    print(f"\nHighest mean: w = {w:g}, x = {x:.4g} ({mean:.1f}). Per point (interpolated seed-mean validation score, "
          "its site-relative factor):\n")
    print("| task | layer | factor | score |\n|---|---|---|---|")
    for p, v in table[w, x].items():
        f = x * (runs.last_rms(p[0]) / runs.site_rms[p]) ** w
        print(f"| {p[0]} | {p[1]} | x{f:.4g} | {v:.1f} |")


if __name__ == "__main__":
    main()
