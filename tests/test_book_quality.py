"""Book quality rules, checked on every chapter in the table of contents (no model, no browser needed).

- every figure is drawn by one code cell whose myst-nb metadata gives its caption and name
  (``mystnb.figure.caption``, ``mystnb.figure.name`` = ``chNN-...``), with a title and labels on both axes; no
  old "**Figure N.M.**" caption cell remains;
- every chapter's parameters cell has a ``recipe`` parameter, passed with ``profile`` to its plan
  (``ltvlib.study.plans.<chapter>_plan(profile, recipe=recipe, ...)``);
- every chapter states the claim ("**The claim**"), the measurement (a "## What we measured" section) and
  the verdict (a "## Verdict..." section whose last code cell records the chapter's claims for the scorecard),
  and every piece of evidence a claim links to is a MyST target in that chapter;
- every claim of ``results/claims/*.json`` has n, seeds, a 95 % interval, one of the five verdict levels and
  the name of its rule; no LTV that did not train is shown as a number there, and every chapter that trains or
  loads LTVs passes its ledger to ``record_claims``;
- every executed chapter's interpretations (``ltvlib.book.scorecard.interpret`` markers) agree with its own claims;
- the scorecard comes right after the overview and runs last;
- the landing page and the scorecard open with the verdict grid, one short line per claim; README.md's verdict
  table is the one the claims give; the claims downloads and the execution statistics hold every claim and
  chapter; every bibliography entry is cited;
- the HTML build turns warnings into errors.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

import jupytext
import pytest

from ltvlib.book import runner as book

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


OLD_CAPTION = re.compile(r"^\s*\*\*Figure\s+\d+\.\d+\.?\*\*", re.MULTILINE)


def figure_name_pattern(number: int) -> re.Pattern[str]:
    """A figure's name in chapter ``number``: lower case, ``chNN-...`` (a MyST label, usable as evidence)."""
    return re.compile(rf"^ch{number:02d}-[a-z0-9][a-z0-9_-]*$")


def figure_options(cell: dict) -> dict:
    """The myst-nb figure options of a cell (``metadata.mystnb.figure``), or {}."""
    options = (cell.get("metadata", {}).get("mystnb") or {}).get("figure")
    return options if isinstance(options, dict) else {}


def figure_problems(cs: list[dict], number: int) -> list[str]:
    """What breaks the book's figure convention in a chapter's cells: each code cell that draws a figure
    carries myst-nb figure metadata with a non-empty caption and a name ``chNN-...`` in lower case, sets a title
    and both axis labels; names are unique; no markdown cell is an old "**Figure N.M.** ..." caption."""
    problems = []
    names: list[str] = []
    name_re = figure_name_pattern(number)
    for i, cell in enumerate(cs):
        if cell["cell_type"] == "markdown" and OLD_CAPTION.search(cell["source"]):
            problems.append(f"cell {i}: an old '**Figure N.M.**' caption cell; put the caption into the figure "
                            "cell's metadata (mystnb.figure.caption)")
        if cell["cell_type"] != "code" or not FIGURE_CALL.search(cell["source"]):
            continue
        head = cell["source"].strip().splitlines()[0][:60] if cell["source"].strip() else ""
        for what, pattern in (("x-axis label", XLABEL), ("y-axis label", YLABEL), ("title", TITLE)):
            if not pattern.search(cell["source"]):
                problems.append(f"cell {i} ({head!r}): no {what}")
        options = figure_options(cell)
        caption, name = options.get("caption"), options.get("name")
        if not isinstance(caption, str) or not caption.strip():
            problems.append(f"cell {i} ({head!r}): no caption in its metadata (mystnb.figure.caption)")
        if not isinstance(name, str) or not name_re.match(name):
            problems.append(f"cell {i} ({head!r}): figure name {name!r} is not 'ch{number:02d}-...' in lower case "
                            "(mystnb.figure.name)")
        else:
            names.append(name)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(f"figure names used twice: {duplicates}")
    return problems


