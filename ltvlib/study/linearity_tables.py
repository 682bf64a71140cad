"""Chapter 05's tables, statistics and figures, from :mod:`ltvlib.study.linearity`'s cached measurements.

Inputs are per point ``p = (task, layer)``: ``res[p]`` (:func:`~ltvlib.study.linearity.cached_linearity`), ``ctl[p]``
(:func:`~ltvlib.study.linearity.cached_linearity_control`), the LTVs and the chapter's
:class:`~ltvlib.study.ltv_report.LTVLedger` (every LTV number passes through it, in the order the chapter shows
it). The statistics the verdicts rest on are here and tested; the rules stay in the chapter. The measuring module
is untouched (its source keys the cached measurements).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats import Estimate, paired_bootstrap_difference, wilson_interval
from ..tasks import get_task

Point = tuple[str, int]

SERIES: list[tuple[str, str, str, str]] = [
    ("own_shift", "own shift (= LTV)", "C3", "o-"), ("mean_shift", "mean shift", "C1", "^--"),
    ("constant", "Wθ (paper)", "C0", "s--"), ("zero_shot", "zero-shot", "0.5", ":")]
"""The reconstruction figure's series: key, name, colour, line style."""

PANELS: tuple[tuple[str, str], ...] = (("accuracy", "whole vocabulary"), ("label_accuracy", "label words only"))
"""The reconstruction figure's panels, top to bottom: the accuracy record and its name."""

ROTATION_PANELS: tuple[tuple[str, str], ...] = (("cos", "cos(v, Qv)"), ("align", "align(Qv) − align(v)"))
"""The rotation figure's panels, top to bottom: what is drawn and its axis label."""


def accuracy_cell(rec: Mapping[str, Any]) -> str:
    """An accuracy record as ``"43.5 % [36.8, 50.4]"``."""
    return f"{100 * rec['value']:.1f} % [{100 * rec['low']:.1f}, {100 * rec['high']:.1f}]"


def untrained_row(p: Point, ltvs: Mapping[Point, Any], ledger: Any, where: str) -> dict[str, Any]:
    """The row of a point whose LTV did not train (``trained``: ``"did not train"``, noted under ``where``)."""
    return {"task": p[0], "layer": p[1], "trained": ledger.cell(ltvs[p], "yes", where=where)}


def accuracy_table(points: Sequence[Point], res: Mapping[Point, Any], ctl: Mapping[Point, Any],
                   ltvs: Mapping[Point, Any], label_tasks: Sequence[str], ledger: Any) -> pd.DataFrame:
    """Table 5.1 (index ``(task, layer)``): n, the LTV at block l, zero-shot, Wθ, the mean and the own shift (whole
    vocabulary and label words), the fit's held-out R²; LTV cells gated (where ``Table 5.1``)."""
    rows = []
    for p in points:
        t, l = p
        if ltvs[p].training.trained is not True:
            rows.append(untrained_row(p, ltvs, ledger, "Table 5.1"))
            continue
        sa = ctl[p]["shift_accuracy"]
        row = {"task": t, "layer": l, "label space": t in label_tasks, "n": sa["zero_shot"]["accuracy"]["n"],
               "LTV at block l": ledger.cell(ltvs[p], f"{100 * res[p]['accuracy']['ltv']:.1f} %", where="Table 5.1"),
               "zero-shot": accuracy_cell(sa["zero_shot"]["accuracy"])}
        for k, name in (("constant", "Wθ (paper)"), ("mean_shift", "mean shift"),
                        ("own_shift", "own shift (upper bound)")):
            row[name] = ledger.cell(ltvs[p], accuracy_cell(sa[k]["accuracy"]), where="Table 5.1")
        for k, name in (("zero_shot", "zero-shot, labels"), ("constant", "Wθ, labels"),
                        ("own_shift", "own shift, labels")):
            rec = sa[k]["label_accuracy"]
            row[name] = "—" if rec is None else (accuracy_cell(rec) if k == "zero_shot" else
                                                 ledger.cell(ltvs[p], accuracy_cell(rec), where="Table 5.1"))
        row["R² held-out"] = ledger.cell(ltvs[p], f"{res[p]['r2_heldout']:.2f}", where="Table 5.1")
        rows.append(row)
    return pd.DataFrame(rows).set_index(["task", "layer"])


