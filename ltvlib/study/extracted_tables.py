"""Chapter 01's tables, accuracies and figures, from :mod:`ltvlib.study.extracted` and :mod:`ltvlib.study.ltvs`.

Pure functions of the cached measurements (ICL references, extracted-vector layer curves, LTVs and their test
records) and the chapter's :class:`~ltvlib.study.ltv_report.LTVLedger` (every LTV number passes through it, in the
order the chapter shows it). The rules stay in the chapter; the measuring modules are untouched (their source keys
the cached measurements).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats import Estimate, proportion_estimate, seed_interval
from .extracted import EXTRACTED_LABELS, compare_at_layer, strongest_extracted
from .ltvs import correct_matrix, estimate_cell, task_contrast, task_mean

NOT_LEARNED = "did not learn"
"""A table cell for an LTV that did not learn (:func:`ltvlib.ltv.learned_rule`): it enters no mean or verdict."""


STYLE: dict[str, dict[str, Any]] = {
    "ltv": {"label": "LTV", "color": "C3", "marker": "o", "zorder": 3},
    "vanilla_tv": {"label": "Vanilla TV (replace)", "color": "C0", "marker": "s"},
    "vanilla_tv_difference": {"label": "Vanilla TV (difference)", "color": "C0", "marker": "s", "ls": "--",
                              "mfc": "none"},
    "function_vector": {"label": "FV", "color": "C2", "marker": "^"},
}
"""Line style per method in the layer figure."""

PAPER_MID: dict[str, float] = {"ltv": 83.49, "vanilla_tv": 37.80, "function_vector": 37.30}
"""The paper's middle-layer seven-task averages (Table 1, column P={-1}, L={16}; Llama-3.1-8B), in %, transcribed
from a secondary summary of the paper."""


def references(icl: Mapping[tuple[str, int], Mapping[str, Any]], tasks: Sequence[str],
               shots: Sequence[int]) -> tuple[int, dict[tuple[str, int], Estimate], pd.DataFrame]:
    """From the zero-shot and k-shot records ``icl[task, k]``: the best k (highest mean accuracy over tasks), each
    record's Wilson estimate, and the table (rows: tasks; n, zero-shot and each k-shot with its n)."""
    best_shots = max(shots, key=lambda k: np.mean([icl[t, k]["accuracy"] for t in tasks]))
    ref_est = {(t, k): proportion_estimate(sum(icl[t, k]["correct"]), icl[t, k]["n"]) for (t, k) in icl}
    table = pd.DataFrame({t: {"n": icl[t, 0]["n"], **{"zero-shot" if k == 0 else f"{k}-shot ICL (n={icl[t, k]['n']})":
                                                      estimate_cell(ref_est[t, k]) for k in (0, *shots)}}
                          for t in tasks}).T
    return best_shots, ref_est, table


def collect_extracted(curves: Mapping[tuple[str, str], Mapping[str, Any]]
                      ) -> tuple[dict[tuple[str, str, int], np.ndarray], dict[str, int]]:
    """From the layer curves ``curves[task, method]`` (:func:`~ltvlib.study.extracted.extracted_curve`): per
    ``(method, task, layer)`` the per-query correctness as floats, and per task the layer the Vanilla TV chose."""
    extracted, chosen = {}, {}
    for (task, method), c in curves.items():
        for l, v in c["layers"].items():
            extracted[method, task, int(l)] = np.asarray(v["correct"], dtype=float)
        if method == "vanilla_tv":
            chosen[task] = c["chosen_layer"]
    return extracted, chosen


def trained_correct(ltv_vectors: Mapping[tuple[str, int], Sequence[Any]],
                    ltv_records: Mapping[tuple[str, int], Sequence[Mapping[str, Any]]],
                    ledger: Any) -> dict[tuple[str, int], np.ndarray]:
    """Per (task, layer) the correctness ``(seeds, queries)`` of the seeds that trained (noted in ``ledger``, where
    ``ch01-fig-layers``); absent where none did."""
    ltv = {}
    for key, vectors in ltv_vectors.items():
        recs = [r for v, r in zip(vectors, ltv_records[key])
                if not math.isnan(ledger.value(v, r["accuracy"], where="ch01-fig-layers"))]
        if recs:
            ltv[key] = correct_matrix(recs)
    return ltv


