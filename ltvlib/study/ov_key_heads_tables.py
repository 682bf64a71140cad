"""Chapter 04's tables, pooled statistics and figures, from :mod:`ltvlib.study.ov` and :mod:`ltvlib.study.key_heads`.

Pure functions of the cached measurement dicts: ``ov[task]`` (:func:`~ltvlib.study.ov.ov_experiment`), ``ovc[task]``
(:func:`~ltvlib.study.ov.ov_control_experiment`), ``kh[task]`` (:func:`~ltvlib.study.key_heads.key_head_experiment`),
the LTVs and the chapter's :class:`~ltvlib.study.ltv_report.LTVLedger` (every LTV number passes through it, in the
order the chapter shows it). The statistics the verdicts rest on (pooled paired differences, the share of the LTV's
gain the OV reconstruction keeps, the U-shape shares, the attention differences) are here and tested; the rules stay
in the chapter. The measuring modules are untouched (their source keys the cached measurements).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats import Estimate, paired_bootstrap_difference, wilson_interval

if TYPE_CHECKING:
    from ..models import LoadedModel

OV_COLUMNS: dict[str, str] = {"zero_shot": "zero-shot", "ltv": "LTV θ", "ov_raw": "θ_OV (paper)",
                              "mlp": "MLP control", "ov": "θ_OV scaled (ours)",
                              "ov_weighted": "θ_OV attention-weighted (ours)", "ov_normed": "θ_OV at |θ| (ours)"}
"""The OV table's columns: the record key -> column name."""

OV_PANELS: tuple[tuple[str, str], ...] = (("accuracy", "whole vocabulary"), ("label_accuracy", "label words only"))
"""The OV figure's panels, top to bottom: the accuracy record and its name."""

OV_BARS: list[tuple[str, str, str]] = [
    ("zero_shot", "zero-shot", "0.6"), ("ltv", "LTV θ", "C3"), ("ov_raw", "θ_OV (paper form)", "C0"),
    ("random", "random θ_OV (mean)", "C7"), ("mlp", "MLP control", "C2")]


def describe_setup(lm: LoadedModel, run_label: str, run: Any, n_queries: int, label_list: Sequence[str],
                   open_list: Sequence[str], fraction: float, n_random: int, n_draws: int) -> str:
    """The set-up paragraph (Markdown): model geometry, run label, tasks, sizes and the controls' draws."""
    L, H = lm.n_layers, lm.geometry.n_heads
    return (
        f"**Model** `{lm.name}` ({L} layers, {H} query heads of {lm.geometry.head_dim} per layer, "
        f"{lm.geometry.n_kv_heads} KV heads). **Profile** `{run_label}`, recipe `{run.recipe.recipe}`. Label-space "
        f"tasks (deciding): {', '.join(label_list)}; open-vocabulary (beside): {', '.join(open_list)}; every LTV at "
        f"the middle layer {lm.middle_layer}. Analysis queries: the first {n_queries} of each validation split; "
        f"accuracies on up to {run.n_test} test queries per task. Key heads: the top {fraction:.0%} = "
        f"{max(1, round(fraction * L * H))} of {L * H} heads, {n_random} random head sets per control; "
        f"{n_draws} random vectors of the LTV's norm per OV control."
    )


def vectors_table(ltvs: Mapping[str, Any], label_list: Sequence[str], ledger: Any) -> pd.DataFrame:
    """Per task (index): whether it is a label-space task, the LTV's norm, steps and validation score (gated
    through ``ledger``, where ``Table 4.0``)."""
    return pd.DataFrame([
        {"task": t, "label space": t in label_list, "|θ|": f"{float(v.vectors[0].norm()):.1f}",
         "steps": v.training.steps,
         "validation score": ledger.cell(v, f"{100 * v.training.best_val_accuracy:.1f} %", where="Table 4.0")}
        for t, v in ltvs.items()
    ]).set_index("task")


