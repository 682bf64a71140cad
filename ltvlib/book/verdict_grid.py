"""The verdict grid and the scorecard page: how the recorded claims read, one line per claim.

The landing page, README.md (see :mod:`ltvlib.book.pages`) and ``chapters/scorecard.py`` render the recorded claim
sheets (:func:`ltvlib.book.scorecard.load_sheets`) with :func:`verdict_grid_markdown`; the scorecard page adds the
downloads (:func:`claims_csv`, :func:`claims_json`) and each claim's record (:func:`scorecard_page_markdown`).

The labels live here, apart from the rules and the claim records, so that rewording a label re-executes only the
chapters that show the grid, not every chapter that records a claim.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from ltvlib.book.scorecard import (
    PAPER_CLAIMS,
    SCHEMA,
    VERDICT_MARKS,
    Claim,
    ClaimSheet,
    Verdict,
    rule_text,
    table_cell,
    uncertainty_text,
    verdict_counts,
)
from ltvlib.stats import Estimate

__all__ = [
    "CSV_COLUMNS",
    "DOWNLOADS",
    "GRID_LABELS",
    "GridRow",
    "answer_line",
    "claims_csv",
    "claims_json",
    "downloads_markdown",
    "grid_rows",
    "scorecard_details_markdown",
    "scorecard_page_markdown",
    "verdict_grid_markdown",
]

# --- one line per claim ------------------------------------------------------------------------

#: How each recorded claim reads in the verdict grid, by ``(chapter, key)``: the claim in a few words, the paper's
#: number in a few words (transcribed from the claim's ``paper`` text), and which of the claim's intervals the grid
#: shows with the name it shows it under. A claim missing here shows its full statement, its full ``paper`` text and
#: its first difference interval (``tests/test_book_quality.py`` requires an entry for every committed claim).
GRID_LABELS: dict[tuple[str, str], tuple[str, str, str | None, str]] = {
    ("00_overview", "ltv-vs-icl"): ("LTV reaches ICL accuracy", "83.5 %; ICL not given", "LTV − 10-shot ICL", "LTV − ICL"),
    ("01_ltv_vs_extracted", "middle-layer"): ("LTV beats extracted, mid layer", "83.5 vs ≤ 37.8 %", "LTV − FV", "LTV − FV"),
    ("01_ltv_vs_extracted", "every-layer"): ("LTV beats them at every layer", "above at every layer", "L29 LTV − FV", "L29: LTV − FV"),
    ("01_ltv_vs_extracted", "late-layers"): ("Lead largest at late layers", "largest late (figure)", None, "late − mid lead"),
    ("02_flexibility", "position4"): ("Works at position 4", "78.4 % (94 % of base)", "LTV − FV", "LTV − FV"),
    ("02_flexibility", "last5"): ("Works on the last 5 positions", "86.4 % (104 %)", "LTV − FV", "LTV − FV"),
    ("02_flexibility", "every4"): ("Works on every 4th layer", "82.4 % (99 %)", "LTV − Vanilla TV (difference)", "LTV − Vanilla TV"),
    ("02_flexibility", "layers_x_positions"): ("Works on layers × positions", "51.4 % (62 %)", "LTV − Vanilla TV (difference)", "LTV − Vanilla TV"),
    ("02_flexibility", "icl8"): ("Works on top of 8-shot ICL", "84.6 % (101 %)", "LTV − Vanilla TV (difference)", "LTV − Vanilla TV"),
    ("02_flexibility", "late-layers"): ("Works from late layers", "yes (text)", "LTV − Vanilla TV (difference)", "LTV − Vanilla TV"),
    ("03_peft", "competitive"): ("PEFT: on par with LoRA, prefix", "92.9 vs 91.6 / 85.7 %", "sst2: LTV − lora-r1-o15", "LTV − LoRA"),
    ("03_peft", "above-prefix"): ("PEFT: above prefix tuning", "+7.2 pts", "sst2: LTV − prefix-1-L15", "LTV − prefix"),
    ("03_peft", "cost"): ("PEFT: no slower to 80 %", "0.049 vs 0.050 s/step", "sst2: LTV / prefix-1-L15 time to 80 %",
                           "time ÷ prefix"),
    ("04_ov_key_heads", "ov-reconstruction"): ("OV circuits carry the effect", "83 → 52 % via OV", "θ_OV at |θ|: θ − random",
                                               "θ_OV − random, at |θ|"),
    ("04_ov_key_heads", "key-heads"): ("Key heads matter most", "51 vs 78 % ablated", "random-head minus key-head ablation (zero)",
                                       "random − key heads"),
    ("04_ov_key_heads", "key-head-placement"): ("Key heads in a U shape", "U shape (figure)",
                                                "last third: share of key heads minus its share of the layers",
                                                "last third"),
    ("04_ov_key_heads", "key-head-attention"): ("Key heads skip the sink", "less to the sink",
                                                "attention to the first token, key minus other heads", "key − other heads"),
    ("05_linearity", "linear-reconstruction"): ("Propagation nearly linear", "Wθ ≈ LTV (figure)", "LTV (own shift) − Wθ", "LTV − Wθ"),
    ("05_linearity", "rotation-depth"): ("Rotation early, stretch late", "cos rises (figure)", "LTV minus random", "LTV − random"),
    ("05_linearity", "rotation-alignment"): ("Rotation aligns with labels", "aligns (logit lens)", "LTV minus random", "LTV − random"),
    ("06_generalization_composition", "clusters"): ("LTVs cluster by task", "yes (heatmap)", "same − cross-task cosine, training's part",
                                                    "same − cross cosine"),
    ("06_generalization_composition", "transfer"): ("Transfer SNLI → RTE only", "46.2 % on RTE", "SNLI − random vectors", "SNLI − random"),
    ("06_generalization_composition", "composition"): ("LTVs compose", "far above (no number)", "sum − zero-shot", "sum − zero-shot"),
    ("07_myopic", "myopic-vs-extracted"): ("Myopic task: beats extracted", "better (qualitative)",
                                           "LTV − Vanilla TV (difference) (text)", "LTV − Vanilla TV"),
    ("07_myopic", "myopic-vs-icl"): ("Myopic task: matches ICL", "not given", "LTV − ICL 5-shot (text)", "LTV − ICL"),
    ("08_across_models", "middle-layer-across-models"): ("Mid-layer lead, 2 models", "83.5 vs ≤ 37.8 %",
                                                         "gemma3-270m: LTV − best extracted", "Gemma: LTV − best"),
    ("08_across_models", "layer-sweep-across-models"): ("Every-layer lead, 2 models", "above at every layer",
                                                        "gemma3-270m, antonym, layer 14", "Gemma L14"),
    ("08_across_models", "key-heads-across-models"): ("Key heads matter, 2 models", "51 vs 78 % ablated",
                                                      "gemma3-270m: random − key heads zeroed", "Gemma: random − key"),
    ("08_across_models", "linear-reconstruction-across-models"): ("Linear propagation, 2 models", "Wθ ≈ LTV (figure)",
                                                                  "gemma3-270m: LTV − Wθ", "Gemma: LTV − Wθ"),
}


@dataclasses.dataclass(frozen=True)
class GridRow:
    """One line of the verdict grid (:func:`grid_rows`)."""

    number: int  # the paper's claim (keys of PAPER_CLAIMS)
    chapter: str
    key: str
    claim: str  # in a few words
    paper: str  # the paper's number in a few words
    ours: str  # the headline number with its 95 % interval, or a dash
    verdict: Verdict
    evidence: str
    evidence_title: str
    model: str
    profile: str


def _headline(claim: Claim, wanted: str | None) -> tuple[str, Estimate] | None:
    named = dict(claim.intervals)
    if wanted is not None and wanted in named:
        return wanted, named[wanted]
    for name, est in claim.intervals:
        if est.difference:
            return name, est
    return claim.intervals[0] if claim.intervals else None


def _compact(est: Estimate) -> str:
    """``"+54.7 pts [+51.5, +58.0]"``: the value and its interval, without n and seeds (the details have them)."""
    sign = "+" if est.difference else ""
    unit = " pts" if est.difference else " %"
    return f"{100 * est.value:{sign}.1f}{unit} [{100 * est.low:{sign}.1f}, {100 * est.high:{sign}.1f}]"


def grid_rows(sheets: Sequence[ClaimSheet]) -> list[GridRow]:
    """The verdict grid's lines: one per recorded claim, in table-of-contents order."""
    rows = []
    for sheet in sheets:
        for c in sheet.claims:
            label = GRID_LABELS.get((sheet.chapter, c.key))
            short, paper, wanted, shown = label if label else (c.statement, c.paper, None, "")
            head = _headline(c, wanted)
            if head is None:
                ours = NA_DASH
            else:
                name, est = head
                ours = f"{shown or name} {_compact(est)}"
            rows.append(GridRow(c.paper_claim, sheet.chapter, c.key, short, paper, ours, c.verdict, c.evidence,
                                c.evidence_title, sheet.model, sheet.profile))
    return rows


