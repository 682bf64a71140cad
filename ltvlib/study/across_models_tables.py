"""Chapter 08's tables, statistics and figures, from :mod:`ltvlib.study.across_models`' per-model results.

``results[model]`` is the chapter's dict per model (``L``, ``mid``, ``d``, ``stream_rms``, ``ltv[(task, layer)]``,
``table``, ``correct[(task, layer)]``, ``fv_write``, ``attention_write``, ``sweep``, ``ltv_layers``, ``key_heads``,
``key_correct``, ``linearity``, ``n_test``). Every LTV number passes through the chapter's
:class:`~ltvlib.study.ltv_report.LTVLedger`, in the order the chapter shows it. The statistics the verdicts rest on
are here and tested; the rules stay in the chapter. The measuring module is untouched (its source keys the cached
measurements).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats import Estimate, paired_bootstrap_difference, proportion_estimate
from ..tasks import get_task
from .across_models import EXTRACTED
from .extracted_tables import STYLE  # each method drawn as chapter 01 draws it
from .linearity_tables import reconstruction_gap, reconstruction_points

METHODS: dict[str, str] = {"ltv": "LTV", "vanilla_tv": "Vanilla TV", "vanilla_tv_difference": "Vanilla TV diff.",
                           "function_vector": "FV"}
"""The vector methods and their display names."""

PAPER: dict[str, float] = {"ltv": 83.49, "vanilla_tv": 37.80, "function_vector": 37.30}
"""Table 1 of the paper, Llama-3.1-8B, seven-task average (%)."""

MIDDLE_BARS: dict[str, str] = {"zero-shot": "zero-shot", "LTV": "ltv", "Vanilla TV": "vanilla_tv",
                               "Vanilla TV diff.": "vanilla_tv_difference", "FV": "function_vector"}
"""The middle-layer figure's bars: name -> method key."""

KEY_HEAD_GROUPS: list[tuple[str, str, float]] = [("LTV θ", "ltv", 83.0), ("key heads zeroed", "key_zero", 51.0),
                                                 ("random heads zeroed", "random_zero", 78.0)]
"""The key-head figure's groups: name, key of ``key_correct``, the paper's number (%)."""


