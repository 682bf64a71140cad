"""bench/label_vocab_step.py: the label-restricted step computes the full step's logits for the label tokens only."""

from __future__ import annotations

import torch

from ltvlib.forward import PromptRunner
from ltvlib.inject import VectorEdit
from ltvlib.prompts import answer_ids, encode_prompts
from ltvlib.sites import unembedding
from ltvlib.tasks import get_task, load_splits
from tests.bench_scripts import load_bench

label_vocab_step = load_bench("label_vocab_step")


def test_label_rows_only_gives_the_label_columns_of_the_full_logits_and_puts_the_head_back(tiny):
    task = get_task("antonym")
    train = list(load_splits(task).train)[:4]
    prompts = encode_prompts(tiny.tokenizer, task, train)
    answers = answer_ids(tiny.tokenizer, task, [e.output for e in train])
    runner = PromptRunner(tiny, prompts, tail=1)
    theta = torch.randn(tiny.d_model, generator=torch.Generator().manual_seed(0))
    edits = [VectorEdit(1, -1, theta)]
    head = unembedding(tiny)
    weight = head.weight
    ids = [7, 3, 11]
    full, _ = runner.run(range(4), edits, answers=answers)
    with label_vocab_step.label_rows_only(head, ids):
        cut, _ = runner.run(range(4), edits, answers=answers)
        assert head.weight.shape[0] == len(ids)
    assert head.weight is weight  # the model's own (possibly tied) weight is back
    assert cut.shape == (*full.shape[:-1], len(ids))
    torch.testing.assert_close(cut, full[..., ids], rtol=1e-5, atol=1e-5)