def training_table(ltv_vectors: Mapping[tuple[str, int], Sequence[Any]]) -> pd.DataFrame:
    """Per (task, layer) (index): seeds, how many learned (:func:`ltvlib.ltv.learned_rule`), validation accuracy,
    and steps per seed (training time is not per vector: a layer's tasks and seeds are trained together)."""
    return pd.DataFrame([
        {"task": t, "layer": l, "seeds": len(vs), "learned": sum(bool(v.training.trained) for v in vs),
         "validation accuracy (%, per seed)": ", ".join(f"{100 * v.training.best_val_accuracy:.1f}" for v in vs),
         "steps (per seed)": ", ".join(str(v.training.steps) for v in vs)}
        for (t, l), vs in ltv_vectors.items()
    ]).set_index(["task", "layer"])


def accuracies(extracted: Mapping[tuple[str, str, int], np.ndarray], ltv: Mapping[tuple[str, int], np.ndarray],
               layers: Sequence[int], sweep_ltv_layers: Sequence[int],
               avg_tasks: Sequence[str]) -> dict[tuple[str, str, int], Estimate]:
    """``(method, task or "average", layer) -> Estimate``: Wilson per extracted vector, seed-and-query bootstrap per
    LTV of several seeds (Wilson for one), the stratified mean over ``avg_tasks`` per layer (the LTV's only where it
    trained on every one of them)."""
    acc = {}
    for (method, task, layer), c in extracted.items():
        acc[method, task, layer] = proportion_estimate(int(c.sum()), len(c))
    for (task, layer), m in ltv.items():
        acc["ltv", task, layer] = seed_interval(m) if m.shape[0] > 1 else proportion_estimate(int(m.sum()), m.shape[1])
    for layer in layers:
        for method in EXTRACTED_LABELS:
            acc[method, "average", layer] = task_mean({t: extracted[method, t, layer] for t in avg_tasks})
    for layer in sweep_ltv_layers:
        trained_here = [t for t in avg_tasks if (t, layer) in ltv]
        if trained_here == list(avg_tasks):
            acc["ltv", "average", layer] = task_mean({t: ltv[t, layer] for t in avg_tasks})
    return acc


