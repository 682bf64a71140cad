"""Chapter 04's tables, pooled statistics and figures, from :mod:`ltvlib.study.ov` and :mod:`ltvlib.study.key_heads`.

Pure functions of the cached measurement dicts: ``ov[task]`` (:func:`~ltvlib.study.ov.ov_experiment`), ``ovc[task][key]``
(:func:`~ltvlib.study.ov.ov_control_experiment`, one per :data:`CONTROL_KEYS`), ``kh[task]`` (:func:`~ltvlib.study.key_heads.key_head_experiment`),
the LTVs and the chapter's :class:`~ltvlib.study.ltv_report.LTVLedger` (every LTV number passes through it, in the
order the chapter shows it). The statistics the verdicts rest on (pooled paired differences, the share of the LTV's
gain the OV reconstruction keeps, the U-shape shares, the attention differences) are here and tested; the rules stay
in the chapter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats import Estimate, paired_bootstrap_difference, wilson_interval

CONTROL_KEYS: tuple[str, ...] = ("ov/at |θ|", "mlp/at |θ|", "ov/paper", "mlp/paper")
"""The four random-vector controls per task (``ovc[task][key]``, :func:`~ltvlib.study.ov.ov_control_experiment`):
``path/variant``, the OV sum or the MLP control, rescaled to |θ| or in the paper's form."""

CONTROL_NAMES: dict[str, str] = {"ov/at |θ|": "θ_OV at |θ|", "mlp/at |θ|": "MLP at |θ|",
                                 "ov/paper": "θ_OV, paper's form", "mlp/paper": "MLP, paper's form"}
"""How each control reads in tables and figures."""


def control_key(path: str, variant: str) -> str:
    """The key of one control in ``ovc[task]``: ``"ov/at |θ|"``, ``"mlp/paper"``, ..."""
    return f"{path}/{variant}"


def vectors_table(ltvs: Mapping[str, Any], label_list: Sequence[str], ledger: Any) -> pd.DataFrame:
    """Per task (index): whether it is a label-space task, the LTV's norm, steps and validation accuracy (gated
    through ``ledger``, where ``Table 4.0``: a vector that did not learn reads so)."""
    return pd.DataFrame([
        {"task": t, "label space": t in label_list, "|θ|": f"{float(v.vectors[0].norm()):.1f}",
         "steps": v.training.steps,
         "validation accuracy": ledger.cell(v, f"{100 * v.training.best_val_accuracy:.1f} %", where="Table 4.0")}
        for t, v in ltvs.items()
    ]).set_index("task")


def accuracy_text(flags: Sequence[Any]) -> str:
    """Per-query 0/1 flags as their mean with the Wilson interval: ``"40.0 % [16.8, 68.7]"``."""
    f = np.asarray(flags, dtype=float)
    lo, hi = wilson_interval(int(f.sum()), len(f))
    return f"{100 * f.mean():.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


def draws_text(values: Sequence[float]) -> str:
    """Random draws' accuracies as ``"mean [min, max]"`` in percent."""
    return f"{100 * np.mean(values):.1f} [{100 * min(values):.1f}, {100 * max(values):.1f}]"


def ov_table(ov: Mapping[str, Any], ovc: Mapping[str, Any], learned: Sequence[str],
             kind: str = "accuracy") -> pd.DataFrame:
    """Per learned task (columns) the accuracy (``kind``: ``"accuracy"`` or ``"label_accuracy"``) with its Wilson
    interval of zero-shot, the LTV, and for each control (:data:`CONTROL_KEYS`) the LTV's reconstruction and the
    random vectors' (mean [range] over draws), plus the LTV's reconstruction's norm over |θ|. Rows are the
    conditions; tasks without label words are left out of ``label_accuracy``."""
    cols = {}
    for t in learned:
        if ov[t]["proportions"]["ltv"][kind] is None:
            continue
        col = {"zero-shot": accuracy_text(ov[t]["proportions"]["zero_shot"][kind]["correct"]),
               "LTV θ": accuracy_text(ov[t]["proportions"]["ltv"][kind]["correct"])}
        for key in CONTROL_KEYS:
            c = ovc[t][key]
            col[f"{CONTROL_NAMES[key]}: θ"] = accuracy_text(c["ltv"][kind]["correct"])
            col[f"{CONTROL_NAMES[key]}: random, mean [range]"] = draws_text([d[kind]["value"] for d in c["draws"]])
            col[f"{CONTROL_NAMES[key]}: norm ÷ |θ|"] = f"{c['norm']:.2f}"
        cols[t] = col
    return pd.DataFrame(cols)


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
    """The OV reconstruction over the deciding tasks' test queries pooled (whole-vocabulary accuracy).

    ``vs_random``: per control key (:data:`CONTROL_KEYS`), the LTV's reconstruction minus random vectors' through
    the same map (paired bootstrap over queries, the draws resampled); ``ov_minus_mlp``: θ_OV at |θ| minus the MLP
    control at |θ|; ``share``: the share of the LTV's gain over zero-shot that θ_OV at |θ| keeps (None if the LTV
    gains nothing); ``floor``: per control key, whether the LTV's reconstruction and every random one score 0 on
    every query (a comparison of floor with floor); ``accuracy``: Wilson estimates of zero-shot, the LTV and each
    control's LTV reconstruction (named by :data:`CONTROL_NAMES`)."""

    vs_random: dict[str, Estimate]
    ov_minus_mlp: Estimate
    share: Estimate | None
    floor: dict[str, bool]
    accuracy: dict[str, Estimate]

    @property
    def intervals(self) -> dict[str, Estimate]:
        """Every interval, named as the chapter records them."""
        out = {f"{CONTROL_NAMES[k]}: θ − random": e for k, e in self.vs_random.items()}
        out["θ_OV at |θ| − MLP at |θ|"] = self.ov_minus_mlp
        if self.share is not None:
            out["share of the LTV's gain kept by θ_OV at |θ|"] = self.share
        return out


