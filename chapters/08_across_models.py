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
# **The claim** (the paper's first, third and fourth, on a second architecture). The paper reports its findings on models of the Llama 2/3/3.1/3.2 families, Qwen2.5-32B and
# Yi-34B and presents them as properties of learned task vectors, not of one model {cite:p}`yang2026ltv`. Its
# numbers on Llama-3.1-8B, transcribed from a secondary summary of the paper: at the middle layer the LTV averages
# **83.49 %** over seven tasks against **37.80 %** for the Vanilla TV and **37.30 %** for the FV (Table 1), and it
# stays above both at every layer (Figure 2); ablating the top 10 % of heads by saliency drops the LTV from
# **83 %** to **51 %**, as many random heads only to **78 %** (an SST-2 table); injecting the linear map $W\theta$
# at the last layer does about what the LTV does (a figure, no number). This chapter asks each claim of a second
# architecture, **Gemma-3-270M**, beside SmolLM2-135M, with one LTV recipe for both; the mechanism claims are
# decided on label-space tasks, as chapters 04 and 05 decide them.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"
recipe = None  # None: the profile's LTV recipe; "fast" or "paper"
models = ["smollm2-135m", "gemma3-270m"]  # compared side by side; `model` is always included, first

# %% tags=["hide-input"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display
from myst_nb import glue
from transformers.utils import logging as hf_logging

from ltvlib.book.scorecard import (
    Claim,
    Verdict,
    combine_rule,
    direction_rule,
    interpret,
    not_testable,
    record_claims,
    threshold_rule,
)
from ltvlib.models import load_model
from ltvlib.stats import Estimate
from ltvlib.study import across_models_tables as tables
from ltvlib.study.across_models import (
    architecture_row,
    attention_write_check,
    check_code_paths,
    clear_memory,
    correct_at,
    function_vector_write,
    key_head_correct,
    key_head_results,
    linearity_results,
    middle_layer_results,
    middle_ltv,
    stream_rms,
    sweep_ltvs,
    sweep_results,
)
from ltvlib.study.extracted import cached_function_vector
from ltvlib.study.linearity import cached_linearity_control
from ltvlib.study.ltv_report import LTVLedger
from ltvlib.study.ltvs import task_splits, trained_ltv, trained_ltvs_by_layer
from ltvlib.study.plans import across_models_plan

hf_logging.disable_progress_bar()
pd.set_option("display.max_colwidth", None)
chapter_plan = across_models_plan(profile, recipe=recipe)
run, sizes = chapter_plan.run_sizes, chapter_plan.sizes
plan = {k: list(v) for k, v in chapter_plan.tasks.items()}
if isinstance(models, str):  # `-p models a,b` from the command line
    models = [m.strip() for m in models.split(",") if m.strip()]
model_list = [model] + [m for m in models if m != model]
ledger = LTVLedger()  # an LTV that did not learn is listed, never averaged or compared

