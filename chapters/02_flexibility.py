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
# # Flexibility: other positions, several layers, an ICL prompt
#
# **The claim** (the paper's second, its Table 1): a learned task vector (LTV) is *flexible*. Trained for
# a site, it works there: at a position other than the last token, at the last five positions, at several
# layers at once, at several layers and positions at once, and on top of an 8-shot ICL prompt, while the
# extracted vectors (Vanilla TV, Hendel et al. 2023; Function Vectors, Todd et al. 2024), moved to the same
# sites, mostly collapse. The paper also finds that LTVs have "no critical depth": they still work when
# injected in the last layers, where extracted vectors fail.
#
# The paper's Table 1 (Llama-3.1-8B, average over seven tasks, first-token accuracy in %):
#
# | method | P={-1}, L={16} | P={4} | P={-5..-1} | L={0,4,...} | multi-layer+multi-position | + 8-shot ICL prompt |
# |---|---|---|---|---|---|---|
# | Vanilla TV | 37.80 | 2.16 | 17.97 | 19.18 | 18.15 | 56.12 |
# | FV | 37.30 | 2.68 | 31.88 | 6.05 | 0.38 | 74.78 |
# | LTV | 83.49 | 78.39 | 86.43 | 82.44 | 51.39 | 84.61 |
#
# This chapter trains one LTV per setting and task, moves both extracted vectors to the same sites, and
# scores all of them on the same test prompts.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"
tasks = None  # None: the profile's choice (ltvlib.flexibility.FLEX_SIZES)

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from ltvlib.experiments_extracted import extracted_sizes
from ltvlib.flexibility import (
    PAPER_TABLE1,
    flex_sizes,
    late_settings,
    setting_result,
    table1_settings,
)
from ltvlib.models import load_model
from ltvlib.profiles import get_profile
from ltvlib.scorecard import Claim, record_claims

prof = get_profile(profile)
sizes = extracted_sizes(prof)
started = time.perf_counter()
lm = load_model(model, device=device)
mid = lm.middle_layer
flex = flex_sizes(prof)
task_list = tuple(tasks) if tasks else flex.tasks
settings = table1_settings(lm.n_layers, icl_shots=flex.icl_shots)
late = late_settings(lm.n_layers, flex.n_late)
display(Markdown(
    f"**Model** `{lm.name}` ({lm.n_layers} layers, middle layer {mid}). **Profile** `{prof.name}`: tasks "
    f"{', '.join(task_list)}; LTVs trained on {prof.n_train} queries (validation {prof.n_val}, recipe "
    f"`{prof.recipe.recipe}`), tested on {prof.n_test} zero-shot and {prof.n_test_icl} {flex.icl_shots}-shot "
    "queries per task." + (" (The smoke profile uses 2-shot prompts for the ICL setting.)" if flex.icl_shots != 8 else "")
))
display(pd.DataFrame([
    {"setting": s.name, "sites (P = positions, L = layers)": s.label, "layers": len(s.layers),
     "positions": len(s.positions), "LTV vectors": s.n_sites, "shots": s.shots,
     "paper's column": s.paper_column or "(text only)"}
    for s in settings + late
]).set_index("setting"))

