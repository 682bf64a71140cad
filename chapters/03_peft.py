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
# # The LTV as parameter-efficient fine-tuning
#
# **The claim** (the paper's PEFT comparison, SST-2 on Llama-3.1-8B): a learned task vector is a cheap
# fine-tuning method. With a comparable number of trainable parameters it beats prefix tuning and LoRA:
#
# | method | parameters (paper) | SST-2 accuracy | seconds per step |
# |---|---|---|---|
# | prefix tuning | d | 85.67 % | 0.050 |
# | LoRA | 2d | 91.63 % | 0.053 |
# | LTV | d | **92.89 %** | **0.049** |
#
# and the peak inference memory of the three is about equal (16.3 GB). The paper does not give the adapters'
# configurations; the book reads "d" as one virtual token and "2d" as rank-1 LoRA on one projection.
#
# This chapter trains the LTV and three `peft` adapters (LoRA, prefix tuning, prompt tuning) on the same
# zero-shot prompts, with the same loss, the same batches and the same early stopping, at the paper's
# parameter budgets and at the adapters' usual settings, on SST-2 and two more of the paper's tasks, and
# measures accuracy and cost side by side.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"
tasks = None  # default: SST-2, Antonym and TREC (SST-2 and Antonym in the smoke profile)
usual_settings = True  # also train the adapters at their customary sizes

# %%
import time

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from ltvlib.models import load_model
from ltvlib.peft_compare import (
    compare_sizes,
    compare_task,
    equal_budget_methods,
    library_ltv_result,
    parameter_formula,
    usual_methods,
)
from ltvlib.profiles import get_profile
from ltvlib.scorecard import Claim, record_claims

started = time.perf_counter()
prof = get_profile(profile)
sizes = compare_sizes(prof)
sched = sizes.schedule
task_list = list(tasks) if tasks else (["sst2", "antonym"] if prof.name == "smoke" else ["sst2", "antonym", "trec"])
lm = load_model(model, device=device)
g = lm.geometry
# Usual settings: LoRA rank 8 on every task in the cpu profile; prefix tuning and prompt tuning with 10 virtual
# tokens too in the paper profile (see "Why these sizes" below); the smoke profile trains the equal budgets
# only, to stay within its two minutes.
usual = usual_methods(lm, prompt_tuning=prof.name == "paper") if usual_settings and prof.name != "smoke" else []
usual = usual if prof.name == "paper" else usual[:1]
methods = equal_budget_methods(lm) + usual
display(Markdown(
    f"**Model** `{lm.name}`: {lm.n_layers} layers, d = {lm.d_model}, {g.n_heads} query heads and "
    f"{g.n_kv_heads} key/value heads of {g.head_dim}. **Profile** `{prof.name}`: {sizes.n_train} training "
    f"queries, {sizes.n_val} validation queries, {sizes.n_test or 'all'} test queries per task; batches of "
    f"{sched.batch_size}, {sched.samples_per_epoch} queries per epoch, at most {sched.epochs} epochs, early "
    f"stopping with patience {sched.patience} on validation accuracy; inference in batches of {sizes.eval_batch}. "
    f"Tasks: {', '.join(task_list)}. Methods: {', '.join(m.name for m in methods)}."
))

# %% [markdown]
# **Why these sizes.** The whole book has to build in about 90 minutes on two CPU cores, so the `cpu` run of
# this chapter is held to about 8-10 minutes. Unlike the book's own LTV training, which computes each prompt's
# prefix once and then runs only the blocks after the vector, every method here pays a full forward and backward
# pass of the model per step (that is what makes the step times comparable). Measured single-threaded on the
# book's machine, a training step of batch 8 costs 2-4 CPU seconds on SST-2 (prompts up to 65 tokens), about 1 s
# on Antonym and 1.3 s on TREC (on SST-2: LTV 2.5 s, rank-1 LoRA 2.2 s, prompt tuning 3.2 s, prefix tuning
# 3.4 s, means of three steps); with validation and test inference, one method on the three tasks costs about 130
# CPU seconds. So the `cpu` profile trains **five methods** (the four equal budgets and LoRA rank 8, the
# most common usual setting) on **SST-2 and two short-prompt tasks, Antonym (generation) and TREC (six-way
# classification)**, for at most **3 epochs of 6 batches of 8** (18 steps), validating on 24 queries and testing
# on 64, with peak memory measured on SST-2 in five fresh processes: about 650 CPU seconds of training and
# evaluation, 90 s of memory measurement and 45 s for the book's own LTV training (`LTV (train_ltv)` below),
# about 13 minutes of single-threaded CPU time, which two cores should bring to 8-10 minutes (an estimate: the
# sizes were chosen while other work shared the cores; the chapter prints its own time at the end).
# Prefix and prompt tuning with ten virtual tokens (the other usual settings) would add about two minutes each
# and are trained in the `paper` profile, which uses the LTV's full fast recipe on every method (GPU).

