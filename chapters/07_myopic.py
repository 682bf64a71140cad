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

# %%

# %% [markdown]
# # A behaviour: steering the myopic choice
#
# **The claim** (the paper's behaviour task). Besides word and classification tasks, the paper trains LTVs for one *behaviour*: the
# myopic-reward questions of Anthropic's model-written evaluations {cite:p}`perez2023modelwritten`, which offer a
# small reward now against a larger one later. It reports that the LTV steers this behaviour better than both
# extracted task vectors (Vanilla TV, Function Vectors), and its first claim says that LTVs match or beat ICL.
# Our source (a secondary summary of the paper) gives **no metric and no number** for this task, only that the
# LTV does better; so both comparisons are made on our model, by the same rule as elsewhere in the book.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"
recipe = None  # None: the profile's LTV recipe; "fast" or "paper"
task = None  # None: the profile's choice: "myopic" (human-written items) or "myopic_lm" (model-written)

# %% tags=["hide-input"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display
from myst_nb import glue

from ltvlib.book.scorecard import Claim, Verdict, combine_rule, direction_rule, interpret, not_testable, record_claims
from ltvlib.models import load_model
from ltvlib.stats import Estimate
from ltvlib.study.ltv_report import LTVLedger
from ltvlib.study.myopic import DIRECTIONS, balanced_test, check_no_leak, direction_ltv, method_label, myopic_behaviour
from ltvlib.study.myopic_tables import (
    METRIC_NAMES,
    STEERING_PANELS,
    compare_steering,
    letter_bias_table,
    plot_steering,
    results_table,
    steering_ranges,
    steering_table,
    training_summary,
)
from ltvlib.study.plans import myopic_plan

pd.set_option("display.max_colwidth", None)
plan = myopic_plan(profile, recipe=recipe, task=task)
run, sizes = plan.run_sizes, plan.sizes
lm = load_model(model, device=device)

# %% tags=["hide-input"]
# Held-out questions with as many myopic answers A as B; none of them in any training or validation split
test = balanced_test(sizes.task, sizes.n_test)
check_no_leak(sizes.task, test)
# Every method toward each direction (myopic and non-myopic), scored on the options' text and on the letters
table = myopic_behaviour(lm, run, seeds=(seed,), sizes=sizes)
ltvs = {d: direction_ltv(lm, d, run, sizes, seed=seed) for d in DIRECTIONS}
ledger = LTVLedger()  # an LTV that did not learn is listed, never compared
ltv_ok = all(ledger.keep([ltvs[d]], where="ch07-fig-steering") for d in DIRECTIONS)
# Steering range: P(myopic) toward the myopic answer minus toward the other, per question, averaged
methods, ranges = steering_ranges(table)
cmp = compare_steering(table, methods, ranges)
best_ex, best_icl, ltv_range, diff = cmp.best_ex, cmp.best_icl, cmp.ltv_range, cmp.diff

# %% [markdown]
# (ch07-what-we-measured)=
# ## What we measured

# %% tags=["hide-input"]
ICL_MARGIN = -0.05  # "matches ICL": the LTV's range at most 5 points below the best ICL's
if not ltv_ok:
    rule_ex = rule_icl = not_testable("the LTV toward one direction did not learn")
else:
    parts = {f"LTV above {method_label(best_ex)} (option text)": direction_rule(diff["ex_text"].value,
                                                                               diff["ex_text"].interval)}
    if diff["random_text"] is not None:
        parts["LTV above random vectors of its norm (option text)"] = direction_rule(diff["random_text"].value,
                                                                                    diff["random_text"].interval)
    rule_ex = combine_rule(parts)
    rule_icl = combine_rule({
        f"LTV not more than 5 points below {method_label(best_icl)} (option text)":
            direction_rule(diff["icl_text"].value, diff["icl_text"].interval, margin=ICL_MARGIN),
        "LTV steering range above 0 (option text)": direction_rule(ltv_range.value, ltv_range.interval),
    })
intervals_ex = {f"LTV − {method_label(best_ex)} (text)": diff["ex_text"], "LTV steering range (text)": ltv_range,
                f"{method_label(best_ex)} steering range (text)": ranges[(best_ex, "text_p_myopic")],
                f"LTV − {method_label(best_ex)} (debiased letters)": diff["ex_letter"]}
if diff["random_text"] is not None:
    intervals_ex["LTV − random vectors (text)"] = diff["random_text"]
