"""Issue 13's check of the default recipe against its neighbours, from single training runs.

Reads the Markdown tables that ``bench/layer_recipes.py --single-run --recipes 'lr/3,default,lr*3'`` prints (one
file per model, task and seed; any ``lr_final_stream_weight``) and prints, per (model, task, layer) point:

- each recipe's mean test accuracy over the seeds that have all three runs, how many of its runs trained, and its
  mean wall time per vector;
- the default minus the better neighbour (by mean), paired by seed, with its 95 % t interval over seeds, and
  issue 13's rule read two ways: by the point estimate (the default within 5 points of the best) and by the
  interval (``holds`` if the whole interval lies above -5, ``fails`` if it lies below, ``inconclusive`` if it
  straddles -5; one seed gives no interval);
- whether the default trains wherever a neighbour trains (a run counts as trained when its ``trained`` column
  says yes).

Then the statistic the default's step was chosen by: the mean validation score per recipe (seeds averaged within a
point, each point weighted equally, runs that did not train scored as they ended), with each neighbour minus the
default paired by point and its t interval over points. Test accuracy is printed beside it, never used to choose.

    python bench/check_grid.py bench/runs20/*.md
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other bench scripts, also when loaded by path
from recipe_tables import read_tables
from step_rules import t_interval

RECIPES = ("lr/3", "default", "lr*3")
BOUND = 5.0
"""Issue 13's bound: the default within this many points of the best recipe."""


@dataclass(frozen=True)
class Run:
    """One single run: its test accuracy (%), validation score, whether it trained, and its wall time (s)."""

    test: float
    score: float
    trained: bool
    wall: float


Key = tuple[str, str, int, str, int]  # (model, task, layer, recipe, seed)


def read_runs(paths: list[Path]) -> dict[Key, Run]:
    """``(model, task, layer, recipe, seed) -> Run`` from layer_recipes tables; a repeated key must agree."""
    runs: dict[Key, Run] = {}
    for table in read_tables(paths):
        for c in table.rows:
            if c[4] not in RECIPES:
                continue
            if c[13] == "diverged":
                run = Run(math.nan, math.nan, False, float(c[12]))
            else:
                run = Run(float(c[8].split("%")[0]), float(c[14]), c[9].startswith("yes"), float(c[12]))
            key = (table.model, c[1], int(c[2]), c[4], table.seed)
            old = runs.get(key)
            if old is not None and (old.test, old.score, old.trained) != (run.test, run.score, run.trained):
                raise SystemExit(f"{table.path}: {key} differs from an earlier table's run ({old} against {run})")
            runs[key] = run
    return runs


def rule_reading(mean: float, lo: float, hi: float) -> tuple[str, str]:
    """Issue 13's rule by the point estimate and by the interval (module docstring)."""
    by_point = "yes" if mean >= -BOUND else "**no**"
    if math.isnan(lo):
        return by_point, "no interval (1 seed)"
    return by_point, "holds" if lo >= -BOUND else "**fails**" if hi < -BOUND else "inconclusive"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tables", nargs="+", type=Path)
    args = ap.parse_args()
    runs = read_runs(args.tables)
    points = sorted({k[:3] for k in runs})
    print("| model | task | layer | seeds | lr/3 | default | lr*3 | trained (lr/3, default, lr*3) | wall s (lr/3, "
          "default, lr*3) | default - best [95 % t] | within 5: point / interval | default trains where others do |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    val: dict[str, list[float]] = defaultdict(list)
    test: dict[str, list[float]] = defaultdict(list)
    tally: dict[str, int] = defaultdict(int)
    for model, task, layer in points:
        seeds = sorted({k[4] for k in runs if k[:3] == (model, task, layer)})
        ok = [s for s in seeds if all((model, task, layer, r, s) in runs for r in RECIPES)]
        if not ok:
            continue
        got = {r: [runs[(model, task, layer, r, s)] for s in ok] for r in RECIPES}
        means = {r: statistics.mean(x.test for x in got[r]) for r in RECIPES}
        best = max(("lr/3", "lr*3"), key=lambda r: means[r])
        m, lo, hi = t_interval([a.test - b.test for a, b in zip(got["default"], got[best])])
        point, interval = rule_reading(m, lo, hi)
        tally[f"point {point}"] += 1
        tally[f"interval {interval}"] += 1
        trains = all(d.trained or not (a.trained or b.trained)
                     for d, a, b in zip(got["default"], got["lr/3"], got["lr*3"]))
        ci = "" if math.isnan(lo) else f" [{lo:+.1f}, {hi:+.1f}]"
        print(f"| {model} | {task} | {layer} | {len(ok)} | "
              + " | ".join(f"{means[r]:.1f}" for r in RECIPES) + " | "
              + ", ".join(f"{sum(x.trained for x in got[r])}/{len(ok)}" for r in RECIPES) + " | "
              + ", ".join(f"{statistics.mean(x.wall for x in got[r]):.0f}" for r in RECIPES)
              + f" | {m:+.1f} vs {best}{ci} | {point} / {interval} | {'yes' if trains else '**no**'} |")
        for r in RECIPES:
            val[r].append(statistics.mean(x.score for x in got[r]))
            test[r].append(means[r])
    n = len(val["default"])
    print(f"\nIssue 13's rule over the {n} points: " + ", ".join(f"{k}: {v}" for k, v in sorted(tally.items())))
    print(f"\nMean over the {n} points (each weighted equally) of the seed-mean validation score: "
          + ", ".join(f"{r} {statistics.mean(val[r]):.1f}" for r in RECIPES)
          + "; of the seed-mean test accuracy: " + ", ".join(f"{r} {statistics.mean(test[r]):.1f}" for r in RECIPES))
    if n > 1:
        for name, table in (("validation", val), ("test", test)):
            parts = []
            for r in ("lr/3", "lr*3"):
                m, lo, hi = t_interval([a - b for a, b in zip(table[r], table["default"])])
                parts.append(f"{r} {m:+.1f} [{lo:+.1f}, {hi:+.1f}]")
            print(f"Minus the default on {name}, paired by point, t interval over the {n} points: " + ", ".join(parts))


if __name__ == "__main__":
    main()
