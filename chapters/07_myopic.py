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
# **The claim** (part of the paper's first claim, on its one *behaviour* task): besides the word and
# classification tasks, the paper trains learned task vectors for a behaviour, the myopic-reward items of
# Anthropic's model-written evaluations (Perez et al. 2022): questions that offer a small reward now against a
# larger one later, answered by a letter. It reports that the LTV beats both extracted task vectors (Vanilla
# TV, Function Vectors) on this task. **This is a qualitative result for us: the paper's metric and number
# could not be read offline** (our notes mark the metric as open). The paper's first claim also says that LTVs
# match or beat ICL; whether the paper compares them with ICL on this task we do not know, so ICL is shown as a
# reference and checked against that general statement. Thanks to the A/B format the chapter needs no judge
# model: it measures the probability the model gives to the myopic letter and the A/B accuracy toward the
# steered answer, on held-out questions.
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
import textwrap
import time
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from ltvlib.models import load_model
from ltvlib.myopic import (
    DIRECTIONS,
    answer_tokens,
    balanced_test,
    check_no_leak,
    extraction_configs,
    generation_examples,
    item_p_myopic,
    ltv_splits,
    method_label,
    method_names,
    method_scores,
    myopic_sizes,
    summarise_ab,
)
from ltvlib.profiles import get_profile
from ltvlib.scorecard import Claim, record_claims
from ltvlib.tasks import get_task, load_splits

prof = get_profile(profile)
sizes = myopic_sizes(prof)
if task is not None:
    sizes = replace(sizes, task=task)
