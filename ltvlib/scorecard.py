"""The scorecard: each chapter's verdicts on the paper's claims, saved as data and read back as one table.

A chapter ends with one call::

    from ltvlib.scorecard import Claim, record_claims

    record_claims("01_ltv_vs_extracted", [
        Claim(
            paper_claim=1,                      # the paper's claim it tests (keys of PAPER_CLAIMS)
            key="middle-layer",                 # unique within the chapter
            statement="At the middle layer the LTV beats both extracted vectors.",
            paper="LTV 83.49 %, Vanilla TV 37.80 %, FV 37.30 % (Llama-3.1-8B, 7 tasks)",
            ours=f"LTV {ltv:.1f} %, Vanilla TV {vtv:.1f} %, FV {fv:.1f} %",
            checks={"LTV average above both extracted averages": ltv > max(vtv, fv)},
            evidence="ch01-table-middle",       # a MyST target `(ch01-table-middle)=` in the chapter
            evidence_title="the middle-layer table",
        ),
    ], model=model, profile=profile, seed=seed)

The verdict is never written by hand: it follows from ``checks``, named conditions the chapter computes
from its own measurements (:func:`verdict_of`): every check passes -> *reproduced*, some -> *partly*, none ->
*not reproduced*, no checks (the run measured nothing for the claim) -> *not measured*. The call writes
``results/claims/<chapter>.json`` under the book root being executed, atomically, and returns a
:class:`ClaimSheet`, which renders as the chapter's verdict list when it is the cell's last expression.

The book root is ``$LTV_BOOK_ROOT`` (set by ``python -m ltvlib.book`` for every kernel it starts: the
repository for the default setting, ``_build/runs/<profile>__<model>/`` otherwise); a chapter run by hand
with papermill finds it the same way the runner would from ``model``, ``profile`` and ``seed``.
``chapters/scorecard.py`` reads every sheet there with :func:`load_sheets` and renders
:func:`scorecard_markdown`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ltvlib.book import BOOK_ROOT_ENV, CLAIMS_DIR, is_default, read_chapters, staging_dir
from ltvlib.cache import atomic_write_text

__all__ = [
    "PAPER_CLAIMS",
    "Claim",
    "ClaimSheet",
    "Verdict",
    "book_root",
    "load_sheets",
    "record_claims",
    "scorecard_markdown",
    "summary_markdown",
    "verdict_counts",
    "verdict_of",
]

SCHEMA = 1

# The paper's claims as /work/shared/paper/notes.md lists them (chapter 00 states them too). A Claim record
# names the one it tests; the scorecard lists every one, measured or not.
PAPER_CLAIMS: dict[int, str] = {
    1: "Learned task vectors beat extracted ones (Vanilla TV, Function Vectors) at every injection layer, and "
    "match or beat ICL.",
    2: "LTVs are flexible: late layers, positions other than the last, several layers or positions at once, on "
    "top of an ICL prompt.",
    3: "Low level: a task vector acts mainly through the OV circuits of later attention heads; a few key heads "
    "carry most of the effect.",
    4: "High level: propagation to the last layer is nearly linear; early vectors are rotated toward the label "
    "unembeddings, late ones mostly stretched.",
    5: "LTV is a cheap parameter-efficient fine-tuning method (d parameters), competitive with LoRA and prefix "
    "tuning.",
    6: "LTVs of one task cluster and different tasks separate; they transfer where label spaces overlap "
    "(SNLI -> RTE) and compose.",
}

# MyST target names: Sphinx lower-cases labels, so only lower-case names round-trip into the HTML ids.
_LABEL_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_CHAPTER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


class Verdict(str, enum.Enum):
    """A claim's verdict; its value is what the tables print."""

    REPRODUCED = "reproduced"
    PARTLY = "partly"
    NOT_REPRODUCED = "not reproduced"
    NOT_MEASURED = "not measured"


def verdict_of(checks: Iterable[tuple[str, bool]] | Mapping[str, bool]) -> Verdict:
    """The rule every chapter uses: all checks pass -> reproduced, some -> partly, none -> not reproduced;
    no checks -> not measured."""
    passed = [bool(ok) for _, ok in (checks.items() if isinstance(checks, Mapping) else checks)]
    if not passed:
        return Verdict.NOT_MEASURED
    if all(passed):
        return Verdict.REPRODUCED
    return Verdict.PARTLY if any(passed) else Verdict.NOT_REPRODUCED


