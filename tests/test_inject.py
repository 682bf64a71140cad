"""Injection hooks: exact placement under left padding, add/replace, clean removal, loud failures."""

from __future__ import annotations

import pytest
import torch

from ltvlib.inject import HookNotFiredError, VectorEdit, inject, record_residual, resolve_positions
from ltvlib.kv_cache import forward_tokens
from ltvlib.prompts import pad_left
from ltvlib.sites import decoder_layers


def _batch(lm, lengths=(5, 3, 4)):
    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lengths]
    return pad_left(rows, lm.tokenizer.pad_token_id)


def test_resolve_positions_under_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 0, 1, 1]])
    cols = resolve_positions(mask, [-1, -2, 0, 1])
    assert cols.tolist() == [[4, 3, 2, 3], [4, 3, 0, 1], [4, 3, 1, 3]]


def test_position_outside_prompt_names_value():
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    with pytest.raises(ValueError, match="position -3"):
        resolve_positions(mask, [-3])
    with pytest.raises(ValueError, match="position 2"):
        resolve_positions(mask, [2])


def test_zero_vector_changes_nothing(tiny):
    ids, mask = _batch(tiny)
    base, _ = forward_tokens(tiny, ids, mask, logits_to_keep=0)
    with inject(tiny, [VectorEdit(1, -1, torch.zeros(tiny.d_model))], attention_mask=mask):
        out, _ = forward_tokens(tiny, ids, mask, logits_to_keep=0)
    assert torch.equal(base, out)


@pytest.mark.parametrize("site", ["block_input", "block_output"])
@pytest.mark.parametrize("position", [-1, -2, 0, 1])
def test_added_vector_lands_exactly_at_row_layer_position(tiny, site, position):
    ids, mask = _batch(tiny)
    layer = 1
    vec = torch.randn(tiny.d_model)
    with record_residual(tiny, [layer], site=site) as before:
        forward_tokens(tiny, ids, mask)
    h0 = before[layer].clone()
    # The recording hook is registered after the injection hook, so it sees the injected state.
    with inject(tiny, [VectorEdit(layer, position, vec)], attention_mask=mask, site=site):
        with record_residual(tiny, [layer], site=site) as after:
            forward_tokens(tiny, ids, mask)
    cols = resolve_positions(mask, [position])[:, 0]
    diff = after[layer] - h0
    expected = torch.zeros_like(diff)
    expected[torch.arange(len(cols)), cols] = vec
    torch.testing.assert_close(diff, expected, atol=1e-5, rtol=0)


def test_replace_writes_the_vector(llama):
    ids, mask = _batch(llama)
    vec = torch.randn(llama.d_model)
    with inject(llama, [VectorEdit(2, -1, vec)], attention_mask=mask, mode="replace"):
        with record_residual(llama, [2]) as rec:
            forward_tokens(llama, ids, mask)
    torch.testing.assert_close(rec[2][:, -1], vec.expand(3, -1))


def test_per_row_vectors(llama):
    ids, mask = _batch(llama)
    vecs = torch.randn(3, llama.d_model)
    with record_residual(llama, [1]) as rec0:
        forward_tokens(llama, ids, mask)
    base = rec0[1].clone()
    with inject(llama, [VectorEdit(1, -1, vecs)], attention_mask=mask), record_residual(llama, [1]) as rec:
        forward_tokens(llama, ids, mask)
    torch.testing.assert_close(rec[1][:, -1] - base[:, -1], vecs)


def _hook_count(lm) -> int:
    return sum(len(b._forward_pre_hooks) + len(b._forward_hooks) for b in decoder_layers(lm.model))


def test_hooks_removed_after_exception(llama):
    ids, mask = _batch(llama)
    before = _hook_count(llama)
    with pytest.raises(RuntimeError, match="boom"):
        with inject(llama, [VectorEdit(0, -1, torch.ones(llama.d_model))], attention_mask=mask):
            forward_tokens(llama, ids, mask)
            raise RuntimeError("boom")
    assert _hook_count(llama) == before


def test_hook_that_never_fired_is_an_error(llama):
    _, mask = _batch(llama)
    before = _hook_count(llama)
    with pytest.raises(HookNotFiredError, match="never fired"):
        with inject(llama, [VectorEdit(0, -1, torch.ones(llama.d_model))], attention_mask=mask):
            pass
    assert _hook_count(llama) == before


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"site": "attn"}, "unknown site 'attn'"),
        ({"mode": "scale"}, "unknown mode 'scale'"),
    ],
)
def test_bad_site_or_mode(llama, kwargs, match):
    _, mask = _batch(llama)
    with pytest.raises(ValueError, match=match):
        with inject(llama, [VectorEdit(0, -1, torch.ones(llama.d_model))], attention_mask=mask, **kwargs):
            pass


def test_unknown_layer_and_wrong_shape(llama):
    _, mask = _batch(llama)
    with pytest.raises(ValueError, match="layer 7 is out of range"):
        with inject(llama, [VectorEdit(7, -1, torch.ones(llama.d_model))], attention_mask=mask):
            pass
    with pytest.raises(ValueError, match=r"vector of shape \(5,\)"):
        with inject(llama, [VectorEdit(0, -1, torch.ones(5))], attention_mask=mask):
            pass
