"""Recipe time-to-accuracy: the book's fast LTV recipe against the released ("paper") recipe, side by side.

Both recipes train one LTV on the same task, model, layer (default: the middle one), seed and split (the
``--profile``'s training and validation sizes), each in its own child process (so each pays for its own caches
and its peak resident memory is its own), one after the other in one run; both vectors are evaluated on the same
test queries. Prints one Markdown row per recipe and the ratio of the two wall (and CPU) times, with the test
accuracy difference beside it: a speed-up is only a speed-up if the fast recipe's accuracy is not below the
paper's::

    OMP_NUM_THREADS=1 python bench/recipes.py --model smollm2-135m --profile cpu --task antonym
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

RECIPE_ORDER = ("paper", "fast")


def measure(lm, task: str, recipe: str, *, profile: str, layer: int | None = None, seed: int = 0,
            n_test: int | None = None) -> dict:
    """Train one LTV of ``task`` with ``recipe`` (as ``profile`` runs it) and evaluate it on the test split."""
    from ltvlib.evaluate import EvalSet, evaluate
    from ltvlib.ltv import train_ltv
    from ltvlib.study.plans import get_profile
    from ltvlib.tasks import load_splits

    prof = get_profile(profile, recipe)
    layer = lm.middle_layer if layer is None else layer
    splits = load_splits(task, seed=0, n_train=prof.n_train, n_val=prof.n_val)
    n_test = n_test if n_test is not None else (prof.n_test or len(splits.test))
    start, cpu_start = time.perf_counter(), time.process_time()
    ltv = train_ltv(lm, task, layers=[layer], recipe=prof.recipe, seed=seed, splits=splits, progress=False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    test = evaluate(EvalSet(lm, task, splits.test[:n_test]), ltv.edits())
    return {
        "recipe": recipe, "model": lm.name, "task": task, "layer": layer, "wall_s": wall, "cpu_s": cpu,
        "steps": ltv.training.steps, "samples": ltv.training.steps * ltv.config.batch_size,
        "trained": ltv.training.trained,
        "val_accuracy": ltv.training.best_val_accuracy, "test_accuracy": test.accuracy, "n_test": test.n,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def compare(rows: list[dict]) -> dict:
    """The ratio of the paper recipe's times to the fast recipe's, and the fast minus paper test accuracy."""
    by = {r["recipe"]: r for r in rows}
    paper, fast = by["paper"], by["fast"]
    return {"wall_ratio": paper["wall_s"] / fast["wall_s"], "cpu_ratio": paper["cpu_s"] / fast["cpu_s"],
            "test_points": 100 * (fast["test_accuracy"] - paper["test_accuracy"])}


def table(rows: list[dict]) -> str:
    lines = [("| recipe | model | task | layer | wall (s) | CPU (s) | steps | samples | trained | val acc | test acc "
              "| peak RSS (GiB) |"), "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['recipe']} | {r['model']} | {r['task']} | {r['layer']} | {r['wall_s']:.1f} | "
                     f"{r['cpu_s']:.1f} | {r['steps']} | {r['samples']} | {r['trained']} | "
                     f"{100 * r['val_accuracy']:.1f} | {100 * r['test_accuracy']:.1f} (n={r['n_test']}) | "
                     f"{r['peak_rss_gib']:.2f} |")
    c = compare(rows)
    lines.append(f"\nratio paper/fast: wall {c['wall_ratio']:.2f}x, CPU {c['cpu_ratio']:.2f}x; "
                 f"test accuracy fast - paper {c['test_points']:+.1f} points")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--profile", default="cpu", help="sizes (training, validation, test queries) and the fast recipe")
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--layer", type=int, default=None, help="default: the model's middle layer")
    ap.add_argument("--n-test", type=int, default=None, help="default: the profile's")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--one", choices=RECIPE_ORDER, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        from ltvlib.models import load_model

        lm = load_model(args.model, device="cpu")
        print(json.dumps(measure(lm, args.task, args.one, profile=args.profile, layer=args.layer, seed=args.seed,
                                 n_test=args.n_test)))
        return
    rows = []
    for recipe in RECIPE_ORDER:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--one", recipe, "--model", args.model,
               "--profile", args.profile, "--task", args.task, "--seed", str(args.seed)]
        cmd += ["--layer", str(args.layer)] if args.layer is not None else []
        cmd += ["--n-test", str(args.n_test)] if args.n_test is not None else []
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(table(rows))


if __name__ == "__main__":
    main()
