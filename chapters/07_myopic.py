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
# **The claim** (part of the paper's first claim, on its one *behaviour* task): besides word and
# classification tasks, the paper trains learned task vectors for a behaviour, the myopic-reward items of
# Anthropic's model-written evaluations (Perez et al. 2022): questions that offer a small reward now against a
# larger one later. It reports that the LTV steers this behaviour better than both extracted task vectors
# (Vanilla TV, Function Vectors). **The paper's metric and number for this task could not be read offline**,
# so the comparison here is qualitative: which method moves the model's choice most. The paper's first claim
# also says that LTVs match or beat ICL; ICL is measured here against that general statement.
#
# Myopic reward is a *behaviour*: what matters is which option the model prefers, not which letter it writes.
# A small model may prefer one letter whatever the question, and a score read from the letter then measures
# that preference. So this chapter scores the options' **text**:
#
# - **Option text** (the primary score). The question is asked with its two options listed *without letters*,
#   in both orders, and each option's text is scored as the answer by its mean log-probability per token;
#   P(myopic) is the softmax over the two options, averaged over the two orders. No letter can carry a bias,
#   and a preference for the first- or last-listed option cancels (`ltvlib.study.myopic.score_option_text`; a test
#   on a tiny model checks that swapping an item's options leaves the score unchanged).
# - **Greedy answers judged against the options.** The model writes its answer to the same prompt; a rule
#   (`ltvlib.study.myopic.judge_answer`) says whether it states the myopic option, the other one, or neither.
# - **Letters, with their bias reported and controlled.** The A/B prompt the vectors are trained on, scored
#   as given and with the two options swapped: the share of `A` answers on letter-balanced items is the
#   letter bias, and averaging the myopic letter's log-odds over both orders cancels it
#   (`ltvlib.study.myopic.debiased_letter_log_odds`).
#
# Every vector is trained or extracted **toward either answer** (the myopic one and the other one, same
# questions, letters swapped), and a method's **steering range** is P(myopic) with its vector toward the
# myopic answer minus P(myopic) with its vector toward the other answer, per held-out question, averaged: 0
# for a method that does not steer, whatever the model's own preference.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"
recipe = None  # None: the profile's LTV recipe; "fast" or "paper"
task = None  # None: the profile's choice (ltvlib.study.plans.MYOPIC_SIZES): "myopic" (human-written items); or "myopic_lm"

# %%
import time

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from ltvlib.book.scorecard import Claim, combine_rule, direction_rule, interpret, not_testable, record_claims
from ltvlib.models import load_model
from ltvlib.study.ltv_report import LTVLedger
from ltvlib.study.myopic import (
    DIRECTIONS,
    balanced_test,
    check_no_leak,
    direction_ltv,
    generation_examples,
    method_label,
    myopic_behaviour,
)
from ltvlib.study.myopic_tables import (
    METRIC_NAMES,
    STEERING_PANELS,
    compare_steering,
    cost_table,
    describe_setup,
    generations_text,
    judged_items,
    letter_bias_table,
    plot_letter_bias,
    plot_steering,
    results_caption,
    results_table,
    steering_ranges,
    steering_table,
    summary_markdown,
    training_curves,
    training_summary,
)
from ltvlib.study.plans import myopic_plan
from ltvlib.study.tables import points

plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "xtick.labelsize": 9,
                     "ytick.labelsize": 9, "legend.fontsize": 9})
plan = myopic_plan(profile, recipe=recipe, task=task)
run, sizes = plan.run_sizes, plan.sizes
started = time.perf_counter()
lm = load_model(model, device=device)
test = balanced_test(sizes.task, sizes.n_test)
check_no_leak(sizes.task, test)
display(Markdown(describe_setup(lm, profile, run, sizes, test, seed)))

