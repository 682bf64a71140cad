"""Training one LTV at the non-final position P={4}: full forwards against the per-row tail cache.

The paper's ``P={4}`` is position 4 counted from the start of the prompt, so it is at a different distance
from the end of each prompt. ``train_ltv`` with ``prefix_cache=False`` (the old path, ``--paths full``) runs
every token of every prompt with gradients at every step and validation pass; with the default fast recipe
(``--paths tail``) each prompt is cached up to its own position 4 (:class:`ltvlib.forward.PositionTail`) and
only the tokens from there on run. Same recipe, seed, batches and early stopping otherwise, so the vectors
agree up to float rounding (and the early-stopping decisions with them, unless a validation score ties).

Reports, per path: training wall time and this process's CPU time (less sensitive than wall time to other
jobs sharing the cores; everything :func:`ltvlib.ltv.train_ltv` does: caches, stream RMS,
steps, validation passes), steps, time per step, the kept vector's validation accuracy, the test accuracy of
the vector evaluated through its own path (and the evaluation time), then the vectors' max difference.

    PYTHONPATH=$PWD python bench/position_tail.py [--task antonym] [--layer 15] [--position 4] [--n-test 200] [--paths full,tail]
"""

from __future__ import annotations

import argparse
import time

import torch

from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.forward import tail_needed
from ltvlib.ltv import FAST_RECIPE, train_ltv, with_config
from ltvlib.models import load_model
from ltvlib.tasks import load_splits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--layer", type=int, default=15)
    ap.add_argument("--position", type=int, default=4)
    ap.add_argument("--n-test", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paths", default="full,tail",
                    help="comma-separated, run in this order: full = prefix_cache=False (the old path), tail = the "
                         "per-row tail cache")
    args = ap.parse_args()
    lm = load_model(args.model, device="cpu")
    splits = load_splits(args.task)
    test = list(splits.test[: args.n_test])
    positions = (args.position,)
    paths = args.paths.split(",")
    if not paths or any(p not in ("full", "tail") for p in paths):
        raise SystemExit(f"--paths takes full and/or tail, got {args.paths!r}")
    import ltvlib

    print(f"ltvlib from {ltvlib.__file__}")  # run from a checkout with PYTHONPATH=$PWD, or an installed copy is used
    print(f"{args.model}, task {args.task}, layer {args.layer}, P={{{args.position}}}, recipe fast, seed "
          f"{args.seed}, {len(test)} test queries, torch threads {torch.get_num_threads()}")
    vectors = {}
    for path in paths:
        config = with_config(FAST_RECIPE, prefix_cache=path == "tail")
        t, cpu = time.perf_counter(), time.process_time()
        ltv = train_ltv(lm, args.task, layers=[args.layer], positions=positions, recipe=config, seed=args.seed,
                        splits=splits, progress=False)
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        t = time.perf_counter()
        es = EvalSet(lm, args.task, test, tail=tail_needed(positions) if path == "tail" else None, cache_rows=False)
        r = evaluate(es, ltv.edits())
        eval_seconds = time.perf_counter() - t
        vectors[path] = ltv.vectors
        print(f"{path:>4}: train {seconds:7.1f} s wall, {cpu:7.1f} s CPU, {ltv.steps} steps ({seconds / max(ltv.steps, 1):.2f} s/step "
              f"incl. validation), best val acc {ltv.best_val_accuracy:.3f}, trained {ltv.trained}; "
              f"test acc {r.accuracy:.3f} (n={len(test)}), eval {eval_seconds:.1f} s")
    if len(vectors) == 2:
        diff = float((vectors["tail"] - vectors["full"]).abs().max())
        scale = float(vectors["full"].abs().max())
        print(f"max |tail - full| vector difference {diff:.2e} (max |full| {scale:.2e})")


if __name__ == "__main__":
    main()
