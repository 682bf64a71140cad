"""Injection hooks: exact placement under left padding, add/replace, clean removal, loud failures; apply()
around plain forwards and around model.generate."""

from __future__ import annotations

import pytest
import torch

from ltvlib.inject import HookNotFiredError, VectorEdit, apply, inject, record_residual, resolve_positions
from ltvlib.kv_cache import compute_prefix, forward_tokens
from ltvlib.prompts import pad_left


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
    with inject(tiny, [VectorEdit(layer, position, vec, site=site)], attention_mask=mask):
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
    with inject(llama, [VectorEdit(2, -1, vec, mode="replace")], attention_mask=mask):
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
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in lm.model.modules())


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
        ({"site": "attn"}, r"unknown site 'attn'; allowed: 'block_input', 'block_output'"),
        ({"mode": "scale"}, r"unknown mode 'scale'; allowed: 'add', 'replace'"),
    ],
)
def test_vector_edit_rejects_unknown_site_or_mode(kwargs, match):
    with pytest.raises(ValueError, match=match):
        VectorEdit(0, -1, torch.ones(4), **kwargs)


def test_vector_edit_defaults_are_the_ltv_site():
    edit = VectorEdit(1, -1, torch.ones(4))
    assert (edit.site, edit.mode) == ("block_input", "add")


def test_unknown_layer_and_wrong_shape(llama):
    _, mask = _batch(llama)
    with pytest.raises(ValueError, match="layer 7 is out of range"):
        with inject(llama, [VectorEdit(7, -1, torch.ones(llama.d_model))], attention_mask=mask):
            pass
    with pytest.raises(ValueError, match=r"vector of shape \(5,\)"):
        with inject(llama, [VectorEdit(0, -1, torch.ones(5))], attention_mask=mask):
            pass


# ---------------------------------------------------------------------------------------------------------
# apply(): positions from the mask the model receives; prompt forwards only


def _mixed_edits(lm, batch=3, starts=(1, 0)):
    g = torch.Generator().manual_seed(2)
    d = lm.d_model
    return [
        VectorEdit(0, starts[0], torch.randn(d, generator=g)),
        VectorEdit(2, -2, torch.randn(batch, d, generator=g)),
        VectorEdit(1, -1, torch.randn(d, generator=g), site="block_output", mode="replace"),
        VectorEdit(2, starts[1], torch.randn(d, generator=g), site="block_output"),
    ]


def test_apply_with_mixed_edits_equals_inject_per_site_and_mode(tiny):
    ids, mask = _batch(tiny)
    edits = _mixed_edits(tiny)
    with apply(tiny, edits):
        got, _ = forward_tokens(tiny, ids, mask, logits_to_keep=0)
    # the way callers had to do it before edits carried their site and mode: one inject per (site, mode)
    groups = [[e for e in edits if (e.site, e.mode) == key] for key in
              [("block_input", "add"), ("block_output", "replace"), ("block_output", "add")]]
    with inject(tiny, groups[0], attention_mask=mask), inject(tiny, groups[1], attention_mask=mask), \
            inject(tiny, groups[2], attention_mask=mask):
        want, _ = forward_tokens(tiny, ids, mask, logits_to_keep=0)
    with inject(tiny, edits, attention_mask=mask):
        mixed, _ = forward_tokens(tiny, ids, mask, logits_to_keep=0)
    assert torch.equal(got, want) and torch.equal(mixed, want)
    base, _ = forward_tokens(tiny, ids, mask, logits_to_keep=0)
    assert not torch.allclose(got, base)


def test_apply_after_a_cached_prefix_counts_positions_in_the_whole_prompt(llama):
    ids, mask = _batch(llama, lengths=(6, 4, 5))
    edits = _mixed_edits(llama, starts=(3, 2))  # prompt positions after the cached columns in every row
    split = 2  # the first two columns (padding included) run first and are cached
    prefix = compute_prefix(llama, ids[:, :split], mask[:, :split])
    with apply(llama, edits):
        got, _ = forward_tokens(llama, ids[:, split:], mask[:, split:], prefix=prefix, logits_to_keep=0)
    with inject(llama, edits, attention_mask=mask, offset=split):
        want, _ = forward_tokens(llama, ids[:, split:], mask[:, split:], prefix=prefix, logits_to_keep=0)
    assert torch.equal(got, want)


