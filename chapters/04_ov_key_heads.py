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
# # How a task vector acts at the low level: OV circuits and key heads
#
# **The claim** (the paper's third): a learned task vector (LTV) $\theta$ added to the residual stream at the
# middle layer acts mainly through the OV circuits of the attention heads after it, and a few *key heads*
# carry most of its effect. In an SST-2 table on Llama-3.1-8B the paper reports that replacing $\theta$ by its
# OV reconstruction keeps **52 %** accuracy against the LTV's **83 %** (zero-shot **0 %**; an MLP-path
# reconstruction recovers little), and that ablating the top 10 % of heads by saliency drops accuracy to
# **51 %**, a random 10 % only to **78 %**. A figure shows the key heads right after the injection layer and in
# the last layers, attending less to the first token and more to the final position (no numbers). These
# numbers are transcribed from a secondary summary of the paper, not checked against the paper itself.

# %% tags=["parameters", "remove-cell"]
model = "smollm2-135m"
profile = "cpu"
recipe = None  # None: the profile's LTV recipe; "fast" or "paper"
seed = 0
device = "auto"
label_tasks = None  # None: the profile's label-space tasks (they decide the verdicts)
open_tasks = None  # None: the profile's open-vocabulary tasks (shown beside, not deciding)
fraction = 0.1  # key heads: the top 10 % by saliency, as in the paper
n_random = None  # random head sets per control (None: the profile's)
n_draws = None  # random vectors of the LTV's norm per OV control (None: the profile's)

# %% tags=["hide-input"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display
from matplotlib.ticker import MaxNLocator
from myst_nb import glue
from transformers.utils import logging as hf_logging

from ltvlib.book.claim_table import ClaimRow, claim_table
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
from ltvlib.stats import format_estimate
from ltvlib.study import ov_key_heads_tables as tables
from ltvlib.study.key_heads import key_head_experiment
from ltvlib.study.ltv_report import LTVLedger
from ltvlib.study.ltvs import task_splits, trained_ltv
from ltvlib.study.ov import ov_control_experiment, ov_experiment
from ltvlib.study.plans import ov_key_heads_plan
from ltvlib.study.tables import interval_table

hf_logging.disable_progress_bar()
pd.set_option("display.max_colwidth", None)
plan = ov_key_heads_plan(profile, recipe=recipe, label_tasks=label_tasks, open_tasks=open_tasks, n_random=n_random,
                         n_draws=n_draws)
run, label_list, open_list = plan.run_sizes, list(plan.label_tasks), list(plan.open_tasks)
task_list = label_list + open_list
n_random, n_draws = plan.n_random, plan.n_draws
lm = load_model(model, device=device)
mid = lm.middle_layer
L, H = lm.n_layers, lm.geometry.n_heads
ledger = LTVLedger()


def queries_and_test(task):
    """Analysis queries (validation split: saliency, mean head outputs, attention, MLP states) and test queries."""
    splits = task_splits(task, run)
    return list(splits.validation[: plan.n_queries]), list(splits.test)


# the middle-layer LTV of every task (chapter 00 trains them); only those that learned are measured
ltvs = {t: trained_ltv(lm, t, run, layers=[mid], seed=seed) for t in task_list}
learned = [t for t in task_list if LTVRecord.of(ltvs[t]).trained is True]
deciding = [t for t in label_list if t in learned]
not_learned = [t for t in task_list if t not in learned]

# OV: the LTV against its reconstructions; each reconstruction against random vectors of |θ| through the same map
ov = {t: ov_experiment(lm, ltvs[t], *queries_and_test(t)) for t in learned}
ovc = {t: {tables.control_key(path, variant): ov_control_experiment(
    lm, ltvs[t], queries_and_test(t)[1], n_draws=n_draws, seed=seed, variant=variant, path=path,
    queries=queries_and_test(t)[0]) for path in ("ov", "mlp") for variant in ("at |θ|", "paper")} for t in learned}

# key heads: saliency, ablation against random head sets, attention of the last position
kh = {t: key_head_experiment(lm, ltvs[t], *queries_and_test(t), fraction=fraction, n_random=n_random, seed=seed)
      for t in learned}

