"""The head-output site: recording matches o_proj's input, patching changes only the chosen slice, and
hooks always clean up and must fire."""

from __future__ import annotations

import pytest
import torch

from ltvlib.heads import HeadPatch, head_outputs, head_projection, o_proj, patch_heads, record_heads
from ltvlib.inject import HookNotFiredError
from ltvlib.prefix import forward_tokens
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.tasks import get_task, load_splits


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


def test_head_projection_is_o_proj_of_a_one_head_input(tiny):
    g = tiny.geometry
    value = torch.randn(g.head_dim)
    x = torch.zeros(g.n_heads * g.head_dim)
    x[2 * g.head_dim : 3 * g.head_dim] = value
    torch.testing.assert_close(head_projection(tiny, 0, 2, value), o_proj(tiny, 0)(x))


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
