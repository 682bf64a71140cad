"""Where things live inside a supported architecture: one table per ``config.model_type``.

**Sites.** A *site* is an abstract place in the forward pass; every module of the library finds it here:

- ``block_input``: the residual stream entering decoder block ``l`` (a forward *pre*-hook on
  ``layers[l]``; ``hidden_states[l]`` in Hugging Face's ``output_hidden_states`` numbering, where
  ``hidden_states[0]`` are the embeddings). Shape ``(batch, seq, d_model)``. The paper's site.
- ``block_output``: the residual stream leaving block ``l`` (a forward hook on ``layers[l]``),
  ``hidden_states[l + 1]``; for the last block this is the input of the final norm.
- ``head_outputs``: the per-head attention outputs concatenated *before* the output projection (the input of
  :func:`o_proj`), shape ``(batch, seq, n_heads * head_dim)``; head ``h`` owns columns
  ``h * head_dim : (h + 1) * head_dim``.
- ``attention_probs``: the attention weights returned by :func:`attention` as the second element of its
  output when the model runs with ``attn_implementation="eager"``, shape ``(batch, n_heads, q, k)``.

**The path from a head to the residual stream.** Each :class:`ArchTable` names every module on it, per
decoder block (functions below return the module of a given layer)::

    x (block input) -> attn_input_norm -> attention (v_proj ... heads ... o_proj)
                    -> attn_output_norm (Gemma 2/3 only) -> + x
    y               -> mlp_input_norm -> mlp -> mlp_output_norm (Gemma 2/3 only) -> + y
    last block's output -> final_norm -> unembedding

The names differ between families in a way that is easy to get wrong: Llama's ``post_attention_layernorm`` is
the norm *before the MLP* (:attr:`ArchTable.mlp_input_norm`), while Gemma 3's ``post_attention_layernorm``
normalises the attention output before it is added to the stream (:attr:`ArchTable.attn_output_norm`); Gemma's
pre-MLP norm is ``pre_feedforward_layernorm``. Code outside this module uses the table's role names, never a
module name.

The table is resolved from ``config.model_type`` and fails loudly for an unknown architecture rather than
guessing from a model's name (a failure mode of the baselines' public code). Sizes (heads, ``head_dim``, KV
groups) come from the config (:class:`HeadGeometry`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from .models import LoadedModel


@dataclass(frozen=True)
class ArchTable:
    """Module paths of one architecture. Model-level paths are relative to the ``*ForCausalLM`` (or
    ``*ForConditionalGeneration``) model; block-level paths are relative to one decoder block.

    Attributes:
        family: the architecture family (``llama``, ``mistral``, ``qwen2``, ``gemma3``).
        text_model: the decoder stack (model-level): holds the blocks, the final norm and the rotary embedding.
        layers: the decoder blocks (model-level).
        final_norm: the RMSNorm before the unembedding (model-level).
        unembed: the unembedding (model-level).
        attention: the attention module of a block (returns ``(output, probabilities)``).
        attn_input_norm: the pre-attention RMSNorm of a block.
        v_proj: the value projection.
        o_proj: the attention output projection (input: the concatenated head outputs).
        attn_output_norm: the RMSNorm applied to the attention output *before* it is added to the residual
            stream (Gemma 2/3's ``post_attention_layernorm``); None where the attention output is added as is.
        mlp_input_norm: the pre-MLP RMSNorm (Llama's ``post_attention_layernorm``, Gemma's
            ``pre_feedforward_layernorm``).
        mlp: the MLP.
        mlp_output_norm: the RMSNorm applied to the MLP output before it is added (Gemma's
            ``post_feedforward_layernorm``); None where there is none.
        norm_weight_offset: RMSNorm gain is ``weight + offset`` (Gemma: ``1 + weight``).
        scales_embeddings: the embedding module multiplies by ``sqrt(d_model)`` (Gemma); sites sit after that.
    """

    family: str
    text_model: str = "model"
    layers: str = "model.layers"
    final_norm: str = "model.norm"
    unembed: str = "lm_head"
    attention: str = "self_attn"
    attn_input_norm: str = "input_layernorm"
    v_proj: str = "self_attn.v_proj"
    o_proj: str = "self_attn.o_proj"
    attn_output_norm: str | None = None
    mlp_input_norm: str = "post_attention_layernorm"
    mlp: str = "mlp"
    mlp_output_norm: str | None = None
    norm_weight_offset: float = 0.0
    scales_embeddings: bool = False


# Llama, Mistral and Qwen2 share one decoder block (transformers' modeling_{llama,mistral,qwen2}.py):
# x + attn(input_layernorm(x)), then y + mlp(post_attention_layernorm(y)).
_LLAMA_LAYOUT: dict[str, Any] = {}
# Gemma 3 (modeling_gemma3.Gemma3DecoderLayer): x + post_attention_layernorm(attn(input_layernorm(x))), then
# y + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(y))); norms multiply by 1 + weight.
_GEMMA3_LAYOUT: dict[str, Any] = {
    "attn_output_norm": "post_attention_layernorm",
    "mlp_input_norm": "pre_feedforward_layernorm",
    "mlp_output_norm": "post_feedforward_layernorm",
    "norm_weight_offset": 1.0,
    "scales_embeddings": True,
}

ARCH_TABLES: dict[str, ArchTable] = {
    "llama": ArchTable(family="llama", **_LLAMA_LAYOUT),
    "mistral": ArchTable(family="mistral", **_LLAMA_LAYOUT),
    "qwen2": ArchTable(family="qwen2", **_LLAMA_LAYOUT),
    "gemma3_text": ArchTable(family="gemma3", **_GEMMA3_LAYOUT),
    # the multimodal Gemma3ForConditionalGeneration: the same blocks under model.language_model
    "gemma3": ArchTable(
        family="gemma3", text_model="model.language_model", layers="model.language_model.layers",
        final_norm="model.language_model.norm",
        **_GEMMA3_LAYOUT,
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


# ---------------------------------------------------------------------------------------------------------
# The modules of one layer (``lm`` is a :class:`ltvlib.models.LoadedModel`: ``lm.model`` and ``lm.table``)


def text_model(lm: LoadedModel) -> nn.Module:
    """The decoder stack (``*Model`` of a causal LM, the language model of a multimodal one)."""
    return get_module(lm.model, lm.table.text_model)


def block(lm: LoadedModel, layer: int) -> nn.Module:
    """Decoder block ``layer`` (negative counts from the end); ``ValueError`` for a layer out of range."""
    blocks = cast(nn.ModuleList, get_module(lm.model, lm.table.layers))
    return blocks[check_layer(layer, len(blocks))]


def _in_block(lm: LoadedModel, layer: int, path: str | None) -> nn.Module | None:
    return None if path is None else get_module(block(lm, layer), path)


def attention(lm: LoadedModel, layer: int) -> nn.Module:
    """The attention module of block ``layer``."""
    return get_module(block(lm, layer), lm.table.attention)


def attn_input_norm(lm: LoadedModel, layer: int) -> nn.Module:
    """The RMSNorm before block ``layer``'s attention (it reads the block input)."""
    return get_module(block(lm, layer), lm.table.attn_input_norm)


def v_proj(lm: LoadedModel, layer: int) -> nn.Linear:
    """The value projection of block ``layer``: ``(n_kv_heads * head_dim, d_model)`` weight."""
    return cast(nn.Linear, get_module(block(lm, layer), lm.table.v_proj))


def o_proj(lm: LoadedModel, layer: int) -> nn.Linear:
    """The attention output projection of block ``layer``: ``(d_model, n_heads * head_dim)`` weight."""
    return cast(nn.Linear, get_module(block(lm, layer), lm.table.o_proj))


def attn_output_norm(lm: LoadedModel, layer: int) -> nn.Module | None:
    """The RMSNorm between ``o_proj`` and the residual stream (Gemma 2/3), or None where there is none."""
    return _in_block(lm, layer, lm.table.attn_output_norm)


def mlp_input_norm(lm: LoadedModel, layer: int) -> nn.Module:
    """The RMSNorm before block ``layer``'s MLP (Llama's ``post_attention_layernorm``)."""
    return get_module(block(lm, layer), lm.table.mlp_input_norm)


def mlp(lm: LoadedModel, layer: int) -> nn.Module:
    """The MLP of block ``layer``."""
    return get_module(block(lm, layer), lm.table.mlp)


def mlp_output_norm(lm: LoadedModel, layer: int) -> nn.Module | None:
    """The RMSNorm between the MLP and the residual stream (Gemma 2/3), or None where there is none."""
    return _in_block(lm, layer, lm.table.mlp_output_norm)


def final_norm(lm: LoadedModel) -> nn.Module:
    """The final RMSNorm module (the one before the unembedding)."""
    return get_module(lm.model, lm.table.final_norm)


def unembedding(lm: LoadedModel) -> nn.Linear:
    """The unembedding (``lm_head``)."""
    return cast(nn.Linear, get_module(lm.model, lm.table.unembed))


# ---------------------------------------------------------------------------------------------------------
# RMSNorm conventions


def norm_gain(norm: nn.Module, table: ArchTable) -> torch.Tensor:
    """The effective elementwise gain of an RMSNorm module (``weight + offset``)."""
    return norm.weight.detach() + table.norm_weight_offset  # type: ignore[operator]


def norm_eps(norm: nn.Module) -> float:
    """The epsilon of an RMSNorm module (``variance_epsilon`` in Llama-style norms, ``eps`` in Gemma's)."""
    eps = getattr(norm, "variance_epsilon", None)
    if eps is None:
        eps = getattr(norm, "eps", None)
    if eps is None:
        raise ValueError(f"{type(norm).__name__} has neither variance_epsilon nor eps: not an RMSNorm")
    return float(eps)


def inverse_rms(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """``1 / sqrt(mean(x^2) + eps)`` over the last axis, in float64: the scale ``norm`` applies to ``x``."""
    return torch.rsqrt(x.double().pow(2).mean(-1) + norm_eps(norm))
