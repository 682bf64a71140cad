"""Evaluation: first-token accuracy over the full vocabulary and over labels, balanced accuracy, per example, any
grouping."""

from __future__ import annotations

import pytest
import torch

from ltvlib.evaluate import EvalSet, balanced_accuracy, evaluate
from ltvlib.inject import VectorEdit
from ltvlib.kv_cache import forward_tokens
from ltvlib.prompts import pad_left
from ltvlib.tasks import Example, get_task, load_splits


def test_accuracy_matches_a_plain_forward(tiny):
    task = get_task("antonym")
    examples = list(load_splits(task).test[:10])
    es = EvalSet(tiny, task, examples)
    result = evaluate(es, batch_size=4)
    ids, mask = pad_left(es.groups[0][1].prompts.full_rows(), tiny.tokenizer.pad_token_id)
    logits, _ = forward_tokens(tiny, ids, mask)
    top = logits[:, -1].argmax(-1).tolist()
    assert result.predicted == [tiny.tokenizer.decode([t]) for t in top]
    assert result.correct == [t == g for t, g in zip(top, es.gold_first)]
    assert result.n == 10 and result.label_accuracy is None


def test_a_vector_that_writes_the_answer_gets_it_right(llama):
    """Replacing the last block's output by the gold token's unembedding direction makes it the argmax."""
    task = get_task("antonym")
    examples = [Example("hot", "cold")] * 3
    es = EvalSet(llama, task, examples)
    gold = es.gold_first[0]
    direction = llama.model.lm_head.weight[gold].detach() * 100
    result = evaluate(es, [VectorEdit(llama.n_layers - 1, -1, direction, site="block_output", mode="replace")])
    assert result.accuracy == 1.0


def test_label_restricted_accuracy_and_shared_demo_groups(llama):
    task = get_task("sst2")
    splits = load_splits(task, n_train=40, n_val=8)
    examples = list(splits.test[:9])
    per_query = evaluate(EvalSet(llama, task, examples, shots=2, demo_pool=splits.train))
    grouped = EvalSet(llama, task, examples, shots=2, demo_pool=splits.train, demo_sets=3)
    assert [len(ix) for ix, _ in grouped.groups] == [3, 3, 3]
    result = evaluate(grouped, batch_size=2)
    for r in (per_query, result):
        assert r.label_accuracy is not None and len(r.label_predicted) == 9
        assert set(r.label_predicted) <= set(task.labels)
        assert all(0.0 <= p <= 1.0 for p in r.gold_prob)
    # grouping only changes which demonstrations a query sees: each group equals a per-group evaluation
    index, runner = grouped.groups[1]
    logits, _ = runner.run(range(len(index)))
    assert [result.predicted[i] for i in index] == [llama.tokenizer.decode([t]) for t in logits[:, -1].argmax(-1).tolist()]


def test_evaluate_is_deterministic(llama):
    splits = load_splits("sst2", n_train=40, n_val=8)
    a = evaluate(EvalSet(llama, "sst2", splits.test[:6], shots=2, demo_pool=splits.train, seed=1))
    b = evaluate(EvalSet(llama, "sst2", splits.test[:6], shots=2, demo_pool=splits.train, seed=1))
    assert a.to_dict() == b.to_dict()
    assert torch.isfinite(torch.tensor(a.gold_prob)).all()


def test_balanced_accuracy_is_the_mean_recall_over_the_labels_present():
    # a majority-label predictor on a 3:1 pool: 75 % accuracy, 50 % balanced
    correct, gold = [True, True, True, False], ["pos", "pos", "pos", "neg"]
    assert balanced_accuracy(correct, gold) == pytest.approx(0.5, abs=1e-15)
    # three labels, recalls 1/2, 1 and 0 (a label with no examples never enters the mean)
    correct = [True, False, True, True, False]
    gold = ["a", "a", "b", "b", "c"]
    assert balanced_accuracy(correct, gold) == pytest.approx((0.5 + 1.0 + 0.0) / 3, abs=1e-15)
    assert balanced_accuracy([True] * 4, ["x", "y", "y", "y"]) == 1.0
    with pytest.raises(ValueError, match="as many gold labels as results, got 1 and 2"):
        balanced_accuracy([True, False], ["a"])


def test_evaluate_reports_balanced_accuracy_for_classification_only(llama):
    splits = load_splits("sst2", n_train=40, n_val=8)
    examples = list(splits.test[:12])
    r = evaluate(EvalSet(llama, "sst2", examples))
    assert r.balanced_accuracy == pytest.approx(balanced_accuracy(r.correct, [e.output for e in examples]), abs=1e-15)
    assert evaluate(EvalSet(llama, "antonym", load_splits("antonym").test[:4])).balanced_accuracy is None


def test_token_batches_bound_rows_and_padded_tokens():
    """Every row once, in order; each batch within both bounds unless it is a single over-long row."""
    import itertools
    import random

    from ltvlib.forward import token_batches

    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.randint(1, 300) for _ in range(rng.randint(0, 40))]
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        rows, tokens = rng.randint(1, 10), rng.randint(1, 1000)
        batches = list(token_batches(order, lengths, rows, tokens))
        assert [i for b in batches for i in b] == order
        for b in batches:
            assert 1 <= len(b) <= rows
            assert len(b) * max(lengths[i] for i in b) <= tokens or len(b) == 1
        # greedy: a batch closed early could not have taken the next row
        for b, nxt in itertools.pairwise(batches):
            assert len(b) == rows or (len(b) + 1) * max(lengths[i] for i in [*b, nxt[0]]) > tokens
    with pytest.raises(ValueError, match="max_tokens >= 1"):
        list(token_batches([0], [3], 1, 0))


def test_a_token_bound_changes_batches_not_answers(llama):
    """Ten-shot prompts evaluated 64 rows at a time and a few rows at a time (a small token bound) agree, and the
    bound really splits the batches."""
    task = get_task("antonym")
    splits = load_splits(task)
    es_wide = EvalSet(llama, task, splits.test[:12], shots=10, demo_pool=splits.train, seed=3)
    es_narrow = EvalSet(llama, task, splits.test[:12], shots=10, demo_pool=splits.train, seed=3)
    runner = es_narrow.groups[0][1]
    calls = []
    original = runner.run
    runner.run = lambda index, edits: calls.append(len(index)) or original(index, edits)  # type: ignore[method-assign]
    longest = max(len(r) for r in runner.prompts.rows)
    wide = evaluate(es_wide)
    narrow = evaluate(es_narrow, max_tokens=3 * longest)
    assert max(calls) <= 3 and len(calls) >= 4
    assert wide.predicted == narrow.predicted
    assert wide.gold_prob == pytest.approx(narrow.gold_prob, rel=1e-4, abs=1e-6)
    assert es_narrow.nbytes > 0 and es_narrow.nbytes == sum(r.cache_bytes for _, r in es_narrow.groups)


def test_release_free_heap_keeps_live_tensors():
    import platform

    from ltvlib.heap import release_free_heap

    kept = torch.arange(1000.0)
    garbage = [torch.randn(256, 1024) for _ in range(8)]
    del garbage
    # glibc (every Linux this runs on in CI) has malloc_trim; elsewhere the call is a reported no-op
    assert release_free_heap() is (platform.libc_ver()[0] == "glibc")
    assert torch.equal(kept, torch.arange(1000.0))