NA_DASH = "\u2013"


def answer_line(sheets: Sequence[ClaimSheet]) -> str:
    """The one-line answer above the grid: how many of the claims tested here hold, in words and numbers."""
    counts = verdict_counts(sheets)
    total = sum(counts.values())
    if not total:
        return "No chapter has recorded a verdict yet."
    held = counts[Verdict.REPRODUCED] + counts[Verdict.PARTLY]
    word = "Mostly" if held * 3 >= total * 2 else ("In part" if held * 3 >= total else "Mostly not")
    runs = sorted({(s.model, s.profile) for s in sheets})
    where = ", ".join(f"`{m}` ({p} profile)" for m, p in runs)
    parts = ", ".join(f"{n} {v.value}" for v, n in counts.items() if n)
    return f"**Does the paper reproduce on a small model? {word}:** of {total} claims tested on {where}, {parts}."


def verdict_grid_markdown(sheets: Sequence[ClaimSheet], *, style: str = "myst", doc_prefix: str = "") -> str:
    """The verdict grid: one line per claim (claim in a few words | paper | ours with its 95 % interval | verdict).

    ``style="myst"`` (the book): the claim links to its evidence (``{ref}``) and the verdict is a ``{verdict}``
    badge; ``doc_prefix`` is unused there (labels are global). ``style="github"`` (README.md): plain Markdown, the
    claim links to its chapter's notebook under ``doc_prefix`` (e.g. ``"chapters/"``), the verdict is text.
    """
    if style not in ("myst", "github"):
        raise ValueError(f"style must be 'myst' or 'github', got {style!r}")
    rows = grid_rows(sheets)
    if not rows:
        return "No chapter has recorded a verdict yet (`results/claims/` is empty)."
    out = ["| claim | paper | ours (95 % interval) | verdict |", "|---|---|---|---|"]
    for r in rows:
        if style == "myst":
            claim_cell = f"{r.number}. {{ref}}`{table_cell(r.claim)} <{r.evidence}>`"
            verdict_cell = f"{{verdict}}`{r.verdict.value}`"
        else:
            claim_cell = f"{r.number}. [{table_cell(r.claim)}]({doc_prefix}{r.chapter}.ipynb)"
            verdict_cell = f"{VERDICT_MARKS[r.verdict]} {r.verdict.value}"
        out.append(f"| {claim_cell} | {table_cell(r.paper)} | {table_cell(r.ours)} | {verdict_cell} |")
    return "\n".join(out)


