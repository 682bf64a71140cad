"""Tests of ltvlib.book.scorecard: claim records, the verdict rule, saved sheets and the rendered table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from ltvlib.book import runner as book
from ltvlib.book.scorecard import (
    PAPER_CLAIMS,
    VERDICT_LEVELS,
    Claim,
    ClaimSheet,
    RuleResult,
    Verdict,
    book_root,
    budget_rule,
    checks_rule,
    combine_rule,
    direction_rule,
    load_sheets,
    not_testable,
    precondition_rule,
    record_claims,
    scorecard_markdown,
    summary_markdown,
    threshold_rule,
    uncertainty_text,
    verdict_counts,
    verdict_of,
)
from ltvlib.book.verdict_grid import verdict_grid_markdown
from ltvlib.stats import Estimate, paired_bootstrap_difference, seed_interval

REPO = Path(__file__).resolve().parents[1]


def claim(**kw: object) -> Claim:
    base = {
        "paper_claim": 1,
        "key": "middle-layer",
        "statement": "The LTV beats extracted vectors.",
        "paper": "LTV 83.49 %",
        "ours": "LTV 40.0 %",
        "checks": {"LTV above both": True, "on most tasks": False},
        "evidence": "ch01-table-middle",
        "evidence_title": "the middle-layer table",
    }
    base.update(kw)
    return Claim(**base)  # type: ignore[arg-type]


def write_toc(root: Path, chapters: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    toc = {"format": "jb-book", "root": "intro", "chapters": [{"file": f"chapters/{c}"} for c in chapters]}
    (root / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    return root


def test_verdict_rule() -> None:
    assert verdict_of({"a": True, "b": True}) is Verdict.REPRODUCED
    assert verdict_of({"a": True, "b": False}) is Verdict.PARTLY
    assert verdict_of([("a", False), ("b", False)]) is Verdict.NOT_REPRODUCED
    assert verdict_of({}) is Verdict.NOT_MEASURED
    assert claim().verdict is Verdict.PARTLY
    assert claim(checks={}).verdict is Verdict.NOT_MEASURED


def test_claim_validation() -> None:
    with pytest.raises(ValueError, match="paper_claim 9"):
        claim(paper_claim=9)
    with pytest.raises(ValueError, match="not a MyST label"):
        claim(evidence="Ch01-Fig")
    with pytest.raises(ValueError, match="key"):
        claim(key="Middle Layer")
    with pytest.raises(ValueError, match="ours must be a non-empty string"):
        claim(ours=" ")
    # a NaN or None is not a check result: comparisons must be explicit
    with pytest.raises(TypeError, match="'nan check'"):
        claim(checks={"nan check": float("nan")})
    with pytest.raises(TypeError, match="bool"):
        claim(checks={"none": None})
    with pytest.raises(ValueError, match="duplicate check"):
        claim(checks=[("a", True), ("a", False)])
    # numpy comparisons give numpy.bool_, which chapters use everywhere
    c = claim(checks={"numpy": np.float64(3.0) > 2})
    assert c.checks == (("numpy", True),) and type(c.checks[0][1]) is bool
    assert c.verdict is Verdict.REPRODUCED


def test_record_and_load_round_trip(tmp_path: Path) -> None:
    root = write_toc(tmp_path, ["00_a", "scorecard", "01_b"])
    c1 = claim()
    c2 = claim(paper_claim=3, key="ov", checks={"x": False})
    sheet = record_claims("01_b", [c1, c2], model="org/m", profile="smoke", seed=0, root=root)
    record_claims("00_a", [claim(key="icl")], model="org/m", profile="smoke", seed=0, root=root)
    path = root / "results" / "claims" / "01_b.json"
    data = json.loads(path.read_text())
    assert data["chapter"] == "01_b" and data["model"] == "org/m" and data["profile"] == "smoke"
    assert [c["verdict"] for c in data["claims"]] == ["partly", "not reproduced"]
    assert not list(path.parent.glob("*.tmp"))  # written atomically, no leftovers
    # a chapter that is not in the toc any more leaves a stale file: ignored
    (root / "results" / "claims" / "07_gone.json").write_text(sheet.to_json().replace('"01_b"', '"07_gone"'))
    sheets = load_sheets(root)
    assert [s.chapter for s in sheets] == ["00_a", "01_b"]  # toc order
    assert sheets[1] == sheet
    assert verdict_counts(sheets) == {
        Verdict.REPRODUCED: 0, Verdict.PARTLY: 2, Verdict.NOT_REPRODUCED: 1, Verdict.INCONCLUSIVE: 0,
        Verdict.NOT_TESTABLE: 0, Verdict.NOT_MEASURED: 0,
    }
    assert "3 measured claims" in summary_markdown(sheets)


def test_record_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duplicate claim keys"):
        record_claims("01_b", [claim(), claim()], model="m", profile="cpu", seed=0, root=tmp_path)
    with pytest.raises(ValueError, match="without extension"):
        record_claims("01_b.py", [claim()], model="m", profile="cpu", seed=0, root=tmp_path)
    with pytest.raises(TypeError, match="Claim records"):
        record_claims("01_b", [{"key": "x"}], model="m", profile="cpu", seed=0, root=tmp_path)  # type: ignore[list-item]
    assert not (tmp_path / "results").exists()


def test_load_rejects_a_corrupt_or_misnamed_sheet(tmp_path: Path) -> None:
    root = write_toc(tmp_path, ["01_b"])
    out = root / "results" / "claims"
    out.mkdir(parents=True)
    (out / "01_b.json").write_text("{not json")
    with pytest.raises(ValueError, match="01_b.json: not a valid claims sheet"):
        load_sheets(root)
    sheet = ClaimSheet("00_a", "m", "cpu", 0, (claim(),))
    (out / "01_b.json").write_text(sheet.to_json())
    with pytest.raises(ValueError, match="expected '01_b'"):
        load_sheets(root)


def test_book_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(book.BOOK_ROOT_ENV, str(tmp_path / "elsewhere"))
    assert book_root("smollm2-135m", "cpu", 0) == tmp_path / "elsewhere"
    monkeypatch.delenv(book.BOOK_ROOT_ENV)
    repo = write_toc(tmp_path / "repo", ["00_a"])
    (repo / "chapters").mkdir()
    monkeypatch.chdir(repo / "chapters")  # where a kernel runs
    assert book_root("smollm2-135m", "cpu", 0) == repo.resolve()
    assert book_root("org/m", "paper", 0) == repo.resolve() / "_build" / "runs" / "paper__org_m"


def test_scorecard_markdown() -> None:
    s1 = ClaimSheet("01_b", "smollm2-135m", "cpu", 0, (
        claim(ours="|θ| ratio 2.0"),  # a pipe must not break the table
        claim(paper_claim=3, key="ov", checks={"x": True}, evidence="ch01-fig-ov", evidence_title="Figure 1.2"),
    ))
    s0 = ClaimSheet("00_a", "smollm2-135m", "cpu", 0, (claim(key="icl", checks={}),))
    md = scorecard_markdown([s0, s1])
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 3
    assert all(line.count(" | ") == 8 for line in table[2:])  # 9 cells: escaped pipes do not split
    assert all("no interval recorded" in line for line in table[2:])  # claims with checks only
    assert "\\|θ\\| ratio" in md
    # rows grouped by the paper's claim, then in chapter order; links to the evidence and the chapter
    assert table[2].startswith("| 1 |") and "{doc}`ch. 00 <00_a>`" in table[2] and "not measured" in table[2]
    assert "{ref}`the middle-layer table <ch01-table-middle>`" in table[3]
    assert table[4].startswith("| 3 |") and "{ref}`Figure 1.2 <ch01-fig-ov>`" in table[4]
    assert "**reproduced**" in table[4] and "✓ x" in table[4]
    # claims no chapter measured are listed, not silently dropped
    for n in set(PAPER_CLAIMS) - {1, 3}:
        assert f"**Claim {n}.**" in md
    assert "No chapter has recorded" in scorecard_markdown([])


def test_sheet_renders_in_the_chapter() -> None:
    md = ClaimSheet("01_b", "m", "cpu", 0, (claim(),))._repr_markdown_()
    assert "**Verdict: partly**" in md and "✓ LTV above both" in md and "✗ on most tasks" in md


def test_scorecard_runs_last_and_links_resolve(tmp_path: Path) -> None:
    """A two-page book, the scorecard listed first: the runner executes it after the chapter, its table has the
    chapter's row, and the strict (-W) HTML build resolves its links to the chapter's figure."""
    root = tmp_path / "book"
    (root / "chapters").mkdir(parents=True)
    toc = {"format": "jb-book", "root": "intro",
           "chapters": [{"file": "chapters/scorecard"}, {"file": "chapters/00_overview"}]}
    (root / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    shutil.copy(REPO / "_config.yml", root / "_config.yml")
    (root / "intro.md").write_text("# Intro\n\n```{tableofcontents}\n```\n")
    shutil.copy(REPO / "chapters" / "scorecard.py", root / "chapters" / "scorecard.py")
    # named like the real overview: the scorecard's text links to it
    (root / "chapters" / "00_overview.py").write_text(
        '# %% [markdown]\n# # Overview\n#\n# (ch00-fig-x)=\n\n'
        '# %% tags=["parameters"]\nmodel = "smollm2-135m"\nprofile = "cpu"\nseed = 0\ndevice = "auto"\n\n'
        "# %%\nfrom ltvlib.book.scorecard import Claim, record_claims\n"
        'record_claims("00_overview", [Claim(paper_claim=2, key="k", statement="s.", paper="p", ours="o", '
        'checks={"c": 1 > 0}, evidence="ch00-fig-x", evidence_title="Figure 0.1")], '
        "model=model, profile=profile, seed=seed)\n"
    )
    params = {"model": "smollm2-135m", "profile": "cpu", "seed": 0, "device": "auto"}
    book.build(root, params, html=True)  # default setting: in place, strict HTML build

    sheet = json.loads((root / "results" / "claims" / "00_overview.json").read_text())
    assert sheet["claims"][0]["verdict"] == "reproduced"
    nb = json.loads((root / "chapters" / "scorecard.ipynb").read_text())
    outputs = json.dumps(nb["cells"])
    assert "{ref}`Figure 0.1 <ch00-fig-x>`" in outputs  # it ran after the chapter, whose sheet it read
    html = (root / "_build" / "html" / "chapters" / "scorecard.html").read_text()
    assert 'href="00_overview.html#ch00-fig-x"' in html
    assert "reproduced" in html
    # the scorecard's stamp covers the sheets it read: a changed sheet makes it stale
    stamp = book.read_stamp(root / "chapters" / "scorecard.ipynb")
    assert stamp is not None and stamp["inputs_sha"] == book.claims_digest(root)


# ------------------------------------------------------------------------- five verdict levels as rules


@pytest.mark.parametrize(
    ("interval", "direction", "margin", "expected"),
    [
        ((0.05, 0.20), 1, 0.0, Verdict.REPRODUCED),
        ((-0.20, -0.05), 1, 0.0, Verdict.NOT_REPRODUCED),
        ((0.0, 0.0), 1, 0.0, Verdict.NOT_REPRODUCED),  # "A beats B" with A = B on every query: excluded
        ((-0.05, 0.10), 1, 0.0, Verdict.INCONCLUSIVE),
        ((0.0, 0.10), 1, 0.0, Verdict.INCONCLUSIVE),  # admits no difference
        ((-0.10, 0.0), 1, 0.0, Verdict.INCONCLUSIVE),  # the mirror: admits no difference too
        ((0.0, 0.10), -1, 0.0, Verdict.INCONCLUSIVE),
        ((0.0, 0.0), -1, 0.0, Verdict.NOT_REPRODUCED),
        ((-0.20, -0.05), -1, 0.0, Verdict.REPRODUCED),  # the paper finds A below B
        ((0.05, 0.20), -1, 0.0, Verdict.NOT_REPRODUCED),
        ((0.05, 0.20), 1, 0.10, Verdict.INCONCLUSIVE),  # above 0 but not surely above the margin
        ((0.12, 0.20), 1, 0.10, Verdict.REPRODUCED),
    ],
)
def test_direction_rule(interval, direction, margin, expected) -> None:
    diff = sum(interval) / 2
    r = direction_rule(diff, interval, paper_direction=direction, margin=margin)
    assert r.verdict is expected and r.rule == "direction"
    assert r.inputs == {"diff": diff, "interval": list(interval), "paper_direction": direction, "margin": margin}
    assert RuleResult.from_dict(r.to_dict()) == r


@pytest.mark.parametrize("margin", [0.0, 0.05])
@pytest.mark.parametrize("width", [0.1, 0.2273, 0.02])
def test_direction_rule_is_symmetric_at_its_bound(margin, width) -> None:
    """A bound exactly at the margin counts the same on both sides: mirroring the interval (or the paper's
    direction) mirrors the verdict, and touching the margin from either side is inconclusive."""
    up = direction_rule(margin + width / 2, (margin, margin + width), margin=margin)
    down = direction_rule(margin - width / 2, (margin - width, margin), margin=margin)
    assert up.verdict is down.verdict is Verdict.INCONCLUSIVE
    for lo, hi in ((margin, margin + width), (margin - width, margin), (margin + 0.01, margin + width),
                   (margin - width, margin - 0.01)):
        a = direction_rule((lo + hi) / 2, (lo, hi), 1, margin=margin)
        b = direction_rule(-(lo + hi) / 2, (-hi, -lo), -1, margin=margin)
        assert a.verdict is b.verdict, (lo, hi)


def test_a_direction_verdict_saved_before_the_symmetric_bound_still_loads() -> None:
    old = {"rule": "direction", "verdict": "not reproduced", "reason": "old",
           "inputs": {"diff": -0.1, "interval": [-0.2, 0.0], "paper_direction": 1, "margin": 0.0}}
    assert RuleResult.from_dict(old).verdict is Verdict.NOT_REPRODUCED
    assert combine_rule({"a": old, "b": direction_rule(0.0, (0.0, 0.2))}).verdict is Verdict.NOT_REPRODUCED
    # only that case: any other disagreement is still an error
    with pytest.raises(ValueError, match="gives 'inconclusive' on the saved inputs"):
        RuleResult.from_dict({**old, "inputs": {**old["inputs"], "interval": [-0.2, 0.1], "diff": 0.0}})
    with pytest.raises(ValueError, match="gives 'inconclusive' on the saved inputs"):
        RuleResult.from_dict({**old, "verdict": "reproduced"})


def test_precondition_rule_gives_not_testable_without_headroom() -> None:
    headroom, none_ = direction_rule(0.2, (0.1, 0.3)), direction_rule(-0.05, (-0.1, 0.0))
    main = direction_rule(-0.1, (-0.2, -0.05))
    r = precondition_rule("the composed task's LTV beats ICL", headroom, main)
    assert r.verdict is Verdict.NOT_REPRODUCED and r.rule == "precondition"
    r = precondition_rule("the composed task's LTV beats ICL", none_, main)
    assert r.verdict is Verdict.NOT_TESTABLE and "does not hold (inconclusive" in r.reason
    assert r.inputs["precondition"]["inputs"]["interval"] == [-0.1, 0.0]  # the measurement behind it is kept
    assert RuleResult.from_dict(r.to_dict()) == r
    assert combine_rule({"a": r}).verdict is Verdict.NOT_TESTABLE
    with pytest.raises(ValueError, match="name the condition"):
        precondition_rule(" ", headroom, main)
    est = Estimate(-0.05, -0.1, 0.0, n=300, seeds=3, method="paired bootstrap", resamples=2000, difference=True)
    c = claim(key="comp", checks={}, rule=r, intervals={"composed LTV − best ICL": est})
    sheet = ClaimSheet("06_c", "m", "cpu", 0, (c,))
    assert "– not testable at this scale" in scorecard_markdown([sheet])
    assert "precondition, the composed task's LTV beats ICL: ? direction" in scorecard_markdown([sheet])
    assert "{verdict}`not testable at this scale`" in verdict_grid_markdown([sheet])
    assert "– not testable at this scale" in verdict_grid_markdown([sheet], style="github")


@pytest.mark.parametrize(
    ("interval", "at_least", "expected"),
    [
        ((0.82, 0.95), True, Verdict.REPRODUCED),
        ((0.80, 0.95), True, Verdict.REPRODUCED),  # at least 80 %: the bound itself clears it
        ((0.50, 0.79), True, Verdict.NOT_REPRODUCED),
        ((0.70, 0.90), True, Verdict.INCONCLUSIVE),
        ((0.50, 0.79), False, Verdict.REPRODUCED),
        ((0.82, 0.95), False, Verdict.NOT_REPRODUCED),
        ((0.70, 0.90), False, Verdict.INCONCLUSIVE),
    ],
)
def test_threshold_rule(interval, at_least, expected) -> None:
    r = threshold_rule(sum(interval) / 2, interval, 0.80, at_least=at_least)
    assert r.verdict is expected and r.rule == "threshold"
    assert RuleResult.from_dict(r.to_dict()) == r


def test_rules_reject_inconsistent_inputs() -> None:
    with pytest.raises(ValueError, match="outside its interval"):
        direction_rule(0.5, (0.0, 0.1))
    with pytest.raises(ValueError, match=r"paper_direction must be \+1 or -1"):
        direction_rule(0.05, (0.0, 0.1), paper_direction=2)
    with pytest.raises(ValueError, match="finite"):
        threshold_rule(float("nan"), (0.0, 0.1), 0.5)
    with pytest.raises(ValueError, match="give the reason"):
        not_testable("  ")
    with pytest.raises(ValueError, match="at least one sub-claim"):
        combine_rule({})
    with pytest.raises(ValueError, match=r"\['b'\] measured nothing; say why with not_testable"):
        combine_rule({"a": direction_rule(0.1, (0.05, 0.2)), "b": checks_rule({})})


R, N, I_ = (direction_rule(0.1, (0.05, 0.2)), direction_rule(-0.1, (-0.2, -0.05)), direction_rule(0.0, (-0.1, 0.1)))
T = not_testable("the 135M model answers no task of this kind above chance")


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ([R, R], Verdict.REPRODUCED),
        ([N, N], Verdict.NOT_REPRODUCED),
        ([I_, I_], Verdict.INCONCLUSIVE),
        ([R, N], Verdict.PARTLY),
        ([R, I_], Verdict.PARTLY),
        ([N, I_], Verdict.NOT_REPRODUCED),  # part contradicted, nothing supported
        ([R, T], Verdict.REPRODUCED),  # what cannot be tested here is set aside
        ([T, T], Verdict.NOT_TESTABLE),
        ([combine_rule({"a": R, "b": N}), R], Verdict.PARTLY),  # nested
    ],
)
def test_combine_rule(parts, expected) -> None:
    r = combine_rule({f"part {i}": p for i, p in enumerate(parts)})
    assert r.verdict is expected and r.rule == "combined"
    assert RuleResult.from_dict(r.to_dict()) == r  # re-derived from the saved sub-results


def test_a_part_not_measured_at_this_budget_is_inconclusive() -> None:
    b = budget_rule(["rte"], "over the cpu book's 150-minute budget; the paper profile runs it")
    assert b.verdict is Verdict.INCONCLUSIVE and b.rule == "budget" and "rte" in b.reason
    assert RuleResult.from_dict(b.to_dict()) == b
    # measured parts that all hold, beside an unmeasured one: partly, never reproduced
    assert combine_rule({"a": R, "b": R, "c": b}).verdict is Verdict.PARTLY
    assert combine_rule({"a": I_, "c": b}).verdict is Verdict.INCONCLUSIVE
    assert combine_rule({"a": N, "c": b}).verdict is Verdict.NOT_REPRODUCED
    with pytest.raises(ValueError, match="name what was not measured"):
        budget_rule([], "why")
    with pytest.raises(ValueError, match="reason"):
        budget_rule(["rte"], " ")


def test_synthetic_results_reach_every_level() -> None:
    """From per-query correctness through the paired bootstrap to each of the five verdict levels."""
    rng = np.random.default_rng(0)
    ltv = rng.random((3, 200)) < 0.8
    vtv = rng.random((3, 200)) < 0.2
    fv = rng.random((3, 200)) < 0.8  # as good as the LTV: the data cannot say which is better
    worse = rng.random((3, 200)) < 0.95  # clearly better than the LTV, against the paper's direction
    beats_vtv, beats_fv, beats_worse = (paired_bootstrap_difference(ltv, x) for x in (vtv, fv, worse))
    assert direction_rule(beats_vtv.value, beats_vtv.interval).verdict is Verdict.REPRODUCED
    assert direction_rule(beats_fv.value, beats_fv.interval).verdict is Verdict.INCONCLUSIVE
    assert direction_rule(beats_worse.value, beats_worse.interval).verdict is Verdict.NOT_REPRODUCED
    both = combine_rule({"LTV > VTV": direction_rule(beats_vtv.value, beats_vtv.interval),
                         "LTV > FV": direction_rule(beats_worse.value, beats_worse.interval)})
    assert both.verdict is Verdict.PARTLY
    assert not_testable("needs the 8B model's 7-task ICL baseline").verdict is Verdict.NOT_TESTABLE
    assert {Verdict.REPRODUCED, Verdict.INCONCLUSIVE, Verdict.NOT_REPRODUCED, Verdict.PARTLY,
            Verdict.NOT_TESTABLE} == set(VERDICT_LEVELS)


def rule_claim(**kw: object) -> Claim:
    rng = np.random.default_rng(1)
    gap = paired_bootstrap_difference(rng.random((3, 200)) < 0.8, rng.random((3, 200)) < 0.3)
    acc = seed_interval(rng.random((3, 200)) < 0.8)
    base = {"checks": {}, "rule": direction_rule(gap.value, gap.interval), "intervals": {"LTV − FV": gap, "LTV": acc}}
    base.update(kw)
    return claim(**base)


def test_a_claim_records_its_rule_inputs_n_seeds_and_intervals(tmp_path: Path) -> None:
    c = rule_claim()
    assert c.verdict is Verdict.REPRODUCED and c.rule_name == "direction"
    assert (c.n, c.seeds) == (200, 3) and c.has_interval
    root = write_toc(tmp_path, ["01_b"])
    record_claims("01_b", [c, claim(key="old")], model="m", profile="smoke", seed=0, root=root)
    data = json.loads((root / "results" / "claims" / "01_b.json").read_text())
    assert data["schema"] == 2
    saved = data["claims"][0]
    assert saved["verdict"] == "reproduced" and saved["n"] == 200 and saved["seeds"] == 3
    assert saved["rule"]["rule"] == "direction" and saved["rule"]["inputs"]["paper_direction"] == 1
    assert [i["name"] for i in saved["intervals"]] == ["LTV − FV", "LTV"]
    assert saved["intervals"][0]["method"] == "paired bootstrap" and saved["intervals"][0]["difference"] is True
    # a checks-only claim names its rule too
    assert data["claims"][1]["rule"]["rule"] == "checks" and data["claims"][1]["intervals"] == []
    assert load_sheets(root)[0].claims == (c, claim(key="old"))
    assert c.uncertainty_gaps() == []
    assert claim(key="old").uncertainty_gaps() == ["n", "seeds", "a 95 % interval", "a rule other than the checks"]
    assert claim(checks={}).uncertainty_gaps()[-2:] == [
        "a verdict among the five levels (has 'not measured')", "a rule other than the checks"]


def test_a_saved_verdict_must_follow_from_its_rule(tmp_path: Path) -> None:
    root = write_toc(tmp_path, ["01_b"])
    path = root / "results" / "claims" / "01_b.json"
    record_claims("01_b", [rule_claim()], model="m", profile="smoke", seed=0, root=root)
    data = json.loads(path.read_text())
    data["claims"][0]["rule"]["inputs"]["interval"] = [-0.1, 0.9]  # edited by hand: now inconclusive
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="rule 'direction' gives 'inconclusive' on the saved inputs"):
        load_sheets(root)
    data["claims"][0]["rule"] = {"rule": "checks", "verdict": "reproduced", "inputs": {"checks": [["x", True]]}}
    with pytest.raises(ValueError, match="its checks rule's inputs differ from its checks"):
        ClaimSheet.from_json(json.dumps(data))
    data["claims"][0]["rule"]["rule"] = "eyeballed"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="unknown rule 'eyeballed'"):
        load_sheets(root)


def test_claim_rule_validation() -> None:
    with pytest.raises(ValueError, match="checks .* or a rule, not both"):
        rule_claim(checks={"a": True})
    with pytest.raises(TypeError, match="RuleResult"):
        claim(checks={}, rule="reproduced")
    with pytest.raises(TypeError, match="Estimate"):
        claim(intervals={"LTV": (0.4, 0.5)})
    with pytest.raises(ValueError, match="n must be a positive integer"):
        claim(n=0)
    assert rule_claim(n=64, seeds=1).n == 64  # explicit counts win over the intervals'


def test_scorecard_renders_every_level_and_the_uncertainty() -> None:
    rules = [direction_rule(0.1, (0.05, 0.2)), direction_rule(-0.1, (-0.2, -0.05)),
             direction_rule(0.0, (-0.1, 0.1)), combine_rule({"a": R, "b": N}), T]
    est = Estimate(0.1, 0.05, 0.2, n=200, seeds=3, method="paired bootstrap", resamples=2000, difference=True)
    claims = [claim(key=f"k{i}", checks={}, rule=r, intervals={"LTV − FV": est}) for i, r in enumerate(rules)]
    claims.append(claim(key="legacy", checks={}))  # nothing measured, old rule
    md = scorecard_markdown([ClaimSheet("01_b", "m", "cpu", 0, tuple(claims))])
    table = [line for line in md.splitlines() if line.startswith("| 1 |")]
    assert len(table) == 6 and all(line.count(" | ") == 8 for line in table)
    badges = ["✓ **reproduced**", "✗ not reproduced", "? inconclusive", "◐ *partly*",
              "– not testable at this scale", "– not measured"]
    for line, badge in zip(table, badges, strict=True):
        assert f"| {badge} |" in line
    assert "LTV − FV +10.0 ± 10.0 pts [+5.0, +20.0] (n=200, seeds=3)" in table[0]
    assert "direction: the interval [+0.05, +0.2] lies above +0, the paper's side" in table[0]
    assert "combined: ✓ a (reproduced: direction:" in table[3] and "✗ b (not reproduced" in table[3]
    assert "not testable: the 135M model answers no task" in table[4]
    assert claims[4].uncertainty_gaps() == []
    assert "none: not testable at this scale" in uncertainty_text(claim(key="nt", checks={}, rule=T))
    assert "no interval recorded" in table[5]
    sheet_md = ClaimSheet("01_b", "m", "cpu", 0, tuple(claims)).markdown()
    assert "**Verdict: inconclusive**" in sheet_md and "Rule: direction:" in sheet_md
    summary = summary_markdown([ClaimSheet("01_b", "m", "cpu", 0, tuple(claims))])
    assert "1 inconclusive" in summary and "1 not testable at this scale" in summary
    assert "1 of them recorded without an interval" in summary


@pytest.mark.parametrize("path", sorted((REPO / "results" / "claims").glob("*.json")), ids=lambda p: p.stem)
def test_committed_claims_without_intervals_still_load_and_render(path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    sheet = ClaimSheet.from_json(path.read_text(encoding="utf-8"), source=str(path))
    # the verdict each file recorded is still the one the library derives
    assert [c.verdict.value for c in sheet.claims] == [c["verdict"] for c in raw["claims"]]
    old = [c for c in sheet.claims if "intervals" not in next(r for r in raw["claims"] if r["key"] == c.key)]
    for c in old:  # saved before intervals: none is invented for them
        assert not c.has_interval and c.rule is None and c.rule_name == "checks"
    md = scorecard_markdown([sheet])
    assert md.count("no interval recorded") >= len(old)
    assert ClaimSheet.from_json(sheet.to_json()) == sheet  # rewriting in the new schema loses nothing


def test_a_non_default_run_cannot_record_into_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    claims_dir = REPO / "results" / "claims"
    before = {p.name: p.read_bytes() for p in claims_dir.glob("*.json")}
    with pytest.raises(ValueError, match="refusing to record a 'smoke' run"):
        record_claims("00_overview", [claim()], model="smollm2-135m", profile="smoke", seed=0, root=REPO)
    # the way the leak happened: a kernel told that the repository is its book root
    monkeypatch.setenv(book.BOOK_ROOT_ENV, str(REPO))
    with pytest.raises(ValueError, match=r"only the default setting writes there.*_build/runs/cpu__smollm2-135m__seed1"):
        record_claims("00_overview", [claim()], model="smollm2-135m", profile="cpu", seed=1)
    assert {p.name: p.read_bytes() for p in claims_dir.glob("*.json")} == before


def _claim_with(rule):
    from ltvlib.book.scorecard import Claim
    return Claim(paper_claim=1, key="mid", statement="s.", paper="p", ours="o", rule=rule,
                 evidence="ch01-x", evidence_title="Table 1.1")


def test_interpret_picks_the_text_of_the_recorded_verdict_and_marks_it() -> None:
    from ltvlib.book.scorecard import direction_rule, interpret, interpretation_markers
    texts = {"reproduced": "It holds: {gap}.", "partly": "Partly.", "not reproduced": "It fails: {gap}.",
             "inconclusive": "Cannot tell.", "not testable at this scale": "Untestable."}
    up = interpret(_claim_with(direction_rule(0.2, (0.1, 0.3))), texts, gap="+20")
    down = interpret(_claim_with(direction_rule(-0.2, (-0.3, -0.1))), texts, gap="-20")
    mid = interpret(_claim_with(direction_rule(0.0, (-0.1, 0.1))), texts, gap="0")
    assert up.text == "It holds: +20." and down.text == "It fails: -20." and mid.text == "Cannot tell."
    assert interpretation_markers(up.markdown() + down.markdown()) == [("mid", "reproduced"), ("mid", "not-reproduced")]


def test_interpret_refuses_missing_levels_and_missing_values() -> None:
    import pytest

    from ltvlib.book.scorecard import direction_rule, interpret
    claim = _claim_with(direction_rule(0.2, (0.1, 0.3)))
    with pytest.raises(ValueError, match="no interpretation for the verdict level"):
        interpret(claim, {"reproduced": "ok"})
    full = {"reproduced": "{x}", "partly": "p", "not reproduced": "n", "inconclusive": "i",
            "not testable at this scale": "t"}
    with pytest.raises(ValueError, match="needs the value"):
        interpret(claim, full)
    with pytest.raises(ValueError, match="unknown verdict level"):
        interpret(claim, {**full, "maybe": "m"})
