"""The cached key-head measurements a chapter shows: :func:`cached_saliency` and :func:`key_head_experiment`.

The measurements themselves are :mod:`ltvlib.analysis.key_heads`; results are cached with
:func:`ltvlib.cache.cached_json`, keyed by the vector (:func:`vector_key`), the query sets and the source this
module depends on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..analysis.key_heads import (
    attention_stats,
    head_accuracy,
    head_saliency,
    last_token_runner,
    mean_head_outputs,
    random_heads,
    top_heads,
    u_shape_test,
)
from ..cache import cached_json, dependency_hash, task_key
from ..tasks import Example

if TYPE_CHECKING:
    from ..models import LoadedModel

# --------------------------------------------------------------------------------------------------------
# Chapter-level helpers (cached)
# --------------------------------------------------------------------------------------------------------


def _flags(result: dict[str, Any]) -> dict[str, list[int] | None]:
    """Per-query 0/1 correctness of a :func:`head_accuracy` result: ``{"full", "label"}`` (label None for an
    open-vocabulary task), kept so that differences between conditions get paired bootstrap intervals."""
    label = result["label_correct"]
    return {"full": [int(c) for c in result["correct"]], "label": None if label is None else [int(c) for c in label]}


def vector_key(ltv: Any) -> dict[str, Any]:
    """What identifies a trained vector in a result key: its metadata, a checksum of its values and its task's
    definition and data (the queries' gold answers come from them)."""
    return {"ltv": ltv.metadata(without=("curve",)), "task": task_key(ltv.task),
            "vector_sum": float(ltv.vectors.double().sum()), "vector_abs": float(ltv.vectors.double().abs().sum())}


def cached_saliency(lm: LoadedModel, ltv: Any, queries: Sequence[Example]) -> dict[str, Any]:
    """Cached :func:`head_saliency` of a trained LTV on ``queries``: ``{"saliency": (L x H) lists, "n"}``."""
    key = {"what": "saliency", "model": lm.name, "queries": [e.input for e in queries], **vector_key(ltv),
           "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        runner = last_token_runner(lm, ltv.task, queries)
        return {"saliency": head_saliency(lm, runner, ltv.edits()).tolist(), "n": len(runner)}

    return cached_json("key-heads/saliency", key, compute)


def key_head_experiment(
    lm: LoadedModel, ltv: Any, queries: Sequence[Example], test: Sequence[Example], *, fraction: float = 0.1,
    n_random: int = 5, seed: int = 0,
) -> dict[str, Any]:
    """Key heads of a trained LTV and what ablating them does (cached).

    Saliency, mean head outputs (for mean ablation) and attention statistics come from ``queries`` (held-out
    analysis queries, e.g. the validation split) with the LTV injected; accuracies from ``test``. Two
    selections are ablated: the top ``fraction`` of all heads (``key``), and as many heads chosen only among
    layers at or after the injection layer (``key_after``, the heads that can read the vector). Each has its
    random control: head sets of the same size drawn from the other heads (of all layers, or of layers at or
    after the injection layer), seeds ``seed .. seed + n_random - 1``.

    Returns:
        ``saliency`` (L x H), ``key_heads`` / ``key_after_heads`` (best first), ``accuracy`` (LTV alone),
        ``key`` / ``key_after`` ({zero, mean}), ``random`` / ``random_after`` ({zero: [...], mean: [...]}; ``random_after`` is None when
        the layers after the injection layer hold too few other heads),
        ``random_heads`` (the first control's draws), ``attention`` ({first, final}, L x H each), ``layer``,
        ``n_queries``, ``n_test``, and ``key_u_shape`` / ``key_after_u_shape`` (:func:`u_shape_test` of each
        set over the layers from the injection layer on; None with fewer than 3 such layers). Per-query
        correctness for paired intervals (each ``{"full": [0/1...], "label": [0/1...] or None}``): ``correct``
        (LTV alone), ``zero_shot_correct``, ``key_correct`` / ``key_after_correct`` ({zero, mean}) and
        ``random_correct`` / ``random_after_correct`` ({zero: [one per draw], mean: [...]}, or None).
    """
    if n_random < 1:
        raise ValueError(f"n_random must be at least 1, got {n_random}")
    key = {"what": "key-heads", "model": lm.name, "queries": [e.input for e in queries],
           "test": [e.input for e in test], "fraction": fraction, "n_random": n_random, "seed": seed,
           **vector_key(ltv), "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        layer = min(ltv.layers)
        saliency = torch.tensor(cached_saliency(lm, ltv, queries)["saliency"])
        analysis = last_token_runner(lm, ltv.task, queries)
        edits = ltv.edits()
        means = mean_head_outputs(lm, analysis, edits)
        stats = attention_stats(lm, analysis, edits)
        runner = last_token_runner(lm, ltv.task, test)
        alone = head_accuracy(lm, runner, edits)
        out: dict[str, Any] = {
            "saliency": saliency.tolist(), "accuracy": alone["accuracy"], "correct": _flags(alone),
            "zero_shot_correct": _flags(head_accuracy(lm, runner)),
            "attention": {"first": stats.first.tolist(), "final": stats.final.tolist()}, "layer": layer,
            "n_queries": len(queries), "n_test": len(test),
        }
        for name, min_layer in (("key", 0), ("key_after", layer)):
            keys = top_heads(saliency, fraction, min_layer=min_layer)
            control = "random" if name == "key" else "random_after"
            out[f"{name}_heads"] = [list(h) for h in keys]
            enough = lm.n_layers - layer >= 3 and any(l >= layer for l, _ in keys)
            out[f"{name}_u_shape"] = u_shape_test(keys, layer, lm.n_layers, lm.geometry.n_heads).to_dict() if enough else None
            ablated = {mode: head_accuracy(lm, runner, edits, heads=keys, mode=mode, means=means)
                       for mode in ("zero", "mean")}
            out[name] = {mode: r["accuracy"] for mode, r in ablated.items()}
            out[f"{name}_correct"] = {mode: _flags(r) for mode, r in ablated.items()}
            if (lm.n_layers - min_layer) * lm.geometry.n_heads - len(keys) < len(keys):
                out[control] = None  # too few other heads after the injection layer for a control
                out[f"{control}_correct"] = None
                continue
            out[control] = {"zero": [], "mean": []}
            out[f"{control}_correct"] = {"zero": [], "mean": []}
            draws = [random_heads(lm, len(keys), seed + d, exclude=keys, min_layer=min_layer) for d in range(n_random)]
            if name == "key":
                out["random_heads"] = [[list(h) for h in heads] for heads in draws]
            for heads in draws:
                for mode in ("zero", "mean"):
                    r = head_accuracy(lm, runner, edits, heads=heads, mode=mode, means=means)
                    out[control][mode].append(r["accuracy"])
                    out[f"{control}_correct"][mode].append(_flags(r))
        return out

    return cached_json("key-heads/ablation", key, compute)