def ltv_table(results: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Table 8.4 (index ``(model, task, layer)``): whether each LTV trained, its validation score at the start and the
    best, steps to the best and its norm relative to the stream's (``|θ| / (RMS √d)``), three decimals."""
    ltv_rows = {}
    for m, r in results.items():
        for (t, l), v in sorted(r["ltv"].items()):
            h = r["stream_rms"][l] * np.sqrt(r["d"])
            ltv_rows[m, t, l] = {"trained": {True: "yes", False: "no"}.get(v.training.trained, "unknown"),
                                 "validation score, start": v.training.start_val_score,
                                 "validation score, best": v.training.best_val_score,
                                 "steps to best": v.training.steps_to_best, "|θ| / |h|": float(v.vectors.norm()) / h}
    table = pd.DataFrame(ltv_rows).T
    table.index.names = ["model", "task", "layer"]
    return table.round(3)


def plot_stream(results: Mapping[str, Mapping[str, Any]], model_list: Sequence[str]) -> tuple[plt.Figure, Any]:
    """The stream's RMS per block against relative depth, one line per model (log scale) with the legend. Returns the
    figure and its axes, without title or axis labels (the chapter sets them, then the layout)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for m in model_list:
        rms = results[m]["stream_rms"]
        ax.plot(np.array(list(rms)) / results[m]["L"], list(rms.values()), "o-", ms=3, label=m)
    ax.set_yscale("log")
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig, ax


def est_of(pct: float, n: int) -> Estimate:
    """An accuracy in % over ``n`` queries as an Estimate (Wilson interval)."""
    return proportion_estimate(round(pct * n / 100), n)


def cell_text(e: Estimate) -> str:
    """``"43.5 [36.8, 50.4]"`` (percent)."""
    return f"{100 * e.value:.1f} [{100 * e.low:.1f}, {100 * e.high:.1f}]"


def middle_table(results: Mapping[str, Mapping[str, Any]], model_list: Sequence[str], tasks: Sequence[str],
                 icl_shots: Sequence[int], ledger: Any) -> pd.DataFrame:
    """Table 8.5 (index ``(model, task)``): zero-shot, each k-shot ICL and each vector method at the middle layer
    (:func:`cell_text`; ``"not computable"`` where a method has no number; the LTV's gated, where ``Table 8.5``)."""
    shot_cols = [f"{k}-shot ICL" for k in icl_shots]
    cols = ["zero-shot", *shot_cols, *METHODS]
    cells = {}
    for m, r in results.items():
        for t in tasks:
            row = r["table"][t]
            for c in cols:
                n = r["n_test"][t] if c not in shot_cols else r["table"][t]["icl_n"][c.split("-")[0]]
                v = row[c]
                if v is None:
                    cells[m, t, c] = "not computable"
                    continue
                if c == "ltv":
                    ltv = r["ltv"][t, r["mid"]]
                    ledger.value(ltv, v, where="Table 8.5")
                    cells[m, t, c] = ledger.cell(ltv, cell_text(est_of(v, n)), where="Table 8.5")
                else:
                    cells[m, t, c] = cell_text(est_of(v, n))
    table = pd.DataFrame({(m, t): {METHODS.get(c, c): cells[m, t, c] for c in cols} for m in model_list
                          for t in tasks}).T
    table.index.names = ["model", "task"]
    return table


def fv_checks(results: Mapping[str, Mapping[str, Any]],
              model_list: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, bool]]:
    """The attention-write check per (model, layer), the FV-write check per (model, task), and per model whether its
    FVs pass both (every layer's relative error below 1e-3; every FV's recomputed norm within 1.5 times its own and
    cosine above 0.9)."""
    aw = pd.DataFrame({(m, l): v for m, r in results.items() for l, v in r["attention_write"].items()}).T
    fvw = pd.DataFrame({(m, t): v for m, r in results.items() for t, v in r["fv_write"].items()}).T
    fv_ok = {}
    for m in model_list:
        aw_ok = bool(len(aw)) and m in aw.index.get_level_values(0) and bool((aw.loc[m]["relative_error"] < 1e-3).all())
        rows = fvw.loc[m] if len(fvw) and m in fvw.index.get_level_values(0) else None
        size_ok = rows is not None and bool(((rows["norm_ratio"] - 1).abs().lt(0.5) & (rows["norm_ratio"] > 1 / 1.5)
                                             & (rows["cos"] > 0.9)).all())
        fv_ok[m] = aw_ok and size_ok
    if len(aw):
        aw.index.names = ["model", "layer"]
    if len(fvw):
        fvw.index.names = ["model", "task"]
    return aw, fvw, fv_ok


def plot_middle(results: Mapping[str, Mapping[str, Any]], model_list: Sequence[str], tasks: Sequence[str],
                ledger: Any) -> tuple[plt.Figure, Any]:
    """Per method (:data:`MIDDLE_BARS`) and model: the middle-layer accuracy over the tasks pooled with its Wilson
    interval (an LTV that did not train left out, noted where ``Figure 8.2``), and the paper's numbers dashed.
    Returns the figure and its axes, without title or axis labels."""
    bars = list(MIDDLE_BARS)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / len(model_list)
    x = np.arange(len(bars))
    pooled = {}
    for i, m in enumerate(model_list):
        r = results[m]
        for b in bars:
            k = MIDDLE_BARS[b]
            rows = [r["correct"][t, r["mid"]][k] for t in tasks
                    if r["correct"][t, r["mid"]][k] is not None
                    and (k != "ltv" or ledger.keep([r["ltv"][t, r["mid"]]], where="Figure 8.2"))]
            flat = [c for row in rows for c in row]
            pooled[m, b] = proportion_estimate(int(sum(flat)), len(flat)) if flat else None
        vals = [100 * est.value if (est := pooled[m, b]) else np.nan for b in bars]
        err = np.array([[100 * (est.value - est.low), 100 * (est.high - est.value)]
                        if (est := pooled[m, b]) else [np.nan, np.nan] for b in bars]).T
        ax.bar(x + (i - (len(model_list) - 1) / 2) * width, vals, width, yerr=err, capsize=3, label=m)
    for k, v in PAPER.items():
        j = bars.index(METHODS[k])
        ax.hlines(v, j - 0.45, j + 0.45, colors="black", linestyles="--", lw=1.2,
                  # matplotlib's stubs say str; None (no legend entry) is accepted
                  label="paper (Llama-3.1-8B, seven-task average)" if k == "ltv" else None)  # type: ignore[arg-type]
        ax.annotate(f"paper: {v:.1f} %", (j, v), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=9)
    ax.set_xticks(x, bars, fontsize=10)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(model_list) + 1)
    return fig, ax


def ltv_trained(r: Mapping[str, Any], t: str, layer: int) -> bool:
    """Whether the model's LTV of ``t`` at ``layer`` trained."""
    return r["ltv"][t, layer].training.trained is True


