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
# # Linear propagation: rotation and stretch
#
# **The claim** (the paper's fourth): the effect of a learned task vector (LTV) $\theta$ injected at layer $l$ on
# the last layer is close to a linear map of it, $\Delta h_L \approx W\theta$, so that injecting $W\theta$ at the
# last layer gives an accuracy close to the LTV's at most layers. Splitting $W = QS$ (polar decomposition: a
# rotation $Q$ and a symmetric stretch $S$), early vectors are rotated toward the label unembeddings and late ones
# mostly stretched: $\cos(\theta, Q\theta)$ rises with depth. The paper shows these in figures on Llama models and
# gives no number; its limitations section says the mechanism analysis is done on tasks with a label space. This
# reading is transcribed from a secondary summary of the paper, not checked against the paper itself.

# %% tags=["parameters", "remove-cell"]
model = "smollm2-135m"
profile = "cpu"
recipe = None  # None: the profile's LTV recipe; "fast" or "paper"
seed = 0
device = "auto"
n_draws = None  # random vectors per (task, layer) control; None: the profile's
works_margin = 0.10  # a point counts for the reconstruction test when the LTV beats zero-shot by this much

# %% tags=["hide-input"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display
from matplotlib.ticker import MaxNLocator
from myst_nb import glue
from transformers.utils import logging as hf_logging

from ltvlib.book.scorecard import (
    Claim,
    combine_rule,
    direction_rule,
    interpret,
    not_testable,
    record_claims,
    threshold_rule,
)
from ltvlib.ltv_record import LTVRecord
from ltvlib.models import load_model
from ltvlib.study import linearity_tables as tables
from ltvlib.study.claim_summary import SummaryRow, estimate_cell, summary_markdown
from ltvlib.study.linearity import cached_linearity, cached_linearity_control
from ltvlib.study.ltv_report import LTVLedger
from ltvlib.study.ltvs import trained_ltvs_by_layer
from ltvlib.study.plans import linearity_chapter_plan
from ltvlib.study.tables import interval_table
from ltvlib.tasks import get_task

hf_logging.disable_progress_bar()
pd.set_option("display.max_colwidth", None)
lm = load_model(model, device=device)
chapter_plan = linearity_chapter_plan(profile, recipe=recipe, n_layers=lm.n_layers, n_draws=n_draws)
run, cfg, n_draws = chapter_plan.run_sizes, chapter_plan.config, chapter_plan.n_draws
plan = {t: list(ls) for t, ls in chapter_plan.layers.items()}
label_tasks = [t for t in plan if get_task(t).labels]
sweep_task = chapter_plan.sweep_task  # the label-space task with the most layers: the rotation claims' sweep
ledger = LTVLedger()

# every (task, layer) LTV (chapters 00 and 01 train them); only those that learned are measured
points = [(t, l) for t, ls in plan.items() for l in ls]
ltvs = {p: vs[0] for p, vs in trained_ltvs_by_layer(lm, plan, run, [seed]).items()}  # a layer's tasks together
trained = {p: LTVRecord.of(ltvs[p]).trained is True for p in points}
# the fit of W, the reconstruction Wθ and its upper bound, the polar decomposition, the logit lens
res = {p: cached_linearity(lm, p[0], run, p[1], config=cfg, seed=seed) for p in points if trained[p]}
# the same fit, cos(r, Q r) and alignments for random vectors of |θ|, and the shift accuracies on the test queries
ctl = {p: cached_linearity_control(lm, p[0], run, p[1], config=cfg, seed=seed, n_draws=n_draws)
       for p in points if trained[p]}
# the sweep task's other seeds at each of its layers, with the same fit and controls: the rotation and alignment
# intervals resample seeds, the layers held fixed
sweep_seeds = list(chapter_plan.seeds(sweep_task, seed)) if sweep_task else []
swept = trained_ltvs_by_layer(lm, {sweep_task: plan[sweep_task]}, run, sweep_seeds) if sweep_task else {}
seed_ltvs = {(l, s): v for (_, l), vs in swept.items() for s, v in zip(sweep_seeds, vs)}
seed_learned = {k: LTVRecord.of(v).trained is True for k, v in seed_ltvs.items()}
seed_ctl = {(l, s): ctl[sweep_task, l] if s == seed else cached_linearity_control(
    lm, sweep_task, run, l, config=cfg, seed=s, n_draws=n_draws) for (l, s), ok in seed_learned.items() if ok}