def accuracy_record(rec: Mapping[str, Any]) -> str:
    """An accuracy record (``value``, ``low``, ``high``, ``n``) as ``"43.5 % [36.8, 50.4] (n=200)"``."""
    return f"{100 * rec['value']:.1f} % [{100 * rec['low']:.1f}, {100 * rec['high']:.1f}] (n={rec['n']})"


def accuracy_text(flags: Sequence[Any]) -> str:
    """Per-query 0/1 flags as their mean with the Wilson interval: ``"40.0 % [16.8, 68.7]"``."""
    f = np.asarray(flags, dtype=float)
    lo, hi = wilson_interval(int(f.sum()), len(f))
    return f"{100 * f.mean():.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


def ov_table(ov: Mapping[str, Any], ovc: Mapping[str, Any], ltvs: Mapping[str, Any], task_list: Sequence[str],
             deciding: Sequence[str], ledger: Any, kind: str, n_draws: int) -> pd.DataFrame:
    """Table 4.1 for ``kind`` (``"accuracy"`` or ``"label_accuracy"``): per task (index) whether it decides, each
    :data:`OV_COLUMNS` entry (:func:`accuracy_record`) and the random vectors' θ_OV (mean [range] over draws); a task
    whose LTV did not train gets only ``trained``; a task without label accuracy is left out of that kind. LTV cells
    gated through ``ledger`` (where ``Table 4.1``)."""
    rows = []
    for t in task_list:
        if ltvs[t].training.trained is not True:
            rows.append({"task": t, "trained": ledger.cell(ltvs[t], "yes", where="Table 4.1")})
            continue
        recs = ov[t]["proportions"]
        if kind == "label_accuracy" and recs["ltv"]["label_accuracy"] is None:
            continue
        row = {"task": t, "deciding": t in deciding}
        for k, name in OV_COLUMNS.items():
            text = accuracy_record(recs[k][kind])
            row[name] = ledger.cell(ltvs[t], text, where="Table 4.1") if k != "zero_shot" else text
        draws = [d[kind]["value"] for d in ovc[t]["draws"]]
        row[f"random θ_OV (paper form), mean of {n_draws} [range]"] = ledger.cell(
            ltvs[t], f"{100 * np.mean(draws):.1f} % [{100 * min(draws):.1f}, {100 * max(draws):.1f}]",
            where="Table 4.1")
        rows.append(row)
    return pd.DataFrame(rows).set_index("task")


def ov_norms(ov: Mapping[str, Any], analysed: Sequence[str]) -> pd.DataFrame:
    """Per analysed task (rows): each replacement's norm relative to θ and its cosine with θ, two decimals."""
    keys = ("ov_raw", "mlp", "ov", "ov_weighted")
    return pd.DataFrame({t: {f"{OV_COLUMNS[k]}: |v|/|θ|": ov[t]["norm"][k] / ov[t]["norm"]["ltv"] for k in keys}
                         | {f"{OV_COLUMNS[k]}: cos": ov[t]["cos"][k] for k in keys}
                         for t in analysed}).T.round(2)


def pooled(getter: Callable[[str], Any], tasks: Sequence[str]) -> np.ndarray:
    """Per-query 0/1 arrays of ``tasks`` (``getter(task)``) concatenated along the query axis, as floats (rows =
    draws when 2-D)."""
    parts = [np.asarray(getter(t), dtype=float) for t in tasks]
    return np.concatenate(parts, axis=-1)


