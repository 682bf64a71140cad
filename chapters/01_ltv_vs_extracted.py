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
# # Learned against extracted, layer by layer
#
# **The claim** (the paper's first, its Figure 2): a learned task vector (LTV) beats the two extracted
# task vectors, Vanilla TV (Hendel et al., 2023) and Function Vectors (FV, Todd et al., 2024), *at every
# injection layer*, and reaches ICL-level accuracy; the gap is largest at late layers, where extracted
# vectors collapse. In the paper's baseline setting (middle layer, last position) the numbers are
# **LTV 83.49 %, Vanilla TV 37.80 %, FV 37.30 %**: on **Llama-3.1-8B**, averaged over its **seven tasks**
# (Capital, Capitalize, Antonym, SST-2, TREC, SNLI, RTE).
#
# This chapter extracts both baselines faithfully to their own papers, injects all three vectors at early,
# middle and late layers of the same model on the same zero-shot test prompts, and compares them with
# zero-shot and ICL accuracy. The middle-layer comparison covers the same seven tasks (each LTV with three
# training seeds in `cpu`, the vectors of chapter 0); the layer sweep of the LTV covers the four
# short-prompt tasks (Capital, Capitalize, Antonym, TREC), the extracted vectors every task.
#
# **Uncertainty.** Extracted vectors are deterministic given their data: each accuracy gets the Wilson
# interval of its $n$ test queries. A middle-layer LTV's accuracy is a mean over its seeds with a two-level
# (seed and query) bootstrap interval; a sweep LTV (one seed) gets a Wilson interval. Every comparison
# between methods is **paired**: the same test queries, resampled together (`paired_bootstrap_difference`,
# stratified by task for averages over tasks, `ltvlib.study.ltvs.task_contrast`).

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"
recipe = None  # None: the profile's recipe; "fast" or "paper"

# %%
import time
import warnings

# Progress bars are noise in a rendered page: tqdm's notebook bar (needs ipywidgets) and the loading bar.
warnings.filterwarnings("ignore", message="IProgress not found")
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display
from transformers.utils import logging as hf_logging

from ltvlib.book.scorecard import (
    Claim,
    Verdict,
    combine_rule,
    direction_rule,
    interpret,
    not_testable,
    record_claims,
)
from ltvlib.models import load_model
from ltvlib.stats import format_estimate
from ltvlib.study import extracted_tables as tables
from ltvlib.study.extracted import (
    EXTRACTED_LABELS,
    cached_function_vector,
    compare_at_layer,
    extracted_curve,
    gap_change,
)
from ltvlib.study.ltv_report import LTVLedger
from ltvlib.study.ltvs import icl_accuracy, ltv_accuracy, task_mean, trained_ltvs
from ltvlib.study.plans import extracted_plan

hf_logging.disable_progress_bar()
ledger = LTVLedger()  # every LTV number this chapter shows goes through it
started = time.perf_counter()
lm = load_model(model, device=device)
mid = lm.middle_layer
# the extracted vectors are measured at every LTV layer too, so that each layer of the LTV sweep has its
# paired comparison (the profile's sweep and the LTV sweep need not pick the same layers)
plan = extracted_plan(profile, recipe=recipe, seed=seed, n_layers=lm.n_layers)
run, seeds = plan.run_sizes, plan.seeds
ltv_at = {t: list(ls) for t, ls in plan.ltv_layers.items()}
sweep_tasks, sweep_ltv_layers = list(plan.sweep_tasks), list(plan.sweep_ltv_layers)
layers, late = list(plan.layers), list(plan.late)
display(Markdown(tables.describe_setup(lm, profile, run, plan)))