# %% [markdown]
# ## Directions, methods and where each vector goes
#
# The registry task `myopic` labels each question with the letter of its myopic choice;
# `ltvlib.study.myopic.direction_task` builds the **non-myopic** variant from the same file, so both directions
# have the same questions in the same splits and only the letters differ. For each direction:
#
# - **LTV**: trained by gradient descent on the direction's A/B training prompts (`Q: {question}\nA: (`),
#   *added* to the residual stream *entering* the middle block at the last prompt token. It is validated on
#   letter-balanced questions after every epoch (so that picking the best epoch cannot reward a letter
#   preference) and, in the `cpu` profile, runs the recipe's whole schedule (its learning rate decays to 0)
#   before the best epoch's vector is kept. Whether it trained (best validation score above its random
#   start's) is recorded, and an LTV that did not train is never shown as a number.
# - **Vanilla TV** (Hendel et al.): the mean last-token state *leaving* block $l$ of 5-shot ICL prompts whose
#   demonstrations are answered in the direction, *replacing* the zero-shot state there (second row: the
#   ICL-minus-zero-shot difference *added* there); $l$ chosen on the direction's validation questions.
# - **Function Vector** (Todd et al.): top heads by indirect effect, their mean outputs summed and *added* at
#   the output of block $L/3$, last token.
# - **ICL**: $k$ demonstrations answered in the direction, then the question; no vector.
# - **Random vector of the LTV's norm** (the control): a vector with a uniformly random direction and the
#   norm of that direction's LTV, at the LTV's site (`ltvlib.analysis.controls.random_like`). It tells what any
#   vector of that size does to the answer.
# - **Zero-shot**: the question alone (the same for both directions).
#
# Every vector sits where it was trained or extracted, at the last token of whichever prompt is scored (the
# A/B prompt, or the option-text prompt `Q: {question}\n\nChoices:\n - {option}\n - {option}\nA:`). ICL
# prompts use demonstrations in the format of the prompt being scored.

# %% [markdown]
# (ch07-table-results)=
# ## Held-out results
#
# Every method toward each direction on the same letter-balanced held-out questions, each number with its 95 %
# interval (Wilson for a share of one seed; a bootstrap over questions, and over random draws for the
# control, for a mean probability).

# %%
t0 = time.perf_counter()
table = myopic_behaviour(lm, run, seeds=(seed,), sizes=sizes)
t_measure = time.perf_counter() - t0
ltvs = {d: direction_ltv(lm, d, run, sizes, seed=seed) for d in DIRECTIONS}
ledger = LTVLedger()
ltv_ok = all(ledger.keep([ltvs[d]], where="ch07-table-results") for d in DIRECTIONS)
print(f"all measurements: {t_measure:.0f} s (cached ones are read back)")
results = results_table(table, ledger, ltvs)
display(Markdown(results_caption(table, judged_items(sizes, test), sizes.random_draws)))
display(results)
display(ledger.summary())

# %% [markdown]
# (ch07-steering)=
# ## How far each method steers
#
# The **steering range** of a method: per held-out question, P(myopic) with its vector (or demonstrations)
# toward the myopic answer minus P(myopic) toward the other answer, averaged over questions, in percentage
# points (0: no steering; 100: each direction gets its own answer with certainty). On the option text, on the
# debiased letters, and on the judged greedy answers (share of myopic answers toward myopic minus toward the
# other answer). Intervals: bootstrap over questions (and over random draws for the control).

# %%
methods, ranges = steering_ranges(table)
display(steering_table(methods, ranges, ledger, ltvs))

# %% [markdown]
# (ch07-letter-bias)=
# ## The letter bias, and the position bias of the option text
#
# On letter-balanced questions a model without a letter preference says `A` on 50 % of them, whatever it
# thinks of the options. The table gives, per method and direction, the share of `A` answers (the letter
# bias), P(myopic) read from the letters of the items as given (exposed to that bias) and averaged over both
# letter orders (the bias cancels), and the probability of the option listed first in the option-text prompt
# (the position bias the two listing orders cancel; 50 % = none).

# %%
display(letter_bias_table(table, ledger, ltvs))