def gain_share(ov_c: np.ndarray, ltv_c: np.ndarray, zs_c: np.ndarray, n_resamples: int = 2000,
               seed: int = 0) -> Estimate | None:
    """(θ_OV − zero-shot) / (LTV − zero-shot) on the same queries, with a paired bootstrap interval over queries
    (resamples where the LTV gains nothing are dropped); None if the LTV gains nothing."""
    gain = ltv_c.mean() - zs_c.mean()
    if gain <= 0:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ov_c), size=(n_resamples, len(ov_c)))
    g = ltv_c[idx].mean(1) - zs_c[idx].mean(1)
    share = np.where(g > 0, (ov_c[idx].mean(1) - zs_c[idx].mean(1)) / np.where(g > 0, g, 1), np.nan)
    share = share[np.isfinite(share)]
    value = (ov_c.mean() - zs_c.mean()) / gain
    lo, hi = np.quantile(share, [0.025, 0.975])
    return Estimate(value, min(lo, value), max(hi, value), n=len(ov_c), method="paired bootstrap (ratio)",
                    resamples=len(share))


@dataclass(frozen=True)
class OVPooled:
    """The OV reconstruction over the deciding tasks pooled.

    ``parts``: the three deciding differences (θ_OV − zero-shot, θ_OV(LTV) − θ_OV(random), θ_OV − MLP control);
    ``share``: :func:`gain_share` (None if the LTV gains nothing); ``intervals``: ``parts``, the share, and the same
    differences on the label words (not deciding); ``accuracy``: Wilson estimates of zero-shot, LTV, θ_OV, MLP."""

    parts: dict[str, Estimate]
    share: Estimate | None
    intervals: dict[str, Estimate]
    accuracy: dict[str, Estimate]


def pool_ov(ov: Mapping[str, Any], ovc: Mapping[str, Any], deciding: Sequence[str]) -> OVPooled:
    """:class:`OVPooled` over the queries of the ``deciding`` tasks."""
    def correct_of(t: str, k: str, kind: str = "accuracy") -> Any:
        return ov[t]["proportions"][k][kind]["correct"]

    c = {k: pooled(functools.partial(correct_of, k=k), deciding) for k in ("zero_shot", "ltv", "ov_raw", "mlp")}
    rand = pooled(lambda t: [d["accuracy"]["correct"] for d in ovc[t]["draws"]], deciding)
    parts = {
        "θ_OV − zero-shot": paired_bootstrap_difference(c["ov_raw"], c["zero_shot"]),
        "θ_OV(LTV) − θ_OV(random)": paired_bootstrap_difference(c["ov_raw"][None], rand, rows=("auto", "draws")),
        "θ_OV − MLP control": paired_bootstrap_difference(c["ov_raw"], c["mlp"]),
    }
    share = gain_share(c["ov_raw"], c["ltv"], c["zero_shot"])
    intervals = dict(parts) | ({"share of the LTV's gain kept by θ_OV": share} if share is not None else {})
    # the same differences over the label words only: shown and recorded, not deciding (the paper's measure is
    # the whole vocabulary)
    cl = {k: pooled(functools.partial(correct_of, k=k, kind="label_accuracy"), deciding)
          for k in ("zero_shot", "ov_raw", "mlp")}
    rand_l = pooled(lambda t: [d["label_accuracy"]["correct"] for d in ovc[t]["draws"]], deciding)
    intervals |= {
        "θ_OV − zero-shot (label words, not deciding)": paired_bootstrap_difference(cl["ov_raw"], cl["zero_shot"]),
        "θ_OV(LTV) − θ_OV(random) (label words, not deciding)": paired_bootstrap_difference(
            cl["ov_raw"][None], rand_l, rows=("auto", "draws")),
        "θ_OV − MLP control (label words, not deciding)": paired_bootstrap_difference(cl["ov_raw"], cl["mlp"]),
    }
    accuracy = {k: Estimate(v.mean(), *wilson_interval(int(v.sum()), len(v)), n=len(v)) for k, v in c.items()}
    return OVPooled(parts, share, intervals, accuracy)


