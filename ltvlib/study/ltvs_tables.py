"""Chapter 00's tables, accuracies and figure, from :mod:`ltvlib.study.ltvs`' cached references and LTVs.

Pure functions of the zero-shot and ICL records, the trained LTVs with their test records and the chapter's
:class:`~ltvlib.study.ltv_report.LTVLedger` (every LTV number passes through it, in the order the chapter shows it).
The rule stays in the chapter; the measuring module is untouched (its source keys the cached measurements).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..ltv import majority_rate
from ..models import MODEL_REGISTRY
from ..prompts import encode_prompts
from ..stats import Estimate, Proportion, proportion_estimate, seed_interval
from .ltvs import correct_matrix, estimate_cell, task_mean, task_mean_difference, task_splits

PAPER_LTV_AVERAGE = 83.49
"""The paper's seven-task middle-layer LTV average on Llama-3.1-8B (%): its Table 1, column P={-1}, L={16},
transcribed from a secondary summary of the paper."""

NOT_LEARNED = "did not learn"
"""A table cell for an LTV that did not learn (:func:`ltvlib.ltv.learned_rule`): it enters no mean or verdict."""


def models_table() -> pd.DataFrame:
    """The model registry (index ``name``): package and description."""
    return pd.DataFrame(
        [{"name": m.name, "package": m.package, "description": m.description} for m in MODEL_REGISTRY.values()]
    ).set_index("name")


def tasks_table(tokenizer: Any, tasks: Sequence[str], run: Any) -> pd.DataFrame:
    """Per task (index): kind, labels, split sizes and the first test query's prompt with its answer."""
    rows = []
    for name in tasks:
        s = task_splits(name, run)
        example = encode_prompts(tokenizer, s.task, s.test[:1]).texts[0]
        rows.append({
            "task": name, "kind": s.task.kind, "labels": ", ".join(s.task.labels or ()) or "open",
            "train": len(s.train), "validation": len(s.validation), "test": len(s.test),
            "example prompt": repr(example + s.task.format_answer(s.test[0].output)),
        })
    return pd.DataFrame(rows).set_index("task")