# %% [markdown]
# ## The methods and their budgets
#
# Every method is trained by the same loop (`ltvlib.peft_compare.train_and_measure`):
#
# - **Same prompts and loss.** Zero-shot prompts `Q: {x}\nA:`, the gold answer's tokens after them (teacher
#   forcing), loss = mean negative log-likelihood over the answer's tokens, averaged over the batch: the
#   LTV's loss (`ltvlib.ltv.answer_loss`).
# - **Same batches.** `batch_schedule` draws exactly the query indices that `train_ltv` draws with the same
#   seed (a test checks it), so every method sees the same batches in the same order.
# - **Same optimiser and stopping rule.** AdamW (weight decay 0.01), the learning rate decayed linearly to 0
#   over the maximum number of steps, validation accuracy after every epoch, stop after `patience` epochs
#   without improvement (2 in every profile), keep the best epoch's parameters. Only the learning rate is the
#   method's own (see the table; none was tuned for this chapter).
# - **Same metric.** First-token accuracy over the full vocabulary at the last prompt position.
#
# Where each adapter acts and how many parameters it has ($L$ layers, width $d$, $H$ query heads and
# $H_{kv}$ key/value heads of size $h$):
#
# - **LTV**: one vector of size $d$ added to the residual stream entering the middle block at the last
#   prompt position: $d$.
# - **Prompt tuning** (`peft.PromptTuningConfig`, initialised from random vocabulary embeddings): $n$
#   virtual tokens before the prompt: $n\,d$. With $n = 1$ this is the paper's budget $d$.
# - **Prefix tuning** (`peft.PrefixTuningConfig`, no reparametrisation): $n$ virtual keys and values in every
#   layer: $n \cdot 2 L H_{kv} h$. `peft` initialises them with $N(0, 1)$ entries, far from the model's own
#   keys and values (on Antonym that raised the loss from 7.5 to 10 and left validation accuracy at 0 for the
#   whole short schedule); we overwrite them, before training, with the keys and values the model computes for
#   $n$ random vocabulary tokens (Li and Liang's initialisation from real activations). With one virtual token that is already $2 L H_{kv} h$, twenty times $d$ on
#   SmolLM2-135M ($2 \times 30 \times 3 \times 64 = 11{,}520$): `peft`'s prefix tuning cannot be made as small
#   as $d$, so the paper's "prefix tuning with d parameters" is closer to prompt tuning.
# - **LoRA** (`peft.LoraConfig`, no dropout, $\alpha = 2r$): $W x + \frac{\alpha}{r} B A x$ on chosen
#   projections, $r\,(d_{in} + d_{out})$ per projection. The paper's "2d" budget: rank 1 on `o_proj`
#   ($d_{in} = H h$, $d_{out} = d$) of the middle layer, $H h + d$, which is $2d$ when $H h = d$ (SmolLM2,
#   Llama). The usual setting: rank 8 on `q_proj`, `k_proj`, `v_proj` and `o_proj` of every layer.

# %%
rows = []
for m in methods:
    n, formula = parameter_formula(lm, m)
    rows.append({"method": m.name, "budget": m.budget, "trainable parameters": n, "in units of d": n / lm.d_model,
                 "formula": formula, "learning rate": m.lr})
display(pd.DataFrame(rows).set_index("method"))