def best_extracted(r: Mapping[str, Any], t: str, layer: int, fv_ok: bool) -> tuple[np.ndarray, str]:
    """The strongest extracted vector's per-query correctness at (task, layer) (the FV only if its checks passed),
    and its name."""
    c = r["correct"][t, layer]
    allowed = [k for k in EXTRACTED if c[k] is not None and (k != "function_vector" or fv_ok)]
    k = max(allowed, key=lambda k: np.mean(c[k]))
    return np.array(c[k], dtype=float), METHODS[k]


def middle_gaps(results: Mapping[str, Mapping[str, Any]], tasks: Sequence[str], fv_ok: Mapping[str, bool],
                seed: int) -> dict[str, Estimate | None]:
    """Per model: the LTV minus the strongest extracted vector at the middle layer over the queries of the tasks whose
    LTV trained, pooled (paired bootstrap); None where no such task."""
    out: dict[str, Estimate | None] = {}
    for m, r in results.items():
        trained = [t for t in tasks if ltv_trained(r, t, r["mid"])]
        if not trained:
            out[m] = None
            continue
        a = np.concatenate([np.array(r["correct"][t, r["mid"]]["ltv"], dtype=float) for t in trained])
        b = np.concatenate([best_extracted(r, t, r["mid"], fv_ok[m])[0] for t in trained])
        out[m] = paired_bootstrap_difference(a, b, seed=seed)
    return out


def sweep_panels(model_list: Sequence[str], tasks: Sequence[str]) -> list[tuple[str, str]]:
    """The layer-sweep figure's panels: ``(model, task)``, task by task."""
    return [(m, t) for t in tasks for m in model_list]