# %% tags=["hide-input"]
# The rules. Every claim is decided on the label-space tasks whose LTV learned, their test queries pooled.
NO_LTV = "no label-space LTV learned at the middle layer"
if deciding:
    pov = tables.pool_ov(ov, ovc, deciding)
    ov_parts = {
        "θ_OV at |θ| above random vectors' θ_OV at |θ|": direction_rule(
            pov.vs_random["ov/at |θ|"].value, pov.vs_random["ov/at |θ|"].interval, +1),
        "θ_OV at |θ| above the MLP control at |θ|": direction_rule(
            pov.ov_minus_mlp.value, pov.ov_minus_mlp.interval, +1),
        "θ_OV at |θ| keeps at least half of the LTV's gain": (
            threshold_rule(pov.share.value, pov.share.interval, 0.5) if pov.share is not None
            else not_testable("the LTVs do not beat zero-shot on the pooled queries: no gain to keep")),
        "θ_OV in the paper's form above random vectors' θ_OV in that form": (
            not_testable("every paper-form reconstruction, θ's and the random ones, scores 0 on every query")
            if pov.floor["ov/paper"] else direction_rule(pov.vs_random["ov/paper"].value,
                                                         pov.vs_random["ov/paper"].interval, +1)),
    }
    ov_rule, ov_intervals = combine_rule(ov_parts), pov.intervals
    key_intervals = tables.pool_key_heads(kh, deciding)
    key_gap = key_intervals["random-head minus key-head ablation (zero)"]
    key_rule = direction_rule(key_gap.value, key_gap.interval, +1)
else:
    pov, ov_rule, ov_intervals = None, not_testable(NO_LTV), {}
    key_rule, key_intervals, key_gap = not_testable(NO_LTV), {}, None

u_shares, n_u = tables.u_shape_shares(kh, deciding)
u_intervals = {f"{name}: share of key heads minus its share of the layers": e for name, e in u_shares.items()}
u_rule = (combine_rule({f"more key heads in the {name} than uniform": direction_rule(e.value, e.interval, +1)
                        for name, e in u_shares.items()})
          if u_shares else not_testable(f"{NO_LTV}, or fewer than 3 layers after it"))

att_pools = tables.attention_pools(kh, deciding, L, H) if deciding else None
att_intervals = tables.attention_differences(att_pools) if att_pools is not None else {}
FIRST = "attention to the first token, key minus other heads"
FINAL = "attention to the final position, key minus other heads"
att_rule = (combine_rule({
    "key heads attend less to the first token": direction_rule(att_intervals[FIRST].value,
                                                               att_intervals[FIRST].interval, -1),
    "key heads attend more to the final position": direction_rule(att_intervals[FINAL].value,
                                                                  att_intervals[FINAL].interval, +1),
}) if att_intervals else not_testable(NO_LTV))

dec_text = ", ".join(deciding) or "none"


def fmt(e):
    return format_estimate(e, bounds=True) if e is not None else "not measured"

claims = [
    Claim(paper_claim=3, key="ov-reconstruction",
          statement="Replacing the LTV by its OV-circuit reconstruction keeps much of its gain; the MLP path "
                    "recovers little.",
          paper="SST-2 table: 83 % → 52 % with θ_OV, zero-shot 0 % (Llama-3.1-8B, middle layer); MLP path little",
          ours=(f"label-space tasks {dec_text} pooled: θ_OV at |θ| {fmt(pov.accuracy['θ_OV at |θ|'])}, "
                f"random vectors' θ_OV at |θ| differ by {fmt(pov.vs_random['ov/at |θ|'])}"
                if pov else NO_LTV),
          rule=ov_rule, intervals=ov_intervals, evidence="ch04-fig-ov", evidence_title="Figure 4.1",
          note=f"decided on: {dec_text}; reconstructions at |θ| and in the paper's form, each against random "
               "vectors of |θ| through the same map"),
    Claim(paper_claim=3, key="key-heads",
          statement="Ablating the top 10 % of heads by saliency hurts far more than ablating as many random heads.",
          paper="SST-2 table: 83 % → 51 % ablating key heads, 78 % ablating random heads (Llama-3.1-8B)",
          ours=(f"label-space tasks {dec_text} pooled, zero-ablation: random-head minus key-head accuracy "
                f"{fmt(key_gap)}" if key_gap else NO_LTV),
          rule=key_rule, intervals=key_intervals, evidence="ch04-fig-ablation", evidence_title="Figure 4.2",
          note=f"decided on: {dec_text}; key heads = top 10 % of all heads; {n_random} random head sets per task"),
    Claim(paper_claim=3, key="key-head-placement",
          statement="Key heads sit just after the injection layer and in the last layers (a U shape).",
          paper="figure: mostly right after the injection layer and in the last layers (no number)",
          ours=("; ".join(f"{name}: {fmt(e)}" for name, e in u_intervals.items())
                + f" ({n_u} key heads at layers ≥ {mid})" if u_intervals else "not measured"),
          rule=u_rule, intervals=u_intervals, evidence="ch04-fig-placement", evidence_title="Figure 4.3",
          note=f"decided on: {dec_text}; only heads at or after the injection layer, against the uniform spread"),
    Claim(paper_claim=3, key="key-head-attention",
          statement="Key heads attend less to the first token (the attention sink) and more to the final position.",
          paper="figure: less attention to the first token, more to the final position (no number)",
          ours=("; ".join(f"{name}: {fmt(e)}" for name, e in att_intervals.items())
                if att_intervals else "not measured"),
          rule=att_rule, intervals=att_intervals, evidence="ch04-fig-attention", evidence_title="Figure 4.4",
          note=f"decided on: {dec_text}; compared with the other heads of the key heads' layers"),
]
by_key = {c.key: c for c in claims}