def reconstruction_points(points: Sequence[Point], ctl: Mapping[Point, Any], trained: Mapping[Point, bool],
                          label_tasks: Sequence[str], margin: float) -> list[Point]:
    """The label-space points whose LTV trained and whose own shift beats zero-shot by at least ``margin``."""
    def works(p: Point) -> bool:
        if not trained[p]:
            return False
        sa = ctl[p]["shift_accuracy"]
        return sa["own_shift"]["accuracy"]["value"] >= sa["zero_shot"]["accuracy"]["value"] + margin

    return [p for p in points if p[0] in label_tasks and works(p)]


def reconstruction_gap(ctl: Mapping[Point, Any], recon_points: Sequence[Point]) -> dict[str, Estimate]:
    """Over the points' test queries pooled: ``"LTV (own shift) − Wθ"`` (paired bootstrap), ``"Wθ accuracy"`` and
    ``"LTV (own shift) accuracy"`` (Wilson)."""
    own_c = np.concatenate([ctl[p]["shift_accuracy"]["own_shift"]["accuracy"]["correct"] for p in recon_points])
    w_c = np.concatenate([ctl[p]["shift_accuracy"]["constant"]["accuracy"]["correct"] for p in recon_points])
    recon_gap = paired_bootstrap_difference(own_c, w_c)
    w_acc = Estimate(float(np.mean(w_c)), *wilson_interval(int(np.sum(w_c)), len(w_c)), n=len(w_c))
    own_acc = Estimate(float(np.mean(own_c)), *wilson_interval(int(np.sum(own_c)), len(own_c)), n=len(own_c))
    return {"LTV (own shift) − Wθ": recon_gap, "Wθ accuracy": w_acc, "LTV (own shift) accuracy": own_acc}


def plot_reconstruction(plan: Mapping[str, Sequence[int]], sweep_task: str | None, trained: Mapping[Point, bool],
                        ctl: Mapping[Point, Any]) -> tuple[plt.Figure, np.ndarray]:
    """Accuracy per injection layer of the :data:`SERIES` in two panels (:data:`PANELS`: whole vocabulary, label
    words): lines for the sweep task, markers for the other tasks; untrained points left out. Returns the figure and
    its two axes, without titles or axis labels (the chapter sets them, then the layout)."""
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 6.6), sharex=True)
    for ax, (kind, _) in zip(axes, PANELS):
        if sweep_task is not None:
            ls = [l for l in plan[sweep_task] if trained[sweep_task, l]]
            for k, name, color, style in SERIES:
                recs = [ctl[sweep_task, l]["shift_accuracy"][k][kind] for l in ls]
                if not recs or recs[0] is None:
                    continue
                v = np.array([100 * r["value"] for r in recs])
                ax.plot(ls, v, style, color=color, label=f"{sweep_task}: {name}")
                ax.fill_between(ls, [100 * r["low"] for r in recs], [100 * r["high"] for r in recs], color=color,
                                alpha=0.12)
        for j, t in enumerate(t for t in plan if t != sweep_task):
            for k, name, color, _ in SERIES:
                for l in plan[t]:
                    rec = ctl[t, l]["shift_accuracy"][k][kind] if trained[t, l] else None
                    if rec is None:
                        continue
                    ax.errorbar(l + 0.3 * (j + 1), 100 * rec["value"], yerr=[[100 * (rec["value"] - rec["low"])],
                                [100 * (rec["high"] - rec["value"])]], fmt=["D", "v", "P"][j % 3], color=color, ms=5,
                                capsize=2, label=f"{t}: {name}" if l == plan[t][0] else None)
        ax.set_ylim(-3, 103)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    return fig, axes


def sweep_layers(plan: Mapping[str, Sequence[int]], sweep_task: str | None, trained: Mapping[Point, bool],
                 ltvs: Mapping[Point, Any], res: Mapping[Point, Any], ledger: Any) -> list[int]:
    """The sweep task's layers whose LTV trained (``[]`` without a sweep task); every LTV of the sweep is noted in the
    ledger as shown in Figure 5.2."""
    if sweep_task is None:
        return []
    for l in plan[sweep_task]:
        ledger.value(ltvs[sweep_task, l], res[sweep_task, l]["accuracy"]["ltv"] if trained[sweep_task, l] else 0.0,
                     where="Figure 5.2")
    return [l for l in plan[sweep_task] if trained[sweep_task, l]]


