"""Tests of the book runner ltvlib.book.runner (no model needed)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
import yaml

from ltvlib.book import runner as book

TOC = {
    "format": "jb-book",
    "root": "intro",
    "parts": [
        {
            "caption": "Chapters",
            "numbered": True,
            "chapters": [
                {"file": "chapters/00_overview"},
                {"file": "chapters/02_b", "sections": [{"file": "chapters/02a_extra"}]},
                {"file": "appendix"},
                {"file": "chapters/01_a.ipynb"},
            ],
        },
        {"caption": "More", "chapters": [{"file": "chapters/10_late"}]},
    ],
}

DUMMY = textwrap.dedent(
    """\
    # %% [markdown]
    # # Dummy chapter

    # %% tags=["parameters"]
    model = "smollm2-135m"
    profile = "cpu"
    seed = 0
    device = "auto"

    # %%
    import os
    print(f"RESULT {model}|{profile}|{seed}|{device}|{os.path.basename(os.getcwd())}")
    """
)


def write_book(root: Path, toc: dict = TOC) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    return root


def test_toc_order_and_chapters(tmp_path: Path) -> None:
    root = write_book(tmp_path)
    assert book.toc_pages(root) == [
        "intro",
        "chapters/00_overview",
        "chapters/02_b",
        "chapters/02a_extra",
        "appendix",
        "chapters/01_a",
        "chapters/10_late",
    ]
    chs = book.read_chapters(root)
    assert [c.name for c in chs] == ["00_overview", "02_b", "02a_extra", "01_a", "10_late"]
    assert chs[0].py == root / "chapters/00_overview.py"
    assert chs[0].ipynb == root / "chapters/00_overview.ipynb"


def test_select_chapters(tmp_path: Path) -> None:
    chs = book.read_chapters(write_book(tmp_path))
    assert book.select_chapters(chs, None) == chs
    assert [c.name for c in book.select_chapters(chs, ["02"])] == ["02_b", "02a_extra"]
    assert [c.name for c in book.select_chapters(chs, ["02_", "10", "00"])] == ["00_overview", "02_b", "10_late"]
    with pytest.raises(SystemExit, match="99"):
        book.select_chapters(chs, ["00", "99"])


def test_filter_toc_drops_entries_and_empty_parts() -> None:
    out = book.filter_toc(TOC, {"chapters/10_late", "chapters/01_a"})
    assert [p["caption"] for p in out["parts"]] == ["Chapters"]
    assert [c["file"] for c in out["parts"][0]["chapters"]] == ["chapters/00_overview", "chapters/02_b", "appendix"]
    assert TOC["parts"][1]["chapters"]  # input untouched


def test_parse_value() -> None:
    assert book.parse_value("3") == 3
    assert book.parse_value("1e-3") == 1e-3
    assert book.parse_value("True") is True
    assert book.parse_value("none") is None
    assert book.parse_value("meta-llama/Llama-3.1-8B") == "meta-llama/Llama-3.1-8B"


def params(**kw: object) -> dict:
    base = {"model": "smollm2-135m", "profile": "cpu", "seed": 0, "device": "auto"}
    return {**base, **kw}


def test_default_detection_and_staging_names(tmp_path: Path) -> None:
    assert book.is_default(params())
    assert book.is_default(params(device="cuda"))
    assert not book.is_default(params(profile="smoke"))
    assert not book.is_default(params(seed=1))
    assert not book.is_default(params(n=5))

    runs = tmp_path / "_build" / "runs"
    assert book.staging_dir(tmp_path, params(profile="smoke")) == runs / "smoke__smollm2-135m"
    assert (
        book.staging_dir(tmp_path, params(profile="paper", model="meta-llama/Llama-3.1-8B"))
        == runs / "paper__meta-llama_Llama-3.1-8B"
    )
    assert book.staging_dir(tmp_path, params(profile="smoke", seed=2)).name == "smoke__smollm2-135m__seed2"
    a = book.staging_dir(tmp_path, params(profile="smoke", n=5)).name
    b = book.staging_dir(tmp_path, params(profile="smoke", n=6)).name
    assert a.startswith("smoke__smollm2-135m__") and a != b


def test_stamp_skip_logic(tmp_path: Path) -> None:
    root = write_book(tmp_path)
    ch = book.read_chapters(root)[0]
    ch.py.parent.mkdir(parents=True)
    ch.py.write_text(DUMMY)
    stamp = book.make_stamp(ch, params())
    assert set(stamp) == {"source_sha", "params", "code_version"}
    assert not book.up_to_date(ch.ipynb, stamp)  # no notebook yet

    ch.ipynb.write_text(json.dumps({"cells": [], "metadata": {"ltvbook": stamp}, "nbformat": 4, "nbformat_minor": 5}))
    assert book.up_to_date(ch.ipynb, stamp)
    assert not book.up_to_date(ch.ipynb, book.make_stamp(ch, params(profile="smoke")))
    ch.py.write_text(DUMMY + "\n# edited\n")
    assert not book.up_to_date(ch.ipynb, book.make_stamp(ch, params()))
    ch.ipynb.write_text("{not json")
    assert not book.up_to_date(ch.ipynb, stamp)


def test_stage_tree(tmp_path: Path) -> None:
    root = write_book(
        tmp_path / "repo", {"format": "jb-book", "root": "intro", "chapters": [{"file": "chapters/00_overview"}]}
    )
    (root / "_config.yml").write_text("title: t\n")
    (root / "intro.md").write_text("# Intro\n")
    (root / "refs.bib").write_text("")
    (root / "chapters" / "img").mkdir(parents=True)
    (root / "chapters" / "img" / "fig.png").write_bytes(b"png")
    (root / "chapters" / "00_overview.py").write_text(DUMMY)
    (root / "chapters" / "00_overview.ipynb").write_text("{}")
    stage = tmp_path / "stage"
    book.stage_tree(root, stage, book.read_chapters(root))
    got = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
    assert got == ["_config.yml", "_toc.yml", "chapters/img/fig.png", "intro.md", "refs.bib"]


def test_missing_parameters_cell_is_an_error(tmp_path: Path) -> None:
    root = write_book(tmp_path, {"format": "jb-book", "root": "intro", "chapters": [{"file": "chapters/00_x"}]})
    ch = book.read_chapters(root)[0]
    ch.py.parent.mkdir(parents=True)
    ch.py.write_text("# %%\nx = 1\n")
    with pytest.raises(book.ChapterError, match="parameters"):
        book.load_source(ch)


def test_execute_dummy_chapter_injects_parameters(tmp_path: Path) -> None:
    root = write_book(tmp_path, {"format": "jb-book", "root": "intro", "chapters": [{"file": "chapters/00_dummy"}]})
    ch = book.read_chapters(root)[0]
    ch.py.parent.mkdir(parents=True)
    ch.py.write_text(DUMMY)
    p = params(profile="smoke", model="org/some-model", seed=3)
    target = tmp_path / "out" / "00_dummy.ipynb"
    seconds = book.execute_chapter(ch, p, target)
    assert seconds > 0

    nb = json.loads(target.read_text())
    outputs = "".join(
        "".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
    )
    assert "RESULT org/some-model|smoke|3|auto|chapters" in outputs  # injected params, cwd = chapters/
    tags = [c.get("metadata", {}).get("tags", []) for c in nb["cells"]]
    assert ["injected-parameters"] in tags
    assert nb["metadata"]["ltvbook"] == json.loads(json.dumps(book.make_stamp(ch, p)))
    assert nb["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"
    assert book.up_to_date(target, book.make_stamp(ch, p))
    assert not list(target.parent.glob("*.tmp"))
    run = book.run_record(target)  # the run's time and its kernel's peak memory, beside the stamp
    assert run["seconds"] == pytest.approx(seconds, abs=0.06) and run["peak_rss_bytes"] > 20 * 2**20
    assert book.run_record(tmp_path / "missing.ipynb") == {}


def test_peak_memory_sees_what_a_child_process_holds() -> None:
    import subprocess
    import sys

    hold = "x = bytearray(300 * 2**20); import time; time.sleep(1.5)"  # 300 MiB, resident (bytearray zero-fills)
    with book.PeakMemory(interval=0.1) as memory:
        subprocess.run([sys.executable, "-c", hold], check=True)
    assert memory.peak_bytes > 300 * 2**20
    with book.PeakMemory(interval=0.1) as idle:
        pass
    assert idle.peak_bytes < 300 * 2**20  # nothing of the previous child is left in a new measurement


def test_peak_memory_sees_a_child_that_lives_under_a_second() -> None:
    import subprocess
    import sys

    hold = "x = bytearray(100 * 2**20); import time; time.sleep(0.3)"
    with book.PeakMemory() as memory:  # the default interval, as a chapter's run uses it
        subprocess.run([sys.executable, "-c", hold], check=True)
    assert memory.peak_bytes > 100 * 2**20


def test_failing_chapter_keeps_good_notebook(tmp_path: Path) -> None:
    root = write_book(tmp_path, {"format": "jb-book", "root": "intro", "chapters": [{"file": "chapters/03_bad"}]})
    ch = book.read_chapters(root)[0]
    ch.py.parent.mkdir(parents=True)
    ch.py.write_text(DUMMY + '\n# %%\nraise ValueError("broken on purpose")\n')
    ch.ipynb.write_text("GOOD")
    with pytest.raises(book.ChapterError, match=r"03_bad.*ValueError.*broken on purpose"):
        book.execute_chapter(ch, params(), ch.ipynb)
    assert ch.ipynb.read_text() == "GOOD"
    assert (root / "_build" / "executing" / "03_bad.ipynb").exists()  # partial kept for debugging


def test_keep_going_executes_the_chapters_after_a_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_book(tmp_path, {"format": "jb-book", "root": "intro",
                                 "chapters": [{"file": "chapters/01_bad"}, {"file": "chapters/02_good"}]})
    bad, good = book.read_chapters(root)
    bad.py.parent.mkdir(parents=True)
    bad.py.write_text(DUMMY + '\n# %%\nraise ValueError("broken on purpose")\n')
    good.py.write_text(DUMMY)
    p = params(profile="smoke")
    # without the flag the first failure stops the build: the good chapter is never run
    with pytest.raises(SystemExit, match="01_bad"):
        book.build(root, p, html=False)
    stage = book.staging_dir(root, p)
    assert not (stage / "chapters" / "02_good.ipynb").exists()
    with pytest.raises(SystemExit, match=r"1 chapter\(s\) failed: 01_bad"):
        book.build(root, p, html=False, keep_going=True)
    assert (stage / "chapters" / "02_good.ipynb").exists()
    assert "01_bad: failed; going on" in capsys.readouterr().out


def test_cli_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_book(tmp_path)
    assert book.main(["--root", str(root), "list"]) == 0
    names = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    assert names == ["00_overview", "02_b", "02a_extra", "01_a", "10_late"]


def test_run_last_chapters_execute_after_all_others(tmp_path: Path) -> None:
    toc = {"format": "jb-book", "root": "intro", "chapters": [
        {"file": "chapters/00_overview"}, {"file": "chapters/scorecard"}, {"file": "chapters/01_a"},
        {"file": "chapters/02_b"}]}
    chs = book.read_chapters(write_book(tmp_path, toc))
    assert [c.name for c in book.execution_order(chs, chs)] == ["00_overview", "01_a", "02_b", "scorecard"]
    # any selection still ends with the scorecard, which summarises what ran
    chosen = book.select_chapters(chs, ["02"])
    assert [c.name for c in book.execution_order(chs, chosen)] == ["02_b", "scorecard"]
    assert [c.name for c in book.execution_order(chs, book.select_chapters(chs, ["scorecard"]))] == ["scorecard"]


def test_stamp_of_run_last_chapter_covers_the_claims(tmp_path: Path) -> None:
    root = write_book(tmp_path, {"format": "jb-book", "root": "intro", "chapters": [{"file": "chapters/scorecard"}]})
    ch = book.read_chapters(root)[0]
    ch.py.parent.mkdir(parents=True)
    ch.py.write_text(DUMMY)
    empty = book.claims_digest(root)
    claims = root / book.CLAIMS_DIR
    claims.mkdir(parents=True)
    (claims / "01_a.json").write_text("{}")
    one = book.claims_digest(root)
    assert one != empty
    (claims / "01_a.json").write_text('{"changed": 1}')
    assert book.claims_digest(root) != one
    stamp = book.make_stamp(ch, params(), inputs=one)
    assert stamp["inputs_sha"] == one and "inputs_sha" not in book.make_stamp(ch, params())


def test_kernel_sees_the_book_root(tmp_path: Path) -> None:
    root = write_book(tmp_path, {"format": "jb-book", "root": "intro", "chapters": [{"file": "chapters/00_env"}]})
    ch = book.read_chapters(root)[0]
    ch.py.parent.mkdir(parents=True)
    ch.py.write_text(DUMMY + '\n# %%\nprint("ROOT", os.environ["LTV_BOOK_ROOT"])\n')
    stage = tmp_path / "_build" / "runs" / "smoke__m"
    target = stage / "chapters" / "00_env.ipynb"
    before = os.environ.get(book.BOOK_ROOT_ENV)
    book.execute_chapter(ch, params(profile="smoke"), target, book_root=stage)
    assert os.environ.get(book.BOOK_ROOT_ENV) == before  # restored
    # the kernel may send one print in several stream messages (a loaded machine flushes mid-line): join them
    streams = [
        "".join(o["text"])
        for cell in json.loads(target.read_text())["cells"]
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream"
    ]
    assert f"ROOT {stage.resolve()}\n" in "".join(streams)


# ------------------------------------------------------------------- where a run records its claims

CLAIMING = DUMMY + textwrap.dedent(
    """
    # %%
    from ltvlib.book.scorecard import Claim, record_claims
    record_claims("00_claims", [Claim(paper_claim=1, key="k", statement="s.", paper="p", ours="o",
                  checks={"c": True}, evidence="ch00-x", evidence_title="t")], model=model, profile=profile, seed=seed)
    """
)


def test_claims_root_is_the_repository_only_for_the_default_setting(tmp_path: Path) -> None:
    assert book.claims_root(tmp_path, params()) == tmp_path
    assert book.claims_root(tmp_path, params(device="cuda")) == tmp_path
    for other in (params(profile="smoke"), params(seed=2), params(model="gemma3-270m"), params(n=5)):
        assert book.claims_root(tmp_path, other) == book.staging_dir(tmp_path, other)


def test_a_smoke_execution_records_its_claims_in_the_staging_dir(tmp_path: Path) -> None:
    """execute_chapter without an explicit book root, as the real-model tests call it: a smoke run must not
    touch the book's own results/claims (it once replaced the committed cpu verdicts)."""
    root = write_book(tmp_path / "book", {"format": "jb-book", "root": "intro",
                                          "chapters": [{"file": "chapters/00_claims"}]})
    ch = book.read_chapters(root)[0]
    ch.py.parent.mkdir(parents=True)
    ch.py.write_text(CLAIMING)
    committed = root / book.CLAIMS_DIR / "00_claims.json"
    committed.parent.mkdir(parents=True)
    committed.write_text("committed cpu verdicts")
    p = params(profile="smoke")
    book.execute_chapter(ch, p, tmp_path / "out.ipynb", work_dir=tmp_path / "work")
    assert committed.read_text() == "committed cpu verdicts"
    staged = json.loads((book.staging_dir(root, p) / book.CLAIMS_DIR / "00_claims.json").read_text())
    assert staged["profile"] == "smoke"


