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
# sites, fall far below it. The paper also finds that LTVs have "no critical depth": they still work when
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
# scores all of them on the same test queries; every accuracy comes with its number of test queries,
# training seeds and 95 % interval.
#
# **Which tasks each column covers.** In the `paper` profile every column runs on the paper's seven tasks. The
# `cpu` profile has a budget: the whole book from a cold cache within 150 minutes on two CPU cores. It saves
# seeds and test queries (the baseline column has the three training seeds chapter 00 trains, read back from
# the shared cache, every other column one; each task is tested on its first 100 test queries, Capital has 50)
# and two cells of the table: an LTV's training cost grows with the prompt tokens it recomputes (6-17 tokens
# for Capital, Capitalize, Antonym and TREC, 28 for SST-2, 39 for SNLI, 82 for RTE), and RTE's P={4} and
# 8-shot LTVs were measured at 757 s and 517 s, the two dearest of the chapter, which put the book past its
# budget. So in `cpu` every column covers the seven tasks except P={4} and 8-shot ICL, which cover six (all
# but RTE). Those two columns' verdicts carry a third part, "the paper's seven tasks: RTE not measured at this
# budget", which is inconclusive by rule (`ltvlib.book.scorecard.budget_rule`): on six tasks a column can at
# most be partly reproduced. Their means are compared with the baseline LTV's over the same six tasks. The cost
# table below gives what each column took in this run; the chapter's time is printed at its end.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"
recipe = None  # None: the profile's recipe; "fast" or "paper"
tasks = None  # None: the profile's choice (ltvlib.study.plans.FLEX_SIZES)

# %%
import time

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from ltvlib.book.scorecard import (
    Claim,
    Verdict,
    budget_rule,
    combine_rule,
    direction_rule,
    interpret,
    not_testable,
    record_claims,
    threshold_rule,
)
from ltvlib.forward import PositionTail, tail_needed
from ltvlib.models import load_model
from ltvlib.study.flexibility import Setting, late_settings, table1_settings
from ltvlib.study.flexibility_tables import METHODS, FlexView
from ltvlib.study.ltv_report import LTVLedger
from ltvlib.study.plans import flexibility_plan
from ltvlib.tasks import PAPER_TASKS

plan = flexibility_plan(profile, recipe=recipe, seed=seed, tasks=tasks)
run, flex, task_list = plan.run_sizes, plan.sizes, plan.tasks
started = time.perf_counter()
lm = load_model(model, device=device)
settings = table1_settings(lm.n_layers, layer_steps=flex.layer_steps, icl_shots=flex.icl_shots)
late = late_settings(lm.n_layers, flex.n_late) if flex.n_late != 0 else []
view = FlexView(settings, late, task_list, {s.name: flex.tasks_of(s.name, task_list) for s in settings + late},
                base_seeds=plan.base_seeds,  # the middle-layer LTVs chapters 00 and 01 train
                other_seeds=plan.other_seeds, ledger=LTVLedger())
display(Markdown(view.describe_setup(lm, profile, run, flex, plan.n_test)))
display(view.settings_table())

# %% [markdown]
# ## The settings, and where each vector goes
#
# **Positions** count like everywhere in the book (`ltvlib.inject`): a non-negative position counts from
# the prompt's first token (0 = the first token, the BOS when the tokenizer adds one; SmolLM2 adds none), a
# negative one back from the last token (-1 = the last). The paper's P={4} is position 4 from the start: in
# the zero-shot prompt `Q: {x}\nA:` of a one-token query (tokens `Q`, `:`, ` x`, `\n`, `A`, `:`) that is the
# `A`, one token before the end; with a longer query (the classification tasks' sentences) it is a token of
# the query, far from the end. The paper does not say how it counts; on Llama-3.1 (which adds a BOS) the
# same index lands one token earlier in the prompt.
#
# **Layers.** The paper's table writes the multi-layer set as L={0,4,...}, its text as every second layer;
# the `paper` profile measures both (`every4` is the table's column, `every2` the text's), `cpu` the table's.
# The "multi-layer + multi-position" setting crosses the every-4th-layer set with the last five positions.
#
# **The three methods in a multi-site setting** (`ltvlib.study.flexibility.extracted_edits`):
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
#   these layers").
#
# The LTV enters at the *input* of block $l$, the extracted vectors at its *output* (each method at its
# own paper's site, as in chapter 1).
#
# **What a non-final position costs.** Training at P={4} caches each prompt up to its own position 4 and
# recomputes only the rest with the vector (`ltvlib.forward.PositionTail`, measured 1.88x faster than full
# forwards for Antonym in `bench/RESULTS.md`). On the classification tasks' long prompts most of the prompt
# lies after position 4, so the cache saves little there and P={4} stays the dearest column to train
# (`ltvlib.study.plans.FLEX_SIZES` gives the costs). The cell below checks that this run's recipe takes the
# per-row tail.

