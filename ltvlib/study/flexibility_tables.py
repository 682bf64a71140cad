"""Chapter 02's tables, figures and verdict numbers, built from :func:`ltvlib.study.flexibility.setting_result`'s.

:class:`FlexView` holds one run's measurements (``results[task, setting name]``), the settings, the tasks each
column covers and the chapter's :class:`~ltvlib.study.ltv_report.LTVLedger`; its methods are the chapter's tables
(Table 2.1, 2.2, the cost), its figure and the numbers each claim's rule rests on. Every LTV number passes through
the ledger, in the order the chapter shows it. The measuring module (:mod:`ltvlib.study.flexibility`) is
untouched: its source keys the cached measurements. The rules themselves live in the chapter (``study/`` does
not import the scorecard).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats import Estimate, format_estimate
from .flexibility import (
    EXTRACTED_METHODS,
    PAPER_TABLE1,
    Setting,
    SettingResult,
    cell_estimate,
    check_setting,
    keep_share,
    setting_result,
    task_mean_contrast,
)
from .ltvs import trained_ltv_sets

NOT_LEARNED = "did not learn"
"""A cell for an LTV that did not learn (:func:`ltvlib.ltv.learned_rule`): it enters no mean or verdict."""

if TYPE_CHECKING:
    from ..models import LoadedModel

METHODS: dict[str, str] = {
    "ltv": "LTV",
    "vanilla_tv": "Vanilla TV (replace)",
    "vanilla_tv_difference": "Vanilla TV (difference)",
    "function_vector": "FV",
    "none": "no vector",
}
"""The methods of Table 1 and their display names, in the table's order."""

PAPER_LABEL: dict[str, str] = {"ltv": "LTV", "vanilla_tv": "Vanilla TV", "function_vector": "FV"}
"""The methods the paper's Table 1 has numbers for."""

LTV_METHODS: tuple[str, ...] = ("ltv", "ltv_zero_shot_trained")

STYLE: dict[str, dict[str, Any]] = {
    "ltv": {"color": "C3"},
    "vanilla_tv": {"color": "C0"},
    "vanilla_tv_difference": {"color": "C0", "alpha": 0.45, "hatch": "//"},
    "function_vector": {"color": "C2"},
    "none": {"color": "0.6"},
}
"""Bar style per method in the Table 1 figure."""

WHERE_T1, WHERE_T2, WHERE_V = "Table 2.1", "Table 2.2", "verdict table"


def short(est: Estimate | None) -> str:
    """``"43.5 [36.8, 50.4]"`` (percent, or signed points for a difference); ``"did not learn"`` for None."""
    if est is None:
        return NOT_LEARNED
    sign = "+" if est.difference else ""
    return f"{100 * est.value:{sign}.1f} [{100 * est.low:{sign}.1f}, {100 * est.high:{sign}.1f}]"


def _known(est: Estimate | None) -> Estimate:
    """``est``, which the caller knows was measured (a method every setting evaluates)."""
    assert est is not None
    return est


def estimate_or(est: Estimate | None, missing: str = NOT_LEARNED, **kw: Any) -> str:
    """:func:`ltvlib.stats.format_estimate` of ``est``, or ``missing`` for None."""
    return format_estimate(est, **kw) if est else missing