def plot_ov(ov: Mapping[str, Any], ovc: Mapping[str, Any], task_list: Sequence[str], label_list: Sequence[str],
            trained: Mapping[str, bool]) -> tuple[plt.Figure, np.ndarray]:
    """Two panels (:data:`OV_PANELS`: whole vocabulary, label words): per task the :data:`OV_BARS` with intervals
    (random: range of the draws) and the paper's SST-2 lines. Returns the figure and its two axes, without titles or
    axis labels (the chapter sets them, then the layout)."""
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 6.4), sharex=True)
    x = np.arange(len(task_list))
    w = 0.16
    for ax, (kind, _) in zip(axes, OV_PANELS):
        for i, (k, name, color) in enumerate(OV_BARS):
            vals, lo, hi = [], [], []
            for t in task_list:
                rec = ov[t]["proportions"]["ltv"][kind] if trained[t] else None
                if rec is None:
                    vals.append(np.nan)
                    lo.append(0)
                    hi.append(0)
                    continue
                if k == "random":
                    d = [r[kind]["value"] for r in ovc[t]["draws"]]
                    v = float(np.mean(d))
                    vals.append(100 * v)
                    lo.append(100 * (v - min(d)))
                    hi.append(100 * (max(d) - v))
                else:
                    r = ov[t]["proportions"][k][kind]
                    vals.append(100 * r["value"])
                    lo.append(100 * (r["value"] - r["low"]))
                    hi.append(100 * (r["high"] - r["value"]))
            ax.bar(x + (i - 2) * w, vals, w, yerr=[lo, hi], color=color, capsize=2, label=name)
        if kind == "accuracy":
            ax.axhline(83, color="C3", ls="--", lw=1, label="paper (Llama-3.1-8B, SST-2): LTV 83 %")
            ax.axhline(52, color="C0", ls="--", lw=1, label="paper: θ_OV 52 %")
        ax.set_ylim(0, 100)
    axes[1].set_xticks(x, [f"{t}{' (label space)' if t in label_list else ''}" for t in task_list], fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    return fig, axes


def ablation_table(kh: Mapping[str, Any], ltvs: Mapping[str, Any], task_list: Sequence[str], ledger: Any,
                   kind: str, mid: int) -> pd.DataFrame:
    """Table 4.2 for ``kind`` (``"full"`` or ``"label"``), transposed (columns: tasks): n, zero-shot, the LTV, and
    per head selection (all layers, layers ≥ ``mid``) and ablation mode (zero, mean) the key heads' accuracy
    (:func:`accuracy_text`) and the random heads' mean [range]. LTV cells gated (where ``Table 4.2``)."""
    rows = []
    for t in task_list:
        if ltvs[t].training.trained is not True:
            rows.append({"task": t, "n": ledger.cell(ltvs[t], "", where="Table 4.2")})
            continue
        r = kh[t]
        if r["correct"][kind] is None:
            continue
        row = {"task": t, "n": len(r["correct"][kind]), "zero-shot": accuracy_text(r["zero_shot_correct"][kind]),
               "LTV θ": ledger.cell(ltvs[t], accuracy_text(r["correct"][kind]), where="Table 4.2")}
        for sel, key, control in (("all layers", "key", "random"), (f"layers ≥ {mid}", "key_after", "random_after")):
            for mode in ("zero", "mean"):
                row[f"{sel}: key heads, {mode}"] = ledger.cell(
                    ltvs[t], accuracy_text(r[f"{key}_correct"][mode][kind]), where="Table 4.2")
                draws = r[f"{control}_correct"][mode] if r[f"{control}_correct"] else []
                vals = [100 * np.mean(d[kind]) for d in draws]
                row[f"{sel}: random heads, {mode}"] = ledger.cell(
                    ltvs[t], f"{np.mean(vals):.1f} % [{min(vals):.1f}, {max(vals):.1f}]" if vals else "—",
                    where="Table 4.2")
        rows.append(row)
    return pd.DataFrame(rows).set_index("task").T


def pool_key_heads(kh: Mapping[str, Any], deciding: Sequence[str]) -> dict[str, Estimate]:
    """Over the ``deciding`` tasks' queries pooled (whole vocabulary): ``"random-head minus key-head ablation
    (zero)"`` (the deciding difference), ``"LTV minus key-head ablation"`` and the mean-ablation difference (not
    deciding), each a paired bootstrap (random heads' rows are draws)."""
    key_c = pooled(lambda t: kh[t]["key_correct"]["zero"]["full"], deciding)
    rnd_c = pooled(lambda t: [d["full"] for d in kh[t]["random_correct"]["zero"]], deciding)
    ltv_c = pooled(lambda t: kh[t]["correct"]["full"], deciding)
    key_gap = paired_bootstrap_difference(rnd_c, key_c[None], rows=("draws", "auto"))
    key_drop = paired_bootstrap_difference(ltv_c, key_c)
    # mean-ablation keeps each head's average output and removes only what varies with the query: shown and
    # recorded, not deciding (the paper does not say which it used; zero-ablation is the common reading)
    key_m = pooled(lambda t: kh[t]["key_correct"]["mean"]["full"], deciding)
    rnd_m = pooled(lambda t: [d["full"] for d in kh[t]["random_correct"]["mean"]], deciding)
    return {"random-head minus key-head ablation (zero)": key_gap, "LTV minus key-head ablation": key_drop,
            "random-head minus key-head ablation (mean, not deciding)": paired_bootstrap_difference(
                rnd_m, key_m[None], rows=("draws", "auto"))}


def plot_ablation(kh: Mapping[str, Any], task_list: Sequence[str], trained: Mapping[str, bool]) -> tuple[plt.Figure, Any]:
    """Per task: the LTV alone, key heads zero-ablated (Wilson intervals) and random heads (mean, range of the
    draws), with the paper's numbers as dashed lines. Returns the figure and its axes, without title or axis
    labels."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    x = np.arange(len(task_list))
    for i, (name, color, get) in enumerate((
        ("LTV θ", "C3", lambda r: [r["correct"]["full"]]),
        ("key heads ablated", "C0", lambda r: [r["key_correct"]["zero"]["full"]]),
        ("random heads ablated", "C2", lambda r: [d["full"] for d in r["random_correct"]["zero"]]),
    )):
        vals, lo, hi = [], [], []
        for t in task_list:
            if not trained[t]:
                vals.append(np.nan)
                lo.append(0)
                hi.append(0)
                continue
            arrs = [np.asarray(a, dtype=float) for a in get(kh[t])]
            if len(arrs) == 1:
                f = arrs[0]
                v = f.mean()
                a, b = wilson_interval(int(f.sum()), len(f))
            else:
                means = [a.mean() for a in arrs]
                v, a, b = float(np.mean(means)), min(means), max(means)
            vals.append(100 * v)
            lo.append(100 * (v - a))
            hi.append(100 * (b - v))
        ax.bar(x + (i - 1) * 0.25, vals, 0.25, yerr=[lo, hi], color=color, capsize=2, label=name)
    for y, txt, color in ((83, "paper (Llama-3.1-8B): LTV 83 %", "C3"), (51, "paper: key heads 51 %", "C0"),
                          (78, "paper: random heads 78 %", "C2")):
        ax.axhline(y, color=color, ls="--", lw=1, label=txt)
    ax.set_xticks(x, task_list, fontsize=9)
    ax.set_ylim(0, 100)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=9, frameon=False)
    return fig, ax


def u_shape_table(kh: Mapping[str, Any], analysed: Sequence[str], deciding: Sequence[str]) -> pd.DataFrame | None:
    """Per analysed task with a U-shape test (index ``task``): key heads per third of the layers after the injection
    layer, the expected counts, the outer share with its interval, the uniform share and the tests' p-values; None
    if no task has one."""
    u_rows = []
    for t in analysed:
        u = kh[t]["key_after_u_shape"]
        if u is None:
            continue
        u_rows.append({"task": t, "deciding": t in deciding, "key heads (n)": u["n"],
                       "first third": u["counts"][0], "middle third": u["counts"][1], "last third": u["counts"][2],
                       "expected per third": " / ".join(f"{e:.1f}" for e in u["expected"]),
                       "outer share": f"{100 * u['fraction']:.0f} % [{100 * u['fraction_low']:.0f}, "
                                      f"{100 * u['fraction_high']:.0f}]",
                       "uniform outer share": f"{100 * u['expected_fraction']:.0f} %",
                       "hypergeometric p (outer)": f"{u['p_value']:.3g}", "χ² (2 df)": f"{u['chi2']:.1f}",
                       "χ² p": f"{u['chi2_p']:.3g}"})
    return pd.DataFrame(u_rows).set_index("task") if u_rows else None


def u_shape_shares(kh: Mapping[str, Any], deciding: Sequence[str]) -> tuple[dict[str, Estimate], int]:
    """For the first and the last third (keys ``"first third"``, ``"last third"``): the share of the deciding tasks'
    key heads (chosen among layers ≥ the injection layer) in that third minus the third's share of those layers,
    a Wilson interval shifted by the uniform share; and the number of key heads pooled. ``({}, 0)`` without any."""
    u_dec = [kh[t]["key_after_u_shape"] for t in deciding if kh[t]["key_after_u_shape"] is not None]
    if not u_dec:
        return {}, 0
    n_u = sum(u["n"] for u in u_dec)
    out = {}
    for idx, name in ((0, "first third"), (2, "last third")):
        k = sum(u["counts"][idx] for u in u_dec)
        p0 = sum(u["thirds_layers"][idx] / (u["n_layers"] - u["layer"]) * u["n"] for u in u_dec) / n_u
        lo, hi = wilson_interval(k, n_u)
        out[name] = Estimate(k / n_u - p0, lo - p0, hi - p0, n=n_u, method="wilson (shifted by the uniform share)",
                             difference=True)
    return out, n_u


def plot_placement(kh: Mapping[str, Any], deciding: Sequence[str], n_layers: int, mid: int) -> tuple[plt.Figure, Any]:
    """Key heads (chosen among layers ≥ ``mid``) per layer, summed over the deciding tasks, against the uniform
    count; the injection layer dashed. Returns the figure and its axes, without title or axis labels."""
    L = n_layers
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    counts = np.zeros(L)
    for t in deciding:
        for lay, _ in kh[t]["key_after_heads"]:
            counts[lay] += 1
    ax.bar(np.arange(L), counts, color="C0", label="key heads (label-space tasks)")
    if deciding:
        ax.hlines(sum(len(kh[t]["key_after_heads"]) for t in deciding) / (L - mid), mid - 0.5, L - 0.5, color="0.4",
                  label="uniform over layers ≥ l")
    ax.axvline(mid - 0.5, color="C3", ls="--", lw=1, label=f"injection layer l = {mid}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=9, frameon=False)
    return fig, ax


def head_groups(kh_t: Mapping[str, Any], n_layers: int, n_heads: int) -> tuple[np.ndarray, ...]:
    """One task's ``(first, final, is_key, same)``: attention of the last position to the first token and to itself
    per head ``(layers, heads)``, the key heads' mask, and the other heads of the key heads' layers."""
    first = np.array(kh_t["attention"]["first"])
    final = np.array(kh_t["attention"]["final"])
    is_key = np.zeros((n_layers, n_heads), dtype=bool)
    for lay, h in kh_t["key_heads"]:
        is_key[lay, h] = True
    same = np.zeros_like(is_key)
    same[sorted({lay for lay, _ in kh_t["key_heads"]})] = True
    same &= ~is_key
    return first, final, is_key, same


def mean_difference(a: np.ndarray, b: np.ndarray, n_resamples: int = 2000, seed: int = 0) -> Estimate:
    """Mean of ``a`` minus mean of ``b`` with an unpaired bootstrap interval (a and b resampled separately)."""
    rng = np.random.default_rng(seed)
    da = a[rng.integers(0, len(a), size=(n_resamples, len(a)))].mean(1)
    db = b[rng.integers(0, len(b), size=(n_resamples, len(b)))].mean(1)
    value = float(a.mean() - b.mean())
    lo, hi = np.quantile(da - db, [0.025, 0.975])
    return Estimate(value, min(lo, value), max(hi, value), n=min(len(a), len(b)), method="bootstrap over heads",
                    resamples=n_resamples, difference=True)


def attention_table(kh: Mapping[str, Any], analysed: Sequence[str], n_layers: int,
                    n_heads: int) -> pd.DataFrame | None:
    """Per analysed task and head group (key heads, other heads of the same layers, all other heads; index ``(task,
    heads)``): the number of heads and their mean attention to the first token and to the final position, three
    decimals; None when no task was analysed (no LTV learned)."""
    att_rows = []
    for t in analysed:
        first, final, is_key, same = head_groups(kh[t], n_layers, n_heads)
        for name, sel in (("key heads", is_key), ("other heads, same layers", same), ("all other heads", ~is_key)):
            att_rows.append({"task": t, "heads": name, "n": int(sel.sum()), "to first token": first[sel].mean(),
                             "to final position": final[sel].mean()})
    return pd.DataFrame(att_rows).set_index(["task", "heads"]).round(3) if att_rows else None


def attention_pools(kh: Mapping[str, Any], deciding: Sequence[str], n_layers: int,
                    n_heads: int) -> dict[str, np.ndarray]:
    """Per-head attention pooled over the deciding tasks: ``key_first``, ``other_first``, ``key_final``,
    ``other_final`` (other = the other heads of the key heads' layers)."""
    groups = [head_groups(kh[t], n_layers, n_heads) for t in deciding]
    return {"key_first": np.concatenate([g[0][g[2]] for g in groups]),
            "other_first": np.concatenate([g[0][g[3]] for g in groups]),
            "key_final": np.concatenate([g[1][g[2]] for g in groups]),
            "other_final": np.concatenate([g[1][g[3]] for g in groups])}


def attention_differences(pools: Mapping[str, np.ndarray]) -> dict[str, Estimate]:
    """Key minus other heads' mean attention to the first token and to the final position
    (:func:`mean_difference`), named as the chapter records them."""
    return {"attention to the first token, key minus other heads": mean_difference(pools["key_first"],
                                                                                    pools["other_first"]),
            "attention to the final position, key minus other heads": mean_difference(pools["key_final"],
                                                                                      pools["other_final"])}


def plot_attention(pools: Mapping[str, np.ndarray] | None) -> tuple[plt.Figure, np.ndarray]:
    """Mean attention to the first token (left) and the final position (right), key against other heads, with
    bootstrap intervals over heads; empty panels when ``pools`` is None. Returns the figure and its two axes,
    without titles or axis labels."""
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.4))
    if pools is not None:
        rng = np.random.default_rng(0)
        for ax, (kv, ov_) in zip(axes, ((pools["key_first"], pools["other_first"]),
                                        (pools["key_final"], pools["other_final"]))):
            for i, (vals, name, color) in enumerate(((kv, f"key heads (n={len(kv)})", "C3"),
                                                     (ov_, f"other heads, same layers (n={len(ov_)})", "0.5"))):
                boot = vals[rng.integers(0, len(vals), size=(2000, len(vals)))].mean(1)
                lo, hi = np.quantile(boot, [0.025, 0.975])
                ax.bar(i, vals.mean(), 0.6, yerr=[[vals.mean() - lo], [hi - vals.mean()]], color=color, capsize=3,
                       label=name)
            ax.set_xticks([0, 1], ["key", "other"])
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9, frameon=False)
    return fig, axes