# %% tags=["hide-input"]
# Per model: check the library's fast paths against the model's own forward pass, then every measurement of
# chapters 01, 04 and 05 with the same arguments (their caches serve the default model).
arch, checks, results = {}, {}, {}
for name in model_list:
    lm = load_model(name, device=device)
    arch[name] = architecture_row(lm)
    checks[name] = check_code_paths(lm, n=sizes.n_check, seed=seed)
    at = chapter_plan.layers(lm.n_layers)  # this model's layers, per task
    r = {"L": lm.n_layers, "mid": lm.middle_layer, "d": lm.d_model, "stream_rms": stream_rms(lm), "ltv": {}}
    # every LTV below, the tasks that share a layer trained together (the measurements read them back)
    wanted = {t: {lm.middle_layer} for t in plan["table"]}
    for t in plan["sweep"]:
        wanted.setdefault(t, set()).update(at.sweep_ltv[t])
    for t in plan["linearity"]:
        wanted.setdefault(t, set()).update(at.linearity[t])
    trained_ltvs_by_layer(lm, {t: sorted(ls) for t, ls in wanted.items()}, run, [seed])
    # chapter 01: the middle-layer table and a short layer sweep
    r["table"] = {t: middle_layer_results(lm, t, run, icl_shots=chapter_plan.icl_shots,
                                          extracted_layers=list(at.extracted[t]), seed=seed) for t in plan["table"]}
    r["ltv"] |= {(t, lm.middle_layer): middle_ltv(lm, t, run, seed=seed) for t in plan["table"]}
    r["ltv_layers"] = {t: list(at.sweep_ltv[t]) for t in plan["sweep"]}
    compared = sorted({(t, lm.middle_layer) for t in plan["table"]}
                      | {(t, l) for t in plan["sweep"] for l in r["ltv_layers"][t]})
    r["correct"] = {(t, l): correct_at(lm, t, run, l, seed=seed) for t, l in compared}  # per-query, for pairing
    fvs = {t: cached_function_vector(lm, t, run, seed=seed) for t in plan["table"]
           if r["table"][t]["function_vector"] is not None}
    r["fv_write"] = {t: function_vector_write(lm, fv) for t, fv in fvs.items()}
    fv_layers = sorted({l for fv in fvs.values() for l, _ in fv.heads})
    r["attention_write"] = attention_write_check(lm, fv_layers) if fv_layers else {}
    r["sweep"] = {t: sweep_results(lm, t, run, ltv_layers=r["ltv_layers"][t], curve_layers=list(at.table), seed=seed)
                  for t in plan["sweep"]}
    for t in plan["sweep"]:
        r["ltv"] |= {(t, l): v for l, v in sweep_ltvs(lm, t, run, r["ltv_layers"][t], seed=seed).items()}
    # chapter 04: key heads against random heads, on the label-space tasks
    r["key_heads"] = {t: key_head_results(lm, t, run, sizes, seed=seed) for t in plan["key_heads"]}
    r["key_correct"] = {t: key_head_correct(lm, t, run, sizes, seed=seed) for t in plan["key_heads"]}
    # chapter 05: the linear fit W and Wθ at the final norm, per-query, on the label-space tasks
    r["linearity"] = {t: linearity_results(lm, t, run, list(at.linearity[t]), config=chapter_plan.linearity,
                                           seed=seed) for t in plan["linearity"]}
    r["ltv"] |= {(t, l): trained_ltv(lm, t, run, layers=[l], seed=seed) for t in plan["linearity"]
                 for l in at.linearity[t]}
    r["linear_ctl"] = {(t, l): cached_linearity_control(lm, t, run, l, config=chapter_plan.linearity, seed=seed,
                                                        n_draws=1, fit=False)
                       for t in plan["linearity"] for l in at.linearity[t]}
    r["n_test"] = {t: len(task_splits(t, run).test) for t in plan["table"]}
    results[name] = r
    del lm
    clear_memory()
aw, fvw, fv_ok = tables.fv_checks(results, model_list)  # an FV enters a model's comparisons only if it passes

# %% [markdown]
# (ch08-what-we-measured)=
# ## What we measured

# %% tags=["hide-input"]
# The rules: one per model, the models combined (all alike -> that verdict; some reproduced -> partly)
def per_model(gaps: dict, make_rule, why: str) -> tuple[dict, dict]:
    parts, kept = {}, {}
    for m, g in gaps.items():
        if g is None:
            parts[m] = not_testable(why.format(m=m))
        else:
            kept[m], parts[m] = g, make_rule(g)
    return parts, kept


def pts(g: Estimate) -> str:
    return f"{100 * g.value:+.1f} pts [{100 * g.low:+.1f}, {100 * g.high:+.1f}]"


middle_parts, middle_gaps = per_model(tables.middle_gaps(results, plan["table"], fv_ok, seed),
                                      lambda g: direction_rule(g.value, g.interval), "no middle-layer LTV of {m} learned")
