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
# One line per claim of the paper as a chapter tested it: the claim (linked to the figure or table behind it),
# the paper's number, ours with its 95 % interval, and the verdict. Below the grid each claim's full record opens
# in a dropdown. Nothing here is typed by hand: each chapter records its claims (`results/claims/<chapter>.json`)
# and this page, executed after every other chapter, reads them.

# %% tags=["parameters"]
model = "smollm2-135m"
profile = "cpu"
seed = 0
device = "auto"  # unused: this page only reads the chapters' results

# %% mystnb={"markdown_format": "myst"}
# MyST, not CommonMark: the grid's links are Sphinx references ({ref}, {doc}), checked when the book builds.
from IPython.display import Markdown, display

from ltvlib.book.scorecard import PAPER_CLAIMS, book_root, load_sheets
from ltvlib.book.verdict_grid import scorecard_page_markdown

root = book_root(model, profile, seed)
sheets = load_sheets(root)
display(Markdown(scorecard_page_markdown(sheets)))

# %% [markdown]
# ## Reading the scorecard
#
# - A verdict is only as strong as its chapter's profile: the `cpu` profile runs the embedded 135M-parameter
#   model on subsets of tasks and queries (each chapter says which), and `paper` runs the paper's sizes. Rerun
#   the book with `--profile paper --model <id>` on a GPU to fill the table for another model; its scorecard
#   lands beside that run's chapters in `_build/runs/<profile>__<model>/`.
# - **The rule.** No verdict is written by hand: a rule in code gives it from the chapter's measurements. For a
#   difference the paper gives a sign to, the 95 % interval on the paper's side of 0 gives **reproduced**, on the
#   other side *not reproduced*, across 0 *inconclusive*; a bound works the same way; a claim made of parts, some
#   reproduced and some not, is *partly*. Each claim's dropdown names its rule and why it gave that level.
# - The paper's numbers are for Llama-3.1-8B unless a line says otherwise; ours come from a far smaller model, so
#   the checks compare orderings and ratios rather than absolute accuracies.
# - The paper's claims are listed below with the chapters that test them:

# %%
chapters_of = {n: sorted({s.chapter for s in sheets for c in s.claims if c.paper_claim == n}) for n in PAPER_CLAIMS}
display(Markdown("\n".join(
    f"- **Claim {n}.** {text} Tested in: {', '.join(chapters_of[n]) or 'no chapter of this run'}."
    for n, text in PAPER_CLAIMS.items()
)))