def control_values(ctl: Mapping[Point, Any], sweep_task: str, key: str,
                   ls: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The LTV's ``key`` per layer ``(layers,)`` and the random vectors' ``(draws, layers)``."""
    own = np.array([ctl[sweep_task, l]["control"]["ltv"][key] for l in ls])
    draws = np.array([[d[key] for d in ctl[sweep_task, l]["control"]["draws"]] for l in ls]).T
    return own, draws


def rotation_table(points: Sequence[Point], ctl: Mapping[Point, Any], ltvs: Mapping[Point, Any],
                   ledger: Any) -> pd.DataFrame:
    """Table 5.2 (index ``(task, layer)``): cos(v, Qv), the alignment of v and of Qv and the held-out R², for the LTV
    (gated, where ``Table 5.2``) and the random vectors (mean [range]); the random direction's alignment."""
    rot_rows = []
    for p in points:
        if ltvs[p].training.trained is not True:
            rot_rows.append(untrained_row(p, ltvs, ledger, "Table 5.2"))
            continue
        c = ctl[p]["control"]
        row = {"task": p[0], "layer": p[1]}
        for key, name in (("cos_theta_Qtheta", "cos(v, Qv)"), ("alignment", "align v"),
                          ("alignment_Qtheta", "align Qv"), ("r2_heldout", "R² held-out")):
            d = c["summary"][key]
            row[f"{name}: LTV"] = ledger.cell(ltvs[p], f"{c['ltv'][key]:.3f}", where="Table 5.2")
            row[f"{name}: random mean [range]"] = f"{d['mean']:.3f} [{min(d['draws']):.3f}, {max(d['draws']):.3f}]"
        row["random direction's alignment"] = f"{ctl[p]['alignment_random']:.3f}"
        rot_rows.append(row)
    return pd.DataFrame(rot_rows).set_index(["task", "layer"])


def seed_excess(own: Any, draws: Any, *, x: Any = None, statistic: str = "mean", n_resamples: int = 2000,
                seed: int = 0, confidence: float = 0.95) -> dict[str, Estimate]:
    """A statistic over the same ``k`` layers of several LTV seeds against random vectors of each seed's norm,
    with a bootstrap over the seeds.

    Args:
        own: ``(n_seeds, k)`` each seed's LTV value per layer.
        draws: ``(n_seeds, n_draws, k)`` the random vectors' values (each seed's own draws; draw ``i`` of one layer
            has no tie to draw ``i`` of another).
        x: ``(k,)`` the layers, for ``statistic="slope"``.
        statistic: ``"mean"`` over the layers, or ``"slope"``: the least-squares slope on ``x`` times its span (the
            fitted change from the first layer to the last).
        n_resamples: bootstrap draws: the seeds with replacement and, within each, the random draws at each layer.

    Returns:
        ``{"ltv", "control", "excess"}``: the mean over seeds of the LTV's statistic, of the random draws' mean
        curve's, and of their difference, each an :class:`Estimate` with ``n`` = ``seeds`` = the number of seeds.

    Raises:
        ValueError: shapes that do not match, fewer than 2 seeds, 2 layers (3 for a slope) or 1 draw, values that
            are not finite, an unknown statistic, a slope without ``x`` or with all ``x`` equal.
    """
    v, d = np.asarray(own, dtype=np.float64), np.asarray(draws, dtype=np.float64)
    if v.ndim != 2 or d.ndim != 3 or d.shape[0] != v.shape[0] or d.shape[2] != v.shape[1] or d.shape[1] < 1:
        raise ValueError(f"own {v.shape} and draws {d.shape}: expected (seeds, layers) and (seeds, draws, layers)")
    n_seeds, k = v.shape
    if statistic not in ("mean", "slope"):
        raise ValueError(f"unknown statistic {statistic!r}; allowed: 'mean', 'slope'")
    if n_seeds < 2 or k < (3 if statistic == "slope" else 2):
        raise ValueError(f"{statistic} over {n_seeds} seeds and {k} layers: need 2 seeds and "
                         f"{3 if statistic == 'slope' else 2} layers")
    if not (np.isfinite(v).all() and np.isfinite(d).all()):
        raise ValueError("values must be finite (leave vectors that did not learn out before calling)")
    weights = np.full(k, 1.0 / k)
    if statistic == "slope":
        if x is None:
            raise ValueError("a slope needs the layers x")
        xs = np.asarray(x, dtype=np.float64).reshape(-1)
        if xs.size != k or np.ptp(xs) == 0:
            raise ValueError(f"x must hold {k} positions, not all equal, got {xs.tolist()}")
        centred = xs - xs.mean()
        weights = centred / (centred @ centred) * np.ptp(xs)  # slope times span, as one linear map of the values
    own_s, ctrl_s = v @ weights, d.mean(1) @ weights  # (seeds,)
    rng = np.random.default_rng(seed)
    units = rng.integers(0, n_seeds, size=(n_resamples, n_seeds))
    picks = rng.integers(0, d.shape[1], size=(n_resamples, n_seeds, d.shape[1], k))
    ctrl_curves = d[units[:, :, None, None], picks, np.arange(k)].mean(2)  # (R, seeds, k)
    own_b, ctrl_b = own_s[units].mean(1), (ctrl_curves @ weights).mean(1)
    alpha = (1 - confidence) / 2
    signed = statistic == "slope"

    def est(value: float, boot: np.ndarray, diff: bool, n_draws: int) -> Estimate:
        lo, hi = np.quantile(boot, [alpha, 1 - alpha])
        return Estimate(value, min(float(lo), value), max(float(hi), value), n=n_seeds, seeds=n_seeds,
                        confidence=confidence, method=f"bootstrap over seeds and draws ({statistic})",
                        resamples=n_resamples, difference=diff, draws=n_draws)

    return {"ltv": est(float(own_s.mean()), own_b, signed, 0),
            "control": est(float(ctrl_s.mean()), ctrl_b, signed, int(d.shape[1])),
            "excess": est(float((own_s - ctrl_s).mean()), own_b - ctrl_b, True, int(d.shape[1]))}


def _seed_values(ctl: Mapping[tuple[int, int], Any], seeds: Sequence[int], ls: Sequence[int],
                 value: Any) -> tuple[np.ndarray, np.ndarray]:
    own = np.array([[value(ctl[l, s]["control"]["ltv"]) for l in ls] for s in seeds])
    draws = np.array([[[value(dr) for dr in ctl[l, s]["control"]["draws"]] for l in ls] for s in seeds])
    return own, draws.transpose(0, 2, 1)  # (seeds, layers, draws) -> (seeds, draws, layers)


def rotation_excess(seed_ctl: Mapping[tuple[int, int], Any], seeds: Sequence[int], sweep_ls: Sequence[int],
                    seed: int) -> dict[str, Estimate] | None:
    """The fitted change of cos(θ, Qθ) over the sweep's layers (``seed_ctl``: ``(layer, seed)`` -> the control of
    that seed's LTV), for the LTVs, random vectors of their norms and the excess (:func:`seed_excess`, keys ``ltv``,
    ``control``, ``excess``); None under 3 layers or 2 seeds."""
    if len(sweep_ls) < 3 or len(seeds) < 2:
        return None
    own, draws = _seed_values(seed_ctl, seeds, sweep_ls, lambda r: r["cos_theta_Qtheta"])
    return seed_excess(own, draws, x=sweep_ls, statistic="slope", seed=seed)


def alignment_excess(seed_ctl: Mapping[tuple[int, int], Any], seeds: Sequence[int], early_ls: Sequence[int],
                     seed: int) -> dict[str, Estimate] | None:
    """The mean alignment gain align(Qθ) − align(θ) over the early layers for the LTVs of every seed, random vectors
    of their norms and the excess (:func:`seed_excess`); None under 2 layers or 2 seeds."""
    if len(early_ls) < 2 or len(seeds) < 2:
        return None
    own, draws = _seed_values(seed_ctl, seeds, early_ls, lambda r: r["alignment_Qtheta"] - r["alignment"])
    return seed_excess(own, draws, statistic="mean", seed=seed)


def excess_table(shown: Mapping[str, Estimate]) -> pd.DataFrame:
    """One row per named estimate: its value and interval (three decimals, signed) and ``n`` (its seeds)."""
    return pd.DataFrame({k: {"value": f"{e.value:+.3f}", "95 % interval": f"[{e.low:+.3f}, {e.high:+.3f}]",
                             "n": e.n} for k, e in shown.items()}).T


def plot_rotation(ctl: Mapping[Point, Any], sweep_task: str | None, sweep_ls: Sequence[int],
                  middle_layer: int) -> tuple[plt.Figure, np.ndarray]:
    """cos(v, Qv) (top) and align(Qv) − align(v) (bottom) per layer (:data:`ROTATION_PANELS`), the LTV against random
    vectors (mean, range). Returns the figure and its two axes, without titles or axis labels."""
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 6.2), sharex=True)
    if sweep_ls:
        assert sweep_task is not None  # sweep_layers gives layers only with a sweep task
        for ax, (key, _) in zip(axes, ROTATION_PANELS):
            if key == "cos":
                own, draws = control_values(ctl, sweep_task, "cos_theta_Qtheta", sweep_ls)
            else:
                o1, d1 = control_values(ctl, sweep_task, "alignment_Qtheta", sweep_ls)
                o0, d0 = control_values(ctl, sweep_task, "alignment", sweep_ls)
                own, draws = o1 - o0, d1 - d0
            ax.plot(sweep_ls, own, "o-", color="C3", label=f"{sweep_task}: LTV θ")
            ax.plot(sweep_ls, draws.mean(0), "s--", color="0.4",
                    label=f"random vectors of |θ| (mean of {draws.shape[0]})")
            ax.fill_between(sweep_ls, draws.min(0), draws.max(0), color="0.4", alpha=0.15)
            ax.axvline(middle_layer, color="0.7", lw=0.8)
        axes[1].axhline(0, color="0.7", lw=0.8)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9, frameon=False)
    return fig, axes


