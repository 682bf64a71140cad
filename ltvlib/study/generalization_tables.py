"""Chapter 06's generalisation tables, statistics and figures, from :mod:`ltvlib.study.generalization`'s results.

Pure functions of the trained LTVs, the transfer rows (:func:`~ltvlib.study.generalization.transfer_matrix`) and the
chapter's :class:`~ltvlib.study.ltv_report.LTVLedger` (every LTV number passes through it, in the order the chapter
shows it). The statistics the verdicts rest on are here and tested; the rules stay in the chapter. The measuring
module is untouched (its source keys the cached measurements).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from ..stats import Estimate, Proportion, format_estimate, seed_interval
from .generalization import (
    PAPER_SNLI_TO_RTE,
    control_margin,
    cosine_matrix,
    gap_interval,
    gap_permutation,
    initial_vectors,
    pca_2d,
    similarity_summary,
    stack_vectors,
    tsne_2d,
)
from .ltv_report import DID_NOT_TRAIN

Key = tuple[str, int]

TRANSFER_PANELS: tuple[str, ...] = ("first-token accuracy (whole vocabulary)", "label-restricted accuracy")
"""The transfer figure's panels, top to bottom (the second only with classification targets)."""


def vectors_table(all_ltvs: Mapping[Key, Any], ledger: Any) -> pd.DataFrame:
    """Per (task, seed) (index): steps, trained, validation accuracy (gated, where
    ``ch06-table-vectors``), the norm, its random start's norm and the cosine between the two."""
    vec_rows = []
    for (t, s), v in all_ltvs.items():
        x, x0 = v.vectors[0].float(), initial_vectors(v)[0]
        vec_rows.append({
            "task": t, "seed": s, "steps": v.training.steps, "trained": v.training.trained,
            "validation accuracy (%)": ledger.cell(v, f"{100 * v.training.best_val_accuracy:.1f}",
                                                   where="ch06-table-vectors"),
            "norm": round(float(x.norm()), 3), "norm of the random start": round(float(x0.norm()), 3),
            "cos(vector, its start)": round(float(cosine_matrix(torch.stack([x, x0]))[0, 1]), 3)})
    return pd.DataFrame(vec_rows).set_index(["task", "seed"])


@dataclass
class Similarity:
    """The trained LTVs' similarities.

    ``keys`` (task, seed) in order, ``X`` their vectors ``(n, d)``, ``groups`` their tasks, ``labels`` ``"task sS"``,
    ``cos_v`` / ``cos_d`` the cosine matrices of the vectors and of vector minus start, ``summ`` the
    :func:`~ltvlib.study.generalization.similarity_summary` of each (keys ``vectors``, ``vector minus start``),
    ``chance`` the share of a vector's others that are of its task (averaged), ``multi`` the tasks with more than
    one vector, ``cluster_stats`` per matrix the gap over tasks, its label permutation and the margin (only with
    two such tasks)."""

    keys: list[Key]
    X: torch.Tensor
    groups: list[str]
    labels: list[str]
    cos_v: torch.Tensor
    cos_d: torch.Tensor
    summ: dict[str, dict[str, Any]]
    chance: float
    multi: list[str]
    cluster_stats: dict[str, dict[str, Any]]


def similarity(ltvs: Mapping[Key, Any], seed: int) -> Similarity:
    """:class:`Similarity` of the (trained) LTVs; the permutation tests and bootstraps use ``seed``."""
    keys, X = stack_vectors(ltvs)
    starts = torch.stack([initial_vectors(ltvs[k])[0] for k in keys])
    groups = [t for t, _ in keys]
    labels = [f"{t} s{s}" for t, s in keys]
    cos_v, cos_d = cosine_matrix(X), cosine_matrix(X - starts)
    summ = {name: similarity_summary(groups, c) for name, c in (("vectors", cos_v), ("vector minus start", cos_d))}
    n_per = pd.Series(groups).value_counts()
    repeated = [(n_per[g] - 1) / (len(groups) - 1) for g in groups if n_per[g] > 1]
    chance = float(np.mean(repeated)) if repeated else float("nan")
    multi = [g for g in n_per.index if n_per[g] > 1]
    cluster_stats = {}
    if len(multi) >= 2:
        for name, c in (("vectors", cos_v), ("vector minus start", cos_d)):
            perm = gap_permutation(groups, c, n_permutations=999, seed=seed)
            cluster_stats[name] = {"gap": gap_interval(groups, c, seed=seed), "perm": perm,
                                   "margin": control_margin(perm, n=len(groups), seeds=int(n_per[multi].min()))}
    return Similarity(keys, X, groups, labels, cos_v, cos_d, summ, chance, multi, cluster_stats)


