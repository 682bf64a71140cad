"""The paper's LTV recipe against the book's fast recipe, side by side, same task, layer and data.

Each recipe trains in its own process (so peak resident memory is measured per recipe), on the same
600/400 train/validation split, at the same layer, from the same seed; both are evaluated on the same
test queries. Prints a Markdown table row per recipe.

    python bench/train_recipes.py [--task antonym] [--layer 15] [--n-test 400]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one(recipe: str, task: str, layer: int | None, n_test: int, seed: int) -> dict:
    from ltvlib.evaluate import EvalSet, evaluate
    from ltvlib.ltv import train_ltv
    from ltvlib.models import load_model
    from ltvlib.tasks import load_splits

    lm = load_model("smollm2-135m", device="cpu")
    layer = lm.middle_layer if layer is None else layer
    splits = load_splits(task, seed=0)
    start, cpu_start = time.perf_counter(), time.process_time()
    ltv = train_ltv(lm, task, layers=[layer], recipe=recipe, seed=seed, splits=splits, progress=False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    test = evaluate(EvalSet(lm, task, splits.test[:n_test], cache_rows=False), ltv.edits())
    return {
        "recipe": recipe, "task": task, "layer": layer, "wall_s": wall, "cpu_s": cpu, "steps": ltv.steps,
        "samples": ltv.steps * ltv.config.batch_size, "val_accuracy": ltv.best_val_accuracy,
        "test_accuracy": test.accuracy, "n_test": test.n,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--layer", type=int, default=None)
    ap.add_argument("--n-test", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.task, args.layer, args.n_test, args.seed)))
        return
    rows = []
    for recipe in ("paper", "fast"):
        cmd = [sys.executable, __file__, "--one", recipe, "--task", args.task, "--n-test", str(args.n_test),
               "--seed", str(args.seed)] + (["--layer", str(args.layer)] if args.layer is not None else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print("| recipe | task | layer | wall (s) | CPU (s) | steps | samples | val acc | test acc | peak RSS (GiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['recipe']} | {r['task']} | {r['layer']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['steps']} | {r['samples']} | "
              f"{100 * r['val_accuracy']:.1f} | {100 * r['test_accuracy']:.1f} (n={r['n_test']}) | {r['peak_rss_gib']:.2f} |")
    paper, fast = rows
    print(f"\nwall-time ratio paper/fast: {paper['wall_s'] / fast['wall_s']:.1f}x; CPU-time ratio "
          f"{paper['cpu_s'] / fast['cpu_s']:.1f}x; "
          f"test accuracy fast - paper: {100 * (fast['test_accuracy'] - paper['test_accuracy']):+.1f} points")


if __name__ == "__main__":
    main()
