"""Tiny random models of the other architectures in the site table (Mistral, Qwen2, the multimodal Gemma 3),
built from configs like those of :mod:`tests.models_fixtures`, and the module names that a reading of each
architecture's ``transformers`` decoder layer gives, written out here independently of ``ltvlib.sites``."""

from __future__ import annotations

import torch

from ltvlib.models import LoadedModel, wrap_model
from tests.models_fixtures import tiny_gemma3, tiny_llama, tiny_tokenizer

_SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
          "max_position_embeddings": 512, "pad_token_id": 0, "eos_token_id": 3}


def _tiny_llama_family(config_cls: type, model_cls: type, name: str, seed: int) -> LoadedModel:
    """A tiny model of a family laid out like Llama (GQA: 4 query heads, 2 KV heads, head_dim 16)."""
    tok = tiny_tokenizer(add_bos=False)
    torch.manual_seed(seed)
    config = config_cls(vocab_size=len(tok), num_key_value_heads=2, head_dim=16, bos_token_id=None,
                        tie_word_embeddings=False, **_SIZES)
    return wrap_model(model_cls(config).float(), tok, name)


def tiny_mistral(seed: int = 0) -> LoadedModel:
    from transformers import MistralConfig, MistralForCausalLM

    return _tiny_llama_family(MistralConfig, MistralForCausalLM, "tiny-mistral", seed)


def tiny_qwen2(seed: int = 0) -> LoadedModel:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return _tiny_llama_family(Qwen2Config, Qwen2ForCausalLM, "tiny-qwen2", seed)


def tiny_gemma3_multimodal(seed: int = 0) -> LoadedModel:
    """``Gemma3ForConditionalGeneration`` (``model_type="gemma3"``): the text blocks under
    ``model.language_model``, with a one-layer vision tower that text-only prompts never use."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    tok = tiny_tokenizer(add_bos=True)
    torch.manual_seed(seed)
    text = Gemma3TextConfig(
        vocab_size=len(tok), num_key_value_heads=1, head_dim=32, sliding_window=512,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], bos_token_id=2, **_SIZES,
    )
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
    return wrap_model(Gemma3ForConditionalGeneration(config).float(), tok, "tiny-gemma3-multimodal")


BUILDERS = {
    "llama": tiny_llama, "mistral": tiny_mistral, "qwen2": tiny_qwen2, "gemma3_text": tiny_gemma3,
    "gemma3": tiny_gemma3_multimodal,
}

# model_type -> (decoder blocks, module whose output the block adds to the stream after attention, module whose
# input is the stream after the attention's addition, i.e. the MLP's input norm, final norm)
LAYOUT = {
    "llama": ("model.layers", "self_attn", "post_attention_layernorm", "model.norm"),
    "mistral": ("model.layers", "self_attn", "post_attention_layernorm", "model.norm"),
    "qwen2": ("model.layers", "self_attn", "post_attention_layernorm", "model.norm"),
    "gemma3_text": ("model.layers", "post_attention_layernorm", "pre_feedforward_layernorm", "model.norm"),
    "gemma3": ("model.language_model.layers", "post_attention_layernorm", "pre_feedforward_layernorm",
               "model.language_model.norm"),
}