# %%
p4 = next((s for s in settings if s.name.startswith("position")), None)
p4_tail = tail_needed(p4.positions) if p4 else None
uses_tail = bool(p4 and run.recipe.prefix_cache and isinstance(p4_tail, PositionTail))
if p4 and run.recipe.prefix_cache:
    assert isinstance(p4_tail, PositionTail), p4_tail  # a non-final position must take the per-row tail
display(Markdown(
    f"Position setting `{p4.name}`: " + (
        f"trained and evaluated on the per-row tail (`{p4_tail!r}`): each prompt's tokens before position "
        f"{p4.positions[0]} are computed once, without gradients." if uses_tail else
        f"recipe `{run.recipe.recipe}` runs full forwards (no prefix cache), as the paper's released recipe does."
    ) if p4 else "No non-final position setting in this run."
))

# %% [markdown]
# ## Measuring every setting
#
# Each `setting_result` call trains (or reads from the shared cache) the setting's LTVs through
# `ltvlib.study.ltvs.trained_ltv`, evaluates them, the prompt alone and the extracted vectors moved to the
# same sites on one set of test prompts, and keeps each method's per-query correctness, from which every
# interval below is computed.

# %%
t0 = time.perf_counter()
view.measure(lm, run, n_test=plan.n_test, seed=seed)
print(f"all settings: {time.perf_counter() - t0:.0f} s")
ledger = view.ledger

# %% [markdown]
# ## The measured Table 1
#
# Rows: methods, each with the paper's number beneath ours; columns: settings; values: first-token accuracy
# (%) on the test queries, the mean over tasks of each task's accuracy, with its 95 % interval in brackets (a
# bootstrap that resamples each task's test queries, and its training seeds where there are several, within
# the task). "no vector" is the prompt alone: zero-shot, or k-shot ICL in the ICL column. An LTV that did not
# train (validation never above its random start) is left out of the mean; the row "LTV tasks" says over how
# many tasks each LTV mean runs.
#
# (ch02-table1)=

# %%
caption, table1 = view.table1(flex.icl_shots, lm.name)
display(Markdown(caption))
display(table1)

# %% [markdown]
# **Per task** (Table 2.2): each task's accuracy (%) with its 95 % interval (Wilson for one seed, the
# seed-and-query bootstrap for several), on that task's test queries (the last row gives their number); a
# column that does not run on a task in this profile says so.
#
# (ch02-table-tasks)=

# %%
display(view.per_task_table(profile))
display(ledger.summary())

# %%
display(Markdown("**What the LTVs cost** (wall time on the machine that first trained each vector; the "
                 "baseline's are chapter 00's):"))
display(view.cost_table())

# %% mystnb={"figure": {"caption": "Table 1 measured: mean first-token accuracy over the tasks each setting covers (the number under its name) for each method, with 95 % intervals (task-stratified bootstrap over test queries and, for the baseline LTV, its training seeds). Hollow diamonds: the baseline LTV averaged over the same tasks, where a setting covers fewer tasks. Black bars: the paper's Table 1 (Llama-3.1-8B, seven tasks).", "name": "ch02-fig-table1"}}
fig, ax = view.plot_table1()
ax.set_title(f"Table 1 on {lm.name} ({profile} profile): " + (
    "each setting's mean over its own tasks" if view.partial() else f"mean over {len(task_list)} tasks"), fontsize=10)
ax.set_xlabel("setting (sites of the vectors)")
ax.set_ylabel("accuracy (%), mean over tasks")
fig.tight_layout(rect=(0, 0.17, 1, 1))
plt.show()

# %% mystnb={"figure": {"caption": "Per task: the LTV of each setting (red) against the strongest of the three extracted vectors there (blue) and the prompt alone (grey), with 95 % intervals (Wilson for one seed; seed-and-query bootstrap for the baseline's seeds); a setting that does not run on a task in this profile has no marker there. Black dashes: the paper's LTV, mean over its seven tasks (Llama-3.1-8B).", "name": "ch02-fig-tasks"}}
fig, axes = view.plot_tasks()
for ax, t in zip(axes.flat, task_list):
    ax.set_title(t, fontsize=10)
    ax.set_ylabel("accuracy (%)")
for ax in axes[-1]:
    ax.set_xlabel("setting")
fig.suptitle(f"Each task's accuracy per setting, {lm.name} ({profile} profile)", fontsize=10)
fig.tight_layout(rect=(0, 0.75 / fig.get_figheight(), 1, 1))
plt.show()

