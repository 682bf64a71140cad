"""Seeds of one LTV trained together (``ltvlib.ltv_seeds.train_ltv_seeds``) against one after another (``train_ltv``).

For each task, at ``--layer`` with the ``cpu`` profile's sizes and recipe: a first ``train_ltv`` run (seed 99)
fills the prompt store and the stream measurement, so both paths below start warm; then, alternating for
``--rounds`` rounds, seeds ``0..--seeds-1`` one after another and the same seeds together. Prints each path's wall
time, and per seed the steps, attempts and best validation accuracy of both, and the largest difference between
their vectors (relative to the vector's largest entry)::

    OMP_NUM_THREADS=1 python bench/seeds_together.py --tasks antonym,trec,sst2 --layer 15 --seeds 3 --rounds 2
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    from ltvlib.ltv import train_ltv
    from ltvlib.ltv_seeds import train_ltv_seeds
    from ltvlib.models import load_model
    from ltvlib.study.plans import get_profile
    from ltvlib.tasks import load_splits

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="antonym,trec,sst2")
    ap.add_argument("--layer", type=int, default=15)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    prof = get_profile("cpu")
    lm = load_model("smollm2-135m", device="cpu")
    seeds = list(range(args.seeds))
    print("| task | round | one after another (s) | together (s) | ratio | per seed: steps, attempts, best val. acc. "
          "(alone / together) | max rel. vector diff |")
    print("|---|---:|---:|---:|---:|---|---:|")
    totals = [0.0, 0.0]
    for task in args.tasks.split(","):
        splits = load_splits(task, seed=0, n_train=prof.n_train, n_val=prof.n_val)
        train_ltv(lm, task, layers=[args.layer], recipe=prof.recipe, seed=99, splits=splits, progress=False)
        for r in range(args.rounds):
            t = time.perf_counter()
            alone = [train_ltv(lm, task, layers=[args.layer], recipe=prof.recipe, seed=s, splits=splits, progress=False)
                     for s in seeds]
            t_alone = time.perf_counter() - t
            t = time.perf_counter()
            together = train_ltv_seeds(lm, task, seeds, layers=[args.layer], recipe=prof.recipe, splits=splits)
            t_together = time.perf_counter() - t
            totals[0] += t_alone
            totals[1] += t_together
            runs = "; ".join(f"{a.steps}/{b.steps}, {a.attempts}/{b.attempts}, {a.best_val_accuracy:.3f}/"
                             f"{b.best_val_accuracy:.3f}" for a, b in zip(alone, together))
            diff = max(float((a.vectors - b.vectors).abs().max() / a.vectors.abs().max()) for a, b in zip(alone, together))
            print(f"| {task} | {r} | {t_alone:.1f} | {t_together:.1f} | {t_alone / t_together:.2f}x | {runs} | {diff:.1e} |",
                  flush=True)
    print(f"total: one after another {totals[0]:.1f} s, together {totals[1]:.1f} s, {totals[0] / totals[1]:.2f}x")


if __name__ == "__main__":
    main()