# %% [markdown]
# ## The three vectors
#
# All three are injected at the **last prompt position** of the zero-shot prompt `Q: {x}\nA:`, and the
# metric is the paper's: the top-1 next token over the whole vocabulary must equal the first token of the
# gold answer.
#
# - **LTV** (this paper): a vector trained by gradient descent on zero-shot prompts, *added* to the
#   residual stream *entering* block $l$ (`ltvlib.study.ltvs.trained_ltv`, one vector per layer and seed),
#   with steps relative to the stream's scale (initial range at that layer, learning rate at the last one).
# - **Vanilla TV** (Hendel et al.): run ICL prompts of the task ($5$ demonstrations and a dummy query), take
#   the last token's hidden state *leaving* block $l$, average it over dummy queries and demonstration sets,
#   and **replace** the zero-shot prompt's state there with it
#   (`ltvlib.baselines.vanilla_tv`). Hendel et al. write their prompts as `example:{x}->{y}`; the layer
#   curves below use the task's own `Q:/A:` template for the ICL prompts so that every method is scored on
#   the same test prompts, and the table adds the original (Hendel's template, layer chosen on validation
#   data). We also show the form the LTV paper writes, the **difference** of mean ICL and zero-shot states
#   *added* at the same site (dashed). Where a comparison names one "Vanilla TV", it is the better of the two
#   forms at that layer (chosen on the test queries, which can only favour the baseline).
# - **FV** (Todd et al.): average every attention head's output (before `o_proj`) at the last token of
#   clean 10-shot prompts; rank heads by their causal indirect effect (patch a head's mean output into
#   prompts whose demonstration labels are shuffled and measure the gain in probability of the gold token);
#   sum the top-10 heads' mean outputs projected through their slices of `o_proj`; *add* the sum to the
#   output of block $l$ (`ltvlib.baselines.function_vector`). Todd et al. inject at about $L/3$; the curves
#   move it through the layers.
#
# The LTV's site (the block *input* of layer $l$) is the extracted vectors' site (the block *output*) of
# layer $l-1$; we keep each method at its own paper's site and label the x-axis with $l$.

# %% [markdown]
# ## References: zero-shot and ICL

# %%
icl = {(t, k): icl_accuracy(lm, t, k, run, seed=seed) for t in plan.tasks for k in (0, *plan.icl_shots)}
best_shots, ref_est, ref_table = tables.references(icl, plan.tasks, plan.icl_shots)
best_icl_col = f"{best_shots}-shot ICL"
display(ref_table)

# %% [markdown]
# ## Extracted vectors at every layer
#
# One extraction per task and method serves every layer: the Vanilla TV records the last-token state leaving
# every block at once, and the FV's heads are chosen once; each layer then costs one single-token pass over
# the test prompts' cached prefixes.

# %%
t0 = time.perf_counter()
curves = {(task, method): extracted_curve(lm, task, run, method, layers, seed=seed)
          for task in plan.tasks for method in EXTRACTED_LABELS}
extracted, chosen = tables.collect_extracted(curves)  # (method, task, layer) -> per-query correctness (queries,)
print(f"extracted vectors: {time.perf_counter() - t0:.0f} s")

# %% [markdown]
# ## Learned vectors
#
# The middle-layer LTVs are the ones chapter 0 trained (same cache entries, all seeds); the layer sweep trains
# one more LTV per layer (first seed) for the tasks listed at the top, from the earliest layer up, so that the
# prompt caches built for one layer serve the later ones.

# %%
t0 = time.perf_counter()
ltv_vectors, ltv_records = {}, {}  # (task, layer) -> per seed
for task in plan.tasks:
    for layer in ltv_at[task]:
        layer_seeds = seeds if layer == mid else seeds[:1]
        ltv_vectors[task, layer] = trained_ltvs(lm, task, run, layer_seeds, layers=[layer])
        ltv_records[task, layer] = [ltv_accuracy(lm, v, run, seed=seed) for v in ltv_vectors[task, layer]]
print(f"learned vectors: {time.perf_counter() - t0:.0f} s")
# (task, layer) -> correctness of the seeds that trained, (seeds, queries); absent if none trained
ltv = tables.trained_correct(ltv_vectors, ltv_records, ledger)
display(tables.training_table(ltv_vectors))

