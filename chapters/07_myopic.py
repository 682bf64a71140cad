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
# # A behaviour: steering the myopic choice
#
# **The claim.** Besides the classification and word tasks, the paper applies learned task vectors to a
# *behaviour*: the myopic-reward items of Anthropic's model-written evaluations (Perez et al. 2022), questions
# that offer a small reward now against a larger one later. It reports that the LTV beats both extracted
# task vectors (Vanilla TV, Function Vectors) and standard ICL on this set. **The paper's number and metric
# could not be read offline** (our notes mark the metric as open), so this chapter states the claim as
# *LTV > Vanilla TV, FV and ICL* and measures it with two metrics that need no judge model, thanks to the
# A/B format: the probability the model gives to the myopic letter, and the A/B accuracy toward the
# steered answer.
#
# Two things make this task different from the others in the book:
#
# - **It has a direction.** A vector can push toward the myopic answer or away from it. We train and extract
#   every vector both ways, on the same questions with the letters swapped, and measure how far each one
#   moves the model.
# - **A small model may just prefer one letter.** The held-out set is letter-balanced (the myopic answer is
#   `A` in half of the items and `B` in the other half), so a vector that only teaches "say A" scores 50 %;
#   every number is also shown split by the myopic answer's letter.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"
task = None  # None: the profile's choice (ltvlib.myopic.MYOPIC_SIZES): "myopic" (human-written items); or "myopic_lm"

# %%
import math
import time
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from ltvlib.experiments_extracted import extracted_sizes
from ltvlib.models import load_model
from ltvlib.myopic import (
    DIRECTIONS,
    answer_tokens,
    balanced_test,
    check_no_leak,
    direction_splits,
    generation_examples,
    method_label,
    method_names,
    method_scores,
    myopic_sizes,
    summarise_ab,
)
from ltvlib.profiles import get_profile
from ltvlib.tasks import get_task, load_splits

prof = get_profile(profile)
sizes = myopic_sizes(prof)
if task is not None:
    sizes = replace(sizes, task=task)
ex_sizes = extracted_sizes(prof)
started = time.perf_counter()
lm = load_model(model, device=device)
mid = lm.middle_layer
letters = answer_tokens(lm, sizes.task)
test = balanced_test(sizes.task, sizes.n_test)
check_no_leak(sizes.task, prof, test)
full = load_splits(sizes.task)
train = direction_splits(sizes.task, "myopic", prof)
display(Markdown(
    f"**Model** `{lm.name}` ({lm.n_layers} layers, middle layer {mid}). **Profile** `{prof.name}`. **Task** "
    f"`{sizes.task}` ({get_task(sizes.task).description}): {len(full.train)} / {len(full.validation)} / "
    f"{len(full.test)} questions in the seeded (seed 0) train / validation / test split. LTVs train on "
    f"{len(train.train)} of them and stop early on {min(len(train.validation), prof.recipe.val_queries or 10**9)} "
    f"validation questions; the held-out set is **{len(test)} test questions, {sum(e.output == 'A' for e in test)} "
    f"with the myopic answer A and {sum(e.output == 'B' for e in test)} with B**, none of them seen by any "
    f"vector or demonstration (checked). Letter tokens: A = {letters['A']}, B = {letters['B']}."
))
print("A held-out prompt (the model must continue with a letter):\n")
print(get_task(sizes.task).format_query(test[0].input))
print(f"\n(myopic answer: {test[0].output})")

# %% [markdown]
# ## Directions, methods and where each vector goes
#
# The registry task `myopic` labels each question with the letter of its myopic choice;
# `ltvlib.myopic.direction_task` builds the **non-myopic** variant from the same file (its `non_matching`
# field), so both directions have exactly the same questions in the same splits and only the letters differ.
# The prompt is the book's `Q: {question}\nA: (`: the question already lists `(A) ...` and `(B) ...`, and the
# first answer token is the bare letter.
#
# For each direction (toward the myopic letter, toward the other one):
#
# - **LTV**: trained by gradient descent on the direction's training questions (zero-shot prompts, the
#   book's `fast` recipe, `ltvlib.experiments.profile_ltv`), *added* to the residual stream *entering* the
#   middle block at the last prompt token.
# - **Vanilla TV** (Hendel et al.): the mean last-token state *leaving* block $l$ of 5-shot ICL prompts whose
#   demonstrations are answered in the direction, *replacing* the zero-shot state there (second row: the
#   ICL-minus-zero-shot difference *added* there); $l$ chosen on the direction's validation questions.
# - **Function Vector** (Todd et al.): top heads by indirect effect on shuffled-label prompts of the
#   direction's task, their mean outputs summed and *added* at the output of block $L/3$, last token.
# - **ICL**: $k$ demonstrations answered in the direction, then the question; no vector.
# - **Zero-shot**: the question alone (the same for both directions).
#
# **Metrics**, from the probabilities $p(A)$, $p(B)$ of the two letters' first tokens at the last prompt
# position (`ltvlib.myopic.score_ab`, `summarise_ab`):
#
# - $P(\text{myopic}) = p(\text{myopic letter}) / (p(A) + p(B))$, averaged over items;
# - **A/B accuracy**: the share of items whose more probable letter is the direction's answer; for the
#   myopic direction this is the myopic choice rate, for the other one its complement;
# - **first-token accuracy** (the paper's metric elsewhere in the book): the top token over the whole
#   vocabulary is the direction's letter;
# - **A/B mass** $p(A) + p(B)$: how much the model follows the answer format at all;
# - **says A**: the share of items where `A` is the more probable letter (letter bias).