def _as_bool(name: str, value: Any) -> bool:
    # numpy's bool (numpy.bool_) is not a bool subclass; accept it by its type rather than import numpy here
    if isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")):
        return bool(value)
    raise TypeError(
        f"check {name!r} must be a bool computed from the chapter's measurements, got {type(value).__name__} "
        f"{value!r} (a NaN or None is not a verdict: leave the check out, or compare explicitly)"
    )


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of the paper as one chapter tested it.

    Attributes:
        paper_claim: the paper's claim this row tests, a key of :data:`PAPER_CLAIMS` (1-6).
        key: short id, unique within the chapter (lower case, e.g. ``"middle-layer"``).
        statement: what the paper claims, in one sentence.
        paper: the paper's number(s) as text, with its model (e.g. ``"83.49 % (Llama-3.1-8B)"``).
        ours: our number(s) as text, computed in the chapter.
        checks: the verdict's rule: named conditions, each a bool computed from the chapter's measurements, in
            the order they should be read (a mapping, or a sequence of ``(name, bool)`` pairs).
        evidence: MyST label of the figure, table or section that supports the row; the chapter defines it
            with a ``(label)=`` target (lower case; prefix it with the chapter, ``ch01-...``).
        evidence_title: the link's text, e.g. ``"Figure 1.1"``.
        note: optional, one sentence on why ours differs.
    """

    paper_claim: int
    key: str
    statement: str
    paper: str
    ours: str
    checks: tuple[tuple[str, bool], ...]
    evidence: str
    evidence_title: str
    note: str = ""

    def __init__(
        self,
        paper_claim: int,
        key: str,
        statement: str,
        paper: str,
        ours: str,
        checks: Mapping[str, Any] | Sequence[tuple[str, Any]],
        evidence: str,
        evidence_title: str,
        note: str = "",
    ) -> None:
        if paper_claim not in PAPER_CLAIMS:
            raise ValueError(f"paper_claim {paper_claim!r} is not one of the paper's claims {sorted(PAPER_CLAIMS)}")
        if not _KEY_RE.match(key):
            raise ValueError(f"key {key!r}: use lower-case letters, digits, '-', '_' or '.'")
        if not _LABEL_RE.match(evidence):
            raise ValueError(
                f"evidence {evidence!r} is not a MyST label: use lower-case letters, digits, '-' or '_' "
                "(Sphinx lower-cases labels, so upper case would not match the HTML id)"
            )
        for name, text in (("statement", statement), ("paper", paper), ("ours", ours), ("evidence_title", evidence_title)):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"claim {key!r}: {name} must be a non-empty string, got {text!r}")
        pairs = list(checks.items()) if isinstance(checks, Mapping) else [tuple(p) for p in checks]
        names = [str(n) for n, _ in pairs]
        if len(set(names)) != len(names):
            raise ValueError(f"claim {key!r}: duplicate check names {names}")
        set_ = object.__setattr__  # frozen dataclass: assign once, here
        set_(self, "paper_claim", int(paper_claim))
        set_(self, "key", key)
        set_(self, "statement", statement.strip())
        set_(self, "paper", paper.strip())
        set_(self, "ours", ours.strip())
        set_(self, "checks", tuple((str(n), _as_bool(str(n), v)) for n, v in pairs))
        set_(self, "evidence", evidence)
        set_(self, "evidence_title", evidence_title.strip())
        set_(self, "note", note.strip())

    @property
    def verdict(self) -> Verdict:
        return verdict_of(self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "paper_claim": self.paper_claim,
            "key": self.key,
            "statement": self.statement,
            "paper": self.paper,
            "ours": self.ours,
            "checks": [{"check": n, "passed": ok} for n, ok in self.checks],
            "verdict": self.verdict.value,  # informational: readers recompute it from the checks
            "evidence": self.evidence,
            "evidence_title": self.evidence_title,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Claim:
        return cls(
            paper_claim=d["paper_claim"],
            key=d["key"],
            statement=d["statement"],
            paper=d["paper"],
            ours=d["ours"],
            checks=[(c["check"], c["passed"]) for c in d["checks"]],
            evidence=d["evidence"],
            evidence_title=d["evidence_title"],
            note=d.get("note", ""),
        )


def _rule_text(claim: Claim) -> str:
    return "; ".join(f"{'✓' if ok else '✗'} {name}" for name, ok in claim.checks) or "(nothing measured)"


@dataclasses.dataclass(frozen=True)
class ClaimSheet:
    """One chapter's claims from one run: what ``results/claims/<chapter>.json`` holds."""

    chapter: str
    model: str
    profile: str
    seed: int
    claims: tuple[Claim, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema": SCHEMA,
                "chapter": self.chapter,
                "model": self.model,
                "profile": self.profile,
                "seed": self.seed,
                "claims": [c.to_dict() for c in self.claims],
            },
            indent=1,
            ensure_ascii=False,
        ) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "claims file") -> ClaimSheet:
        try:
            d = json.loads(text)
            if d.get("schema") != SCHEMA:
                raise ValueError(f"schema {d.get('schema')!r}, expected {SCHEMA}")
            return cls(d["chapter"], d["model"], d["profile"], int(d["seed"]),
                       tuple(Claim.from_dict(c) for c in d["claims"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{source}: not a valid claims sheet ({type(exc).__name__}: {exc})") from exc

    def markdown(self) -> str:
        """The chapter's verdicts as a CommonMark list (no links: the chapter is the evidence)."""
        head = (f"**Verdicts recorded for the scorecard** (`{self.model}`, profile `{self.profile}`, seed {self.seed}; "
                "rule: every check passes → reproduced, some → partly, none → not reproduced):")
        lines = [head, ""]
        for c in self.claims:
            lines.append(
                f"- **Claim {c.paper_claim}, {c.statement}** Paper: {c.paper}. Ours: {c.ours}. "
                f"Checks: {_rule_text(c)}. **Verdict: {c.verdict.value}** (see {c.evidence_title})."
                + (f" {c.note}" if c.note else "")
            )
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.markdown()


def _find_repo_root() -> Path:
    """The repository holding ``_toc.yml``: the working dir or a parent of it (a kernel runs in
    ``chapters/``), else the checkout this package was imported from."""
    cwd = Path.cwd().resolve()
    for d in (cwd, *cwd.parents):
        if (d / "_toc.yml").exists():
            return d
    pkg_parent = Path(__file__).resolve().parents[1]
    if (pkg_parent / "_toc.yml").exists():
        return pkg_parent
    raise FileNotFoundError(f"no _toc.yml in {cwd} or its parents, nor in {pkg_parent}; set ${BOOK_ROOT_ENV}")


def book_root(model: str, profile: str, seed: int) -> Path:
    """The book root the claims of this run belong to.

    ``$LTV_BOOK_ROOT`` when set (the book runner sets it for its kernels); otherwise what the runner would
    use for these parameters: the repository for the default setting, else its staging dir (chapter-specific
    extra parameters are not known here, so a hand-run with extras lands in the dir without their hash).
    """
    env = os.environ.get(BOOK_ROOT_ENV)
    if env:
        return Path(env)
    repo = _find_repo_root()
    params = {"model": model, "profile": profile, "seed": seed}
    return repo if is_default(params) else staging_dir(repo, params)


def record_claims(
    chapter: str,
    claims: Sequence[Claim],
    *,
    model: str,
    profile: str,
    seed: int,
    root: Path | None = None,
) -> ClaimSheet:
    """Save a chapter's claims to ``<root>/results/claims/<chapter>.json`` (atomically) and return them.

    Args:
        chapter: the chapter's file name without extension, e.g. ``"01_ltv_vs_extracted"``.
        claims: the rows; keys must be unique.
        model, profile, seed: the chapter's parameters (the ``model`` parameter as given, not ``lm.name``).
        root: book root; default :func:`book_root`.

    Returns:
        The saved :class:`ClaimSheet`; as a cell's last expression it renders the verdict list.
    """
    if not _CHAPTER_RE.match(chapter):
        raise ValueError(f"chapter {chapter!r}: give the file name without extension, e.g. '01_ltv_vs_extracted'")
    claims = tuple(claims)
    for c in claims:
        if not isinstance(c, Claim):
            raise TypeError(f"record_claims takes Claim records, got {type(c).__name__}")
    keys = [c.key for c in claims]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{chapter}: duplicate claim keys {keys}")
    sheet = ClaimSheet(chapter, str(model), str(profile), int(seed), claims)
    out = (root or book_root(model, profile, seed)) / CLAIMS_DIR / f"{chapter}.json"
    atomic_write_text(out, sheet.to_json())
    return sheet


def load_sheets(root: Path) -> list[ClaimSheet]:
    """Every chapter's sheet under ``root``, in table-of-contents order.

    Files of chapters that are not in ``root``'s ``_toc.yml`` are ignored (a renamed or removed chapter
    leaves a stale file behind; its notebook, and so its evidence, is not in the book).
    """
    sheets = []
    for chapter in read_chapters(root):
        path = root / CLAIMS_DIR / f"{chapter.name}.json"
        if path.exists():
            sheet = ClaimSheet.from_json(path.read_text(encoding="utf-8"), source=str(path))
            if sheet.chapter != chapter.name:
                raise ValueError(f"{path}: records chapter {sheet.chapter!r}, expected {chapter.name!r}")
            sheets.append(sheet)
    return sheets


def verdict_counts(sheets: Iterable[ClaimSheet]) -> dict[Verdict, int]:
    counts = dict.fromkeys(Verdict, 0)
    for sheet in sheets:
        for c in sheet.claims:
            counts[c.verdict] += 1
    return counts


def _cell(text: str) -> str:
    """Text safe inside a MyST pipe-table cell."""
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())


def _verdict_badge(v: Verdict) -> str:
    return {Verdict.REPRODUCED: "**reproduced**", Verdict.PARTLY: "*partly*"}.get(v, v.value)


def scorecard_markdown(sheets: Sequence[ClaimSheet], *, doc_prefix: str = "") -> str:
    """The scorecard as MyST markdown: one table row per recorded claim, grouped by the paper's claims, each
    linking to its evidence (``{ref}``) and chapter (``{doc}``), then the paper's claims no chapter measured.

    ``doc_prefix`` is prepended to chapter names in ``{doc}`` links (the scorecard lives beside the chapters,
    so the default, relative names, resolves).
    """
    rows = [(c.paper_claim, i, s, c) for i, s in enumerate(sheets) for c in s.claims]
    rows.sort(key=lambda r: (r[0], r[1]))
    out = [
        "| # | the paper claims | paper | ours | model, profile | verdict | rule (✓ passed, ✗ failed) | evidence |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for number, _, sheet, c in rows:
        chapter_link = f"{{doc}}`ch. {sheet.chapter[:2]} <{doc_prefix}{sheet.chapter}>`"
        out.append("| " + " | ".join([
            str(number),
            _cell(c.statement),
            _cell(c.paper),
            _cell(c.ours) + (f" ({_cell(c.note)})" if c.note else ""),
            _cell(f"`{sheet.model}`, {sheet.profile}" + (f", seed {sheet.seed}" if sheet.seed else "")),
            _verdict_badge(c.verdict),
            _cell(_rule_text(c)),
            f"{{ref}}`{_cell(c.evidence_title)} <{c.evidence}>`, {chapter_link}",
        ]) + " |")
    measured = {r[0] for r in rows}
    missing = [n for n in PAPER_CLAIMS if n not in measured]
    if not rows:
        out = ["No chapter has recorded a result in this run yet."]
    if missing:
        out += ["", "The paper's claims with no result in this run (their chapters were not executed here):", ""]
        out += [f"- **Claim {n}.** {PAPER_CLAIMS[n]}" for n in missing]
    return "\n".join(out)


def summary_markdown(sheets: Sequence[ClaimSheet]) -> str:
    """One line: how many rows got each verdict, and from which run."""
    counts = verdict_counts(sheets)
    total = sum(counts.values())
    runs = sorted({(s.model, s.profile, s.seed) for s in sheets})
    where = "; ".join(f"`{m}`, profile `{p}`" + (f", seed {sd}" if sd else "") for m, p, sd in runs)
    parts = [f"{n} {v.value}" for v, n in counts.items() if n]
    return (f"**{total} measured claims** ({', '.join(parts) or 'none'}) from {len(sheets)} chapters"
            + (f" ({where})" if where else "") + ".")