# %% [markdown]
# ## What we measured
#
# The cell below lists, from the tables above, each column's LTV mean and the strongest extracted vector
# there, and the two differences each column's verdict rests on (paired over the same test queries within
# each task, then averaged over tasks).

# %%
numbers = {s.name: view.column_numbers(s) for s in settings[1:] + late}
display(Markdown(view.summary_markdown(numbers, flex.icl_shots)))

# %% [markdown]
# ## Verdict per column
#
# The paper's claim for each column has two parts, each decided by a rule on an interval:
#
# - **(a) the LTV beats the extracted vectors there**: the mean over tasks of LTV minus the strongest extracted
#   vector of that column (the one with the highest mean), paired over the same test queries; its 95 %
#   interval above 0 → reproduced, below 0 → not reproduced, across 0 → inconclusive (`direction_rule`);
# - **(b) the LTV keeps its baseline accuracy**: in the paper the LTV keeps at least 90 % of its baseline
#   accuracy in every column but "multi-layer + multi-position", where it keeps 62 %; so the test is the mean
#   over tasks of the column's LTV minus 0.9 times the baseline LTV (0.5 times in that column), paired over
#   the same test queries; its interval at or above 0 → reproduced, below → not reproduced, across →
#   inconclusive (`threshold_rule`).
#
# A column's verdict combines the two (`combine_rule`: both reproduced → reproduced; one reproduced and the
# other not, or inconclusive → partly; both inconclusive → inconclusive; none reproduced and one contradicted →
# not reproduced). The late layers ("no critical depth", the paper's text) take the same two parts at the
# late layers. Tasks whose LTV did not train in a column are left out of that column's differences.
#
# (ch02-verdicts)=

# %%
def claim_parts(s, x):
    """A column's rule, intervals, paper text and our text, from its numbers."""
    name = METHODS[x["best"]]
    if x["diff"] is None or x["keep"] is None:
        rule = not_testable(f"no LTV of the setting {s.name} trained on any task at this budget")
        intervals = {}
    else:
        parts = {
            f"(a) LTV above {name}": direction_rule(x["diff"].value, x["diff"].interval, +1),
            f"(b) LTV keeps ≥ {x['share']:.0%} of its baseline": threshold_rule(x["keep"].value, x["keep"].interval, 0.0),
        }
        missing = [t for t in PAPER_TASKS if t not in x["tasks"]]
        if missing:  # the paper's numbers are seven-task means: what this run leaves out is not decided either way
            parts["(c) the paper's seven tasks"] = budget_rule(missing, flex.why_fewer or f"not run in `{profile}`")
        rule = combine_rule(parts)
        intervals = {f"LTV, {s.name}": x["ltv"], f"LTV − {name}": x["diff"],
                     f"LTV − {x['share']:.1f} × baseline LTV": x["keep"]}
    return rule, intervals, view.paper_text(s), view.ours_text(x)


claims = []
for s in settings[1:]:
    rule, intervals, paper, ours = claim_parts(s, numbers[s.name])
    claims.append(Claim(
        paper_claim=2,
        key=s.name,
        statement=f"Trained for the sites {s.label}, the LTV still works there and beats the extracted vectors moved there.",
        paper=paper,
        ours=ours,
        rule=rule,
        intervals=intervals,
        note=view.coverage_note(numbers[s.name], flex.why_fewer, profile),
        evidence="ch02-table1",
        evidence_title="Table 2.1 (the measured Table 1)",
    ))
if late:
    late_layers_text = ", ".join(str(s.layers[0]) for s in late)
    numbers["late-layers"] = view.late_numbers()
    rule, intervals, _, ours = claim_parts(Setting("late-layers", f"P={{-1}}, L={{{late_layers_text}}}",
                                                   tuple(s.layers[0] for s in late), (-1,)), numbers["late-layers"])
    claims.append(Claim(
        paper_claim=2,
        key="late-layers",
        statement="No critical depth: an LTV still steers the model from the last quarter of the layers, where "
                  "extracted vectors fail.",
        paper="in the text (no number): LTVs keep working at late layers, extracted vectors collapse",
        ours=f"{ours} at layers {late_layers_text}",
        rule=rule,
        intervals=intervals,
        note=view.coverage_note(numbers["late-layers"], flex.why_fewer, profile),
        evidence="ch02-verdicts",
        evidence_title="the verdict table (late layers)",
    ))
display(view.verdict_table(claims, numbers))

# %% [markdown]
# ## Where it agrees, where not
#
# One paragraph per column, chosen by that column's verdict above (each was written for every possible
# verdict before the data came in).

