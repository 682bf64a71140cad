"""The head-output site: recording matches o_proj's input, patching changes only the chosen slice, hooks
always clean up and must fire, and what the heads write sums to what the attention block adds to the residual
stream on every architecture of the site table (Gemma's attention-output norm included)."""

from __future__ import annotations

import pytest
import torch

from ltvlib.heads import (
    HeadPatch,
    attention_output_inverse_rms,
    head_outputs,
    head_projection,
    head_writes,
    o_proj,
    patch_heads,
    record_heads,
)
from ltvlib.inject import HookNotFiredError
from ltvlib.kv_cache import forward_tokens
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.sites import get_module
from ltvlib.tasks import get_task, load_splits
from tests.arch_fixtures import BUILDERS, LAYOUT


def _batch(lm, n=3):
    task = get_task("antonym")
    prompts = encode_prompts(lm.tokenizer, task, load_splits(task).train[:n])
    return pad_left(prompts.full_rows(), lm.tokenizer.pad_token_id)


def test_recording_is_o_proj_input_reshaped(tiny):
    ids, mask = _batch(tiny)
    seen = {}
    handle = o_proj(tiny, 1).register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0].detach().clone()))
    try:
        with record_heads(tiny, [1]) as cap:
            forward_tokens(tiny, ids, mask, logits_to_keep=1)
    finally:
        handle.remove()
    g = tiny.geometry
    assert cap[1].shape == (ids.shape[0], ids.shape[1], g.n_heads, g.head_dim)
    torch.testing.assert_close(cap[1].flatten(2), seen["x"])
    with record_heads(tiny, [1], attention_mask=mask, positions=[-1, 0]) as at:
        forward_tokens(tiny, ids, mask)
    first = mask.argmax(-1)
    torch.testing.assert_close(at[1][:, 0], cap[1][:, -1])
    torch.testing.assert_close(at[1][:, 1], cap[1][torch.arange(len(ids)), first])


def test_patch_replaces_only_the_chosen_slice_rows_and_position(tiny):
    ids, mask = _batch(tiny)
    g = tiny.geometry
    value = torch.randn(g.head_dim)
    with record_heads(tiny, [2]) as before:
        forward_tokens(tiny, ids, mask)
    with head_outputs(tiny, record=[2], patches=[HeadPatch(2, 1, -1, value, rows=[0, 2])], attention_mask=mask) as cap:
        forward_tokens(tiny, ids, mask)
    after = cap[2]
    torch.testing.assert_close(after[[0, 2], -1, 1], value.expand(2, -1))
    diff = (after - before[2]).abs() > 0
    diff[[0, 2], -1, 1] = False
    assert not diff.any(), "patch leaked outside its head, rows or position"
    with head_outputs(tiny, record=[2], patches=[HeadPatch(2, 1, -1, value)], attention_mask=mask, mode="add") as add:
        forward_tokens(tiny, ids, mask)
    torch.testing.assert_close(add[2][:, -1, 1], before[2][:, -1, 1] + value)


def test_head_projection_is_o_proj_of_a_one_head_input(llama):
    g = llama.geometry
    value = torch.randn(g.head_dim)
    x = torch.zeros(g.n_heads * g.head_dim)
    x[2 * g.head_dim : 3 * g.head_dim] = value
    torch.testing.assert_close(head_projection(llama, 0, 2, value), o_proj(llama, 0)(x))
    torch.testing.assert_close(head_writes(llama, 0, x.view(g.n_heads, g.head_dim))[2], o_proj(llama, 0)(x))


def _randomise_norm_gains(lm, layer, seed=1):
    """Non-trivial gains on every RMSNorm of block ``layer``, as in a trained model (a fresh model has gain 1)."""
    gen = torch.Generator().manual_seed(seed)
    block = get_module(lm.model, LAYOUT[lm.model.config.model_type][0])[layer]
    with torch.no_grad():
        for name, module in block.named_modules():
            if name.endswith("layernorm"):
                module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, generator=gen))


def _attention_contribution(lm, ids, mask, layer, patches=()):
    """Record the head outputs of ``layer`` and what its attention adds to the residual stream: the stream
    entering the MLP's input norm minus the block input (module names from tests.arch_fixtures.LAYOUT)."""
    blocks_path, _, mlp_in, _ = LAYOUT[lm.model.config.model_type]
    block = get_module(lm.model, blocks_path)[layer]
    seen = {}
    handles = [
        block.register_forward_pre_hook(lambda m, a, k: seen.__setitem__("x", (a[0] if a else k["hidden_states"])),
                                        with_kwargs=True),
        get_module(block, mlp_in).register_forward_pre_hook(lambda m, a: seen.__setitem__("y", a[0])),
    ]
    try:
        with torch.no_grad(), head_outputs(lm, record=[layer], patches=patches, attention_mask=mask) as cap:
            forward_tokens(lm, ids, mask)
    finally:
        for handle in handles:
            handle.remove()
    return cap[layer], (seen["y"].double() - seen["x"].double()), seen["x"]


