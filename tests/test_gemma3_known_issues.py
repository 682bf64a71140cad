"""Gemma 3 conventions that code outside ``ltvlib.study.across_models`` does not handle yet (found while writing
chapter 08). Each test states the correct behaviour and is marked ``xfail(strict=True)``: it fails today, and
the day the fix lands it passes, which makes the suite fail until the marker is removed.

1. Sliding-window attention: the cached-prefix path (:mod:`ltvlib.kv_cache`, :mod:`ltvlib.forward`) refuses a
   prompt longer than the window, where the full forward runs it.

(Fixed and moved: what a head writes into the stream through Gemma's attention-output norm is now
:func:`ltvlib.heads.head_writes`, tested in ``tests/test_heads.py``.)
"""

from __future__ import annotations

import pytest
import torch

from ltvlib.forward import PromptRunner
from ltvlib.inject import VectorEdit
from ltvlib.models import wrap_model
from ltvlib.prompts import encode_prompts
from ltvlib.tasks import load_splits
from tests.models_fixtures import tiny_tokenizer


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
    "ltvlib.kv_cache.forward_tokens(keep_cache=True) refuses prompts longer than a sliding attention window "
    "(the sliding layers' DynamicSlidingWindowLayer crops the cache), and ltvlib.forward's tail layout "
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