def plot_sweep(results: Mapping[str, Mapping[str, Any]], panels: Sequence[tuple[str, str]],
               n_test: Mapping[str, int], ledger: Any) -> tuple[plt.Figure, np.ndarray]:
    """One panel per (model, task): each method's accuracy against relative depth with Wilson bands (the LTV's as
    error bars, only where it trained, noted where ``Figure 8.3``), zero-shot and the paper's middle-layer numbers.
    Returns the figure and its axes (one column), without titles or axis labels."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.5, 3.0 * len(panels)), sharex=True, squeeze=False)
    for ax, (m, task) in zip(axes[:, 0], panels):
        r = results[m]
        n = n_test[task]
        for method, style in STYLE.items():
            pts = sorted(r["sweep"][task][method].items())
            if method == "ltv":
                pts = [(l, ledger.value(r["ltv"][task, l], v, where="Figure 8.3")) for l, v in pts]
                pts = [(l, v) for l, v in pts if np.isfinite(v)]
            if not pts:
                continue
            ls, a = map(np.array, zip(*pts))
            ests = [est_of(v, n) for v in a]
            lo = np.array([100 * e.low for e in ests])
            hi = np.array([100 * e.high for e in ests])
            if method == "ltv":
                ax.errorbar(ls / r["L"], a, yerr=[a - lo, hi - a], ms=5, lw=1.4, capsize=3, **style)
            else:
                ax.plot(ls / r["L"], a, ms=4, lw=1.2, **style)
                ax.fill_between(ls / r["L"], lo, hi, color=style["color"], alpha=0.12)
        row = r["table"].get(task)
        if row is not None:
            ax.axhline(row["zero-shot"], color="grey", lw=1, ls=":", label="zero-shot")
        ax.axhline(PAPER["ltv"], color="0.5", lw=1, ls="--", label="paper (Llama-3.1-8B, L/2): LTV 83.5 %")
        ax.axhline(PAPER["function_vector"], color="0.7", lw=1, ls="--",
                   label="paper (Llama-3.1-8B, L/2): FV 37.3 %")
        ax.axvline(r["mid"] / r["L"], color="grey", lw=0.5)
        ax.set_ylim(-3, 103)
        ax.set_xlim(-0.03, 1.03)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=9, loc="lower center", ncol=2, bbox_to_anchor=(0.5, -0.01))
    return fig, axes[:, 0]


def sweep_gaps(results: Mapping[str, Mapping[str, Any]], tasks: Sequence[str], fv_ok: Mapping[str, bool],
               seed: int) -> dict[str, tuple[str, int, Estimate | None]]:
    """Per swept point ``"<model>, <task>, layer <l>"``: ``(task, layer, LTV − strongest extracted)`` (paired
    bootstrap), the estimate None where the LTV did not train."""
    out: dict[str, tuple[str, int, Estimate | None]] = {}
    for m, r in results.items():
        for t in tasks:
            for l in r["ltv_layers"][t]:
                name = f"{m}, {t}, layer {l}"
                if not ltv_trained(r, t, l):
                    out[name] = (t, l, None)
                    continue
                b, _ = best_extracted(r, t, l, fv_ok[m])
                out[name] = (t, l, paired_bootstrap_difference(np.array(r["correct"][t, l]["ltv"], dtype=float), b,
                                                               seed=seed))
    return out


def key_heads_table(results: Mapping[str, Mapping[str, Any]], tasks: Sequence[str], ledger: Any) -> pd.DataFrame:
    """Table 8.8 (index ``(model, task)``): the LTV's accuracy alone and with key or random heads zeroed or
    mean-ablated (gated, where ``Table 8.8``), and how many heads are key heads; empty without a task."""
    kh_cols = {"ltv": "LTV θ", "key_zero": "key, zero", "random_zero": "random, zero", "key_mean": "key, mean",
               "random_mean": "random, mean", "random_mean_sd": "random, mean (sd)"}
    kh_rows = {}
    for m, r in results.items():
        for t in tasks:
            ltv = r["ltv"][t, r["mid"]]
            kh_rows[m, t] = {c: ledger.cell(ltv, f"{r['key_heads'][t][k]:.1f}", where="Table 8.8")
                             for k, c in kh_cols.items()}
            kh_rows[m, t]["key heads"] = f"{r['key_heads'][t]['n_key']} of {r['key_heads'][t]['n_heads']}"
    kh = pd.DataFrame(kh_rows).T
    if len(kh):
        kh.index.names = ["model", "task"]
    return kh


def plot_key_heads(results: Mapping[str, Mapping[str, Any]], model_list: Sequence[str], tasks: Sequence[str],
                   ledger: Any) -> tuple[plt.Figure, Any]:
    """Per group of :data:`KEY_HEAD_GROUPS` and model whose LTV trained (noted where ``Figure 8.4``): the accuracy over
    the tasks pooled with its Wilson interval, and the paper's numbers dashed. Returns the figure and its axes,
    without title or axis labels."""
    groups = KEY_HEAD_GROUPS
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    x = np.arange(len(groups))
    width = 0.8 / len(model_list)
    for i, m in enumerate(model_list):
        r = results[m]
        trained = [t for t in tasks if ledger.keep([r["ltv"][t, r["mid"]]], where="Figure 8.4")]
        if not trained:
            continue
        vals, lo, hi = [], [], []
        for _, k, _ in groups:
            flat = [c for t in trained for c in (np.ravel(r["key_correct"][t][k]))]
            e = proportion_estimate(int(sum(flat)), len(flat))
            vals.append(100 * e.value)
            lo.append(100 * (e.value - e.low))
            hi.append(100 * (e.high - e.value))
        ax.bar(x + (i - (len(model_list) - 1) / 2) * width, vals, width, yerr=[lo, hi], capsize=3, label=m)
    for j, (_, _, p) in enumerate(groups):
        ax.hlines(p, j - 0.45, j + 0.45, colors="black", linestyles="--", lw=1.2,
                  # matplotlib's stubs say str; None (no legend entry) is accepted
                  label="paper (Llama-3.1-8B)" if j == 0 else None)  # type: ignore[arg-type]
        ax.annotate(f"paper: {p:.0f} %", (j, p), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=9)
    ax.set_xticks(x, [g for g, _, _ in groups])
    ax.set_ylim(0, 100)
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(model_list) + 1)
    return fig, ax


def key_gaps(results: Mapping[str, Mapping[str, Any]], tasks: Sequence[str], seed: int) -> dict[str, Estimate | None]:
    """Per model: random-head minus key-head zero-ablation over the queries of the tasks whose LTV trained, pooled
    (paired bootstrap, the random heads' rows are draws); None where no such task."""
    out: dict[str, Estimate | None] = {}
    for m, r in results.items():
        trained = [t for t in tasks if ltv_trained(r, t, r["mid"])]
        if not trained:
            out[m] = None
            continue
        rand = np.concatenate([np.array(r["key_correct"][t]["random_zero"], dtype=float) for t in trained], axis=1)
        key = np.concatenate([np.array(r["key_correct"][t]["key_zero"], dtype=float) for t in trained])
        out[m] = paired_bootstrap_difference(rand, key, seed=seed, rows=("draws", "auto"))
    return out


def linearity_table(results: Mapping[str, Mapping[str, Any]], tasks: Sequence[str], n_test: Mapping[str, int],
                    ledger: Any) -> pd.DataFrame:
    """Table 8.9 (index ``(model, task, layer)``): depth, the accuracies of the LTV, Wθ (final norm, block L-1) and
    zero-shot with their intervals, and the fit's R², explained fraction, rotation and stretch (LTV cells gated, where
    ``Table 8.9``)."""
    lin_cols = {"ltv": "LTV", "w_theta": "Wθ (final norm)", "w_theta_last_block": "Wθ (block L-1)",
                "zero_shot": "zero-shot", "r2_heldout": "R² held-out", "explained": "explained",
                "cos_theta_Qtheta": "cos(θ, Qθ)", "stretch": "|Sθ|/|θ|"}
    lin_rows = []
    for m, r in results.items():
        for t in tasks:
            n = n_test[t]
            for layer, v in r["linearity"][t].items():
                ltv = r["ltv"][t, layer]
                row = {"model": m, "task": t, "layer": layer, "depth l/L": round(layer / r["L"], 2)}
                for k, c in lin_cols.items():
                    if k in ("ltv", "w_theta", "w_theta_last_block", "zero_shot"):
                        text = cell_text(est_of(v[k], n))
                        row[c] = ledger.cell(ltv, text, where="Table 8.9") if k != "zero_shot" else text
                    else:
                        row[c] = ledger.cell(ltv, f"{v[k]:.2f}", where="Table 8.9")
                lin_rows.append(row)
    return pd.DataFrame(lin_rows).set_index(["model", "task", "layer"])


def plot_linearity(results: Mapping[str, Mapping[str, Any]], model_list: Sequence[str], tasks: Sequence[str],
                   n_test: Mapping[str, int], ledger: Any) -> tuple[plt.Figure, np.ndarray]:
    """One panel per model: per task the LTV, Wθ at the final norm and at block L-1 and zero-shot against relative
    depth with Wilson intervals (layers whose LTV trained only, noted where ``Figure 8.5``). Returns the figure and
    its axes (one column), without titles or axis labels."""
    fig, axes = plt.subplots(len(model_list), 1, figsize=(7.5, 3.0 * len(model_list)), sharex=True, squeeze=False)
    for ax, m in zip(axes[:, 0], model_list):
        r = results[m]
        for i, t in enumerate(tasks):
            n = n_test[t]
            layers = [l for l in sorted(r["linearity"][t]) if ledger.keep([r["ltv"][t, l]], where="Figure 8.5")]
            if not layers:
                continue
            d = np.array(layers) / r["L"]
            for k, style, label in (("ltv", "o-", "LTV"), ("w_theta", "s--", "Wθ at the final norm"),
                                    ("w_theta_last_block", "^-.", "Wθ at block L-1"), ("zero_shot", ":", "zero-shot")):
                a = np.array([r["linearity"][t][l][k] for l in layers])
                ests = [est_of(v, n) for v in a]
                err = [a - np.array([100 * e.low for e in ests]), np.array([100 * e.high for e in ests]) - a]
                ax.errorbar(d, a, yerr=err, fmt=style, color=f"C{i}", mfc="none", capsize=2, lw=1.2,
                            label=f"{t}: {label}")
        ax.set_ylim(-3, 103)
        ax.set_xlim(-0.03, 1.03)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=9, loc="lower center", ncol=2, bbox_to_anchor=(0.5, -0.01))
    return fig, axes[:, 0]


def reconstruction_gaps(results: Mapping[str, Mapping[str, Any]], tasks: Sequence[str],
                        margin: float = 0.10) -> dict[str, tuple[list[tuple[str, int]], dict[str, Estimate]]]:
    """Chapter 05's reconstruction test per model: the label-space (task, layer) points of ``results[m]["linear_ctl"]``
    whose LTV learned and whose own shift beats zero-shot by at least ``margin``
    (:func:`ltvlib.study.linearity_tables.reconstruction_points`), and over their test queries pooled
    ``"LTV (own shift) − Wθ"`` (paired bootstrap) with both accuracies
    (:func:`ltvlib.study.linearity_tables.reconstruction_gap`); an empty dict where no point qualifies."""
    labelled = [t for t in tasks if get_task(t).labels]
    out: dict[str, tuple[list[tuple[str, int]], dict[str, Estimate]]] = {}
    for m, r in results.items():
        ctl = r["linear_ctl"]
        points = sorted(ctl)
        trained = {p: ltv_trained(r, p[0], p[1]) for p in points}
        chosen = reconstruction_points(points, ctl, trained, labelled, margin)
        out[m] = (chosen, reconstruction_gap(ctl, chosen) if chosen else {})
    return out
