"""A grid of LTV training recipes on one task and layer, in one process: CPU time, steps, accuracies.

Used to choose the ``fast`` recipe (``ltvlib.ltv.FAST_RECIPE``). Every recipe trains on the same seeded
600/400 split at the same layer from the same seed; in-process runner caches are cleared between recipes so
each pays for its own prefix caches. CPU time (all threads of this process) is reported beside wall time
because it stays comparable when other jobs share the cores.

    OMP_NUM_THREADS=1 python bench/recipe_grid.py --task antonym --layer 15 --recipes paper,fast,32x128
"""

from __future__ import annotations

import argparse
import time

from ltvlib import ltv as L
from ltvlib import memo
from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.models import load_model
from ltvlib.tasks import load_splits

GRID = {
    "paper": L.PAPER_RECIPE,
    "fast": L.FAST_RECIPE,
    "session1": L.with_config(L.FAST_RECIPE, batch_size=32, samples_per_epoch=320, epochs=10,
                              patience_after_gain=False),
    "32x128": L.with_config(L.FAST_RECIPE, batch_size=32, samples_per_epoch=128, epochs=10),
    "32x160x5": L.with_config(L.FAST_RECIPE, batch_size=32, samples_per_epoch=160, epochs=5),
    "16x80x6": L.with_config(L.FAST_RECIPE, batch_size=16, samples_per_epoch=80, epochs=6),
    "16x64x8": L.with_config(L.FAST_RECIPE, batch_size=16, samples_per_epoch=64, epochs=8),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--layer", type=int, default=15)
    ap.add_argument("--n-test", type=int, default=400)
    ap.add_argument("--recipes", default="paper,fast", help=f"comma-separated, from {', '.join(GRID)}")
    args = ap.parse_args()
    lm = load_model("smollm2-135m", device="cpu")
    splits = load_splits(args.task, seed=0)
    test = EvalSet(lm, args.task, splits.test[: args.n_test])
    print("| recipe | steps | wall (s) | CPU (s) | val acc | test acc |\n|---|---|---|---|---|---|")
    for name in args.recipes.split(","):
        if name not in GRID:
            raise SystemExit(f"unknown recipe {name!r}; allowed: {', '.join(GRID)}")
        memo.entries(lm, "ltv.runners").clear()
        wall, cpu = time.perf_counter(), time.process_time()
        ltv = L.train_ltv(lm, args.task, layers=[args.layer], recipe=GRID[name], splits=splits, progress=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        acc = evaluate(test, ltv.edits()).accuracy
        print(f"| {name} | {ltv.steps} | {wall:.1f} | {cpu:.1f} | {100 * ltv.best_val_accuracy:.1f} | {100 * acc:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