def scorecard_details_markdown(sheets: Sequence[ClaimSheet]) -> str:
    """Every claim's full record, one dropdown each (MyST ``{dropdown}``): the statement, the paper's numbers and
    ours, every interval with n and seeds, the model and profile, the rule and why it gave the verdict, and links
    to the evidence and the chapter."""
    out: list[str] = []
    for sheet in sheets:
        for c in sheet.claims:
            label = GRID_LABELS.get((sheet.chapter, c.key))
            title = label[0] if label else c.statement
            out += [
                f":::{{dropdown}} {c.paper_claim}. {' '.join(title.split())} — {c.verdict.value}",
                ":class-container: ltv-claim",
                "",
                f"**The paper claims.** {c.statement}",
                "",
                f"**Paper:** {c.paper}",
                "",
                f"**Ours:** {c.ours}" + (f" ({c.note})" if c.note else ""),
                "",
                f"**Uncertainty (95 % intervals):** {uncertainty_text(c)}",
                "",
                f"**Run:** `{sheet.model}`, profile `{sheet.profile}`" + (f", seed {sheet.seed}" if sheet.seed else ""),
                "",
                f"**Verdict:** {{verdict}}`{c.verdict.value}` by the rule {rule_text(c)}",
                "",
                (f"**Evidence:** {{ref}}`{c.evidence_title} <{c.evidence}>` in {{doc}}`chapter {sheet.chapter[:2]} "
                 f"<{sheet.chapter}>`"),
                ":::",
                "",
            ]
    return "\n".join(out).rstrip()


