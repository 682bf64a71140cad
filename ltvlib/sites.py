"""Where things live inside a supported architecture: one table per ``config.model_type``.

A *site* is an abstract place in the forward pass. Each architecture maps the sites to module paths:

- ``block_input``: the residual stream entering decoder block ``l`` (a forward *pre*-hook on
  ``layers[l]``; ``hidden_states[l]`` in Hugging Face's ``output_hidden_states`` numbering, where
  ``hidden_states[0]`` are the embeddings). Shape ``(batch, seq, d_model)``. The paper's site.
- ``block_output``: the residual stream leaving block ``l`` (a forward hook on ``layers[l]``),
  ``hidden_states[l + 1]``; for the last block this is the input of the final norm.
- ``head_outputs``: the per-head attention outputs concatenated *before* ``o_proj`` (the input of
  ``layers[l].self_attn.o_proj``), shape ``(batch, seq, n_heads * head_dim)``; head ``h`` owns columns
  ``h * head_dim : (h + 1) * head_dim``.
- ``attention_probs``: the attention weights returned by ``layers[l].self_attn`` as the second element of
  its output when the model runs with ``attn_implementation="eager"``, shape ``(batch, n_heads, q, k)``.

The table is resolved from ``config.model_type`` and fails loudly for an unknown architecture rather than
guessing from a model's name (a failure mode of the baselines' public code).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ArchTable:
    """Module paths of one architecture family, relative to the ``*ForCausalLM`` model."""

    family: str
    layers: str = "model.layers"
    attention: str = "self_attn"
    o_proj: str = "self_attn.o_proj"
    v_proj: str = "self_attn.v_proj"
    input_norm: str = "input_layernorm"
    final_norm: str = "model.norm"
    unembed: str = "lm_head"
    # Gemma's RMSNorm multiplies by (1 + weight) instead of weight.
    norm_weight_offset: float = 0.0
    # Gemma scales the embeddings by sqrt(d_model) inside the embedding module; sites sit after that.
    scales_embeddings: bool = False


_LLAMA = ArchTable(family="llama")
_GEMMA3 = ArchTable(family="gemma3", norm_weight_offset=1.0, scales_embeddings=True)

ARCH_TABLES: dict[str, ArchTable] = {
    "llama": _LLAMA,
    "mistral": ArchTable(family="mistral"),
    "qwen2": ArchTable(family="qwen2"),
    "gemma3_text": _GEMMA3,
    "gemma3": ArchTable(
        family="gemma3",
        layers="model.language_model.layers",
        final_norm="model.language_model.norm",
        norm_weight_offset=1.0,
        scales_embeddings=True,
    ),
}

SITES = ("block_input", "block_output", "head_outputs", "attention_probs")


@dataclass(frozen=True)
class HeadGeometry:
    """Sizes read from the config: ``head_dim`` is taken from the config, never ``d_model // n_heads``
    (which is wrong for Gemma 3: 4 heads of 256 in a 640-wide stream)."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int

    @property
    def group_size(self) -> int:
        """Query heads per KV head: query head ``h`` reads KV group ``h // group_size``."""
        return self.n_heads // self.n_kv_heads


def arch_table(config: Any) -> ArchTable:
    """The site table of ``config.model_type``; raises ``ValueError`` listing the supported types."""
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCH_TABLES:
        raise ValueError(
            f"unsupported architecture model_type={model_type!r}; supported: {', '.join(sorted(ARCH_TABLES))}"
        )
    return ARCH_TABLES[model_type]


def head_geometry(config: Any) -> HeadGeometry:
    """Head sizes from a (text) config; grouped-query attention via ``num_key_value_heads``."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // n_heads
    return HeadGeometry(
        n_layers=text.num_hidden_layers,
        d_model=text.hidden_size,
        n_heads=n_heads,
        n_kv_heads=getattr(text, "num_key_value_heads", None) or n_heads,
        head_dim=head_dim,
    )


def get_module(model: nn.Module, path: str) -> nn.Module:
    """Resolve a dotted path such as ``model.layers`` on ``model``."""
    module: Any = model
    for part in path.split("."):
        module = getattr(module, part)
    return module


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks of ``model`` in order."""
    return get_module(model, arch_table(model.config).layers)  # type: ignore[return-value]


def check_layer(layer: int, n_layers: int) -> int:
    """Validate a layer index (negative counts from the end); returns it in ``[0, n_layers)``."""
    if not isinstance(layer, int) or isinstance(layer, bool) or not -n_layers <= layer < n_layers:
        raise ValueError(f"layer {layer!r} is out of range: the model has layers 0..{n_layers - 1}")
    return layer % n_layers


def norm_gain(norm: nn.Module, table: ArchTable) -> torch.Tensor:
    """The effective elementwise gain of an RMSNorm module (``weight + offset``)."""
    return norm.weight.detach() + table.norm_weight_offset  # type: ignore[operator]