# %%
# Accuracies with their 95 % intervals, per (method, task, layer) and averaged over tasks
avg_tasks = sweep_tasks or list(plan.tasks)
acc = tables.accuracies(extracted, ltv, layers, sweep_ltv_layers, avg_tasks)

# %% mystnb={"figure": {"caption": "First-token accuracy on zero-shot test prompts with one vector injected at the last token of layer $l$: LTV (added at the input of block $l$; mean over three seeds at the middle layer, one elsewhere), Vanilla TV (replace, solid; difference form, dashed; both at the output of block $l$) and FV (added at the output of block $l$). Bands: 95 % intervals (Wilson for one vector on $n$ test queries, seed-and-query bootstrap for the middle-layer LTV, stratified bootstrap for the average). Horizontal lines: zero-shot and the best ICL setting; the thin vertical line marks the middle layer. The last panel averages over the tasks of the LTV sweep and marks the paper's middle-layer values (Llama-3.1-8B, seven-task average: LTV 83.49 %, Vanilla TV 37.80 %, FV 37.30 %) with stars in the methods' colours.", "name": "ch01-fig-layers"}}
fig, axes = tables.plot_layers(acc, icl, plan.tasks, avg_tasks, best_shots, mid)
for ax, title in zip(axes.flat, [*plan.tasks, f"average over {', '.join(avg_tasks)}"]):
    ax.set_title(title, fontsize=10)
for ax in [*axes[-1, :], axes.flat[len(plan.tasks) - 1]]:
    ax.set_xlabel("injection layer $l$")
for ax in axes[:, 0]:
    ax.set_ylabel("accuracy (%)")
fig.suptitle(f"Learned against extracted task vectors by layer, {lm.name} ({profile} profile)", fontsize=11)
fig.tight_layout(rect=(0, 0.1, 1, 1))
plt.show()

# %% [markdown]
# (ch01-table-layers)=
#
# ## The LTV against the extracted vectors, layer by layer
#
# At every layer where the sweep trained LTVs, the task-average accuracy of the LTV minus that of the FV and
# of the Vanilla TV (the better of its two forms there), on the same test queries, with a paired stratified
# bootstrap interval. Tasks whose LTV did not train at a layer are left out of that layer's row (named in the
# last column).

# %%
by_layer, layer_table = tables.layer_comparisons(ltv, extracted, sweep_tasks, sweep_ltv_layers, seed)
display(layer_table if layer_table is not None else Markdown("No LTV layer sweep in this profile."))

# %% [markdown]
# (ch01-table-middle)=
#
# ## The baseline setting: middle layer
#
# The paper's Table 1 compares the three vectors at the middle layer and last position. Beside them: the
# original Vanilla TV (Hendel's `example:{x}->{y}` prompts, zero-shot prompts in the same format, layer
# chosen on validation data) and the FV at its own default layer $L/3$. Cells: accuracy (%) ± half-width of
# the 95 % interval (Wilson; LTV: seed-and-query bootstrap over its seeds; average: stratified bootstrap).

# %%
# layers=None: the layer the Vanilla TV chose on validation data
hendel = {t: extracted_curve(lm, t, run, "vanilla_tv", None, seed=seed, template="hendel") for t in plan.tasks}
fv_layer = lm.n_layers // 3
fv_own = {t: extracted[("function_vector", t, fv_layer)] if fv_layer in layers else
          np.asarray(extracted_curve(lm, t, run, "function_vector", [fv_layer], seed=seed)["layers"][str(fv_layer)]
                     ["correct"], dtype=float) for t in plan.tasks}
mid_tasks = [t for t in plan.tasks if (t, mid) in ltv]
middle = compare_at_layer(ltv, extracted, mid_tasks, mid, seed=seed) if mid_tasks else None
display(tables.middle_table(plan.tasks, mid, icl, ref_est, best_shots, acc, ltv, extracted, hendel, fv_own, fv_layer,
                            len(seeds), middle, mid_tasks))