# %% tags=["remove-input"]
display(Markdown(claim_table([
    ClaimRow(by_key["ov-reconstruction"], "OV reconstruction keeps much of the gain (θ_OV at |θ| − random)",
             "83 % → 52 % (SST-2 table)"),
    ClaimRow(by_key["key-heads"], "Key heads matter more than random heads (random − key heads ablated)",
             "51 % vs 78 % (SST-2 table)"),
    ClaimRow(by_key["key-head-placement"], "Key heads in a U shape (first third − uniform share)", "U shape (figure)"),
    ClaimRow(by_key["key-head-attention"], "Key heads attend less to the sink (key − other heads)", "less (figure)"),
])))
glue("n_learned", len(learned), display=False)
glue("deciding", dec_text, display=False)
glue("not_learned", ", ".join(not_learned) or "none", display=False)

# %% [markdown]
# The verdicts are decided on the label-space tasks whose LTV learned ({glue:text}`deciding`); Antonym, an
# open-vocabulary task, is shown beside them. An LTV counts as learned when the lower end of its validation
# accuracy's 95 % interval is above both zero-shot and the majority answer; those that did not
# ({glue:text}`not_learned`) are left out of every number.

# %% tags=["hide-input"]
display(tables.vectors_table(ltvs, label_list, ledger))

# %% [markdown]
#
# ## What we measured
#
# ### OV reconstruction at equal norm and in the paper's form
#
# The paper's reconstruction is $\theta_{OV} = \sum_{l' \ge l}\sum_h W_O^{l',h} W_V^{l',h}\theta$, injected
# where $\theta$ was, instead of it. On this model that sum is about {glue:text}`ov_scale` times as long as
# $\theta$: it floods the stream, and any vector of that size does the same. So we compare each reconstruction
# twice, **rescaled to $|\theta|$** and **in the paper's form**, and each time against random vectors of
# $|\theta|$ sent through the same map. The MLP control, the later MLPs' first-order response to $\theta$, is
# treated the same way.

# %% tags=["hide-input"]
# the paper's form's length over |θ|, averaged over the deciding tasks
ov_scale = sum(ovc[t]["ov/paper"]["norm"] for t in deciding) / len(deciding) if deciding else float("nan")
glue("ov_scale", f"{ov_scale:.0f}" if deciding else "(not measured)", display=False)
display(tables.ov_table(ov, ovc, learned) if learned else Markdown(f"Nothing to reconstruct: {NO_LTV}."))

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Whole-vocabulary test accuracy per task of the middle-layer LTV, its OV reconstruction and the MLP control, each beside random vectors of the LTV's norm sent through the same map (mean; whiskers: range of the draws), rescaled to |θ| (left) and in the paper's form (right); zero-shot for reference. Other whiskers: Wilson 95 % intervals. Dashed: the paper's SST-2 numbers (Llama-3.1-8B).", "name": "ch04-fig-ov"}, "image": {"alt": "Grouped bars per task for zero-shot, LTV, θ_OV, random θ_OV, MLP control and random MLP, in two panels"}}
fig, axes = tables.plot_ov(ov, ovc, learned)
for ax, title in zip(axes, ("rescaled to |θ|", "paper's form")):
    ax.set_title(f"OV and MLP reconstructions, {title}", fontsize=10)
    ax.set_xlabel("task (LTV at the middle layer)")