claim_middle = Claim(
    paper_claim=1, key="middle-layer-across-models",
    statement="At the middle layer the LTV beats both extracted task vectors, on each architecture tested.",
    paper="LTV 83.49 %, Vanilla TV 37.80 %, FV 37.30 % (Llama-3.1-8B, seven-task average, Table 1)",
    ours="; ".join(f"{m}: LTV − best extracted {pts(g)}" for m, g in middle_gaps.items()) or "no LTV learned",
    rule=combine_rule(middle_parts), intervals={f"{m}: LTV − best extracted": g for m, g in middle_gaps.items()},
    evidence="ch08-fig-middle", evidence_title="Figure 8.1",
)
sweep_gaps_all = {k: g for k, (_, _, g) in tables.sweep_gaps(results, plan["sweep"], fv_ok, seed).items()}
sweep_parts, sweep_gaps = per_model(sweep_gaps_all, lambda g: direction_rule(g.value, g.interval),
                                    "the LTV at {m} did not learn")
claim_sweep = Claim(
    paper_claim=1, key="layer-sweep-across-models",
    statement="The LTV beats the extracted task vectors at every injection layer, on each architecture tested.",
    paper="LTV above Vanilla TV and FV at every layer (Llama-3.1-8B, Figure 2)",
    ours="; ".join(f"{k}: LTV − best extracted {pts(g)}" for k, g in sweep_gaps.items()) or "no LTV learned",
    rule=combine_rule(sweep_parts), intervals=sweep_gaps, evidence="ch08-fig-sweep", evidence_title="Figure 8.2",
)
key_parts, key_gaps = per_model(tables.key_gaps(results, plan["key_heads"], seed),
                                lambda g: direction_rule(g.value, g.interval),
                                "no middle-layer LTV of {m} learned on a label-space task")
claim_key = Claim(
    paper_claim=3, key="key-heads-across-models",
    statement="Ablating the top 10 % of heads by saliency hurts far more than ablating as many random heads, "
              "on each architecture tested.",
    paper="83 % → 51 % ablating key heads, 78 % ablating random heads (Llama-3.1-8B, SST-2 table)",
    ours="; ".join(f"{m}: random − key heads zeroed {pts(g)}" for m, g in key_gaps.items())
         + f" ({', '.join(plan['key_heads'])})" if key_gaps else "no LTV learned",
    rule=combine_rule(key_parts), intervals={f"{m}: random − key heads zeroed": g for m, g in key_gaps.items()},
    evidence="ch08-fig-key-heads", evidence_title="Figure 8.3",
)
recon = tables.reconstruction_gaps(results, plan["linearity"])
lin_parts, lin_gaps = per_model({m: gap.get("LTV (own shift) − Wθ") for m, (_, gap) in recon.items()},
                                lambda g: threshold_rule(g.value, g.interval, 0.10, at_least=False),
                                "on {m} no label-space LTV learned and beat zero-shot by 10 points")
claim_linear = Claim(
    paper_claim=4, key="linear-reconstruction-across-models",
    statement="Wθ injected at the last layer does about what the LTV does, on each architecture tested.",
    paper="Wθ at the last layer gives an accuracy close to the LTV's at most layers (Llama models; figure)",
    ours="; ".join(f"{m}: LTV − Wθ {pts(g)}" for m, g in lin_gaps.items()) or "no qualifying layer",
    rule=combine_rule(lin_parts), intervals={f"{m}: LTV − Wθ": g for m, g in lin_gaps.items()},
    evidence="ch08-fig-linearity", evidence_title="Figure 8.4",
)
claims = [claim_middle, claim_sweep, claim_key, claim_linear]


def row(label: str, paper: str, claim: Claim) -> str:
    """One line per claim: each model's deciding difference, points with a sign, one decimal."""
    named = dict(claim.intervals)
    cells = []
    for m in model_list:
        g = next((e for k, e in named.items() if k.startswith(m)), None)
        cells.append("–" if g is None else f"{100 * g.value:+.1f} [{100 * g.low:+.1f}, {100 * g.high:+.1f}]")
    n = "; ".join(f"{e.n:,}" for e in named.values()) if len(named) <= len(model_list) else f"{len(named)} points"
    return f"| {label} | {paper} | " + " | ".join(cells) + f" | {n or '–'} | {{verdict}}`{claim.verdict.value}` |"