display(Markdown(
    "Hendel-original layers chosen on validation: "
    + ", ".join(f"{t} {hendel[t]['chosen_layer']}" for t in plan.tasks)
    + ". Vanilla TV layers chosen on validation in the task template: "
    + ", ".join(f"{t} {chosen[t]}" for t in plan.tasks) + "."
))

# %% [markdown]
# ## Which heads make the function vector
#
# The indirect effect of every head (averaged over the corrupted prompts) for one task, and the top heads of
# each task.

# %% mystnb={"figure": {"caption": "Causal indirect effect of each attention head on one task (rows: heads, columns: layers): the gain in probability of the gold first token when the head's last-token output on shuffled-label prompts is replaced by its mean over clean prompts, averaged over the corrupted prompts of the function-vector extraction (their number is in the set-up line at the top). The table after the figure lists each task's top heads, best first.", "name": "ch01-fig-heads"}}
fvs = {t: cached_function_vector(lm, t, run, seed=seed) for t in plan.tasks}
show = "antonym" if "antonym" in fvs else plan.tasks[0]
fig, ax = tables.plot_heads(fvs[show].indirect_effect.T.numpy())
ax.set_title(f"Indirect effect of each head on {show} ({lm.name})", fontsize=10)
ax.set_xlabel("layer")
ax.set_ylabel("head")
fig.tight_layout()
plt.show()

# %% [markdown]
# The top heads of each task's function vector, best first:

# %%
display(tables.heads_table(fvs))

# %% [markdown]
# ## What we measured, and how it compares
#
# Three claims, each decided by a rule on paired intervals (the verdict section names the rules):
#
# 1. **Middle layer**: the LTV's task-average accuracy minus the FV's and minus the Vanilla TV's, over every
#    task with a trained LTV; both intervals must lie above 0.
# 2. **Every layer**: the same two differences at each layer of the LTV sweep (the table above), combined over
#    the layers: every layer with both intervals above 0 → reproduced; some layers → partly.
# 3. **Gap largest at late layers**: the LTV's lead over the strongest extracted vector at each layer, averaged
#    over the late layers, minus that lead at the middle layer, on the sweep tasks (paired over their queries);
#    its interval above 0 → reproduced, below → not reproduced, across 0 → inconclusive.

# %%
def direction(est):
    return direction_rule(est.value, est.interval, paper_direction=+1)


if middle is not None:
    mid_rule = combine_rule({"LTV − FV": direction(middle["LTV − FV"]),
                             "LTV − Vanilla TV": direction(middle["LTV − Vanilla TV"])})
    mid_intervals = {k: middle[k] for k in ("LTV", "FV", "Vanilla TV", "LTV − FV", "LTV − Vanilla TV")}
    form = EXTRACTED_LABELS[middle["vanilla_form"]].split("(")[1].rstrip(")")
    mid_ours = (f"LTV {format_estimate(middle['LTV'])}, Vanilla TV ({form} form) "
                f"{format_estimate(middle['Vanilla TV'])}, FV {format_estimate(middle['FV'])}; LTV − FV "
                f"{format_estimate(middle['LTV − FV'])}, LTV − Vanilla TV {format_estimate(middle['LTV − Vanilla TV'])} "
                f"(layer {mid}, {len(mid_tasks)}-task average)")
else:
    mid_rule, mid_intervals, mid_ours = not_testable("no middle-layer LTV trained in this run"), {}, "no trained LTV"
claim_mid = Claim(
    paper_claim=1, key="middle-layer",
    statement="At the middle layer the LTV beats both extracted task vectors (the paper's Table 1, first column).",
    paper="LTV 83.49 %, Vanilla TV 37.80 %, FV 37.30 % (Llama-3.1-8B, seven-task average)",
    ours=mid_ours, rule=mid_rule, intervals=mid_intervals,
    evidence="ch01-table-middle", evidence_title="the middle-layer table",
)