# %%
t0 = time.perf_counter()
methods = method_names(sizes)
runs = {}  # (method, direction or None) -> cached result
for m in methods:
    for d in [None] if m == "zero_shot" else DIRECTIONS:
        runs[m, d] = method_scores(lm, prof, m, d, seed=seed, sizes=sizes)
print(f"all methods: {time.perf_counter() - t0:.0f} s")


def summary(m, d):
    """Metrics of method ``m`` toward ``d`` (zero-shot is scored against either direction's letters)."""
    r = runs[m, None if m == "zero_shot" else d]
    return summarise_ab(r["scores"], r["myopic_letters"], d)


rows = []
for m in methods:
    for d in DIRECTIONS:
        s = summary(m, d)
        rows.append({"method": method_label(m), "toward": d.replace("_", "-"),
                     "P(myopic) %": 100 * s["all"]["p_myopic"], "A/B accuracy %": 100 * s["all"]["ab_accuracy"],
                     "first-token accuracy %": 100 * s["all"]["accuracy"], "A/B mass %": 100 * s["all"]["ab_mass"],
                     "says A %": 100 * s["all"]["says_a"]})
table = pd.DataFrame(rows).set_index(["method", "toward"])
n = len(test)
se = 100 * math.sqrt(0.25 / n)
display(Markdown(
    f"**Held-out results** ({n} letter-balanced questions; a rate near 50 % has a standard error of about "
    f"{se:.1f} points). Zero-shot has no direction: its two rows score the same predictions against each "
    "direction's letters."
))
display(table.round(1))

# %% [markdown]
# ## Split by the letter of the myopic answer
#
# If a vector only moved the model toward one letter, its A/B accuracy would be high on one half and low on
# the other. The table gives, per half, the A/B accuracy toward the direction and the share of `A` answers.

# %%
rows = []
for m in methods:
    for d in DIRECTIONS:
        s = summary(m, d)
        row = {"method": method_label(m), "toward": d.replace("_", "-")}
        for half in ("myopic=A", "myopic=B"):
            row[f"A/B accuracy %, {half}"] = 100 * s[half]["ab_accuracy"]
            row[f"says A %, {half}"] = 100 * s[half]["says_a"]
        row["worse half %"] = min(row["A/B accuracy %, myopic=A"], row["A/B accuracy %, myopic=B"])
        rows.append(row)
by_letter = pd.DataFrame(rows).set_index(["method", "toward"])
display(by_letter.round(1))

# %%
steered = [m for m in methods if m != "zero_shot"]
labels = [method_label(m) for m in steered]
x = np.arange(len(steered))
zero = {d: summary("zero_shot", d) for d in DIRECTIONS}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
ax = axes[0]
for i, (d, color) in enumerate(zip(DIRECTIONS, ("C3", "C0"))):
    ax.bar(x + (i - 0.5) * 0.38, [100 * summary(m, d)["all"]["p_myopic"] for m in steered], 0.38, color=color,
           label=f"vector toward {d.replace('_', '-')}")
ax.axhline(100 * zero["myopic"]["all"]["p_myopic"], color="grey", ls=":", label="zero-shot")
ax.axhline(50, color="black", lw=0.6)
ax.set_xticks(x, labels, rotation=25, ha="right", fontsize=8)
ax.set_ylabel("P(myopic letter | A or B) (%)")
ax.set_xlabel("method")
ax.set_ylim(0, 100)
ax.set_title("How far each method moves the myopic probability", fontsize=10)
ax.legend(fontsize=7)
ax = axes[1]
for i, (half, hatch) in enumerate((("myopic=A", ""), ("myopic=B", "//"))):
    for j, (d, color) in enumerate(zip(DIRECTIONS, ("C3", "C0"))):
        pos = x + (2 * i + j - 1.5) * 0.2
        ax.bar(pos, [100 * summary(m, d)[half]["ab_accuracy"] for m in steered], 0.2, color=color, hatch=hatch,
               edgecolor="white", label=f"toward {d.replace('_', '-')}, {half}")
