"""Tests of ltvlib.scorecard: claim records, the verdict rule, saved sheets and the rendered table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from ltvlib import book
from ltvlib.scorecard import (
    PAPER_CLAIMS,
    Claim,
    ClaimSheet,
    Verdict,
    book_root,
    load_sheets,
    record_claims,
    scorecard_markdown,
    summary_markdown,
    verdict_counts,
    verdict_of,
)

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
        Verdict.REPRODUCED: 0, Verdict.PARTLY: 2, Verdict.NOT_REPRODUCED: 1, Verdict.NOT_MEASURED: 0
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
    assert all(line.count(" | ") == 7 for line in table[2:])  # 8 cells: escaped pipes do not split
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
        "# %%\nfrom ltvlib.scorecard import Claim, record_claims\n"
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