@pytest.mark.parametrize("arch", list(BUILDERS))
def test_head_writes_sum_to_what_the_attention_block_adds(arch):
    """The heads' writes (``head_writes``) sum to the attention block's contribution to the residual stream
    at every token, including Gemma's attention-output norm (post_attention_layernorm)."""
    lm = BUILDERS[arch]()  # fresh: the gains below must not leak into the session fixtures
    _randomise_norm_gains(lm, 1)
    ids, mask = _batch(lm)
    heads, contribution, stream = _attention_contribution(lm, ids, mask, 1)
    writes = head_writes(lm, 1, heads)
    assert writes.shape == (*ids.shape, lm.geometry.n_heads, lm.d_model)
    # the contribution is a difference of two float32 streams: its error scales with the stream
    atol = 1e-5 * float(stream.abs().max())
    torch.testing.assert_close(writes.double().sum(-2), contribution, atol=atol, rtol=1e-4)
    if lm.table.attn_output_norm is not None:  # the norm matters: the bare W_O terms are not the write
        bare = torch.einsum("bshk,dhk->bsd", heads, o_proj(lm, 1).weight.view(lm.d_model, *heads.shape[-2:]))
        assert not torch.allclose(bare.double(), contribution, atol=100 * atol, rtol=1e-2)


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_head_projection_is_what_a_lone_head_writes_into_the_residual_stream(arch):
    """Every other head of layer 1 zeroed at the last position: the block adds exactly head 2's write."""
    lm = BUILDERS[arch]()
    _randomise_norm_gains(lm, 1)
    ids, mask = _batch(lm)
    g = lm.geometry
    value = torch.randn(g.head_dim, generator=torch.Generator().manual_seed(0)) * 3
    patches = [HeadPatch(1, h, -1, value if h == 2 else torch.zeros(g.head_dim)) for h in range(g.n_heads)]
    heads, contribution, stream = _attention_contribution(lm, ids, mask, 1, patches)
    scale = attention_output_inverse_rms(lm, 1, heads[:, -1])
    expected = head_projection(lm, 1, 2, value, inverse_rms=scale[0] if scale is not None else None)
    atol = 1e-5 * float(stream.abs().max())
    torch.testing.assert_close(contribution[:, -1], expected.double().expand_as(contribution[:, -1]), atol=atol,
                               rtol=1e-4)
    torch.testing.assert_close(head_writes(lm, 1, heads[:, -1])[:, 2], expected.expand(len(ids), -1))


def test_head_projection_asks_for_the_attention_output_scale_only_where_a_norm_needs_it(llama, gemma):
    value = torch.randn(gemma.geometry.head_dim)
    with pytest.raises(ValueError, match="normalises the attention output.*inverse_rms"):
        head_projection(gemma, 0, 1, value)
    with pytest.raises(ValueError, match="inverse_rms must be None"):
        head_projection(llama, 0, 1, torch.randn(llama.geometry.head_dim), inverse_rms=1.0)
    with pytest.raises(ValueError, match="expected"):
        head_writes(gemma, 0, torch.zeros(gemma.geometry.n_heads + 1, gemma.geometry.head_dim))
    # Gemma: the write is gain * (W_O slice @ value) * inverse_rms, linear in both
    one = head_projection(gemma, 0, 1, value, inverse_rms=1.0)
    torch.testing.assert_close(head_projection(gemma, 0, 1, value, inverse_rms=torch.tensor(0.5)), one * 0.5)
    assert attention_output_inverse_rms(llama, 0, torch.zeros(llama.geometry.n_heads, llama.geometry.head_dim)) is None


def test_bad_layer_head_shape_and_unfired_hooks(llama):
    _, mask = _batch(llama)
    hd = llama.geometry.head_dim
    with pytest.raises(ValueError, match="layer 7 is out of range"):
        with patch_heads(llama, [HeadPatch(7, 0, -1, torch.zeros(hd))], attention_mask=mask):
            pass
    with pytest.raises(ValueError, match="head 4 is out of range"):
        with patch_heads(llama, [HeadPatch(0, 4, -1, torch.zeros(hd))], attention_mask=mask):
            pass
    with pytest.raises(ValueError, match="expected"):
        with patch_heads(llama, [HeadPatch(0, 0, -1, torch.zeros(hd + 1))], attention_mask=mask):
            pass
    with pytest.raises(ValueError, match="at least one"):
        with patch_heads(llama, [], attention_mask=mask):
            pass
    with pytest.raises(HookNotFiredError):
        with record_heads(llama, [0]):
            pass  # no forward
    # hooks are gone after the errors
    for layer in range(llama.n_layers):
        assert not o_proj(llama, layer)._forward_pre_hooks
