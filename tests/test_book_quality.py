"""Book quality rules, checked on every chapter in the table of contents (no model, no browser needed).

- every figure has a caption (the next cell, "**Figure N.M.** ...", N the chapter's number), a title and
  labels on both axes;
- every chapter states the claim ("**The claim**"), the measurement (a "## What we measured" section) and
  the verdict (a "## Verdict..." section whose last code cell records the chapter's claims for the scorecard),
  and every piece of evidence a claim links to is a MyST target in that chapter;
- the scorecard comes right after the overview and runs last;
- the HTML build turns warnings into errors.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import jupytext
import pytest

from ltvlib import book

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [c for c in book.read_chapters(ROOT) if not book.runs_last(c)]
IDS = [c.name for c in CHAPTERS]

# a code cell draws a figure when it calls one of these
FIGURE_CALL = re.compile(r"plt\.(subplots|figure|show)\(")
XLABEL = re.compile(r"(set_xlabel|xlabel|supxlabel)\(")
YLABEL = re.compile(r"(set_ylabel|ylabel|supylabel)\(")
TITLE = re.compile(r"(set_title|suptitle|\.title)\(")
TARGET = re.compile(r"^\(([a-z0-9][a-z0-9_-]*)\)=\s*$", re.MULTILINE)
EVIDENCE = re.compile(r"evidence=\"([^\"]+)\"")
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")


def cells(chapter: book.Chapter) -> list[dict]:
    return jupytext.read(chapter.py, fmt="py:percent").cells


def test_the_book_has_chapters() -> None:
    # Chapters join the toc once executed in `cpu`; the overview always comes first and every entry has a source.
    assert CHAPTERS and CHAPTERS[0].name == "00_overview", [c.name for c in CHAPTERS]
    assert all(c.py.exists() for c in CHAPTERS), [c.name for c in CHAPTERS if not c.py.exists()]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_figures_have_captions_titles_and_axis_labels(chapter: book.Chapter) -> None:
    cs = cells(chapter)
    number = int(chapter.name[:2])
    problems = []
    n_figures = 0
    for i, cell in enumerate(cs):
        if cell.cell_type != "code" or not FIGURE_CALL.search(cell.source):
            continue
        n_figures += 1
        head = cell.source.strip().splitlines()[0][:60]
        for what, pattern in (("x-axis label", XLABEL), ("y-axis label", YLABEL), ("title", TITLE)):
            if not pattern.search(cell.source):
                problems.append(f"cell {i} ({head!r}): no {what}")
        nxt = cs[i + 1] if i + 1 < len(cs) else None
        if nxt is None or nxt.cell_type != "markdown" or not re.match(rf"\*\*Figure {number}\.\d+\.\*\*", nxt.source):
            problems.append(f"cell {i} ({head!r}): the next cell is not a caption '**Figure {number}.N.** ...'")
    assert not problems, "\n".join(problems)
    captions = [c.source for c in cs if c.cell_type == "markdown" and c.source.startswith("**Figure")]
    assert len(captions) == n_figures, f"{len(captions)} captions for {n_figures} figures"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_executed_figures_come_from_checked_cells(chapter: book.Chapter) -> None:
    """Every image in the committed notebook comes from a cell the source check above covers (a figure drawn
    some other way, e.g. by a library call, would escape it)."""
    if not chapter.ipynb.exists():
        pytest.skip(f"{chapter.ipynb.name} not committed yet")
    nb = json.loads(chapter.ipynb.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        images = [o for o in cell.get("outputs", []) if any(m in o.get("data", {}) for m in IMAGE_MIMES)]
        if images:
            source = "".join(cell["source"])
            assert FIGURE_CALL.search(source), f"image from a cell the figure check does not see:\n{source[:200]}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_chapter_states_claim_measurement_and_verdict(chapter: book.Chapter) -> None:
    cs = cells(chapter)
    markdown = "\n".join(c.source for c in cs if c.cell_type == "markdown")
    assert "**The claim**" in markdown, "state the paper's claim: '**The claim** ...'"
    assert re.search(r"^## What we measured", markdown, re.MULTILINE), "a '## What we measured ...' section"
    assert re.search(r"^## Verdict", markdown, re.MULTILINE), "a '## Verdict ...' section before the last cell"
    last_code = [c for c in cs if c.cell_type == "code"][-1].source
    assert re.search(rf"record_claims\(\s*\"{chapter.name}\"", last_code), (
        f"the last code cell must record the chapter's claims: record_claims(\"{chapter.name}\", [...])"
    )
    targets = set(TARGET.findall(markdown))
    evidence = EVIDENCE.findall("\n".join(c.source for c in cs if c.cell_type == "code"))
    assert evidence, "each Claim names its evidence as a literal: evidence=\"chNN-...\""
    missing = sorted(set(evidence) - targets)
    assert not missing, f"evidence labels with no (label)= target in the chapter: {missing}"
    assert all(t.startswith(f"ch{chapter.name[:2]}-") for t in targets), f"prefix targets with ch{chapter.name[:2]}-"


def test_scorecard_after_the_overview_and_run_last() -> None:
    pages = book.toc_pages(ROOT)
    assert pages[1:3] == ["chapters/00_overview", "chapters/scorecard"]
    chapters = book.read_chapters(ROOT)
    order = book.execution_order(chapters, chapters)
    assert order[-1].name == "scorecard" and [c.name for c in order].count("scorecard") == 1


def test_strict_html_build_turns_warnings_into_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = []

    def fake_run(cmd: list[str], check: bool) -> subprocess.CompletedProcess:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(book.subprocess, "run", fake_run)
    html = book.build_html(tmp_path, output_dir=tmp_path / "out")
    assert html == tmp_path / "out" / "_build" / "html"
    assert "-W" in calls[0] and "--keep-going" in calls[0]
    assert calls[0][calls[0].index("--path-output") + 1] == str(tmp_path / "out")
    book.build_html(tmp_path, strict=False)
    assert "-W" not in calls[1]


# ---------------------------------------------------------------------------------------------- tidy outputs

def _messy_notebook(root: Path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata[book.STAMP_KEY] = {"source_sha": "abc", "params": {"model": "m"}, "code_version": "v"}
    out = nbformat.v4.new_output
    nb.cells = [
        nbformat.v4.new_code_cell('model = "m"', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell('# Parameters\nmodel = "m"\n', metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("work()", outputs=[
            out("stream", name="stderr", text="/x/.venv/lib/python3.11/site-packages/tqdm/auto.py:21: TqdmWarning\n"),
            out("stream", name="stdout", text="\rLoading weights:  50%|█████     | 1/2 [00:00<00:00, 9.1it/s]"),
            out("stream", name="stdout", text="trained in 3 s\r\n"),
            out("display_data", data={
                "text/html": "<table><tr><td>NaN</td><td>1.0</td><td>&lt;NA&gt;</td></tr></table>",
                "text/plain": f"saved to {root}/results/x.json and /root/.cache/ltv-book/y",
                "image/png": "iVBORw0KGgo=",
            }),
            out("error", ename="E", evalue="e",
                traceback=["File /opt/env/lib/python3.12/site-packages/torch/nn.py, line 3"]),
        ]),
        nbformat.v4.new_code_cell("show()", metadata={"tags": ["remove-input"]}),
        nbformat.v4.new_markdown_cell("Text stays."),
    ]
    return nb


def test_tidy_notebook_cleans_outputs_and_folds_inputs(tmp_path: Path) -> None:
    import copy

    nb = _messy_notebook(tmp_path)
    meta = copy.deepcopy(nb.metadata)
    book.tidy_notebook(nb, roots=[tmp_path])
    params, injected, work, shown, text = nb.cells
    assert "remove-cell" in params.metadata.tags, "the defaults cell is dropped when papermill injected values"
    assert "hide-input" not in injected.metadata.tags, "the values the run used stay visible, once"
    assert work.metadata.tags == ["hide-input"]
    assert shown.metadata.tags == ["remove-input"], "a cell that already decides its input is left alone"
    assert "tags" not in text.metadata
    kinds = [(o.output_type, o.get("name")) for o in work.outputs]
    assert kinds == [("stream", "stdout"), ("display_data", None), ("error", None)], kinds
    assert work.outputs[0].text == "trained in 3 s\r\n", "a Windows line end is no progress bar"
    data = work.outputs[1].data
    assert "NaN" not in data["text/html"] and "NA&gt;" not in data["text/html"]
    assert data["text/html"].count(f">{book.NA_DASH}</td>") == 2 and "<td>1.0</td>" in data["text/html"]
    assert data["text/plain"] == "saved to ./results/x.json and ~/.cache/ltv-book/y"
    assert data["image/png"] == "iVBORw0KGgo="
    assert work.outputs[2].traceback == ["File <site-packages>/torch/nn.py, line 3"]
    assert nb.metadata == meta, "the stamp and all notebook metadata stay as they were"
    again = book.tidy_notebook(copy.deepcopy(nb), roots=[tmp_path])
    assert again == nb, "tidy is idempotent"


def test_tidy_file_keeps_the_stamp_and_reports_changes(tmp_path: Path) -> None:
    import nbformat

    path = tmp_path / "ch.ipynb"
    nbformat.write(_messy_notebook(tmp_path), path)
    stamp = book.read_stamp(path)
    assert book.tidy_file(path, roots=[tmp_path]) is True
    assert book.read_stamp(path) == stamp
    assert book.tidy_file(path, roots=[tmp_path]) is False
    assert "stderr" not in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("chapter", book.read_chapters(ROOT), ids=[c.name for c in book.read_chapters(ROOT)])
def test_committed_notebooks_are_tidy(chapter: book.Chapter) -> None:
    """What `python -m ltvlib.book tidy` (and every execution) leaves: nothing for it to change, and no stderr,
    progress bar or absolute path in any output."""
    if not chapter.ipynb.exists():
        pytest.skip(f"{chapter.ipynb.name} not committed yet")
    text = chapter.ipynb.read_text(encoding="utf-8")
    tidied = jupytext.writes(book.tidy_notebook(jupytext.reads(text, fmt="ipynb")), fmt="ipynb")
    assert tidied == text, f"run `python -m ltvlib.book tidy --chapters {chapter.name[:2]}`"
    outputs = json.dumps([c.get("outputs", []) for c in json.loads(text)["cells"]])
    for needle in ("site-packages", "Loading weights", "/root/", str(Path.home()) + "/", str(ROOT)):
        assert needle not in outputs, f"{needle!r} in an output of {chapter.ipynb.name}"


def test_landing_page_verdict_table_has_one_badge_and_link_per_claim() -> None:
    from ltvlib.scorecard import load_sheets

    claims = [c for s in load_sheets(ROOT) for c in s.claims]
    table = book.verdict_table_markdown(ROOT)
    assert table.count("{verdict}`") == len(claims) > 0
    for c in claims:
        assert f"<{c.evidence}>`" in table, f"no link to {c.evidence}"
    assert book.verdict_slug("not reproduced") == "not-reproduced"