#: The columns of the claims download (CSV); the JSON download holds the full records.
CSV_COLUMNS = ("paper_claim", "chapter", "key", "statement", "paper", "ours", "headline", "headline_value",
               "headline_low", "headline_high", "n", "seeds", "verdict", "rule", "model", "profile", "seed", "evidence")


def claims_csv(sheets: Sequence[ClaimSheet]) -> str:
    """Every recorded claim as one CSV row (:data:`CSV_COLUMNS`); the headline is the grid's interval."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for sheet in sheets:
        for c in sheet.claims:
            label = GRID_LABELS.get((sheet.chapter, c.key))
            head = _headline(c, label[2] if label else None)
            name, est = head if head else ("", None)
            writer.writerow([
                c.paper_claim, sheet.chapter, c.key, c.statement, c.paper, c.ours, name,
                "" if est is None else repr(est.value), "" if est is None else repr(est.low),
                "" if est is None else repr(est.high), c.n or "", c.seeds or "", c.verdict.value,
                rule_text(c), sheet.model, sheet.profile, sheet.seed, c.evidence,
            ])
    return buf.getvalue()


def claims_json(sheets: Sequence[ClaimSheet]) -> str:
    """Every chapter's claims sheet, as recorded, in one JSON document."""
    return json.dumps({"schema": SCHEMA, "paper_claims": {str(k): v for k, v in PAPER_CLAIMS.items()},
                       "sheets": [json.loads(s.to_json()) for s in sheets]}, indent=1, ensure_ascii=False) + "\n"


#: Where the book's HTML offers the claims for download (relative to the HTML root).
DOWNLOADS = {"csv": "_static/ltv-claims.csv", "json": "_static/ltv-claims.json"}


def downloads_markdown(prefix: str = "../") -> str:
    """Links to the claims downloads, from a page ``prefix`` away from the HTML root (the scorecard: ``../``)."""
    return (f"Download every claim: <a href=\"{prefix}{DOWNLOADS['csv']}\" download>CSV</a> (one row per claim) or "
            f"<a href=\"{prefix}{DOWNLOADS['json']}\" download>JSON</a> (the full records, with every interval).")


def scorecard_page_markdown(sheets: Sequence[ClaimSheet]) -> str:
    """The scorecard page: the answer, the grid, the downloads, then each claim's record in a dropdown."""
    return "\n\n".join([
        ":::{container} ltv-verdict-grid",
        answer_line(sheets),
        verdict_grid_markdown(sheets),
        ":::",
        downloads_markdown(),
        "### Each claim in detail",
        scorecard_details_markdown(sheets) or "No claim recorded.",
    ])
