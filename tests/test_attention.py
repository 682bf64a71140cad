"""Grouped-query attention on CPU: the same numbers as transformers' ``sdpa``, without repeating keys and values;
and n alternative next tokens as positions of one sequence equal n rows of a batch."""

from __future__ import annotations

import pytest
import torch

from ltvlib.attention import ATTENTION, use_grouped_attention
from ltvlib.kv_cache import compute_prefix, forward_alternatives, forward_from_layer, forward_tokens
from ltvlib.prompts import pad_left


def _prefix_and_tail(lm, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = [9, 6, 11]
    rows = [torch.randint(5, 60, (n,), generator=g).tolist() for n in lengths]
    ids, mask = pad_left(rows, lm.tokenizer.pad_token_id)
    return compute_prefix(lm, ids, mask), torch.randint(5, 60, (len(rows), 3), generator=g)


def _tail_run(lm):
    """Logits and the gradient of a 3-token tail entering the middle block after a padded prefix."""
    prefix, tail = _prefix_and_tail(lm)
    start = lm.n_layers // 2
    hidden = lm.model.get_input_embeddings()(tail).detach().requires_grad_(True)
    logits = forward_from_layer(lm, hidden, start, torch.ones_like(tail), prefix=prefix, logits_to_keep=3)
    logits.float().logsumexp(-1).sum().backward()
    return logits.detach(), hidden.grad


def test_loaded_models_use_grouped_attention(tiny):
    assert tiny.model.config._attn_implementation == ATTENTION
    assert tiny.geometry.n_kv_heads < tiny.geometry.n_heads  # the fixtures have grouped queries


def test_grouped_attention_equals_sdpa_with_repeated_heads(tiny, monkeypatch):
    calls = []
    kernel = torch.nn.functional.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(kwargs.get("enable_gqa", False))
        return kernel(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    ours_logits, ours_grad = _tail_run(tiny)
    monkeypatch.undo()
    assert any(calls), "the grouped path never ran (a mask and several query positions should take it)"
    tiny.model.set_attn_implementation("sdpa")
    try:
        ref_logits, ref_grad = _tail_run(tiny)
    finally:
        use_grouped_attention(tiny.model)
    assert tiny.model.config._attn_implementation == ATTENTION
    torch.testing.assert_close(ours_logits, ref_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_grad, ref_grad, rtol=1e-5, atol=1e-5)


def test_other_implementations_are_kept(tiny):
    tiny.model.set_attn_implementation("eager")
    try:
        use_grouped_attention(tiny.model)
        assert tiny.model.config._attn_implementation == "eager"
    finally:
        tiny.model.set_attn_implementation(ATTENTION)


@pytest.mark.parametrize("padded", [False, True])
def test_alternatives_equal_batch_rows(tiny, padded):
    g = torch.Generator().manual_seed(3)
    row = torch.randint(5, 60, (10,), generator=g).tolist()
    pad = [tiny.tokenizer.pad_token_id] * 4 if padded else []
    ids = torch.tensor([pad + row])
    mask = torch.tensor([[0] * len(pad) + [1] * len(row)])
    prefix = compute_prefix(tiny, ids, mask)
    tokens = torch.randint(5, 60, (5,), generator=g)
    got = forward_alternatives(tiny, tokens, prefix)
    want = forward_tokens(tiny, tokens.view(-1, 1), torch.ones(5, 1, dtype=torch.long), prefix=prefix.expand(5))[0]
    assert got.shape == (5, want.shape[-1])
    torch.testing.assert_close(got, want[:, -1], rtol=1e-5, atol=1e-5)


def test_alternatives_need_one_prefix_row(tiny):
    prefix, _ = _prefix_and_tail(tiny)
    with pytest.raises(ValueError, match="single-row prefix; this one has 3 rows"):
        forward_alternatives(tiny, torch.tensor([5, 6]), prefix)