ledger.keep([v for (l, s), v in seed_ltvs.items() if s != seed], where="the rotation intervals")

# %% tags=["hide-input"]
# The rules: label-space points only; an LTV that did not learn is left out of every test.
recon_points = tables.reconstruction_points(points, ctl, trained, label_tasks, works_margin)
if recon_points:
    recon_intervals = tables.reconstruction_gap(ctl, recon_points)
    recon_gap = recon_intervals["LTV (own shift) − Wθ"]
    recon_rule = threshold_rule(recon_gap.value, recon_gap.interval, 0.10, at_least=False)
else:
    recon_rule = not_testable("no label-space LTV both learned and beat zero-shot by the margin")
    recon_intervals, recon_gap = {}, None

sweep_ls = tables.sweep_layers(plan, sweep_task, trained, ltvs, res, ledger)
rot_ls = [l for l in sweep_ls if all(seed_learned[l, s] for s in sweep_seeds)]  # every seed learned there
cos_ex = tables.rotation_excess(seed_ctl, sweep_seeds, rot_ls, seed)
if cos_ex is not None:
    rot_rule = combine_rule({
        "cos(θ, Qθ) rises with depth": direction_rule(cos_ex["ltv"].value, cos_ex["ltv"].interval, +1),
        "it rises more than for random vectors of θ's norm": direction_rule(cos_ex["excess"].value,
                                                                             cos_ex["excess"].interval, +1),
    })
    rot_intervals = {"change of cos(θ, Qθ), first to last layer": cos_ex["ltv"],
                     "the same for random vectors": cos_ex["control"], "LTV minus random": cos_ex["excess"]}
else:
    rot_rule = not_testable(f"fewer than 3 layers of the sweep where all {len(sweep_seeds)} LTV seeds learned "
                            f"({len(rot_ls)}), or fewer than 2 seeds: no slope with an interval over seeds")
    rot_intervals = {}
early_ls = [l for l in rot_ls if l < lm.middle_layer]
al_ex = tables.alignment_excess(seed_ctl, sweep_seeds, early_ls, seed)
if al_ex is not None:
    al_rule = combine_rule({
        "rotation raises θ's task alignment at early layers": direction_rule(al_ex["ltv"].value,
                                                                              al_ex["ltv"].interval, +1),
        "by more than it raises random vectors'": direction_rule(al_ex["excess"].value, al_ex["excess"].interval, +1),
    })
    al_intervals = {"alignment gain align(Qθ) − align(θ), early layers": al_ex["ltv"],
                    "the same for random vectors": al_ex["control"], "LTV minus random": al_ex["excess"]}
else:
    al_rule = not_testable(f"fewer than 2 layers before the middle layer where all {len(sweep_seeds)} LTV seeds "
                           f"learned ({len(early_ls)}), or fewer than 2 seeds")
    al_intervals = {}


def signed(e):
    return f"{e.value:+.3f} [{e.low:+.3f}, {e.high:+.3f}] (seeds={e.n})"


dec_recon = ", ".join(f"{t} L{l}" for t, l in recon_points) or "none"
dec_sweep = (f"{sweep_task} at layers {', '.join(map(str, rot_ls))}, seeds {', '.join(map(str, sweep_seeds))}"
             if rot_ls else "none")