axes[0].set_ylabel("test accuracy (%)")
fig.tight_layout(rect=(0, 0.16, 1, 1))
plt.show()

# %% [markdown]
# ### Key heads
#
# Saliency is $|a_{l,h}\cdot\partial p(\text{gold})/\partial a_{l,h}|$ at the last position with $\theta$
# injected, averaged over held-out analysis queries; the key heads are the top 10 % of all heads. Ablation
# zeroes their output at the last position while $\theta$ stays injected; the control zeroes as many heads drawn
# at random from the same layers.

# %% tags=["hide-input"]
display(tables.ablation_table(kh, ltvs, task_list, ledger, "full", mid) if learned
        else Markdown(f"No ablation: {NO_LTV}."))

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Whole-vocabulary test accuracy with the middle-layer LTV alone and with heads zero-ablated at the last position: the key heads (top 10 % by saliency) and random head sets of the same size (mean; whiskers: range of the draws); other whiskers: Wilson 95 % intervals. Dashed: the paper's numbers.", "name": "ch04-fig-ablation"}, "image": {"alt": "Bars per task: LTV alone, key heads ablated, random heads ablated"}}
fig, ax = tables.plot_ablation(kh, learned, {t: True for t in learned})
ax.set_title(f"Ablating key heads against random heads ({lm.name})", fontsize=10)
ax.set_xlabel("task (LTV at the middle layer)")
ax.set_ylabel("test accuracy (%)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ### Where the key heads sit, and what they attend to
#
# Only heads at or after the injection layer can read $\theta$, so the U shape is measured among them: the
# key heads chosen there, counted per third of those layers, against a uniform spread. Attention is that of the
# last position to the prompt's first token (the sink) and to itself, compared with the other heads of the
# same layers (attention to the sink changes strongly with depth).

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Layers of the key heads chosen among the layers at or after the injection layer (dashed), summed over the deciding tasks; grey: the count per layer under a uniform spread.", "name": "ch04-fig-placement"}, "image": {"alt": "Bar chart of key heads per layer with a flat line for the uniform spread"}}
fig, ax = tables.plot_placement(kh, deciding, L, mid)
ax.set_title("Where the key heads sit (chosen among layers ≥ l)", fontsize=10)
ax.set_xlabel("layer of the key head")
ax.set_ylabel("key heads")
ax.xaxis.set_major_locator(MaxNLocator(integer=True))
fig.tight_layout()
plt.show()

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Mean attention of the last position to the prompt's first token (left) and to itself (right), key heads against the other heads of the same layers, pooled over the deciding tasks; whiskers: bootstrap 95 % intervals over heads.", "name": "ch04-fig-attention"}, "image": {"alt": "Two bar panels comparing key and other heads' attention"}}
fig, axes = tables.plot_attention(att_pools)
for ax, title in zip(axes, ("to the first token", "to the final position")):
    ax.set_title(f"attention {title}" if att_pools is not None else NO_LTV, fontsize=10)
    ax.set_xlabel("heads")
    ax.set_ylabel("mean attention weight")
fig.suptitle("What key heads attend to (label-space tasks)", fontsize=10)
fig.tight_layout(rect=(0, 0.1, 1, 1))
plt.show()

# %% tags=["hide-input"]
SENTENCES = {
    "ov-reconstruction": {
        "reproduced": "At equal norm θ_OV beats random vectors through the same map and the MLP path and keeps at "
                      "least half of the LTV's gain.",
        "partly": "At equal norm θ_OV passes some of the tests and fails or cannot decide others; the parts are "
                  "in the table below.",
        "not reproduced": "At equal norm θ_OV does no better than random vectors through the same map, or than "
                          "the MLP path.",
        "inconclusive": "The intervals straddle their bounds: these queries cannot tell θ_OV from its controls.",
        "not testable at this scale": "No label-space LTV learned, so there is nothing to reconstruct.",
    },
    "key-heads": {
        "reproduced": "Zeroing the key heads costs clearly more than zeroing as many random heads.",
        "partly": "The key-head ablation gave a mixed outcome.",
        "not reproduced": "Zeroing as many random heads costs at least as much as zeroing the key heads.",
        "inconclusive": "The difference between random-head and key-head ablation admits both signs.",
        "not testable at this scale": "No label-space LTV learned; nothing was ablated.",
    },
    "key-head-placement": {
        "reproduced": "Both the first and the last third of the layers after the injection hold more key heads "
                      "than a uniform spread: a U shape.",
        "partly": "Only one end of the layers after the injection holds more key heads than a uniform spread.",
        "not reproduced": "Neither end holds more key heads than a uniform spread.",
        "inconclusive": "The shares per third cannot be told from a uniform spread.",
        "not testable at this scale": "No label-space LTV learned, or too few layers after the injection.",
    },
    "key-head-attention": {
        "reproduced": "Key heads attend less to the first token and more to the final position than the other "
                      "heads of their layers.",
        "partly": "One of the two attention differences holds and the other does not.",
        "not reproduced": "The key heads' attention goes the other way from the paper's.",
        "inconclusive": "The attention differences are within the spread over heads.",
        "not testable at this scale": "No label-space LTV learned; attention was not compared.",
    },
}
for key, claim in by_key.items():
    glue(f"verdict_{key}", claim.verdict.value, display=False)
    glue(f"sentence_{key}", Markdown(interpret(claim, SENTENCES[key]).markdown()), display=False)
display(interval_table(ov_intervals | key_intervals | u_intervals | att_intervals) if deciding
        else Markdown(f"No interval: {NO_LTV}."))

# %% [markdown]
# ## Verdict
#
# :::{admonition} OV reconstruction
# **Verdict: {glue:text}`verdict_ov-reconstruction`.** Rule: θ_OV at |θ| must beat random vectors of |θ| through the same map and the MLP control at |θ|, and keep
# at least half of the LTV's gain over zero-shot (the paper keeps 52 of 83 points); the paper's form must beat
# its random vectors unless both sit at 0, each on a 95 % paired-bootstrap interval over the pooled test
# queries. {glue:md}`sentence_ov-reconstruction`
# :::
#
# :::{admonition} Key heads
# **Verdict: {glue:text}`verdict_key-heads`.** Rule: random-head minus key-head zero-ablation accuracy, pooled over queries, must be above 0 on its 95 %
# interval. {glue:md}`sentence_key-heads`
# :::
#
# :::{admonition} U shape
# **Verdict: {glue:text}`verdict_key-head-placement`.** Rule: the first and the last third of the layers after the injection must each hold more key heads than
# their share of those layers (Wilson interval). {glue:md}`sentence_key-head-placement`
# :::
#
# :::{admonition} Attention
# **Verdict: {glue:text}`verdict_key-head-attention`.** Rule: key heads' attention to the first token below, and to the final position above, that of the other heads
# of their layers (bootstrap over heads). {glue:md}`sentence_key-head-attention`
# :::
#
# :::{dropdown} Caveats
# - **Scale.** SmolLM2-135M has 270 heads of 64 dimensions; Llama-3.1-8B has 1,024 of 128. We compare each
#   measurement with its control, not with the paper's digits, which the figures draw for reference.
# - **Which reconstruction decides.** The paper's bare-weight sum is read as written (RMSNorm gains folded into
#   $W_V$, grouped-query heads reading their KV group). Its size is a property of the map, not of $\theta$, so
#   the rescaled form asks the paper's question at the size of the vector it replaces; where the paper's form
#   and all its random vectors score 0, that part cannot decide.
# - **The MLP control** is the first-order (Jacobian) response of each later MLP at the real states, our
#   reading of "MLP-path reconstruction".
# - **Ablation mode.** The paper does not say whether heads are zeroed or mean-ablated; zero-ablation decides,
#   mean-ablation is in the interval table.
# - **Tasks.** The paper's numbers are SST-2; we pool the label-space tasks whose LTV learned.
# :::
#
# :::{dropdown} How it was measured
# Every LTV is chapter 00's middle-layer vector (seed 0), added to the residual stream entering the middle
# block at the last prompt position. Accuracy is the first answer token's argmax over the whole vocabulary on
# the test split; the label-restricted accuracy (argmax over the label words) is in the tables. Saliency, mean
# head outputs, attention and the MLP states come from held-out validation queries, disjoint from the test
# queries. Each random-vector control draws vectors of the LTV's norm with uniformly random directions and sends
# them through the same reconstruction. Differences between conditions are paired bootstraps over the pooled
# test queries, resampling the random draws too; the U shape uses Wilson intervals shifted by the uniform share,
# the attention test a bootstrap over heads.
# :::

# %% tags=["remove-cell"]
record_claims("04_ov_key_heads", claims, model=model, profile=profile, seed=seed, ltvs=ledger)