claim_ex = Claim(
    paper_claim=1, key="myopic-vs-extracted",
    statement="On the myopic-reward behaviour task the LTV steers the model better than the extracted task "
              "vectors (Vanilla TV, Function Vectors).",
    paper="LTV better than Vanilla TV and FV (text; metric and number not in our source; Llama-3.1-8B)",
    ours="; ".join(f"{k} {100 * v.value:+.1f} pts [{100 * v.low:+.1f}, {100 * v.high:+.1f}]"
                   for k, v in intervals_ex.items()) if ltv_ok else "the LTV did not learn",
    rule=rule_ex, intervals=intervals_ex if ltv_ok else {}, evidence="ch07-fig-steering",
    evidence_title="Figure 7.1",
)
intervals_icl = {f"LTV − {method_label(best_icl)} (text)": diff["icl_text"], "LTV steering range (text)": ltv_range}
claim_icl = Claim(
    paper_claim=1, key="myopic-vs-icl",
    statement="On the myopic-reward task the LTV matches or beats ICL.",
    paper="claim 1 in general: LTVs match or beat ICL; no myopic comparison with ICL in our source",
    ours="; ".join(f"{k} {100 * v.value:+.1f} pts [{100 * v.low:+.1f}, {100 * v.high:+.1f}]"
                   for k, v in intervals_icl.items()) if ltv_ok else "the LTV did not learn",
    rule=rule_icl, intervals=intervals_icl if ltv_ok else {}, evidence="ch07-fig-steering",
    evidence_title="Figure 7.1",
)


def row(label: str, paper: str, est: Estimate | None, claim: Claim | None) -> str:
    """One line of the claim table: points with a sign, one decimal; an en dash where nothing was measured."""
    if est is None or not ltv_ok:
        value = interval = n = "–"
    else:
        value, interval = f"{100 * est.value:+.1f} pts", f"[{100 * est.low:+.1f}, {100 * est.high:+.1f}]"
        n = f"{est.n:,}"
    verdict = f"{{verdict}}`{claim.verdict.value}`" if claim is not None else "–"
    return f"| {label} | {paper} | {value} | {interval} | {n} | {verdict} |"


display(Markdown("\n".join([
    "| claim | paper | ours | 95 % interval | n | verdict |", "|:---|:---|---:|---:|---:|:---|",
    row(f"LTV steers further than the best extracted vector ({method_label(best_ex)})", "better (no number)",
        diff["ex_text"], claim_ex),
    row(f"LTV matches ICL: LTV − {method_label(best_icl)}", "matches or beats ICL (no number)",
        diff["icl_text"], claim_icl),
    row("LTV's own steering range", "–", ltv_range, None),
])))
glue("ch07-n-test", table["n_test"], display=False)
glue("ch07-best-ex", method_label(best_ex), display=False)
glue("ch07-best-icl", method_label(best_icl), display=False)
glue("ch07-not-learned", "; ".join(f"{r.task} (seed {r.seed})" for r in ledger.untrained()) or "none", display=False)

# %% [markdown]
# The steering range (the table's numbers) is the option-text P(myopic) with a method's vector (or demonstrations) toward the myopic
# answer minus P(myopic) toward the other answer, per held-out question, averaged (0: no steering), on
# {glue:text}`ch07-n-test` letter-balanced questions. LTVs that did not learn: {glue:text}`ch07-not-learned`.

# %% tags=["hide-input"] mystnb={"figure": {"caption": "Steering range of every method on the held-out questions (P(myopic) toward the myopic answer minus toward the other answer, in points), read from the options' text (top, the deciding score) and from the letters averaged over both letter orders (bottom); bars are 95 % bootstrap intervals over questions, the grey band the random vectors' interval. The paper gives no number for this task.", "name": "ch07-fig-steering"}, "image": {"alt": "Two bar charts of steering range per method: zero-shot, ICL, Vanilla TV, Function Vector, LTV and random vectors."}}
fig, axes = plot_steering(methods, ranges, ltv_ok)
for ax, metric in zip(axes, STEERING_PANELS):
    ax.set_title(f"Steering range, {METRIC_NAMES[metric]} ({table['n_test']} held-out questions)")
    ax.set_ylabel("steering range (points)")
axes[1].set_xlabel("method")
fig.tight_layout()
plt.show()

