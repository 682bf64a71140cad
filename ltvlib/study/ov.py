"""The cached OV measurements a chapter shows: :func:`ov_experiment` (a trained LTV against its OV and MLP
reconstructions) and :func:`ov_control_experiment` (the same reconstruction of random vectors of its norm).

The measurements themselves are :mod:`ltvlib.analysis.ov`; results are cached with
:func:`ltvlib.cache.cached_json`, keyed by the vector (:func:`ltvlib.study.key_heads.vector_key`), the query sets
and the source this module depends on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..analysis.controls import random_like
from ..analysis.key_heads import attention_stats, head_accuracy, last_token_runner
from ..analysis.ov import (
    CONTROL_PATHS,
    CONTROL_VARIANTS,
    OV_VARIANTS,
    measure_norm_scales,
    mlp_response,
    mlp_states,
    ov_control,
    ov_reconstruction,
    proportion_record,
)
from ..cache import cached_json, dependency_hash
from ..inject import VectorEdit
from ..tasks import Example
from .key_heads import vector_key

if TYPE_CHECKING:
    from ..models import LoadedModel


def ov_control_experiment(
    lm: LoadedModel, ltv: Any, test: Sequence[Example], *, n_draws: int = 10, seed: int = 0, variant: str = "paper",
    path: str = "ov", queries: Sequence[Example] = (),
) -> dict[str, Any]:
    """Cached :func:`ov_control` of a trained single-vector LTV on ``test`` with ``n_draws`` random vectors of
    its norm (:func:`ltvlib.analysis.controls.random_like`, ``seed``): the LTV and every draw sent through the
    same map (``path``: ``"ov"`` or ``"mlp"``) in the same form (``variant``: ``"paper"`` or ``"at |θ|"``) and
    injected where the LTV was (block input of its layer, last position, added). The MLP path's Jacobians are
    taken at the states of ``queries`` (held-out analysis queries) with the LTV injected. Cost: ``n_draws + 1``
    evaluations of ``test`` (plus one pass over ``queries`` for the MLP path)."""
    if len(ltv.layers) != 1 or len(ltv.positions) != 1 or ltv.positions[0] != -1:
        raise ValueError(f"ov_control_experiment needs a single-vector LTV at position -1, got layers {ltv.layers}, "
                         f"positions {ltv.positions}")
    if variant not in CONTROL_VARIANTS:
        raise ValueError(f"unknown OV variant {variant!r}; allowed: {', '.join(CONTROL_VARIANTS)}")
    if path not in CONTROL_PATHS:
        raise ValueError(f"unknown reconstruction path {path!r}; allowed: {', '.join(CONTROL_PATHS)}")
    if path == "mlp" and not queries:
        raise ValueError("the MLP path needs analysis queries (queries=...) to take its Jacobians at")
    layer = ltv.layers[0]
    key = {"what": "ov-control", "model": lm.name, "test": [e.input for e in test], "n_draws": n_draws, "seed": seed,
           "variant": variant, "path": path, "queries": [e.input for e in queries] if path == "mlp" else None,
           **vector_key(ltv), "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        theta = ltv.vectors[0].to(lm.device, lm.dtype)
        draws = random_like(theta.float().cpu(), n_draws, seed).to(lm.device, lm.dtype)
        runner = last_token_runner(lm, ltv.task, test)
        states = mlp_states(lm, last_token_runner(lm, ltv.task, queries), layer, ltv.edits()) if path == "mlp" else None
        return ov_control(lm, runner, theta, layer, draws, variant=variant, path=path, states=states) | {
            "n_draws": n_draws, "seed": seed}

    return cached_json("ov/control", key, compute)


# --------------------------------------------------------------------------------------------------------
# Chapter-level helper (cached)
# --------------------------------------------------------------------------------------------------------


def ov_experiment(lm: LoadedModel, ltv: Any, queries: Sequence[Example], test: Sequence[Example]) -> dict[str, Any]:
    """Accuracy of a trained single-vector LTV and of its replacements on ``test`` (cached).

    Measurements that need forward passes (norm scales, attention to the last position, MLP states) use
    ``queries`` (held-out analysis queries) with the LTV injected. Every replacement is injected where the
    LTV was: block input of its layer, last position, added.

    Returns:
        ``accuracy`` per variant (``zero_shot``, ``ltv``, ``ov``, ``ov_weighted``, ``ov_raw``, ``mlp``, and
        ``ov_normed``: ``ov`` rescaled to the LTV's norm), ``label_accuracy`` (the same, argmax over the label
        words' first tokens; None for open-vocabulary tasks), ``proportions`` (each as
        :func:`proportion_record`, with ``n`` and Wilson interval), ``variants`` (:data:`OV_VARIANTS`: which is
        the paper's form, which are ours) and ``paper_variant`` (``"ov_raw"``, the one for verdicts),
        ``norm`` (L2 norm of each vector), ``cos`` (cosine with the LTV), ``layer``, ``n_test``.
    """
    if len(ltv.layers) != 1 or len(ltv.positions) != 1 or ltv.positions[0] != -1:
        raise ValueError(f"ov_experiment needs a single-vector LTV at position -1, got layers {ltv.layers}, "
                         f"positions {ltv.positions}")
    layer = ltv.layers[0]
    key = {"what": "ov", "model": lm.name, "queries": [e.input for e in queries], "test": [e.input for e in test],
           **vector_key(ltv), "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        theta = ltv.vectors[0].to(lm.device, lm.dtype)
        edits = ltv.edits()
        analysis = last_token_runner(lm, ltv.task, queries)
        scales = measure_norm_scales(lm, analysis, edits)
        stats = attention_stats(lm, analysis, edits)
        vectors = {
            "ltv": theta,
            "ov": ov_reconstruction(lm, theta, layer, scales=scales),
            "ov_weighted": ov_reconstruction(lm, theta, layer, scales=scales, head_weights=stats.final),
            "ov_raw": ov_reconstruction(lm, theta, layer),
            "mlp": mlp_response(lm, analysis, theta, layer, edits),
        }
        # the plain sum's direction at theta's size: separates a wrong direction from a wrong scale
        vectors["ov_normed"] = vectors["ov"] * (theta.norm() / vectors["ov"].norm())
        runner = last_token_runner(lm, ltv.task, test)
        results = {"zero_shot": head_accuracy(lm, runner)}
        for name, v in vectors.items():
            results[name] = head_accuracy(lm, runner, [VectorEdit(layer, -1, v)])
        acc = {name: r["accuracy"] for name, r in results.items()}
        label_acc = {name: r["label_accuracy"] for name, r in results.items()} if runner.task.labels else None
        proportions = {name: {"accuracy": proportion_record(r["correct"]),
                              "label_accuracy": proportion_record(r["label_correct"]) if label_acc else None}
                       for name, r in results.items()}
        cos = torch.nn.functional.cosine_similarity
        return {
            "accuracy": acc, "label_accuracy": label_acc, "proportions": proportions, "variants": OV_VARIANTS,
            "paper_variant": "ov_raw", "layer": layer, "n_test": len(test),
            "norm": {k: float(v.double().norm()) for k, v in vectors.items()},
            "cos": {k: float(cos(v.double(), theta.double(), dim=0)) for k, v in vectors.items()},
        }

    return cached_json("ov/accuracy", key, compute)
