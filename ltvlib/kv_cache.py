"""Run a prompt's fixed prefix once (KV cache) and only its last positions many times.

A task vector injected at the last token (at any layer) cannot change the keys and values of earlier
tokens, because attention is causal. So when training or sweeping vectors at the last positions, the
prefix's keys and values are computed once without gradients and every later forward processes only the
tail. Gradients through the tail equal those of a full forward (``tests/test_kv_cache.py`` checks it).

Shapes: per layer, keys and values ``(batch, n_kv_heads, prefix_len, head_dim)``; the prefix mask
``(batch, prefix_len)``; ``next_position`` ``(batch,)`` is the number of real prefix tokens, i.e. the
position id of the first tail token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .prompts import positions_from_mask
from .sites import block, final_norm, text_model, unembedding

if TYPE_CHECKING:
    from .models import LoadedModel


@dataclass
class KVPrefix:
    """Cached keys/values of a (possibly padded) batch of prefixes."""

    keys: list[Tensor]
    values: list[Tensor]
    attention_mask: Tensor
    next_position: Tensor

    @property
    def batch(self) -> int:
        return self.attention_mask.shape[0]

    @property
    def length(self) -> int:
        return self.attention_mask.shape[1]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def rows(self, index: Sequence[int] | Tensor) -> KVPrefix:
        """The prefixes of the given rows."""
        idx = torch.as_tensor(index, device=self.attention_mask.device, dtype=torch.long)
        return KVPrefix(
            [k[idx] for k in self.keys], [v[idx] for v in self.values], self.attention_mask[idx], self.next_position[idx]
        )

    def expand(self, batch: int) -> KVPrefix:
        """Repeat a single-row prefix ``batch`` times (views, no copy)."""
        if self.batch != 1:
            raise ValueError(f"only a single-row prefix can be expanded, this one has {self.batch} rows")
        return KVPrefix(
            [k.expand(batch, -1, -1, -1) for k in self.keys],
            [v.expand(batch, -1, -1, -1) for v in self.values],
            self.attention_mask.expand(batch, -1),
            self.next_position.expand(batch),
        )




def _as_cache(lm: LoadedModel, prefix: KVPrefix) -> Any:
    from transformers import DynamicCache

    # DynamicCache concatenates on update, so the stored prefix tensors are never modified.
    return DynamicCache(ddp_cache_data=list(zip(prefix.keys, prefix.values)), config=lm.model.config)


def forward_tokens(
    lm: LoadedModel,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    prefix: KVPrefix | None = None,
    logits_to_keep: int = 1,
    keep_cache: bool = False,
) -> tuple[Tensor, KVPrefix | None]:
    """Forward ``input_ids`` after an optional cached prefix.

    Args:
        input_ids, attention_mask: ``(batch, n)`` tokens after the prefix (padding anywhere is fine).
        prefix: cached prefix of the same batch, or None.
        logits_to_keep: how many final columns get logits (``0`` = all).
        keep_cache: also return the extended prefix (prefix + these tokens).

    Returns:
        logits ``(batch, logits_to_keep, vocab)`` and the extended :class:`KVPrefix` if asked for.
    """
    start = prefix.next_position if prefix is not None else 0
    position_ids = positions_from_mask(attention_mask, start)
    full_mask = attention_mask if prefix is None else torch.cat([prefix.attention_mask, attention_mask], dim=1)
    cache = _as_cache(lm, prefix) if prefix is not None else None
    if cache is None and keep_cache:
        from transformers import DynamicCache

        cache = DynamicCache(config=lm.model.config)
    out = lm.model(
        input_ids=input_ids,
        attention_mask=full_mask,
        position_ids=position_ids,
        cache=cache,
        use_cache=cache is not None,
        logits_to_keep=logits_to_keep,
    )
    extended = None
    if keep_cache:
        layers = out.cache.layers
        if any(layer.keys.shape[-2] != full_mask.shape[1] for layer in layers):
            raise ValueError("the prompt is longer than a sliding attention window; prefix caching needs shorter prompts")
        nxt = (prefix.next_position if prefix is not None else 0) + attention_mask.sum(-1)
        extended = KVPrefix([layer.keys for layer in layers], [layer.values for layer in layers], full_mask, nxt)
    return out.logits, extended


def forward_alternatives(lm: LoadedModel, tokens: Tensor, prefix: KVPrefix) -> Tensor:
    """``n`` alternative next tokens after one cached prefix, run as ``n`` positions of one sequence.

    Each position attends the prefix and itself only and gets the prefix's next position id, so column ``j``
    computes exactly what a batch row holding the prefix and ``tokens[j]`` would, while the prefix's keys and
    values are read once instead of copied into ``n`` rows. A hook that changes column ``j`` (prompt position
    ``j - n`` counted from the end, with the cache's ``prefix.length`` columns as offset) changes only that
    alternative.

    Args:
        tokens: ``(n,)`` token ids.
        prefix: a single-row prefix (:meth:`KVPrefix.rows`; padding in it is fine).

    Returns:
        ``(n, vocab)`` next-token logits, column ``j``'s in row ``j``, with the model's final-logit soft-capping.
    """
    if prefix.batch != 1:
        raise ValueError(f"alternatives follow a single-row prefix; this one has {prefix.batch} rows")
    n = tokens.shape[0]
    device = prefix.attention_mask.device
    seen = prefix.attention_mask.bool()[:, None, None, :].expand(1, 1, n, prefix.length)
    own = torch.eye(n, dtype=torch.bool, device=device)[None, None]
    mask: Any = torch.cat([seen, own], dim=-1)  # (1, 1, n, prefix + n): True where a position may attend
    layer_types = getattr(text_model(lm).config, "layer_types", None)
    # one mask per attention type: a cached prefix is shorter than a sliding window (compute_prefix refuses longer
    # ones) and every position has the prefix's next position id, so no key lies outside a window
    if layer_types is not None:
        mask = {t: mask for t in set(layer_types)}
    out = lm.model(
        input_ids=tokens.view(1, n).to(device),
        attention_mask=mask,
        position_ids=prefix.next_position.view(1, 1).expand(1, n),
        cache=_as_cache(lm, prefix),
        use_cache=True,
        logits_to_keep=n,
    )
    return out.logits[0]


@torch.no_grad()
def compute_prefix(lm: LoadedModel, input_ids: Tensor, attention_mask: Tensor, *, prefix: KVPrefix | None = None) -> KVPrefix:
    """Keys/values of ``input_ids`` (after an optional earlier prefix), without gradients."""
    if input_ids.shape[1] == 0:
        if prefix is not None:
            return prefix
        raise ValueError("cannot build a prefix from zero tokens")
    _, extended = forward_tokens(lm, input_ids, attention_mask, prefix=prefix, logits_to_keep=1, keep_cache=True)
    assert extended is not None
    return extended


def forward_from_layer(
    lm: LoadedModel,
    hidden: Tensor,
    start: int,
    attention_mask: Tensor,
    *,
    prefix: KVPrefix | None = None,
    logits_to_keep: int = 1,
) -> Tensor:
    """Run decoder blocks ``start..L-1`` (then the final norm and unembedding) from block-input states.

    When a vector enters at block ``start``, the blocks before it see exactly what they saw without it,
    so their output for the tokens being run can be cached and the forward resumed at ``start``.

    Args:
        hidden: ``(batch, n, d_model)`` residual stream entering block ``start`` for the ``n`` new tokens.
        start: first block to run.
        attention_mask: ``(batch, n)`` mask of the new tokens (the prefix's own mask is prepended).
        prefix: cached keys/values of the earlier tokens (every layer), or None.
        logits_to_keep: final columns that get logits.

    Returns:
        ``(batch, logits_to_keep, vocab)`` logits, with the model's final-logit soft-capping if it has one.
    """
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    base: Any = text_model(lm)  # the architecture's *Model: config, rotary_emb
    config = base.config
    start_pos = prefix.next_position if prefix is not None else 0
    position_ids = positions_from_mask(attention_mask, start_pos)
    full_mask = attention_mask if prefix is None else torch.cat([prefix.attention_mask, attention_mask], dim=1)
    cache = _as_cache(lm, prefix) if prefix is not None else None
    kwargs = {"config": config, "inputs_embeds": hidden, "attention_mask": full_mask, "cache": cache,
              "position_ids": position_ids}
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and "sliding_attention" in layer_types:
        masks = {"full_attention": create_causal_mask(**kwargs),
                 "sliding_attention": create_sliding_window_causal_mask(**kwargs)}
        rotary = {t: base.rotary_emb(hidden, position_ids, t) for t in set(layer_types)}

        def mask_for(i: int) -> Any:
            return masks[layer_types[i]]

        def rope_for(i: int) -> Any:
            return rotary[layer_types[i]]
    else:
        mask = create_causal_mask(**kwargs)
        rope = base.rotary_emb(hidden, position_ids=position_ids)

        def mask_for(i: int) -> Any:
            return mask

        def rope_for(i: int) -> Any:
            return rope

    for i in range(start, config.num_hidden_layers):
        hidden = block(lm, i)(
            hidden, attention_mask=mask_for(i), position_embeddings=rope_for(i), position_ids=position_ids,
            cache=cache, use_cache=cache is not None,
        )
    # contiguous: a strided slice sends the unembedding to a batched product with the weight copied per row
    hidden = final_norm(lm)(hidden[:, -logits_to_keep:].contiguous())
    logits = unembedding(lm)(hidden)
    cap = getattr(config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits
