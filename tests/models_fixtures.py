"""Tiny random models built from configs (grouped-query attention) with a word-level tokenizer.

Fast enough for unit tests: 3 layers, width 64. The Gemma 3 model uses ``head_dim`` 32 with 4 heads in
a 64-wide stream, so code that assumes ``head_dim == d_model // n_heads`` fails on it, and its tokenizer
adds a BOS token, so the shared-prefix code paths get exercised.
"""

from __future__ import annotations

import re

import pytest
import torch

from ltvlib.models import LoadedModel, wrap_model
from ltvlib.tasks import load_splits

SPECIALS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]", "\n"]


def _vocabulary() -> list[str]:
    words: set[str] = {"Q", "A", ":"}
    for name in ("antonym", "capital", "sst2"):
        # unbalanced pools: the vocabulary (and so every tiny model's weights) stays as it was
        splits = load_splits(name, n_train=600, n_val=400, balance=False)
        for ex in (*splits.train, *splits.validation, *splits.test):
            words.update(re.findall(r"\w+|[^\w\s]", ex.input + " " + ex.output))
    return SPECIALS + sorted(words)


_VOCAB: list[str] | None = None


def tiny_tokenizer(add_bos: bool):
    """A word-level tokenizer over the words of a few tasks; ``add_bos`` prepends ``[BOS]`` like Gemma."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    global _VOCAB
    if _VOCAB is None:
        _VOCAB = _vocabulary()
    vocab = {w: i for i, w in enumerate(_VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    # keep "\n" as a token (it separates Q and A) and split words from punctuation
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\n|\w+|[^\w\s]"), behavior="isolated", invert=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r"[ \t]+"), behavior="removed"), tok.pre_tokenizer]
    )
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", vocab["[BOS]"])])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]",
        bos_token="[BOS]" if add_bos else None,
    )
    return fast


def tiny_llama(seed: int = 0) -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tiny_tokenizer(add_bos=False)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        pad_token_id=0, bos_token_id=None, eos_token_id=3, tie_word_embeddings=False,
    )
    return wrap_model(LlamaForCausalLM(config).float(), tok, "tiny-llama")


def tiny_gemma3(seed: int = 0) -> LoadedModel:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = tiny_tokenizer(add_bos=True)
    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
        sliding_window=512, layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        pad_token_id=0, bos_token_id=2, eos_token_id=3,
    )
    return wrap_model(Gemma3ForCausalLM(config).float(), tok, "tiny-gemma3")


@pytest.fixture(scope="session")
def llama() -> LoadedModel:
    return tiny_llama()


@pytest.fixture(scope="session")
def gemma() -> LoadedModel:
    return tiny_gemma3()


@pytest.fixture(scope="session", params=["llama", "gemma"])
def tiny(request: pytest.FixtureRequest) -> LoadedModel:
    return request.getfixturevalue(request.param)