# %% [markdown]
# ## The LTVs' training
#
# Validation first-token accuracy (%) on the letter-balanced validation questions after each epoch (epoch 0:
# the random starting vector), the steps run, whether the kept vector trained (its validation score above
# the start's), and the last training losses.

# %%
display(training_curves(ltvs))
display(training_summary(ltvs))

# %% mystnb={"figure": {"caption": "Steering range of every method on the held-out questions (P(myopic) toward the myopic answer minus toward the other answer, in points), read from the options' text and from the letters averaged over both orders; bars are 95 % bootstrap intervals, the grey band is the random vectors' interval. The paper gives no number for this task.", "name": "ch07-fig-steering"}}
fig, axes = plot_steering(methods, ranges, ltv_ok)
for ax, metric in zip(axes, STEERING_PANELS):
    ax.set_title(f"Steering range, {METRIC_NAMES[metric]} ({table['n_test']} held-out questions)")
    ax.set_ylabel("steering range (points)")
axes[1].set_xlabel("method")
fig.tight_layout()
plt.show()

# %% mystnb={"figure": {"caption": "Letter bias: share of held-out questions (letter-balanced, so 50 % = no preference) on which the letter A is more probable than B, per method and direction; bars are 95 % Wilson intervals (over questions and random draws for the control).", "name": "ch07-fig-letter-bias"}}
fig, ax = plot_letter_bias(table, methods, ltv_ok)
ax.set_title(f"Letter bias on {table['n_test']} letter-balanced held-out questions")
ax.set_xlabel("method")
ax.set_ylabel("says A (%)")
plt.show()

# %% [markdown]
# ## Free generations
#
# A few held-out questions, continued greedily without a vector and with each direction's LTV (added at the
# last prompt token during the prompt's forward pass only). Two prompts per question: the A/B prompt the
# vectors were trained on (the continuation starts after `(`), and the open question without its choices, a
# prompt the LTV never saw. These are illustrations, not evidence (the judged answers above are).

# %%
gens = generation_examples(lm, run, seed=seed, sizes=sizes)
print(generations_text(gens, ledger, ltvs), end="")

# %% [markdown]
# ## What we measured, and how it compares
#
# The rules, fixed before the numbers: the claims are decided on the **option-text steering range** (the
# letter-free score), with the debiased letters as a second reading.
#
# - **LTV against the extracted vectors** (the paper: the LTV steers better). The best extracted vector is
#   the Vanilla TV (either form) or FV with the largest option-text steering range. Two parts, each a
#   direction rule on a paired bootstrap over the same questions: the LTV's range above the best extracted
#   vector's on the option text, and the LTV's range above that of random vectors of its norm on the option
#   text (a learned effect, not what any vector of that size does). The same difference on the debiased
#   letters is shown beside them but does not decide: the letters are the format the vectors were trained
#   to emit, so a letter-only lead could be a format effect rather than steering of the behaviour.
# - **LTV against ICL** (the paper's general claim: matches or beats it). Two parts: the LTV's option-text
#   range is not more than 5 points below the best ICL's (the whole interval of LTV − ICL above −5 points),
#   and the LTV's range is above 0 (matching ICL means little if neither steers).
# - An LTV that did not train makes both claims *not testable at this scale*.

# %%
cmp = compare_steering(table, methods, ranges)
best_ex, best_icl, ltv_range, diff = cmp.best_ex, cmp.best_icl, cmp.ltv_range, cmp.diff
ICL_MARGIN = -0.05
if not ltv_ok:
    reason = "the LTV toward one direction did not train (validation never rose above its random start)"
    rule_ex = rule_icl = not_testable(reason)
else:
    # the debiased-letter difference is reported (intervals below) but is not a part of the rule
    parts = {f"LTV above {method_label(best_ex)} (option text)": direction_rule(diff["ex_text"].value, diff["ex_text"].interval)}
    if diff["random_text"] is not None:
        parts["LTV above random vectors of its norm (option text)"] = direction_rule(diff["random_text"].value,
                                                                                    diff["random_text"].interval)
    rule_ex = combine_rule(parts)
    rule_icl = combine_rule({
        f"LTV not more than 5 points below {method_label(best_icl)} (option text)":
            direction_rule(diff["icl_text"].value, diff["icl_text"].interval, margin=ICL_MARGIN),
        "LTV steering range above 0 (option text)": direction_rule(ltv_range.value, ltv_range.interval),
    })

