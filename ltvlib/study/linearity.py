"""Chapter 05's linearity measurement per profile, cached per (model, task, layer, profile sizes, seed, vector,
source): the fit sizes and layer plans of each profile, :func:`profile_linearity` and
:func:`profile_linearity_control`. The measurements themselves are :mod:`ltvlib.analysis.linearity`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, replace
from typing import Any

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
from ..sites import check_layer
from ..tasks import get_task
from .profiles import Profile

# ---------------------------------------------------------------------------------------------------------
# The chapter's measurement, cached per (model, task, layer, profile sizes, seed, vector, source)

LINEARITY_SIZES: dict[str, LinearityConfig] = {
    "smoke": LinearityConfig(n_queries=8, fit_factor=1.0, n_heldout=32, scales=(0.5, 1.0, 2.0)),
    "cpu": LinearityConfig(n_queries=32, fit_factor=2.0, n_heldout=256),
    "paper": LinearityConfig(n_queries=64, fit_factor=2.0, n_heldout=1024),
}


def linearity_config(profile: Profile) -> LinearityConfig:
    """The fit sizes of ``profile``; raises ``ValueError`` for a profile without an entry."""
    if profile.name not in LINEARITY_SIZES:
        raise ValueError(f"no linearity sizes for profile {profile.name!r}; known: {', '.join(LINEARITY_SIZES)}")
    return LINEARITY_SIZES[profile.name]


def linearity_plan(lm: Any, profile: Profile) -> dict[str, list[int]]:
    """Antonym-centred layer grid of the earlier chapter 05, kept as the grid chapter 08's
    :func:`ltvlib.study.across_models.linearity_layers` picks its layers from (chapter 05 itself now uses
    :func:`mechanism_plan`).

    ``paper``: every task at every layer. ``cpu``: training one LTV costs about a minute on two CPU cores,
    so Antonym gets 8 spread layers (sharing chapter 01's layers 0, 10, 15, 19, 29) and Capitalize and TREC
    (a classification task with short prompts) the middle layer (shared with chapter 00).
    ``smoke``: Antonym at the middle and last layers.
    """
    n, mid = lm.n_layers, lm.middle_layer
    if profile.name == "paper":
        return {t: list(range(n)) for t in profile.tasks}
    if profile.name == "cpu":
        antonym = sorted({0, round(n / 7), round(n / 4), n // 3, mid, round(0.63 * n), round(0.8 * n), n - 1})
        return {"antonym": antonym, "capitalize": [mid], "trec": [mid]}
    if profile.name == "smoke":
        return {"antonym": [mid, n - 1]}
    raise ValueError(f"no linearity plan for profile {profile.name!r}")


def mechanism_plan(lm: Any, profile: Profile) -> dict[str, list[int]]:
    """Which (task, layers) chapter 05 covers (issue 17) in ``profile``: label-space tasks first (they decide its verdicts),
    then open-vocabulary tasks beside them.

    ``paper``: every task at every layer. ``cpu``: TREC (a label-space task with short prompts) at the layers
    of chapter 01's TREC sweep (:func:`ltvlib.study.extracted.ltv_layers`, cached vectors) after layer 0
    and before the last fifth (where the fast recipe's LTVs often do not train), at most six of them spread
    out: 6, 12, 15, 17, 23 on a 30-layer model; SST-2 and Antonym at the middle layer (chapter 00's vectors).
    ``smoke``: SST-2 at three layers (a quarter, the middle, three quarters), Antonym at the middle layer.
    """
    n, mid = lm.n_layers, lm.middle_layer
    if profile.name == "paper":
        labelled = [t for t in profile.tasks if get_task(t).labels]
        return {t: list(range(n)) for t in labelled + [t for t in profile.tasks if t not in labelled]}
    if profile.name == "cpu":
        from .extracted import ltv_layers

        sweep = [l for l in ltv_layers(lm, "trec", profile) if 0 < l < round(0.8 * n)]
        if len(sweep) > 6:  # six spread layers of the sweep, the middle one among them
            picks = {sweep[round(i * (len(sweep) - 1) / 5)] for i in range(6)}
            sweep = sorted(picks | {mid}) if mid in sweep and len(picks | {mid}) <= 7 else sorted(picks)
        return {"trec": sweep, "sst2": [mid], "antonym": [mid]}
    if profile.name == "smoke":
        return {"sst2": sorted({round(n / 4), mid, round(3 * n / 4)}), "antonym": [mid]}
    raise ValueError(f"no linearity plan for profile {profile.name!r}")


_PROBES: dict[tuple, ShiftProbe] = {}


_EVALSETS: dict[tuple, EvalSet] = {}


def _memo(store: dict, key: tuple, build: Any, keep: int = 2) -> Any:
    if key not in store:
        while len(store) >= keep:
            store.pop(next(iter(store)))
        store[key] = build()
    return store[key]


def profile_linearity(lm: Any, task: str, profile: Profile, layer: int, *, seed: int = 0, k: int = 8) -> dict[str, Any]:
    """Everything chapter 05 reports for one (task, layer): the LTV (``profile_ltv``), the fitted map, the
    linearity checks, accuracies of the LTV and of its reconstructions, and the diagnostics. Cached.

    Fit and checks use ``n_queries`` training-split queries; accuracies and logit differences the profile's
    test split. Accuracies: ``ltv`` (the LTV at block ``layer``, :func:`ltvlib.study.ltvs.ltv_accuracy`),
    ``reconstruction`` (``W theta`` added before the final norm, :func:`add_before_final_norm`, evaluated by
    :func:`ltvlib.evaluate.evaluate`), ``reconstruction_last_block_input`` (``W theta`` added at the input of
    the last block, last token: the other reading of "at the last layer", which lets the last block's
    attention still mix it with the query), and from the test queries' final-norm inputs plus a vector:
    ``ltv_lens`` (their real shifts), ``W theta``, ``Q theta`` (rotation only), ``S theta`` (stretch only),
    ``zero_shot``.
    """
    from .ltvs import ltv_accuracy, profile_ltv, profile_splits

    layer = check_layer(layer, lm.n_layers)
    config = replace(linearity_config(profile), seed=seed)
    splits = profile_splits(task, profile)
    ltv = profile_ltv(lm, task, profile, layers=[layer], seed=seed)
    theta = ltv.vectors[0].float()
    key = {"model": lm.name, "task": task_key(task), "layer": layer, "config": asdict(config), "n_test": len(splits.test),
           "n_train": len(splits.train), "seed": seed, "k": k, "ltv": ltv.metadata() | {"curve": None},
           "vector_sum": float(ltv.vectors.double().sum()), "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        start = time.perf_counter()
        fit_q = list(splits.train[: config.n_queries])
        probe = _memo(_PROBES, ("fit", id(lm.model), task, tuple(fit_q)), lambda: ShiftProbe(lm, task, fit_q))
        test = _memo(_PROBES, ("test", id(lm.model), task, splits.test), lambda: ShiftProbe(lm, task, splits.test))
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
        real = ltv_accuracy(lm, ltv, profile, seed=seed)
        es = _memo(_EVALSETS, (id(lm.model), task, splits.test), lambda: EvalSet(lm, task, splits.test, tail=1), keep=1)
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
            "ltv_val_accuracy": ltv.best_val_accuracy, "ltv_steps": ltv.steps,
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
            # control (:func:`profile_linearity_control`) need not refit the LTV's map
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


def profile_linearity_control(
    lm: Any, task: str, profile: Profile, layer: int, *, seed: int = 0, n_draws: int = 5, fit: bool = True,
) -> dict[str, Any]:
    """Controls for chapter 05 at one (task, layer), cached: the random-vector control and the upper bound.

    The LTV is :func:`ltvlib.study.ltvs.profile_ltv` (as in :func:`profile_linearity`). ``control``:
    :func:`linearity_control` of the LTV against ``n_draws`` random vectors of its norm
    (:func:`ltvlib.analysis.controls.random_like`, seed ``seed + 2``) on the fit queries; each draw refits ``W`` (the
    cost is ``n_draws`` fits; ``fit=False`` measures only the fit-free quantities); the LTV's own values and
    ``W theta`` come from :func:`profile_linearity` (cached, same fit). ``shift_accuracy`` (on
    the test queries): :func:`shift_accuracies` with ``W theta`` as the constant, so the paper's constant
    shift stands beside its upper bound, each query's own shift; label-restricted accuracies for
    classification tasks.
    """
    from ..analysis.controls import random_like
    from .ltvs import profile_ltv, profile_splits

    layer = check_layer(layer, lm.n_layers)
    config = replace(linearity_config(profile), seed=seed)
    splits = profile_splits(task, profile)
    ltv = profile_ltv(lm, task, profile, layers=[layer], seed=seed)
    theta = ltv.vectors[0].float()
    key = {"what": "control", "model": lm.name, "task": task_key(task), "layer": layer, "config": asdict(config),
           "n_test": len(splits.test), "n_train": len(splits.train), "seed": seed, "n_draws": n_draws, "fit": fit,
           "ltv": ltv.metadata() | {"curve": None}, "vector_sum": float(ltv.vectors.double().sum()),
           "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        start = time.perf_counter()
        fit_q = list(splits.train[: config.n_queries])
        probe = _memo(_PROBES, ("fit", id(lm.model), task, tuple(fit_q)), lambda: ShiftProbe(lm, task, fit_q))
        test = _memo(_PROBES, ("test", id(lm.model), task, splits.test), lambda: ShiftProbe(lm, task, splits.test))
        token_ids = label_token_ids(lm, task, list(splits.test))
        draws = random_like(theta.cpu(), n_draws, seed + 2)
        base = profile_linearity(lm, task, profile, layer, seed=seed)
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