def test_apply_without_attention_mask_treats_every_token_as_real(llama):
    ids = torch.randint(10, 200, (2, 5), generator=torch.Generator().manual_seed(3))
    edits = _mixed_edits(llama, batch=2)
    with apply(llama, edits):
        got = llama.model(input_ids=ids).logits
    with inject(llama, edits, attention_mask=torch.ones_like(ids)):
        want = llama.model(input_ids=ids).logits
    assert torch.equal(got, want)


@pytest.mark.parametrize("mode", ["add", "replace"])
@pytest.mark.parametrize("site", ["block_input", "block_output"])
def test_apply_adds_or_writes_at_its_site(tiny, site, mode):
    ids, mask = _batch(tiny)
    layer, vec = 1, torch.randn(tiny.d_model)
    with record_residual(tiny, [layer], site=site) as before:
        forward_tokens(tiny, ids, mask)
    h0 = before[layer].clone()
    with apply(tiny, [VectorEdit(layer, -1, vec, site=site, mode=mode)]):
        with record_residual(tiny, [layer], site=site) as after:
            forward_tokens(tiny, ids, mask)
    expected = h0.clone()
    expected[:, -1] = vec if mode == "replace" else h0[:, -1] + vec
    torch.testing.assert_close(after[layer], expected, atol=1e-5, rtol=0)


def test_block_output_of_a_layer_is_block_input_of_the_next(tiny):
    ids, mask = _batch(tiny)
    vec = torch.randn(tiny.d_model)
    with apply(tiny, [VectorEdit(0, -1, vec, site="block_output")]):
        out, _ = forward_tokens(tiny, ids, mask, logits_to_keep=0)
    with apply(tiny, [VectorEdit(1, -1, vec, site="block_input")]):
        inp, _ = forward_tokens(tiny, ids, mask, logits_to_keep=0)
    assert torch.equal(out, inp)


def _greedy_with_cache(lm, ids, mask, edits, n):
    """The reference: the vectors injected in the prompt's forward, then decoding through its KV cache."""
    with inject(lm, edits, attention_mask=mask):
        logits, cache = forward_tokens(lm, ids, mask, keep_cache=True)
    new = [logits[:, -1].argmax(-1)]
    ones = torch.ones((ids.shape[0], 1), dtype=mask.dtype)
    for _ in range(n - 1):
        logits, cache = forward_tokens(lm, new[-1][:, None], ones, prefix=cache, keep_cache=True)
        new.append(logits[:, -1].argmax(-1))
    return torch.stack(new, 1)


@torch.no_grad()
def test_apply_around_generate_equals_injecting_at_the_prompt_forward(llama):
    assert llama.geometry.n_kv_heads < llama.geometry.n_heads  # grouped-query attention
    ids, mask = _batch(llama, lengths=(6, 3, 5))
    edits = [VectorEdit(1, -1, 4 * torch.randn(llama.d_model, generator=torch.Generator().manual_seed(4))),
             VectorEdit(0, 1, 4 * torch.randn(3, llama.d_model), site="block_output", mode="replace")]
    n, hooks = 6, _hook_count(llama)
    with apply(llama, edits):
        out = llama.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, pad_token_id=llama.tokenizer.pad_token_id)
    got = out[:, ids.shape[1]:]
    assert torch.equal(got, _greedy_with_cache(llama, ids, mask, edits, n))
    plain = llama.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, pad_token_id=llama.tokenizer.pad_token_id)[:, ids.shape[1]:]
    assert not torch.equal(got, plain)  # the vectors changed the continuation
    assert _hook_count(llama) == hooks


def test_apply_needs_a_prompt_forward(llama):
    ids, hooks = torch.tensor([[11], [12]]), _hook_count(llama)
    with pytest.raises(HookNotFiredError, match="prompt forward"):
        with apply(llama, [VectorEdit(0, -1, torch.ones(llama.d_model))]):
            llama.model(input_ids=ids)  # one token: taken for a decode step, not edited
    with pytest.raises(HookNotFiredError, match="never fired"):
        with apply(llama, [VectorEdit(0, -1, torch.ones(llama.d_model))]):
            pass
    assert _hook_count(llama) == hooks


def test_apply_removes_its_hooks_after_an_exception(llama):
    ids, mask = _batch(llama)
    hooks = _hook_count(llama)
    with pytest.raises(RuntimeError, match="boom"):
        with apply(llama, [VectorEdit(0, -1, torch.ones(llama.d_model))]):
            forward_tokens(llama, ids, mask)
            raise RuntimeError("boom")
    assert _hook_count(llama) == hooks
