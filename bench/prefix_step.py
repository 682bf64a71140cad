"""One LTV training step on 8-shot ICL prompts, injection at the last token: cached prefix vs full forward.

Same batches, same vector, same loss. The full path runs every token of every prompt with gradients. The
cached path is what ``train_ltv`` does with k-shot prompts: the shared demonstration block is computed once;
the first time a query is seen, its own tokens are run once without gradients (keys/values kept, and the
last token's residual stream entering every block remembered); every later step on that query runs only the
last token from the injection block on. Training visits each query many times (up to 10 epochs), so the
steady-state step is the one that matters; the first-visit step and the amortised cost over ``--epochs``
epochs are reported too. Checks that the gradients agree.

    python bench/prefix_step.py [--task antonym] [--shots 8] [--batch 16] [--batches 4] [--epochs 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ltvlib.forward import PromptRunner
from ltvlib.inject import VectorEdit
from ltvlib.ltv import answer_loss
from ltvlib.models import load_model
from ltvlib.prompts import answer_ids, encode_prompts
from ltvlib.tasks import load_splits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--shots", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--batches", type=int, default=4, help="distinct batches (each visited twice by the cached path)")
    ap.add_argument("--epochs", type=int, default=10, help="epochs for the amortised figure")
    args = ap.parse_args()
    lm = load_model("smollm2-135m", device="cpu")
    splits = load_splits(args.task)
    queries = list(splits.train[: args.batch * args.batches])
    demos = list(splits.train[-args.shots :])
    prompts = encode_prompts(lm.tokenizer, splits.task, queries, shared_demos=demos)
    answers = answer_ids(lm.tokenizer, splits.task, [e.output for e in queries])
    layer = lm.middle_layer
    start = time.perf_counter()
    cached = PromptRunner(lm, prompts, tail=1, first_layer=layer)  # the demo block is computed here
    setup = time.perf_counter() - start
    full = PromptRunner(lm, prompts, tail=None)
    theta = torch.zeros(lm.d_model, requires_grad=True)

    def step(runner: PromptRunner, index: list[int]) -> tuple[float, torch.Tensor]:
        theta.grad = None
        t = time.perf_counter()
        logits, valid = runner.run(index, [VectorEdit(layer, -1, theta)], answers=[answers[i] for i in index])
        answer_loss(logits, [answers[i] for i in index], valid).backward()
        return time.perf_counter() - t, theta.grad.clone()

    batches = [list(range(b * args.batch, (b + 1) * args.batch)) for b in range(args.batches)]
    full_times, first_times, warm_times, worst = [], [], [], 0.0
    for index in batches:
        t_full, g_full = step(full, index)
        t_first, g_first = step(cached, index)  # first visit: caches the queries' own tokens
        t_warm, g_warm = step(cached, index)  # later visits
        full_times.append(t_full)
        first_times.append(t_first)
        warm_times.append(t_warm)
        for g in (g_first, g_warm):
            worst = max(worst, float((g - g_full).abs().max() / g_full.abs().max()))
    f, c1, c = (statistics.median(x) for x in (full_times, first_times, warm_times))
    amortised = (c1 + (args.epochs - 1) * c) / args.epochs
    n_tokens = len(prompts.shared) + sum(len(r) for r in prompts.rows) / len(prompts.rows)
    print(f"task {args.task}, {args.shots}-shot prompts of {n_tokens:.0f} tokens on average, batch {args.batch}, "
          f"layer {layer}, {args.batches} batches, torch threads {torch.get_num_threads()}")
    print(f"full forward: {f:.3f} s/step")
    print(f"cached: first visit {c1:.3f} s/step, later visits {c:.3f} s/step (one-off demo block {setup:.2f} s)")
    print(f"speed-up per step: {f / c:.1f}x at later visits, {f / c1:.1f}x at the first, {f / amortised:.1f}x "
          f"amortised over {args.epochs} epochs; max relative gradient difference {worst:.1e}")


if __name__ == "__main__":
    main()
