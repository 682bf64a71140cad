"""Which prompts the prefill's token bound splits differently: batches at ``--bounds`` for LTV training and validation.

``PromptRunner.prefill`` forms batches of at most 32 rows sorted by length, bounded by padded tokens
(``ltvlib.forward.PREFILL_BATCH_TOKENS``, 8,192 before session 23 and 2,048 since). This prints, for the zero-shot
LTV training prompts (answers teacher-forced, as training prefills them) and validation prompts of each task at the
``cpu`` sizes, how many forwards each bound makes and whether the batches are the same. Where they are the same,
the bound changed no computation: a time difference there is not the bound's doing. Tokenisation only, no forward::

    python bench/prefill_batches.py
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def batch_plans(tokenizer: Any, task_name: str, n_train: int, n_val: int, bounds: Sequence[int],
                batch_size: int = 32) -> dict[str, list[list[list[int]]]]:
    """Per split (``train``, ``val``), the prefill's batches (row indices) under each bound in ``bounds``."""
    from ltvlib.forward import token_batches
    from ltvlib.prompts import answer_ids, encode_prompts
    from ltvlib.tasks import get_task, load_splits

    task = get_task(task_name)
    splits = load_splits(task, seed=0, n_train=n_train, n_val=n_val)
    plans = {}
    for split, examples, teacher_forced in (("train", list(splits.train), True), ("val", list(splits.validation), False)):
        prompts = encode_prompts(tokenizer, task, examples)
        answers = answer_ids(tokenizer, task, [e.output for e in examples]) if teacher_forced else [[]] * len(examples)
        lengths = [len(prompts.shared) + len(row) + len(a) for row, a in zip(prompts.rows, answers)]
        # the order PromptRunner.prefill uses: by prompt length, then answer length, then index
        order = sorted(range(len(lengths)), key=lambda i: (len(prompts.rows[i]), len(answers[i]), i))
        plans[split] = [list(token_batches(order, lengths, batch_size, bound)) for bound in bounds]
    return plans


def main() -> None:
    from ltvlib.models import load_model
    from ltvlib.study.plans import get_profile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="capital,capitalize,antonym,trec,sst2,snli,rte")
    ap.add_argument("--bounds", default="8192,2048", help="two token bounds: before, after")
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    bounds = [int(b) for b in args.bounds.split(",")]
    prof = get_profile("cpu")
    tokenizer = load_model(args.model, device="cpu").tokenizer
    print(f"| task | split | prompts | forwards at {bounds[0]:,} | at {bounds[1]:,} | same batches |")
    print("|---|---|---:|---:|---:|---|")
    for name in args.tasks.split(","):
        for split, (before, after) in batch_plans(tokenizer, name, prof.n_train, prof.n_val, bounds).items():
            rows = sum(len(b) for b in before)
            print(f"| {name} | {split} | {rows} | {len(before)} | {len(after)} | {'yes' if before == after else 'no'} |")


if __name__ == "__main__":
    main()
