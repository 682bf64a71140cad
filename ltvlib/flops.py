"""The arithmetic of a decoder-only transformer from its config alone (no weights): a model's :class:`Shape` and
the :class:`Cost` (tokens, FLOPs) of a forward, with or without the backward of an activation gradient.

What is counted is what ``torch.utils.flop_counter.FlopCounterMode`` counts, so that an estimate can be checked
against a measured count: the matrix products (``2 x N_block`` per token and block: Q, K, V, O and a gated MLP),
attention as torch counts ``scaled_dot_product_attention`` (``4 x heads x head_dim x n_query x n_key`` forward,
over the whole key range as for a causal kernel; 2.5 times that backward: the scores are recomputed), and the
unembedding ``2 x d x vocab`` per position whose logits are computed. Elementwise work (norms, activations,
softmax, rotary embeddings) is left out: it is a few per cent of the total on these shapes.

**Backward** (:func:`forward` with ``grad=True``): activation gradients only (frozen weights, as when training a
vector added to the residual stream): one matrix product per weight (the input's gradient), so ``2 x N_block`` per
token and block, attention 2.5 times its forward, and the unembedding once per kept position: about the forward
of the same blocks, not the 2x of weight training.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHAPE_ALIASES = {"llama-8b": "llama-3.1-8b", "llama-3.1-8b": "llama-3.1-8b", "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
                 "32b": "qwen2.5-32b", "qwen-32b": "qwen2.5-32b", "qwen2.5-32b": "qwen2.5-32b",
                 "llama-32b": "qwen2.5-32b", "70b": "llama-3-70b", "llama-70b": "llama-3-70b",
                 "llama-3-70b": "llama-3-70b", "meta-llama/Meta-Llama-3-70B": "llama-3-70b"}
"""Shape names :func:`model_shape` accepts besides registry names, folders and Hugging Face ids (the shapes are
:data:`ltvlib.models.RANDOM_SHAPES`; ``llama-32b`` is the Qwen2.5-32B shape: there is no Llama 32B)."""

VOCAB = {"llama-3.1-8b": 128256, "qwen2.5-32b": 152064, "llama-3-70b": 128256, "smollm2-135m": 49152,
         "gemma3-270m": 262144, "tiny-llama": 49152}
"""The published vocabulary of each built-in shape (a random model of that shape uses its tokenizer's)."""

_TIED_BY_DEFAULT = ("gemma",)
"""Model types whose config class ties the unembedding to the embedding when the config does not say."""


@dataclass(frozen=True)
class Shape:
    """What the cost needs from a model's config: depth, widths, heads (grouped keys and values), vocabulary."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int
    tied: bool

    @property
    def block_params(self) -> int:
        """Weights of one decoder block's matrix products: Q, K, V, O and a gated MLP (norms left out)."""
        attn = self.d_model * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        return attn + 3 * self.d_model * self.d_ff

    @property
    def n_params(self) -> int:
        return self.n_layers * self.block_params + self.vocab * self.d_model * (1 if self.tied else 2)

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * 2  # keys and values, bf16


def shape_from_config(config: Any, name: str) -> Shape:
    """The :class:`Shape` of a transformers config object or a ``config.json`` dict (a multimodal config's
    ``text_config`` when it has one)."""
    get = config.get if isinstance(config, Mapping) else (lambda key, default=None: getattr(config, key, default))
    text = get("text_config")
    if text is not None:
        return shape_from_config(text, name)

    def need(key: str) -> int:
        value = get(key)
        if not isinstance(value, int):
            raise ValueError(f"the config of {name!r} has no integer {key!r} (got {value!r}): not a decoder LM config")  # noqa: TRY004
        return value

    heads, d = need("num_attention_heads"), need("hidden_size")
    tied = get("tie_word_embeddings")
    if tied is None:
        tied = str(get("model_type", "")).startswith(_TIED_BY_DEFAULT)
    return Shape(name=name, n_layers=need("num_hidden_layers"), d_model=d, n_heads=heads,
                 n_kv_heads=get("num_key_value_heads") or heads, head_dim=get("head_dim") or d // heads,
                 d_ff=need("intermediate_size"), vocab=need("vocab_size"), tied=bool(tied))


def _read_json(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def model_shape(model: str) -> Shape:
    """The shape of ``model`` from its config only (no weights are read): a built-in shape (``llama-8b``,
    ``32b``, ``70b``, ...), a registry name, a local folder with a ``config.json``, or a Hugging Face id whose
    config is in the local hub cache.

    Raises:
        ValueError: none of these: the message lists the shapes and registry names.
    """
    from .models import MODEL_REGISTRY, RANDOM_PREFIX, RANDOM_SHAPES

    key = model[len(RANDOM_PREFIX):].partition("@")[0] if model.startswith(RANDOM_PREFIX) else model
    key = SHAPE_ALIASES.get(key, key)
    if key in RANDOM_SHAPES:
        # a registry model and its random shape are the same architecture: the fields, not the file, are read
        model_type, fields = RANDOM_SHAPES[key]
        return shape_from_config({"model_type": model_type, "vocab_size": VOCAB.get(key, 49152), **fields}, key)
    source = Path(model).expanduser()
    if (source / "config.json").is_file():
        return shape_from_config(_read_json(source / "config.json"), model)
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "config.json")
    except ValueError:  # not a valid repository id
        found = None
    if isinstance(found, str):
        return shape_from_config(_read_json(Path(found)), model)
    raise ValueError(f"no config for {model!r}: use a registry name ({', '.join(MODEL_REGISTRY)}), a shape "
                     f"({', '.join(sorted(SHAPE_ALIASES))}), a local folder with a config.json, or a Hugging Face "
                     "id whose config is in the local hub cache")


@dataclass
class Cost:
    """Tokens and FLOPs: forward (with and without gradient) and backward."""

    fwd_tokens: float = 0.0
    bwd_tokens: float = 0.0
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    peak_tokens: float = 0.0  # the most tokens one backward holds activations for (a batch's rows x tokens)
    units: list[str] = field(default_factory=list)

    @property
    def flops(self) -> float:
        return self.fwd_flops + self.bwd_flops

    def add(self, other: Cost) -> Cost:
        self.fwd_tokens += other.fwd_tokens
        self.bwd_tokens += other.bwd_tokens
        self.fwd_flops += other.fwd_flops
        self.bwd_flops += other.bwd_flops
        self.peak_tokens = max(self.peak_tokens, other.peak_tokens)
        return self

    def scaled(self, factor: float) -> Cost:
        """The same work done ``factor`` times (the peak sequence unchanged)."""
        return Cost(self.fwd_tokens * factor, self.bwd_tokens * factor, self.fwd_flops * factor,
                    self.bwd_flops * factor, self.peak_tokens, list(self.units))


ATTENTION_BACKWARD = 2.5
"""Attention's backward over its forward as torch counts it: five batched products (the scores recomputed, the
gradients of the scores, values, queries and keys) against two."""


def forward(shape: Shape, rows: float, n_query: float, n_key: float, *, first: int = 0, logits: float = 1,
            grad: bool = False) -> Cost:
    """``rows`` sequences of ``n_query`` new tokens attending ``n_key`` keys each (cached keys included),
    through blocks ``first..L-1``, ``logits`` unembedded positions per row; ``grad``: plus the
    activation-gradient backward through the same blocks and the unembedding."""
    blocks = shape.n_layers - first
    attn = 4 * shape.n_heads * shape.head_dim * n_query * n_key
    head = 2 * shape.d_model * shape.vocab * logits
    f = rows * (blocks * (2 * shape.block_params * n_query + attn) + head)
    c = Cost(fwd_tokens=rows * n_query, fwd_flops=f)
    if grad:
        c.peak_tokens = n_query + n_key  # one row; a caller that knows its batch sets the batch's
        c.bwd_tokens = rows * n_query
        c.bwd_flops = rows * (blocks * (2 * shape.block_params * n_query + ATTENTION_BACKWARD * attn) + head)
    return c


def full(shape: Shape, rows: float, n: float, logits: float = 1) -> Cost:
    """``rows`` prompts of ``n`` tokens, every block, no gradient."""
    return forward(shape, rows, n, n, logits=logits)