sweep_cells = {m: [g for k, g in sweep_gaps.items() if k.startswith(m)] for m in model_list}
display(Markdown("\n".join([
    "| claim | paper | " + " | ".join(f"{m} (pts, 95 %)" for m in model_list) + " | n | verdict |",
    "|:---|:---|" + "---:|" * len(model_list) + "---:|:---|",
    row("Mid-layer LTV − best extracted", "83.49 vs 37.80 / 37.30 %", claim_middle),
    "| Every-layer LTV − best extracted | above at every layer | " + " | ".join(
        (f"{sum(g.low > 0 for g in sweep_cells[m])} of {len(sweep_cells[m])} layers above 0" if sweep_cells[m]
         else "–") for m in model_list) + f" | {f'{len(sweep_gaps)} points' if sweep_gaps else '–'} | {{verdict}}`{claim_sweep.verdict.value}` |",
    row("Random − key heads zeroed", "78 − 51 = +27 pts", claim_key),
    row("LTV − Wθ at the last layer (≤ 10 pts)", "close (figure)", claim_linear),
])))
glue("ch08-models", ", ".join(model_list), display=False)
glue("ch08-key-tasks", ", ".join(plan["key_heads"]), display=False)
glue("ch08-lin-tasks", ", ".join(plan["linearity"]), display=False)
glue("ch08-not-learned", "; ".join(f"{r.task} at layer {','.join(map(str, r.layers))}" for r in ledger.untrained())
     or "none", display=False)
glue("ch08-fv-ok", ", ".join(f"{m}: {'yes' if fv_ok[m] else 'no (left out)'}" for m in model_list), display=False)

# %% [markdown]
# Each cell is the model's deciding difference with its 95 % paired-bootstrap interval over test queries (one
# training seed). Key heads on {glue:text}`ch08-key-tasks`, the linear reconstruction on
# {glue:text}`ch08-lin-tasks`. LTVs that did not learn, left out of every comparison: {glue:text}`ch08-not-learned`.

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Accuracy at the middle layer, tasks pooled, per model and method, with 95 % Wilson intervals. Dashed lines: the paper's seven-task averages on Llama-3.1-8B (LTV 83.49 %, Vanilla TV 37.80 %, FV 37.30 %; Table 1). An LTV that did not learn is left out.", "name": "ch08-fig-middle"}, "image": {"alt": "Grouped bars of middle-layer accuracy per model: zero-shot, ICL, Vanilla TV, FV and LTV, with the paper's averages as dashed lines."}}
fig, ax = tables.plot_middle(results, model_list, plan["table"], ledger)
ax.set_title(f"Middle-layer accuracy by model ({', '.join(plan['table'])})")
ax.set_xlabel("method (vectors at the middle layer, last position)")
ax.set_ylabel("accuracy (%), tasks pooled")
fig.tight_layout()
plt.show()

# %% tags=["hide-input"] mystnb={"figure": {"caption": "First-token accuracy with one vector injected at layer l (x: l/L, so models of different depths share the axis), one panel per model: LTV (points where it learned), Vanilla TV (replace, solid; difference, dashed) and FV; bands and bars are 95 % Wilson intervals; dotted: zero-shot. Dashed grey: the paper's middle-layer averages on Llama-3.1-8B.", "name": "ch08-fig-sweep"}, "image": {"alt": "Accuracy against relative depth for the LTV and the extracted vectors, one panel per model."}}
panels = tables.sweep_panels(model_list, plan["sweep"])
n_test = {t: len(task_splits(t, run).test) for t in {*plan["sweep"], *plan["linearity"]}}
fig, axes = tables.plot_sweep(results, panels, n_test, ledger)
for ax, (m, task) in zip(axes, panels):
    ax.set_title(f"{task}, {m} ({results[m]['L']} layers)")
    ax.set_ylabel("accuracy (%)")