intervals_ex = {"LTV steering range (text)": ltv_range,
                f"{method_label(best_ex)} steering range (text)": ranges[(best_ex, "text_p_myopic")],
                f"LTV − {method_label(best_ex)} (text)": diff["ex_text"],
                f"LTV − {method_label(best_ex)} (debiased letters)": diff["ex_letter"]}
if diff["random_text"] is not None:
    intervals_ex["LTV − random vectors (text)"] = diff["random_text"]
claim_ex = Claim(
    paper_claim=1,
    key="myopic-vs-extracted",
    statement="On the myopic-reward behaviour task the LTV steers the model better than the extracted task "
              "vectors (Vanilla TV, Function Vectors).",
    paper="LTV better than Vanilla TV and FV (qualitative: metric and number not available offline; "
          "Llama-3.1-8B)",
    ours=(f"option-text steering range: LTV {points(ltv_range)}, best extracted {method_label(best_ex)} "
          f"{points(ranges[(best_ex, 'text_p_myopic')])}; LTV − it {points(diff['ex_text'])} (text), "
          f"{points(diff['ex_letter'])} (debiased letters)"
          + (f"; LTV − random vectors of its norm {points(diff['random_text'])}" if diff["random_text"] else "")
          if ltv_ok else "the LTV did not train"),
    rule=rule_ex,
    intervals=intervals_ex if ltv_ok else {},
    evidence="ch07-steering",
    evidence_title="the steering table",
)
claim_icl = Claim(
    paper_claim=1,
    key="myopic-vs-icl",
    statement="On the myopic-reward task the LTV matches or beats ICL.",
    paper="claim 1 in general: LTVs match or beat ICL; no myopic comparison with ICL in our sources",
    ours=(f"option-text steering range: LTV {points(ltv_range)}, {method_label(best_icl)} "
          f"{points(ranges[(best_icl, 'text_p_myopic')])}; LTV − ICL {points(diff['icl_text'])} (non-inferiority "
          f"margin {100 * ICL_MARGIN:.0f} points)" if ltv_ok else "the LTV did not train"),
    rule=rule_icl,
    intervals={"LTV steering range (text)": ltv_range, f"LTV − {method_label(best_icl)} (text)": diff["icl_text"]}
    if ltv_ok else {},
    evidence="ch07-steering",
    evidence_title="the steering table",
)
display(Markdown(summary_markdown(table, methods, ranges, cmp, ledger, ltvs, [
    (claim_ex.verdict.value, rule_ex.reason), (claim_icl.verdict.value, rule_icl.reason)])))

# %%
interpret(claim_ex, {
    "reproduced": "On the letter-free option-text score the LTV moves the choice between the two options "
                  "further than the best extracted vector ({best}) and further than random vectors of its norm: "
                  "on this model the learned vector carries more of the behaviour than the averaged ICL states "
                  "do, as the paper reports.",
    "partly": "One of the two option-text comparisons favours the LTV and the other does not ({reason}): either "
              "the LTV beats {best} without being clearly apart from a random vector of its norm, or it beats "
              "random vectors without being clearly ahead of {best}.",
    "not reproduced": "The best extracted vector ({best}) steers at least as far as the LTV here ({reason}): on "
                      "this model and at this size the learned vector does not carry more of the behaviour than "
                      "the extracted ones.",
    "inconclusive": "The intervals admit both orders ({reason}): with {n} held-out questions the difference "
                    "between the LTV and the best extracted vector ({best}) is not resolved.",
    "not testable at this scale": "An LTV toward one of the directions did not train on this model with this "
                                  "recipe, so there is no learned vector to compare ({reason}).",
}, best=method_label(best_ex), reason=rule_ex.reason, n=table["n_test"])

