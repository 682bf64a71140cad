"""Chapter 03's tables, differences and figures, from the race's runs (:func:`ltvlib.study.peft_compare.race`).

:class:`RaceView` holds the runs per task and method, the methods, each method's size in units of d and the LTV runs
that trained (gated through the chapter's :class:`~ltvlib.study.ltv_report.LTVLedger`, so an untrained LTV enters no
number); its methods are the chapter's tables and figures and the paired differences its claims rest on. The
measuring modules are untouched (their source keys the cached measurements).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..analysis.peft_compare import (
    correct_matrix,
    parameter_formula,
    parameter_units,
    race_curve,
    race_ltv,
    time_to_accuracy,
)
from ..stats import Estimate, format_estimate, paired_bootstrap_difference, seed_interval
from .ltv_report import DID_NOT_TRAIN

if TYPE_CHECKING:
    from ..models import LoadedModel

LTV = "ltv"
COLORS: dict[str, str] = {"ltv": "C3", "prompt_tuning": "C2", "prefix_tuning": "C0", "lora": "C1"}
"""Colour per method kind."""

TIME_AXES: tuple[tuple[str, str], ...] = (("samples", "training samples seen"),
                                          ("wall_seconds", "wall-clock seconds (training and validation)"))
"""The time-to-accuracy figure's two panels per task: the curve's x key and its axis label."""


def parameters_table(lm: LoadedModel, methods: Sequence[Any]) -> pd.DataFrame:
    """Per method (index): its setting, trainable parameters, in units of d and the formula (the learning rate each
    run used is in :meth:`RaceView.race_table`: it is chosen on validation)."""
    rows = []
    for m in methods:
        n, formula = parameter_formula(lm, m)
        rows.append({"method": m.name, "setting": "paper's budget" if m.budget == "equal" else "common default",
                     "trainable parameters": f"{n:,}", "in units of d": parameter_units(lm, m), "formula": formula})
    return pd.DataFrame(rows).set_index("method")


@dataclass
class RaceView:
    """The race's runs: ``results[task][method]`` (one run per seed), ``methods``, ``units`` (method -> its size in
    units of d), and, after :meth:`gate`, ``ltv_runs[task]`` (the LTV runs that trained)."""

    results: Mapping[str, Mapping[str, list[dict[str, Any]]]]
    methods: Sequence[Any]
    units: dict[str, str]
    task_list: list[str]
    ltv_runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def gate(self, ledger: Any, mid: int, recipe_label: str) -> None:
        """Keep per task the LTV runs whose vector trained (each noted in ``ledger``, where ``ch03-table-race``)."""
        for task in self.task_list:
            self.ltv_runs[task] = [
                r for r in self.results[task][LTV]
                if not math.isnan(ledger.value(race_ltv(r, task, mid, recipe_label), r["test_accuracy"],
                                               where="ch03-table-race"))]

    def runs_of(self, task: str, name: str) -> list[dict[str, Any]]:
        """The runs that count: every seed of an adapter, the trained seeds of the LTV."""
        return self.ltv_runs[task] if name == LTV else self.results[task][name]

    def accuracy(self, task: str, name: str) -> Estimate | None:
        """Test accuracy over the counted runs (seed-and-query bootstrap); None without one."""
        runs = self.runs_of(task, name)
        return seed_interval(correct_matrix(runs)) if runs else None

    def race_table(self, task: str, ledger: Any, mid: int, recipe_label: str, target: float) -> pd.DataFrame:
        """Per method (rows): measured parameters, the learning rate chosen on validation (and its multiple of the
        method's default), test accuracy with its seed-and-query interval and per seed (the LTV's gated through
        ``ledger``, where ``ch03-table-race``), runs that learned and that converged (stopped before the sample
        cap), samples to the best validation score, samples and seconds to ``target`` validation accuracy (means
        over the runs that reached it, and how many did) and, where measured, peak training memory."""
        out = {}
        for m in self.methods:
            runs = self.results[task][m.name]
            r0 = runs[0]
            per_seed = []
            for r in runs:
                text = f"{100 * r['test_accuracy']:.1f}"
                per_seed.append(ledger.cell(race_ltv(r, task, mid, recipe_label), text, where="ch03-table-race")
                                if m.name == LTV else text)
            est = self.accuracy(task, m.name)
            reached = [t for t in (time_to_accuracy(r["curve"], target) for r in runs) if t is not None]
            row = {
                "params": f"{r0['trainable_params']:,} ({r0['params_in_d']})",
                "learning rate": f"{r0['lr']:.3g} (x{r0.get('lr_scale', 1.0):.2f})",
                "test accuracy %": estimate_text(est) if est else DID_NOT_TRAIN,
                "per seed %": " / ".join(per_seed),
                "learned": f"{sum(bool(r['trained']) for r in runs)}/{len(runs)}",
                "converged": f"{sum(bool(r['stopped_by_rule']) for r in runs)}/{len(runs)}",
                "samples to best": f"{np.mean([r['samples_to_best'] for r in runs]):.0f}",
                f"samples to {100 * target:.0f} %": (f"{np.mean([t['samples'] for t in reached]):.0f} "
                                                     f"({len(reached)}/{len(runs)})" if reached else "not reached"),
                f"seconds to {100 * target:.0f} %": (f"{np.mean([t['wall_seconds'] for t in reached]):.1f}"
                                                     if reached else "not reached"),
            }
            peaks = [float(r["peak_train_mb"]) for r in runs if r.get("peak_train_mb") is not None]
            row["peak training memory (MB)"] = f"{max(peaks):.0f}" if peaks else "not measured"
            out[m.name] = row
        return pd.DataFrame(out).T

    def differences(self) -> dict[tuple[str, str], Estimate]:
        """``(task, method) -> LTV − method``, paired bootstrap over the same test queries (trained LTV seeds
        against every seed of the method); tasks without a trained LTV are left out."""
        diffs = {}
        for task in self.task_list:
            if not self.ltv_runs[task]:
                continue
            ltv_mat = correct_matrix(self.ltv_runs[task])
            for m in self.methods:
                if m.name != LTV:
                    diffs[task, m.name] = paired_bootstrap_difference(ltv_mat, correct_matrix(self.results[task][m.name]))
        return diffs

    def differences_table(self, diffs: Mapping[tuple[str, str], Estimate]) -> pd.DataFrame:
        """Per (task, method) (index): the method's setting and size and LTV − method with its interval."""
        return pd.DataFrame(
            [{"task": t, "method": n, "setting": next(m.budget for m in self.methods if m.name == n),
              "params": self.units[n], "LTV − method": format_estimate(e, bounds=True)} for (t, n), e in diffs.items()]
        ).set_index(["task", "method"])

    def plot_test(self, paper_acc: Mapping[str, float]) -> tuple[plt.Figure, np.ndarray]:
        """Per task (one panel each): every method's test accuracy with its interval (paper budgets filled, defaults
        hollow; a method that did not train is written out), and the paper's SST-2 numbers as crosses. Returns the
        figure and its axes, without titles or axis labels (the chapter sets them, then the layout)."""
        methods, task_list = self.methods, self.task_list
        fig, axes = plt.subplots(len(task_list), 1, figsize=(7.5, 0.45 * len(methods) * len(task_list) + 1.4),
                                 squeeze=False)
        for ax, task in zip(axes[:, 0], task_list):
            for i, m in enumerate(methods):
                est = self.accuracy(task, m.name)
                if est is None:
                    ax.text(1, i, DID_NOT_TRAIN, va="center", fontsize=9)
                else:
                    ax.errorbar(100 * est.value, i, xerr=[[100 * (est.value - est.low)], [100 * (est.high - est.value)]],
                                fmt="o" if m.budget == "equal" else "s", color=COLORS[m.kind], capsize=3,
                                mfc=COLORS[m.kind] if m.budget == "equal" else "white")
                if task == "sst2" and m.name in paper_acc:
                    ax.plot(paper_acc[m.name], i, "kx", ms=8,
                            label="paper (Llama-3.1-8B), SST-2 test accuracy" if m.name == "ltv" else None)
            ax.set_yticks(range(len(methods)), [f"{m.name} ({self.units[m.name]})" for m in methods], fontsize=9)
            ax.invert_yaxis()
            ax.set_xlim(0, 100)
            if task == "sst2":
                ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.28), frameon=False)
        return fig, axes[:, 0]

    def plot_time_to_accuracy(self, n_val: int,
                              paper_lines: Mapping[str, tuple[float, str]]) -> tuple[plt.Figure, np.ndarray]:
        """Per task two panels (:data:`TIME_AXES`): validation accuracy against samples seen and against wall time,
        per method (solid: paper budgets, dashed: defaults) with Wilson bands; the paper's SST-2 numbers dotted.
        Returns the figure and its axes ``(tasks, 2)``, without titles or axis labels."""
        task_list = self.task_list
        fig, axes = plt.subplots(2 * len(task_list), 1, figsize=(7.5, 3.4 * 2 * len(task_list) + 1.0), squeeze=False)
        for k, task in enumerate(task_list):
            for row, (xkey, _) in enumerate(TIME_AXES):
                ax = axes[2 * k + row, 0]
                for m in self.methods:
                    runs = self.runs_of(task, m.name)
                    if not runs:
                        continue
                    c = race_curve(runs, n_val)
                    x = [p[xkey] for p in c]
                    ls = "-" if m.budget == "equal" else "--"
                    ax.plot(x, [100 * p["val_accuracy"] for p in c], ls=ls, color=COLORS[m.kind], marker="o", ms=3,
                            lw=1.3, label=f"{m.name} ({self.units[m.name]})")
                    ax.fill_between(x, [100 * p["low"] for p in c], [100 * p["high"] for p in c],
                                    color=COLORS[m.kind], alpha=0.08)
                if task == "sst2":
                    for name, (acc, color) in paper_lines.items():
                        ax.axhline(acc, color=color, ls=":", lw=1.2, label=f"paper (Llama-3.1-8B) {name}: {acc} % test")
                ax.set_ylim(0, 100)
        handles, labels = axes[0, 0].get_legend_handles_labels()
        axes[-1, 0].legend(handles, labels, fontsize=9, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.25),
                           frameon=False, title="method (trainable parameters)", title_fontsize=9)
        return fig, axes[:, 0].reshape(len(task_list), 2)


