"""The scorecard: each chapter's verdicts on the paper's claims, saved as data and read back as one table.

A chapter ends with one call::

    from ltvlib.book.scorecard import Claim, direction_rule, record_claims
    from ltvlib.stats import paired_bootstrap_difference

    gap = paired_bootstrap_difference(ltv_correct, fv_correct)   # (seeds, queries) 0/1 arrays, same queries
    record_claims("01_ltv_vs_extracted", [
        Claim(
            paper_claim=1,                      # the paper's claim it tests (keys of PAPER_CLAIMS)
            key="middle-layer",                 # unique within the chapter
            statement="At the middle layer the LTV beats the Function Vector.",
            paper="LTV 83.49 %, FV 37.30 % (Llama-3.1-8B, 7 tasks)",
            ours=f"LTV − FV {gap}",
            rule=direction_rule(gap.value, gap.interval, paper_direction=+1),
            intervals={"LTV − FV": gap},        # n and seeds default to the intervals'
            evidence="ch01-table-middle",       # a MyST target `(ch01-table-middle)=` in the chapter
            evidence_title="the middle-layer table",
        ),
    ], model=model, profile=profile, seed=seed)

The verdict is never written by hand: it comes from a rule in code applied to the chapter's measurements, one
of five levels (:data:`VERDICT_LEVELS`):

- :func:`direction_rule`: the interval of a difference lies on the paper's side of 0 -> *reproduced*, on the
  other side -> *not reproduced*, across 0 -> *inconclusive*;
- :func:`threshold_rule`: the same against a bound ("recovers at least 80 % of the gain");
- :func:`combine_rule`: sub-claims, some reproduced and some not -> *partly*;
- :func:`not_testable`: *not testable at this scale*, with the reason;
- :func:`precondition_rule`: *not testable at this scale* when a measured precondition fails (e.g. no headroom
  over ICL), else the claim's own rule.

The claim saves the rule's name and inputs, and reading it back re-applies the rule (:data:`RULES`), so a
saved verdict that its rule does not give is an error. Claims saved before intervals carry ``checks``, named
bools (:func:`verdict_of`: all pass -> reproduced, some -> partly, none -> not reproduced, no checks -> not
measured); they still load, and the scorecard marks them "no interval recorded". The call writes
``results/claims/<chapter>.json`` under the book root being executed, atomically, and returns a
:class:`ClaimSheet`, which renders as the chapter's verdict list when it is the cell's last expression.

The book root is ``$LTV_BOOK_ROOT`` (set by ``python -m ltvlib.book`` for every kernel it starts: the
repository for the default setting, ``_build/runs/<profile>__<model>/`` otherwise); a chapter run by hand
with papermill finds it the same way the runner would from ``model``, ``profile`` and ``seed``.
``chapters/scorecard.py`` reads every sheet there with :func:`load_sheets` and renders
:func:`ltvlib.book.verdict_grid.scorecard_page_markdown`: the verdict grid (one line per claim, also the landing
page's and README.md's, see :mod:`ltvlib.book.pages`), the downloads and each claim's record in a dropdown.
:func:`scorecard_markdown` is the older one-table form, every field in a column.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from ltvlib.book.layout import BOOK_ROOT_ENV, CLAIMS_DIR, claims_root, is_default, read_chapters, verdict_slug
from ltvlib.cache import atomic_write_text
from ltvlib.stats import Estimate, format_estimate

__all__ = [
    "PAPER_CLAIMS",
    "RULES",
    "VERDICT_LEVELS",
    "VERDICT_MARKS",
    "Claim",
    "ClaimSheet",
    "RuleResult",
    "Verdict",
    "book_root",
    "budget_rule",
    "checks_rule",
    "combine_rule",
    "direction_rule",
    "load_sheets",
    "not_testable",
    "precondition_rule",
    "record_claims",
    "rule_text",
    "scorecard_markdown",
    "summary_markdown",
    "table_cell",
    "threshold_rule",
    "uncertainty_text",
    "verdict_counts",
    "verdict_of",
]

# 2: claims record their rule (name, inputs), n, seeds and intervals; 1: checks only (still read).
SCHEMA = 2
READABLE_SCHEMAS = (1, 2)

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
    """A claim's verdict; its value is what the tables print.

    The five levels (:data:`VERDICT_LEVELS`) each come from a rule in code: :func:`direction_rule` and
    :func:`threshold_rule` give reproduced, not reproduced or inconclusive from an interval; :func:`combine_rule`
    gives partly when some sub-claims are reproduced and some not; :func:`not_testable` says what this model or
    budget cannot show. ``NOT_MEASURED`` is the old checks rule's answer to a claim with no checks.
    """

    REPRODUCED = "reproduced"
    PARTLY = "partly"
    NOT_REPRODUCED = "not reproduced"
    INCONCLUSIVE = "inconclusive"
    NOT_TESTABLE = "not testable at this scale"
    NOT_MEASURED = "not measured"


VERDICT_LEVELS: tuple[Verdict, ...] = (
    Verdict.REPRODUCED, Verdict.PARTLY, Verdict.NOT_REPRODUCED, Verdict.INCONCLUSIVE, Verdict.NOT_TESTABLE,
)


def verdict_of(checks: Iterable[tuple[str, bool]] | Mapping[str, bool]) -> Verdict:
    """The checks rule (claims recorded before intervals): all checks pass -> reproduced, some -> partly, none
    -> not reproduced; no checks -> not measured."""
    passed = [bool(ok) for _, ok in (checks.items() if isinstance(checks, Mapping) else checks)]
    if not passed:
        return Verdict.NOT_MEASURED
    if all(passed):
        return Verdict.REPRODUCED
    return Verdict.PARTLY if any(passed) else Verdict.NOT_REPRODUCED


# ------------------------------------------------------------------------------------------------ rules


@dataclasses.dataclass(frozen=True)
class RuleResult:
    """A verdict with the rule that gave it and that rule's inputs.

    Attributes:
        verdict: the level the rule chose.
        rule: the rule's name, a key of :data:`RULES`.
        inputs: the keyword arguments that reproduce the verdict: ``RULES[rule](**inputs)`` (plain JSON values).
        reason: one sentence saying why, for the scorecard.
    """

    verdict: Verdict
    rule: str
    inputs: Mapping[str, Any]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "verdict": self.verdict.value, "inputs": dict(self.inputs), "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RuleResult:
        """Re-apply the named rule to the saved inputs; a saved verdict the rule does not give is an error."""
        name = d["rule"]
        if name not in RULES:
            raise ValueError(f"unknown rule {name!r}; rules: {sorted(RULES)}")
        result = RULES[name](**d["inputs"])
        if result.verdict.value != d["verdict"]:
            result = _legacy_direction(name, d) or result
        if result.verdict.value != d["verdict"]:
            raise ValueError(
                f"rule {name!r} gives {result.verdict.value!r} on the saved inputs, but {d['verdict']!r} was saved"
            )
        return result


def _legacy_direction(name: str, d: Mapping[str, Any]) -> RuleResult | None:
    """A direction verdict saved before the rule became symmetric at its bound: then an interval whose far end
    sat exactly at the margin (``[-x, 0]``) was "not reproduced", where it is inconclusive now. Such a saved
    verdict is read back as saved (the chapter's next run decides it afresh); anything else is not legacy."""
    if name != "direction" or d.get("verdict") != Verdict.NOT_REPRODUCED.value:
        return None
    i = d["inputs"]
    s, m = int(i["paper_direction"]), float(i["margin"])
    lo, hi = sorted((s * float(i["interval"][0]) - m, s * float(i["interval"][1]) - m))
    if hi != 0 or lo >= 0:
        return None
    span = f"[{_g(float(i['interval'][0]))}, {_g(float(i['interval'][1]))}]"
    return _result(Verdict.NOT_REPRODUCED, "direction", i, f"the interval {span} reaches the margin at most "
                   "(decided by the rule before it was symmetric at its bound)")


def _result(verdict: Verdict, rule: str, inputs: Mapping[str, Any], reason: str) -> RuleResult:
    # inputs go through JSON once so a result built in a chapter equals the one read back from its file
    return RuleResult(verdict, rule, json.loads(json.dumps(dict(inputs))), reason)


def _interval(value: Any, interval: Sequence[Any], rule: str) -> tuple[float, float, float]:
    v = float(value)
    if len(interval) != 2:
        raise ValueError(f"{rule}: interval must be (low, high), got {interval!r}")
    lo, hi = float(interval[0]), float(interval[1])
    if not all(math.isfinite(x) for x in (v, lo, hi)):
        raise ValueError(f"{rule}: value {v!r} and interval [{lo!r}, {hi!r}] must be finite")
    if not lo - 1e-9 <= v <= hi + 1e-9:
        raise ValueError(f"{rule}: value {v!r} lies outside its interval [{lo!r}, {hi!r}]")
    return v, lo, hi


def _g(x: float) -> str:
    return f"{x:+.3g}"


def direction_rule(diff: float, interval: Sequence[float], paper_direction: int = 1, *, margin: float = 0.0) -> RuleResult:
    """The paper says a difference (method A minus B) has a sign; does our interval agree?

    Reproduced when the whole interval lies strictly beyond ``margin`` on the paper's side; not reproduced when
    it lies strictly on the other side; inconclusive when it admits both. A bound exactly at ``margin`` counts
    the same on either side: ``[0, +x]`` and ``[-x, 0]`` are both inconclusive (each admits no difference), and
    mirroring the interval with ``paper_direction`` mirrors the verdict. The one exception is the degenerate
    interval ``[margin, margin]`` (A equals B on every resample, e.g. both at the floor): no difference at all,
    which excludes the paper's direction whichever it is, so not reproduced.

    Args:
        diff: our difference, e.g. :attr:`ltvlib.stats.Estimate.value` of a paired bootstrap.
        interval: its (low, high), e.g. ``Estimate.interval``.
        paper_direction: +1 if the paper finds A above B, -1 if below.
        margin: how far past 0 the difference must be, in the difference's unit (default 0).
    """
    if paper_direction not in (1, -1):
        raise ValueError(f"direction: paper_direction must be +1 or -1, got {paper_direction!r}")
    v, lo, hi = _interval(diff, interval, "direction")
    margin = float(margin)
    # flip to the paper's orientation: the paper claims s*diff > margin
    a, b = sorted((paper_direction * lo - margin, paper_direction * hi - margin))
    side = f"{'above' if paper_direction > 0 else 'below'} {_g(paper_direction * margin)}"
    span = f"[{_g(lo)}, {_g(hi)}]"
    if a > 0:
        verdict, why = Verdict.REPRODUCED, f"the interval {span} lies {side}, the paper's side"
    elif b < 0:
        verdict, why = Verdict.NOT_REPRODUCED, f"the interval {span} excludes the paper's direction ({side})"
    elif a == b == 0:
        verdict, why = Verdict.NOT_REPRODUCED, f"the interval {span} is exactly {_g(margin)}: no difference at all"
    else:
        verdict, why = Verdict.INCONCLUSIVE, f"the interval {span} admits both directions around {_g(margin)}"
    inputs = {"diff": v, "interval": [lo, hi], "paper_direction": paper_direction, "margin": margin}
    return _result(verdict, "direction", inputs, why)


def threshold_rule(value: float, interval: Sequence[float], threshold: float, *, at_least: bool = True) -> RuleResult:
    """The paper's claim is a bound, e.g. "the OV part recovers at least 80 % of the gain"; does our interval
    clear it?

    With ``at_least``: reproduced when the whole interval is at or above ``threshold``, not reproduced when it
    is entirely below, inconclusive when it straddles it. ``at_least=False`` mirrors this for "at most".
    """
    v, lo, hi = _interval(value, interval, "threshold")
    t = float(threshold)
    if not math.isfinite(t):
        raise ValueError(f"threshold: threshold must be finite, got {threshold!r}")
    at_least = bool(at_least)
    span, bound = f"[{lo:.3g}, {hi:.3g}]", f"{'≥' if at_least else '≤'} {t:.3g}"
    clears, fails = (lo >= t, hi < t) if at_least else (hi <= t, lo > t)
    if clears:
        verdict, why = Verdict.REPRODUCED, f"the interval {span} lies within {bound}"
    elif fails:
        verdict, why = Verdict.NOT_REPRODUCED, f"the interval {span} lies outside {bound}"
    else:
        verdict, why = Verdict.INCONCLUSIVE, f"the interval {span} straddles the bound {bound}"
    return _result(verdict, "threshold", {"value": v, "interval": [lo, hi], "threshold": t, "at_least": at_least}, why)


def combine_rule(parts: Mapping[str, RuleResult | Mapping[str, Any]]) -> RuleResult:
    """A claim made of sub-claims, each with its own rule.

    Sub-claims not testable at this scale are set aside (all of them -> not testable). Of the rest: all
    reproduced -> reproduced; all not reproduced -> not reproduced; all inconclusive -> inconclusive; some
    reproduced (or partly) beside others that are not -> partly; none reproduced, some not reproduced and some
    inconclusive -> not reproduced (a part of the claim is contradicted and nothing supports it).

    Args:
        parts: sub-claim name -> its :class:`RuleResult` (or that result's ``to_dict()``, as saved).
    """
    if not parts:
        raise ValueError("combined: give at least one sub-claim")
    results = {str(k): v if isinstance(v, RuleResult) else RuleResult.from_dict(v) for k, v in parts.items()}
    unmeasured = [k for k, r in results.items() if r.verdict is Verdict.NOT_MEASURED]
    if unmeasured:
        raise ValueError(f"combined: sub-claims {unmeasured} measured nothing; say why with not_testable(reason)")
    testable = [r.verdict for r in results.values() if r.verdict is not Verdict.NOT_TESTABLE]
    if not testable:
        verdict = Verdict.NOT_TESTABLE
    elif all(v is testable[0] for v in testable):
        verdict = testable[0]
    elif any(v in (Verdict.REPRODUCED, Verdict.PARTLY) for v in testable):
        verdict = Verdict.PARTLY
    elif Verdict.NOT_REPRODUCED in testable:
        verdict = Verdict.NOT_REPRODUCED
    else:
        verdict = Verdict.INCONCLUSIVE
    why = "; ".join(f"{k}: {r.verdict.value}" for k, r in results.items())
    return _result(verdict, "combined", {"parts": {k: r.to_dict() for k, r in results.items()}}, why)


def not_testable(reason: str) -> RuleResult:
    """What this model or budget cannot show, and why (e.g. "the 135M model has no 7-task ICL baseline above
    chance"). The reason is required: it is the verdict's whole content."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("not testable: give the reason (what the model or budget cannot show, and why)")
    return _result(Verdict.NOT_TESTABLE, "not testable", {"reason": reason.strip()}, reason.strip())


def precondition_rule(condition: str, precondition: RuleResult | Mapping[str, Any],
                      claim: RuleResult | Mapping[str, Any]) -> RuleResult:
    """A claim that can only be tested where a measured precondition holds (e.g. "the LTV trained on the composed
    task beats ICL there": without that headroom, no method can be shown to beat ICL).

    The precondition's own rule reproduced -> the claim's verdict; otherwise not testable at this scale, whatever
    the claim's rule gave (both results are saved, so the reader sees the measurement behind the verdict).

    Args:
        condition: the precondition in a few words, for the scorecard.
        precondition: its rule's result (or that result's ``to_dict()``, as saved).
        claim: the claim's rule's result (or its ``to_dict()``).
    """
    if not isinstance(condition, str) or not condition.strip():
        raise ValueError("precondition: name the condition (what must hold before the claim can be tested)")
    pre = precondition if isinstance(precondition, RuleResult) else RuleResult.from_dict(precondition)
    main = claim if isinstance(claim, RuleResult) else RuleResult.from_dict(claim)
    if pre.verdict is Verdict.REPRODUCED:
        verdict, why = main.verdict, f"{condition.strip()} holds ({pre.reason}); {main.reason}"
    else:
        verdict, why = Verdict.NOT_TESTABLE, f"{condition.strip()} does not hold ({pre.verdict.value}: {pre.reason})"
    inputs = {"condition": condition.strip(), "precondition": pre.to_dict(), "claim": main.to_dict()}
    return _result(verdict, "precondition", inputs, why)


def checks_rule(checks: Mapping[str, Any] | Sequence[Sequence[Any]]) -> RuleResult:
    """The rule of claims recorded without intervals (:func:`verdict_of`), as a :class:`RuleResult`."""
    pairs = [(str(n), _as_bool(str(n), v)) for n, v in (checks.items() if isinstance(checks, Mapping) else checks)]
    why = "; ".join(f"{'✓' if ok else '✗'} {name}" for name, ok in pairs) or "(nothing measured)"
    return _result(verdict_of(pairs), "checks", {"checks": [[n, ok] for n, ok in pairs]}, why)


def budget_rule(missing: Sequence[str], reason: str) -> RuleResult:
    """The part of a claim a run did not measure for lack of time (e.g. tasks a profile leaves out to stay
    inside its budget): inconclusive at this budget, never a verdict either way. Combined with the parts that
    were measured (:func:`combine_rule`), a claim whose measured parts all hold becomes "partly".

    Args:
        missing: what was not measured (e.g. task names); at least one.
        reason: why, and where it is measured (e.g. "over the cpu book's 150-minute budget; the paper profile
            runs it").
    """
    names = [str(m) for m in missing]
    if not names:
        raise ValueError("budget: name what was not measured (nothing missing: leave the part out)")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("budget: give the reason (which budget, and where the missing part is measured)")
    return _result(Verdict.INCONCLUSIVE, "budget", {"missing": names, "reason": reason.strip()},
                   f"not measured at this budget: {', '.join(names)} ({reason.strip()})")


# Every rule by its saved name: a saved claim's verdict is re-derived as RULES[name](**inputs).
RULES: dict[str, Callable[..., RuleResult]] = {
    "direction": direction_rule,
    "threshold": threshold_rule,
    "combined": combine_rule,
    "not testable": not_testable,
    "checks": checks_rule,
    "budget": budget_rule,
    "precondition": precondition_rule,
}


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
        checks: the old verdict rule (claims without intervals): named conditions, each a bool computed from the
            chapter's measurements, in reading order (a mapping, or ``(name, bool)`` pairs). Leave empty when
            ``rule`` is given.
        evidence: MyST label of the figure, table or section that supports the row; the chapter defines it
            with a ``(label)=`` target (lower case; prefix it with the chapter, ``ch01-...``).
        evidence_title: the link's text, e.g. ``"Figure 1.1"``.
        note: optional, one sentence on why ours differs.
        rule: the verdict's rule with its inputs (:func:`direction_rule`, :func:`threshold_rule`,
            :func:`combine_rule`, :func:`not_testable`); without it the verdict follows from ``checks``.
        intervals: the numbers the verdict rests on, name -> :class:`~ltvlib.stats.Estimate` (a mapping or
            ``(name, Estimate)`` pairs), e.g. ``{"LTV − FV": paired_bootstrap_difference(ltv, fv)}``.
        n: test queries behind the verdict; default the smallest ``n`` of ``intervals``.
        seeds: training seeds behind the verdict; default the largest ``seeds`` of ``intervals`` (the trained
            method's; a deterministic baseline beside it counts 1).
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
    rule: RuleResult | None = None
    intervals: tuple[tuple[str, Estimate], ...] = ()
    n: int | None = None
    seeds: int | None = None

    def __init__(
        self,
        paper_claim: int,
        key: str,
        statement: str,
        paper: str,
        ours: str,
        checks: Mapping[str, Any] | Sequence[tuple[str, Any]] = (),
        evidence: str = "",
        evidence_title: str = "",
        note: str = "",
        *,
        rule: RuleResult | None = None,
        intervals: Mapping[str, Estimate] | Sequence[tuple[str, Estimate]] = (),
        n: int | None = None,
        seeds: int | None = None,
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
        if rule is not None and not isinstance(rule, RuleResult):
            raise TypeError(f"claim {key!r}: rule must be a RuleResult (direction_rule(...), ...), got {type(rule).__name__}")
        if rule is not None and pairs:
            raise ValueError(f"claim {key!r}: give checks (the old rule) or a rule, not both")
        named = (list(intervals.items()) if isinstance(intervals, Mapping)
                 else [cast("tuple[str, Estimate]", tuple(p)) for p in intervals])
        for name, est in named:
            if not isinstance(est, Estimate):
                raise TypeError(f"claim {key!r}: interval {name!r} must be an ltvlib.stats.Estimate, got {type(est).__name__}")
        if len({str(name) for name, _ in named}) != len(named):
            raise ValueError(f"claim {key!r}: duplicate interval names {[name for name, _ in named]}")
        n = min((e.n for _, e in named), default=None) if n is None else n
        seeds = max((e.seeds for _, e in named), default=None) if seeds is None else seeds
        for name, count in (("n", n), ("seeds", seeds)):
            if count is not None and (isinstance(count, bool) or int(count) != count or count < 1):
                raise ValueError(f"claim {key!r}: {name} must be a positive integer, got {count!r}")
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
        set_(self, "rule", rule)
        set_(self, "intervals", tuple((str(name), est) for name, est in named))
        set_(self, "n", None if n is None else int(n))
        set_(self, "seeds", None if seeds is None else int(seeds))

    @property
    def rule_result(self) -> RuleResult:
        """The rule that gives the verdict: ``rule``, or the checks rule for a claim without one."""
        return self.rule if self.rule is not None else checks_rule(self.checks)

    @property
    def verdict(self) -> Verdict:
        return self.rule.verdict if self.rule is not None else verdict_of(self.checks)

    @property
    def rule_name(self) -> str:
        return self.rule_result.rule

    @property
    def has_interval(self) -> bool:
        return bool(self.intervals)

    def uncertainty_gaps(self) -> list[str]:
        """What the claim's record lacks (n, seeds, a 95 % interval, one of the five levels, a
        rule other than the old checks); empty when complete, and for a claim not testable at this scale.
        A book test can require it of every claim."""
        gaps: list[str] = []
        if self.verdict is Verdict.NOT_TESTABLE:  # nothing was measured, so no number needs an interval
            return gaps
        if self.n is None:
            gaps.append("n")
        if self.seeds is None:
            gaps.append("seeds")
        if not any(abs(est.confidence - 0.95) < 1e-9 for _, est in self.intervals):
            gaps.append("a 95 % interval")
        if self.verdict not in VERDICT_LEVELS:
            gaps.append(f"a verdict among the five levels (has {self.verdict.value!r})")
        if self.rule is None:
            gaps.append("a rule other than the checks")
        return gaps

    def to_dict(self) -> dict[str, Any]:
        return {
            "paper_claim": self.paper_claim,
            "key": self.key,
            "statement": self.statement,
            "paper": self.paper,
            "ours": self.ours,
            "checks": [{"check": n, "passed": ok} for n, ok in self.checks],
            "verdict": self.verdict.value,  # informational: readers re-derive it from the rule
            "rule": self.rule_result.to_dict(),
            "n": self.n,
            "seeds": self.seeds,
            "intervals": [{"name": name, **est.to_dict()} for name, est in self.intervals],
            "evidence": self.evidence,
            "evidence_title": self.evidence_title,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Claim:
        """A claim as saved; files written before intervals (no ``rule``, ``n``, ``intervals``) load as they were.

        Raises:
            ValueError: the saved rule does not give the saved verdict on its saved inputs, or an unknown rule.
        """
        saved_rule = d.get("rule")
        rule = None
        if saved_rule is not None:
            result = RuleResult.from_dict(saved_rule)
            if result.rule != "checks":
                rule = result
            elif result.inputs["checks"] != [[c["check"], c["passed"]] for c in d["checks"]]:
                raise ValueError(f"claim {d['key']!r}: its checks rule's inputs differ from its checks")
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
            rule=rule,
            intervals=[(i["name"], Estimate.from_dict(i)) for i in d.get("intervals", [])],
            n=d.get("n"),
            seeds=d.get("seeds"),
        )


VERDICT_MARKS = {
    Verdict.REPRODUCED: "✓", Verdict.PARTLY: "◐", Verdict.NOT_REPRODUCED: "✗", Verdict.INCONCLUSIVE: "?",
    Verdict.NOT_TESTABLE: "–", Verdict.NOT_MEASURED: "–",
}


def _result_text(r: RuleResult) -> str:
    if r.rule == "checks":
        return r.reason
    if r.rule == "combined":
        parts = [(k, RuleResult.from_dict(v)) for k, v in r.inputs["parts"].items()]
        return "combined: " + "; ".join(f"{VERDICT_MARKS[p.verdict]} {k} ({p.verdict.value}: {_result_text(p)})" for k, p in parts)
    if r.rule == "precondition":
        pre, main = RuleResult.from_dict(r.inputs["precondition"]), RuleResult.from_dict(r.inputs["claim"])
        return (f"precondition, {r.inputs['condition']}: {VERDICT_MARKS[pre.verdict]} {_result_text(pre)}; then "
                f"{VERDICT_MARKS[main.verdict]} {_result_text(main)}")
    return f"{r.rule}: {r.reason}"


def rule_text(claim: Claim) -> str:
    """The rule column: which checks passed (✓/✗) for the checks rule, else the rule's name and reason."""
    return _result_text(claim.rule_result)


def uncertainty_text(claim: Claim) -> str:
    """The numbers with their intervals, ``"LTV − FV +12.0 ± 8.1 pts [+3.9, +20.1] (n=200, seeds=3)"``, or
    ``"no interval recorded"`` for a claim saved before intervals (none is invented for it)."""
    if not claim.intervals:
        if claim.verdict is Verdict.NOT_TESTABLE:
            return "none: not testable at this scale"
        return "no interval recorded" + (f" (n={claim.n})" if claim.n else "")
    return "; ".join(f"{name} {format_estimate(est, bounds=True)}" for name, est in claim.intervals)


@dataclasses.dataclass(frozen=True)
class ClaimSheet:
    """One chapter's claims from one run: what ``results/claims/<chapter>.json`` holds."""

    chapter: str
    model: str
    profile: str
    seed: int
    claims: tuple[Claim, ...]
    #: every LTV the chapter showed (:class:`ltvlib.study.ltv_report.LTVShown` as dicts), with whether it trained
    ltvs: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema": SCHEMA,
                "chapter": self.chapter,
                "model": self.model,
                "profile": self.profile,
                "seed": self.seed,
                "claims": [c.to_dict() for c in self.claims],
                "ltvs": list(self.ltvs),
            },
            indent=1,
            ensure_ascii=False,
        ) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "claims file") -> ClaimSheet:
        try:
            d = json.loads(text)
            if d.get("schema") not in READABLE_SCHEMAS:
                raise ValueError(f"schema {d.get('schema')!r}, expected one of {READABLE_SCHEMAS}")
            return cls(d["chapter"], d["model"], d["profile"], int(d["seed"]),
                       tuple(Claim.from_dict(c) for c in d["claims"]), tuple(d.get("ltvs", ())))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{source}: not a valid claims sheet ({type(exc).__name__}: {exc})") from exc

    def markdown(self) -> str:
        """The chapter's verdicts as a CommonMark list (no links: the chapter is the evidence)."""
        head = (f"**Verdicts recorded for the scorecard** (`{self.model}`, profile `{self.profile}`, seed {self.seed}; "
                "each verdict follows from the rule named beside it):")
        lines = [head, ""]
        for c in self.claims:
            label = "Checks" if c.rule is None else "Rule"
            lines.append(
                f"- **Claim {c.paper_claim}, {c.statement}** Paper: {c.paper}. Ours: {c.ours}. "
                f"Uncertainty: {uncertainty_text(c)}. {label}: {rule_text(c)}. "
                f"**Verdict: {c.verdict.value}** (see {c.evidence_title})."
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
    pkg_parent = Path(__file__).resolve().parents[2]
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
    return claims_root(_find_repo_root(), {"model": model, "profile": profile, "seed": seed})


def _checkout_root() -> Path | None:
    """The repository this package was imported from, if it is a book (holds ``_toc.yml``)."""
    parent = Path(__file__).resolve().parents[2]
    return parent if (parent / "_toc.yml").exists() else None


def record_claims(
    chapter: str,
    claims: Sequence[Claim],
    *,
    model: str,
    profile: str,
    seed: int,
    root: Path | None = None,
    ltvs: Any = None,
) -> ClaimSheet:
    """Save a chapter's claims to ``<root>/results/claims/<chapter>.json`` (atomically) and return them.

    Args:
        chapter: the chapter's file name without extension, e.g. ``"01_ltv_vs_extracted"``.
        claims: the rows; keys must be unique.
        model, profile, seed: the chapter's parameters (the ``model`` parameter as given, not ``lm.name``).
        ltvs: the chapter's :class:`ltvlib.study.ltv_report.LTVLedger` (every LTV it showed and whether it trained),
            saved with the claims for the book test that no untrained vector is shown as a number.
        root: book root; default :func:`book_root`. The repository this package comes from is refused for
            any run but the default setting (its committed claims are the default setting's).

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
    shown = tuple(ltvs.to_list()) if ltvs is not None else ()
    sheet = ClaimSheet(chapter, str(model), str(profile), int(seed), claims, shown)
    target_root = root or book_root(model, profile, seed)
    checkout = _checkout_root()
    params = {"model": sheet.model, "profile": sheet.profile, "seed": sheet.seed}
    if checkout is not None and not is_default(params) and target_root.resolve() == checkout:
        # the committed claims are the default setting's; a smoke or other run there would mix profiles on
        # the scorecard
        raise ValueError(
            f"{chapter}: refusing to record a {sheet.profile!r} run of {sheet.model!r} (seed {sheet.seed}) into the "
            f"repository's {CLAIMS_DIR} at {checkout}: only the default setting writes there; record into "
            f"{claims_root(checkout, params)} (the runner's staging dir) instead"
        )
    out = target_root / CLAIMS_DIR / f"{chapter}.json"
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


def table_cell(text: str) -> str:
    """Text safe inside a MyST pipe-table cell."""
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())


_BADGES = {
    Verdict.REPRODUCED: "✓ **reproduced**",
    Verdict.PARTLY: "◐ *partly*",
    Verdict.NOT_REPRODUCED: "✗ not reproduced",
    Verdict.INCONCLUSIVE: "? inconclusive",
    Verdict.NOT_TESTABLE: "– not testable at this scale",
    Verdict.NOT_MEASURED: "– not measured",
}


def _verdict_badge(v: Verdict) -> str:
    return _BADGES[v]


def scorecard_markdown(sheets: Sequence[ClaimSheet], *, doc_prefix: str = "") -> str:
    """The scorecard as MyST markdown: one table row per recorded claim, grouped by the paper's claims, each
    linking to its evidence (``{ref}``) and chapter (``{doc}``), then the paper's claims no chapter measured.

    The *uncertainty* column gives each number the verdict rests on with its 95 % interval, n and seeds; a claim
    saved before intervals says "no interval recorded". The *rule* column names the verdict's rule and why it
    gave that level.

    ``doc_prefix`` is prepended to chapter names in ``{doc}`` links (the scorecard lives beside the chapters,
    so the default, relative names, resolves).
    """
    rows = [(c.paper_claim, i, s, c) for i, s in enumerate(sheets) for c in s.claims]
    rows.sort(key=lambda r: (r[0], r[1]))
    out = [
        "| # | the paper claims | paper | ours | uncertainty (95 % interval) | model, profile | verdict | rule | evidence |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for number, _, sheet, c in rows:
        chapter_link = f"{{doc}}`ch. {sheet.chapter[:2]} <{doc_prefix}{sheet.chapter}>`"
        out.append("| " + " | ".join([
            str(number),
            table_cell(c.statement),
            table_cell(c.paper),
            table_cell(c.ours) + (f" ({table_cell(c.note)})" if c.note else ""),
            table_cell(uncertainty_text(c)),
            table_cell(f"`{sheet.model}`, {sheet.profile}" + (f", seed {sheet.seed}" if sheet.seed else "")),
            _verdict_badge(c.verdict),
            table_cell(rule_text(c)),
            f"{{ref}}`{table_cell(c.evidence_title)} <{c.evidence}>`, {chapter_link}",
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
    """One line: how many rows got each verdict, how many have no interval, and from which run."""
    counts = verdict_counts(sheets)
    total = sum(counts.values())
    runs = sorted({(s.model, s.profile, s.seed) for s in sheets})
    where = "; ".join(f"`{m}`, profile `{p}`" + (f", seed {sd}" if sd else "") for m, p, sd in runs)
    parts = [f"{n} {v.value}" for v, n in counts.items() if n]
    without = sum(1 for s in sheets for c in s.claims if not c.has_interval)
    return (f"**{total} measured claims** ({', '.join(parts) or 'none'}) from {len(sheets)} chapters"
            + (f" ({where})" if where else "")
            + (f"; {without} of them recorded without an interval" if without else "") + ".")


# --- prose chosen by the verdict --------------------------------------------------------------------------------

#: The marker an interpretation leaves in a chapter's output (an HTML comment: invisible in the page), read back
#: by the book test that checks each chapter's prose against its own recorded verdicts.
INTERPRETATION_MARKER = re.compile(r"<!-- ltv-interpretation claim=(?P<key>[a-z0-9_.-]+) verdict=(?P<verdict>[a-z-]+) -->")


@dataclasses.dataclass(frozen=True)
class Interpretation:
    """The paragraph that interprets one claim's outcome, chosen by its verdict.

    Render it as a cell's last expression (``_repr_markdown_``): the text for the claim's verdict, preceded by a
    hidden marker naming the claim's key and verdict, which ``tests/test_book_quality.py`` compares with the
    chapter's recorded claims.
    """

    claim_key: str
    verdict: Verdict
    text: str

    def markdown(self) -> str:
        return (f"<!-- ltv-interpretation claim={self.claim_key} verdict={verdict_slug(self.verdict.value)} -->\n\n"
                f"{self.text}")

    def _repr_markdown_(self) -> str:
        return self.markdown()


def interpret(claim: Claim, texts: Mapping[Verdict | str, str], **values: Any) -> Interpretation:
    """The interpretation of ``claim``'s outcome: ``texts[claim.verdict]``, formatted with ``values``.

    ``texts`` must give a text for every one of the five verdict levels (:data:`VERDICT_LEVELS`, keyed by
    :class:`Verdict` or its value), so that what a chapter says about an outcome is written for every outcome
    before it is known and picked by the rule, never by hand afterwards. ``{name}`` fields in the chosen text are
    filled from ``values`` (e.g. the measured numbers).

    Raises:
        ValueError: a level without a text, an unknown level, or a field the values do not provide.
    """
    by_level: dict[Verdict, str] = {}
    for level, text in texts.items():
        try:
            v = level if isinstance(level, Verdict) else Verdict(level)
        except ValueError:
            raise ValueError(f"claim {claim.key!r}: unknown verdict level {level!r}; use one of "
                             f"{[v.value for v in VERDICT_LEVELS]}") from None
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"claim {claim.key!r}: the text for {v.value!r} is empty")
        by_level[v] = text
    missing = [v.value for v in VERDICT_LEVELS if v not in by_level]
    if missing:
        raise ValueError(f"claim {claim.key!r}: no interpretation for the verdict level(s) {missing}; write one "
                         "for every level (reproduced, partly, not reproduced, inconclusive, not testable)")
    verdict = claim.verdict
    if verdict not in by_level:
        raise ValueError(f"claim {claim.key!r}: its verdict {verdict.value!r} has no interpretation")
    try:
        text = by_level[verdict].format(**values)
    except (KeyError, IndexError) as exc:
        raise ValueError(f"claim {claim.key!r}: the {verdict.value!r} text needs the value {exc} "
                         f"(given: {sorted(values)})") from None
    return Interpretation(claim.key, verdict, text.strip())


def interpretation_markers(text: str) -> list[tuple[str, str]]:
    """``(claim key, verdict slug)`` of every interpretation marker in ``text`` (a notebook's outputs)."""
    return [(m["key"], m["verdict"]) for m in INTERPRETATION_MARKER.finditer(text)]