def figure_names(cs: list[dict]) -> set[str]:
    return {str(figure_options(c).get("name")) for c in cs if c["cell_type"] == "code" and figure_options(c).get("name")}


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_figures_have_captions_titles_and_axis_labels(chapter: book.Chapter) -> None:
    problems = figure_problems(cells(chapter), int(chapter.name[:2]))
    assert not problems, "\n".join(problems)


def _synthetic_cells(*, caption: str | None = "Accuracy by layer (n=200; bars: 95 % intervals).",
                     name: str | None = "ch07-fig-layers", old_caption: bool = False, labels: bool = True) -> list:
    import nbformat

    meta = {}
    if caption is not None or name is not None:
        figure = {k: v for k, v in (("caption", caption), ("name", name)) if v is not None}
        meta = {"mystnb": {"figure": figure}}
    src = "fig, ax = plt.subplots(figsize=(7, 3))\nax.plot([0, 1], [2, 3])\nax.set_title('t')\n"
    if labels:
        src += "ax.set_xlabel('layer')\nax.set_ylabel('accuracy (%)')\n"
    cs = [nbformat.v4.new_markdown_cell("# Chapter"), nbformat.v4.new_code_cell(src + "plt.show()", metadata=meta)]
    if old_caption:
        cs.append(nbformat.v4.new_markdown_cell("**Figure 7.1.** Accuracy by layer."))
    return cs