# %% [markdown]
# The parameter counts above come from the formulas; the measured counts (the adapters' trainable tensors
# as `peft` builds them) are in the result tables below and must be equal (`tests/test_peft_compare.py`
# checks both on tiny models).
#
# **Two LTV rows.** `ltv` is trained in the same loop as the adapters, with full forwards through the model
# (the library's `PromptRunner` without prefix caching), so its time per step is comparable with theirs.
# `LTV (train_ltv)` is the book's own LTV training on the same batches: `ltvlib.ltv.train_ltv`, which
# caches the prompts' keys and values and starts each step at the injection layer. Where the comparison's
# sizes and schedule equal the profile's (the `paper` profile), it is `ltvlib.experiments.profile_ltv`, the
# vector the other chapters use; otherwise `train_ltv` is called directly with the comparison's splits and
# schedule. Its seconds include validation.
#
# **How cost is measured.** Median seconds per training step over the same batches (forward, backward,
# optimiser step); steps and training seconds (validation excluded) until the best validation accuracy;
# inference latency per test example (next-token logits only, in the batches given above); peak memory: on a GPU
# `torch.cuda.max_memory_allocated`, on a CPU the peak resident set size of a **fresh Python process** per
# method that loads the model, runs one inference batch of test prompts (peak reset), then two training
# steps (peak reset before them), so that no method inherits the freed memory of another. The resident size
# includes the model's weights and the Python runtime. Memory is measured on the first task (SST-2, the task
# the paper reports it for).

# %%
t0 = time.perf_counter()
results, library = {}, {}
for task in task_list:
    t_task = time.perf_counter()
    # Peak memory (a fresh process per method) on the first task only: the paper reports it for SST-2.
    results[task] = compare_task(lm, task, methods, sizes, seed=seed, memory=task == task_list[0])
    library[task] = library_ltv_result(lm, task, sizes, seed=seed, profile=prof)
    print(f"{task}: {time.perf_counter() - t_task:.0f} s")
print(f"all tasks: {time.perf_counter() - t0:.0f} s")


# %% [markdown]
# (ch03-tables)=

# %%
def table_for(task):
    out = {}
    for r in results[task]:
        out[r["method"]] = {
            "budget": r["budget"], "params": r["trainable_params"],
            "params = formula": r["trainable_params"] == r["formula_params"],
            "test acc. %": 100 * r["test_accuracy"],
            "label acc. %": 100 * r["test_label_accuracy"] if r["test_label_accuracy"] is not None else None,
            "best val. %": 100 * r["best_val_accuracy"], "steps": r["steps"], "steps to best": r["steps_to_best"],
            "s to best": r["seconds_to_best"], "s / step (median)": r["median_step_seconds"],
            "ms / example (inference)": r["latency_ms"],
            "peak train MB": r.get("peak_train_mb"), "peak inference MB": r.get("peak_infer_mb"),
        }
    lib = library[task]
    out["LTV (train_ltv)"] = {
        "budget": "equal", "params": lm.d_model, "params = formula": True,
        "test acc. %": 100 * lib["test_accuracy"],
        "label acc. %": 100 * lib["test_label_accuracy"] if lib["test_label_accuracy"] is not None else None,
        "best val. %": 100 * lib["best_val_accuracy"], "steps": lib["steps"],
        "s / step (median)": lib["train_seconds"] / max(lib["steps"], 1),
    }
    return pd.DataFrame(out).T


tables = {task: table_for(task) for task in task_list}
for task in task_list:
    display(Markdown(f"### {task}  ({results[task][0]['n_test']} test queries)"))
    display(tables[task].round(3))
base = results[task_list[0]][0]
display(Markdown(
    f"Memory: {base.get('memory_method') or 'not measured'}"
    + (f"; the model alone (loaded, before any batch) holds {base['base_mb']:.0f} MB resident." if base.get("base_mb") else ".")
    + " The `LTV (train_ltv)` row's seconds per step is its total training time, validation included, over"
    " its steps; it came from " + ", ".join(sorted({f"`{library[t]['source']}`" for t in task_list}))
    + " (see above)."
))

# %% [markdown]
# ## Beside the paper's SST-2 numbers
#
# (ch03-table-sst2)=

# %%
if "sst2" in tables:
    t = tables["sst2"]
    equal = [m.name for m in methods if m.budget == "equal"]
    side = pd.DataFrame({
        "ours: test acc. %": t.loc[equal + ["LTV (train_ltv)"], "test acc. %"].astype(float),
        "ours: params": t.loc[equal + ["LTV (train_ltv)"], "params"],
        "ours: s / step": t.loc[equal + ["LTV (train_ltv)"], "s / step (median)"].astype(float),
    })
    paper_rows = {"ltv": (92.89, "d", 0.049), "prefix-1": (85.67, "d", 0.050)}
    lora_name = next(m.name for m in methods if m.kind == "lora" and m.budget == "equal")
    paper_rows[lora_name] = (91.63, "2d", 0.053)
    side["paper: acc. %"] = [paper_rows.get(i, (None,) * 3)[0] for i in side.index]
    side["paper: params"] = [paper_rows.get(i, (None,) * 3)[1] for i in side.index]
    side["paper: s / step"] = [paper_rows.get(i, (None,) * 3)[2] for i in side.index]
    display(side.round(3))
