"""bench/prefill_batches.py: the batch plans are the prefill's, and they cover every prompt once under each bound."""

from __future__ import annotations

import pytest

from ltvlib.forward import PromptRunner
from ltvlib.prompts import answer_ids, encode_prompts
from ltvlib.tasks import get_task, load_splits
from tests.bench_scripts import load_bench

prefill_batches = load_bench("prefill_batches")


@pytest.mark.parametrize("task", ["antonym", "rte"])
def test_plans_cover_every_prompt_once_within_the_bound(tiny, task):
    plans = prefill_batches.batch_plans(tiny.tokenizer, task, 40, 12, [8192, 512], batch_size=8)
    splits = load_splits(get_task(task), seed=0, n_train=40, n_val=12)
    for split, n in (("train", len(splits.train)), ("val", len(splits.validation))):
        for plan in plans[split]:
            assert sorted(i for batch in plan for i in batch) == list(range(n))
            assert all(len(batch) <= 8 for batch in plan)
    if task == "rte":  # byte-level prompts of RTE are long: the small bound splits them further
        assert len(plans["train"][1]) > len(plans["train"][0])


def test_the_plan_is_the_one_prefill_runs(tiny, monkeypatch):
    task = get_task("rte")
    train = list(load_splits(task, seed=0, n_train=40, n_val=12).train)
    plan = prefill_batches.batch_plans(tiny.tokenizer, "rte", 40, 12, [512], batch_size=8)["train"][0]
    seen: list[list[int]] = []
    from ltvlib import forward

    real = forward.token_batches

    def recording(*args, **kwargs):
        for batch in real(*args, **kwargs):
            seen.append(list(batch))
            yield batch

    monkeypatch.setattr(forward, "token_batches", recording)
    runner = PromptRunner(tiny, encode_prompts(tiny.tokenizer, task, train), tail=1)
    runner.prefill(answer_ids(tiny.tokenizer, task, [e.output for e in train]), batch_size=8, max_tokens=512)
    assert seen == plan