# %% [markdown]
# ## The settings, and where each vector goes
#
# **Positions** count like everywhere in the book (`ltvlib.inject`): a non-negative position counts from
# the prompt's first token (0 = the first token, the BOS when the tokenizer adds one; SmolLM2 adds none), a
# negative one back from the last token (-1 = the last). The paper's P={4} is position 4 from the start: in
# the zero-shot prompt `Q: {x}\nA:` of a one-token query (tokens `Q`, `:`, ` x`, `\n`, `A`, `:`) that is the
# `A`, one token before the end; with a longer query it is a token of the query. The paper does not say how
# it counts; on Llama-3.1 (which adds a BOS) the same index lands one token earlier in the prompt.
#
# **Layers.** The paper's table writes the multi-layer set as L={0,4,...}, its text as every second layer;
# we measure both (`every4` is the table's column, `every2` the text's). The "multi-layer + multi-position"
# setting crosses the every-4th-layer set with the last five positions.
#
# **The three methods in a multi-site setting** (`ltvlib.flexibility.extracted_edits`):
#
# - **LTV**: one independent vector per (layer, position) pair, all trained jointly, *added* at the input
#   of each block. In the ICL setting it is trained on 8-shot prompts (the demonstrations' keys and values
#   are cached once per demonstration block); beside it we also inject the zero-shot-trained baseline LTV
#   on the same 8-shot prompts.
# - **Vanilla TV**: the extraction records the ICL prompts' mean last-token state leaving *every* block,
#   so at each layer of a setting we use *that layer's* state; at several positions the same layer's state
#   goes to each of them (there is one state per layer, the last token's). Main row: Hendel et al.'s form,
#   the state **replaces** the residual stream at the output of the block; second row: the ICL-minus-zero-
#   shot difference **added** there (the form the LTV paper writes). The ICL prompts use the task's
#   `Q:/A:` template, so all methods share test prompts (chapter 1 also shows Hendel's own template).
# - **FV**: one vector per task, the same vector **added** at the output of every block and position of
#   the setting, so a setting with $n$ sites adds it $n$ times (the natural reading of "inject the FV at
#   these layers"; it makes the FV's multi-layer collapse in the paper unsurprising).
#
# The LTV enters at the *input* of block $l$, the extracted vectors at its *output* (each method at its
# own paper's site, as in chapter 1).

# %% [markdown]
# ## Measuring every setting
#
# Each `setting_result` call trains (or reads from the shared cache) the setting's LTV through
# `ltvlib.experiments.profile_ltv`, scores it with `ltv_accuracy`, and evaluates the extracted vectors at the
# same sites on the same test prompts.

# %%
t0 = time.perf_counter()
results = {}  # (task, setting name) -> result dict
for task in task_list:
    for s in settings + late:
        results[task, s.name] = setting_result(lm, task, prof, s, seed=seed)
print(f"all settings: {time.perf_counter() - t0:.0f} s")

METHODS = {
    "ltv": "LTV",
    "vanilla_tv": "Vanilla TV (replace)",
    "vanilla_tv_difference": "Vanilla TV (difference)",
    "function_vector": "FV",
    "none": "no vector",
}


def acc(task, name, method):
    return 100 * results[task, name][method]["accuracy"]


# %% [markdown]
# ## The measured Table 1
#
# Rows: methods; columns: settings; values: first-token accuracy (%) on the test queries, averaged over the
# tasks (per task below). "no vector" is the prompt alone: zero-shot, or k-shot ICL in the last column.
#
# (ch02-table1)=

# %%
cols = [s.name for s in settings]
measured = pd.DataFrame(
    {s.name: {METHODS[m]: np.mean([acc(t, s.name, m) for t in task_list]) for m in METHODS} for s in settings}
)
icl_name = settings[-1].name
zs_row = f"LTV trained zero-shot, on the {flex.icl_shots}-shot prompt"
measured.loc[zs_row] = np.nan
measured.loc[zs_row, icl_name] = np.mean(
    [100 * results[t, icl_name]["ltv_zero_shot_trained"]["accuracy"] for t in task_list]
)
measured.columns = [f"{s.name}: {s.label}" for s in settings]
paper_rows = {}
for m, label in (("vanilla_tv", "Vanilla TV"), ("function_vector", "FV"), ("ltv", "LTV")):
    paper_rows[f"paper: {label}"] = [PAPER_TABLE1[m].get(s.paper_column, np.nan) if s.paper_column else np.nan
                                     for s in settings]
paper = pd.DataFrame(paper_rows, index=measured.columns).T
display(Markdown(f"**Ours** ({lm.name}, average over {', '.join(task_list)}):"))
display(measured.round(1))
display(Markdown("**Paper** (Llama-3.1-8B, average over seven tasks; `every2` has no column in the table):"))
display(paper.round(1))

