"""The unembedding reads the positions it scores as one matrix.

transformers' causal-LM heads keep the last ``logits_to_keep`` positions with a slice, ``hidden[:, -n:, :]``, and
pass that slice to the output embedding (``lm_head``) as it is. With more than one row in the batch the slice is
not contiguous (unless it keeps every position), and torch's ``matmul`` cannot fold a ``(rows, n, d)`` input with
those strides into one ``(rows * n, d) x (d, vocab)`` product: it runs a batched product whose every batch reads the
whole ``vocab x d`` weight again (113 MB for SmolLM2, 671 MB for Gemma 3 in fp32). On CPU that made the unembedding
of 64 rows 12x slower than one product, and its backward 7x (``bench/unembedding.py``). Every pass through a
head with ``logits_to_keep`` paid it: the prompt runner's first passes, chapter 03's adapters, stream statistics.

:func:`use_contiguous_unembedding` gives the output embedding a forward pre-hook that copies a non-contiguous
input into one block (``rows x n x d`` values, a few KB per row) before the product, so the weight is read once.
The hook belongs to the loaded model for its lifetime, like its attention implementation: it changes how the
product is computed, not what it computes (logits agree to float rounding, ``tests/test_unembedding.py``).

Shapes: the head's input ``(batch, n, d_model)`` (any strides), its output ``(batch, n, vocab)``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

_MARK = "_ltv_contiguous_input"
"""Attribute set on an output embedding that already has the hook, so loading twice adds it once."""


def _contiguous_input(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """Forward pre-hook: the first argument as one contiguous block; ``None`` (unchanged) when it already is."""
    x = args[0]
    if not isinstance(x, Tensor) or x.is_contiguous():
        return None
    return (x.contiguous(), *args[1:])


def use_contiguous_unembedding(model: Any) -> bool:
    """Have ``model``'s output embedding (``get_output_embeddings()``, a transformers model's ``lm_head``) read a
    non-contiguous input as one block. Returns whether the model has the hook (``False``: it has no output
    embedding). Calling it again on the same model adds nothing."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Module):
        return False
    if not getattr(head, _MARK, False):
        head.register_forward_pre_hook(_contiguous_input)
        setattr(head, _MARK, True)
    return True


def has_contiguous_unembedding(model: Any) -> bool:
    """Whether ``model``'s output embedding has the hook of :func:`use_contiguous_unembedding`."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return bool(getattr(head, _MARK, False))


__all__ = ["has_contiguous_unembedding", "use_contiguous_unembedding"]
