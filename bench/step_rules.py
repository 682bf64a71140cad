"""Compare rules that choose an LTV's step size, offline, from single training runs.

Reads the Markdown tables that ``bench/layer_recipes.py --single-run`` prints (one run per task, layer, recipe and
seed, no retries; the ``stopped by`` and ``val score`` columns are needed) and evaluates, for each rule, each
(task, layer) point and each stream-relative recipe (``lr/3`` x9, ``default`` x27, ``lr*3`` x81 the relative
learning rate of ``ltvlib.ltv.FAST_RECIPE`` / 27), the test accuracy of the run the rule keeps:

- ``fixed``: the run at the recipe's own factor (the trainer before budget retries, for runs that trained);
- ``budget``: that run, and when it trained but its budget (not patience) ended it, the run at three times the
  factor; the one with the higher validation score is kept, the first on a tie (``budget_retry_lr_factor=3``);
- ``pair``: the runs at the factor and at three times it, the higher validation score kept (twice the steps).

``--default-factor 81`` asks what the same rules give if the default's relative learning rate were x81 (its
neighbours then x27 and x243).

A retry run is, bit for bit, the run a recipe with the larger factor makes from the same seed
(``tests/test_ltv.py::test_the_larger_step_run_starts_from_the_same_vector_and_batches``), so the rules can be
evaluated from single runs without training anything again. Per point: each recipe's mean over the seeds that
have every run the rule needs, and the default's paired difference to the best other recipe with its t interval
over seeds (issue 13's rule: the default within 5 points of the best). Then the mean validation score per factor
over all points, the statistic the default factor was chosen by.

    python bench/step_rules.py runs/*.md
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other bench scripts, also when loaded by path
from recipe_tables import read_tables

FACTORS = {"lr/9": 3, "lr/3": 9, "default": 27, "lr*3": 81, "lr*9": 243}
T95 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262, 11: 2.228,
       12: 2.201, 13: 2.179, 14: 2.160, 15: 2.145, 16: 2.131, 17: 2.120, 18: 2.110, 19: 2.101, 20: 2.093}

Run = dict  # trained, test, score, stopped


def read_runs(paths: list[Path]) -> dict[tuple[str, int, int, int], Run]:
    """``(task, layer, factor, seed) -> run`` from layer_recipes tables (later files win on duplicates)."""
    runs: dict[tuple[str, int, int, int], Run] = {}
    for table in read_tables(paths):
        seed = table.seed
        weight = re.search(r"lr_final_stream_weight ([\d.]+)", table.path.read_text().splitlines()[0])
        if weight is not None and float(weight.group(1)) != 0:
            raise SystemExit(f"{table.path}: its recipes' learning rates are relative to the last block's stream "
                             f"(lr_final_stream_weight {weight.group(1)}); this script maps recipe names to "
                             "site-relative factors (tables before 2026-12-03): use bench/step_blend.py")
        for c in table.rows:
            if c[4] not in FACTORS:
                continue
            key = (c[1], int(c[2]), FACTORS[c[4]], seed)
            if c[13] == "diverged":
                runs[key] = {"trained": False, "test": math.nan, "score": math.nan, "stopped": "diverged"}
            else:
                runs[key] = {"trained": c[9].startswith("yes"), "test": float(c[8].split("%")[0]),
                             "score": float(c[14]), "stopped": c[13]}
    return runs


def kept(runs: dict, task: str, layer: int, factor: int, seed: int, rule: str) -> tuple[float, int] | None:
    """(test accuracy, runs made) of the run ``rule`` keeps for a recipe at ``factor``; None if a run is missing."""
    first = runs.get((task, layer, factor, seed))
    if first is None:
        return None
    if rule == "fixed":
        return first["test"], 1
    larger = runs.get((task, layer, 3 * factor, seed))
    if rule == "budget" and not (first["trained"] and first["stopped"] == "budget"):
        return first["test"], 1
    if larger is None:
        return None
    better = larger["trained"] and (not first["trained"] or larger["score"] > first["score"])
    return (larger if better else first)["test"], 2


def t95(n: int) -> float:
    """The two-sided 95 % Student t quantile for a mean of ``n`` values (``n - 1`` degrees of freedom): the table up
    to n = 20, then the Cornish-Fisher expansion (within 0.002 of the exact quantile there)."""
    if n in T95:
        return T95[n]
    z, df = 1.959964, n - 1
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def t_interval(d: list[float]) -> tuple[float, float, float]:
    """Mean of ``d`` with its 95 % t interval (NaN bounds for fewer than two values)."""
    m = statistics.mean(d)
    if len(d) < 2:
        return m, math.nan, math.nan
    h = t95(len(d)) * statistics.stdev(d) / math.sqrt(len(d))
    return m, m - h, m + h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tables", nargs="+", type=Path)
    ap.add_argument("--rules", default="fixed,budget,pair")
    ap.add_argument("--default-factor", type=int, default=27, choices=(9, 27, 81),
                    help="the default's factor on the relative learning rate (its neighbours: a third and three times)")
    args = ap.parse_args()
    f0 = args.default_factor
    recipes = {f"x{f0 // 3}": f0 // 3, "default": f0, f"x{3 * f0}": 3 * f0}
    runs = read_runs(args.tables)
    points = sorted({(k[0], k[1]) for k in runs})
    for rule in args.rules.split(","):
        names = list(recipes)
        print(f"\n### Rule `{rule}`, default x{f0}\n")
        print(f"| task | layer | seeds | {names[0]} | default (x{f0}) | {names[2]} | default - best (points) [95 % t] | "
              "default within 5 | runs per default vector |\n|---|---|---|---|---|---|---|---|---|")
        for task, layer in points:
            seeds = sorted({k[3] for k in runs if k[:2] == (task, layer)})
            res = {name: [kept(runs, task, layer, f, s, rule) for s in seeds] for name, f in recipes.items()}
            ok = [i for i in range(len(seeds)) if all(res[n][i] is not None for n in res)]
            if not ok:
                continue
            means = {n: statistics.mean(res[n][i][0] for i in ok) for n in res}  # type: ignore[index]
            best = max((n for n in means if n != "default"), key=lambda n: means[n])
            d = [res["default"][i][0] - res[best][i][0] for i in ok]  # type: ignore[index]
            m, lo, hi = t_interval(d)
            cost = statistics.mean(res["default"][i][1] for i in ok)  # type: ignore[index]
            holds = "yes" if m >= -5 else "**no**"
            ci = "" if math.isnan(lo) else f" [{lo:+.1f}, {hi:+.1f}]"
            print(f"| {task} | {layer} | {len(ok)} | {means[names[0]]:.1f} | {means['default']:.1f} | "
                  f"{means[names[2]]:.1f} | {m:+.1f} vs {best}{ci} | {holds} | {cost:.1f} |")
    print("\n### Mean validation score per factor (seeds averaged within a point)\n")
    print("| task | layer | x9 | x27 | x81 | x243 | best on validation |\n|---|---|---|---|---|---|---|")
    by_factor: dict[int, list[float]] = defaultdict(list)
    common = [p for p in points if all(any(k[:3] == (*p, f) for k in runs) for f in (9, 27, 81, 243))]
    for task, layer in common:
        row = {}
        for f in (9, 27, 81, 243):
            scores = [r["score"] for k, r in runs.items() if k[:3] == (task, layer, f) and r["trained"]]
            row[f] = statistics.mean(scores) if scores else 0.0
            by_factor[f].append(row[f])
        print(f"| {task} | {layer} | " + " | ".join(f"{row[f]:.1f}" for f in row) + f" | x{max(row, key=row.__getitem__)} |")
    print()
    print(f"Over the {len(common)} points with runs at x9, x27, x81 and x243 (each point weighted equally): " + ", ".join(
        f"x{f} {statistics.mean(v):.1f}" for f, v in sorted(by_factor.items())))
    if len(common) > 1:
        diffs = []
        for f in (f for f in (9, 27, 81, 243) if f != f0):
            m, lo, hi = t_interval([a - b for a, b in zip(by_factor[f], by_factor[f0])])
            diffs.append(f"x{f} {m:+.1f} [{lo:+.1f}, {hi:+.1f}]")
        print(f"Minus x{f0}, paired by point, t interval over the {len(common)} points: " + ", ".join(diffs))


if __name__ == "__main__":
    main()
