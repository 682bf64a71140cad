"""Function-vector indirect-effect head scan: batched cached-prefix passes against one full forward per head.

Same model, same mean head outputs, same corrupted (shuffled-label) 10-shot prompts, one run each:

- *full* (the straightforward implementation): for every prompt, one unpatched forward and one full forward
  per head at batch size 1 with that head's last-token output replaced by its mean;
- *cached* (``ltvlib.baselines.function_vector.indirect_effects``): every prompt's prefix (all tokens but the
  last) once, then all ``n_layers * n_heads`` patched copies plus the unpatched one as rows of batched
  single-token forwards over it.

Reports wall times, their ratio, the largest difference between the two indirect-effect tables and whether
the top-10 heads agree.

    python bench/fv_head_scan.py [--task antonym] [--n-ie 5] [--n-mean 20] [--shots 10]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--n-ie", type=int, default=5, help="corrupted prompts (the paper uses 25)")
    ap.add_argument("--n-mean", type=int, default=20, help="clean prompts for the mean outputs (paper: 100)")
    ap.add_argument("--shots", type=int, default=10)
    ap.add_argument("--k", type=int, default=10)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    lm = load_model(args.model, device="cpu")
    task = get_task(args.task)
    pool = load_splits(task).train
    means = mean_head_outputs(lm, clean_prompts(lm, task, pool, shots=args.shots, n=args.n_mean, seed=0))
    prompts, gold = corrupted_prompts(lm, task, pool, shots=args.shots, n=args.n_ie, seed=0)
    n_tokens = sum(len(r) for r in prompts.full_rows()) / len(prompts)
    g = lm.geometry
    times, tables = {}, {}
    for method in ("cached", "full"):
        start = time.perf_counter()
        tables[method] = indirect_effects(lm, prompts, gold, means, method=method).mean(0).view(g.n_layers, g.n_heads)
        times[method] = time.perf_counter() - start
    tops = {m: top_heads(t, args.k) for m, t in tables.items()}
    diff = float((tables["cached"] - tables["full"]).abs().max())
    scale = float(tables["full"].abs().max())
    print(f"model {lm.name}, task {task.name}, {args.n_ie} corrupted {args.shots}-shot prompts of {n_tokens:.0f} "
          f"tokens on average, {g.n_layers * g.n_heads} heads, torch threads {torch.get_num_threads()}")
    print()
    print("| path | forwards | wall time (s) | speed-up |")
    print("| --- | --- | --- | --- |")
    n_heads = g.n_layers * g.n_heads
    print(f"| full forward per head, batch 1 | {args.n_ie * (n_heads + 1)} | {times['full']:.1f} | 1.0x |")
    print(f"| cached prefix, heads batched | {args.n_ie} prefixes + single-token passes | {times['cached']:.1f} | "
          f"{times['full'] / times['cached']:.1f}x |")
    print()
    print(f"max |IE cached - IE full| = {diff:.2e} (largest |IE| {scale:.3f})")
    print(f"top-{args.k} heads identical (same order): {tops['cached'] == tops['full']}; "
          f"same set: {set(tops['cached']) == set(tops['full'])}")
    print(f"top-{args.k} (layer, head): {list(tops['full'])}")


if __name__ == "__main__":
    main()
