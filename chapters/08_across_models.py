# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: ltv-book
#     language: python
#     name: ltv-book
# ---

# %% [markdown]
# # Across models: the headline results on a second architecture
#
# **The claim** (the paper's first, third and fourth, asked of a second architecture): the paper reports its
# findings on eight models of the Llama 2/3/3.1/3.2 families, Qwen2.5-32B and Yi-34B (the exact list is not
# available to us), and presents them as properties of learned task vectors, not of one model. Its numbers on
# Llama-3.1-8B, the ones every chapter of this book compares with:
#
# - **Middle layer, last position, average over seven tasks:** LTV **83.49 %**, Vanilla TV **37.80 %**,
#   FV **37.30 %** (Table 1); across layers the LTV stays above both extracted vectors (Figure 2).
# - **Key heads:** ablating the top 10 % of heads by saliency drops the LTV from **83 % to 51 %**; ablating as
#   many random heads only to **78 %**.
# - **Linear propagation:** the LTV's effect on the last layer is close to a linear map $W\theta$, and
#   injecting $W\theta$ at the last layer gives an accuracy close to the LTV's at most layers.
#
# Chapters 01, 04 and 05 test these on SmolLM2-135M, a Llama-architecture model. This chapter runs the same
# measurements, through the same library functions, on a model of another architecture, **Gemma-3-270M**, and
# puts both side by side: the paper's claims 1 (learned beats extracted, at the middle layer and across
# layers), 3 (key heads) and 4 (linear propagation, rotation rising with depth), each asked once per model.
# The list of models is a parameter: on a GPU, `-p models` can add Llama-3.x checkpoints by their Hugging
# Face ids.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"
models = ["smollm2-135m", "gemma3-270m"]  # compared side by side; `model` is always included, first

# %%
import time
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

warnings.filterwarnings("ignore", category=pd.errors.PerformanceWarning)  # lookups in the unsorted Table 8.8
from IPython.display import Markdown, display
from transformers.utils import logging as hf_logging

from ltvlib.across_models import (
    EXTRACTED,
    across_sizes,
    architecture_row,
    check_code_paths,
    clear_memory,
    function_vector_write,
    key_head_results,
    linearity_layers,
    linearity_results,
    ltv_profile,
    middle_layer_results,
    plan_tasks,
    scale_for,
    stream_rms,
    sweep_ltv_layers,
    sweep_results,
    table_layers,
)
from ltvlib.experiments_extracted import profile_function_vector
from ltvlib.linearity import linearity_config
from ltvlib.models import load_model
from ltvlib.profiles import get_profile
from ltvlib.scorecard import Claim, record_claims

hf_logging.disable_progress_bar()
prof = get_profile(profile)
sizes = across_sizes(prof)
plan = plan_tasks(prof)
if isinstance(models, str):  # `-p models a,b` from the command line
    models = [m.strip() for m in models.split(",") if m.strip()]
model_list = [model] + [m for m in models if m != model]
started = time.perf_counter()
display(Markdown(
    f"**Models** {', '.join(f'`{m}`' for m in model_list)}. **Profile** `{prof.name}`: middle-layer table on "
    f"{', '.join(plan['table'])}; layer sweep on {', '.join(plan['sweep'])}; key heads on "
    f"{', '.join(plan['key_heads'])} ({sizes.n_key_queries} analysis queries, {sizes.n_random} random head sets); "
    f"linear reconstruction on {', '.join(plan['linearity'])} at the layers nearest "
    f"{', '.join(f'{f:g}L' for f in sizes.linearity_fractions)}. "
    f"Test queries per task: up to {prof.n_test or 'all'}; LTV recipe `{prof.recipe.recipe}` with "
    f"{prof.n_train}/{prof.n_val} train/validation queries."
))

# %% [markdown]
# **What the `cpu` profile covers, and why.** Every measurement here is one that chapters 01, 04 and 05 make,
# called with the same arguments, so on SmolLM2 (the book's default model) the vectors and nearly every number
# are read back from the cache those chapters filled; what is new there costs under a minute (the code-path
# checks, the stream sizes, TREC's extracted vectors evaluated at the middle layer alone and Antonym's at the
# two LTV layers chapter 01 does not sweep). Only Gemma-3-270M costs compute, and its cost is set by its
# vocabulary: 262,144 tokens, so the unembedding holds 168 M of the model's 268 M parameters and every position
# whose logits are read costs about six times SmolLM2's. Measured on one CPU thread while writing the chapter
# (`cpu` profile, Gemma, Antonym unless said): one LTV 1.9 to 2.1 minutes (the first at a layer, which computes
# the prompt prefixes; 1.1 minutes for a second one at the same layer), the three extracted vectors of a task
# 1.9 minutes with their evaluation at ten layers (of which about 1.2 minutes are the evaluations), the zero-,
# 5- and 10-shot references 1.0 minute (TREC 1.5), the key-head ablation 1.4 minutes per task and the linear
# fit 1.2 minutes per layer. The `cpu` profile therefore keeps two tasks in the middle-layer table, Antonym and
# TREC (the classification task, short prompts), and runs the layer sweep (LTVs at three layers), the unscaled
# recipe, the key-head ablation and the linear reconstruction on Antonym: about 20 minutes of one CPU thread
# for Gemma, less with the two threads the book runs on. Each further short-prompt task in the table would add
# about 4 minutes; SST-2, SNLI and RTE, whose prompts reach 30 to 1,200 tokens with demonstrations, far more.
# `profile=paper` covers all seven tasks at the paper's sizes, with LTVs at every layer.

