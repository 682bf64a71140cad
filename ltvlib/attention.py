"""Grouped-query attention on CPU without copying each key/value head once per query head.

With an attention mask and more than one query position, transformers' ``sdpa`` attention repeats every
key/value head once per query head in its group before calling torch's kernel (``repeat_kv``: a copy of the
whole cache, three times its size for SmolLM2, four for Gemma 3, per layer and per forward). Torch's CPU kernels
take the grouped keys and values as they are (``enable_gqa=True``), so a tail of a few positions after a long
cached prefix reads the prefix once instead of writing it three or four times: :data:`ATTENTION` is that kernel
call, registered with transformers under its own name, the same computation otherwise. Every other case (a
CUDA or other device, no mask, a single query position, a position bias, soft-capping, attention probabilities)
is transformers' own ``sdpa`` unchanged. :func:`use_grouped_attention` switches a model that runs ``sdpa`` to it.

Shapes: ``query (batch, n_heads, q, head_dim)``, ``key`` and ``value (batch, n_kv_heads, k, head_dim)``, mask
``(batch, 1, q, k)``; the output ``(batch, q, n_heads, head_dim)``, as transformers' attention functions return.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

ATTENTION = "sdpa_grouped"
"""The name the attention function below is registered under (``config._attn_implementation``)."""


def grouped_sdpa_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """transformers' ``sdpa`` attention, with grouped keys and values passed to torch's CPU kernel as they are."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    plain = (
        groups == 1 or query.device.type != "cpu" or attention_mask is None or query.shape[2] == 1
        or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
        or kwargs.get("output_attentions", False)
    )
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    # a mask is given, so the kernel is not told the attention is causal (as transformers' sdpa does)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=False,
        enable_gqa=True,
    )
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Register :data:`ATTENTION` (the function above, with ``sdpa``'s masks) with transformers; idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, grouped_sdpa_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


def use_grouped_attention(model: Any) -> None:
    """Switch ``model`` (a transformers model) from ``sdpa`` to :data:`ATTENTION`; any other attention is kept."""
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        register()
        model.set_attn_implementation(ATTENTION)