def test_build_reuses_current_outputs_renders_and_prints_what_the_readme_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bash scripts/book.sh`` with current committed outputs (the README's "Set up and build"): every chapter
    is reused ("up to date, skipped"), nothing executes, the HTML is still rendered; ``--force`` re-executes."""
    root = write_book(tmp_path, {"format": "jb-book", "root": "intro", "chapters": [{"file": "chapters/00_dummy"}]})
    ch = book.read_chapters(root)[0]
    ch.py.parent.mkdir(parents=True)
    ch.py.write_text(DUMMY)
    rendered: list[Path] = []
    monkeypatch.setattr(book, "build_html", lambda r, strict=True, output_dir=None: rendered.append(r))
    book.build(root, params())
    first = capsys.readouterr().out
    assert "[ltv-book] 00_dummy: executing" in first and rendered == [root]
    executed = ch.ipynb.read_bytes()

    book.build(root, params())
    again = capsys.readouterr().out
    assert "[ltv-book] 00_dummy: up to date, skipped" in again
    assert "[ltv-book] executed in 0.0 s total" in again and "executing" not in again
    assert ch.ipynb.read_bytes() == executed, "a current notebook is reused as it is"
    assert rendered == [root, root], "the HTML is rendered even when nothing executed"

    book.build(root, params(), force=True)
    assert "[ltv-book] 00_dummy: executing" in capsys.readouterr().out

    # the README shows these lines for the real book
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for line in ("[ltv-book] 00_overview: up to date, skipped", "[ltv-book] executed in 0.0 s total",
                 "[ltv-book] HTML: <repo>/_build/html/index.html", "--force"):
        assert line in readme, line


def test_outputs_current_follows_the_default_stamp(tmp_path: Path) -> None:
    root = write_book(tmp_path)
    ch = book.read_chapters(root)[0]
    ch.py.parent.mkdir(parents=True)
    ch.py.write_text(DUMMY)
    assert not book.outputs_current(root, ch)  # no notebook
    stamp = book.make_stamp(ch, params())
    ch.ipynb.write_text(json.dumps({"cells": [], "metadata": {"ltvbook": stamp}, "nbformat": 4, "nbformat_minor": 5}))
    assert book.outputs_current(root, ch)
    smoke = book.make_stamp(ch, params(profile="smoke"))
    ch.ipynb.write_text(json.dumps({"cells": [], "metadata": {"ltvbook": smoke}, "nbformat": 4, "nbformat_minor": 5}))
    assert not book.outputs_current(root, ch)  # executed, but not in the committed setting
    ch.ipynb.write_text(json.dumps({"cells": [], "metadata": {"ltvbook": stamp}, "nbformat": 4, "nbformat_minor": 5}))
    ch.py.write_text(DUMMY + "\n# edited\n")
    assert not book.outputs_current(root, ch)  # the source changed since