def diff_text(diffs: Mapping[tuple[str, str], Estimate], task_list: Sequence[str], names: Sequence[str]) -> str:
    """``"<task> LTV − <method> <estimate with bounds>"`` joined by ``"; "`` over the measured pairs, or ``"no LTV
    seed trained"``."""
    return "; ".join(f"{t} LTV − {n} {format_estimate(diffs[t, n], bounds=True)}"
                     for t in task_list for n in names if (t, n) in diffs) or "no LTV seed trained"


def estimate_text(est: Estimate) -> str:
    """``"72.5 [66.0, 78.3]"`` (percent, or signed points for a difference), n and seeds left to the table's
    header."""
    sign = "+" if est.difference else ""
    return f"{100 * est.value:{sign}.1f} [{100 * est.low:{sign}.1f}, {100 * est.high:{sign}.1f}]"


def lr_table(grids: Mapping[str, Mapping[float, float]], chosen: Mapping[str, float]) -> pd.DataFrame:
    """Per method (rows): the first seed's best validation score (percent, one decimal) at each multiple of its
    default learning rate (columns ``x0.33``, ``x1``, ...), the chosen multiple marked with an asterisk."""
    rows = {}
    for name, scores in grids.items():
        rows[name] = {f"x{s:.2g}": f"{100 * v:.1f}{' *' if s == chosen[name] else ''}" for s, v in scores.items()}
    return pd.DataFrame(rows).T