@dataclass
class FlexView:
    """One run of chapter 02: its settings (``settings`` = Table 1's columns, ``late`` = the late-layer ones), tasks,
    the tasks each column covers (a column covers every task when its tasks compare equal to ``task_list``: give both
    as tuples, as the plan does), the seeds, the ledger, and (after :meth:`measure`) the results.

    After :meth:`table1`: ``est_mean[(setting, method)]`` = ``(Estimate or None, tasks)`` and ``base_same[setting]``
    = the baseline LTV's mean over that column's tasks (same form)."""

    settings: list[Setting]
    late: list[Setting]
    task_list: Sequence[str]
    col_tasks: dict[str, Sequence[str]]
    base_seeds: Sequence[int]
    other_seeds: Sequence[int]
    ledger: Any
    results: dict[tuple[str, str], SettingResult] = field(default_factory=dict)
    est_mean: dict[tuple[str, str], tuple[Estimate | None, tuple[str, ...]]] = field(default_factory=dict)
    base_same: dict[str, tuple[Estimate | None, tuple[str, ...]]] = field(default_factory=dict)

    @property
    def columns(self) -> list[Setting]:
        """Table 1's settings and then the late-layer ones."""
        return self.settings + self.late

    def seeds_of(self, s: Setting) -> Sequence[int]:
        """The LTV training seeds of a setting: the baseline's (chapter 00's) or the other columns'."""
        return self.base_seeds if s.name == "baseline" else self.other_seeds

    def coverage(self, name: str) -> str:
        """``"all 7"`` or ``"<k>: <the column's tasks>"``."""
        ts = self.col_tasks[name]
        return f"all {len(ts)}" if ts == self.task_list else f"{len(ts)}: {', '.join(ts)}"

    def measure(self, lm: LoadedModel, run: Any, *, n_test: int | None, seed: int) -> None:
        """Fill ``results`` with :func:`~ltvlib.study.flexibility.setting_result` of every task in every column that
        covers it (cached measurements). Each column's LTVs are trained first, the column's tasks and seeds
        together (:func:`~ltvlib.study.ltvs.trained_ltv_sets`; a k-shot column also the zero-shot-trained ones
        for its sites), so that the measurements read them back."""
        for s in self.columns:
            tasks = [t for t in self.task_list if t in self.col_tasks[s.name]]
            if not tasks:
                continue
            layers = list(check_setting(lm, tasks[0], s, run).layers)
            for t in tasks[1:]:
                check_setting(lm, t, s, run)
            trained_ltv_sets(lm, tasks, run, self.seeds_of(s), layers=layers, positions=s.positions, shots=s.shots)
            if s.shots:
                trained_ltv_sets(lm, tasks, run, self.base_seeds, layers=layers, positions=s.positions)
        for task in self.task_list:
            for s in self.columns:
                if task not in self.col_tasks[s.name]:
                    continue
                self.results[task, s.name] = setting_result(lm, task, run, s, seeds=self.seeds_of(s),
                                                            zero_shot_seeds=self.base_seeds, n_test=n_test, seed=seed)

    def matrix(self, task: str, name: str, method: str, where: str) -> np.ndarray | None:
        """Per-query correctness ``(rows, queries)`` of one method (rows: seeds); for an LTV only the seeds that
        trained (None if none did), each noted in the ledger under ``where``; None where the column does not run
        on the task."""
        if (task, name) not in self.results:
            return None
        r = self.results[task, name]
        if method not in LTV_METHODS:
            return r.correct.get(method)
        ltvs = r.ltvs if method == "ltv" else r.zero_shot_ltvs
        keep = [i for i, v in enumerate(ltvs)
                if np.isfinite(self.ledger.value(v, r.correct[method][i].mean(), where=where))]
        return r.correct[method][keep] if keep else None

    def mean_estimate(self, name: str, method: str, where: str,
                      over: Sequence[str] | None = None) -> tuple[Estimate | None, tuple[str, ...]]:
        """The mean over the column's tasks (or those of ``over``) where ``method`` has a number, with its interval
        (:func:`~ltvlib.study.flexibility.task_mean_contrast`); and those tasks."""
        pool = self.col_tasks[name] if over is None else over
        per = {t: m for t in pool if (m := self.matrix(t, name, method, where)) is not None}
        return (task_mean_contrast(per) if per else None), tuple(per)

    def contrast(self, a: tuple[str, str], b: tuple[str, str], weight: float,
                 where: str) -> tuple[Estimate | None, tuple[str, ...]]:
        """Mean over tasks of ``a - weight * b`` (each a ``(setting name, method)`` pair), paired within each task,
        over the tasks where both have numbers; and those tasks."""
        ma = {t: self.matrix(t, *a, where) for t in self.task_list}
        mb = {t: self.matrix(t, *b, where) for t in self.task_list}
        common = [t for t in self.task_list if ma[t] is not None and mb[t] is not None]
        if not common:
            return None, ()
        # an LTV's rows are training seeds even when there is one: a 1-seed column minus the 3-seed baseline has 1
        rows = ("seeds" if a[1].startswith("ltv") else "auto", "seeds" if b[1].startswith("ltv") else "auto")
        return task_mean_contrast({t: ma[t] for t in common}, {t: mb[t] for t in common}, weight=weight,
                                  rows=rows), tuple(common)

    # -- tables ---------------------------------------------------------------------------------------------
    def settings_table(self) -> pd.DataFrame:
        """One row per setting (index ``setting``): its sites, layers, positions, vectors per LTV, shots, LTV seeds,
        tasks covered and the paper's column."""
        return pd.DataFrame([
            {"setting": s.name, "sites (P = positions, L = layers)": s.label, "layers": len(s.layers),
             "positions": len(s.positions), "vectors per LTV": s.n_sites, "shots": s.shots,
             "LTV seeds": len(self.seeds_of(s)), "tasks": self.coverage(s.name),
             "paper's column": s.paper_column or "(text only)"}
            for s in self.columns
        ]).set_index("setting")

    def icl_name(self) -> str:
        """The name of the k-shot setting."""
        return next(s.name for s in self.settings if s.shots)

    def table1(self, icl_shots: int) -> pd.DataFrame:
        """Table 2.1 (rows: each method's mean, ours and the paper's; the zero-shot-trained LTV on the k-shot prompt;
        the baseline LTV over each column's tasks; coverage, learned LTVs, queries, seeds; columns ``"<setting>:
        <sites>"``). Fills ``est_mean`` and ``base_same``."""
        columns, icl_name = self.columns, self.icl_name()
        rows = {}
        for m, label in METHODS.items():
            self.est_mean.update({(s.name, m): self.mean_estimate(s.name, m, WHERE_T1) for s in columns})
            rows[f"{label}: ours"] = [short(self.est_mean[s.name, m][0]) for s in columns]
            if m in PAPER_LABEL:
                rows[f"{label}: paper"] = [f"{PAPER_TABLE1[m][s.paper_column]:.2f}" if s.paper_column else ""
                                                for s in columns]
        self.est_mean[icl_name, "ltv_zero_shot_trained"] = self.mean_estimate(icl_name, "ltv_zero_shot_trained",
                                                                              WHERE_T1)
        zs_row = f"LTV trained zero-shot, on the {icl_shots}-shot prompt: ours"
        rows[zs_row] = [short(self.est_mean[icl_name, "ltv_zero_shot_trained"][0]) if s.name == icl_name else ""
                        for s in columns]
        # like with like: where a column covers fewer tasks, the baseline LTV's mean over the same tasks
        self.base_same = {s.name: self.mean_estimate("baseline", "ltv", WHERE_T1, over=self.col_tasks[s.name])
                          for s in columns}
        same_row = "LTV at the baseline sites, mean over this column's tasks: ours"
        rows[same_row] = [short(self.base_same[s.name][0]) if self.col_tasks[s.name] != self.task_list
                          else "(= baseline column)" for s in columns]
        rows["tasks of the column"] = [self.coverage(s.name) for s in columns]
        rows["LTV tasks learned"] = [f"{len(self.est_mean[s.name, 'ltv'][1])} of {len(self.col_tasks[s.name])}"
                                     for s in columns]
        rows["test queries (the column's tasks)"] = [str(sum(self.results[t, s.name].n for t in self.col_tasks[s.name]))
                                                     for s in columns]
        rows["LTV seeds"] = [str(len(self.seeds_of(s))) for s in columns]
        return pd.DataFrame(rows, index=[f"{s.name}: {s.label}" for s in columns]).T

    def partial(self) -> list[str]:
        """The columns that cover fewer tasks than the baseline."""
        return [s.name for s in self.columns if self.col_tasks[s.name] != self.task_list]

    def per_task_table(self, run_label: str) -> pd.DataFrame:
        """Table 2.2: rows ``(task, method)`` and ``(task, "test queries")``, columns the settings; cells
        :func:`short` of :func:`~ltvlib.study.flexibility.cell_estimate`, ``"did not learn"``, or ``"not run in
        `<run_label>`"``."""
        not_run = f"not run in `{run_label}`"
        per_task = {}
        for t in self.task_list:
            for m, label in METHODS.items():
                cells = []
                for s in self.columns:
                    if (t, s.name) not in self.results:
                        cells.append(not_run)
                        continue
                    x = self.matrix(t, s.name, m, WHERE_T2)
                    cells.append(short(cell_estimate(x)) if x is not None else NOT_LEARNED)
                per_task[t, label] = cells
            per_task[t, "test queries"] = [str(self.results[t, s.name].n) if (t, s.name) in self.results
                                           else not_run for s in self.columns]
        return pd.DataFrame(per_task, index=[s.name for s in self.columns]).T

    def cost_table(self) -> pd.DataFrame:
        """Per setting (columns): LTVs trained, vectors per LTV, whether the per-row tail was used, mean training
        steps per LTV, the wall time of the calls that trained the column's LTVs (a column's zero-shot LTVs are
        trained together; the baseline's are chapter 00's), evaluation seconds; rounded to one decimal."""
        res, ct = self.results, self.col_tasks
        return pd.DataFrame({
            s.name: {
                "LTVs (tasks x seeds)": len(ct[s.name]) * len(self.seeds_of(s)),
                "vectors per LTV": s.n_sites,
                "per-row tail (prefix cache)": "yes" if all(v.config.prefix_cache for t in ct[s.name]
                                                            for v in res[t, s.name].ltvs) else "no",
                "training steps (mean)": np.mean([v.training.steps for t in ct[s.name] for v in res[t, s.name].ltvs]),
                # the LTVs trained in one call record that call's wall time: count each call once
                "training seconds (the column's LTVs)": sum({v.training.seconds for t in ct[s.name]
                                                             for v in res[t, s.name].ltvs}),
                "evaluation seconds (the column's tasks)": sum(res[t, s.name].seconds["eval"] for t in ct[s.name]),
            }
            for s in self.columns
        }).round(1)

    # -- figures --------------------------------------------------------------------------------------------
    def plot_table1(self) -> tuple[plt.Figure, Any]:
        """Table 1 as bars: each method's mean per setting with intervals, the paper's numbers as black bars and the
        baseline LTV over the same tasks as hollow diamonds. Needs :meth:`table1` first. Returns the figure and its
        axes, without title or axis labels (the chapter sets them, then the layout)."""
        columns, partial = self.columns, self.partial()
        fig, ax = plt.subplots(figsize=(8, 4.6))
        width = 0.16
        xs = np.arange(len(columns))
        for k, m in enumerate(METHODS):
            vals: list[float] = []
            err: list[list[float]] = [[], []]
            for s in columns:
                e = self.est_mean[s.name, m][0]
                vals.append(100 * e.value if e else np.nan)
                err[0].append(100 * (e.value - e.low) if e else 0)
                err[1].append(100 * (e.high - e.value) if e else 0)
            pos = xs + (k - 2) * width
            ax.bar(pos, vals, width, yerr=err, capsize=2, label=METHODS[m], error_kw={"lw": 0.8}, **STYLE[m])
            if m in PAPER_LABEL:
                for x, s in zip(pos, columns):
                    if s.paper_column:
                        ax.plot([x - width / 2, x + width / 2], [PAPER_TABLE1[m][s.paper_column]] * 2, color="k",
                                lw=2, label="paper (Llama-3.1-8B, 7 tasks)" if (m == "ltv" and s is columns[0])
                                else None)
        for x, s in zip(xs, columns):
            e = self.base_same[s.name][0]
            if self.col_tasks[s.name] != self.task_list and e is not None:
                ax.plot(x - 2 * width, 100 * e.value, marker="D", mfc="none", mec="k", ms=6, ls="",
                        label="baseline LTV, same tasks" if s is next(c for c in columns if c.name in partial)
                        else None)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{s.name}\n({len(self.col_tasks[s.name])} "
                            f"task{'s' if len(self.col_tasks[s.name]) > 1 else ''})" for s in columns],
                           fontsize=9, rotation=20)
        ax.set_ylim(0, 100)
        fig.legend(loc="lower center", ncol=3, fontsize=9, frameon=False)
        return fig, ax

    # -- the numbers the verdicts rest on -------------------------------------------------------------------
    def best_extracted(self, name: str) -> str:
        """The extracted method with the highest mean over tasks in setting ``name``."""
        return max(EXTRACTED_METHODS, key=lambda m: _known(self.est_mean[name, m][0]).value)

    def column_numbers(self, s: Setting) -> dict[str, Any]:
        """A column's numbers: ``best`` (extracted method), ``share`` (what it must keep of the baseline: the paper's
        ratio, :func:`~ltvlib.study.flexibility.keep_share`, or 0.9 for a column the paper has no number for), ``diff`` (LTV − best, paired over
        ``tasks_diff``), ``keep`` (LTV − share × baseline LTV over ``tasks_keep``), ``ltv``, ``best_est``,
        ``base_same`` (Estimates or None) and ``tasks`` (the column's)."""
        best = self.best_extracted(s.name)
        share = keep_share(s.paper_column) if s.paper_column else 0.9
        d_a, tasks_a = self.contrast((s.name, "ltv"), (s.name, best), 1.0, WHERE_V)
        d_b, tasks_b = self.contrast((s.name, "ltv"), ("baseline", "ltv"), share, WHERE_V)
        return {"best": best, "share": share, "diff": d_a, "tasks_diff": tasks_a, "keep": d_b, "tasks_keep": tasks_b,
                "ltv": self.est_mean[s.name, "ltv"][0], "best_est": self.est_mean[s.name, best][0],
                "base_same": self.base_same[s.name][0], "tasks": self.col_tasks[s.name]}

    def late_numbers(self) -> dict[str, Any]:
        """The late layers pooled (each task's correctness averaged over the late settings, same queries), in the
        form of :meth:`column_numbers` with share 0.9."""
        task_list = self.task_list

        def pooled(method: str) -> dict[str, np.ndarray]:
            out = {}
            for t in task_list:
                mats = [self.matrix(t, s.name, method, WHERE_V) for s in self.late]
                arrays = [m for m in mats if m is not None]
                if len(arrays) < len(mats):
                    continue
                k = min(m.shape[0] for m in arrays)
                out[t] = np.mean([m[:k].astype(float) for m in arrays], axis=0)
            return out

        ltv = pooled("ltv")
        ex = {m: pooled(m) for m in EXTRACTED_METHODS}
        best = max(EXTRACTED_METHODS, key=lambda m: task_mean_contrast(ex[m]).value)
        base = {t: m for t in task_list if (m := self.matrix(t, "baseline", "ltv", WHERE_V)) is not None}
        common = [t for t in ltv if t in base]
        return {
            "best": best, "share": 0.9,
            "ltv": task_mean_contrast(ltv) if ltv else None,
            "best_est": task_mean_contrast(ex[best]),
            "diff": task_mean_contrast(ltv, {t: ex[best][t] for t in ltv}) if ltv else None,
            "tasks_diff": tuple(ltv),
            "keep": task_mean_contrast({t: ltv[t] for t in common}, {t: base[t] for t in common}, weight=0.9,
                                       rows=("seeds", "seeds")) if common else None,
            "tasks_keep": tuple(common),
            "base_same": task_mean_contrast({t: base[t] for t in common}) if common else None,
            "tasks": tuple(t for t in task_list if all(t in self.col_tasks[s.name] for s in self.late)),
        }