else:
    display(Markdown("SST-2 is not among this run's tasks."))

# %% [markdown]
# ## Validation accuracy against training time
#
# (ch03-fig-curves)=

# %%
styles = {"ltv": ("C3", "-", "o"), "prompt_tuning": ("C2", "-", "^"), "prefix_tuning": ("C0", "-", "s"),
          "lora": ("C1", "-", "D")}
fig, axes = plt.subplots(1, len(task_list), figsize=(4.6 * len(task_list), 3.6), squeeze=False)
for ax, task in zip(axes[0], task_list):
    for r in results[task]:
        color, _, marker = styles[r["kind"]]
        ls = "-" if r["budget"] == "equal" else "--"
        x = [c["train_seconds"] for c in r["curve"]]
        y = [100 * c["val_accuracy"] for c in r["curve"]]
        ax.plot(x, y, color=color, ls=ls, marker=marker, ms=4, lw=1.3, mfc=color if ls == "-" else "none",
                label=f"{r['method']} ({r['trainable_params']:,})")
    ax.set_xlabel("training time (s, validation excluded)")
    ax.set_title(task, fontsize=10)
    ax.set_ylim(-3, 103)
axes[0, 0].set_ylabel("validation accuracy (%)")
axes[0, -1].legend(fontsize=7, loc="lower right", title="method (trainable parameters)", title_fontsize=7)
fig.suptitle(f"Validation accuracy against training time, {lm.name} ({prof.name} profile, {lm.device.type})")
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure 3.1.** Validation accuracy after each epoch against the cumulative training time (forward,
# backward and optimiser steps; validation passes excluded), per task. Solid lines: the paper's parameter
# budgets (LTV d, prompt tuning with one virtual token d, prefix tuning with one virtual token
# $2 L H_{kv} h$, rank-1 LoRA on one projection of the middle layer $\approx 2d$); dashed, open markers:
# the adapters' usual settings. The first point of each line is the untrained model's (adapter at its
# initialisation). A line ends where early stopping ended training.

# %% [markdown]
# ## What we measured, and how it compares
#
# The cell below is computed from the tables above.

# %%
def row(task, name):
    return next(r for r in results[task] if r["method"] == name)


eq = [m.name for m in methods if m.budget == "equal"]
lora1 = next(m.name for m in methods if m.kind == "lora" and m.budget == "equal")
lines = []
for task in task_list:
    accs = {n: 100 * row(task, n)["test_accuracy"] for n in eq}
    best = max(accs, key=accs.get)
    speed = {n: row(task, n)["median_step_seconds"] for n in eq}
    lines.append(
        f"- **{task}**, equal budgets: " + ", ".join(f"{n} {a:.1f} %" for n, a in accs.items())
        + f" (best: {best}); LTV (train_ltv) {100 * library[task]['test_accuracy']:.1f} %. Median seconds per "
        "step: " + ", ".join(f"{n} {s:.3f}" for n, s in speed.items()) + "."
    )
    usual_names = [m.name for m in methods if m.budget == "usual"]
    if usual_names:
        lines.append("  Usual settings: " + ", ".join(
            f"{n} {100 * row(task, n)['test_accuracy']:.1f} % ({row(task, n)['trainable_params']:,} params, "
            f"{row(task, n)['median_step_seconds']:.3f} s/step)" for n in usual_names) + ".")
    lines.append("  Training seconds to the best validation accuracy (steps): " + ", ".join(
        f"{n} {row(task, n)['seconds_to_best']:.0f} s ({row(task, n)['steps_to_best']})" for n in eq + usual_names) + ".")
wins = [t for t in task_list if all(row(t, "ltv")["test_accuracy"] >= row(t, n)["test_accuracy"] for n in eq)]
fastest = [t for t in task_list if all(row(t, "ltv")["median_step_seconds"] <= row(t, n)["median_step_seconds"] for n in eq)]
lines.append(
    f"- The LTV has the best (or tied best) test accuracy among the equal-budget methods on {len(wins)} of {len(task_list)} "
    f"tasks ({', '.join(wins) or 'none'}) and the cheapest training step on {len(fastest)} of "
    f"{len(task_list)} ({', '.join(fastest) or 'none'})."
)
if "sst2" in task_list:
    s = {n: 100 * row("sst2", n)["test_accuracy"] for n in ("ltv", "prefix-1", lora1)}
    order_ours = sorted(s, key=s.get)
    lines.append(
        "- SST-2, the paper's ordering prefix < LoRA < LTV (85.67 < 91.63 < 92.89 %): ours is "
        + " <= ".join(f"{n} ({s[n]:.1f} %)" for n in order_ours)
        + (" - the same ordering." if order_ours == ["prefix-1", lora1, "ltv"] else " - a different ordering.")
    )
mem = [t for t in task_list if row(t, "ltv").get("peak_infer_mb")]
if mem:
    t = mem[0]
    lines.append(
        f"- Peak memory ({t}): inference " + ", ".join(
            f"{n} {row(t, n)['peak_infer_mb']:.0f} MB" for n in eq) + "; training " + ", ".join(
            f"{n} {row(t, n)['peak_train_mb']:.0f} MB" for n in eq) + "."
    )
display(Markdown("\n".join(lines)))
print(f"chapter time: {time.perf_counter() - started:.0f} s")

# %% [markdown]
# ## Where it agrees, where not, and why we think so
#
# - **Parameter budgets are not all equal.** Only prompt tuning with one virtual token has exactly the LTV's
#   $d$ parameters. `peft`'s prefix tuning puts a key and a value in *every* layer, so its smallest
#   configuration has $2 L H_{kv} h$ parameters (20 $d$ on SmolLM2-135M; on Llama-3.1-8B, 32 layers with 8
#   key/value heads of 128, $2 \cdot 32 \cdot 1024 = 65{,}536 = 16 d$); the paper's
#   "prefix tuning with $d$ parameters" cannot be `peft`'s prefix tuning as released, so we report the
#   closest `peft` method at $d$ (prompt tuning) beside it.
# - **Where each method acts.** The LTV and rank-1 LoRA act on one layer; prompt and prefix tuning act
#   through attention in every layer. The LTV writes the task directly into the last token's residual
#   stream at the middle of the network; a prompt token has to be *read* by the later tokens' attention
#   before it changes anything, which is harder to learn in few steps.
# - **Cost per step.** A step's cost is dominated by the frozen model's forward and backward passes, so
#   the methods cost about the same per step when each runs full forwards, as the paper's 0.049 / 0.050 /
#   0.053 s suggest. The differences come from how far back the gradient must flow (the LTV and rank-1 LoRA
#   at the middle layer need no gradient through the first half of the network; prompt tuning needs it
#   down to the embeddings) and from the extra tokens prompt and prefix tuning add. The book's own LTV
#   training adds what only the LTV can use: the prompt's keys and values up to the injection layer do not
#   depend on the vector, so they are computed once (`LTV (train_ltv)` row).
# - **Memory.** The adapters are tiny next to the model, so peak memory is the model plus activations;
#   the paper's "about equal" is what we expect, up to the activations of the extra virtual tokens and, for
#   `peft`'s prefix tuning, the batch's own keys and values, which the model appends to the cache object
#   that carries the prefix (every other method runs without a key/value cache).
#
# ## What differs from the paper, and why
#
# - **Model and scale.** SmolLM2-135M on CPU instead of Llama-3.1-8B on a GPU: absolute accuracies and
#   seconds are not comparable with the paper's, only the orderings are.
# - **Schedule in the `cpu` profile.** Every method here costs a full forward and backward pass of the
#   model per step (SST-2 prompts run to 65 tokens), so the `cpu` profile trains with batches of 8 and at
#   most 3 epochs of 48 queries (18 steps, 144 samples against the paper recipe's 1,000), validates on 24
#   queries and tests on 64, to fit about 8-10 minutes on two CPU cores (SST-2, with the longest prompts,
#   takes over half of it); the `paper` profile uses the LTV's full fast recipe (batches of 16, 8 epochs of
#   128 queries, 600/400 training/validation queries, the whole test split). So short a schedule favours the
#   methods that learn fastest, and the adapters are known to need more steps than that; small validation
#   sets make early stopping noisy; with 64 test queries a difference of 12 points is within noise (the 95 %
#   interval of one accuracy near 50 % is about +-12 points).
# - **Learning rates.** The LTV's (0.1) was chosen on Antonym for the fast recipe; the adapters use
#   the high end of their customary ranges (prompt and prefix tuning 3e-2, LoRA 1e-2), because the
#   schedules are short; none was tuned here (at LoRA's more usual 1e-3, rank-1 LoRA barely moved its loss
#   in the `cpu` profile's steps). A learning-rate sweep per method is the first thing to add before
#   reading much into any one method's loss.
# - **Configurations.** The paper does not state its adapters' configurations; the budgets above are our
#   reading. Prefix and prompt tuning with 10 virtual tokens are trained only in the `paper` profile
#   (`ltvlib.peft_compare.usual_methods`); the `cpu` profile's usual setting is LoRA rank 8.
# - **Positions.** `peft`'s own forward drops `position_ids` for prompt tuning, so with left padding the
#   distance between the virtual tokens and the prompt would change with the padding; we run `peft`'s
#   prompt encoder and the base model with positions that skip the padding (tested: a prompt's logits do
#   not depend on its batch-mates). Prefix tuning and LoRA run through `PeftModel.forward`.
# - **`peft` with transformers 5.** Prefix tuning still passes its virtual keys and values as
#   `past_key_values`, which transformers 5 accepts with a deprecation warning (renamed to `cache`); a
#   test checks that the prefix really changes the output.

# %% [markdown]
# ## Verdicts for the scorecard
#
# The rule (the same in every chapter): every check passes → reproduced, some → partly, none → not
# reproduced. Accuracy: on SST-2, is the LTV at least as accurate as prefix tuning and rank-1 LoRA (the
# paper's comparison), and is it the best or tied best equal-budget method on most tasks? Cost: is its
# training step the cheapest (or tied) among the equal-budget methods on most tasks, and, where memory was
# measured, is the peak inference memory of the equal-budget methods within 10 % of each other?

# %%
acc_checks, acc_ours = {}, []
if "sst2" in task_list:
    sst = {n: 100 * row("sst2", n)["test_accuracy"] for n in ("ltv", "prefix-1", lora1)}
    acc_checks["SST-2: LTV at least as accurate as prefix tuning and rank-1 LoRA"] = sst["ltv"] >= max(
        sst["prefix-1"], sst[lora1])
    acc_ours.append("SST-2: " + ", ".join(f"{n} {a:.1f} %" for n, a in sst.items()))
acc_checks["LTV best or tied best among the equal-budget methods on most tasks"] = 2 * len(wins) > len(task_list)
acc_ours.append(f"LTV best or tied on {len(wins)} of {len(task_list)} tasks ({', '.join(task_list)})")
step_task = "sst2" if "sst2" in task_list else task_list[0]
cost_checks = {"LTV's median training step the cheapest (or tied) among the equal-budget methods on most tasks":
               2 * len(fastest) > len(task_list)}
cost_ours = [f"{step_task}: " + ", ".join(f"{n} {row(step_task, n)['median_step_seconds']:.3f} s/step" for n in eq)]
if mem:
    peaks = [row(mem[0], n)["peak_infer_mb"] for n in eq]
    cost_checks["peak inference memory of the equal-budget methods within 10 % of each other"] = (
        max(peaks) <= 1.1 * min(peaks))
    cost_ours.append(f"peak inference memory {min(peaks):.0f}-{max(peaks):.0f} MB ({mem[0]})")
record_claims("03_peft", [
    Claim(
        paper_claim=5,
        key="accuracy",
        statement="With as few trainable parameters, the LTV is at least as accurate as prefix tuning and LoRA.",
        paper="SST-2: LTV 92.89 % (d parameters), LoRA 91.63 % (2d), prefix tuning 85.67 % (d) (Llama-3.1-8B)",
        ours="; ".join(acc_ours),
        checks=acc_checks,
        evidence="ch03-table-sst2" if "sst2" in task_list else "ch03-tables",
        evidence_title="SST-2 beside the paper" if "sst2" in task_list else "the per-task tables",
    ),
    Claim(
        paper_claim=5,
        key="cost",
        statement="The LTV is cheap: its training step is no slower than the adapters', and peak memory is about equal.",
        paper="0.049 s/step (LTV) against 0.050 (prefix tuning) and 0.053 (LoRA); peak inference memory about "
              "16.3 GB for all three (Llama-3.1-8B, SST-2)",
        ours="; ".join(cost_ours),
        checks=cost_checks,
        evidence="ch03-tables",
        evidence_title="the per-task tables",
    ),
], model=model, profile=profile, seed=seed)