claims = [
    Claim(
        paper_claim=4, key="linear-reconstruction",
        statement="The LTV's effect on the last layer is nearly linear: Wθ injected there does about what θ does.",
        paper="figure: Wθ at the last layer close to the LTV's accuracy at most layers (Llama models; no number)",
        ours=(f"pooled label-space points ({dec_recon}): LTV (own shift) minus Wθ {estimate_cell(recon_gap)}"
              if recon_gap else "no label-space point qualifies"),
        rule=recon_rule, intervals=recon_intervals, evidence="ch05-fig-reconstruction", evidence_title="Figure 5.1",
        note=f"decided on: {dec_recon}; 'close' = a gap of at most 10 points (our bound)",
    ),
    Claim(
        paper_claim=4, key="rotation-depth",
        statement="Early vectors are rotated, late ones mostly stretched: cos(θ, Qθ) rises with depth.",
        paper="figure: cos(θ, Qθ) rises with depth; Q close to the identity at late layers (Llama models)",
        ours=(f"{dec_sweep}: change of cos(θ, Qθ) {signed(cos_ex['ltv'])}, LTV minus random "
              f"{signed(cos_ex['excess'])}" if cos_ex else "not enough learned layers"),
        rule=rot_rule, intervals=rot_intervals, evidence="ch05-fig-rotation", evidence_title="Figure 5.2",
        note=f"decided on: {dec_sweep}; learned vectors only, against {n_draws} random vectors per layer",
    ),
    Claim(
        paper_claim=4, key="rotation-alignment",
        statement="Rotation turns early vectors toward the label unembeddings (task alignment rises).",
        paper="logit lens: for early layers Qθ aligns with the label unembeddings, θ does not (Llama models)",
        ours=(f"{sweep_task} at layers {', '.join(map(str, early_ls))}: alignment gain {signed(al_ex['ltv'])}, "
              f"LTV minus random {signed(al_ex['excess'])}" if al_ex else "not enough learned early layers"),
        rule=al_rule, intervals=al_intervals, evidence="ch05-fig-rotation", evidence_title="Figure 5.2",
        note=(f"decided on: {sweep_task} at layers {', '.join(map(str, early_ls)) or 'none'} (before the middle "
              f"layer), seeds {', '.join(map(str, sweep_seeds))}"),
    ),
]
by_key = {c.key: c for c in claims}
display(Markdown(summary_markdown([
    SummaryRow("Wθ does what θ does", "close at most layers (figure)", "LTV − Wθ, pooled queries", recon_gap,
               by_key["linear-reconstruction"].verdict.value, why="no label-space point qualifies"),
    SummaryRow("cos(θ, Qθ) rises with depth", "rises (figure)", "", None, by_key["rotation-depth"].verdict.value,
               why=(f"LTV − random change of cos: {signed(cos_ex['excess'])}" if cos_ex else "not enough layers")),
    SummaryRow("Rotation aligns early vectors", "aligns (logit lens)", "", None,
               by_key["rotation-alignment"].verdict.value,
               why=(f"LTV − random alignment gain: {signed(al_ex['excess'])}" if al_ex else "not enough layers")),
])))
glue("recon_points", dec_recon, display=False)
glue("sweep", dec_sweep, display=False)
glue("not_learned", ", ".join(f"{t} L{l}" for t, l in points if not trained[t, l]) or "none", display=False)
glue("n_rot_seeds", len(sweep_seeds), display=False)
glue("rot_left_out", ", ".join(f"L{l} seed {s}" for (l, s), ok in seed_learned.items() if not ok) or "none",
     display=False)

# %% [markdown]
# The verdicts are decided on label-space tasks (TREC across depth, SST-2 at the middle layer); Antonym, an
# open-vocabulary task, is shown beside them: its answer is a different word for every query, which one vector
# added to every query cannot produce. An LTV counts when the lower end of its validation accuracy's 95 % interval
# is above zero-shot and the majority answer; those that did not learn ({glue:text}`not_learned`) are left out.
#
# ## What we measured
#
# ### Does $W\theta$ do what $\theta$ does?
#
# $W$ is fitted to the shift that perturbed copies of $\theta$ cause in the last layer's state. One vector
# $W\theta$ is then added to every test query's final-norm input. Its upper bound is each query's own measured
# shift, which reproduces the LTV exactly; between them sits the query-mean shift. The test pools the test queries
# of the label-space points whose LTV beats zero-shot by 10 points ({glue:text}`recon_points`).

