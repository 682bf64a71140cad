"""What would a label-restricted unembedding save in a training step? (issue 15, point 2)

Times one LTV training step (forward from the injection block over warm prefix caches, the loss, backward to the
vector) on 16 zero-shot prompts of a classification task at the middle layer, twice in alternation:

- ``full``: today's loss, the gold label's negative log-probability under a softmax over the **whole vocabulary**
  (the paper's loss; the argmax metric is over the whole vocabulary too);
- ``labels``: the unembedding cut to the task's label tokens (its rows for each label's first token), so the softmax
  runs over the label set only: the most a label-restricted loss could save in the step.

The second is a different objective, not a faster way to compute the first: a softmax over k labels drops
``logsumexp`` over the other tokens, so its gradient no longer pushes down tokens outside the label set, which the
full-vocabulary argmax metric still sees. This script measures what that change would buy; it does not argue for it.

    OMP_NUM_THREADS=1 python bench/label_vocab_step.py --task sst2 --rows 16 --reps 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def label_rows_only(head: torch.nn.Linear, ids: list[int]) -> Iterator[None]:
    """Within the block, ``head`` maps to ``len(ids)`` logits (its rows ``ids``); its own weight is put back after."""
    weight = head.weight
    head.weight = torch.nn.Parameter(weight.detach()[ids].clone(), requires_grad=False)
    try:
        yield
    finally:
        head.weight = weight


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5, help="alternating rounds of 5 steps per variant")
    args = ap.parse_args()

    from ltvlib.forward import tail_needed
    from ltvlib.inject import VectorEdit
    from ltvlib.ltv import _training_prompts, answer_loss
    from ltvlib.models import load_model
    from ltvlib.prompts import answer_ids
    from ltvlib.sites import unembedding
    from ltvlib.tasks import get_task, load_splits

    lm = load_model(args.model, device="cpu")
    task = get_task(args.task)
    if task.labels is None:
        raise SystemExit(f"--task {args.task!r} has no label set; give a classification task (sst2, trec, snli, rte)")
    layer = lm.middle_layer
    train = list(load_splits(task, seed=0, n_train=600, n_val=200).train)
    data = _training_prompts(lm, task, train, 0, 1, tail_needed((-1,)), 0, layer)
    runner = data.runners[0]
    answers = answer_ids(lm.tokenizer, task, [e.output for e in train])
    first = sorted({a[0] for a in answers})
    where = {t: i for i, t in enumerate(first)}
    head = unembedding(lm)
    g = torch.Generator().manual_seed(0)

    def step(restricted: bool) -> None:
        idx = torch.randperm(len(train), generator=g)[: args.rows].tolist()
        a = [answers[i][:1] for i in idx]  # first token: the label's identity (tasks' labels start distinctly)
        theta = torch.zeros(lm.d_model, requires_grad=True)
        if restricted:
            with label_rows_only(head, first):
                logits, valid = runner.run(idx, [VectorEdit(layer, -1, theta)], answers=a)
            a = [[where[t] for t in row] for row in a]
        else:
            logits, valid = runner.run(idx, [VectorEdit(layer, -1, theta)], answers=a)
        answer_loss(logits, a, valid).backward()

    for restricted in (False, True, False, True):  # warm-up (each row's cache is filled on first use)
        step(restricted)
    times: dict[str, list[float]] = {"full": [], "labels": []}
    for _ in range(args.reps):
        for name, restricted in (("full", False), ("labels", True)):
            t = time.perf_counter()
            for _ in range(5):
                step(restricted)
            times[name].append((time.perf_counter() - t) / 5)
    full, labels = min(times["full"]), min(times["labels"])
    print(f"{args.model} {args.task} layer {layer}, {args.rows} rows, vocabulary {head.weight.shape[0]} vs "
          f"{len(first)} label tokens, threads {torch.get_num_threads()}")
    for name, seconds in times.items():
        print(f"  {name:6s} step ms: min {min(seconds) * 1e3:.1f}, median {statistics.median(seconds) * 1e3:.1f}"
              f" over {args.reps} rounds of 5")
    print(f"  label-restricted step / full step (min): {labels / full:.3f}")


if __name__ == "__main__":
    main()
