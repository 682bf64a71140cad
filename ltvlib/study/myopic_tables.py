"""Chapter 07's tables, figures and comparisons, built from :func:`ltvlib.study.myopic.myopic_behaviour`'s result.

Everything here is a pure function of the measurement dict (``table``: ``{"n_test", "rows", "records", ...}``),
the two direction LTVs and the chapter's :class:`~ltvlib.study.ltv_report.LTVLedger` (every LTV number shown
goes through it, so the order in which a builder notes the vectors is part of its contract). The measuring
module (:mod:`ltvlib.study.myopic`) stays untouched: its source keys the cached measurements.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats import Estimate, format_estimate
from .myopic import (
    DIRECTIONS,
    STEERING_METRICS,
    method_label,
    steering_difference,
    steering_range,
)
from .tables import direction_name, ledger_cell, percent_interval

RESULT_COLUMNS: dict[str, str] = {
    "text_p_myopic": "P(myopic), option text",
    "text_myopic_choice": "myopic option preferred (text)",
    "letter_debiased_p_myopic": "P(myopic), debiased letters",
    "letter_says_a": "says A (letter bias)",
    "generation_myopic": "greedy answer = myopic option",
    "generation_non_myopic": "greedy answer = other option",
    "generation_neither": "greedy answer = neither",
}
"""The held-out results table's columns: metric -> column name."""

METRIC_NAMES: dict[str, str] = {"text_p_myopic": "option text", "letter_debiased_p_myopic": "debiased letters",
                                "generation_myopic": "judged greedy answers"}
"""The steering metrics' display names."""

TEXT_METRIC, LETTER_METRIC = "text_p_myopic", "letter_debiased_p_myopic"
STEERING_PANELS: tuple[str, str] = (TEXT_METRIC, LETTER_METRIC)
"""The metrics of the steering figure's two panels, top to bottom."""
GENERATION_VARIANTS = {"none": "no vector", "myopic": "LTV toward myopic", "non_myopic": "LTV toward non-myopic"}


def judged_items(sizes: Any, test: Sequence[Any]) -> int:
    """How many held-out questions get judged greedy answers (``sizes.judge_items``, or all of ``test``)."""
    return sizes.judge_items or len(test)


def results_table(table: Mapping[str, Any], ledger: Any, ltvs: Mapping[str, Any]) -> pd.DataFrame:
    """Every (method, direction) row of ``table["rows"]``: index ``(method, toward)``, one column per
    :data:`RESULT_COLUMNS` entry as ``"value [low, high]"`` in % (``"not judged"`` where the metric was not
    measured); the LTV's cells go through ``ledger`` (where ``ch07-table-results``)."""
    rows = []
    for r in table["rows"]:
        row = {"method": r["label"], "toward": direction_name(r["direction"])}
        for metric, name in RESULT_COLUMNS.items():
            text = percent_interval(r["metrics"][metric]) if metric in r["metrics"] else "not judged"
            if r["method"] == "ltv" and metric in r["metrics"]:
                text = ledger.cell(ltvs[r["direction"]], text, where="ch07-table-results")
            row[name] = text
        rows.append(row)
    return pd.DataFrame(rows).set_index(["method", "toward"])


def method_pair(records: Mapping[tuple, Sequence[dict[str, Any]]], method: str) -> tuple[Sequence, Sequence]:
    """The records of ``method`` toward the myopic and the non-myopic answer (zero-shot is its own pair)."""
    if method == "zero_shot":
        return records[("zero_shot", None)], records[("zero_shot", None)]
    return records[(method, "myopic")], records[(method, "non_myopic")]


def steering_ranges(table: Mapping[str, Any]) -> tuple[list[str], dict[tuple[str, str], Estimate]]:
    """The methods with a direction (every method of ``table["rows"]`` but zero-shot, in order) and their steering
    range (:func:`ltvlib.study.myopic.steering_range`) per ``(method, metric)`` for each metric of
    :data:`~ltvlib.study.myopic.STEERING_METRICS` the method measured."""
    records = table["records"]
    methods = [m for m in dict.fromkeys(r["method"] for r in table["rows"]) if m != "zero_shot"]

    def measured(m: str, metric: str) -> bool:
        return all(metric in r["summary"] for r in method_pair(records, m)[0])

    ranges = {(m, metric): steering_range(*method_pair(records, m), metric) for m in methods
              for metric in STEERING_METRICS if measured(m, metric)}
    return methods, ranges


def steering_table(methods: Sequence[str], ranges: Mapping[tuple[str, str], Estimate], ledger: Any,
                   ltvs: Mapping[str, Any]) -> pd.DataFrame:
    """One row per method (index ``method``, its label), one column ``"steering range, <metric name>"`` per
    :data:`METRIC_NAMES` entry (:func:`ltvlib.study.tables.points`, or ``"not judged"``); the LTV's cells gated
    by both direction LTVs (where ``ch07-steering``)."""
    rows = []
    for m in methods:
        row = {"method": method_label(m)}
        for metric, name in METRIC_NAMES.items():
            est = ranges.get((m, metric))
            text = "not judged" if est is None else format_estimate(est, bounds=True)
            if m == "ltv" and est is not None:
                text = ledger_cell(ledger, (ltvs["non_myopic"], ltvs["myopic"]), text, where="ch07-steering")
            row[f"steering range, {name}"] = text
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")