def similarity_table(sim: Similarity) -> pd.DataFrame:
    """Per matrix (columns ``vectors``, ``vector minus start``): mean same-task and cross-task cosine, the share
    whose nearest other vector is of its task (with chance) and, where measured, the gap over tasks, the
    label-shuffled gap and observed minus shuffled."""
    sim_rows = {}
    for name, sm in sim.summ.items():
        row = {"mean cosine, same task": f"{sm['within']:.3f}", "mean cosine, different tasks": f"{sm['across']:.3f}",
               "nearest other vector of the same task":
                   f"{100 * sm['nearest_same_group']:.0f} % (chance {100 * sim.chance:.0f} %)"}
        if name in sim.cluster_stats:
            st = sim.cluster_stats[name]
            g, m, pm = st["gap"], st["margin"], st["perm"]
            row["same − different, over tasks [95 %]"] = f"{g.value:+.3f} [{g.low:+.3f}, {g.high:+.3f}] ({g.n} tasks)"
            row["label-shuffled gap: mean [central 95 %]"] = f"{pm.mean:+.3f} [{pm.low:+.3f}, {pm.high:+.3f}]"
            row["observed − shuffled [95 %]"] = f"{m.value:+.3f} [{m.low:+.3f}, {m.high:+.3f}] (p = {pm.p_value:.3f})"
        sim_rows[name] = row
    return pd.DataFrame(sim_rows)


def within_table(sim: Similarity) -> pd.DataFrame:
    """Mean same-task cosine per task (rows) and matrix (columns), three decimals."""
    return pd.DataFrame({name: s["within_by_group"] for name, s in sim.summ.items()}).rename_axis("task").round(3)


def plot_cosine(cos: torch.Tensor, sim: Similarity) -> tuple[plt.Figure, Any]:
    """A cosine matrix as a heatmap with its colour bar, rows and columns labelled by (task, seed), tasks separated by
    black lines. Returns the figure and its axes, without title or axis labels (the chapter sets them, then the
    layout)."""
    fig, ax = plt.subplots(figsize=(8, 7))
    im = ax.imshow(cos.numpy(), cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set_xticks(range(len(sim.labels)), sim.labels, rotation=90)
    ax.set_yticks(range(len(sim.labels)), sim.labels)
    groups = sim.groups
    for b in [i for i in range(1, len(groups)) if groups[i] != groups[i - 1]]:
        ax.axhline(b - 0.5, color="k", lw=0.6)
        ax.axvline(b - 0.5, color="k", lw=0.6)
    fig.colorbar(im, ax=ax, fraction=0.046, label="cosine similarity")
    return fig, ax


def projection_panels(sim: Similarity, seed: int) -> list[tuple[str, np.ndarray, str, str]]:
    """The 2-D projections of the LTVs: ``(name, coordinates (n, 2), x label, y label)`` for the PCA and, with
    scikit-learn and at least 3 vectors, t-SNE of the cosine distances."""
    coords, ratio = pca_2d(sim.X)
    tsne = tsne_2d(sim.X, seed=seed) if len(sim.keys) >= 3 else None
    panels = [("PCA", coords, f"PC1 ({100 * ratio[0]:.0f} % of variance)", f"PC2 ({100 * ratio[1]:.0f} %)")]
    if tsne is not None:
        panels.append(("t-SNE (cosine distance)", tsne, "t-SNE 1", "t-SNE 2"))
    return panels


def plot_projection(sim: Similarity, panels: Sequence[tuple[str, np.ndarray, str, str]]) -> tuple[plt.Figure, np.ndarray]:
    """One scatter panel per projection of :func:`projection_panels` (rows), one colour per task, one marker per
    seed, with the legend. Returns the figure and its axes (one column), without titles or axis labels."""
    keys, groups = sim.keys, sim.groups
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 4.2 * len(panels) + 1), squeeze=False, layout="constrained")
    task_order = list(dict.fromkeys(groups))
    markers = "osD^v<>P*X"
    seed_list = sorted({s for _, s in keys})
    for ax, (_, xy, _, _) in zip(axes[:, 0], panels):
        for i, (t, s) in enumerate(keys):
            ax.scatter(xy[i, 0], xy[i, 1], color=f"C{task_order.index(t)}", marker=markers[seed_list.index(s) % 10],
                       s=60, label=t if s == min(x for u, x in keys if u == t) else None)
    fig.legend(loc="outside lower center", ncol=4, title="task (marker = seed)")
    return fig, axes[:, 0]


