"""Function-vector indirect-effect head scan: batched cached-prefix passes against one full forward per head.

Same model, same mean head outputs, same corrupted (shuffled-label) 10-shot prompts, one run each:

- *full* (the straightforward implementation): for every prompt, one unpatched forward and one full forward
  per head at batch size 1 with that head's last-token output replaced by its mean;
- *cached* (``ltvlib.baselines.function_vector.indirect_effects``): every prompt's prefix (all tokens but the
  last) once, then all ``n_layers * n_heads`` patched copies plus the unpatched one as positions of one sequence
  after it, each attending the prefix and itself (``ltvlib.kv_cache.forward_alternatives``).

Reports wall times, their ratio, the largest difference between the two indirect-effect tables and whether
the top-10 heads agree.

    OMP_NUM_THREADS=1 python bench/fv_head_scan.py [--model smollm2-135m] [--task antonym] [--n-ie 5] [--n-mean 20] [--shots 10]
"""

from __future__ import annotations

import argparse
import time

import torch

from ltvlib.baselines.function_vector import (
    clean_prompts,
    corrupted_prompts,
    indirect_effects,
    mean_head_outputs,
    top_heads,
)
from ltvlib.models import load_model
from ltvlib.tasks import get_task, load_splits


def measure(lm, task_name: str, *, n_ie: int = 5, n_mean: int = 20, shots: int = 10, k: int = 10) -> dict:
    """Both paths on the same prompts: wall times, their ratio, the tables' largest difference, the top-k heads."""
    task = get_task(task_name)
    pool = load_splits(task).train
    with torch.no_grad():
        means = mean_head_outputs(lm, clean_prompts(lm, task, pool, shots=shots, n=n_mean, seed=0))
        prompts, gold = corrupted_prompts(lm, task, pool, shots=shots, n=n_ie, seed=0)
        g = lm.geometry
        times, tables = {}, {}
        for method in ("cached", "full"):
            start = time.perf_counter()
            tables[method] = indirect_effects(lm, prompts, gold, means, method=method).mean(0).view(g.n_layers, g.n_heads)
            times[method] = time.perf_counter() - start
    tops = {m: top_heads(t, k) for m, t in tables.items()}
    return {"model": lm.name, "task": task.name, "n_ie": n_ie, "shots": shots, "k": k,
            "tokens": sum(len(r) for r in prompts.full_rows()) / len(prompts), "heads": g.n_layers * g.n_heads,
            "seconds": times, "ratio": times["full"] / times["cached"],
            "max_abs_diff": float((tables["cached"] - tables["full"]).abs().max()),
            "largest_ie": float(tables["full"].abs().max()), "same_order": tops["cached"] == tops["full"],
            "same_set": set(tops["cached"]) == set(tops["full"]), "top": list(tops["full"])}


def report(m: dict) -> str:
    t = m["seconds"]
    return "\n".join([
        (f"model {m['model']}, task {m['task']}, {m['n_ie']} corrupted {m['shots']}-shot prompts of {m['tokens']:.0f} "
         f"tokens on average, {m['heads']} heads, torch threads {torch.get_num_threads()}"), "",
        "| path | forwards | wall time (s) | speed-up |", "| --- | --- | --- | --- |",
        f"| full forward per head, batch 1 | {m['n_ie'] * (m['heads'] + 1)} | {t['full']:.1f} | 1.0x |",
        (f"| cached prefix, heads batched | {m['n_ie']} prefixes + single-token passes | {t['cached']:.1f} | "
         f"{m['ratio']:.1f}x |"), "",
        f"max |IE cached - IE full| = {m['max_abs_diff']:.2e} (largest |IE| {m['largest_ie']:.3f})",
        f"top-{m['k']} heads identical (same order): {m['same_order']}; same set: {m['same_set']}",
        f"top-{m['k']} (layer, head): {m['top']}"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--n-ie", type=int, default=5, help="corrupted prompts (the paper uses 25)")
    ap.add_argument("--n-mean", type=int, default=20, help="clean prompts for the mean outputs (paper: 100)")
    ap.add_argument("--shots", type=int, default=10)
    ap.add_argument("--k", type=int, default=10)
    args = ap.parse_args()
    lm = load_model(args.model, device="cpu")
    print(report(measure(lm, args.task, n_ie=args.n_ie, n_mean=args.n_mean, shots=args.shots, k=args.k)))


if __name__ == "__main__":
    main()