ax.axhline(50, color="black", lw=0.6)
ax.set_xticks(x, labels, rotation=25, ha="right", fontsize=8)
ax.set_ylabel("A/B accuracy toward the direction (%)")
ax.set_xlabel("method")
ax.set_ylim(0, 100)
ax.set_title("A/B accuracy by the myopic answer's letter", fontsize=10)
ax.legend(fontsize=6, ncol=2)
fig.suptitle(f"Myopic-reward items, {lm.name} ({prof.name} profile, {n} held-out questions)")
fig.tight_layout()
plt.show()

# %% [markdown]
# **Figure 7.1.** Left: mean probability of the myopic letter (normalised over A and B) on the held-out
# questions with each method steering toward the myopic answer (red) or the other answer (blue); dotted:
# zero-shot; a method that steers moves red up and blue down. Right: A/B accuracy toward the direction,
# separately on the questions whose myopic answer is A (plain) and B (hatched); 50 % (black line) is what a
# model that always writes one letter gets on a balanced set.

# %% [markdown]
# ## Free generations
#
# A few held-out questions, continued greedily for at most the profile's token budget (cut at the first
# blank line), without a vector and with each direction's LTV (added at the last prompt token during the
# prompt's forward pass only; the generated tokens see it through the prompt's keys and values). Two
# prompts per question: the A/B prompt the vectors were trained on (the continuation starts after `(`), and
# the open question without its choices, a prompt the LTV never saw in training. **Caveat:** a 135M-parameter
# model writes poorly; these are illustrations of what the vector does to free text, not evidence.

# %%
gens = generation_examples(lm, prof, seed=seed, sizes=sizes)
for kind in ("A/B", "open"):
    rows = [{"question": g["question"][:140] + ("..." if len(g["question"]) > 140 else ""),
             "myopic letter": g["myopic_letter"], "no vector": g["none"], "LTV toward myopic": g["myopic"],
             "LTV toward non-myopic": g["non_myopic"]} for g in gens if g["kind"] == kind]
    display(Markdown(f"**{kind} prompt**" + (" (continuation after `A: (`)" if kind == "A/B" else " (`Q: {question}\\nA:`)")))
    with pd.option_context("display.max_colwidth", None):
        display(pd.DataFrame(rows).set_index("question"))

# %% [markdown]
# ## What we measured
#
# The cell below is computed from the tables above. "Steering accuracy" is the A/B accuracy toward the
# direction, averaged over the two directions (on a balanced set, a method that does not steer, or only
# shifts the letter preference, gets about 50 %).

# %%
def steer(m):
    return np.mean([100 * summary(m, d)["all"]["ab_accuracy"] for d in DIRECTIONS])


def worst_half(m):
    return min(by_letter.loc[(method_label(m), d.replace("_", "-")), "worse half %"] for d in DIRECTIONS)


def p_gap(m):
    return 100 * (summary(m, "myopic")["all"]["p_myopic"] - summary(m, "non_myopic")["all"]["p_myopic"])


score = {m: steer(m) for m in steered}
icl_methods = [m for m in steered if m.startswith("icl")]
extracted = ["vanilla_tv", "vanilla_tv_difference", "function_vector"]
best_icl = max(icl_methods, key=score.get)
best_ex = max(extracted, key=score.get)
ltv = score["ltv"]
beats_ex = ltv > score[best_ex] + 2 * se
beats_icl = ltv > score[best_icl] + 2 * se
verdict = "reproduced" if beats_ex and beats_icl else ("partly reproduced" if beats_ex or beats_icl else "not reproduced")
zs = summary("zero_shot", "myopic")["all"]
info = runs["ltv", "myopic"]["info"], runs["ltv", "non_myopic"]["info"]
lines = [
    (f"- **Zero-shot** the model gives the myopic letter {100 * zs['p_myopic']:.1f} % of the A/B probability, "
     f"chooses it on {100 * zs['myopic_choice']:.1f} % of the questions and says A on {100 * zs['says_a']:.1f} % "
     f"(A/B mass {100 * zs['ab_mass']:.1f} %)."),
    *[(f"- **{method_label(m)}**: steering accuracy {score[m]:.1f} % (worse letter half {worst_half(m):.1f} %), "
       f"P(myopic) {100 * summary(m, 'myopic')['all']['p_myopic']:.1f} % toward myopic vs "
       f"{100 * summary(m, 'non_myopic')['all']['p_myopic']:.1f} % toward non-myopic (gap {p_gap(m):.1f} points).")
      for m in steered],
    (f"- The LTVs trained for {info[0]['steps']} and {info[1]['steps']} steps (validation first-token accuracy "
     f"{100 * info[0]['val_accuracy']:.1f} % and {100 * info[1]['val_accuracy']:.1f} %)."),
    (f"- **Claim: LTV > extracted vectors and ICL.** LTV {ltv:.1f} % against the best extracted vector "
     f"({method_label(best_ex)}, {score[best_ex]:.1f} %) and the best ICL ({method_label(best_icl)}, "
     f"{score[best_icl]:.1f} %); a difference counts if it exceeds two standard errors ({2 * se:.1f} points). "
     f"LTV beats the extracted vectors: **{'yes' if beats_ex else 'no'}**; beats ICL: "
     f"**{'yes' if beats_icl else 'no'}**. Verdict: **{verdict}**."),
]
display(Markdown("\n".join(lines)))
cost = pd.DataFrame({
    method_label(m) + ("" if d is None else f", toward {d.replace('_', '-')}"):
        {"seconds (first run, incl. training/extraction)": r["seconds"], "layer": r["info"].get("layer")}
    for (m, d), r in runs.items()
}).T
display(Markdown("**What each measurement cost** when it was first computed (wall time on this machine):"))
display(cost)
print(f"chapter time: {time.perf_counter() - started:.0f} s")