@dataclass
class Transfer:
    """The transfer matrix's rows and tables.

    ``rows``: every (source, seed, target) row with ``accuracy`` / ``label_accuracy`` gated by the ledger (NaN for
    a vector that did not train); ``tr``: the transfer seeds' rows; ``off``: their rows with source ≠ target;
    ``acc`` / ``lab``: source × target accuracy (%) over the whole vocabulary / label words (classification
    targets ``cls_targets``); ``own``: each task's own accuracy (%) per seed; ``n_test``: test queries per target."""

    rows: pd.DataFrame
    tr: pd.DataFrame
    off: pd.DataFrame
    acc: pd.DataFrame
    lab: pd.DataFrame
    cls_targets: list[str]
    own: pd.DataFrame
    n_test: dict[str, int]


def transfer_tables(transfer_rows: Sequence[Mapping[str, Any]], all_ltvs: Mapping[Key, Any], ledger: Any,
                    tasks: Sequence[str], transfer_seeds: Sequence[int]) -> Transfer:
    """:class:`Transfer` from :func:`~ltvlib.study.generalization.transfer_matrix`'s rows (every accuracy noted in
    the ledger, where ``ch06-transfer``)."""
    tasks = list(tasks)
    rows = pd.DataFrame(transfer_rows)
    rows["accuracy"] = [ledger.value(all_ltvs[(r.source, r.seed)], r.accuracy, where="ch06-transfer")
                        for r in rows.itertuples()]
    rows["label_accuracy"] = [ledger.value(all_ltvs[(r.source, r.seed)], r.label_accuracy, where="ch06-transfer")
                              if r.label_accuracy is not None and not pd.isna(r.label_accuracy) else np.nan
                              for r in rows.itertuples()]
    own_rows = rows[rows.source == rows.target]
    tr = rows[rows.seed.isin(transfer_seeds)]
    acc = 100 * tr.pivot_table(index="source", columns="target", values="accuracy", aggfunc="mean", dropna=False)
    acc = acc.reindex(index=tasks, columns=tasks)
    cls_targets = [t for t in tasks if tr[tr.target == t]["label_correct"].map(lambda v: v is not None).all()]
    lab = 100 * tr[tr.target.isin(cls_targets)].pivot_table(index="source", columns="target",
                                                             values="label_accuracy", aggfunc="mean", dropna=False)
    lab = lab.reindex(index=tasks, columns=cls_targets)
    n_test = {t: int(tr[tr.target == t]["n"].iloc[0]) for t in tasks}
    own = own_rows.assign(accuracy=100 * own_rows.accuracy).pivot(index="source", columns="seed", values="accuracy")
    own = own.reindex(tasks).rename_axis("task").round(1)
    return Transfer(rows, tr, tr[tr.source != tr.target], acc, lab, cls_targets, own, n_test)