def time_ratio(a_runs: Sequence[dict[str, Any]], b_runs: Sequence[dict[str, Any]], target: float, *,
               n_resamples: int = 2000, seed: int = 0) -> Estimate | None:
    """Wall-clock seconds to ``target`` validation accuracy of method ``a`` over method ``b``, paired by training
    seed: the geometric mean of the per-seed ratios, with a percentile bootstrap over the seed pairs (``n`` = pairs).
    None when no seed of both reached the target."""
    by_seed = {r["seed"]: time_to_accuracy(r["curve"], target) for r in b_runs}
    logs = []
    for r in a_runs:
        ta, tb = time_to_accuracy(r["curve"], target), by_seed.get(r["seed"])
        if ta is not None and tb is not None and ta["wall_seconds"] > 0 and tb["wall_seconds"] > 0:
            logs.append(math.log(ta["wall_seconds"] / tb["wall_seconds"]))
    if not logs:
        return None
    arr = np.array(logs)
    draws = arr[np.random.default_rng(seed).integers(0, len(arr), size=(n_resamples, len(arr)))].mean(1)
    lo, hi = np.quantile(draws, [0.025, 0.975])
    value = math.exp(arr.mean())
    return Estimate(value, min(math.exp(lo), value), max(math.exp(hi), value), n=len(arr), seeds=len(arr),
                    method="bootstrap over seeds of log time ratios", resamples=n_resamples)