# %% tags=["hide-input"]
display(tables.accuracy_table(points, res, ctl, ltvs, label_tasks, ledger))

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Test accuracy (whole vocabulary, top; label words only, bottom) per injection layer of each query's own shift (the LTV; upper bound), the query-mean shift and the constant Wθ, all added to the final-norm input, with zero-shot. Lines: the label-space sweep task; markers at the middle layer: the other tasks. Bands and whiskers: Wilson 95 % intervals. The paper gives no number to draw.", "name": "ch05-fig-reconstruction"}, "image": {"alt": "Accuracy per layer of the LTV's own shift, the mean shift, Wθ and zero-shot"}}
fig, axes = tables.plot_reconstruction(plan, sweep_task, trained, ctl)
for ax, (_, title) in zip(axes, tables.PANELS):
    ax.set_title(f"The LTV's shift against its linear reconstruction ({title})", fontsize=10)
    ax.set_ylabel("test accuracy (%)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
axes[1].set_xlabel("injection layer $l$")
fig.tight_layout(rect=(0, 0.14, 1, 1))
plt.show()

# %% [markdown]
# ### Rotation and alignment across depth
#
# For the sweep task ({glue:text}`sweep`): $\cos(\theta, Q\theta)$ of the LTV against $\cos(r, Q_r r)$ of random
# vectors $r$ of $\theta$'s norm at the same layer, each with its own fitted map, and the change of task alignment
# (the share of a vector in the span of the label unembeddings) that the rotation brings. A rise that random
# vectors share is the network's, not the learned vector's.

# %% tags=["hide-input"]
display(tables.rotation_table(points, ctl, ltvs, ledger))

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Top: cos(v, Qv) per injection layer for the learned LTVs of the label-space sweep task (first seed) and for random vectors of the same norm (mean; band: range of the draws); 1 means no rotation. Bottom: the change of task alignment the rotation brings, align(Qv) − align(v). The paper reports cos(θ, Qθ) rising with depth (figure, no number).", "name": "ch05-fig-rotation"}, "image": {"alt": "Two line panels per layer: rotation cosine and alignment gain, LTV against random vectors"}}
fig, axes = tables.plot_rotation(ctl, sweep_task, sweep_ls, lm.middle_layer)
for ax, (_, ylabel) in zip(axes, tables.ROTATION_PANELS):
    ax.set_ylabel(ylabel if sweep_ls else "no learned sweep")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
axes[0].set_title("Rotation across depth: the LTV against random vectors", fontsize=10)
axes[1].set_title("What the rotation does to task alignment", fontsize=10)
axes[1].set_xlabel("injection layer $l$")
fig.tight_layout(rect=(0, 0.07, 1, 1))
plt.show()

# %% tags=["hide-input"]
display(tables.checks_table(points, res, ltvs, ledger))
for caption, lens in tables.lens_tables(res, sweep_task, sweep_ls):
    display(Markdown(caption))
    display(lens)
SENTENCES = {
    "linear-reconstruction": {
        "reproduced": "One constant Wθ comes within 10 points of the LTV's own shift on the label-space points.",
        "partly": "The reconstruction test gave a mixed outcome.",
        "not reproduced": "The constant Wθ falls more than 10 points short of the LTV's own shift: what the LTV "
                          "adds differs from query to query in a way one linear image does not carry.",
        "inconclusive": "The gap's interval straddles the 10-point bound.",
        "not testable at this scale": "No label-space LTV both learned and beat zero-shot by the margin.",
    },
    "rotation-depth": {
        "reproduced": "cos(θ, Qθ) rises with depth, and more than for random vectors of the same norm.",
        "partly": "One of the two tests holds: compare the LTV's curve with the random vectors'.",
        "not reproduced": "cos(θ, Qθ) does not rise with depth, or rises less than for random vectors.",
        "inconclusive": "The change of cos(θ, Qθ), and its difference from random vectors', are within their "
                        "intervals of zero.",
        "not testable at this scale": "Fewer than three label-space LTVs across depth learned.",
    },
    "rotation-alignment": {
        "reproduced": "At early layers the rotation raises the LTV's task alignment more than random vectors'.",
        "partly": "One of the two alignment tests holds.",
        "not reproduced": "At early layers the rotation does not raise the LTV's alignment beyond random vectors'.",
        "inconclusive": "The early alignment gain and its excess over random vectors are within their intervals "
                        "of zero.",
        "not testable at this scale": "Fewer than two label-space LTVs before the middle layer learned.",
    },
}
for c in claims:
    glue(f"verdict_{c.key}", c.verdict.value, display=False)
    glue(f"sentence_{c.key}", Markdown(interpret(c, SENTENCES[c.key]).markdown()), display=False)
shown = recon_intervals | {f"rotation: {k}": e for k, e in rot_intervals.items()} | {
    f"alignment: {k}": e for k, e in al_intervals.items()}
display(interval_table(shown) if shown else Markdown("No interval: no learned label-space point."))

# %% [markdown]
# ## Verdict
#
# :::{admonition} Linear reconstruction
# **Verdict: {glue:text}`verdict_linear-reconstruction`.** Rule: the LTV's own shift minus $W\theta$, paired over
# the pooled test queries, at most 10 points on its whole 95 % interval (our bound for "close").
# {glue:md}`sentence_linear-reconstruction`
# :::
#
# :::{admonition} Rotation fades with depth
# **Verdict: {glue:text}`verdict_rotation-depth`.** Rule: the fitted change of $\cos(\theta, Q\theta)$ from the
# first to the last learned layer above 0, and above the random vectors' change, on 95 % intervals.
# {glue:md}`sentence_rotation-depth`
# :::
#
# :::{admonition} Rotation aligns early vectors with the labels
# **Verdict: {glue:text}`verdict_rotation-alignment`.** Rule: the mean alignment gain before the middle layer
# above 0, and above the random vectors', on 95 % intervals. {glue:md}`sentence_rotation-alignment`
# :::
#
# :::{dropdown} Caveats
# - **What the rotation intervals resample.** A fitted map exists once per learned vector. Each layer of the sweep
#   has {glue:text}`n_rot_seeds` LTV seeds, each with its own fit and its own random vectors; the rotation and
#   alignment intervals resample the seeds (and each seed's random draws) with the layers held fixed, so they carry
#   the spread over seeds, not over queries. A layer enters only where every seed learned (seeds that did not:
#   {glue:text}`rot_left_out`). The figure shows the first seed.
# - **Coverage.** Every layer of the TREC sweep whose LTV learned enters, the last layers included; SST-2 and
#   Antonym sit at the middle layer.
# - **Noise law, $\lambda$ and ridge are ours** (the paper's are not available): Gaussian perturbations of about
#   $\|\theta\|$ scaled by $\lambda \in \{0.1, 0.2, 0.3\}$, one query per perturbation with a control variate.
# - **"Last layer"** is the residual stream entering the final norm, for measuring shifts and for adding
#   $W\theta$.
# - **Scale.** SmolLM2-135M, not Llama; the paper's figures give no numbers to compare digits with.
# :::
#
# :::{dropdown} How it was measured
# $\theta$ is added to the residual stream entering block $l$ at the last token of the zero-shot prompt. For query
# $q$ the shift is the change of the last token's state entering the final norm. $W$ ($d \times d$) is fitted by
# ridge regression to the query-mean shift of perturbations $\theta + \lambda\varepsilon$, and its quality is its
# held-out $R^2$. $W = QS$ from the SVD; task alignment is $\|Pv\|/\|v\|$ with $P$ the projection onto the span of
# the label tokens' effective unembeddings. Each random vector of $\|\theta\|$ gets its own fit. Accuracies are
# first-token argmax over the whole vocabulary (and over the label words) on the test queries, with Wilson
# intervals; the reconstruction gap is a paired bootstrap over the pooled queries; the rotation statistics a
# bootstrap over seeds and their draws.
# :::

# %% tags=["remove-cell"]
record_claims("05_linearity", claims, model=model, profile=profile, seed=seed, ltvs=ledger)