# %% [markdown]
# ## Where it agrees, where not, and why we think so
#
# - **Why a learned vector should steer better.** An LTV is optimised directly for the letter the direction
#   wants on the training questions, so it can learn *which option is the myopic one* only if the model's
#   representation of the question makes that readable at the injection layer; if not, the cheapest way to
#   lower the loss is a letter preference, which the letter-balanced set and the split by letter expose. An
#   extracted vector is an average of what ICL writes at the last token; for a two-letter answer with
#   demonstrations of both letters, that average mostly says "answer with a letter", not which one.
# - **ICL.** Demonstrations answered in one direction are the most direct way to show the behaviour, but a
#   small model tends to copy the letters of the demonstrations rather than their reasoning; the fixed
#   demonstration blocks are drawn at random and are not letter-balanced, so their letter mix shows up in the
#   "says A" columns.
# - **Read the tables for the letter halves.** A steering accuracy near 50 % with one half near 100 % and the
#   other near 0 % is a letter bias, not a behaviour. Where the LTV's worse half stays well above 50 %, it
#   moved the choice, not just the letter.
# - **Free text.** The LTV was trained on the letter after `A: (`; on the open question it sits at the last
#   token of a prompt it never saw, so any change of content there is a side effect, not a trained behaviour.
#
# ## What differs from the paper, and why
#
# - **Model.** SmolLM2-135M-Instruct, not Llama-3.1-8B (or the paper's other models): its zero-shot
#   preference between A and B is close to a coin flip with a letter bias, so there is much less behaviour to
#   steer, and its free text is poor.
# - **Metric and number.** The paper's metric and result on this set were not available offline; we report
#   two judge-free A/B metrics and the book's first-token accuracy, and decide the claim on the A/B accuracy
#   averaged over both directions, with a two-standard-error margin.
# - **Data.** The human-written file (the one CAA uses), 1,000 questions cut 500 / 250 / 250 with seed 0 as
#   every task in the book; the held-out set is the letter-balanced part of the test split (246 questions:
#   123 per letter). `task="myopic_lm"` uses the model-written file instead. The paper's split is unknown.
# - **Both directions.** The paper (as far as we know) steers toward the behaviour only; we add the
#   opposite direction so that "steering" can be told apart from "shifting the letter" and from the
#   model's own preference.
# - **Sizes (`cpu` profile).** Every letter-balanced held-out question (246): scoring a vector costs one
#   single-token pass per question over cached prompt prefixes, cheap next to training. The LTVs use the
#   book's `fast` recipe and the profile's 500 training / 200 validation questions (the split has 500 and
#   250). ICL at 5 shots only (10-shot prompts of these questions are about 700 tokens), on the profile's
#   8 fixed demonstration blocks. The extracted vectors use chapter 1's `cpu` sizes (Vanilla TV: 8
#   demonstration sets x 2 dummy queries, layer chosen on 50 validation questions; FV: 20 prompts for the
#   mean head outputs and 5 for the indirect effect instead of 100 and 25). Free generations: 4 questions,
#   32 tokens. On two CPU cores the chapter runs in about a quarter of an hour from a cold cache, most of it
#   training the two LTVs and extracting the two FVs; `profile="paper"` uses the papers' sizes (10-shot ICL
#   too, 100/25 FV prompts, fresh demonstrations per query).