def test_figure_check_passes_a_good_figure_and_catches_each_break() -> None:
    assert figure_problems(_synthetic_cells(), 7) == []
    # the same cells read back through jupytext's py:percent header, as chapters are read
    text = jupytext.writes(jupytext.reads(json.dumps({"cells": _synthetic_cells(), "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}), fmt="ipynb"), fmt="py:percent")
    assert 'mystnb={"figure"' in text
    assert figure_problems(jupytext.reads(text, fmt="py:percent").cells, 7) == []
    missing = figure_problems(_synthetic_cells(caption=None), 7)
    assert len(missing) == 1 and "no caption" in missing[0], missing
    assert "no caption" in figure_problems(_synthetic_cells(caption="  "), 7)[0]
    assert "figure name" in figure_problems(_synthetic_cells(name="Ch07-Fig"), 7)[0]
    assert "figure name" in figure_problems(_synthetic_cells(name="ch01-fig-layers"), 7)[0]  # another chapter's
    assert "figure name" in figure_problems(_synthetic_cells(name=None), 7)[0]
    assert any("old '**Figure N.M.**'" in p for p in figure_problems(_synthetic_cells(old_caption=True), 7))
    unlabelled = figure_problems(_synthetic_cells(labels=False), 7)
    assert sorted(p.split(": no ")[-1] for p in unlabelled) == ["x-axis label", "y-axis label"]
    twice = _synthetic_cells() + _synthetic_cells()[1:]
    assert figure_problems(twice, 7) == ["figure names used twice: ['ch07-fig-layers']"]


# ------------------------------------------------------------------------------------------- the recipe parameter

RECIPE_PARAM = re.compile(r"^recipe\s*=\s*(None|\"fast\"|\"paper\"|'fast'|'paper')\s*(#.*)?$", re.MULTILINE)
RECIPE_PASSED = re.compile(r"\b\w+_plan\(\s*profile\s*,\s*recipe\s*=\s*recipe\s*[,)]")


def recipe_problems(cs: list[dict]) -> list[str]:
    """The parameters cell defines ``recipe`` (None, "fast" or "paper") and the chapter passes it with ``profile``
    to its plan (``<chapter>_plan(profile, recipe=recipe, ...)``, :mod:`ltvlib.study.plans`)."""
    params = [c for c in cs if c["cell_type"] == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(params) != 1:
        return [f"{len(params)} cells tagged 'parameters', expected one"]
    problems = []
    if not RECIPE_PARAM.search(params[0]["source"]):
        problems.append('the parameters cell has no `recipe = None` (or "fast" / "paper") parameter')
    code = "\n".join(c["source"] for c in cs if c["cell_type"] == "code")
    if not RECIPE_PASSED.search(code):
        problems.append("the chapter does not call its plan with (profile, recipe=recipe)")
    return problems


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_parameters_cell_has_a_recipe_parameter(chapter: book.Chapter) -> None:
    problems = recipe_problems(cells(chapter))
    assert not problems, "\n".join(problems)


def test_recipe_check_catches_a_chapter_without_the_parameter() -> None:
    import nbformat

    def chapter(params: str, body: str) -> list:
        return [nbformat.v4.new_code_cell(params, metadata={"tags": ["parameters"]}), nbformat.v4.new_code_cell(body)]

    params = 'profile = "cpu"\nrecipe = None  # None: the profile\'s'
    good = chapter(params, "plan = overview_plan(profile, recipe=recipe)")
    assert recipe_problems(good) == []
    assert recipe_problems(chapter('recipe = None', "plan = peft_plan(profile, recipe=recipe, seed=seed)")) == []
    assert len(recipe_problems(chapter('profile = "cpu"', "plan = overview_plan(profile, recipe=recipe)"))) == 1
    assert len(recipe_problems(chapter('recipe = None', "plan = overview_plan(profile)"))) == 1
    assert len(recipe_problems(chapter('recipe = None', "plan = overview_plan(profile, recipe=None)"))) == 1
    assert len(recipe_problems(chapter('recipe = "slow"', "plan = overview_plan(profile)"))) == 2


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
    targets = set(TARGET.findall(markdown)) | figure_names(cs)
    evidence = EVIDENCE.findall("\n".join(c.source for c in cs if c.cell_type == "code"))
    assert evidence, "each Claim names its evidence as a literal: evidence=\"chNN-...\""
    missing = sorted(set(evidence) - targets)
    assert not missing, f"evidence labels with no (label)= target or figure name in the chapter: {missing}"
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
    from ltvlib.book.scorecard import load_sheets

    claims = [c for s in load_sheets(ROOT) for c in s.claims]
    table = book.verdict_table_markdown(ROOT)
    assert table.count("{verdict}`") == len(claims) > 0
    for c in claims:
        assert f"<{c.evidence}>`" in table, f"no link to {c.evidence}"
    assert book.verdict_slug("not reproduced") == "not-reproduced"


# ------------------------------------------------------------------------ the verdict grid, README, downloads


def test_landing_page_and_scorecard_open_with_the_verdict_grid() -> None:
    """The landing page shows the grid (the ``{verdict-grid}`` directive, generated when the book is built) before
    any section, and the scorecard's executed source renders the same grid; both say where the paper's numbers
    come from once (the landing page)."""
    intro = (ROOT / "intro.md").read_text(encoding="utf-8")
    first_section = intro.index("\n## ")
    assert 0 < intro.index("```{verdict-grid}") < first_section, "the grid must come before the first section"
    assert "secondary summary" in intro
    scorecard = (ROOT / "chapters" / "scorecard.py").read_text(encoding="utf-8")
    assert "scorecard_page_markdown(sheets)" in scorecard


def test_verdict_grid_has_one_short_line_per_claim() -> None:
    from ltvlib.book.scorecard import load_sheets
    from ltvlib.book.verdict_grid import GRID_LABELS, grid_rows, verdict_grid_markdown

    sheets = load_sheets(ROOT)
    claims = [(s.chapter, c) for s in sheets for c in s.claims]
    grid = verdict_grid_markdown(sheets)
    rows = [line for line in grid.splitlines() if line.startswith("| ") and "{verdict}" in line]
    assert len(rows) == len(claims) > 0
    assert grid.count("{verdict}`") == len(claims)
    for (chapter, c), row, line in zip(claims, rows, grid_rows(sheets), strict=True):
        assert (chapter, c.key) in GRID_LABELS, f"{chapter}/{c.key}: no short label in verdict_grid.GRID_LABELS"
        assert f"<{c.evidence}>`" in row, f"{chapter}/{c.key}: no link to its evidence"
        assert "..." not in row and "…" not in row, f"{chapter}/{c.key}: a truncated cell: {row}"
        assert len(line.claim) <= 40 and len(line.paper) <= 30, f"{chapter}/{c.key}: not a few words: {row}"
    # no label for a claim that no longer exists
    recorded = {(chapter, c.key) for chapter, c in claims}
    assert not set(GRID_LABELS) - recorded, f"labels of claims nobody records: {set(GRID_LABELS) - recorded}"


def test_readme_verdict_table_is_generated_from_the_claims() -> None:
    from ltvlib.book import pages

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text == pages.readme_with_grid(text, pages.readme_grid(ROOT)), (
        "README.md's verdict table differs from results/claims: run `python -m ltvlib.book.pages`")
    assert len(text.splitlines()) <= 150, "README.md is documentation: at most 150 lines (history: CHANGELOG.md)"
    for command in ("bash scripts/book.sh", "bash scripts/test.sh"):
        assert command in text


def test_readme_check_catches_a_stale_table(tmp_path: Path) -> None:
    from ltvlib.book import pages

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = text.replace("reproduced |", "reproduced? |", 1)
    assert stale != text
    assert pages.readme_with_grid(stale, pages.readme_grid(ROOT)) == text
    with pytest.raises(ValueError, match="no generated verdict table"):
        pages.readme_with_grid("# no markers\n", "grid")


def test_claims_downloads_hold_every_claim() -> None:
    import csv
    import io

    from ltvlib.book.scorecard import load_sheets
    from ltvlib.book.verdict_grid import CSV_COLUMNS, claims_csv, claims_json

    sheets = load_sheets(ROOT)
    n = sum(len(s.claims) for s in sheets)
    rows = list(csv.DictReader(io.StringIO(claims_csv(sheets))))
    assert len(rows) == n > 0 and tuple(rows[0]) == CSV_COLUMNS
    assert {r["verdict"] for r in rows} <= {"reproduced", "partly", "not reproduced", "inconclusive",
                                             "not testable at this scale"}
    doc = json.loads(claims_json(sheets))
    assert sum(len(s["claims"]) for s in doc["sheets"]) == n


def test_execution_statistics_read_every_chapter() -> None:
    from ltvlib.book import pages

    rows = pages.execution_rows(ROOT)
    assert [r["chapter"] for r in rows] == [c.name for c in book.read_chapters(ROOT)]
    executed = [r for r in rows if r["time"] != "\u2013"]
    assert executed, "no chapter notebook records its execution time"
    assert all(r["model"] != "\u2013" and r["profile"] != "\u2013" for r in executed)
    assert "Total execution time" in pages.execution_stats_markdown(ROOT)


CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def test_every_bibliography_entry_is_cited() -> None:
    """Every entry of references.bib is cited ({cite}) on some page of the table of contents."""
    keys = re.findall(r"^@\w+\{([^,\s]+),", (ROOT / "references.bib").read_text(encoding="utf-8"), re.MULTILINE)
    assert keys
    cited: set[str] = set()
    for doc in book.toc_pages(ROOT):
        for ext in (".md", ".py"):
            path = ROOT / f"{doc}{ext}"
            if path.exists():
                for group in CITE.findall(path.read_text(encoding="utf-8")):
                    cited |= {k.strip() for k in group.split(",")}
    assert not set(keys) - cited, f"bibliography entries nothing cites: {sorted(set(keys) - cited)}"


# ------------------------------------------------------------------------ what the committed claims must record

CLAIMS_FILES = sorted((ROOT / book.CLAIMS_DIR).glob("*.json"))
_BY_NAME = {c.name: c for c in book.read_chapters(ROOT)}


@functools.cache
def _outputs_current(name: str) -> bool:
    # book.outputs_current hashes the library code the chapter imports (parsing every module on the way), about
    # a second a chapter; four checks per chapter ask, and none of what it reads (the committed notebook, the
    # chapter's source, the library) changes during a session (the repository guard fails a test that changes it)
    return book.outputs_current(ROOT, _BY_NAME[name])


def skip_if_stale(name: str) -> None:
    """Checks of executed outputs apply to chapters whose committed notebook is current (``book.outputs_current``):
    a stale one predates its source or library code, and ``bash scripts/book.sh`` re-executes it."""
    chapter = _BY_NAME.get(name)
    if chapter is None:
        pytest.fail(f"{name}: a claims file for a chapter that is not in _toc.yml")
    if not _outputs_current(name):
        pytest.skip(f"{name}: committed outputs are stale (source or library changed since execution); "
                    "bash scripts/book.sh re-executes it")
LEVELS = ("reproduced", "partly", "not reproduced", "inconclusive", "not testable at this scale")


def claim_record_problems(sheet: dict, source: str = "sheet") -> list[str]:
    """What a claims sheet (``results/claims/<chapter>.json``, as JSON) lacks of a claim's record: for every claim
    n and seeds (positive integers), a 95 % interval (``low <= value <= high``), a verdict among the five levels
    and the name of its rule (not the old checks), the rule giving that verdict when re-applied. A claim not
    testable at this scale measured nothing: it needs its rule's reason, not an interval. A sheet from before
    intervals (schema 1) fails: the lead re-executes every chapter before merging."""
    from ltvlib.book.scorecard import RULES, RuleResult

    problems = []
    if sheet.get("schema") != 2:
        problems.append(f"{source}: schema {sheet.get('schema')!r}, expected 2 (claims with rules and intervals)")
    claims = sheet.get("claims") or []
    if not claims:
        problems.append(f"{source}: no claims")
    for c in claims:
        where = f"{source}: claim {c.get('key')!r}"
        verdict, rule = c.get("verdict"), c.get("rule") or {}
        if verdict not in LEVELS:
            problems.append(f"{where}: verdict {verdict!r} is not one of the five levels")
        name = rule.get("rule")
        if name not in RULES or name == "checks":
            problems.append(f"{where}: rule {name!r} is not one of the verdict rules (direction, threshold, combined, "
                            "not testable)")
        else:
            try:
                if RuleResult.from_dict(rule).verdict.value != verdict:
                    problems.append(f"{where}: its rule gives another verdict than the saved {verdict!r}")
            except (ValueError, TypeError, KeyError) as exc:
                problems.append(f"{where}: its rule does not re-apply ({exc})")
        if verdict == "not testable at this scale":
            if not str(rule.get("reason", "")).strip():
                problems.append(f"{where}: not testable without a reason")
            continue
        for field in ("n", "seeds"):
            value = c.get(field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(f"{where}: {field} is {value!r}, expected a positive integer")
        good = [i for i in c.get("intervals") or []
                if abs(float(i.get("confidence", 0)) - 0.95) < 1e-9
                and float(i["low"]) - 1e-9 <= float(i["value"]) <= float(i["high"]) + 1e-9]
        if not good:
            problems.append(f"{where}: no 95 % interval")
    return problems


def _claim(**kw: object) -> dict:
    from ltvlib.book.scorecard import Claim, direction_rule, not_testable
    from ltvlib.stats import proportion_estimate

    est = proportion_estimate(120, 200)
    rule = not_testable("the model is too small") if kw.pop("untestable", False) else direction_rule(
        est.value - 0.5, (est.low - 0.5, est.high - 0.5))
    intervals = {} if rule.verdict.value == "not testable at this scale" else {"LTV": est}
    return Claim(paper_claim=1, key=str(kw.pop("key", "middle")), statement="s.", paper="p", ours="o",
                 evidence="ch01-fig-a", evidence_title="Figure 1.1", rule=rule, intervals=intervals).to_dict() | kw


def _sheet(*claims: dict, ltvs: list | None = None, schema: int = 2) -> dict:
    return {"schema": schema, "chapter": "01_x", "model": "m", "profile": "cpu", "seed": 0, "claims": list(claims),
            "ltvs": ltvs or []}


def test_claim_record_check_on_synthetic_sheets() -> None:
    assert claim_record_problems(_sheet(_claim(), _claim(key="nt", untestable=True))) == []
    old = _claim(rule={"rule": "checks", "verdict": "reproduced", "inputs": {"checks": [["a", True]]}, "reason": ""},
                 verdict="reproduced", n=None, seeds=None, intervals=[])
    found = claim_record_problems(_sheet(old, schema=1))
    assert any("schema 1" in p for p in found) and any("rule 'checks'" in p for p in found)
    assert any("n is None" in p for p in found) and any("no 95 % interval" in p for p in found)
    assert any("not one of the five levels" in p for p in claim_record_problems(_sheet(_claim(verdict="not measured"))))
    ninety = _claim()
    ninety["intervals"] = [dict(i, confidence=0.9) for i in ninety["intervals"]]
    assert claim_record_problems(_sheet(ninety)) == ["sheet: claim 'middle': no 95 % interval"]
    assert any("another verdict" in p for p in claim_record_problems(_sheet(_claim(verdict="inconclusive"))))
    assert any("seeds is 0" in p for p in claim_record_problems(_sheet(_claim(seeds=0))))
    assert claim_record_problems(_sheet()) == ["sheet: no claims"]


@pytest.mark.parametrize("path", CLAIMS_FILES, ids=[p.stem for p in CLAIMS_FILES])
def test_committed_claims_have_n_seeds_interval_level_and_rule(path: Path) -> None:
    skip_if_stale(path.stem)
    problems = claim_record_problems(json.loads(path.read_text(encoding="utf-8")), path.name)
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------ no untrained LTV shown as a number

LTV_CALL = re.compile(r"\b(trained_ltv|train_ltv|cached_ltv)\(")


def untrained_shown_problems(sheet: dict, source: str = "sheet") -> list[str]:
    """LTVs of a claims sheet's ``ltvs`` list (``ltvlib.study.ltv_report.LTVLedger``) shown as a number although their
    record does not say they trained (``trained`` false or unknown)."""
    return [f"{source}: the LTV of {v.get('task')} at layers {v.get('layers')} (seed {v.get('seed')}) is shown as a "
            f"number in {v.get('where') or 'an unnamed place'} but trained={v.get('trained')!r}"
            for v in sheet.get("ltvs") or [] if v.get("trained") is not True and v.get("shown") == "number"]


def _record_claims_call(code: str) -> str | None:
    """The text of the first ``record_claims(...)`` call in ``code`` (balanced parentheses), or None."""
    start = code.find("record_claims(")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len("record_claims"), len(code)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return code[start : i + 1]
    return code[start:]


def ledger_problems(code: str) -> list[str]:
    """A chapter that trains or loads LTVs must pass its ledger: ``record_claims(..., ltvs=ledger)``."""
    if not LTV_CALL.search(code):
        return []
    call = _record_claims_call(code)
    if call is None:
        return ["the chapter trains or loads LTVs but never calls record_claims"]
    if not re.search(r"\bltvs\s*=", call):
        return ["the chapter trains or loads LTVs but its record_claims(...) call passes no ltvs= (its LTVLedger)"]
    return []


def test_untrained_and_ledger_checks_on_synthetic_input() -> None:
    row = {"task": "trec", "layers": [29], "positions": [-1], "seed": 0, "recipe": "fast", "trained": True,
           "start_val_score": 0.2, "best_val_score": 0.5, "steps_to_best": 32, "shown": "number", "where": "Table 1"}
    assert untrained_shown_problems(_sheet(_claim(), ltvs=[row])) == []
    assert untrained_shown_problems(_sheet(_claim(), ltvs=[row | {"trained": False, "shown": "did not train"}])) == []
    for trained in (False, None):
        found = untrained_shown_problems(_sheet(_claim(), ltvs=[row | {"trained": trained}]))
        assert len(found) == 1 and "trec at layers [29]" in found[0] and "Table 1" in found[0], found
    good = "ltv = trained_ltv(lm, t, run)\nrecord_claims(\n  \"01_x\", [c], model=model,\n  ltvs=ledger)\n"
    assert ledger_problems(good) == []
    assert ledger_problems("x = 1\nrecord_claims('01_x', [c], model=model)") == []  # no LTV: nothing to pass
    assert "passes no ltvs=" in ledger_problems("v = cached_ltv(lm)\nrecord_claims('01_x', [f(ltvs)], seed=0)\n")[0]
    assert "never calls record_claims" in ledger_problems("v = train_ltv(lm, task)\n")[0]


@pytest.mark.parametrize("path", CLAIMS_FILES, ids=[p.stem for p in CLAIMS_FILES])
def test_no_untrained_ltv_is_shown_as_a_number(path: Path) -> None:
    """Every LTV an executed chapter reports carries whether it trained; none that did not is shown as an LTV
    number. A chapter whose source uses LTVs must have reported some."""
    skip_if_stale(path.stem)
    sheet = json.loads(path.read_text(encoding="utf-8"))
    problems = untrained_shown_problems(sheet, path.name)
    chapter = ROOT / book.CHAPTER_DIR / f"{path.stem}.py"
    if chapter.exists() and LTV_CALL.search(chapter.read_text(encoding="utf-8")) and not sheet.get("ltvs"):
        problems.append(f"{path.name}: the chapter trains or loads LTVs, but its sheet lists none (pass ltvs=ledger "
                        "and route every LTV number through the ledger)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_chapters_using_ltvs_pass_their_ledger_to_record_claims(chapter: book.Chapter) -> None:
    code = "\n".join(c["source"] for c in cells(chapter) if c["cell_type"] == "code")
    problems = ledger_problems(code)
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ interpretations agree with the claims

def output_text(nb: dict) -> str:
    """Every text output of an executed notebook (streams and text mime types, glued ones included: myst-nb's
    ``glue`` stores them as ``application/papermill.record/<mime>``), joined."""
    parts = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if "text" in out:
                parts.append("".join(out["text"]) if isinstance(out["text"], list) else str(out["text"]))
            for mime, value in (out.get("data") or {}).items():
                if mime.removeprefix("application/papermill.record/").startswith("text/"):
                    parts.append("".join(value) if isinstance(value, list) else str(value))
    return "\n".join(parts)


def interpretation_problems(nb: dict, sheet: dict, source: str = "chapter") -> list[str]:
    """Each interpretation an executed chapter shows (``interpret(...)``'s hidden marker)
    names a claim of the chapter's own sheet and that claim's verdict; every claim has at least one."""
    from ltvlib.book.runner import verdict_slug
    from ltvlib.book.scorecard import interpretation_markers

    verdicts = {c["key"]: verdict_slug(c["verdict"]) for c in sheet.get("claims") or []}
    markers = interpretation_markers(output_text(nb))
    problems = []
    for key, slug in markers:
        if key not in verdicts:
            problems.append(f"{source}: an interpretation of claim {key!r}, which the chapter does not record")
        elif slug != verdicts[key]:
            problems.append(f"{source}: the interpretation of {key!r} is the one for {slug!r}, but the recorded "
                            f"verdict is {verdicts[key]!r}")
    seen = {k for k, _ in markers}
    problems += [f"{source}: claim {k!r} has no interpretation chosen by its verdict (interpret(claim, texts))"
                 for k in verdicts if k not in seen]
    return problems


def _interpreted_notebook(*interpretations: object) -> dict:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("interpret(claim, texts)", outputs=[nbformat.v4.new_output(
        "execute_result", data={"text/markdown": i.markdown(), "text/plain": "<Interpretation>"}, execution_count=1)])
        for i in interpretations]
    return json.loads(nbformat.writes(nb))


def test_interpretation_check_on_a_synthetic_chapter() -> None:
    from ltvlib.book.scorecard import Claim, interpret

    sheet = _sheet(_claim(key="middle"), _claim(key="nt", untestable=True))
    texts = {v: f"text for {v}" for v in LEVELS}
    claims = [Claim.from_dict(c) for c in sheet["claims"]]
    assert claims[0].verdict.value == "reproduced"
    good = _interpreted_notebook(*(interpret(c, texts) for c in claims))
    assert interpretation_problems(good, sheet) == []
    # the chapter's text was chosen for another verdict than the one recorded (e.g. outputs from an older run)
    stale = json.loads(json.dumps(good).replace("verdict=reproduced", "verdict=not-reproduced"))
    assert interpretation_problems(stale, sheet) == [
        ("chapter: the interpretation of 'middle' is the one for 'not-reproduced', but the recorded verdict is "
        "'reproduced'")]
    only_one = _interpreted_notebook(interpret(claims[0], texts))
    assert interpretation_problems(only_one, sheet) == [
        "chapter: claim 'nt' has no interpretation chosen by its verdict (interpret(claim, texts))"]
    other = _sheet(_claim(key="middle"))
    assert "does not record" in interpretation_problems(good, other)[0]
    # an interpretation glued into the chapter's markdown (myst-nb's glue) counts like a displayed one
    glued = json.loads(json.dumps(good).replace('"text/markdown"', '"application/papermill.record/text/markdown"'))
    assert interpretation_problems(glued, sheet) == []


EXECUTED = [c for c in CHAPTERS if c.ipynb.exists() and (ROOT / book.CLAIMS_DIR / f"{c.name}.json").exists()]


@pytest.mark.parametrize("chapter", EXECUTED, ids=[c.name for c in EXECUTED])
def test_interpretations_agree_with_the_recorded_verdicts(chapter: book.Chapter) -> None:
    skip_if_stale(chapter.name)
    nb = json.loads(chapter.ipynb.read_text(encoding="utf-8"))
    sheet = json.loads((ROOT / book.CLAIMS_DIR / f"{chapter.name}.json").read_text(encoding="utf-8"))
    problems = interpretation_problems(nb, sheet, chapter.name)
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ a figure cell shows its figure only

def figure_output_problems(nb: dict, source: str = "chapter") -> list[str]:
    """myst-nb wraps *every* output of a cell with figure metadata in a figure of the same name, so a table or
    text printed by the figure cell becomes a second figure with a duplicate target (a strict build fails):
    each figure cell must have exactly one output, an image."""
    problems = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code" or not figure_options(cell):
            continue
        outs = cell.get("outputs", [])
        images = [o for o in outs if any(m in o.get("data", {}) for m in IMAGE_MIMES)]
        if len(outs) != 1 or len(images) != 1:
            kinds = [sorted(k for k in o.get("data", {}) if k != "text/plain") or [o.get("output_type")] for o in outs]
            problems.append(f"{source}: figure cell {i} ({figure_options(cell).get('name')}) has outputs {kinds}; "
                            "it must show its one image only (move tables and text to the next cell)")
    return problems


def test_figure_output_check_catches_a_table_in_a_figure_cell() -> None:
    image = {"output_type": "display_data", "data": {"image/png": "x", "text/plain": "<Figure>"}}
    table = {"output_type": "display_data", "data": {"text/html": "<table/>", "text/plain": "df"}}
    cell = {"cell_type": "code", "metadata": {"mystnb": {"figure": {"caption": "c", "name": "ch01-fig-x"}}},
            "outputs": [image]}
    assert figure_output_problems({"cells": [cell]}) == []
    assert figure_output_problems({"cells": [dict(cell, outputs=[image, table])]})
    assert figure_output_problems({"cells": [dict(cell, outputs=[])]})


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_executed_figure_cells_show_one_image(chapter: book.Chapter) -> None:
    skip_if_stale(chapter.name)
    problems = figure_output_problems(json.loads(chapter.ipynb.read_text(encoding="utf-8")), chapter.name)
    assert not problems, "\n".join(problems)