# %%
per_task = pd.DataFrame({
    (t, METHODS[m]): {s.name: acc(t, s.name, m) for s in settings} for t in task_list for m in METHODS
}).T
display(Markdown("**Per task** (rows: task and method; columns: settings):"))
display(per_task.round(1))
cost = pd.DataFrame({
    s.name: {
        "LTV vectors": s.n_sites,
        "training steps (mean)": np.mean([results[t, s.name]["ltv"]["steps"] for t in task_list]),
        "training seconds (mean)": np.mean([results[t, s.name]["ltv"]["train_seconds"] for t in task_list]),
        "validation accuracy (mean %)": np.mean([100 * results[t, s.name]["ltv"]["val_accuracy"] for t in task_list]),
    }
    for s in settings + late
})
display(Markdown("**What the LTVs cost** (wall time on this machine, when the vector was first trained):"))
display(cost.round(1))

# %% [markdown]
# ## Verdict per column
#
# The paper's claim for each column has two parts: (a) the LTV beats both extracted vectors there, and (b)
# the LTV keeps most of its baseline accuracy when moved to the new sites (in the paper it keeps at least
# 94 % of its baseline in every column but "multi-layer + multi-position", where it keeps 62 %). The cell
# below checks both on our averages, with "keeps" read as at least 90 % of our baseline LTV's accuracy,
# and compares the direction of each extracted vector's change from its own baseline with the paper's.
#
# (ch02-verdicts)=

# %%
def share(x, of):
    """x / of, NaN when ``of`` is 0 (a baseline LTV at 0 % has no share to keep)."""
    return x / of if of else np.nan


avg = {s.name: {m: np.mean([acc(t, s.name, m) for t in task_list]) for m in METHODS} for s in settings}
base = avg["baseline"]
rows = []
for s in settings:
    a = avg[s.name]
    best_ex = max(a["vanilla_tv"], a["vanilla_tv_difference"], a["function_vector"])
    beats = a["ltv"] > best_ex
    keeps = a["ltv"] >= 0.9 * base["ltv"]
    row = {"setting": s.name, "LTV": a["ltv"], "best extracted": best_ex, "(a) LTV beats both": beats,
           "LTV / its baseline": share(a["ltv"], base["ltv"]), "(b) LTV keeps >= 90 %": keeps}
    if s.paper_column:
        p = {m: PAPER_TABLE1[m][s.paper_column] for m in PAPER_TABLE1}
        p_beats = p["ltv"] > max(p["vanilla_tv"], p["function_vector"])
        p_keeps = p["ltv"] >= 0.9 * PAPER_TABLE1["ltv"]["P={-1}, L={16}"]
        agree = int(beats == p_beats) + int(keeps == p_keeps)  # numpy bools: + would be a logical or
        row["paper: (a), (b)"] = f"{'yes' if p_beats else 'no'}, {'yes' if p_keeps else 'no'}"
        row["verdict"] = {2: "reproduced", 1: "partly", 0: "not reproduced"}[agree]
    else:
        row["paper: (a), (b)"] = "(text only)"
        row["verdict"] = "reproduced" if beats and keeps else ("partly" if beats or keeps else "not reproduced")
    rows.append(row)
verdicts = pd.DataFrame(rows).set_index("setting")
display(verdicts.round(2))

# %% [markdown]
# ## No critical depth: the last quarter of the network
#
# The paper's point: an LTV injected in the last layers still steers the model, while an extracted vector
# there no longer does. The same comparison at the middle layer and at late layers of our model (the last
# quarter, from layer $\lfloor 3L/4 \rfloor$).
#
# (ch02-fig-late)=