def pool_ov(ov: Mapping[str, Any], ovc: Mapping[str, Any], deciding: Sequence[str]) -> OVPooled:
    """:class:`OVPooled` over the test queries of the ``deciding`` tasks."""
    if not deciding:
        raise ValueError("pool_ov: give at least one deciding task")

    def own(key: str) -> np.ndarray:
        return pooled(lambda t: ovc[t][key]["ltv"]["accuracy"]["correct"], deciding)

    def rand(key: str) -> np.ndarray:
        return pooled(lambda t: [d["accuracy"]["correct"] for d in ovc[t][key]["draws"]], deciding)

    vs_random = {k: paired_bootstrap_difference(own(k)[None], rand(k), rows=("auto", "draws")) for k in CONTROL_KEYS}
    floor = {k: bool(own(k).sum() == 0 and rand(k).sum() == 0) for k in CONTROL_KEYS}
    ltv_c = pooled(lambda t: ov[t]["proportions"]["ltv"]["accuracy"]["correct"], deciding)
    zs_c = pooled(lambda t: ov[t]["proportions"]["zero_shot"]["accuracy"]["correct"], deciding)
    ov_eq = own("ov/at |θ|")
    named = [("zero-shot", zs_c), ("LTV", ltv_c), *((CONTROL_NAMES[k], own(k)) for k in CONTROL_KEYS)]
    accuracy = {name: Estimate(v.mean(), *wilson_interval(int(v.sum()), len(v)), n=len(v)) for name, v in named}
    return OVPooled(vs_random, paired_bootstrap_difference(ov_eq, own("mlp/at |θ|")), gain_share(ov_eq, ltv_c, zs_c),
                    floor, accuracy)


OV_BARS: tuple[tuple[str, str, str | None], ...] = (
    ("zero-shot", "0.6", None), ("LTV θ", "C3", None), ("θ_OV", "C0", "ov"), ("random θ_OV", "C9", "ov"),
    ("MLP control", "C2", "mlp"), ("random MLP", "C8", "mlp"))
"""The OV figure's bars per task: name, colour, and the map (None: no reconstruction)."""


def plot_ov(ov: Mapping[str, Any], ovc: Mapping[str, Any], learned: Sequence[str]) -> tuple[plt.Figure, np.ndarray]:
    """Two panels (at |θ|, the paper's form): per learned task the LTV, θ_OV and the MLP control with Wilson
    intervals, random vectors through each map (mean, whiskers: range of the draws) and zero-shot; the paper's
    SST-2 numbers as dashed lines. Returns the figure and its two axes, without titles or axis labels."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    x = np.arange(len(learned))
    w = 0.13
    for ax, variant in zip(axes, ("at |θ|", "paper")):
        for i, (name, color, path) in enumerate(OV_BARS):
            vals, lo, hi = [], [], []
            for t in learned:
                if path is None:
                    r = ov[t]["proportions"]["zero_shot" if name == "zero-shot" else "ltv"]["accuracy"]
                    v, a, b = r["value"], r["low"], r["high"]
                elif name.startswith("random"):
                    d = [r["accuracy"]["value"] for r in ovc[t][control_key(path, variant)]["draws"]]
                    v, a, b = float(np.mean(d)), min(d), max(d)
                else:
                    r = ovc[t][control_key(path, variant)]["ltv"]["accuracy"]
                    v, a, b = r["value"], r["low"], r["high"]
                vals.append(100 * v)
                lo.append(100 * (v - a))
                hi.append(100 * (b - v))
            ax.bar(x + (i - 2.5) * w, vals, w, yerr=[lo, hi], color=color, capsize=2, label=name)
        ax.axhline(83, color="C3", ls="--", lw=1, label="paper: LTV 83 % (SST-2)")
        ax.axhline(52, color="C0", ls="--", lw=1, label="paper: θ_OV 52 % (SST-2)")
        ax.set_xticks(x, list(learned), fontsize=9)
        ax.set_ylim(0, 100)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
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
