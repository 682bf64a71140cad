"""A chapter's claim table: one row per claim, the paper's number beside ours, and the verdict.

Columns: claim | paper (with where it stands in the paper) | ours | 95 % interval | n | seeds (those of the
interval shown) | verdict, and a
``tasks`` column when a row says which tasks its number covers. Numbers are right-aligned with one decimal (percent
for an accuracy, percentage points with a sign for a difference); a claim that could not be tested shows an en
dash in every number column. The verdict is the book's ``{verdict}`` badge (:mod:`ltvlib.book.runner`), so the
table renders as MyST (``nb_render_markdown_format: myst``)::

    from IPython.display import Markdown
    display(Markdown(claim_table([ClaimRow(claim, "Works at position 4", "78.39 % (Table 1)", "LTV − FV")])))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pandas as pd
from IPython.display import HTML

from ltvlib.book.scorecard import Claim, Verdict
from ltvlib.stats import Estimate

DASH = "\u2013"


@dataclasses.dataclass(frozen=True)
class ClaimRow:
    """One row: ``claim`` as recorded, its ``label`` in a few words, the ``paper``'s number with its place in the
    paper, the name of the interval of ``claim.intervals`` shown as ours (None: its first difference, else its
    first interval) and, optionally, the tasks the number covers. ``verdict=False``: a row that shows another of
    the claim's numbers (e.g. the LTV's accuracy beside the difference the rule decides on) without the badge."""

    claim: Claim
    label: str
    paper: str
    headline: str | None = None
    tasks: str = ""
    verdict: bool = True


def _cell(text: str) -> str:
    return " ".join(str(text).replace("|", "\\|").split())


def headline(row: ClaimRow) -> Estimate | None:
    """The interval the row shows: ``row.headline`` of the claim's intervals, else its first difference, else its
    first interval; None when the claim has none (not testable)."""
    named = dict(row.claim.intervals)
    if row.headline is not None:
        if row.headline not in named:
            raise ValueError(f"claim {row.claim.key!r} has no interval {row.headline!r}; it has {sorted(named)}")
        return named[row.headline]
    for _, est in row.claim.intervals:
        if est.difference:
            return est
    return row.claim.intervals[0][1] if row.claim.intervals else None


def number_cells(est: Estimate | None) -> tuple[str, str]:
    """``("+16.0 pts", "[+12.8, +19.2]")`` for a difference, ``("63.7 %", "[60.7, 66.7]")`` for an accuracy;
    en dashes for None."""
    if est is None:
        return DASH, DASH
    sign = "+" if est.difference else ""
    unit = " pts" if est.difference else " %"
    return (f"{100 * est.value:{sign}.1f}{unit}",
            f"[{100 * est.low:{sign}.1f}, {100 * est.high:{sign}.1f}]")


def claim_table(rows: Sequence[ClaimRow]) -> str:
    """The rows as a MyST pipe table (numbers right-aligned, never truncated)."""
    if not rows:
        raise ValueError("claim_table: give at least one row")
    with_tasks = any(r.tasks for r in rows)
    head = ["claim", "paper", "ours", "95 % interval", "n", "seeds", *(["tasks"] if with_tasks else []), "verdict"]
    align = [":---", ":---", "---:", "---:", "---:", "---:", *([":---"] if with_tasks else []), ":---"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        est = headline(r)
        value, interval = number_cells(est)
        tested = r.claim.verdict is not Verdict.NOT_TESTABLE and est is not None
        n = f"{est.n:,}" if tested and est is not None else DASH  # the shown interval's own n and seeds
        seeds = str(est.seeds) if tested and est is not None else DASH
        cells = [_cell(r.label), _cell(r.paper), value, interval, n, seeds,
                 *([_cell(r.tasks or DASH)] if with_tasks else []), f"{{verdict}}`{r.claim.verdict.value}`" if r.verdict else DASH]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def wide_table(df: pd.DataFrame) -> HTML:
    """A DataFrame as HTML in a box that scrolls sideways when the table is wider than the text column (the book's
    ``ltv-scroll`` class keeps its first column in view), never truncated, missing values as en dashes. For tables
    pasted with myst-nb's ``glue``, which the page's output-area styles do not reach."""
    with pd.option_context("display.max_colwidth", None):
        html = df.to_html(na_rep=DASH, border=0)
    return HTML(f'<div class="ltv-scroll">{html}</div>')