axes[-1].set_xlabel("injection layer / number of layers")
fig.tight_layout(rect=(0, 0.12 if len(panels) < 3 else 0.07, 1, 1))
plt.show()

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Accuracy of the middle-layer LTV alone, with the key heads (top 10 % by saliency) zeroed and with as many random heads zeroed at the last position, label-space tasks pooled, 95 % Wilson intervals (random: all draws pooled). Dashed: the paper's numbers on Llama-3.1-8B (83 %, 51 %, 78 %).", "name": "ch08-fig-key-heads"}, "image": {"alt": "Bars per model: LTV alone, key heads zeroed, random heads zeroed, with the paper's numbers dashed."}}
fig, ax = tables.plot_key_heads(results, model_list, plan["key_heads"], ledger)
ax.set_title(f"Ablating key heads against random heads ({', '.join(plan['key_heads'])})")
ax.set_xlabel("heads zeroed at the last position")
ax.set_ylabel("accuracy (%), tasks pooled")
fig.tight_layout()
plt.show()

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Test accuracy of the LTV injected at block l (solid), of its linear reconstruction W\u03b8 added to the stream entering the final norm (dashed) or the last block (dash-dotted), and zero-shot (dotted), per model, with 95 % Wilson intervals; layers whose LTV did not learn are left out. The paper gives no number for this comparison.", "name": "ch08-fig-linearity"}, "image": {"alt": "Accuracy against relative depth for the LTV and its linear reconstruction, one panel per model."}}
fig, axes = tables.plot_linearity(results, model_list, plan["linearity"], n_test, ledger)
for ax, m in zip(axes, model_list):
    ax.set_title(m)
    ax.set_ylabel("test accuracy (%)")
axes[-1].set_xlabel("injection layer / number of layers")
fig.tight_layout(rect=(0, 0.14, 1, 1))
plt.show()

# %% tags=["hide-input"]
TEXTS = {
    "middle": "the LTV beats the strongest extracted vector at the middle layer",
    "sweep": "the LTV beats the strongest extracted vector at the swept layers",
    "key": "zeroing the key heads costs the LTV more than zeroing as many random heads",
    "linear": "Wθ at the last layer stays within 10 points of the LTV",
}
for key, claim in zip(TEXTS, claims):
    glue(f"ch08-verdict-{key}", Markdown(interpret(claim, {
        Verdict.REPRODUCED: "Reproduced: on every testable model {what}.",
        Verdict.PARTLY: "Partly: {what} on some models or layers, not on all.",
        Verdict.NOT_REPRODUCED: "Not reproduced: wherever it is decided, the opposite holds.",
        Verdict.INCONCLUSIVE: "Inconclusive: the intervals admit both signs.",
        Verdict.NOT_TESTABLE: "Not testable at this scale: no LTV learned where this is measured.",
    }, what=TEXTS[key]).markdown()), display=False)

