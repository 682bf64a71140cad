"""The KV prefix cache: a prefix computed once, then only the tail, gives the full forward's logits and gradients."""

from __future__ import annotations

import pytest
import torch

from ltvlib.inject import VectorEdit, inject, record_residual
from ltvlib.kv_cache import KVPrefix, compute_prefix, forward_from_layer, forward_tokens
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.tasks import get_task, load_splits

TAIL = 2


def _rows(lm):
    """Four prompts of different lengths (zero- to two-shot), each as its complete id list."""
    task = get_task("antonym")
    train = list(load_splits(task).train)
    prompts = encode_prompts(lm.tokenizer, task, train[:4], demos=[train[10 + 2 * i : 10 + 2 * i + i % 3] for i in range(4)])
    rows = prompts.full_rows()
    assert len({len(r) for r in rows}) > 1
    return rows


def _split(lm, rows):
    """Full ids/mask, and the prefix (every row but its last TAIL tokens, left-padded) and the tails."""
    full_ids, full_mask = pad_left(rows, lm.tokenizer.pad_token_id)
    head_ids, head_mask = pad_left([r[:-TAIL] for r in rows], lm.tokenizer.pad_token_id)
    tail = torch.tensor([r[-TAIL:] for r in rows])
    return (full_ids, full_mask), compute_prefix(lm, head_ids, head_mask), tail


def test_prefix_then_tail_equals_the_full_forward(tiny):
    rows = _rows(tiny)
    (ids, mask), prefix, tail = _split(tiny, rows)
    assert prefix.batch == len(rows) and prefix.length == max(len(r) for r in rows) - TAIL
    assert prefix.next_position.tolist() == [len(r) - TAIL for r in rows]  # real tokens only: padding skipped
    stored = [k.clone() for k in prefix.keys]
    want = forward_tokens(tiny, ids, mask, logits_to_keep=TAIL)[0]
    got = forward_tokens(tiny, tail, torch.ones_like(tail), prefix=prefix, logits_to_keep=TAIL)[0]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    # the cache concatenates on update: the stored prefix is untouched, so it can be reused for every tail
    assert all(torch.equal(a, b) for a, b in zip(prefix.keys, stored)) and prefix.length == ids.shape[1] - TAIL


def test_gradient_through_the_tail_equals_the_full_forwards(tiny):
    """A vector at the last token cannot change earlier keys/values: the gradient is the full forward's."""
    rows = _rows(tiny)
    (ids, mask), prefix, tail = _split(tiny, rows)
    target = torch.tensor([5, 6, 7, 8])
    grads = []
    for run in ("full", "tail"):
        theta = torch.full((tiny.d_model,), 0.3, requires_grad=True)
        if run == "full":
            with inject(tiny, [VectorEdit(1, -1, theta)], attention_mask=mask):
                logits = forward_tokens(tiny, ids, mask)[0]
        else:
            tail_mask = torch.ones_like(tail)
            prompt_mask = torch.cat([prefix.attention_mask, tail_mask], 1)
            with inject(tiny, [VectorEdit(1, -1, theta)], attention_mask=prompt_mask, offset=prefix.length):
                logits = forward_tokens(tiny, tail, tail_mask, prefix=prefix)[0]
        torch.nn.functional.cross_entropy(logits[:, -1], target).backward()
        grads.append(theta.grad)
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-4)


def test_forward_from_a_layer_resumes_the_full_forward(tiny):
    rows = _rows(tiny)
    (ids, mask), prefix, tail = _split(tiny, rows)
    start = 2
    with record_residual(tiny, [start]) as rec:
        want = forward_tokens(tiny, ids, mask, logits_to_keep=TAIL)[0]
    hidden = rec[start][:, -TAIL:]
    got = forward_from_layer(tiny, hidden, start, torch.ones_like(tail), prefix=prefix, logits_to_keep=TAIL)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_rows_and_expand(llama):
    rows = _rows(llama)
    _, prefix, _ = _split(llama, rows)
    sub = prefix.rows([2, 0])
    assert sub.batch == 2 and sub.length == prefix.length
    assert torch.equal(sub.keys[1][0], prefix.keys[1][2]) and torch.equal(sub.attention_mask[1], prefix.attention_mask[0])
    assert sub.next_position.tolist() == [prefix.next_position[2].item(), prefix.next_position[0].item()]
    one = prefix.rows([1])
    wide = one.expand(3)
    assert wide.batch == 3 and all(torch.equal(wide.values[0][b], one.values[0][0]) for b in range(3))
    assert wide.nbytes == 3 * one.nbytes
    with pytest.raises(ValueError, match="only a single-row prefix can be expanded, this one has 4 rows"):
        prefix.expand(2)


def test_compute_prefix_of_zero_tokens(llama):
    empty = torch.zeros((1, 0), dtype=torch.long)
    with pytest.raises(ValueError, match="cannot build a prefix from zero tokens"):
        compute_prefix(llama, empty, empty)
    ids = torch.tensor([[4, 5, 6]])
    prefix = compute_prefix(llama, ids, torch.ones_like(ids))
    assert compute_prefix(llama, empty, empty, prefix=prefix) is prefix
    assert isinstance(prefix, KVPrefix) and prefix.next_position.tolist() == [3]
