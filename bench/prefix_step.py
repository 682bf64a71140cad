"""One LTV training step on 8-shot ICL prompts, injection at the last token: cached prefix vs full forward.

Same batch, same vector, same loss; the cached path computes the shared demonstration block once and each
step runs only the queries (their tokens before the last one without gradients, the last with). Reports
the median seconds per step over repeated steps and checks that the gradients agree.

    python bench/prefix_step.py [--task antonym] [--shots 8] [--batch 16] [--steps 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ltvlib.inject import VectorEdit
from ltvlib.ltv import answer_loss
from ltvlib.models import load_model
from ltvlib.prompts import answer_ids, encode_prompts
from ltvlib.runner import PromptRunner
from ltvlib.tasks import load_splits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--shots", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    lm = load_model("smollm2-135m", device="cpu")
    splits = load_splits(args.task)
    queries = list(splits.train[: args.batch * args.steps])
    demos = list(splits.train[-args.shots :])
    prompts = encode_prompts(lm.tokenizer, splits.task, queries, shared_demos=demos)
    answers = answer_ids(lm.tokenizer, splits.task, [e.output for e in queries])
    start = time.perf_counter()
    cached = PromptRunner(lm, prompts, tail=1, cache_rows=False)  # the demo block is cached once here
    setup = time.perf_counter() - start
    full = PromptRunner(lm, prompts, tail=None)
    theta = torch.zeros(lm.d_model, requires_grad=True)
    timings: dict[str, list[float]] = {"full": [], "cached": []}
    grads: dict[str, list[torch.Tensor]] = {"full": [], "cached": []}
    for step in range(args.steps):
        index = list(range(step * args.batch, (step + 1) * args.batch))
        for name, runner in (("full", full), ("cached", cached)):
            theta.grad = None
            t = time.perf_counter()
            logits, valid = runner.run(index, [VectorEdit(lm.middle_layer, -1, theta)],
                                       answers=[answers[i] for i in index])
            answer_loss(logits, [answers[i] for i in index], valid).backward()
            timings[name].append(time.perf_counter() - t)
            grads[name].append(theta.grad.clone())
    worst = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(grads["cached"], grads["full"]))
    f, c = statistics.median(timings["full"]), statistics.median(timings["cached"])
    n_tokens = len(prompts.shared) + sum(len(r) for r in prompts.rows) / len(prompts.rows)
    print(f"task {args.task}, {args.shots}-shot prompts of {n_tokens:.0f} tokens on average, batch {args.batch}, "
          f"layer {lm.middle_layer}, {args.steps} steps")
    print(f"full forward: {f:.3f} s/step; cached prefix: {c:.3f} s/step (one-off demo block: {setup:.2f} s); "
          f"speed-up {f / c:.1f}x; max relative gradient difference {worst:.1e}")


if __name__ == "__main__":
    main()