def top_tokens_table(transfer: Transfer, tasks: Sequence[str]) -> pd.DataFrame:
    """Source × target (foreign pairs): the three most frequent top-1 tokens and their shares; empty elsewhere."""
    off = transfer.off
    top = off.assign(top=off.top_predictions.map(lambda p: ", ".join(f"{tok!r} {100 * share:.0f} %"
                                                                     for tok, share in p)))
    return top.pivot(index="source", columns="target", values="top").reindex(index=list(tasks),
                                                                             columns=list(tasks)).fillna("")


def plot_transfer(transfer: Transfer, zero: Mapping[str, Mapping[str, Any]]) -> tuple[plt.Figure, np.ndarray]:
    """The transfer matrices (whole vocabulary; label words for classification targets: :data:`TRANSFER_PANELS`) as
    annotated heatmaps with a zero-shot row and colour bars; the paper's SNLI → RTE cell outlined. Returns the figure
    and its axes (one per panel drawn), without titles or axis labels."""
    acc, lab, cls_targets = transfer.acc, transfer.lab, transfer.cls_targets
    fig, axes = plt.subplots(2 if cls_targets else 1, 1, figsize=(8, 11 if cls_targets else 6), squeeze=False)
    for ax, m in zip(axes[:, 0], (acc, lab)):
        ext = pd.concat([m, pd.DataFrame([{t: 100 * (zero[t]["accuracy"] if m is acc else zero[t]["label_accuracy"])
                                           for t in m.columns}], index=["(zero-shot)"])])
        im = ax.imshow(ext.values.astype(float), cmap="viridis", vmin=0, vmax=100, aspect="auto")
        for i in range(ext.shape[0]):
            for j in range(ext.shape[1]):
                v = ext.values[i, j]
                if not pd.isna(v):
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=9, color="w" if v < 60 else "k")
        if "snli" in ext.index and "rte" in ext.columns and m is acc:
            i, j = list(ext.index).index("snli"), list(ext.columns).index("rte")
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="red", lw=2))
            ax.annotate(f"paper: {PAPER_SNLI_TO_RTE} %", (j, i), xytext=(0, 14), textcoords="offset points",
                        ha="center", color="red", fontsize=9)
        ax.set_xticks(range(ext.shape[1]), ext.columns, rotation=45)
        ax.set_yticks(range(ext.shape[0]), ext.index)
        ax.axhline(ext.shape[0] - 1.5, color="w", lw=2)
        fig.colorbar(im, ax=ax, label="test accuracy (%)")
    return fig, axes[:, 0]


def wilson(correct: Sequence[float]) -> Estimate:
    """The Wilson estimate of per-query 0/1 flags."""
    return Proportion(int(round(sum(correct))), len(correct)).estimate()  # noqa: RUF046 (numpy < 2 rounds to a float)


@dataclass
class SnliRte:
    """The SNLI → RTE cell and its references.

    ``cell`` / ``other_cell``: the SNLI LTV's and the best other foreign LTV's rows on RTE (``best_other`` None
    without one); ``rte_cells`` / ``lab_cells``: name -> Estimate (None: did not train) over the whole vocabulary /
    the label words; ``n_rte``: RTE's test queries."""

    cell: Any
    best_other: str | None
    other_cell: Any
    rte_cells: dict[str, Estimate | None]
    lab_cells: dict[str, Estimate | None]
    n_rte: int