# %% [markdown]
# ## Two architectures
#
# The library reads everything it needs from one table per architecture (`ltvlib.sites`) and from the
# model's config. Gemma 3 differs from Llama in every convention a task-vector method touches: 4 query heads
# of **256** dimensions in a 640-wide stream (so `head_dim` is not `d_model / n_heads`) sharing one KV head;
# RMSNorm gains of $1 + w$ instead of $w$; embeddings multiplied by $\sqrt{d}$ inside the embedding module
# (the residual stream entering block 0 is already scaled); extra norms on the attention and MLP outputs
# before they join the stream; and **sliding-window attention** (512 tokens) in 15 of its 18 layers.
#
# Before measuring anything, the cell below checks on each real model that the shortcuts every chapter uses
# give the model's own forward pass (`ltvlib.across_models.check_code_paths`), with a random vector of
# residual-stream size injected at the middle layer of six SST-2 prompts (three in `smoke`) of different
# lengths: cached prompt prefixes with a shared demonstration block (logits of the answer tokens and the
# gradient with respect to the vector), chapter 04's last-token runner, chapter 05's single-token passes from
# the injection block, the embedding scale and the final norm's gain convention.

# %%
arch, checks, timings = {}, {}, {}
for name in model_list:
    t0 = time.perf_counter()
    lm = load_model(name, device=device)
    arch[name] = architecture_row(lm)
    checks[name] = check_code_paths(lm, n=sizes.n_check, seed=seed)
    timings[name] = {"load and checks": time.perf_counter() - t0}
    del lm
    clear_memory()
display(Markdown("**Table 8.1.** The models and the conventions the site table encodes."))
display(pd.DataFrame(arch).T)
check_table = pd.DataFrame({m: c["checks"] for m, c in checks.items()})
display(Markdown(
    "**Table 8.2.** Largest difference between each fast path and the model's own forward pass, relative to "
    "the largest value of the reference ($\\max|a-b| / \\max|b|$; float32 rounding is about $10^{-6}$). "
    "Argmax agreement of the logits: " + "; ".join(
        f"{m}: {'all equal' if all(c['argmax_equal'].values()) else 'DIFFERENT'}" for m, c in checks.items())
    + ". Prompt lengths " + ", ".join(f"{m} {c['prompt_tokens'][0]}-{c['prompt_tokens'][1]} tokens"
                                        for m, c in checks.items()) + "."
))
display(check_table.map(lambda v: f"{v:.1e}"))
# float32 agrees to about 1e-6; bfloat16 (the default on a GPU) rounds to about 1e-2
tolerance = {m: 1e-3 if arch[m]["dtype"] == "float32" else 5e-2 for m in model_list}
worst = float(check_table.max().max())
bad_paths = [(m, k) for m in check_table for k, v in check_table[m].items() if v > tolerance[m]]
display(Markdown(
    f"Largest relative difference over all checks and models: **{worst:.1e}**. "
    + ("Every fast path agrees with the full forward pass on every model."
       if not bad_paths else
       "**Paths that disagree (above 1e-3 in float32, 5e-2 in lower precision):** "
       + ", ".join(f"{k} on {m}" for m, k in bad_paths) + ".")
    + "".join(f" `{m}` uses a sliding attention window of {c['sliding_window']} tokens: the cached-prefix paths "
              f"accept prompts of up to {c['sliding_window'] - 1} tokens and refuse longer ones (see the end of the "
              "chapter)." for m, c in checks.items() if c["sliding_window"])
))

# %% [markdown]
# ## The measurements
#
# One loop per model computes everything the chapter shows (the functions cache their results, so a second
# run, or the default model after chapters 01, 04 and 05, reads them back).
#
# **One change to the LTV recipe, for every model alike.** The book's fast recipe (AdamW, learning rate 0.1
# decayed linearly over 64 steps, initialisation $U(-0.1, 0.1)$) was tuned on SmolLM2-135M at its middle
# layer, where the residual stream has an RMS of 6.15 per coordinate. Adam moves each coordinate by about the
# learning rate per step whatever the gradient's size, so a vector trained with it can reach about
# $0.1 \times 64 / 2 = 3.2$ per coordinate, whatever the model. Each model's LTVs here are trained with the
# learning rate and initial range multiplied by the ratio of its stream's RMS at its middle layer to 6.15
# (`ltvlib.across_models.recipe_scale`, rounded to two digits, and exactly 1 within a factor 1.25 of 6.15, so
# SmolLM2's vectors are the other chapters'). The section after the middle-layer table shows why the scale
# matters, with the unscaled recipe beside it.

