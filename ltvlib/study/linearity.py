"""Chapter 05's linearity measurement, cached per (model, task, layer, fit sizes, run sizes, seed, vector,
source): :func:`cached_linearity` and :func:`cached_linearity_control` (the fit sizes and layers of each run are
:mod:`ltvlib.study.plans`'). The measurements themselves are :mod:`ltvlib.analysis.linearity`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

import torch

from ..analysis.linearity import (
    LinearityConfig,
    ShiftProbe,
    add_before_final_norm,
    additivity,
    alignment_baseline,
    cosine,
    fit_linear_map,
    homogeneity,
    label_token_ids,
    lens_accuracy,
    linearity_control,
    logit_difference,
    logit_lens,
    polar,
    shift_accuracies,
    task_alignment,
)
from ..cache import cached_json, dependency_hash, task_key
from ..evaluate import EvalSet, evaluate
from ..inject import VectorEdit
from ..memo import memo
from ..sites import check_layer
from ..tasks import Example, get_task
from .ltvs import RunSizes

if TYPE_CHECKING:
    from ..models import LoadedModel


# The model's memo (:mod:`ltvlib.memo`) keeps its last two probes (fit and test queries) and its last test set.
def _probe(lm: LoadedModel, which: str, task: str, queries: Sequence[Example]) -> ShiftProbe:
    return memo(lm, "linearity.probes", (which, task, tuple(queries)), lambda: ShiftProbe(lm, task, queries), keep=2)


def cached_linearity(
    lm: LoadedModel, task: str, run_sizes: RunSizes, layer: int, *, config: LinearityConfig, seed: int = 0, k: int = 8
) -> dict[str, Any]:
    """Everything chapter 05 reports for one (task, layer): the LTV (``trained_ltv``), the fitted map, the
    linearity checks, accuracies of the LTV and of its reconstructions, and the diagnostics. Cached.

    Fit and checks use ``n_queries`` training-split queries; accuracies and logit differences ``run_sizes``'
    test split. Accuracies: ``ltv`` (the LTV at block ``layer``, :func:`ltvlib.study.ltvs.ltv_accuracy`),
    ``reconstruction`` (``W theta`` added before the final norm, :func:`add_before_final_norm`, evaluated by
    :func:`ltvlib.evaluate.evaluate`), ``reconstruction_last_block_input`` (``W theta`` added at the input of
    the last block, last token: the other reading of "at the last layer", which lets the last block's
    attention still mix it with the query), and from the test queries' final-norm inputs plus a vector:
    ``ltv_lens`` (their real shifts), ``W theta``, ``Q theta`` (rotation only), ``S theta`` (stretch only),
    ``zero_shot``.
    """
    from .ltvs import ltv_accuracy, task_splits, trained_ltv

    layer = check_layer(layer, lm.n_layers)
    config = replace(config, seed=seed)
    splits = task_splits(task, run_sizes)
    ltv = trained_ltv(lm, task, run_sizes, layers=[layer], seed=seed)
    theta = ltv.vectors[0].float()
    key = {"model": lm.name, "task": task_key(task), "layer": layer, "config": asdict(config), "n_test": len(splits.test),
           "n_train": len(splits.train), "seed": seed, "k": k, "ltv": ltv.metadata(without=("curve",)),
           "vector_sum": float(ltv.vectors.double().sum()), "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        start = time.perf_counter()
        fit_q = list(splits.train[: config.n_queries])
        probe = _probe(lm, "fit", task, fit_q)
        test = _probe(lm, "test", task, splits.test)
        fit = fit_linear_map(probe, layer, theta, config)
        q, s = polar(fit.W)
        w_t, q_t, s_t = fit.W @ theta, q @ theta, s @ theta
        fit_seconds = time.perf_counter() - start
        gen = torch.Generator().manual_seed(seed + 1)
        partner = torch.randn(theta.shape, generator=gen) * theta.norm() / math.sqrt(theta.numel())
        at_theta = probe.shift_all(layer, theta)
        mean_shift = fit.mean_shift
        hom = homogeneity(probe, layer, theta, config.scales, at_theta=at_theta)
        add = additivity(probe, layer, theta, partner, at_theta1=at_theta)
        # accuracies: the LTV as trained, its reconstruction by a hook, and offline variants
        real = ltv_accuracy(lm, ltv, run_sizes, seed=seed)
        es = memo(lm, "linearity.evalsets", (task, splits.test), lambda: EvalSet(lm, task, splits.test, tail=1), keep=1)
        with add_before_final_norm(lm, w_t.to(lm.device)):
            recon = evaluate(es)
        # the other reading of "at the last layer": the LTV's own site, block L-1's input
        last_block = evaluate(es, [VectorEdit(lm.n_layers - 1, -1, w_t.to(lm.device))])
        base = test.base(layer)
        real_states = base + test.shift_all(layer, theta)
        gold = test.gold
        states = {"zero_shot": base, "ltv_lens": real_states, "W theta": base + w_t, "Q theta": base + q_t,
                  "S theta": base + s_t}
        labels = label_token_ids(lm, task, list(splits.test))
        vectors = {"theta": theta, "Q theta": q_t, "S theta": s_t, "W theta": w_t, "mean shift": mean_shift}
        sv = torch.linalg.svdvals(fit.W.double())
        return {
            "task": task, "layer": layer, "n_fit": fit.n_fit, "n_heldout": fit.n_heldout,
            "r2_heldout": fit.r2_heldout, "explained_heldout": fit.explained_heldout, "r2_train": fit.r2_train,
            "w_theta_vs_shift": {"cos": cosine(w_t, mean_shift),
                                 "rel_err": float((w_t - mean_shift).norm() / mean_shift.norm().clamp_min(1e-30))},
            "homogeneity": hom, "additivity_random": add,
            "accuracy": {"ltv": real["accuracy"], "reconstruction": recon.accuracy,
                         "reconstruction_last_block_input": last_block.accuracy,
                         **{name: lens_accuracy(lm, st, gold) for name, st in states.items()}},
            "ltv_val_accuracy": ltv.training.best_val_accuracy, "ltv_steps": ltv.training.steps,
            "logit_diff": {name: logit_difference(lm, st, gold, labels) for name, st in states.items()},
            "alignment": {name: float(task_alignment(lm, v, labels)) for name, v in vectors.items()},
            "alignment_random": alignment_baseline(lm, labels), "n_labels": len(labels),
            "cos_theta_Qtheta": cosine(theta, q_t), "cos_theta_Stheta": cosine(theta, s_t),
            "cos_Wtheta_Stheta": cosine(w_t, s_t), "cos_Wtheta_Qtheta": cosine(w_t, q_t),
            "theta_norm": float(theta.norm()), "norm_ratio": float(s_t.norm() / theta.norm()),
            "q_distance_from_identity": float((q - torch.eye(q.shape[0])).norm() / math.sqrt(q.shape[0])),
            "singular_values": {"max": float(sv[0]), "median": float(sv.median()), "min": float(sv[-1])},
            "lens": {name: logit_lens(lm, v.to(lm.device), k) for name, v in vectors.items()},
            # the LTV's :func:`vector_diagnostics` (same keys as a control draw's), and W theta itself, so the
            # control (:func:`cached_linearity_control`) need not refit the LTV's map
            "diagnostics": {
                "cos_mean_shift": cosine(theta, mean_shift), "alignment": float(task_alignment(lm, theta, labels)),
                "alignment_mean_shift": float(task_alignment(lm, mean_shift, labels)),
                "cos_theta_Qtheta": cosine(theta, q_t), "alignment_Qtheta": float(task_alignment(lm, q_t, labels)),
                "alignment_Wtheta": float(task_alignment(lm, w_t, labels)), "r2_heldout": fit.r2_heldout,
                "norm_ratio": float(s_t.norm() / theta.norm()),
            },
            "w_theta": w_t.tolist(),
            "fit_seconds": fit_seconds, "seconds": time.perf_counter() - start,
        }

    return cached_json("linearity", key, compute)


def cached_linearity_control(
    lm: LoadedModel, task: str, run_sizes: RunSizes, layer: int, *, config: LinearityConfig, seed: int = 0, n_draws: int = 5,
    fit: bool = True,
) -> dict[str, Any]:
    """Controls for chapter 05 at one (task, layer), cached: the random-vector control and the upper bound.

    The LTV is :func:`ltvlib.study.ltvs.trained_ltv` (as in :func:`cached_linearity`). ``control``:
    :func:`linearity_control` of the LTV against ``n_draws`` random vectors of its norm
    (:func:`ltvlib.analysis.controls.random_like`, seed ``seed + 2``) on the fit queries; each draw refits ``W`` (the
    cost is ``n_draws`` fits; ``fit=False`` measures only the fit-free quantities); the LTV's own values and
    ``W theta`` come from :func:`cached_linearity` (cached, same fit). ``shift_accuracy`` (on
    the test queries): :func:`shift_accuracies` with ``W theta`` as the constant, so the paper's constant
    shift stands beside its upper bound, each query's own shift; label-restricted accuracies for
    classification tasks.
    """
    from ..analysis.controls import random_like
    from .ltvs import task_splits, trained_ltv

    layer = check_layer(layer, lm.n_layers)
    config = replace(config, seed=seed)
    splits = task_splits(task, run_sizes)
    ltv = trained_ltv(lm, task, run_sizes, layers=[layer], seed=seed)
    theta = ltv.vectors[0].float()
    key = {"what": "control", "model": lm.name, "task": task_key(task), "layer": layer, "config": asdict(config),
           "n_test": len(splits.test), "n_train": len(splits.train), "seed": seed, "n_draws": n_draws, "fit": fit,
           "ltv": ltv.metadata(without=("curve",)), "vector_sum": float(ltv.vectors.double().sum()),
           "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        start = time.perf_counter()
        fit_q = list(splits.train[: config.n_queries])
        probe = _probe(lm, "fit", task, fit_q)
        test = _probe(lm, "test", task, splits.test)
        token_ids = label_token_ids(lm, task, list(splits.test))
        draws = random_like(theta.cpu(), n_draws, seed + 2)
        base = cached_linearity(lm, task, run_sizes, layer, config=config, seed=seed)
        own = dict(base["diagnostics"])
        if not fit:
            own = {k: own[k] for k in ("cos_mean_shift", "alignment", "alignment_mean_shift")}
        control = linearity_control(probe, layer, theta, token_ids, draws, config, fit=fit, ltv_values=own)
        w_theta = torch.tensor(base["w_theta"], dtype=torch.float32)
        labels = token_ids if get_task(task).labels else None
        return {"task": task, "layer": layer, "control": control, "alignment_random": alignment_baseline(lm, token_ids),
                "shift_accuracy": shift_accuracies(test, layer, theta, w_theta, labels),
                "seconds": time.perf_counter() - start}

    return cached_json("linearity/control", key, compute)