layer_parts, layer_intervals = {}, {}
for layer in sweep_ltv_layers:
    if layer not in by_layer:
        layer_parts[f"layer {layer}"] = not_testable(f"no LTV trained at layer {layer}")
        continue
    r = by_layer[layer]
    layer_parts[f"layer {layer}"] = combine_rule({"LTV − FV": direction(r["LTV − FV"]),
                                                  "LTV − Vanilla TV": direction(r["LTV − Vanilla TV"])})
    layer_intervals[f"L{layer} LTV − FV"] = r["LTV − FV"]
    layer_intervals[f"L{layer} LTV − Vanilla TV"] = r["LTV − Vanilla TV"]
every_rule = combine_rule(layer_parts) if layer_parts else not_testable("no LTV layer sweep in this profile")
held = [k for k, p in layer_parts.items() if p.verdict is Verdict.REPRODUCED]
claim_every = Claim(
    paper_claim=1, key="every-layer",
    statement="The LTV beats the extracted task vectors at every injection layer (the paper's Figure 2).",
    paper="LTV above Vanilla TV and FV at every layer (Llama-3.1-8B; per-layer numbers not in our sources)",
    ours=(f"both paired differences above 0 at {len(held)} of {len(layer_parts)} layers "
          f"({', '.join(held) or 'none'}; tasks {', '.join(sweep_tasks)})") if layer_parts
    else "no LTV layer sweep in this profile",
    rule=every_rule, intervals=layer_intervals,
    # the verdict combines layers whose LTVs have one seed with the middle layer's three: the claim counts the
    # fewest (the default would take the most of its intervals)
    seeds=min((e.seeds for e in layer_intervals.values()), default=None),
    evidence="ch01-table-layers", evidence_title="the per-layer table",
)

late_tasks = [t for t in sweep_tasks if all((t, l) in ltv for l in (*late, mid))]
if late and late_tasks:
    d_gap = gap_change(ltv, extracted, late_tasks, late, mid, seed=seed)
    late_rule, late_intervals = direction(d_gap), {"late-layer lead − middle-layer lead": d_gap}
    late_ours = (f"the LTV's lead over the strongest extracted vector at layers {', '.join(map(str, late))} minus "
                 f"its lead at layer {mid}: {format_estimate(d_gap)} (above 0: the lead grows late; "
                 f"{', '.join(late_tasks)})")
else:
    d_gap = None
    late_rule = not_testable("no task has a trained LTV at the late layers and the middle layer in this profile")
    late_intervals, late_ours = {}, "no trained LTV at a late layer in this run"
claim_late = Claim(
    paper_claim=1, key="late-layers",
    statement="The LTV's lead over extracted vectors is largest at late layers, where extracted vectors collapse.",
    paper="gap largest at late layers (Llama-3.1-8B, Figure 2; numbers not in our sources)",
    ours=late_ours, rule=late_rule, intervals=late_intervals,
    evidence="ch01-table-layers", evidence_title="the per-layer table",
)

lines = [(f"- **Middle layer** ({len(mid_tasks)} tasks): {mid_ours}. Paper (Llama-3.1-8B, 7 tasks): 83.49 / 37.80 / "
          "37.30 %.")]
if middle is not None:
    lines.append(f"- Against ICL at the middle layer: LTV {format_estimate(middle['LTV'])}, {best_icl_col} "
                 f"{format_estimate(task_mean({t: np.asarray(icl[t, best_shots]['correct'], float) for t in mid_tasks}))}.")
lines.append(f"- **Layer sweep**: {claim_every.ours}.")
lines.append(f"- **Late layers**: {late_ours}.")
display(Markdown("\n".join(lines)))

# %%
values_mid = {
    "fv": format_estimate(middle["LTV − FV"], bounds=True) if middle else "",
    "vtv": format_estimate(middle["LTV − Vanilla TV"], bounds=True) if middle else "",
    "ltv": format_estimate(middle["LTV"]) if middle else "", "k": len(mid_tasks)}