# %%
TEXTS = {
    Verdict.REPRODUCED: (
        "**{key}** ({label}). Over {n_tasks} task(s) the LTV trained for these sites reaches {ltv}, above the "
        "strongest extracted vector moved there ({best_name}; LTV − {best_name} {diff}), and it keeps at least "
        "{share} of its baseline accuracy (LTV − {share_f} × baseline {keep}): both parts of the paper's outcome "
        "hold on {model}. A vector optimised for the sites it is injected at works there; a vector recorded "
        "from ICL at the last token of one layer, moved to them, stays below it."
    ),
    Verdict.PARTLY: (
        "**{key}** ({label}). Some parts of the paper's outcome hold on {model} and others do not or are not "
        "decided: {parts}. "
        "The LTV reaches {ltv} over {n_tasks} task(s); LTV − {best_name} {diff}; LTV − {share_f} × baseline "
        "{keep}. Our setting differs from the paper's in the model (135M against 8B parameters), the training "
        "recipe and the number of training seeds; this chapter does not tell those causes apart."
    ),
    Verdict.NOT_REPRODUCED: (
        "**{key}** ({label}). The paper's outcome does not hold on {model}: {parts}. The LTV reaches {ltv} over "
        "{n_tasks} task(s); LTV − {best_name} {diff}; LTV − {share_f} × baseline {keep}. The intervals exclude the "
        "paper's side. Our setting differs from the paper's in the model (135M against 8B parameters), the "
        "training recipe and the number of training seeds; this chapter does not tell those causes apart."
    ),
    Verdict.INCONCLUSIVE: (
        "**{key}** ({label}). The data cannot decide this column: {parts}. LTV − {best_name} {diff}; LTV − "
        "{share_f} × baseline {keep}: the intervals admit both directions with {n_tasks} task(s) and {seeds} "
        "training seed(s) per LTV. More seeds or test queries (the `paper` profile) would be needed."
    ),
    Verdict.NOT_TESTABLE: "**{key}** ({label}). Not measured at this budget: {reason}.",
}


for c in claims:
    display(interpret(c, TEXTS, **view.text_values(c, numbers, lm.name)))

# %% [markdown]
# ## What differs from the paper, and why
#
# - **Model.** SmolLM2-135M (30 layers, middle layer 15), not Llama-3.1-8B (32 layers, middle layer 16);
#   a model 60 times smaller, so its absolute accuracies are not comparable with the paper's (chapter 00
#   measures its zero-shot and ICL accuracy); the comparison is between methods on one model, and between
#   columns of the same method.
# - **Seeds and test queries.** In `cpu` the baseline column has three training seeds (the vectors chapter
#   00 trains), every other column one (`ltvlib.study.plans.FLEX_SIZES`): two more seeds for each of them
#   would triple this chapter's training time on two CPU cores. Each task is tested on its first 100 test
#   queries in `cpu` (Capital has 50), the same queries in every column. The intervals include the query
#   sampling and, for the baseline, the seed-to-seed spread; a one-seed column's interval cannot include a
#   seed spread, so it is narrower than a three-seed interval would be. The `paper` profile trains three
#   seeds in every column.
# - **Tasks.** In `cpu` every column covers the paper's seven tasks but P={4} and 8-shot ICL, which leave out
#   RTE for the book's time budget (see the top); their verdicts say so. The `paper` profile runs every column
#   on the seven.
# - **Training recipe.** The LTVs use the book's `fast` recipe (`ltvlib.ltv.FAST_RECIPE`: batches of 16,
#   at most 8 epochs of 128 queries, early stopping, an initial range relative to the residual stream's scale
#   at each vector's site and a learning rate relative to the last block's, shared among the vectors: each
#   of an LTV's $n$ vectors takes $1/n$ of one vector's learning rate, so the 40 vectors' step sizes add up to
#   one vector's step (arithmetic; how far they move the stream together was not measured); with the whole step each, the 40-vector LTVs of Capital, Capitalize and
#   Antonym stayed near their start on validation, `bench/RESULTS.md`, "session 19"); the paper's released
#   recipe uses batch 1 and the same learning rate for every vector (`recipe="paper"` runs it).
# - **Settings.** `cpu` measures the table's every-4th-layer column and the last layer only; the `paper`
#   profile adds the text's every-2nd-layer setting and every layer of the last quarter.
# - **Extracted vectors.** One Vanilla TV per task averaged over demonstration sets, ICL prompts in the
#   task's template, and fewer FV prompts in the `cpu` profile, as in chapter 1. How they are applied at
#   several sites is our choice (stated above); the paper does not say.
# - **Position 4** is counted from the first token of the prompt; see above for what it hits.

# %% [markdown]
# ## Verdicts for the scorecard
#
# One claim per column of Table 1 (and one for the late layers), each with the rule and intervals of the
# verdict table above.

# %%
print(f"chapter time: {time.perf_counter() - started:.0f} s")
record_claims("02_flexibility", claims, model=model, profile=profile, seed=seed, ltvs=ledger)