# %%
depth = [("baseline", mid)] + [(s.name, s.layers[0]) for s in late]
panels = [*task_list, None] if len(task_list) > 1 else list(task_list)  # None: the average over tasks
fig, axes = plt.subplots(1, len(panels), figsize=(max(5.0, 3.6 * len(panels)), 3.4), sharey=True, squeeze=False)
STYLE = {
    "ltv": {"color": "C3", "marker": "o"},
    "vanilla_tv": {"color": "C0", "marker": "s"},
    "vanilla_tv_difference": {"color": "C0", "marker": "s", "ls": "--", "mfc": "none"},
    "function_vector": {"color": "C2", "marker": "^"},
}
x = [l for _, l in depth]
for ax, task in zip(axes[0], panels):
    for m, style in STYLE.items():
        if task is None:
            y = [np.mean([acc(t, n, m) for t in task_list]) for n, _ in depth]
        else:
            y = [acc(task, n, m) for n, _ in depth]
        ax.plot(x, y, label=METHODS[m], ms=4, lw=1.2, **style)
    zero = np.mean([acc(t, "baseline", "none") for t in task_list]) if task is None else acc(task, "baseline", "none")
    ax.axhline(zero, color="grey", lw=1, ls=":", label="zero-shot")
    ax.axvspan((3 * lm.n_layers) // 4 - 0.5, lm.n_layers - 0.5, color="grey", alpha=0.1)
    ax.set_title(task or "average over tasks", fontsize=10)
    ax.set_xlabel("injection layer $l$")
    ax.set_xticks(x)
    ax.set_ylim(-3, 103)
axes[0, 0].set_ylabel("accuracy (%)")
axes[0, 0].legend(fontsize=7)
fig.suptitle(f"Middle and late layers, {lm.name} ({prof.name} profile)")
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure 2.1.** First-token accuracy on zero-shot test prompts with one vector injected at the last token
# of layer $l$: the middle layer and the late layers (shaded: the last quarter of the network). LTV (trained
# for that layer, added at the input of block $l$), Vanilla TV (replace, solid; difference, dashed; at the
# output of block $l$) and FV (added at the output of block $l$). Dotted: zero-shot accuracy. With
# several tasks, the last panel averages over them.

# %% [markdown]
# ## What we measured
#
# The cell below is computed from the tables above.

# %%
late_avg = {m: np.mean([acc(t, s.name, m) for t in task_list for s in late]) for m in METHODS}
icl = avg[icl_name]
icl0 = np.mean([100 * results[t, icl_name]["ltv_zero_shot_trained"]["accuracy"] for t in task_list])
reproduced = [n for n, v in verdicts["verdict"].items() if v == "reproduced"]
not_reproduced = [n for n, v in verdicts["verdict"].items() if v != "reproduced"]
lines = [
    (f"- **Baseline** (P={{-1}}, L={{{mid}}}): LTV {base['ltv']:.1f} %, Vanilla TV {base['vanilla_tv']:.1f} % "
     f"(difference form {base['vanilla_tv_difference']:.1f} %), FV {base['function_vector']:.1f} %, zero-shot "
     f"{base['none']:.1f} %. Paper: 83.49 / 37.80 / 37.30 %."),
    *[(f"- **{s.name}** ({s.label}): LTV {avg[s.name]['ltv']:.1f} % ({100 * share(avg[s.name]['ltv'], base['ltv']):.0f} % "
       f"of its baseline), Vanilla TV {avg[s.name]['vanilla_tv']:.1f} % (difference "
       f"{avg[s.name]['vanilla_tv_difference']:.1f} %), FV {avg[s.name]['function_vector']:.1f} %"
       + (f"; paper {PAPER_TABLE1['ltv'][s.paper_column]:.2f} / {PAPER_TABLE1['vanilla_tv'][s.paper_column]:.2f} / "
          f"{PAPER_TABLE1['function_vector'][s.paper_column]:.2f} %" if s.paper_column else "")
       + f". Verdict: **{verdicts.loc[s.name, 'verdict']}**.") for s in settings[1:]],
    (f"- **On the {flex.icl_shots}-shot prompt** the prompt alone reaches {icl['none']:.1f} %; the LTV trained on "
     f"{flex.icl_shots}-shot prompts "
     f"{icl['ltv']:.1f} %, the zero-shot-trained LTV injected there {icl0:.1f} %."),
    (f"- **Late layers** ({', '.join(str(s.layers[0]) for s in late)}): LTV {late_avg['ltv']:.1f} % on average, "
     f"Vanilla TV {late_avg['vanilla_tv']:.1f} % (difference {late_avg['vanilla_tv_difference']:.1f} %), FV "
     f"{late_avg['function_vector']:.1f} %, zero-shot {late_avg['none']:.1f} %."),
    (f"- Columns reproduced (both parts of the claim as in the paper): {', '.join(reproduced) or 'none'}; "
     f"the others: {', '.join(not_reproduced) or 'none'}."),
]
display(Markdown("\n".join(lines)))
print(f"chapter time: {time.perf_counter() - started:.0f} s")

# %% [markdown]
# ## Where it agrees, where not, and why we think so
#
# - **Learning adapts to the site; extraction does not.** An LTV is optimised for the exact sites it is
#   injected at, so it can use a position that is not the last token (the information must then travel to
#   the last token through attention, which the gradient takes into account) and several layers at once.
#   An extracted vector is a record of what ICL writes into the *last* token at *one* layer; copied to an
#   earlier position it replaces or shifts a state that attention reads very differently, and added at many
#   layers (the FV) it is added many times. The paper's collapse of the extracted vectors in those
#   columns is what this predicts, and the tables above show whether it happens here.
# - **Several layers and positions at once.** More vectors are not easier to train: with 40 vectors the
#   fast recipe's learning rate and step budget are the same as for one vector, and the paper's LTV drops
#   too in that column (to 51 %). Where ours drops, look at its training steps in the cost table: early
#   stopping can end training before the joint optimisation has settled.
# - **On top of ICL.** When the prompt already carries the task, a vector has little to add; the paper's
#   LTV gains little over ICL there, and the extracted vectors mostly leave ICL's accuracy in place. A
#   135M model's 8-shot ICL is much weaker than Llama-3.1-8B's, so there is more room for a vector.
# - **Late layers.** A late LTV must write the answer's direction almost directly into the unembedding,
#   which a learned vector can do and an averaged hidden state of ICL prompts cannot.
#
# ## What differs from the paper, and why
#
# - **Tasks.** The `cpu` profile covers only the task(s) listed at the top, Antonym (the paper: seven
#   tasks), so its averages are one task's numbers and a verdict rests on a single task. A non-final
#   position forces full forwards in training and validation (no cached prompt prefix, no skipped early
#   blocks): the P={4} LTV of Antonym alone took about 7 CPU minutes on this machine, and the multi-layer
#   settings run every block (the cost table above has each setting's training time). Ten LTVs per task
#   would make the short-prompt tasks (Antonym, Capitalize, Capital, TREC) hours on two CPU cores. `tasks=[...]` widens the chapter; the `paper` profile
#   runs all seven (`ltvlib.flexibility.FLEX_SIZES`).
# - **Model.** SmolLM2-135M (30 layers, middle layer 15), not Llama-3.1-8B (32 layers, middle layer 16);
#   its zero-shot and ICL accuracies are far lower, so absolute numbers are not comparable; the comparison
#   is between methods on one model.
# - **Training recipe.** The LTVs use the book's `fast` recipe (`ltvlib.ltv.FAST_RECIPE`: batches of 16,
#   at most 8 epochs of 128 queries, early stopping), the same for one vector and for 40; the paper's
#   released recipe uses batch 1.
# - **Extracted vectors.** One Vanilla TV per task averaged over demonstration sets, ICL prompts in the
#   task's template, and fewer FV prompts in the `cpu` profile, as in chapter 1. How they are applied at
#   several sites is our choice (stated above); the paper does not say.
# - **Position 4** is counted from the first token of the prompt; see above for what it hits.

# %% [markdown]
# ## Verdicts for the scorecard
#
# The rule (the same in every chapter): every check passes → reproduced, some → partly, none → not
# reproduced. For each column of Table 1 the checks are the two parts above: does part (a) (the LTV beats
# both extracted vectors) come out as in the paper, and does part (b) (the LTV keeps at least 90 % of its
# baseline accuracy)? This is the rule of the verdict table, restated as checks (the cell asserts that both
# give the same verdicts). For the late layers: is the LTV above every extracted vector there, and does it
# keep 90 % of its middle-layer accuracy?

# %%
EXTRACTED = ("vanilla_tv", "vanilla_tv_difference", "function_vector")
flex_claims = []
for s in settings[1:]:
    a, n = avg[s.name], s.name
    beats = a["ltv"] > max(a[m] for m in EXTRACTED)
    keeps = a["ltv"] >= 0.9 * base["ltv"]
    ours = (f"LTV {a['ltv']:.1f} % ({100 * share(a['ltv'], base['ltv']):.0f} % of its baseline), Vanilla TV "
            f"{a['vanilla_tv']:.1f} % (difference {a['vanilla_tv_difference']:.1f} %), FV {a['function_vector']:.1f} %")
    if s.paper_column:
        p = {m: PAPER_TABLE1[m][s.paper_column] for m in PAPER_TABLE1}
        p_beats = p["ltv"] > max(p["vanilla_tv"], p["function_vector"])
        p_keeps = p["ltv"] >= 0.9 * PAPER_TABLE1["ltv"]["P={-1}, L={16}"]
        checks = {
            f"(a) LTV above both extracted vectors: {'yes' if beats else 'no'}, as in the paper "
            f"({'yes' if p_beats else 'no'})": beats == p_beats,
            f"(b) LTV keeps ≥ 90 % of its baseline: {'yes' if keeps else 'no'}, as in the paper "
            f"({'yes' if p_keeps else 'no'})": keeps == p_keeps,
        }
        paper = (f"LTV {p['ltv']:.2f} %, Vanilla TV {p['vanilla_tv']:.2f} %, FV {p['function_vector']:.2f} % "
                 f"(Table 1, {s.paper_column}; Llama-3.1-8B, seven tasks)")
    else:
        checks = {"(a) LTV above both extracted vectors": beats, "(b) LTV keeps ≥ 90 % of its baseline": keeps}
        paper = "in the text only (every second layer): the LTV keeps working, extracted vectors do not"
    claim = Claim(
        paper_claim=2,
        key=n,
        statement=f"Trained for the sites {s.label}, the LTV still works and beats extracted vectors moved there.",
        paper=paper,
        ours=ours,
        checks=checks,
        evidence="ch02-table1",
        evidence_title="the measured Table 1",
    )
    # the same rule as the verdict table above, restated as checks: both must agree
    assert claim.verdict.value == verdicts.loc[n, "verdict"], (n, claim.verdict, verdicts.loc[n, "verdict"])
    flex_claims.append(claim)
late_best = max(late_avg[m] for m in EXTRACTED)
flex_claims.append(Claim(
    paper_claim=2,
    key="late-layers",
    statement="No critical depth: an LTV still steers the model from the last quarter of the layers, where "
              "extracted vectors fail.",
    paper="in the text (no number): LTVs keep working at late layers, extracted vectors collapse",
    ours=f"late layers {', '.join(str(s.layers[0]) for s in late)}: LTV {late_avg['ltv']:.1f} % (middle layer "
         f"{base['ltv']:.1f} %), best extracted vector {late_best:.1f} %, zero-shot {late_avg['none']:.1f} %",
    checks={
        "LTV above every extracted vector at late layers, on average": late_avg["ltv"] > late_best,
        "LTV at late layers keeps ≥ 90 % of its middle-layer accuracy": late_avg["ltv"] >= 0.9 * base["ltv"],
    },
    evidence="ch02-fig-late",
    evidence_title="Figure 2.1",
))
record_claims("02_flexibility", flex_claims, model=model, profile=profile, seed=seed)