def snli_rte(transfer: Transfer, rand: Sequence[Mapping[str, Any]], zero: Mapping[str, Mapping[str, Any]],
             rte_test: Sequence[Any], snli_ok: bool, rte_ok: bool, tasks: Sequence[str], control_draws: int) -> SnliRte:
    """:class:`SnliRte` from the transfer tables, the random-vector control on RTE (``rand``), RTE's zero-shot record
    and test examples, and whether the SNLI and RTE LTVs (transfer seed) trained."""
    tr, acc = transfer.tr, transfer.acc
    cell = tr[(tr.source == "snli") & (tr.target == "rte")].iloc[0]
    n_rte = len(rte_test)
    majority = max(sum(e.output == lab_ for e in rte_test) for lab_ in ("True", "False")) / n_rte
    others = [t for t in tasks if t not in ("snli", "rte") and not pd.isna(acc.loc[t, "rte"])]
    best_other = max(others, key=lambda t: acc.loc[t, "rte"]) if others else None
    other_cell = tr[(tr.source == best_other) & (tr.target == "rte")].iloc[0] if best_other else None
    own_cell = tr[(tr.source == "rte") & (tr.target == "rte")].iloc[0]
    rand_name = f"random vectors of the SNLI LTV's norm ({control_draws} draws)"
    rte_cells = {
        "SNLI LTV on RTE (ours)": wilson(cell.correct) if snli_ok else None,
        rand_name: seed_interval([d["correct"] for d in rand], rows="draws"),
        f"best other foreign LTV on RTE ({best_other})": wilson(other_cell.correct) if other_cell is not None else None,
        "RTE zero-shot": Proportion(int(round(zero["rte"]["accuracy"] * zero["rte"]["n"])),  # noqa: RUF046 (numpy < 2 rounds to a float)
                                    zero["rte"]["n"]).estimate(),
        "RTE's own LTV": wilson(own_cell.correct) if rte_ok else None,
        "always the majority label": Proportion(int(round(majority * n_rte)), n_rte).estimate(),  # noqa: RUF046 (numpy < 2 rounds to a float)
    }
    lab_cells = {
        "SNLI LTV on RTE (ours)": wilson(cell.label_correct) if snli_ok else None,
        rand_name: seed_interval([d["label_correct"] for d in rand], rows="draws"),
    }
    return SnliRte(cell, best_other, other_cell, rte_cells, lab_cells, n_rte)


def snli_rte_table(s: SnliRte) -> pd.DataFrame:
    """The SNLI → RTE cells (rows) over the whole vocabulary and the label words (columns), with their intervals;
    ``"did not train"`` for a vector that did not, ``"–"`` where not measured."""
    def text(v: Estimate | None) -> str:
        return format_estimate(v, bounds=True) if v is not None else DID_NOT_TRAIN

    return pd.DataFrame({"accuracy": {k: text(v) for k, v in s.rte_cells.items()},
                         "label-restricted": {k: text(v) for k, v in s.lab_cells.items()}}).fillna("–")


def plot_snli_rte(rte_cells: Mapping[str, Estimate | None]) -> tuple[plt.Figure, Any]:
    """Horizontal bars of the SNLI → RTE cells that have a number, with intervals and the paper's number dashed.
    Returns the figure and its axes, without title or axis labels."""
    fig, ax = plt.subplots(figsize=(8, 4.4), layout="constrained")
    shown = [(k, v) for k, v in rte_cells.items() if v is not None]
    y = np.arange(len(shown))
    vals = [100 * v.value for _, v in shown]
    ax.barh(y, vals, xerr=[[100 * (v.value - v.low) for _, v in shown], [100 * (v.high - v.value) for _, v in shown]],
            color=["C3" if k.startswith("SNLI") else "C7" if k.startswith("random") else "C0" for k, _ in shown],
            capsize=3)
    ax.axvline(PAPER_SNLI_TO_RTE, color="red", ls="--", label=f"paper (Llama-3.1-8B): {PAPER_SNLI_TO_RTE} %")
    ax.set_yticks(y, [k for k, _ in shown])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22))
    return fig, ax


def foreign_pooled(off: pd.DataFrame) -> Estimate | None:
    """The pooled accuracy (Wilson) of every foreign pair but SNLI → RTE whose vector trained; None without any."""
    rest = [r for r in off.itertuples() if not (r.source == "snli" and r.target == "rte") and not pd.isna(r.accuracy)]
    if not rest:
        return None
    return Proportion(int(round(sum(sum(r.correct) for r in rest))), sum(len(r.correct) for r in rest)).estimate()  # noqa: RUF046 (numpy < 2 rounds to a float)
