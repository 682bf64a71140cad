"""Gemma 3 conventions that code outside ``ltvlib.across_models`` does not handle yet (found while writing
chapter 08). Each test states the correct behaviour and is marked ``xfail(strict=True)``: it fails today, and
the day the fix lands it passes, which makes the suite fail until the marker is removed.

1. Sliding-window attention: the cached-prefix path (:mod:`ltvlib.prefix`, :mod:`ltvlib.runner`) refuses a
   prompt longer than the window, where the full forward runs it.
2. Gemma normalises the attention output (``post_attention_layernorm``) before adding it to the residual
   stream, so what a head writes into the stream is not ``W_O[:, slice(h)] @ a``
   (:func:`ltvlib.heads.head_projection`, which Function Vectors are built from).
"""

from __future__ import annotations

import pytest
import torch

from ltvlib.heads import HeadPatch, head_outputs, head_projection
from ltvlib.inject import VectorEdit
from ltvlib.models import wrap_model
from ltvlib.prefix import forward_tokens
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.runner import PromptRunner
from ltvlib.sites import decoder_layers
from ltvlib.tasks import load_splits
from tests.models_fixtures import tiny_gemma3, tiny_llama, tiny_tokenizer


def windowed_gemma3(window: int = 16):
    """A tiny Gemma 3 whose sliding window (``window`` tokens, layers 0 and 1) is shorter than a 2-shot prompt."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = tiny_tokenizer(add_bos=True)
    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
        sliding_window=window, layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        pad_token_id=0, bos_token_id=2, eos_token_id=3,
    )
    return wrap_model(Gemma3ForCausalLM(config).float(), tok, f"tiny-gemma3-window{window}")


@pytest.mark.xfail(raises=ValueError, strict=True, reason=(
    "ltvlib.prefix.forward_tokens(keep_cache=True) refuses prompts longer than a sliding attention window "
    "(the sliding layers' DynamicSlidingWindowLayer crops the cache), and ltvlib.runner's tail layout "
    "[shared][pad][row] would put padding inside the window if it did not"))
def test_cached_prefix_equals_full_forward_beyond_the_sliding_window():
    lm = windowed_gemma3(16)
    splits = load_splits("antonym")
    prompts = encode_prompts(lm.tokenizer, splits.task, splits.test[:5], shared_demos=splits.train[:3])
    assert len(prompts.shared) + min(len(r) for r in prompts.rows) > 16  # the window does cut these prompts
    theta = torch.randn(lm.d_model, generator=torch.Generator().manual_seed(0))
    edits = [VectorEdit(1, -1, theta)]
    full, _ = PromptRunner(lm, prompts, tail=None).run(range(5), edits)
    fast, _ = PromptRunner(lm, prompts, tail=1).run(range(5), edits)
    torch.testing.assert_close(fast, full, atol=1e-4, rtol=1e-4)


# The module whose output is what the attention sublayer adds to the residual stream.
ATTENTION_WRITE = {"llama": "self_attn", "gemma3": "post_attention_layernorm"}


@pytest.mark.parametrize("arch", ["llama", pytest.param("gemma", marks=pytest.mark.xfail(strict=True, reason=(
    "ltvlib.heads.head_projection ignores Gemma's post-attention norm, so Function Vectors built from it "
    "(ltvlib.baselines.function_vector.build_function_vector) have the wrong size on Gemma 3")))])
def test_head_projection_is_what_a_lone_head_writes_into_the_residual_stream(arch):
    lm = {"llama": tiny_llama, "gemma": tiny_gemma3}[arch]()  # fresh: the gain below must not leak into fixtures
    block = decoder_layers(lm.model)[1]
    if lm.table.family == "gemma3":
        norm = block.post_attention_layernorm
        with torch.no_grad():  # a non-trivial gain, as in a trained model
            norm.weight.copy_(torch.randn(norm.weight.shape, generator=torch.Generator().manual_seed(1)))
    prompts = encode_prompts(lm.tokenizer, load_splits("antonym").task, load_splits("antonym").train[:3])
    ids, mask = pad_left(prompts.full_rows(), lm.tokenizer.pad_token_id)
    g = lm.geometry
    value = torch.randn(g.head_dim, generator=torch.Generator().manual_seed(0)) * 3
    # head 2 alone: every other head of layer 1 zeroed at the last position
    patches = [HeadPatch(1, h, -1, value if h == 2 else torch.zeros(g.head_dim)) for h in range(g.n_heads)]
    written = {}
    module = getattr(block, ATTENTION_WRITE[lm.table.family])

    def keep(mod, args, out):
        written["x"] = (out[0] if isinstance(out, tuple) else out)[:, -1].detach()

    handle = module.register_forward_hook(keep)
    try:
        with torch.no_grad(), head_outputs(lm, patches=patches, attention_mask=mask):
            forward_tokens(lm, ids, mask)
    finally:
        handle.remove()
    expected = head_projection(lm, 1, 2, value).detach()
    torch.testing.assert_close(written["x"], expected.expand_as(written["x"]), atol=1e-5, rtol=1e-4)