def plot_layers(acc: Mapping[tuple[str, str, int], Estimate], icl: Mapping[tuple[str, int], Mapping[str, Any]],
                tasks: Sequence[str], avg_tasks: Sequence[str], best_shots: int,
                mid: int) -> tuple[plt.Figure, np.ndarray]:
    """One panel per task and one for the average (row by row, two columns; a spare panel hidden): each method's
    accuracy per layer with its band, zero-shot and the best ICL as lines, the paper's middle-layer values as stars
    on the average. Returns the figure and its ``(rows, 2)`` axes (panels row by row: the tasks, then the average),
    without titles or axis labels (the chapter sets them, then the layout)."""
    best_icl_col = f"{best_shots}-shot ICL"

    def draw(ax: Any, task: str, zero: float, icl_ref: float) -> None:
        for method, style in STYLE.items():
            pts = sorted((l, e) for (m, t, l), e in acc.items() if m == method and t == task)
            if not pts:
                continue
            x = [l for l, _ in pts]
            ax.plot(x, [100 * e.value for _, e in pts], ms=4, lw=1.2, **style)
            if len(pts) == 1:  # a single layer: an error bar instead of a band
                e = pts[0][1]
                ax.errorbar(x, [100 * e.value], yerr=[[100 * (e.value - e.low)], [100 * (e.high - e.value)]],
                            color=style["color"], capsize=3, lw=1)
            else:
                ax.fill_between(x, [100 * e.low for _, e in pts], [100 * e.high for _, e in pts],
                                color=style["color"], alpha=0.12, lw=0)
        ax.axhline(zero, color="grey", lw=1, ls=":", label="zero-shot")
        ax.axhline(icl_ref, color="black", lw=1, ls="-.", label=best_icl_col)
        ax.axvline(mid, color="grey", lw=0.5)
        ax.set_ylim(-3, 103)

    panels = [*tasks, "average"]
    n_rows = -(-len(panels) // 2)
    fig, axes = plt.subplots(n_rows, 2, figsize=(8, 2.5 * n_rows + 0.9), sharex=True, sharey=True, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, task in zip(axes.flat, tasks):
        draw(ax, task, 100 * icl[task, 0]["accuracy"], 100 * icl[task, best_shots]["accuracy"])
    ax_avg = axes.flat[len(panels) - 1]
    draw(ax_avg, "average", 100 * np.mean([icl[t, 0]["accuracy"] for t in avg_tasks]),
         100 * np.mean([icl[t, best_shots]["accuracy"] for t in avg_tasks]))
    for (method, value), dx in zip(PAPER_MID.items(), (0, -0.8, 0.8)):
        ax_avg.plot([mid + dx], [value], marker="*", ms=11, color=STYLE[method]["color"], mec="black", mew=0.6,
                    ls="none")
    ax_avg.plot([], [], marker="*", ms=11, color="white", mec="black", ls="none",
                label="paper, middle layer (Llama-3.1-8B, 7 tasks)")
    for ax in axes.flat:
        ax.tick_params(labelsize=9)
    axes.flat[len(panels) - 2].xaxis.set_tick_params(labelbottom=True)
    handles, labels = ax_avg.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncols=3, fontsize=9, frameon=False)
    return fig, axes


def vanilla_form(r: Mapping[str, Any]) -> str:
    """The Vanilla TV form a comparison used, as its short name (``"replace"`` or ``"difference"``)."""
    return EXTRACTED_LABELS[r["vanilla_form"]].split("(")[1][:-1]


def layer_comparisons(ltv: Mapping[tuple[str, int], np.ndarray], extracted: Mapping[tuple[str, str, int], np.ndarray],
                      sweep_tasks: Sequence[str], sweep_ltv_layers: Sequence[int],
                      seed: int) -> tuple[dict[int, dict[str, Any]], pd.DataFrame | None]:
    """Per swept layer with a trained LTV, :func:`~ltvlib.study.extracted.compare_at_layer` over the tasks where it
    trained; and the per-layer table (rows: layers; tasks, n, each method, the paired differences, the tasks left
    out), None without a sweep."""
    by_layer: dict[int, Any] = {}
    layer_rows: dict[int, dict[str, Any]] = {}
    for layer in sweep_ltv_layers:
        here = [t for t in sweep_tasks if (t, layer) in ltv]
        if not here:
            layer_rows[layer] = {"tasks": "none: " + NOT_LEARNED}
            continue
        by_layer[layer] = compare_at_layer(ltv, extracted, here, layer, seed=seed)
        r = by_layer[layer]
        layer_rows[layer] = {
            "tasks": len(here), "n": r["LTV"].n, "LTV": estimate_cell(r["LTV"]), "FV": estimate_cell(r["FV"]),
            "Vanilla TV": estimate_cell(r["Vanilla TV"]) + f" ({vanilla_form(r)})",
            "LTV − FV (pts)": estimate_cell(r["LTV − FV"]),
            "LTV − Vanilla TV (pts)": estimate_cell(r["LTV − Vanilla TV"]),
            "left out": ", ".join(t for t in sweep_tasks if t not in here) or "–",
        }
    table = pd.DataFrame(layer_rows).T.rename_axis("layer").fillna("–") if layer_rows else None
    return by_layer, table


def middle_table(tasks: Sequence[str], mid: int, icl: Mapping[tuple[str, int], Mapping[str, Any]],
                 ref_est: Mapping[tuple[str, int], Estimate], best_shots: int,
                 acc: Mapping[tuple[str, str, int], Estimate], ltv: Mapping[tuple[str, int], np.ndarray],
                 extracted: Mapping[tuple[str, str, int], np.ndarray], hendel: Mapping[str, Mapping[str, Any]],
                 fv_own: Mapping[str, np.ndarray], fv_layer: int, n_seeds: int,
                 middle: Mapping[str, Any] | None, mid_tasks: Sequence[str]) -> pd.DataFrame:
    """The middle-layer table (rows: tasks, the average over ``mid_tasks`` and the paper's; columns: n, zero-shot,
    best ICL, the LTV, both Vanilla TV forms and the FV at the middle layer, Hendel's original Vanilla TV with its
    zero-shot, the FV at its own layer); ``"–"`` where empty."""
    best_icl_col = f"{best_shots}-shot ICL"
    ltv_mid_col = f"LTV (L{mid}, {n_seeds} seeds)"
    rows = {}
    for t in tasks:
        h = hendel[t]
        h_correct = h["layers"][str(h["chosen_layer"])]["correct"]
        rows[t] = {
            "n": icl[t, 0]["n"], "zero-shot": estimate_cell(ref_est[t, 0]),
            best_icl_col: estimate_cell(ref_est[t, best_shots]),
            ltv_mid_col: estimate_cell(acc["ltv", t, mid]) if (t, mid) in ltv else NOT_LEARNED,
            f"Vanilla TV (L{mid})": estimate_cell(acc["vanilla_tv", t, mid]),
            f"Vanilla TV diff. (L{mid})": estimate_cell(acc["vanilla_tv_difference", t, mid]),
            f"FV (L{mid})": estimate_cell(acc["function_vector", t, mid]),
            "Vanilla TV, Hendel original": estimate_cell(proportion_estimate(sum(h_correct), len(h_correct)))
            + f" (L{h['chosen_layer']})",
            "(its zero-shot)": estimate_cell(proportion_estimate(round(h["zero_shot"]["accuracy"]
                                                                       * h["zero_shot"]["n"]), h["zero_shot"]["n"])),
            f"FV (L{fv_layer})": estimate_cell(proportion_estimate(int(fv_own[t].sum()), len(fv_own[t]))),
        }
    if middle is not None:
        rows[f"average ({len(mid_tasks)} tasks)"] = {
            "n": middle["LTV"].n, ltv_mid_col: estimate_cell(middle["LTV"]),
            "zero-shot": estimate_cell(task_mean({t: np.asarray(icl[t, 0]["correct"], float) for t in mid_tasks})),
            best_icl_col: estimate_cell(task_mean({t: np.asarray(icl[t, best_shots]["correct"], float)
                                                   for t in mid_tasks})),
            f"FV (L{mid})": estimate_cell(middle["FV"]),
            f"Vanilla TV (L{mid})": estimate_cell(task_mean({t: extracted["vanilla_tv", t, mid] for t in mid_tasks})),
            f"Vanilla TV diff. (L{mid})": estimate_cell(
                task_mean({t: extracted["vanilla_tv_difference", t, mid] for t in mid_tasks})),
        }
    rows["paper, Llama-3.1-8B (7-task average)"] = {ltv_mid_col: "83.49", f"Vanilla TV (L{mid})": "37.80",
                                                    f"FV (L{mid})": "37.30"}
    return pd.DataFrame(rows).T.fillna("–")


def late_changes(ltv: Mapping[tuple[str, int], np.ndarray], extracted: Mapping[tuple[str, str, int], np.ndarray],
                 tasks: Sequence[str], late: Sequence[int], middle: int, *, seed: int = 0) -> dict[str, Estimate]:
    """What moves the LTV's lead between the middle layer and the late ones, averaged over ``tasks``: the LTV's
    accuracy at the late layers (mean over ``late``) minus at ``middle`` (``"LTV"``), and the same for the
    strongest extracted vector of each layer (``"strongest extracted"``, :func:`strongest_extracted`); each a
    stratified bootstrap over the test queries (and the LTV's seeds). Their difference is
    :func:`~ltvlib.study.extracted.gap_change`."""
    if not late or not tasks:
        raise ValueError("late_changes: give at least one late layer and one task")
    best = {l: strongest_extracted(extracted, tasks, l) for l in (*late, middle)}
    w = 1.0 / len(late)
    ltv_terms: dict[str, list[tuple[float, Any] | tuple[float, Any, str]]] = {
        t: [*((w, ltv[t, l], "seeds") for l in late), (-1.0, ltv[t, middle], "seeds")] for t in tasks}
    ext_terms: dict[str, list[tuple[float, Any] | tuple[float, Any, str]]] = {
        t: [*((w, extracted[best[l], t, l]) for l in late), (-1.0, extracted[best[middle], t, middle])] for t in tasks}
    return {"LTV": task_contrast(ltv_terms, seed=seed), "strongest extracted": task_contrast(ext_terms, seed=seed)}


def heads_table(fvs: Mapping[str, Any]) -> pd.DataFrame:
    """Per task (rows): its function vector's heads, best first (columns ``#1``, ``#2``, ...), as ``L<l>H<h>``."""
    return pd.DataFrame({t: [f"L{l}H{h}" for l, h in fv.heads] for t, fv in fvs.items()}).T.rename(
        columns=lambda i: f"#{i + 1}")