interpret(claim_mid, {
    Verdict.REPRODUCED: (
        "At the middle layer the LTV is above both extracted vectors on this model, by more than the noise of "
        "{k} tasks' test queries and its seeds: LTV − FV {fv}, LTV − Vanilla TV {vtv}. This is the paper's "
        "ordering. An LTV is optimised for exactly the metric scored here, on this model, at this layer; the "
        "extracted vectors are estimates of what ICL writes into the stream, and they carry no more of the task "
        "than the model's own ICL state does."),
    Verdict.PARTLY: (
        "At the middle layer the LTV is clearly above one extracted vector but not the other (LTV − FV {fv}, "
        "LTV − Vanilla TV {vtv}): the paper's ordering holds only in part on this model."),
    Verdict.NOT_REPRODUCED: (
        "At the middle layer an extracted vector is at least as good as the LTV on this model (LTV − FV {fv}, "
        "LTV − Vanilla TV {vtv}): the paper's ordering does not hold here. The training table shows whether "
        "those LTVs stopped early."),
    Verdict.INCONCLUSIVE: (
        "At the middle layer the test queries cannot separate the LTV from the extracted vectors (LTV − FV {fv}, "
        "LTV − Vanilla TV {vtv}): the intervals admit both orderings."),
    Verdict.NOT_TESTABLE: "No middle-layer LTV trained in this run, so the ordering cannot be tested here.",
}, **values_mid)

# %%
testable = [k for k, p in layer_parts.items() if p.verdict is not Verdict.NOT_TESTABLE]
values_every = {"held": len(held), "total": len(testable), "names": ", ".join(held) or "none",
                "missing": ", ".join(k for k in testable if k not in held) or "none",
                "untrained": ", ".join(k for k in layer_parts if k not in testable) or "none"}
interpret(claim_every, {
    Verdict.REPRODUCED: (
        "The LTV is above both extracted vectors at every swept layer where it trained ({total} of {total}; no "
        "trained LTV at: {untrained}), with both paired intervals above 0: from the first layer to the last, a "
        "trained vector does what an extracted one does not."),
    Verdict.PARTLY: (
        "Both paired intervals lie above 0 at {held} of the {total} swept layers where the LTV trained "
        "({names}); at the others ({missing}) at least one does not, so the paper's \"every layer\" holds only "
        "in part on this model (no trained LTV at: {untrained}). The per-layer table shows which baseline comes "
        "close there."),
    Verdict.NOT_REPRODUCED: (
        "At some swept layers an extracted vector is clearly at least as good as the LTV, and at no layer is the "
        "LTV clearly ahead of both ({missing}): the paper's \"every layer\" does not hold on this model."),
    Verdict.INCONCLUSIVE: (
        "At every swept layer at least one paired interval admits both orderings: these test queries cannot "
        "say whether the LTV beats the extracted vectors layer by layer."),
    Verdict.NOT_TESTABLE: "This profile trains no LTV layer sweep, so the per-layer claim is not tested here.",
}, **values_every)

# %%
values_late = {"d": format_estimate(d_gap, bounds=True) if d_gap else "", "late": ", ".join(map(str, late)),
               "mid": mid, "tasks": ", ".join(late_tasks)}
interpret(claim_late, {
    Verdict.REPRODUCED: (
        "The LTV's lead over the strongest extracted vector is larger at the late layers ({late}) than at the "
        "middle layer {mid}: by {d} on {tasks}. The extracted vectors lose more with depth than the LTV does, as "
        "in the paper's Figure 2."),
    Verdict.PARTLY: "Part of the late-layer comparison holds ({d}).",
    Verdict.NOT_REPRODUCED: (
        "The LTV's lead over the strongest extracted vector is smaller at the late layers ({late}) than at the "
        "middle layer {mid} ({d} on {tasks}): on this model the gap is not largest at late layers."),
    Verdict.INCONCLUSIVE: (
        "Whether the LTV's lead grows towards the late layers ({late}) cannot be told from these queries: the "
        "difference of the late-layer and middle-layer leads, {d} on {tasks}, admits both signs."),
    Verdict.NOT_TESTABLE: "No task has a trained LTV at both the late layers and the middle layer in this run.",
}, **values_late)