started = time.perf_counter()
lm = load_model(model, device=device)
mid = lm.middle_layer
letters = answer_tokens(lm, sizes.task)
test = balanced_test(sizes.task, sizes.n_test)
check_no_leak(sizes.task, test)
full = load_splits(sizes.task)
ltv_split = ltv_splits("myopic", prof, sizes)
n_stop = min(len(ltv_split.validation), prof.recipe.val_queries or len(ltv_split.validation))
vtv_cfg, fv_cfg = extraction_configs(prof, sizes)
display(Markdown(
    f"**Model** `{lm.name}` ({lm.n_layers} layers, middle layer {mid}). **Profile** `{prof.name}`. **Task** "
    f"`{sizes.task}` ({get_task(sizes.task).description}): {len(full.train)} / {len(full.validation)} / "
    f"{len(full.test)} questions in the seeded (seed 0) train / validation / test split. The held-out set is "
    f"**{len(test)} test questions, {sum(e.output == 'A' for e in test)} with the myopic answer A and "
    f"{sum(e.output == 'B' for e in test)} with B**, none of them in the training or validation split of either "
    f"direction (checked). LTVs: {len(ltv_split.train)} training questions, early stopping on {n_stop} "
    f"letter-balanced validation questions, recipe `{prof.recipe.recipe}`. Vanilla TV: {vtv_cfg.shots}-shot "
    f"prompts, {vtv_cfg.n_contexts} demonstration sets x {vtv_cfg.n_dummy} dummy queries, layer chosen on {vtv_cfg.n_dev} validation questions. "
    f"FV: {fv_cfg.shots}-shot prompts, {fv_cfg.n_mean} for the mean head outputs, {fv_cfg.n_ie} for the indirect "
    f"effect, top {fv_cfg.k} heads. ICL: {', '.join(map(str, sizes.icl_shots))} shots. Letter tokens: A = "
    f"{letters['A']}, B = {letters['B']}."
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
#   book's `fast` recipe, `ltvlib.myopic.direction_ltv`), *added* to the residual stream *entering* the
#   middle block at the last prompt token. Early stopping looks at a *letter-balanced* part of the
#   validation split, so that picking the best epoch cannot reward a plain letter preference.
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

# %% [markdown]
# (ch07-table-results)=
# ## Held-out results
#
# Every method, toward each direction, on the same letter-balanced held-out questions.

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
curves = pd.DataFrame({f"toward {d.replace('_', '-')}": pd.Series(runs["ltv", d]["info"]["val_curve"])
                       for d in DIRECTIONS})
curves.index.name = "epoch"
display(Markdown(
    "**LTV training.** First-token accuracy (%) on the letter-balanced validation questions after each epoch "
    "(epoch 0: the random initial vector); the kept vector is the best epoch's. A validation accuracy well above "
    "the held-out A/B accuracy means the choice of epoch was partly luck on a small set."
))
display((100 * curves).round(1).T)

# %% [markdown]
# (ch07-fig-steering)=

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
variants = {"none": "no vector", "myopic": "LTV toward myopic", "non_myopic": "LTV toward non-myopic"}
for kind, head in (("A/B", "A/B prompt: the continuation after 'A: ('"),
                   ("open", "open prompt: 'Q: {question without its choices}\\nA:'")):
    print(f"=== {head} ===\n")
    for g in (g for g in gens if g["kind"] == kind):
        print(textwrap.fill(g["question"], 110), f"\n(myopic answer: {g['myopic_letter']})")
        for k, name in variants.items():
            print(f"  {name:>22}: {g[k].strip()!r}")
        print()

# %% [markdown]
# ## What we measured, and how it compares
#
# The cell below is computed from the tables above. **Steering accuracy** is the A/B accuracy toward the
# direction, averaged over the two directions: on a balanced set a method that does not steer, or only shifts
# the letter preference, gets about 50 %. Two steering accuracies differ by more than noise when they are more
# than two standard errors apart (one rate near 50 % on $n$ questions has a standard error of
# $\sqrt{0.25/n}$; the average of two directions has $\sqrt{0.25/2n}$, and the difference of two such averages
# $\sqrt{0.25/n}$ again). The **P(myopic) gap** is, per question, P(myopic) with the vector toward the myopic
# answer minus P(myopic) with the vector toward the other one, averaged over questions; two methods' gaps are
# compared question by question (paired), with the standard error of the per-question differences.

# %%
myopic_letters = runs["zero_shot", None]["myopic_letters"]
steered = [m for m in methods if m != "zero_shot"]
icl_methods = [m for m in steered if m.startswith("icl")]
extracted = ["vanilla_tv", "vanilla_tv_difference", "function_vector"]


def steer(m):
    """Steering accuracy (%): A/B accuracy toward the direction, averaged over both directions."""
    return float(np.mean([100 * summary(m, d)["all"]["ab_accuracy"] for d in DIRECTIONS]))


def worst_half(m):
    """The lowest A/B accuracy (%) over both directions and both letter halves."""
    return min(by_letter.loc[(method_label(m), d.replace("_", "-")), "worse half %"] for d in DIRECTIONS)


def item_gap(m):
    """Per held-out question: P(myopic) toward myopic minus P(myopic) toward non-myopic (in [-1, 1])."""
    toward_m, toward_n = (np.array(item_p_myopic(runs[m, d]["scores"], myopic_letters)) for d in DIRECTIONS)
    return toward_m - toward_n


def p_gap(m):
    return 100 * float(item_gap(m).mean())


score = {m: steer(m) for m in steered}
best_icl = max(icl_methods, key=score.get)
best_ex = max(extracted, key=score.get)
best_ex_gap = max(extracted, key=p_gap)
ltv_score, ltv_gap = score["ltv"], p_gap("ltv")
paired = item_gap("ltv") - item_gap(best_ex_gap)
gap_se = 100 * float(paired.std(ddof=1)) / math.sqrt(len(paired))
checks_extracted = {
    "LTV steering accuracy above the best extracted vector's by more than two standard errors":
        ltv_score > score[best_ex] + 2 * se,
    "LTV P(myopic) gap above the best extracted vector's by more than two paired standard errors":
        ltv_gap - p_gap(best_ex_gap) > 2 * gap_se,
}
checks_icl = {
    "LTV steering accuracy not below the best ICL's by more than two standard errors":
        ltv_score >= score[best_icl] - 2 * se,
    # matching ICL means little when both sit at chance, so the LTV must also steer
    "LTV steering accuracy more than two standard errors above chance (50 %)": ltv_score > 50 + 2 * se,
}
zs = summary("zero_shot", "myopic")["all"]
info = {d: runs["ltv", d]["info"] for d in DIRECTIONS}
ltv_says_a = {d: 100 * summary("ltv", d)["all"]["says_a"] for d in DIRECTIONS}
letter_moved = max(abs(v - 100 * zs["says_a"]) for v in ltv_says_a.values()) > 2 * se
ltv_note = "" if ltv_score > 50 + 2 * se else (
    f"On {lm.name} the LTVs do not move the choice more than two standard errors above chance; "
    + ("they move the letter instead" if letter_moved else "nor do they move the letter much")
    + f" (A preferred on {ltv_says_a['myopic']:.0f} % and {ltv_says_a['non_myopic']:.0f} % of the questions, "
    f"zero-shot {100 * zs['says_a']:.0f} %).")
icl_note = "" if max(ltv_score, score[best_icl]) > 50 + 2 * se else (
    "Neither the LTV nor ICL steers more than two standard errors above chance here, so 'matches' compares two "
    "failures.")


def halves(m):
    """'moves the choice on both letter halves' or where it fails, for one method."""
    cells = {(d, h): by_letter.loc[(method_label(m), d.replace("_", "-")), f"A/B accuracy %, {h}"]
             for d in DIRECTIONS for h in ("myopic=A", "myopic=B")}
    if all(v > 50 + 2 * se * math.sqrt(2) for v in cells.values()):
        return "moves the choice on both letter halves in both directions"
    low = [f"toward {d.replace('_', '-')} on {h} ({v:.0f} %)" for (d, h), v in cells.items() if v <= 50]
    return "at or below chance " + ", ".join(low) if low else "above chance on every half, but not clearly"


lines = [
    (f"- **Zero-shot** the model gives the myopic letter {100 * zs['p_myopic']:.1f} % of the A/B probability, "
     f"chooses it on {100 * zs['myopic_choice']:.1f} % of the questions and says A on {100 * zs['says_a']:.1f} % "
     f"(A/B mass {100 * zs['ab_mass']:.1f} %)."),
    *[(f"- **{method_label(m)}**: steering accuracy {score[m]:.1f} % (worst letter half {worst_half(m):.1f} %: "
       f"{halves(m)}); P(myopic) {100 * summary(m, 'myopic')['all']['p_myopic']:.1f} % toward myopic vs "
       f"{100 * summary(m, 'non_myopic')['all']['p_myopic']:.1f} % toward non-myopic (gap {p_gap(m):.1f} points).")
      for m in steered],
    (f"- The LTVs trained for {info['myopic']['steps']} and {info['non_myopic']['steps']} steps (best "
     f"validation first-token accuracy {100 * info['myopic']['val_accuracy']:.1f} % and "
     f"{100 * info['non_myopic']['val_accuracy']:.1f} % on the letter-balanced validation questions)."),
    (f"- **LTV against the extracted vectors** (the paper: the LTV is better, no number). Steering accuracy: LTV "
     f"{ltv_score:.1f} %, best extracted {method_label(best_ex)} {score[best_ex]:.1f} % (margin needed "
     f"{2 * se:.1f} points). P(myopic) gap: LTV {ltv_gap:.1f} points, best extracted {method_label(best_ex_gap)} "
     f"{p_gap(best_ex_gap):.1f} points (paired standard error of the difference {gap_se:.1f})."),
    (f"- **LTV against ICL** (the paper's general claim: matches or beats it): LTV {ltv_score:.1f} %, "
     f"{method_label(best_icl)} {score[best_icl]:.1f} %."),
    ("- **Methods that steer at all** (steering accuracy more than two standard errors above 50 %): "
     + (", ".join(f"{method_label(m)} ({score[m]:.1f} %)" for m in steered if score[m] > 50 + 2 * se) or "none")
     + "."),
]
display(Markdown("\n".join(lines)))
cost = pd.DataFrame({
    method_label(m) + ("" if d is None else f", toward {d.replace('_', '-')}"):
        {"seconds (first run, incl. training/extraction)": r["seconds"], "layer": r["info"].get("layer")}
    for (m, d), r in runs.items()
}).T
display(Markdown("**What each measurement cost** when it was first computed (wall time on the machine that "
                 "computed it; a cached result shows its original time):"))
display(cost.round(1))
print(f"chapter time: {time.perf_counter() - started:.0f} s")

# %% [markdown]
# ## Where it agrees, where not, and why we think so
#
# - **What a learned vector can learn here.** An LTV is optimised directly for the letter its direction wants
#   on the training questions. It can learn *which option is the myopic one* only if the model's state at the
#   injection layer makes that readable; if not, the cheapest way to lower the loss is a letter preference,
#   which the letter-balanced set turns into 50 % and the split by letter exposes (one half near 100 %, the
#   other near 0 %). Early stopping on letter-balanced validation questions keeps the epoch choice from
#   rewarding such a preference, but cannot make the vector learn more than the model represents.
# - **Extracted vectors.** A Vanilla TV or FV is an average of what ICL writes at the last token; with
#   demonstrations of both letters, that average mostly says "answer with a letter", not which one. It can
#   steer only as far as the ICL prompts it is extracted from steer.
# - **ICL.** Demonstrations answered in one direction are the most direct way to show the behaviour, but a
#   small model tends to copy the demonstrations' letters rather than their reasoning; the fixed demonstration
#   blocks are drawn at random and are not letter-balanced, so their letter mix shows up in the "says A"
#   columns.
# - **Early stopping on a small set.** The fast recipe stops two epochs after the best validation accuracy, and
#   64 validation questions have a standard error of about 6 points, so the kept epoch is partly chance (see
#   the LTV training table); the held-out set, not the validation curve, decides.
# - **Free text.** The LTV was trained on the letter after `A: (`; on the open question it sits at the last
#   token of a prompt it never saw, so any change of content there is a side effect, not a trained behaviour.
#
# ## What differs from the paper, and why
#
# - **Model.** SmolLM2-135M-Instruct, not Llama-3.1-8B (or the paper's other models). At zero shot it gives
#   nearly the same letter whatever the question (the "says A" column), so it shows no preference of its own
#   between a small reward now and a larger one later, and its free text is poor.
# - **Metric and number.** The paper's metric and result on this set were not available offline; we report two
#   judge-free A/B metrics and the book's first-token accuracy, and decide the claim on the steering accuracy
#   and the P(myopic) gap, each with a two-standard-error margin.
# - **Data.** The human-written file (the one CAA uses), 1,000 questions cut 500 / 250 / 250 with seed 0 as
#   every task in the book; the held-out set is the letter-balanced part of the test split (at most 246
#   questions, 123 per letter). `task="myopic_lm"` uses the model-written file instead. The paper's split is
#   unknown.
# - **Both directions.** The paper (as far as we know) steers toward the behaviour only; we add the opposite
#   direction so that steering can be told apart from shifting the letter and from the model's own preference.
# - **Sizes (`cpu` profile, `ltvlib.myopic.MYOPIC_SIZES`).** 160 held-out questions (80 per letter): each is
#   run once zero-shot and once per ICL direction, and every vector then reruns only the last token over the
#   cached prompt. The LTVs use the book's `fast` recipe on 256 training questions (it still draws 1,024
#   samples, each question about four times) with early stopping on 64 letter-balanced validation questions,
#   instead of the paper's 600 / 400 (this file's split allows 500 / 250): on a CPU the cost is the prompt tokens, these prompts are about 67
#   tokens long, and every vector is trained twice (once per direction). ICL at 5 shots only, on the
#   profile's 8 fixed demonstration blocks. The extracted vectors use chapter 1's `cpu` sizes (Vanilla TV:
#   5-shot prompts, 8 demonstration sets x 2 dummy queries, layer chosen on 50 validation questions among 11
#   layers; FV: 20 prompts for the mean head outputs and 5 for the indirect effect instead of 100 and 25),
#   with **5-shot FV prompts instead of Todd et al.'s 10** (a 10-shot prompt of these questions is about 740
#   tokens). Free generations: 4 questions, 32 tokens. `profile="paper"` uses the paper's and the baselines'
#   own sizes (10-shot ICL too, fresh demonstrations per query).
# - **Cost.** On two free CPU cores the `cpu` profile should take 7 to 9 minutes from a cold cache, estimated
#   from each piece's CPU time measured on one thread (about 730 CPU seconds in all: the two LTVs about 240,
#   the ICL prompts 140, the Function Vectors 130, the Vanilla TVs 115, the zero-shot prompts 55, the
#   generations 30; scoring a vector over the cached held-out prompts takes about 3). The table above gives
#   each measurement's wall time in the run shown.

# %% [markdown]
# ## Verdicts for the scorecard
#
# The rule (the same in every chapter): every check passes → reproduced, some → partly, none → not
# reproduced. LTV against the extracted vectors (the paper's qualitative result on this task): is the LTV's
# steering accuracy above the best extracted vector's by more than two standard errors, and is its P(myopic)
# gap between the two directions above the best extracted vector's by more than two paired standard errors?
# LTV against ICL (the paper's general first claim; its myopic comparison with ICL, if any, is unknown to us):
# is the LTV's steering accuracy no more than two standard errors below the best ICL's?

# %%
record_claims("07_myopic", [
    Claim(
        paper_claim=1,
        key="myopic-vs-extracted",
        statement="On the myopic-reward behaviour task the LTV steers the model better than the extracted task "
                  "vectors (Vanilla TV, Function Vectors).",
        paper="LTV better than Vanilla TV and FV (qualitative: metric and number not available offline; "
              "Llama-3.1-8B)",
        ours=f"steering accuracy LTV {ltv_score:.1f} %, best extracted {method_label(best_ex)} {score[best_ex]:.1f} % "
             f"(chance 50 %, ±{2 * se:.1f} for two standard errors); P(myopic) gap between directions LTV "
             f"{ltv_gap:.1f} points, best extracted {p_gap(best_ex_gap):.1f} ({n} letter-balanced held-out questions)",
        checks=checks_extracted,
        evidence="ch07-fig-steering",
        evidence_title="Figure 7.1",
        note=ltv_note,
    ),
    Claim(
        paper_claim=1,
        key="myopic-vs-icl",
        statement="On the myopic-reward task the LTV matches or beats ICL.",
        paper="claim 1 in general: LTVs match or beat ICL; no myopic comparison with ICL in our sources",
        ours=f"steering accuracy LTV {ltv_score:.1f} %, {method_label(best_icl)} {score[best_icl]:.1f} %",
        checks=checks_icl,
        evidence="ch07-table-results",
        evidence_title="the held-out results table",
        note=icl_note,
    ),
], model=model, profile=profile, seed=seed)
