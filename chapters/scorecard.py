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
# # Scorecard: which of the paper's claims hold here
#
# One row per claim of the paper as a chapter tested it: the paper's number, ours, the model and profile it
# was measured with, and the verdict, with a link to the figure or table that supports it. Nothing here is
# typed by hand: each chapter's last cell computes its rows from its own measurements and saves them
# (`ltvlib.book.scorecard.record_claims` writes `results/claims/<chapter>.json`), and this page reads those
# files. The book runner executes this page after every other chapter.
#
# **The rule.** A verdict follows from the checks in the *rule* column, conditions each chapter states and
# computes (for instance "the LTV's average is above both extracted vectors' averages"): every check passes
# → **reproduced**; some pass → *partly*; none → not reproduced. The paper's numbers are for Llama-3.1-8B
# unless the row says otherwise; ours come from the model in the row, usually a far smaller one, so the
# checks compare orderings and ratios rather than absolute accuracies.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"  # unused: this page only reads the chapters' results

# %%
from IPython.display import Markdown, display

from ltvlib.book.scorecard import PAPER_CLAIMS, book_root, load_sheets, scorecard_markdown, summary_markdown

root = book_root(model, profile, seed)
sheets = load_sheets(root)
display(Markdown(summary_markdown(sheets)))

# %% [markdown]
# ## The claims, one row each
#
# The rows are grouped by the paper's six claims (numbered as in the
# {doc}`overview <00_overview>`):
#
# 1. LTVs beat extracted task vectors at every layer and match or beat ICL;
# 2. they are flexible;
# 3. they act through the OV circuits of a few key heads;
# 4. their propagation is nearly linear (rotation early, stretch late);
# 5. they are a cheap PEFT method;
# 6. they cluster by task, transfer and compose.

# %% mystnb={"markdown_format": "myst"}
# MyST, not CommonMark: the table's links are Sphinx references ({ref}, {doc}), checked when the book builds.
display(Markdown(scorecard_markdown(sheets)))

# %% [markdown]
# ## Reading the scorecard
#
# - A verdict is only as strong as its chapter's profile: the `cpu` profile runs the embedded 135M-parameter
#   model on subsets of tasks and queries (each chapter says which), and `paper` runs the paper's sizes. Rerun
#   the book with `--profile paper --model <id>` on a GPU to fill the table for another model; its scorecard
#   lands beside that run's chapters in `_build/runs/<profile>__<model>/`.
# - "Partly" says that some of a claim's checks failed: the *rule* column names which, and the linked figure
#   shows by how much; each chapter's closing sections discuss why.
# - The paper's claims are listed below with the chapters that test them:

# %%
chapters_of = {n: sorted({s.chapter for s in sheets for c in s.claims if c.paper_claim == n}) for n in PAPER_CLAIMS}
display(Markdown("\n".join(
    f"- **Claim {n}.** {text} Tested in: {', '.join(chapters_of[n]) or 'no chapter of this run'}."
    for n, text in PAPER_CLAIMS.items()
)))