# %%
print(f"chapter time: {time.perf_counter() - started:.0f} s")

# %% [markdown]
# ## What differs from the papers, and why
#
# - **Model and tasks.** The paper's numbers are on Llama-3.1-8B and average its seven tasks; ours are on a
#   135M-parameter model. The middle-layer comparison covers the same seven tasks; the LTV layer sweep, and so
#   the per-layer and late-layer claims, covers the four short-prompt tasks (Capital, Capitalize, Antonym,
#   TREC) in `cpu`. A 135M-parameter model is expected to do these tasks far worse than Llama-3.1-8B, so the
#   book compares methods on one model rather than numbers across models.
# - **One Vanilla TV per task.** Hendel et al. recompute the vector for every test query from its own
#   demonstrations; like the LTV paper, we average several demonstration sets into one vector per task.
# - **Vanilla TV template in the curves.** The curves use the task's `Q:/A:` template so that all methods
#   share test prompts and zero-shot line; Hendel's own format appears in the table. Replacing the state
#   (Hendel et al.) discards the query's own last-token state; adding the difference (the LTV paper's form)
#   keeps it; comparisons take the better form at each layer.
# - **FV sizes in the `cpu` profile.** Todd et al. use 100 clean and 25 corrupted prompts (the `paper`
#   profile does); the `cpu` profile uses fewer (see the top of the chapter), because 10-shot RTE prompts run
#   to about 940 tokens and the full sizes would take most of an hour on two CPU cores.
# - **Seeds.** The middle-layer LTVs have three seeds in `cpu` (chapter 0's vectors); the sweep LTVs one.
# - **LTV layer sweep in the `cpu` profile.** One LTV per (task, layer) costs about 10-70 s for the four
#   short-prompt tasks on two CPU cores (more the earlier the layer: every later block runs forward and
#   backward; see the training table) and minutes for SST-2, SNLI and RTE. The `cpu` profile trains the four
#   short-prompt tasks at six spread layers plus the middle one, the long-prompt tasks at the middle layer only;
#   `paper` trains every task at every layer. The extracted vectors get ten spread layers plus the middle one
#   on every task.
# - **What was cut for time.** The sweep had ten spread layers before the middle-layer LTVs got three seeds;
#   it now has six (0, 6, 12, 17, 23, 29 of 30), which saves about 16 LTVs (about five minutes on two cores) and
#   keeps two late layers (23 and 29) for the late-layer claim. The extracted curves keep all ten layers (one
#   single-token pass per layer). The chapter's target is 25 minutes from a cold cache after chapter 0.
# - **Sites.** Each method keeps its own paper's site (LTV: block input; Vanilla TV and FV: block output).
# - **Vectors are reusable.** `ltvlib.study.ltvs.trained_ltv`, `ltvlib.study.extracted.cached_vanilla_tv`
#   and `cached_function_vector` return the cached vectors of this chapter to any later chapter.

# %% [markdown]
# ## Verdicts for the scorecard
#
# The rules (`ltvlib.book.scorecard`): each paired difference (LTV minus an extracted vector, stratified bootstrap
# over the test queries and, at the middle layer, the LTV's seeds) gets `direction_rule`: interval above 0 →
# reproduced, below → not reproduced, across → inconclusive. The middle-layer claim combines LTV − FV and LTV −
# Vanilla TV (`combine_rule`: both reproduced → reproduced, one → partly); the every-layer claim combines the
# per-layer verdicts the same way; the late-layer claim applies `direction_rule` to the difference of the
# late-layer and middle-layer leads. LTVs that did not train are left out of every comparison (the ledger below).

# %%
display(ledger.summary())
record_claims("01_ltv_vs_extracted", [claim_mid, claim_every, claim_late], model=model, profile=profile, seed=seed,
              ltvs=ledger)