def letter_bias_table(table: Mapping[str, Any], ledger: Any, ltvs: Mapping[str, Any]) -> pd.DataFrame:
    """Per (method, toward) row: the share of ``A`` answers, P(myopic) from the letters as given and over both
    orders, and P(first-listed option) from the text (``"–"`` where not measured), as ``"value [low, high]"`` in
    %; the LTV's cells gated through ``ledger`` (where ``ch07-letter-bias``)."""
    rows = []
    for r in table["rows"]:
        mt = r["metrics"]
        row = {"method": r["label"], "toward": direction_name(r["direction"]),
               "says A": percent_interval(mt["letter_says_a"]),
               "P(myopic), letters as given": percent_interval(mt["letter_p_myopic"]),
               "P(myopic), letters both orders": percent_interval(mt["letter_debiased_p_myopic"]),
               "P(first-listed option), text": percent_interval(mt["text_first_listed"])
               if "text_first_listed" in mt else "–"}
        if r["method"] == "ltv":
            row = {k: (ledger.cell(ltvs[r["direction"]], v, where="ch07-letter-bias")
                       if k not in ("method", "toward") else v) for k, v in row.items()}
        rows.append(row)
    return pd.DataFrame(rows).set_index(["method", "toward"])


def training_curves(ltvs: Mapping[str, Any]) -> pd.DataFrame:
    """Validation accuracy (%, one decimal) per direction (rows ``"toward <direction>"``) and epoch (columns)."""
    curves = pd.DataFrame({f"toward {direction_name(d)}": pd.Series(
        {c["epoch"]: 100 * c["val_accuracy"] for c in ltvs[d].training.curve if "epoch" in c}) for d in DIRECTIONS})
    curves.index.name = "epoch"
    return curves.round(1).T


def training_summary(ltvs: Mapping[str, Any]) -> pd.DataFrame:
    """Per direction (columns ``"toward <direction>"``): steps, steps to the best epoch, whether it trained, the
    start and best validation scores (%), the mean loss of the first and last 8 steps, the vector's norm."""
    def losses(v: Any) -> list[float]:
        return [c["loss"] for c in v.training.curve if "loss" in c]

    return pd.DataFrame({f"toward {direction_name(d)}": {
        "steps": ltvs[d].training.steps, "steps to the best epoch": ltvs[d].training.steps_to_best,
        "trained": ltvs[d].training.trained,
        "validation score at the start (%)": 100 * ltvs[d].training.start_val_score,
        "best validation score (%)": 100 * ltvs[d].training.best_val_score,
        "mean training loss, first 8 steps": float(np.mean(losses(ltvs[d])[:8])),
        "mean training loss, last 8 steps": float(np.mean(losses(ltvs[d])[-8:])),
        "norm": float(ltvs[d].vectors.norm()),
    } for d in DIRECTIONS})


def plot_steering(methods: Sequence[str], ranges: Mapping[tuple[str, str], Estimate],
                  ltv_ok: bool) -> tuple[plt.Figure, np.ndarray]:
    """Two bar panels (:data:`STEERING_PANELS`: option text, debiased letters): each method's steering range in
    points with its interval, the random vectors' interval as a grey band; an LTV that did not train is not drawn.
    Returns the figure and its two axes, without titles or axis labels (the chapter sets them, then the layout)."""
    fig, axes = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    labels = [method_label(m) for m in methods]
    x = np.arange(len(methods))
    for ax, metric in zip(axes, STEERING_PANELS):
        vals, lo, hi, colors = [], [], [], []
        for m in methods:
            est = ranges.get((m, metric))
            v = float("nan") if est is None else 100 * est.value
            if m == "ltv" and not ltv_ok:
                v = float("nan")  # an LTV that did not train is not drawn
            vals.append(v)
            lo.append(0 if est is None else v - 100 * est.low)
            hi.append(0 if est is None else 100 * est.high - v)
            colors.append("C3" if m == "ltv" else "C7" if m == "random" else "C0")
        ax.bar(x, vals, 0.6, yerr=[lo, hi], color=colors, capsize=3)
        if not ltv_ok:
            ax.text(methods.index("ltv"), 0, "did not train", ha="center", va="bottom", rotation=90)
        rnd = ranges.get(("random", metric))
        if rnd is not None:
            ax.axhspan(100 * rnd.low, 100 * rnd.high, color="grey", alpha=0.2, label="random vectors, 95 % interval")
        ax.axhline(0, color="black", lw=0.8)
        ax.legend(loc="upper left")
    axes[1].set_xticks(x, labels, rotation=25, ha="right")
    return fig, axes