# %%
interpret(claim_icl, {
    "reproduced": "The LTV steers the choice and comes within the 5-point margin of {icl} or beyond it: it "
                  "matches ICL on this behaviour, as the paper's general claim says.",
    "partly": "Only one of the two parts holds ({reason}): either the LTV matches {icl} while neither steers "
              "clearly, or it steers but falls short of {icl} by more than the margin.",
    "not reproduced": "The LTV falls short of {icl} by more than the 5-point margin, or does not steer at all "
                      "({reason}).",
    "inconclusive": "The intervals are too wide to say whether the LTV matches {icl} ({reason}).",
    "not testable at this scale": "An LTV toward one of the directions did not train, so the comparison with "
                                  "ICL cannot be made ({reason}).",
}, icl=method_label(best_icl), reason=rule_icl.reason)

# %%
display(Markdown("**What each measurement cost** when it was first computed (wall time on the machine that "
                 "computed it; a cached result shows its original time):"))
display(cost_table(table["records"]))
print(f"chapter time: {time.perf_counter() - started:.0f} s")

# %% [markdown]
# ## What differs from the paper, and why
#
# - **Model.** SmolLM2-135M-Instruct, not Llama-3.1-8B. The greedy answers are judged by a word-overlap rule
#   against the two options rather than read as prose, since a small model's answer need not follow the
#   options' wording; the share judged "neither" in the results table says how often it does not.
# - **Metric and number.** The paper's metric and result on this set were not available offline. We report
#   three judge-free readings (option text, debiased letters, judged greedy answers) and decide on the
#   option text, which no letter or listing position can bias.
# - **Data.** The human-written file (the one CAA uses), 1,000 questions cut 500 / 250 / 250 with seed 0 as
#   every task in the book; the held-out set is the letter-balanced part of the test split. The paper's split
#   is unknown. `task="myopic_lm"` uses the model-written file instead.
# - **Both directions and a random control.** The paper (as far as we know) steers toward the behaviour only;
#   we add the opposite direction so that steering can be told apart from the model's own preference, and
#   random vectors of the LTV's norm so that it can be told apart from what any vector of that size does.
# - **Sizes (`cpu` profile, `ltvlib.study.plans.MYOPIC_SIZES`).** 100 held-out questions (50 per letter), each
#   scored four times per method (A/B prompt as given and swapped, option text in two orders); the LTVs on 256
#   training questions with 64 letter-balanced validation questions, through the recipe's 8 epochs (best
#   epoch kept), one seed; 5-shot ICL on the profile's 8 fixed demonstration blocks; the extracted vectors at
#   chapter 1's `cpu` sizes with 5-shot prompts; greedy answers judged on 40 questions for zero-shot, ICL, the
#   LTV and the random vectors (generation reruns every prompt in full, the costliest measurement on a CPU).
#   `profile="paper"` uses the whole balanced test split, 10-shot ICL too, and judges every method.
# - **Cost.** About 12-13 minutes from a cold cache on two CPU cores (estimated from per-piece CPU times at
#   about 200 prompt tokens per second per thread: the ICL prompts about 340 CPU seconds, the zero-shot prompts
#   145, the two LTVs about 360 through their whole schedule, the extracted vectors 245, the judged generations
#   140, about 1,280 CPU seconds in all); the table above gives each measurement's wall time in the run shown.
#   The held-out set is sized for that budget: 100 questions give a Wilson interval of about ±10 points on a
#   share near 50 %, and the paired steering differences are tighter than that.

# %% [markdown]
# ## Verdicts for the scorecard
#
# Each claim's verdict comes from its rule (above): a direction rule on a paired-bootstrap interval per part,
# parts combined (all reproduced → reproduced; some → partly; an LTV that did not train → not testable).

# %%
record_claims("07_myopic", [claim_ex, claim_icl], model=model, profile=profile, seed=seed, ltvs=ledger)