# %% [markdown]
# (ch08-verdict)=
# ## Verdict
#
# ```{admonition} Verdict
# :class: tip
# Each rule is applied per model and the models are combined: all alike give that verdict, some reproduced and
# some not give partly; a model with no learned LTV for the test is set aside.
#
# **Middle layer.** The LTV minus the strongest extracted vector of each task (the best of the Vanilla TV's two
# forms and the FV), tasks pooled, must lie above 0. {glue:md}`ch08-verdict-middle`
#
# **Every layer.** The same difference at each swept layer where the LTV learned. {glue:md}`ch08-verdict-sweep`
#
# **Key heads** (chapter 04's rule). Accuracy with random heads zeroed minus with the key heads zeroed, label-space
# tasks pooled, must lie above 0. {glue:md}`ch08-verdict-key`
#
# **Linear propagation** (chapter 05's rule). Over the label-space layers where the LTV learned and beats zero-shot
# by 10 points, the LTV minus $W\theta$ must lie at or below 10 points. {glue:md}`ch08-verdict-linear`
# ```
#
# :::{dropdown} Caveats
# - **Absolute levels are the models', not the method's.** Both models are 30 to 60 times smaller than
#   Llama-3.1-8B; compare methods within a model and the ordering of methods across models.
# - **Label-space tasks.** A linear map gives one shift for all queries, which can carry a label but not a
#   different word per query; so, as in chapters 04 and 05, the mechanism claims are decided on classification
#   tasks only.
# - **Key heads on a model with few heads.** Gemma-3-270M's 72 heads make 10 % a set of 7 heads, each 256 wide;
#   Gemma also normalises the attention output before it joins the stream, so zeroing one head rescales the
#   others' contribution.
# - **Sliding-window attention.** Gemma 3 attends over the last 512 tokens in 15 of its 18 layers; the library's
#   cached-prefix paths are exact below the window and refuse longer prompts.
# - **One seed, few tasks.** The intervals cover test queries, not training seeds; the paper profile runs every
#   task at every layer.
# :::
#
# :::{dropdown} How it was measured
# **Models** ({glue:text}`ch08-models`) and the conventions the library reads from each architecture's table:
#
# ```{glue} ch08-arch
# ```
#
# **Fast paths.** Before measuring, each model's cached-prefix, last-token and single-token paths are checked
# against its own forward pass with a random vector injected at the middle layer (largest difference relative
# to the reference; float32 rounding is about $10^{-6}$):
#
# ```{glue} ch08-checks
# ```
#
# **One LTV recipe for every model.** The book's fast recipe takes its initial range and learning rate relative
# to the residual stream at each vector's site, so the same recipe takes steps of the same relative size on both
# models, whose streams differ in size by a factor of about 28. Every LTV, whether it learned and its size
# relative to the stream:
#
# ```{glue} ch08-ltvs
# ```
#
# **Middle layer** (chapter 01's setting): the LTV added at the input of block $L/2$, the Vanilla TV
# {cite:p}`hendel2023taskvectors` replacing the last-token state at its output (or its difference added), the FV
# {cite:p}`todd2024function` added there; accuracy is the top-1 token over the whole vocabulary against the
# answer's first token. The FV enters a model's comparisons only if its heads' writes match what the attention
# block adds (Gemma normalises that output); passed: {glue:text}`ch08-fv-ok`.
#
# ```{glue} ch08-middle
# ```
#
# **Key heads** (chapter 04): saliency $|a_{l,h}\cdot\partial p(y\mid x,\theta)/\partial a_{l,h}|$ of every head at
# the last position with the middle-layer LTV injected, the top 10 % as key heads, their outputs zeroed or
# mean-ablated against as many random heads:
#
# ```{glue} ch08-key
# ```
#
# **Linear reconstruction** (chapter 05): $W$ fitted so that the shift of the stream entering the final norm
# caused by adding $\theta + \lambda\varepsilon$ at block $l$ is $\approx W(\theta + \lambda\varepsilon)$; then
# $W\theta$ is added there instead of $\theta$ at block $l$. Polar decomposition $W = QS$ gives the rotation
# $\cos(\theta, Q\theta)$ and the stretch:
#
# ```{glue} ch08-linear
# ```
# :::

# %% tags=["hide-input"]
glue("ch08-arch", pd.DataFrame(arch).T, display=False)
glue("ch08-checks", pd.DataFrame({m: c["checks"] for m, c in checks.items()}).map(lambda v: f"{v:.1e}"),
     display=False)
glue("ch08-ltvs", tables.ltv_table(results), display=False)
glue("ch08-middle", tables.middle_table(results, model_list, plan["table"], chapter_plan.icl_shots, ledger),
     display=False)
glue("ch08-key", tables.key_heads_table(results, plan["key_heads"], ledger), display=False)
glue("ch08-linear", tables.linearity_table(results, plan["linearity"], n_test, ledger), display=False)
record_claims("08_across_models", claims, model=model, profile=profile, seed=seed, ltvs=ledger)