def plot_letter_bias(table: Mapping[str, Any], methods: Sequence[str], ltv_ok: bool) -> tuple[plt.Figure, Any]:
    """Share of ``A`` answers (%) per method (zero-shot first) and direction, with intervals and the 50 % line;
    an LTV that did not train is not drawn. Returns the figure and its axes, without title or axis labels."""
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    all_methods = ["zero_shot", *methods]
    for j, (d, color) in enumerate(zip(DIRECTIONS, ("C3", "C0"))):
        vals: list[float] = []
        err: list[list[float]] = [[], []]
        for m in all_methods:
            row = next(r for r in table["rows"] if r["method"] == m and (r["direction"] in (d, None)))
            e = row["metrics"]["letter_says_a"]
            v = 100 * e["value"] if (m != "ltv" or ltv_ok) else float("nan")
            vals.append(v)
            err[0].append(v - 100 * e["low"])
            err[1].append(100 * e["high"] - v)
        ax.bar(np.arange(len(all_methods)) + (j - 0.5) * 0.38, vals, 0.38, yerr=err, color=color, capsize=2,
               label=f"toward {direction_name(d)}")
    ax.axhline(50, color="black", lw=0.8, ls="--", label="no letter preference (50 %)")
    ax.set_xticks(np.arange(len(all_methods)), [method_label(m) for m in all_methods], rotation=25, ha="right")
    ax.set_ylim(0, 100)
    fig.legend(loc="outside lower center", ncol=3)
    return fig, ax


def generations_text(gens: Sequence[Mapping[str, Any]], ledger: Any, ltvs: Mapping[str, Any]) -> str:
    """The free generations as printed text: per prompt kind (A/B, open) a heading, then per question the
    wrapped question, its myopic letter and the continuation without a vector and with each direction's LTV
    (gated through ``ledger``, where ``ch07-generations``). Ends with a blank line."""
    out = []
    for kind, head in (("A/B", "A/B prompt: the continuation after 'A: ('"),
                       ("open", "open prompt: 'Q: {question without its choices}\\nA:'")):
        out.append(f"=== {head} ===\n\n")
        for g in (g for g in gens if g["kind"] == kind):
            out.append(f"{textwrap.fill(g['question'], 110)} \n(myopic answer: {g['myopic_letter']})\n")
            for k, name in GENERATION_VARIANTS.items():
                text = repr(g[k].strip())
                if k != "none":
                    text = ledger.cell(ltvs[k], text, where="ch07-generations")
                out.append(f"  {name:>22}: {text}\n")
            out.append("\n")
    return "".join(out)


@dataclass(frozen=True)
class SteeringComparison:
    """The LTV's option-text steering range against the best extracted vector, the best ICL and the random control.

    ``diff`` keys: ``ex_text``, ``ex_letter`` (LTV − best extracted, option text / debiased letters),
    ``random_text`` (LTV − random vectors, None without the control), ``icl_text`` (LTV − best ICL)."""

    best_ex: str
    best_icl: str
    ltv_range: Estimate
    diff: dict[str, Estimate | None]


def compare_steering(table: Mapping[str, Any], methods: Sequence[str],
                     ranges: Mapping[tuple[str, str], Estimate]) -> SteeringComparison:
    """The best extracted vector and best ICL (largest option-text steering range) and the LTV's paired steering
    differences against them and the random control (:func:`ltvlib.study.myopic.steering_difference`)."""
    records = table["records"]
    extracted = [m for m in ("vanilla_tv", "vanilla_tv_difference", "function_vector") if m in methods]
    icl_methods = [m for m in methods if m.startswith("icl")]
    best_ex = max(extracted, key=lambda m: ranges[(m, TEXT_METRIC)].value)
    best_icl = max(icl_methods, key=lambda m: ranges[(m, TEXT_METRIC)].value)
    ltv = method_pair(records, "ltv")
    diff = {
        "ex_text": steering_difference(ltv, method_pair(records, best_ex), TEXT_METRIC),
        "ex_letter": steering_difference(ltv, method_pair(records, best_ex), LETTER_METRIC),
        "random_text": steering_difference(ltv, method_pair(records, "random"), TEXT_METRIC)
        if "random" in methods else None,
        "icl_text": steering_difference(ltv, method_pair(records, best_icl), TEXT_METRIC),
    }
    return SteeringComparison(best_ex, best_icl, ranges[("ltv", TEXT_METRIC)], diff)


def cost_table(records: Mapping[tuple, Sequence[Mapping[str, Any]]]) -> pd.DataFrame:
    """What each measurement cost: per (method, direction) row, the seconds of its first run summed over
    replicates and its layer (``info["layer"]``), rounded to one decimal."""
    return pd.DataFrame({
        f"{method_label(m)}" + ("" if d is None else f", toward {direction_name(d)}"):
            {"seconds (first run, incl. training/extraction)": sum(r["seconds"] for r in recs),
             "layer": recs[0]["info"].get("layer")}
        for (m, d), recs in records.items()
    }).T.round(1)