# %% tags=["hide-input"]
glue("ch07-verdict-extracted", Markdown(interpret(claim_ex, {
    Verdict.REPRODUCED: "Reproduced: the LTV moves the choice further than {best} and than random vectors of its "
                        "norm.",
    Verdict.PARTLY: "Partly: the LTV beats one of {best} and the random vectors, not both.",
    Verdict.NOT_REPRODUCED: "Not reproduced: {best} steers at least as far as the LTV.",
    Verdict.INCONCLUSIVE: "Inconclusive: the intervals admit both orders.",
    Verdict.NOT_TESTABLE: "Not testable at this scale: an LTV toward one direction did not learn.",
}, best=method_label(best_ex)).markdown()), display=False)
glue("ch07-verdict-icl", Markdown(interpret(claim_icl, {
    Verdict.REPRODUCED: "Reproduced: the LTV steers and comes within 5 points of {icl} or beyond.",
    Verdict.PARTLY: "Partly: the LTV steers but falls short of {icl}, or matches it while neither steers clearly.",
    Verdict.NOT_REPRODUCED: "Not reproduced: the LTV falls more than 5 points short of {icl}, or does not steer.",
    Verdict.INCONCLUSIVE: "Inconclusive: the intervals are too wide to say.",
    Verdict.NOT_TESTABLE: "Not testable at this scale: an LTV toward one direction did not learn.",
}, icl=method_label(best_icl)).markdown()), display=False)

# %% [markdown]
# (ch07-verdict)=
# ## Verdict
#
# ```{admonition} Verdict
# :class: tip
# **Against the extracted vectors.** Reproduced when the LTV's option-text steering range lies above that of the
# best extracted vector ({glue:text}`ch07-best-ex`) and above that of random vectors of its norm (paired bootstrap
# over the same questions, each a 95 % interval); partly when only one holds. {glue:md}`ch07-verdict-extracted`
#
# **Against ICL.** Reproduced when LTV minus the best ICL ({glue:text}`ch07-best-icl`) lies above −5 points and the
# LTV's own range above 0. {glue:md}`ch07-verdict-icl`
# ```
#
# :::{dropdown} Caveats
# - **Model.** SmolLM2-135M-Instruct, not Llama-3.1-8B.
# - **Metric.** The paper's metric for this task is not in our source. A small model may prefer one letter
#   whatever the question, so the claims are decided on the options' **text**, which no letter or listing
#   position can bias; the debiased letters are a second reading that does not decide (the letters are the
#   format the vectors were trained to emit, so a letter-only lead could be a format effect).
# - **Both directions.** The paper steers toward the behaviour only (as far as we know); steering toward either
#   answer tells steering apart from the model's own preference, and random vectors of the LTV's norm tell it
#   apart from what any vector of that size does.
# - **Data.** The human-written file, 1,000 questions cut 500 / 250 / 250 with seed 0 like every task in the
#   book; the held-out set is the letter-balanced part of the test split. The paper's split is unknown.
# - **One seed.** The intervals are over held-out questions (and random draws for the control), not over
#   training seeds.
# :::
#
# :::{dropdown} How it was measured
# **Methods**, each toward either answer (same questions, letters swapped):
# - **LTV**: trained on the direction's A/B prompts (`Q: {question}\nA: (`), added to the residual stream entering
#   the middle block at the last prompt token; validated on letter-balanced questions after every epoch.
# - **Vanilla TV** {cite:p}`hendel2023taskvectors`: the mean last-token state leaving block $l$ of 5-shot ICL
#   prompts answered in the direction, replacing the zero-shot state there (or their difference added there);
#   $l$ chosen on validation questions.
# - **Function Vector** {cite:p}`todd2024function`: the top heads' mean outputs, summed and added at the output
#   of block $L/3$, last token.
# - **ICL**: $k$ demonstrations answered in the direction, then the question. **Random vectors** of the LTV's
#   norm at its site. **Zero-shot**: the question alone.
#
# **Scores.** *Option text*: the question with its two options listed without letters, in both orders; each
# option's text scored as the answer by its mean log-probability per token; P(myopic) is the softmax over the
# two options, averaged over both orders. *Debiased letters*: the A/B prompt as given and with the options
# swapped, the myopic letter's log-odds averaged over both. *Judged greedy answers*: the model's answer, matched
# to an option by word overlap.
#
# ```{glue} ch07-results
# ```
#
# ```{glue} ch07-steering
# ```
#
# The letter bias (share of `A` answers on letter-balanced questions; 50 % = none) and the position bias of the
# option text (probability of the first-listed option; 50 % = none):
#
# ```{glue} ch07-letter-bias
# ```
#
# The LTVs' training:
#
# ```{glue} ch07-training
# ```
# :::

# %% tags=["hide-input"]
glue("ch07-results", results_table(table, ledger, ltvs), display=False)
glue("ch07-steering", steering_table(methods, ranges, ledger, ltvs), display=False)
glue("ch07-letter-bias", letter_bias_table(table, ledger, ltvs), display=False)
glue("ch07-training", training_summary(ltvs), display=False)
record_claims("07_myopic", [claim_ex, claim_icl], model=model, profile=profile, seed=seed, ltvs=ledger)