def training_table(ltvs: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Per (task, seed) (index): whether it learned and the test it was judged by (:func:`ltvlib.ltv.learned_rule`:
    the lower end of the 95 % interval of its validation accuracy against the better of the prompt without a vector
    and the majority answer), then its steps. Percentages with one decimal. (Training time is not per vector: the
    vectors of a chapter are trained together, and each records the joint call's wall time.)"""
    def pct(x: float) -> str:
        return "–" if not math.isfinite(x) else f"{100 * x:.1f}"

    return pd.DataFrame([
        {"task": t, "seed": v.seed, "learned": "yes" if v.training.trained else NOT_LEARNED,
         "validation accuracy (%)": pct(v.training.best_val_accuracy),
         "its lower bound (%)": pct(v.training.val_accuracy_low),
         "to beat (%)": pct(max((x for x in (v.training.no_vector_val_accuracy, v.training.majority_val_rate)
                                 if math.isfinite(x)), default=float("nan"))),
         "steps": v.training.steps}
        for t, vs in ltvs.items() for v in vs
    ]).set_index(["task", "seed"])


def reference_columns(shots: Sequence[int]) -> dict[int, str]:
    """Column name per number of shots: ``"zero-shot"`` for 0, ``"<k>-shot ICL"`` otherwise."""
    return {k: "zero-shot" if k == 0 else f"{k}-shot ICL" for k in shots}


def icl_learned(task: str, icl: Mapping[tuple[str, int], Mapping[str, Any]], shots: Sequence[int], run: Any) -> bool:
    """Whether some ``shots``-shot ICL setting learned ``task`` on its test queries: the lower end of its 95 % Wilson
    interval lies above the better of zero-shot accuracy and the majority answer's rate on those queries (the rule
    an LTV's validation accuracy is held to, :func:`ltvlib.ltv.learned_rule`)."""
    majority = majority_rate(task_splits(task, run, icl=True).test)
    zero = icl[task, 0]["accuracy"]
    for k in shots:
        r = icl[task, k]
        if proportion_estimate(round(r["accuracy"] * r["n"]), r["n"]).low > max(zero, majority):
            return True
    return False


@dataclass
class AccuracyTable:
    """Chapter 00's accuracy table.

    ``correct[column][task]``: per-query correctness ``(seeds, queries)`` (the LTV column only for tasks with a
    trained seed); ``with_ltv``: those tasks; ``est[(column, task or "average")]``: the estimates (the average over
    ``with_ltv``); ``table``: the rows (tasks, then the average) with n and each column."""

    ref_cols: dict[int, str]
    ltv_col: str
    correct: dict[str, dict[str, np.ndarray]]
    with_ltv: list[str]
    est: dict[tuple[str, str], Estimate]
    table: pd.DataFrame

    def paired(self, col_a: str, col_b: str) -> Estimate:
        """``col_a − col_b`` averaged over the tasks with an LTV, paired on the test queries both were evaluated on
        (k-shot prompts may use fewer test queries than zero-shot ones: the first of the same split)."""
        a, b = {}, {}
        for t in self.with_ltv:
            q = min(self.correct[col_a][t].shape[1], self.correct[col_b][t].shape[1])
            a[t], b[t] = self.correct[col_a][t][:, :q], self.correct[col_b][t][:, :q]
        return task_mean_difference(a, b)


def accuracy_table(tasks: Sequence[str], icl: Mapping[tuple[str, int], Mapping[str, Any]],
                   ltvs: Mapping[str, Sequence[Any]], ltv_records: Mapping[str, Sequence[Mapping[str, Any]]],
                   ref_cols: Mapping[int, str], ltv_col: str, n_seeds: int, ledger: Any) -> AccuracyTable:
    """:class:`AccuracyTable` of the references ``icl[task, k]`` and the LTVs' test records (the seeds that trained,
    each noted in ``ledger`` where ``ch00-table-accuracy``). Cells: :func:`~ltvlib.study.ltvs.estimate_cell`; the
    LTV's with ``(k of n seeds)`` where fewer trained, ``"did not train"``, or a note for a task without LTVs."""
    where = "ch00-table-accuracy"

    def trained_matrix(task: str) -> np.ndarray | None:
        recs = [r for v, r in zip(ltvs[task], ltv_records[task])
                if not math.isnan(ledger.value(v, r["accuracy"], where=where))]
        return correct_matrix(recs) if recs else None

    shots = list(ref_cols)
    correct: dict[str, dict[str, np.ndarray]] = {col: {} for col in [*ref_cols.values(), ltv_col]}
    for t in tasks:
        for k, col in ref_cols.items():
            correct[col][t] = correct_matrix([icl[t, k]])
        m = trained_matrix(t) if t in ltvs else None
        if m is not None:
            correct[ltv_col][t] = m
    with_ltv = [t for t in tasks if t in correct[ltv_col]]
    est: dict[tuple[str, str], Estimate] = {}
    rows: dict[str, dict[str, Any]] = {}
    for t in tasks:
        row: dict[str, Any] = {"n": icl[t, 0]["n"], "n (ICL)": icl[t, shots[-1]]["n"]}
        for col in ref_cols.values():
            est[col, t] = proportion_estimate(int(correct[col][t].sum()), correct[col][t].shape[1])
            row[col] = estimate_cell(est[col, t])
        if t in correct[ltv_col]:
            m = correct[ltv_col][t]
            est[ltv_col, t] = seed_interval(m)
            row[ltv_col] = estimate_cell(est[ltv_col, t]) + ("" if m.shape[0] == n_seeds else
                                                             f" ({m.shape[0]} of {n_seeds} seeds)")
        else:
            row[ltv_col] = NOT_LEARNED if t in ltvs else "not trained in this profile"
        rows[t] = row
    if with_ltv:  # the average row covers the tasks with a learned LTV; without one there is nothing to compare
        for col in correct:
            est[col, "average"] = task_mean({t: correct[col][t] for t in with_ltv})
        rows[f"average ({len(with_ltv)} tasks)"] = {n: sum(rows[t][n] for t in with_ltv) for n in ("n", "n (ICL)")} | {
            col: estimate_cell(est[col, "average"]) for col in correct}
    table = pd.DataFrame(rows).T[["n", "n (ICL)", *ref_cols.values(), ltv_col]]
    if (table["n"] == table["n (ICL)"]).all():
        table = table.drop(columns="n (ICL)")  # zero-shot, ICL and LTV on the same test queries
    return AccuracyTable(dict(ref_cols), ltv_col, correct, with_ltv, est, table)


def label_table(tasks: Sequence[str], icl: Mapping[tuple[str, int], Mapping[str, Any]],
                ltvs: Mapping[str, Sequence[Any]], ltv_records: Mapping[str, Sequence[Mapping[str, Any]]],
                ref_cols: Mapping[int, str], ltv_col: str, ledger: Any) -> pd.DataFrame | None:
    """Label-restricted accuracy (%, with its Wilson interval) per classification task (rows) and column; the LTV's
    pooled over the seeds that trained (noted where ``ch00-table-labels``). None without a classification task."""
    label_rows = {}
    for t in tasks:
        if icl[t, 0]["label_accuracy"] is None:
            continue
        n = icl[t, 0]["n"]
        row: dict[str, Any] = {"n": n}
        for k, col in ref_cols.items():
            row[col] = str(Proportion(round(icl[t, k]["label_accuracy"] * n), n)).split(" (")[0]
        if t in ltvs:
            kept = [r for v, r in zip(ltvs[t], ltv_records[t])
                    if not math.isnan(ledger.value(v, r["label_accuracy"], where="ch00-table-labels"))]
            row[ltv_col] = (str(Proportion(sum(round(r["label_accuracy"] * n) for r in kept),
                                           n * len(kept))).split(" (")[0] + f" ({len(kept)} seeds)"
                            if kept else NOT_LEARNED)
        label_rows[t] = row
    return pd.DataFrame(label_rows).T if label_rows else None


def plot_accuracy(acc: AccuracyTable, tasks: Sequence[str]) -> tuple[plt.Figure, Any]:
    """Bars per task and for the average: each reference column and the LTV with their intervals, and the paper's
    LTV average as a dashed marker. Returns the figure and its axes, without title or axis labels (the chapter sets
    them, then the layout)."""
    groups = [*tasks, "average"]
    cols = [*acc.ref_cols.values(), acc.ltv_col]
    fig, ax = plt.subplots(figsize=(8, 4.6))
    width = 0.8 / len(cols)
    x = np.arange(len(groups))
    for i, col in enumerate(cols):
        vals, lo, hi = [], [], []
        for grp in groups:
            e = acc.est.get((col, grp))
            vals.append(np.nan if e is None else 100 * e.value)
            lo.append(0 if e is None else 100 * (e.value - e.low))
            hi.append(0 if e is None else 100 * (e.high - e.value))
        ax.bar(x + (i - (len(cols) - 1) / 2) * width, vals, width, yerr=[lo, hi], capsize=2, label=col,
               color="C3" if col == acc.ltv_col else f"C{i}", error_kw={"lw": 0.8})
    ltv_x = x[-1] + (len(cols) - 1) / 2 * width
    ax.plot([ltv_x - 0.6 * width, ltv_x + 0.6 * width], [PAPER_LTV_AVERAGE, PAPER_LTV_AVERAGE], color="black",
            ls="--", lw=1.5, label="paper LTV average (Llama-3.1-8B, 7 tasks): 83.5 %")
    ax.set_xticks(x, groups, fontsize=9)
    ax.set_ylim(0, 100)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=3, fontsize=9, frameon=False)
    return fig, ax