def checks_table(points: Sequence[Point], res: Mapping[Point, Any], ltvs: Mapping[Point, Any],
                 ledger: Any) -> pd.DataFrame:
    """Table 5.3 (index ``(task, layer)``): the homogeneity coefficients, the additivity error, cos(Wθ, mean shift)
    and the stretch |Sθ|/|θ|; LTV cells gated (where ``Table 5.3``)."""
    checks = []
    for p in points:
        if ltvs[p].training.trained is not True:
            checks.append(untrained_row(p, ltvs, ledger, "Table 5.3"))
            continue
        r = res[p]
        row = {"task": p[0], "layer": p[1]}
        for h in r["homogeneity"]:
            if h["scale"] != 1.0:
                row[f"coef at a={h['scale']:g}"] = ledger.cell(ltvs[p], f"{h['coef']:.2f}", where="Table 5.3")
        row["additivity error"] = ledger.cell(ltvs[p], f"{r['additivity_random']['rel_err']:.3f}", where="Table 5.3")
        row["cos(Wθ, mean shift)"] = ledger.cell(ltvs[p], f"{r['w_theta_vs_shift']['cos']:.3f}", where="Table 5.3")
        row["|Sθ|/|θ|"] = ledger.cell(ltvs[p], f"{r['norm_ratio']:.2f}", where="Table 5.3")
        checks.append(row)
    return pd.DataFrame(checks).set_index(["task", "layer"])


def lens_tables(res: Mapping[Point, Any], sweep_task: str | None,
                sweep_ls: Sequence[int]) -> list[tuple[str, pd.DataFrame]]:
    """For the first, middle and last trained sweep layer: a caption (Markdown) and the logit-lens table (columns:
    the lens variants, rows ``#1``...: the top tokens' reprs). Empty without a trained sweep."""
    if not sweep_ls:
        return []
    assert sweep_task is not None  # sweep_layers gives layers only with a sweep task
    labels = get_task(sweep_task).labels
    assert labels is not None  # the sweep task is a classification task
    out = []
    for l in sorted({sweep_ls[0], sweep_ls[len(sweep_ls) // 2], sweep_ls[-1]}):
        r = res[sweep_task, l]
        lens = pd.DataFrame({name: [repr(tok) for tok in toks] for name, toks in r["lens"].items()})
        lens.index = [f"#{i + 1}" for i in range(len(lens))]
        caption = (f"**Logit lens, {sweep_task}, layer {l}** (top tokens of unembed(norm(v)); "
                   f"label words: {', '.join(labels)})")
        out.append((caption, lens))
    return out