# %%
results = {}
for name in model_list:
    t0 = time.perf_counter()
    lm = load_model(name, device=device)
    # the LTV recipe's step size, scaled to this model's residual stream (1 for the default model)
    r = {"L": lm.n_layers, "mid": lm.middle_layer, "table_layers": table_layers(lm, prof), "stream_rms": stream_rms(lm)}
    r["scale"] = scale_for(r["stream_rms"][lm.middle_layer])  # = ltvlib.across_models.recipe_scale(lm)
    lprof = ltv_profile(prof, r["scale"])
    r["lr"], r["ltv_layers"] = lprof.recipe.lr, {t: sweep_ltv_layers(lm, prof, t) for t in plan["sweep"]}
    r["table"] = {t: middle_layer_results(lm, t, lprof, seed=seed,
                                          book_recipe=prof.recipe if t in plan["unscaled"] else None)
                  for t in plan["table"]}
    r["fv_write"] = {t: function_vector_write(lm, profile_function_vector(lm, t, prof, seed=seed))
                     for t in plan["table"] if r["table"][t]["function_vector"] is not None}
    timings[name]["middle-layer table"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    r["sweep"] = {t: sweep_results(lm, t, lprof, seed=seed) for t in plan["sweep"]}
    timings[name]["layer sweep"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    r["key_heads"] = {t: key_head_results(lm, t, lprof, seed=seed) for t in plan["key_heads"]}
    timings[name]["key heads"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    r["linearity"] = {t: linearity_results(lm, t, lprof, seed=seed) for t in plan["linearity"]}
    r["linearity_layers"] = {t: linearity_layers(lm, prof, t) for t in plan["linearity"]}
    timings[name]["linear reconstruction"] = time.perf_counter() - t1
    timings[name]["total"] = time.perf_counter() - t0 + timings[name]["load and checks"]
    results[name] = r
    del lm
    clear_memory()
display(pd.DataFrame(timings).T.round(0).rename(columns=lambda c: f"{c} (s)"))

# %% [markdown]
# **Table 8.3.** Wall time of each part per model in this run (seconds; a part read back from the cache costs
# about nothing).

# %% [markdown]
# ## Learned against extracted, at the middle layer
#
# Chapter 01's baseline setting: each vector at the middle layer $L/2$ and the last prompt position of the
# zero-shot prompt `Q: {x}\nA:`; the LTV *added* at the input of block $L/2$, the Vanilla TV (Hendel et al.,
# ICL prompts in the task's template) *replacing* the last-token state at the output of block $L/2$ (and its
# difference form *added* there), the Function Vector *added* there. Accuracy: the top-1 token over the whole
# vocabulary equals the gold answer's first token.
#
# (ch08-table-middle)=

# %%
METHODS = {"ltv": "LTV", "vanilla_tv": "Vanilla TV", "vanilla_tv_difference": "Vanilla TV diff.",
           "function_vector": "FV"}
shot_cols = [f"{k}-shot ICL" for k in prof.icl_shots]
cols = ["zero-shot", *shot_cols, *METHODS]
frames = {}
for name, r in results.items():
    df = pd.DataFrame({t: {c: r["table"][t][c] for c in cols} for t in plan["table"]}).T.astype(float)
    df.loc["average"] = df.mean(skipna=False)
    frames[name] = df.rename(columns=METHODS)
table = pd.concat(frames, axis=1)
paper_row = {(m, METHODS[k]): v for m in model_list for k, v in
             (("ltv", 83.49), ("vanilla_tv", 37.80), ("function_vector", 37.30))}
table.loc["paper, Llama-3.1-8B (average)"] = pd.Series(paper_row)
display(Markdown("**Table 8.4.** Accuracy (%) at the middle layer ("
                 + ", ".join(f"{m}: layer {results[m]['mid']}" for m in model_list) + "). LTV: the recipe scaled "
                 "to the model's stream (scale " + ", ".join(f"{m} {results[m]['scale']:g}" for m in model_list)
                 + "; Table 8.5 shows the book's recipe as is). The paper's averages (Llama-3.1-8B, seven tasks) "
                 "are repeated under each model for reference."))
display(table.round(1))
missing = {(m, t): r["table"][t]["missing"] for m, r in results.items() for t in plan["table"] if r["table"][t]["missing"]}
full_icl = {(m, t): r["table"][t]["icl_path"] for m, r in results.items() for t in plan["table"]
            if "full" in r["table"][t]["icl_path"].values()}
if missing or full_icl:
    display(Markdown(
        "".join(f"- {m}, {t}: {', '.join(f'{k} not computed ({why})' for k, why in v.items())}.\n"
                for (m, t), v in missing.items())
        + "".join(f"- {m}, {t}: ICL prompts longer than the sliding window, evaluated with full forwards.\n"
                  for (m, t) in full_icl)
    ))

# %% [markdown]
# (ch08-fig-middle)=

# %%
avg = {m: frames[m].loc["average"] for m in model_list}
best_icl = {m: max(shot_cols, key=lambda c: avg[m][c]) for m in model_list}
bars = ["zero-shot", "best ICL", *METHODS.values()]
fig, ax = plt.subplots(figsize=(9, 3.6))
width = 0.8 / (len(model_list) + 1)
x = np.arange(len(bars))
for i, m in enumerate(model_list):
    vals = [avg[m]["zero-shot"], avg[m][best_icl[m]], *(avg[m][v] for v in METHODS.values())]
    ax.bar(x + (i - len(model_list) / 2) * width, vals, width, label=m)
paper = [np.nan, np.nan, 83.49, 37.80, np.nan, 37.30]
ax.bar(x + (len(model_list) - len(model_list) / 2) * width, paper, width, color="lightgrey", edgecolor="black",
       label="paper, Llama-3.1-8B")
ax.set_xticks(x, [b.replace(" (", "\n(") for b in bars], fontsize=8)
ax.set_xlabel("method (vectors at the middle layer, last position)")
ax.set_ylabel("accuracy (%), average over tasks")
ax.set_ylim(0, 100)
ax.legend(fontsize=8)
ax.set_title(f"Middle-layer accuracy by model, average over {', '.join(plan['table'])}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure 8.1.** Accuracy at the middle layer averaged over the table's tasks, per model: zero-shot, the best
# ICL setting, the LTV (recipe scaled to the model's stream), the Vanilla TV (replace and difference forms) and
# the FV. Grey: the paper's averages on Llama-3.1-8B over its seven tasks (no zero-shot,
# ICL or difference-form number is given there).

# %% [markdown]
# ## Why the step size matters: the size of the residual stream
#
# The RMS per coordinate of the residual stream entering each block (last token, 32 Antonym prompts), and the
# size of the middle-layer LTVs relative to it, trained with the scaled recipe and with the book's recipe as is
# (the second on Antonym alone in the `cpu` profile, where one more Gemma LTV costs about a minute; on every
# task in `paper`).
#
# (ch08-fig-stream)=

# %%
fig, ax = plt.subplots(figsize=(7, 3.4))
for m in model_list:
    rms = results[m]["stream_rms"]
    ax.plot(np.array(list(rms)) / results[m]["L"], list(rms.values()), "o-", ms=3, label=m)
ax.axhline(6.15, color="grey", lw=0.8, ls=":", label="reference (SmolLM2, layer 15)")
ax.set_yscale("log")
ax.set_xlabel("block $l$ / number of layers")
ax.set_ylabel("RMS of the residual stream entering block $l$")
ax.set_title("Residual-stream size by depth", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure 8.2.** RMS per coordinate of the residual stream entering each block (log scale), against relative
# depth. The dotted line marks the stream's size where the book's LTV recipe was tuned (SmolLM2, layer 15). A
# vector of a given norm is a smaller perturbation in a larger stream.

# %%
norm_rows = {}
for m, r in results.items():
    h = r["stream_rms"][r["mid"]] * np.sqrt(arch[m]["d_model"])  # |h| at the middle layer
    for t in plan["unscaled"]:
        row = r["table"][t]
        norm_rows[m, t] = {"scale": r["scale"], "learning rate": r["lr"], "|θ| / |h| (scaled)": row["ltv_norm"] / h,
                           "|θ| / |h| (unscaled)": row["ltv_book_norm"] / h, "accuracy (scaled)": row["ltv"],
                           "accuracy (unscaled)": row["ltv_book"]}
norms = pd.DataFrame(norm_rows).T
norms.index.names = ["model", "task"]
display(Markdown("**Table 8.5.** The middle-layer LTV's norm relative to the residual stream it is added to "
                 "($|h|$: RMS times $\\sqrt{d}$ at the middle layer), with the scaled and the unscaled recipe, "
                 "and their test accuracies (%); zero-shot accuracy for reference."))
norms["zero-shot"] = [results[m]["table"][t]["zero-shot"] for m, t in norms.index]
display(norms.round(3))
display(Markdown("; ".join(
    f"`{m}`: stream RMS at the middle layer {results[m]['stream_rms'][results[m]['mid']]:.1f} (scale "
    f"{results[m]['scale']:g}, learning rate {results[m]['lr']:g}); the unscaled recipe's LTVs are "
    f"{100 * norms.loc[m, '|θ| / |h| (unscaled)'].median():.1f} % of the stream's norm and reach "
    f"{norms.loc[m, 'accuracy (unscaled)'].mean():.1f} %, the scaled recipe's "
    f"{100 * norms.loc[m, '|θ| / |h| (scaled)'].median():.1f} % and {norms.loc[m, 'accuracy (scaled)'].mean():.1f} % "
    f"(zero-shot {norms.loc[m, 'zero-shot'].mean():.1f} %; {', '.join(plan['unscaled'])})"
    for m in model_list) + "."))

# %% [markdown]
# **Is the FV the same object on both architectures?** `ltvlib` builds an FV as $\sum_{(l,h)} W_O^{l,h}\,\bar a_{l,h}$
# over its top heads (Todd et al.'s definition: what those heads write into the residual stream, given their
# mean outputs $\bar a$). On Llama-type models that sum *is* what the heads write. Gemma 3 normalises each
# attention output ($g_l \odot x / \mathrm{rms}(x)$, `post_attention_layernorm`) before adding it to the
# stream, so what the same heads write is that sum passed through the norm's Jacobian at the layer's mean
# attention output (`ltvlib.across_models.function_vector_write`). The table compares the two.

# %%
fv_scale = pd.DataFrame({(m, t): v for m, r in results.items() for t, v in r["fv_write"].items()}).T
if len(fv_scale):
    fv_scale.index.names = ["model", "task"]
    display(Markdown("**Table 8.6.** Norm of the FV as built, of what its heads write into the stream (first "
                     "order), their ratio and cosine. A ratio far from 1 means the FV is injected at a size its "
                     "heads never write."))
    display(fv_scale.round(3))
    ratio = fv_scale["norm_ratio"].groupby(level="model").median()
    off = [m for m in ratio.index if abs(np.log(ratio[m])) > np.log(1.5)]
    display(Markdown(
        "Median ratio of the FV's norm to what its heads write: " + ", ".join(f"{m} **{ratio[m]:.2g}**"
                                                                            for m in ratio.index) + ". "
        + (f"On {', '.join(off)} the FV of the tables above is a vector of another size than the one its heads "
           "write, so its accuracy says little about function vectors on that architecture (the library's fix is "
           "described in `tests/test_gemma3_known_issues.py`)." if off else
           "It is close to 1 on every model: each FV is injected at the size its heads write.")))
else:
    display(Markdown("No Function Vector could be computed on these models (see Table 8.4)."))

# %% [markdown]
# ## A short layer sweep
#
# The same vectors across depth. The LTVs (one trained per layer, with the model's scaled recipe) at every layer
# in the `paper` profile and, to save training time, at the three layers of the linear reconstruction below
# (nearest $L/4$, $L/2$, $3L/4$) otherwise; the extracted vectors (one extraction per task, injected at each
# layer) at chapter 01's layers and at the LTVs' layers, so that each LTV is compared with them at its own
# layer. The x-axis is the depth as a fraction of the model's layers, so models of different depths share it.
#
# (ch08-fig-sweep)=

# %%
STYLE = {
    "ltv": {"label": "LTV", "color": "C3", "marker": "o", "zorder": 3},
    "vanilla_tv": {"label": "Vanilla TV (replace)", "color": "C0", "marker": "s"},
    "vanilla_tv_difference": {"label": "Vanilla TV (difference)", "color": "C0", "marker": "s", "ls": "--",
                              "mfc": "none"},
    "function_vector": {"label": "FV", "color": "C2", "marker": "^"},
}
n_rows = len(plan["sweep"])
fig, axes = plt.subplots(n_rows, len(model_list), figsize=(4.6 * len(model_list), 3.3 * n_rows), sharey=True,
                         squeeze=False)
for i, task in enumerate(plan["sweep"]):
    for j, m in enumerate(model_list):
        ax, r = axes[i, j], results[m]
        for method, style in STYLE.items():
            pts = sorted(r["sweep"][task][method].items())
            if pts:
                ls, acc = zip(*pts)
                ax.plot(np.array(ls) / r["L"], acc, ms=4, lw=1.2, **style)
        row = r["table"].get(task)
        if row is not None:
            ax.axhline(row["zero-shot"], color="grey", lw=1, ls=":", label="zero-shot")
            best = max(shot_cols, key=lambda c: row[c])
            ax.axhline(row[best], color="black", lw=1, ls="-.", label=best)
        ax.axvline(r["mid"] / r["L"], color="grey", lw=0.5)
        ax.set_title(f"{task}, {m} ({r['L']} layers)", fontsize=9)
        ax.set_xlabel("injection layer / number of layers")
        ax.set_ylim(-3, 103)
    axes[i, 0].set_ylabel("accuracy (%)")
axes[0, 0].legend(fontsize=7)
fig.suptitle(f"Learned against extracted task vectors across depth ({prof.name} profile)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure 8.3.** First-token accuracy with one vector injected at the last token of layer $l$ (x: $l/L$):
# LTV (input of block $l$), Vanilla TV (replace, solid; difference, dashed) and FV (both at the output of
# block $l$). Horizontal lines: zero-shot and the best ICL setting; the thin vertical line marks the middle
# layer. One column per model.

# %% [markdown]
# ## Key heads against random heads
#
# Chapter 04's experiment on each model: the saliency $S(l,h) = |a_{l,h}\cdot\partial p(y\mid x,\theta)/\partial
# a_{l,h}|$ of every head at the last position with the middle-layer LTV injected (averaged over held-out
# validation queries), the top 10 % of all heads as key heads, and their outputs at the last position zeroed
# or replaced by their mean, against as many heads drawn at random from the others. The LTV is the one of the
# middle-layer table (scaled recipe). Models differ in head count: Gemma-3-270M has 72 heads (18 layers of 4),
# so its key-head set is 7 heads; SmolLM2-135M has 270 heads and 27 key heads.

# %%
kh_cols = {"ltv": "LTV θ", "key_zero": "key, zero", "random_zero": "random, zero", "random_zero_sd": "random, zero (sd)",
           "key_mean": "key, mean", "random_mean": "random, mean", "random_mean_sd": "random, mean (sd)"}
kh_frames = {}
for m, r in results.items():
    df = pd.DataFrame({t: {c: r["key_heads"][t][c] for c in kh_cols} for t in plan["key_heads"]}).T.astype(float)
    df.loc["average"] = df.mean()
    kh_frames[m] = df.rename(columns=kh_cols)
kh = pd.concat(kh_frames, axis=1)
kh.loc["paper, Llama-3.1-8B (average)"] = pd.Series(
    {(m, c): v for m in model_list for c, v in (("LTV θ", 83.0), ("key, zero", 51.0), ("random, zero", 78.0))})
display(Markdown("**Table 8.7.** Accuracy (%) of the middle-layer LTV alone and with heads ablated at the last "
                 "position" + "".join(f"; {m}: {results[m]['key_heads'][plan['key_heads'][0]]['n_key']} key heads of "
                                      f"{results[m]['key_heads'][plan['key_heads'][0]]['n_heads']}"
                                      for m in model_list if plan["key_heads"])
                 + f". Random: mean and standard deviation over {sizes.n_random} draws. The paper does not say "
                 "whether it zero- or mean-ablates; its numbers sit in the zero columns."))
display(kh.round(1))

# %% [markdown]
# (ch08-fig-key-heads)=

# %%
fig, ax = plt.subplots(figsize=(9, 3.4))
groups = ["LTV θ", "key, zero", "random, zero", "key, mean", "random, mean"]
x = np.arange(len(groups))
width = 0.8 / (len(model_list) + 1)
for i, m in enumerate(model_list):
    a = kh_frames[m].loc["average"]
    err = [0, 0, a["random, zero (sd)"], 0, a["random, mean (sd)"]]
    ax.bar(x + (i - len(model_list) / 2) * width, [a[g] for g in groups], width, yerr=err, capsize=2, label=m)
ax.bar(x + (len(model_list) - len(model_list) / 2) * width, [83.0, 51.0, 78.0, np.nan, np.nan], width,
       color="lightgrey", edgecolor="black", label="paper, Llama-3.1-8B")
ax.set_xticks(x, groups)
ax.set_xlabel("heads ablated at the last position (ablation mode)")
ax.set_ylabel("accuracy (%), average over tasks")
ax.set_ylim(0, 100)
ax.legend(fontsize=8)
ax.set_title(f"Ablating key heads against random heads, average over {', '.join(plan['key_heads'])}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure 8.4.** Accuracy of the middle-layer LTV alone and with the key heads (top 10 % by saliency) or as
# many random heads zeroed or mean-ablated at the last position, averaged over tasks; whiskers: standard
# deviation over the random draws (of the task average of each draw's accuracy, averaged over tasks).

# %% [markdown]
# ## Linear reconstruction at three layers
#
# Chapter 05's measurement: a matrix $W$ fitted so that the shift of the residual stream entering the final
# norm (last token) caused by adding $\theta + \lambda\varepsilon$ at the input of block $l$ is $\approx
# W(\theta + \lambda\varepsilon)$; then $W\theta$ is *added* to the final norm's input instead of $\theta$ at
# block $l$ (and, the other reading of "the last layer", at the input of the last block). Polar decomposition
# $W = QS$: $\cos(\theta, Q\theta)$ measures the rotation (1: none), $\|S\theta\|/\|\theta\|$ the stretch.
#
# (ch08-table-linearity)=

# %%
lin_cols = {"ltv": "LTV", "w_theta": "Wθ (final norm)", "w_theta_last_block": "Wθ (block L-1)",
            "zero_shot": "zero-shot", "r2_heldout": "R² held-out", "explained": "explained",
            "cos_theta_Qtheta": "cos(θ, Qθ)", "stretch": "|Sθ|/|θ|"}
lin_rows = []
for m, r in results.items():
    for t in plan["linearity"]:
        for layer, v in r["linearity"][t].items():
            lin_rows.append({"model": m, "task": t, "layer": layer, "depth l/L": layer / r["L"],
                             **{c: v[k] for k, c in lin_cols.items()}})
lin = pd.DataFrame(lin_rows).set_index(["model", "task", "layer"])
display(Markdown("**Table 8.8.** Per model, task and injection layer: accuracy (%) of the LTV, of $W\\theta$ at "
                 "the final norm's input and at the last block's input, and zero-shot; the fit's held-out $R^2$ and "
                 "explained fraction, the rotation $\\cos(\\theta, Q\\theta)$ and the stretch. Fit sizes: "
                 f"{linearity_config(prof).n_queries} training queries, $2d$ perturbations."))
display(lin.round(2))

# %% [markdown]
# (ch08-fig-linearity)=

# %%
fig, axes = plt.subplots(1, len(model_list), figsize=(4.6 * len(model_list), 3.4), sharey=True, squeeze=False)
for ax, m in zip(axes[0], model_list):
    for i, t in enumerate(plan["linearity"]):
        sub = lin.loc[(m, t)]
        d = sub["depth l/L"]
        ax.plot(d, sub["LTV"], "o-", color=f"C{i}", label=f"{t}: LTV")
        ax.plot(d, sub["Wθ (final norm)"], "s--", color=f"C{i}", mfc="none", label=f"{t}: Wθ at the final norm")
        ax.plot(d, sub["Wθ (block L-1)"], "^-.", color=f"C{i}", mfc="none", lw=1, label=f"{t}: Wθ at block L-1")
        ax.plot(d, sub["zero-shot"], ":", color=f"C{i}", lw=1, label=f"{t}: zero-shot")
    ax.set_title(m, fontsize=10)
    ax.set_xlabel("injection layer / number of layers")
    ax.set_ylim(-3, 103)
axes[0, 0].set_ylabel("test accuracy (%)")
axes[0, 0].legend(fontsize=7)
fig.suptitle("The LTV against its linear reconstruction, per model", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure 8.5.** Test accuracy of the LTV injected at block $l$ (solid), of its linear reconstruction $W\theta$
# added to the residual stream entering the final norm (dashed) or entering the last block (dash-dotted), and
# zero-shot (dotted), at three depths per model.

# %% [markdown]
# ## What we measured, and how it compares
#
# The cell below is computed from the numbers above; Table 8.9 then applies each claim's criterion to each
# model, the criteria chapters 01, 04 and 05 apply to the default model.

# %%
CRITERIA = {
    "middle": "LTV above every extracted vector (middle layer, task average)",
    "middle_book": "the same with the book's unscaled recipe, on each task it was trained for",
    "sweep": "LTV above every extracted vector at every swept (task, layer) point",
    "key": "key heads cost over 3x the points of random heads (zero ablation)",
    "key10": "key heads cost at least 10 points (zero ablation)",
    "linear": "Wθ within 10 points of the LTV at most layers where the LTV works",
    "rotation": "cos(θ, Qθ) higher at the deepest layer than at the shallowest (chapter 05's check)",
}


def over(tasks):
    """'average over N tasks', or the task's name when there is one."""
    return f"average over {len(tasks)} tasks" if len(tasks) > 1 else tasks[0]


def pct(v):
    """A percentage for the text, or 'not computed' for a missing value."""
    return "not computed" if v is None or not np.isfinite(v) else f"{v:.1f} %"


crit, stats, lines = {}, {}, []
for m in model_list:
    a, r = avg[m], results[m]
    best_ext = np.nanmax([a[METHODS[k]] for k in EXTRACTED])
    c = {"middle": a["LTV"] > best_ext,
         "middle_book": all(r["table"][t]["ltv_book"] > np.nanmax([frames[m].loc[t, METHODS[k]] for k in EXTRACTED])
                            for t in plan["unscaled"]) if plan["unscaled"] else None}
    st = {}
    wins = [t for t in plan["table"]
            if frames[m].loc[t, "LTV"] > np.nanmax([frames[m].loc[t, METHODS[k]] for k in EXTRACTED])]
    pts = [(t, l) for t in plan["sweep"] for l in r["sweep"][t]["ltv"]
           if any(l in r["sweep"][t][k] for k in EXTRACTED)]
    above = [(t, l) for t, l in pts
             if r["sweep"][t]["ltv"][l] > max(r["sweep"][t][k].get(l, -1.0) for k in EXTRACTED)]
    st["sweep"] = (len(above), len(pts))
    c["sweep"] = len(above) == len(pts) if pts else None
    lines.append(f"**{m}** ({r['L']} layers, middle layer {r['mid']}, LTV recipe scale {r['scale']:g}):")
    lines.append(
        f"- *Middle layer* ({over(plan['table'])}): LTV **{pct(a['LTV'])}** (unscaled recipe: "
        + ", ".join(f"{t} {pct(r['table'][t]['ltv_book'])}" for t in plan["unscaled"])
        + f"), Vanilla TV **{pct(a['Vanilla TV'])}** (difference form "
        f"{pct(a['Vanilla TV diff.'])}), FV **{pct(a['FV'])}**; zero-shot {pct(a['zero-shot'])}, {best_icl[m]} "
        f"{pct(a[best_icl[m]])}. The LTV beats every extracted vector on {len(wins)} of {len(plan['table'])} tasks"
        + (f" (not on {', '.join(t for t in plan['table'] if t not in wins)})" if len(wins) < len(plan["table"]) else "")
        + f" and is {'above' if a['LTV'] >= a[best_icl[m]] else 'below'} the best ICL setting on average. "
        "Paper (Llama-3.1-8B, seven tasks): 83.49 / 37.80 / 37.30 %.")
    if pts:
        lines.append(f"- *Layer sweep* ({', '.join(plan['sweep'])}): the LTV beats every extracted vector at "
                     f"{len(above)} of {len(pts)} (task, layer) points where both were measured.")
    if plan["key_heads"]:
        k_av = kh_frames[m].loc["average"]
        key_drop = k_av["LTV θ"] - k_av["key, zero"]
        rand_drop = k_av["LTV θ"] - k_av["random, zero"]
        st["key"] = (k_av["LTV θ"], k_av["key, zero"], k_av["random, zero"])
        c["key"], c["key10"] = key_drop > 3 * max(rand_drop, 1.0), key_drop >= 10
        lines.append(
            f"- *Key heads* ({over(plan['key_heads'])}): zeroing the key heads takes the LTV from "
            f"**{k_av['LTV θ']:.1f} %** to **{k_av['key, zero']:.1f} %** (mean-ablated {k_av['key, mean']:.1f} %), "
            f"as many random heads to **{k_av['random, zero']:.1f} %** ({k_av['random, mean']:.1f} %): a drop of "
            f"{key_drop:.1f} against {rand_drop:.1f} points (paper: 32 against 5). "
            + ("Key heads matter far more than random ones, as in the paper." if c["key"] else
               "Here the key heads are not clearly more important than random heads."))
    n_works = n_close = 0
    rising = []
    for t in plan["linearity"]:
        sub = lin.loc[(m, t)]
        works = sub[sub["LTV"] > sub["zero-shot"] + 10]
        close = works[(works["LTV"] - works["Wθ (final norm)"]).abs() <= 10]
        n_works, n_close = n_works + len(works), n_close + len(close)
        cos = sub["cos(θ, Qθ)"].to_numpy()
        rising.append(bool(cos[-1] > cos[0]) if len(cos) > 1 else None)
        st.setdefault("cos", {})[t] = dict(zip(sub.index, sub["cos(θ, Qθ)"]))
        lines.append(
            f"- *Linear reconstruction* ({t}, layers {', '.join(map(str, sub.index))}): LTV "
            + ", ".join(f"{v:.0f}" for v in sub["LTV"]) + " %, $W\\theta$ at the final norm "
            + ", ".join(f"{v:.0f}" for v in sub["Wθ (final norm)"]) + " %, at the last block's input "
            + ", ".join(f"{v:.0f}" for v in sub["Wθ (block L-1)"]) + " %, zero-shot "
            + ", ".join(f"{v:.0f}" for v in sub["zero-shot"]) + f" %; within 10 points of the LTV at {len(close)} "
            f"of the {len(works)} layers where the LTV beats zero-shot by more than 10 points. Held-out $R^2$ "
            + ", ".join(f"{v:.2f}" for v in sub["R² held-out"]) + "; $\\cos(\\theta, Q\\theta)$ "
            + ", ".join(f"{v:.2f}" for v in sub["cos(θ, Qθ)"]) + " (paper: rises with depth).")
    st["linear"] = (n_close, n_works)
    c["linear"] = 2 * n_close > n_works if n_works else None
    c["rotation"] = all(rising) if rising and None not in rising else None
    crit[m], stats[m] = c, st
display(Markdown("\n".join(lines)))

# %% [markdown]
# (ch08-table-criteria)=

# %%
verdict_table = pd.DataFrame(
    {m: {CRITERIA[k]: "not measured" if v is None else ("yes" if v else "no") for k, v in crit[m].items()}
     for m in model_list})
display(Markdown("**Table 8.9.** Each claim's criterion, per model (computed from the tables above; "
                 "\"not measured\": this run has no point for it)."))
display(verdict_table)
same = verdict_table.nunique(axis=1) == 1
display(Markdown(
    f"The models agree on {int(same.sum())} of {len(same)} criteria"
    + (f"; they differ on: {', '.join(same.index[~same])}." if (~same).any() else ".")
))

# %% [markdown]
# ## Where the models agree, where not, and why we think so
#
# - **The LTV recipe is not scale-free.** Adam moves each coordinate by about the learning rate per step, not
#   by an amount proportional to the gradient, so a learning rate tuned on one model carries over to another
#   only if their residual streams have similar sizes; Figure 8.2 shows how different they are, and Table 8.5
#   what the book's unscaled recipe and the scaled one give on each model. Whether the paper adjusted its
#   learning rate per model is not stated in what we could read. On a new architecture, look at the stream's
#   size before reading an LTV's failure as the method's.
# - **Function vectors on Gemma 3.** Table 8.6 compares the FV as the library builds it ($\sum W_O\bar a$)
#   with what its heads write into the stream, through Gemma's attention-output norm. Where their ratio is far
#   from 1, the FV column measures a vector of another size than Todd et al.'s method would inject, not the
#   method itself; the Vanilla TV, a state taken from the stream itself, has no such problem.
# - **What transfers by construction.** An LTV is optimised for the metric we score, on the model we score, at
#   the layer we inject, so wherever a model can do a task at all its LTV is expected to beat vectors estimated
#   from ICL activations; that is the paper's first claim, and whether it holds on a second architecture is
#   mainly a question of whether the extracted vectors do any better there. Table 8.9 answers it per model.
# - **Absolute levels are the models', not the method's.** Both models are 30 to 60 times smaller than
#   Llama-3.1-8B, and SmolLM2-135M is the instruction-tuned variant (the embedded Gemma file carries no chat
#   template or fine-tuning tag); zero-shot and ICL accuracy, and with them the ceiling of the extracted
#   vectors, differ between them for reasons unrelated to task vectors. Compare methods within a model, and
#   the *ordering* of methods across models.
# - **Key heads on a model with few heads.** Gemma-3-270M's 72 heads make 10 % a set of 7 heads, and each
#   head is 256 dimensions wide, more than a third of its residual stream (SmolLM2: 64 of 576). Removing a few
#   wide heads is a coarser intervention than removing many narrow ones, so both the key and the random
#   ablation can hurt more on Gemma. Gemma also normalises the attention output before it joins the stream,
#   so zeroing one head rescales the others' contribution: ablation is not a pure subtraction there.
# - **Linearity and depth.** The layers near $L/4$, $L/2$ and $3L/4$ of an 18-layer model leave 14, 9 and 4
#   blocks for the vector to pass through, against 22, 15 and 6 on SmolLM2's layers 8, 15 and 24: the same
#   relative depth, fewer nonlinear steps. Chapter 05 discusses why one map serves all queries only for tasks
#   whose answer does not depend on the query, which holds on any model.
# - **Sliding-window attention.** Gemma 3 attends over the last 512 tokens in 15 of its 18 layers. The
#   library's cached-prefix paths (training, evaluation, key heads, linearity) are exact for prompts shorter
#   than the window (Table 8.2) and refuse longer ones with an error; the `cpu` profile's two tasks stay
#   below it even with 10 demonstrations (a note under Table 8.4 lists any ICL reference that had to fall
#   back). With `profile=paper`, 10-shot RTE and some 10-shot SNLI prompts exceed it: their ICL references are
#   then computed with full forwards (exact, slower) and a Function Vector whose 10-shot extraction prompts
#   exceed it is reported as not computed.
#
# ## What differs from the paper, and why
#
# - **Models.** Two models of 135 M and 268 M parameters instead of the paper's 1-34 B models; on a GPU the
#   chapter runs any list of supported checkpoints (Llama, Mistral, Qwen2, Gemma 3), e.g.
#   `-p models meta-llama/Llama-3.2-1B,meta-llama/Llama-3.1-8B -p profile paper`.
# - **Coverage in the `cpu` profile.** Two short-prompt tasks (Antonym, TREC) in the middle-layer table, against
#   the paper's seven; Antonym alone in the layer sweep (LTVs at three layers, extracted vectors at ten), the
#   key-head ablation and the linear reconstruction (see the top of the chapter for the cost argument).
#   `profile=paper` covers all seven tasks, every layer for the LTVs, and the paper's sizes for the extractions
#   and the fits.
# - **The LTV's learning rate and initial range are scaled per model** to the size of its residual stream
#   (our addition, exactly neutral on SmolLM2); Table 8.5 shows the unscaled recipe beside it.
# - **Everything else is chapters 01, 04 and 05's**, including their choices where the paper is silent
#   (Vanilla TV template and averaging, FV sizes in the `cpu` profile, zero and mean ablation, the noise law
#   and ridge of the linear fit); see their "what differs" sections.

# %% [markdown]
# ## Verdicts for the scorecard
#
# The rule (the same in every chapter): every check passes → reproduced, some → partly, none → not
# reproduced; no check (nothing measured in this run) → not measured. Here every claim gets one check per
# model, Table 8.9's criterion, so **reproduced** means the claim holds on every model of the run and
# **partly** on some of them. Chapters 01, 04 and 05 record the default model's verdicts with their fuller
# checks; these rows say whether each claim carries over to a second architecture.

# %%
print(f"chapter time: {time.perf_counter() - started:.0f} s")


def checks_for(*keys):
    """Table 8.9's criteria ``keys`` as named checks, one per model (left out where not measured)."""
    return {f"{m}: {CRITERIA[k]}": crit[m][k] for m in model_list for k in keys if crit[m].get(k) is not None}


def per_model(text):
    return "; ".join(f"{m}: {text(m)}" for m in model_list)


scaled = [m for m in model_list if results[m]["scale"] != 1]
recipe_note = ("LTVs trained with the recipe's learning rate and initial range scaled to each model's residual "
               "stream (" + ", ".join(f"{m} x{results[m]['scale']:g}" for m in scaled) + "; Table 8.5)."
               if scaled else "")
record_claims("08_across_models", [
    Claim(
        paper_claim=1,
        key="middle-layer-across-models",
        statement="At the middle layer the LTV beats both extracted task vectors, on each architecture tested.",
        paper="LTV 83.49 %, Vanilla TV 37.80 %, FV 37.30 % (Llama-3.1-8B, seven-task average; the paper reports "
              "eight models of the Llama, Qwen2.5 and Yi families)",
        ours=per_model(lambda m: f"LTV {pct(avg[m]['LTV'])}, Vanilla TV {pct(avg[m]['Vanilla TV'])} (difference "
                                 f"{pct(avg[m]['Vanilla TV diff.'])}), FV {pct(avg[m]['FV'])}")
             + f" ({len(plan['table'])}-task average, middle layer)",
        checks=checks_for("middle"),
        evidence="ch08-fig-middle",
        evidence_title="Figure 8.1",
        note=recipe_note,
    ),
    Claim(
        paper_claim=1,
        key="layer-sweep-across-models",
        statement="The LTV beats the extracted task vectors at every injection layer, on each architecture tested.",
        paper="LTV above Vanilla TV and FV at every layer (Llama-3.1-8B, Figure 2)",
        ours=per_model(lambda m: f"LTV above every extracted vector at {stats[m]['sweep'][0]} of "
                                 f"{stats[m]['sweep'][1]} (task, layer) points")
             + f" ({', '.join(plan['sweep'])})",
        checks=checks_for("sweep"),
        evidence="ch08-fig-sweep",
        evidence_title="Figure 8.3",
    ),
    Claim(
        paper_claim=3,
        key="key-heads-across-models",
        statement="Ablating the top 10 % of heads by saliency hurts far more than ablating as many random heads, "
                  "on each architecture tested.",
        paper="83 % → 51 % ablating key heads, 78 % ablating random heads (Llama-3.1-8B)",
        ours=(per_model(lambda m: "{:.1f} % → {:.1f} % key heads, {:.1f} % random heads".format(*stats[m]["key"]))
              + f" (zero ablation, {', '.join(plan['key_heads'])})") if plan["key_heads"] else "not measured",
        checks=checks_for("key", "key10"),
        evidence="ch08-fig-key-heads",
        evidence_title="Figure 8.4",
    ),
    Claim(
        paper_claim=4,
        key="linear-reconstruction-across-models",
        statement="Wθ injected at the last layer does about what the LTV does, on each architecture tested.",
        paper="Wθ at the last layer gives an accuracy close to the LTV's at most layers (Llama models; figure)",
        ours=per_model(lambda m: "Wθ within 10 points of the LTV at {} of {} layers where the LTV works".format(
            *stats[m]["linear"])) + f" ({', '.join(plan['linearity'])}, {len(sizes.linearity_fractions)} layers per model)",
        checks=checks_for("linear"),
        evidence="ch08-fig-linearity",
        evidence_title="Figure 8.5",
    ),
    Claim(
        paper_claim=4,
        key="rotation-depth-across-models",
        statement="cos(θ, Qθ) rises with depth (early vectors rotated, late ones stretched), on each architecture "
                  "tested.",
        paper="cos(θ, Qθ) rises with depth (Llama models; figure)",
        ours=per_model(lambda m: "; ".join(
            f"{t} " + " → ".join(f"{v:.2f} (L{l})" for l, v in cos.items())
            for t, cos in stats[m].get("cos", {}).items()) or "not measured"),
        checks=checks_for("rotation"),
        evidence="ch08-table-linearity",
        evidence_title="Table 8.8",
    ),
], model=model, profile=profile, seed=seed)
