"""Chapter 02's tables, figures and verdict numbers, built from :func:`ltvlib.study.flexibility.setting_result`'s.

:class:`FlexView` holds one run's measurements (``results[task, setting name]``), the settings, the tasks each
column covers and the chapter's :class:`~ltvlib.study.ltv_report.LTVLedger`; its methods are the chapter's tables
(Table 2.1, 2.2, the cost), figures and the numbers each claim's rule rests on. Every LTV number passes through
the ledger, in the order the chapter shows it. The measuring module (:mod:`ltvlib.study.flexibility`) is
untouched: its source keys the cached measurements. The rules themselves live in the chapter (``study/`` does
not import the scorecard).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    keep_share,
    setting_result,
    task_mean_contrast,
)
from .ltv_report import DID_NOT_TRAIN

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
    """``"43.5 [36.8, 50.4]"`` (percent, or signed points for a difference); ``"did not train"`` for None."""
    if est is None:
        return DID_NOT_TRAIN
    sign = "+" if est.difference else ""
    return f"{100 * est.value:{sign}.1f} [{100 * est.low:{sign}.1f}, {100 * est.high:{sign}.1f}]"


def _known(est: Estimate | None) -> Estimate:
    """``est``, which the caller knows was measured (a method every setting evaluates)."""
    assert est is not None
    return est


def estimate_or(est: Estimate | None, missing: str = DID_NOT_TRAIN, **kw: Any) -> str:
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
        covers it (cached measurements)."""
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

    # -- set-up ---------------------------------------------------------------------------------------------
    def describe_setup(self, lm: LoadedModel, run_label: str, run: Any, flex: Any, n_test: int | None) -> str:
        """The set-up paragraph (Markdown): model, run label, tasks, sizes, seeds and the columns' coverage."""
        n_new = sum(len(self.col_tasks[s.name]) * len(self.seeds_of(s)) for s in self.settings[1:] + self.late)
        return (
            f"**Model** `{lm.name}` ({lm.n_layers} layers, middle layer {lm.middle_layer}). **Profile** "
            f"`{run_label}`, recipe `{run.recipe.recipe}`: {len(self.task_list)} tasks ({', '.join(self.task_list)}); "
            f"LTVs trained on {run.n_train} queries (validation {run.n_val}); every method tested on the first "
            f"{n_test if n_test is not None else 'all'} test queries of each task (fewer where a task has fewer), "
            f"the same queries zero-shot and {flex.icl_shots}-shot. Training seeds: {len(self.base_seeds)} for the "
            f"baseline column ({', '.join(map(str, self.base_seeds))}: the middle-layer vectors chapter 00 trains, "
            f"read back from the shared cache), {len(self.other_seeds)} for every other column "
            f"({', '.join(map(str, self.other_seeds))}); {n_new} LTVs besides the baseline's. "
            + ("Every column covers every task." if all(self.col_tasks[s.name] == self.task_list for s in self.columns)
               else "Columns on fewer tasks: " + "; ".join(f"`{s.name}` on {self.coverage(s.name)}"
                                                          for s in self.columns
                                                          if self.col_tasks[s.name] != self.task_list)
               + " (the plan above says why).")
            + (" (The smoke profile uses 2-shot prompts for the ICL setting.)" if flex.icl_shots != 8 else "")
        )

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

    # -- tables ---------------------------------------------------------------------------------------------
    def icl_name(self) -> str:
        """The name of the k-shot setting."""
        return next(s.name for s in self.settings if s.shots)

    def table1(self, icl_shots: int, model_name: str) -> tuple[str, pd.DataFrame]:
        """Table 2.1 (rows: each method's mean, ours and the paper's; the zero-shot-trained LTV on the k-shot prompt;
        the baseline LTV over each column's tasks; coverage, trained LTVs, queries, seeds; columns ``"<setting>:
        <sites>"``) and its caption (Markdown). Fills ``est_mean`` and ``base_same``."""
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
        rows["LTV tasks trained"] = [f"{len(self.est_mean[s.name, 'ltv'][1])} of {len(self.col_tasks[s.name])}"
                                     for s in columns]
        rows["test queries (the column's tasks)"] = [str(sum(self.results[t, s.name].n for t in self.col_tasks[s.name]))
                                                     for s in columns]
        rows["LTV seeds"] = [str(len(self.seeds_of(s))) for s in columns]
        table = pd.DataFrame(rows, index=[f"{s.name}: {s.label}" for s in columns]).T
        partial = self.partial()
        caption = (
            f"**Table 2.1.** Ours ({model_name}) against the paper's (Llama-3.1-8B, mean over its seven tasks; "
            "empty: the paper has no number for that column). Each of our means runs over the tasks its column "
            "covers (row \"tasks of the column\")"
            + (f"; {', '.join(partial)} cover fewer tasks than the baseline, so for them the row \"{same_row}\" "
               f"gives the like-for-like reference: the baseline LTV averaged over the same tasks. Their means are "
               f"not over the baseline's {len(self.task_list)} tasks, and the paper's numbers are seven-task means."
               if partial else ".")
        )
        return caption, table

    def partial(self) -> list[str]:
        """The columns that cover fewer tasks than the baseline."""
        return [s.name for s in self.columns if self.col_tasks[s.name] != self.task_list]

    def per_task_table(self, run_label: str) -> pd.DataFrame:
        """Table 2.2: rows ``(task, method)`` and ``(task, "test queries")``, columns the settings; cells
        :func:`short` of :func:`~ltvlib.study.flexibility.cell_estimate`, ``"did not train"``, or ``"not run in
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
                    cells.append(short(cell_estimate(x)) if x is not None else DID_NOT_TRAIN)
                per_task[t, label] = cells
            per_task[t, "test queries"] = [str(self.results[t, s.name].n) if (t, s.name) in self.results
                                           else not_run for s in self.columns]
        return pd.DataFrame(per_task, index=[s.name for s in self.columns]).T

    def cost_table(self) -> pd.DataFrame:
        """Per setting (columns): LTVs trained, vectors per LTV, whether the per-row tail was used, mean training
        steps and seconds per LTV, evaluation seconds; rounded to one decimal."""
        res, ct = self.results, self.col_tasks
        return pd.DataFrame({
            s.name: {
                "LTVs (tasks x seeds)": len(ct[s.name]) * len(self.seeds_of(s)),
                "vectors per LTV": s.n_sites,
                "per-row tail (prefix cache)": "yes" if all(v.config.prefix_cache for t in ct[s.name]
                                                            for v in res[t, s.name].ltvs) else "no",
                "training steps (mean)": np.mean([v.training.steps for t in ct[s.name] for v in res[t, s.name].ltvs]),
                "training seconds per LTV (mean)": np.mean([v.training.seconds for t in ct[s.name]
                                                            for v in res[t, s.name].ltvs]),
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

    def plot_tasks(self) -> tuple[plt.Figure, np.ndarray]:
        """One panel per task (in ``task_list`` order, row by row; spare panels switched off): each setting's LTV
        (red; a cross where it did not train), the strongest extracted vector there (blue) and no vector (grey) with
        intervals; the paper's LTV as black dashes. Returns the figure and its ``(rows, 2)`` axes, without titles or
        axis labels."""
        task_list, columns = self.task_list, self.columns
        ncols = min(2, len(task_list))
        nrows = int(np.ceil(len(task_list) / ncols))
        height = 2.3 * nrows + 2.2
        fig, axes = plt.subplots(nrows, ncols, figsize=(8, height), sharex=True, sharey=True, squeeze=False)
        for ax, t in zip(axes.flat, task_list):
            for s_i, s in enumerate(columns):
                if (t, s.name) not in self.results:
                    continue  # not run on this task in this run
                ltv_x = self.matrix(t, s.name, "ltv", "Figure 2.2")
                ex = {m: self.results[t, s.name].correct[m] for m in EXTRACTED_METHODS}
                best = max(ex, key=lambda m: ex[m].mean())
                for m, x, off, color in (("ltv", ltv_x, -0.15, "C3"), (best, ex[best], 0.0, "C0"),
                                         ("none", self.results[t, s.name].correct["none"], 0.15, "0.5")):
                    if x is None:
                        ax.plot(s_i + off, 0, marker="x", color=color, ms=5)
                        continue
                    e = cell_estimate(x)
                    ax.errorbar(s_i + off, 100 * e.value,
                                yerr=[[100 * (e.value - e.low)], [100 * (e.high - e.value)]],
                                fmt="o", color=color, ms=3.5, lw=1, capsize=2)
                if s.paper_column:
                    ax.plot([s_i - 0.3, s_i + 0.3], [PAPER_TABLE1["ltv"][s.paper_column]] * 2, color="k", ls="--",
                            lw=1)
            ax.set_ylim(-3, 103)
        for ax in axes.flat[len(task_list):]:
            ax.axis("off")
        for ax in axes[-1]:
            ax.set_xticks(range(len(columns)))
            ax.set_xticklabels([s.name for s in columns], rotation=45, ha="right", fontsize=9)
        handles = [plt.Line2D([], [], color=c, marker=mk, ls=ls, ms=5) for c, mk, ls in
                   (("C3", "o", ""), ("C0", "o", ""), ("0.5", "o", ""), ("C3", "x", ""), ("k", "", "--"))]
        fig.legend(handles, ["LTV", "best extracted vector", "no vector", "LTV did not train",
                             "paper's LTV (7-task mean)"], loc="lower center", ncol=3, fontsize=9, frameon=False)
        return fig, axes

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

    def summary_markdown(self, numbers: Mapping[str, dict[str, Any]], icl_shots: int) -> str:
        """The measured numbers per column in bullets (Markdown), with the paper's, and the k-shot prompt's."""
        est_mean, settings, icl_name = self.est_mean, self.settings, self.icl_name()
        lines = []
        base_est = est_mean["baseline", "ltv"][0]
        lines.append(f"- **baseline** ({settings[0].label}): LTV {estimate_or(base_est)}; "
                     + ", ".join(f"{METHODS[m]} {format_estimate(_known(est_mean['baseline', m][0]))}"
                                 for m in (*EXTRACTED_METHODS, "none"))
                     + ". Paper (seven tasks): LTV 83.49 %, Vanilla TV 37.80 %, FV 37.30 %.")
        for s in settings[1:] + self.late:
            x = numbers[s.name]
            paper = (f" Paper (seven tasks): LTV {PAPER_TABLE1['ltv'][s.paper_column]:.2f} %, Vanilla TV "
                     f"{PAPER_TABLE1['vanilla_tv'][s.paper_column]:.2f} %, FV "
                     f"{PAPER_TABLE1['function_vector'][s.paper_column]:.2f} %."
                     if s.paper_column else " Paper: no number (text only).")
            lines.append(
                f"- **{s.name}** ({s.label}; tasks: {self.coverage(s.name)}): LTV {estimate_or(x['ltv'])}"
                + (f" (the baseline LTV over the same tasks: {estimate_or(x['base_same'])})"
                   if x["tasks"] != self.task_list else "")
                + f"; strongest extracted vector {METHODS[x['best']]} {format_estimate(x['best_est'])}; LTV − "
                f"{METHODS[x['best']]} {estimate_or(x['diff'], 'n/a')}; LTV − {x['share']:.1f} × baseline LTV "
                f"{estimate_or(x['keep'], 'n/a')}.{paper}"
            )
        icl_zs = est_mean[icl_name, "ltv_zero_shot_trained"][0]
        lines.append(
            f"- **On the {icl_shots}-shot prompt** (tasks: {self.coverage(icl_name)}) the prompt alone reaches "
            f"{format_estimate(_known(est_mean[icl_name, 'none'][0]))}; the LTV trained on {icl_shots}-shot prompts "
            f"{estimate_or(est_mean[icl_name, 'ltv'][0])}, the zero-shot-trained LTV injected there "
            f"{estimate_or(icl_zs)}."
        )
        return "\n".join(lines)

    def paper_text(self, s: Setting) -> str:
        """What the paper reports for a setting (its Table 1 column, or its text)."""
        if not s.paper_column:
            return "in the text only: the LTV keeps working there, the extracted vectors do not (no number)"
        p = {m: PAPER_TABLE1[m][s.paper_column] for m in PAPER_TABLE1}
        baseline = self.settings[0].paper_column
        assert baseline is not None  # the baseline setting is Table 1's first column
        return (f"LTV {p['ltv']:.2f} %, Vanilla TV {p['vanilla_tv']:.2f} %, FV {p['function_vector']:.2f} %; the LTV "
                f"keeps {p['ltv'] / PAPER_TABLE1['ltv'][baseline]:.0%} of its baseline 83.49 % "
                f"(Table 1, {s.paper_column}; Llama-3.1-8B, seven tasks)")

    def ours_text(self, x: Mapping[str, Any]) -> str:
        """What we measured for a column (from :meth:`column_numbers`), for its claim."""
        ours = (f"LTV {estimate_or(x['ltv'])}, {METHODS[x['best']]} {format_estimate(x['best_est'])} "
                + (f"(mean over {len(x['tasks_diff'])} tasks: {', '.join(x['tasks_diff'])})" if x["tasks_diff"] else
                   f"(no task's LTV trained; the column's tasks: {', '.join(x['tasks'])})"))
        if x["tasks"] != self.task_list:
            ours += f"; the baseline LTV over the same tasks {estimate_or(x['base_same'])}"
        return ours

    def coverage_note(self, x: Mapping[str, Any], why_fewer: str | None, run_label: str) -> str:
        """The claim's note where its column covers fewer tasks than the baseline (and the paper); else ``""``."""
        if x["tasks"] == self.task_list:
            return ""
        return (f"Measured on {len(x['tasks'])} of the {len(self.task_list)} tasks ({', '.join(x['tasks'])}): "
                f"{why_fewer or f'not run in {run_label}'}. Its means and its comparison with the baseline run over "
                f"those tasks, while the paper's numbers are seven-task means; part (c) of the verdict says what "
                f"was not measured.")

    def verdict_table(self, claims: Sequence[Any], numbers: Mapping[str, dict[str, Any]]) -> pd.DataFrame:
        """One row per claim (index ``claim``): verdict, tasks, queries, seeds, the LTV, the strongest extracted
        vector, parts (a) and (b) and the rule's reason."""
        return pd.DataFrame([
            {"claim": c.key, "verdict": c.verdict.value, "tasks": len(numbers[c.key]["tasks"]),
             "queries (the column's tasks)": c.n, "LTV seeds": c.seeds,
             "LTV": short(numbers[c.key]["ltv"]), "strongest extracted": METHODS[numbers[c.key]["best"]],
             "(a) LTV − strongest extracted (pts)": short(numbers[c.key]["diff"]),
             "(b) LTV − share × baseline (pts)": f"{short(numbers[c.key]['keep'])} (share {numbers[c.key]['share']:.1f})",
             "rule": c.rule_result.reason}
            for c in claims
        ]).set_index("claim")

    def text_values(self, claim: Any, numbers: Mapping[str, dict[str, Any]], model_name: str) -> dict[str, Any]:
        """The values the interpretation texts of a column's claim are filled with."""
        x = numbers[claim.key]
        parts = "; ".join(f"{k}: {v['verdict']}" for k, v in claim.rule_result.inputs.get("parts", {}).items())
        return {
            "key": claim.key, "label": next((s.label for s in self.settings if s.name == claim.key), "late layers"),
            "n_tasks": len(x["tasks_diff"]), "ltv": estimate_or(x["ltv"]),
            "best_name": METHODS[x["best"]], "diff": format_estimate(x["diff"], bounds=True) if x["diff"] else "n/a",
            "keep": format_estimate(x["keep"], bounds=True) if x["keep"] else "n/a",
            "share": f"{x['share']:.0%}", "share_f": f"{x['share']:.1f}", "parts": parts or claim.rule_result.reason,
            "model": model_name, "seeds": claim.seeds, "reason": claim.rule_result.reason,
        }
