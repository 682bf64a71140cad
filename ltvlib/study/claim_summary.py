"""A chapter's summary table for claims whose numbers are not accuracies (e.g. cosines): one row per claim, the
paper's statement beside ours with its 95 % interval and n, and the verdict badge. Rendered as a MyST table (never
truncated, numbers right-aligned). Claims measured as accuracies use :mod:`ltvlib.book.claim_table`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..stats import Estimate


@dataclass(frozen=True)
class SummaryRow:
    """One claim of a chapter's summary table: the claim in a few words, the paper's number (with where it stands
    in the paper), what we compare it with (``measure``), our estimate (None: not measured, ``why`` says why) and
    the verdict's value."""

    claim: str
    paper: str
    measure: str
    ours: Estimate | None
    verdict: str
    why: str = ""


def estimate_cell(est: Estimate | None, *, why: str = "", digits: int = 1) -> str:
    """``"55.5 % [48.6, 62.3], n=200"`` (a difference in points: ``"+12.0 [+4.1, +19.9] pts, n=600"``), with
    ``draws=`` when the interval resamples random draws; ``why`` (or an en dash) when there is no estimate."""
    if est is None:
        return why or "\u2013"
    sign = "+" if est.difference else ""
    unit = " pts" if est.difference else " %"
    extra = f", seeds={est.seeds}" if est.seeds > 1 else ""
    extra += f", draws={est.draws}" if est.draws else ""
    return (f"{100 * est.value:{sign}.{digits}f}{unit} [{100 * est.low:{sign}.{digits}f}, "
            f"{100 * est.high:{sign}.{digits}f}], n={est.n}{extra}")


def summary_markdown(rows: Sequence[SummaryRow]) -> str:
    """The table as MyST: claim | paper | ours (measure: value [95 % interval], n) | verdict (the book's
    ``{verdict}`` badge), the numbers' column right-aligned. Pipes in cells are escaped."""
    if not rows:
        raise ValueError("summary_markdown: give at least one row")

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    out = ["| claim | paper | ours (95 % interval, n) | verdict |", "|:---|:---|---:|:---|"]
    for r in rows:
        ours = f"{r.measure}: {estimate_cell(r.ours, why=r.why)}" if r.measure else estimate_cell(r.ours, why=r.why)
        out.append("| " + " | ".join(cell(x) for x in (r.claim, r.paper, ours, f"{{verdict}}`{r.verdict}`")) + " |")
    return "\n".join(out)
