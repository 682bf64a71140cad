"""Did the LTV learn a label task? One row per (model, task) at the model's middle layer, default recipe.

For each of ``--models`` and ``--tasks`` (classification tasks), trains one LTV with the ``--profile``'s fast
recipe at the middle layer (``--layer`` to override; seed ``--seed``) on the seeded split, sizes from the profile
unless ``--n-train``/``--n-val``/``--n-test`` say otherwise, and measures on the validation and test splits:

- the LTV's first-token accuracy (the paper's metric: argmax over the whole vocabulary), with the validation
  accuracy's 95 % Wilson interval, and its balanced accuracy (the mean per-label recall);
- the model's zero-shot accuracy *within the labels* (no vector; argmax over the labels' first tokens only);
- the majority label's share (what always answering the most frequent label scores);
- ``learned``: the trainer's own rule (:func:`ltvlib.ltv.learned_rule`): whether the lower 95 % Wilson bound of the
  LTV's validation accuracy lies above max(zero-shot within labels, majority share) on the whole validation split
  (the trainer judges the first 200 validation queries, so its ``trained`` flag, also shown, can differ on a larger
  split). A vector that does not clear both is not evidence of a learned task;
- the trainer's attempts (a run that did not learn is retried at a smaller step), the best validation score of
  each, and the peak learning rate of the kept one.

The validation split also chose the kept vector (early stopping), so its accuracy is slightly optimistic; the
test columns are the held-out check::

    OMP_NUM_THREADS=1 python bench/label_row.py --models gemma3-270m,smollm2-135m --tasks sst2,trec --profile cpu \\
        --n-train 300 --n-val 200 --n-test 200
"""

from __future__ import annotations

import argparse
import time
from collections import Counter


def majority_share(outputs: list[str]) -> float:
    """The share of the most frequent label among ``outputs``."""
    return Counter(outputs).most_common(1)[0][1] / len(outputs)


def learned(val_correct: int, n_val: int, zero_shot: float, majority: float) -> tuple[bool, float]:
    """(whether the lower 95 % Wilson bound of ``val_correct / n_val`` is above both baselines, that bound): the
    trainer's own rule, :func:`ltvlib.ltv.learned_rule`, on the whole validation split."""
    from ltvlib.ltv import learned_rule

    return learned_rule(val_correct / n_val, n_val, zero_shot, majority)


def measure(lm, task_name: str, *, profile: str = "cpu", layer: int | None = None, seed: int = 0,
            n_train: int | None = None, n_val: int | None = None, n_test: int | None = None) -> dict:
    """Train one LTV of ``task_name`` and measure it and its baselines on validation and test."""
    from ltvlib.evaluate import EvalSet, evaluate
    from ltvlib.ltv import train_ltv
    from ltvlib.study.plans import get_profile
    from ltvlib.tasks import get_task, load_splits

    task = get_task(task_name)
    if not task.labels:
        raise ValueError(f"{task.name} is not a classification task")
    prof = get_profile(profile)
    n_train = n_train or prof.n_train
    n_val = n_val or prof.n_val
    splits = load_splits(task, seed=0, n_train=n_train, n_val=n_val)
    n_test = n_test or prof.n_test or len(splits.test)
    layer = lm.middle_layer if layer is None else layer
    t = time.perf_counter()
    ltv = train_ltv(lm, task, layers=[layer], recipe=prof.recipe, seed=seed, splits=splits, progress=False)
    seconds = time.perf_counter() - t
    row = {"model": lm.name, "task": task.name, "layer": layer, "n_layers": lm.n_layers, "seed": seed,
           "n_train": len(splits.train), "steps": ltv.training.steps, "seconds": seconds,
           "trained": ltv.training.trained, "val_metric": ltv.training.val_metric,
           "best_val_score": ltv.training.best_val_score, "attempts": ltv.training.attempts,
           "attempt_scores": list(ltv.training.attempt_scores), "lr": list(ltv.training.effective_lr)}
    for name, examples in (("val", list(splits.validation)), ("test", list(splits.test[:n_test]))):
        evalset = EvalSet(lm, task, examples)
        with_ltv = evaluate(evalset, ltv.edits())
        plain = evaluate(evalset)
        row[name] = {"n": with_ltv.n, "correct": sum(with_ltv.correct), "accuracy": with_ltv.accuracy,
                     "balanced": with_ltv.balanced_accuracy, "zero_shot_labels": plain.label_accuracy,
                     "majority": majority_share([e.output for e in examples])}
    v = row["val"]
    row["learned"], row["val_wilson_low"] = learned(v["correct"], v["n"], v["zero_shot_labels"], v["majority"])
    return row


HEADER = ("| model | task | layer | attempts (best val score each) | peak lr | steps | trainer's `trained` | "
          "val acc (n) | 95 % low | val balanced | "
          "val zero-shot in labels | val majority | test acc (n) | test balanced | test zero-shot in labels | "
          "test majority | learned |")


def line(r: dict) -> str:
    v, t = r["val"], r["test"]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}"

    scores = ", ".join(f"{x:.3f}" for x in r["attempt_scores"])
    lr = ", ".join(f"{x:.3g}" for x in r["lr"]) or "-"
    return (f"| {r['model']} | {r['task']} | {r['layer']} of {r['n_layers']} | {r['attempts']} ({scores}) | {lr} | "
            f"{r['steps']} | {r['trained']} | "
            f"{pct(v['accuracy'])} ({v['n']}) | {pct(r['val_wilson_low'])} | {pct(v['balanced'])} | "
            f"{pct(v['zero_shot_labels'])} | {pct(v['majority'])} | {pct(t['accuracy'])} ({t['n']}) | "
            f"{pct(t['balanced'])} | {pct(t['zero_shot_labels'])} | {pct(t['majority'])} | "
            f"{'yes' if r['learned'] else 'no'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gemma3-270m,smollm2-135m")
    ap.add_argument("--tasks", default="sst2,trec")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--layer", type=int, default=None, help="default: each model's middle layer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-train", type=int, default=None)
    ap.add_argument("--n-val", type=int, default=None)
    ap.add_argument("--n-test", type=int, default=None)
    args = ap.parse_args()
    from ltvlib.models import load_model

    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|")
    for model in args.models.split(","):
        lm = load_model(model, device="cpu")
        for task in args.tasks.split(","):
            r = measure(lm, task, profile=args.profile, layer=args.layer, seed=args.seed, n_train=args.n_train,
                        n_val=args.n_val, n_test=args.n_test)
            print(line(r), flush=True)
        del lm


if __name__ == "__main__":
    main()
