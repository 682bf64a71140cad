"""The GitHub workflows: actionlint (with shellcheck on their ``run:`` scripts) finds nothing in any of them, and the
GPU build's chapter matrix runs in the order the cache needs (00 trains the vectors the others reuse, then 01,
then 02-08 in parallel, then the CPU job that assembles the book), its cache keyed by model, profile and code key.

actionlint and shellcheck come with the ``dev`` extra (``scripts/book.sh --setup-only`` installs it): a missing
binary fails here rather than skipping the check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"


def _tool(name: str) -> str:
    """``name`` beside this Python (the venv's bin, where the dev extra puts it), else on PATH; a failure if absent."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]' (or bash scripts/book.sh --setup-only) "
                    f"installs it; the workflow files are not checked without it")
    return found


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as True
    data["on"] = data.pop(True, data.get("on"))
    return data


def _needs(job: dict[str, Any]) -> set[str]:
    needs = job.get("needs", [])
    return {needs} if isinstance(needs, str) else set(needs)


def test_actionlint_finds_nothing_in_any_workflow():
    files = sorted(WORKFLOWS.glob("*.yml")) + sorted(WORKFLOWS.glob("*.yaml"))
    assert {f.name for f in files} >= {"book.yml", "book-chapter.yml", "pages.yml"}
    shellcheck = _tool("shellcheck")
    env = {**os.environ, "PATH": f"{Path(shellcheck).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run([_tool("actionlint"), "-no-color", *[str(f.relative_to(ROOT)) for f in files]], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, f"actionlint found problems:\n{out.stdout}{out.stderr}"


def test_actionlint_reports_a_broken_workflow(tmp_path):
    """The check can fail: an undefined job in `needs` and a shell error in `run` are both reported."""
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    needs: missing\n    steps:\n"
                   "      - run: echo $UNQUOTED_VAR > \"$\n", encoding="utf-8")
    out = subprocess.run([_tool("actionlint"), "-no-color", str(bad.relative_to(tmp_path))], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1 and "missing" in out.stdout


def test_chapter_matrix_runs_in_dependency_order():
    from ltvlib.book.layout import read_chapters

    jobs = _load("book.yml")["jobs"]
    assert set(jobs) == {"setup", "overview", "extracted", "chapters", "assemble"}
    assert _needs(jobs["setup"]) == set()
    assert _needs(jobs["overview"]) == {"setup"}
    assert "overview" in _needs(jobs["extracted"])
    assert "extracted" in _needs(jobs["chapters"])
    assert _needs(jobs["assemble"]) >= {"setup", "overview", "extracted", "chapters"}
    assert jobs["overview"]["with"]["chapter"] == "00"
    assert jobs["extracted"]["with"]["chapter"] == "01"
    matrix = jobs["chapters"]["strategy"]["matrix"]["chapter"]
    numbered = sorted(c.name[:2] for c in read_chapters(ROOT) if c.name[:2].isdigit())
    assert ["00", "01", *matrix] == numbered  # every chapter exactly once
    assert jobs["chapters"]["with"]["chapter"] == "${{ matrix.chapter }}"
    assert jobs["chapters"]["strategy"]["fail-fast"] is False  # one chapter's failure does not cancel the others
    for name in ("overview", "extracted", "chapters"):
        assert jobs[name]["uses"] == "./.github/workflows/book-chapter.yml"
        assert jobs[name]["with"]["cache-key"] == "${{ needs.setup.outputs.cache-key }}"
    # the chapters run on GPU runners, setup and assembly on CPU ones
    assert _load("book-chapter.yml")["jobs"]["chapter"]["runs-on"] == ["self-hosted", "gpu"]
    assert jobs["assemble"]["runs-on"] == jobs["setup"]["runs-on"] == "ubuntu-latest"


def test_cache_key_holds_model_profile_and_code_key():
    setup = _load("book.yml")["jobs"]["setup"]
    step = next(s for s in setup["steps"] if s.get("id") == "keys")
    assert step["env"] == {"MODEL": "${{ inputs.model }}", "PROFILE": "${{ inputs.profile }}"}
    line = next(line for line in step["run"].splitlines() if line.startswith('echo "cache-key='))
    assert line == 'echo "cache-key=ltv-${MODEL}-${PROFILE}-${code_key}" >> "$GITHUB_OUTPUT"'
    assert 'code_key="$(python -c \'from ltvlib.cache import code_version; print(code_version())\')"' in step["run"]

    steps = _load("book-chapter.yml")["jobs"]["chapter"]["steps"]
    restore = next(s for s in steps if s.get("uses", "").startswith("actions/cache/restore@"))
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save@"))
    # each job saves under its own key and restores the newest save of the same model, profile and code key
    assert restore["with"]["key"] == save["with"]["key"] == "${{ inputs.cache-key }}-${{ inputs.chapter }}-${{ github.run_id }}"
    assert restore["with"]["restore-keys"].strip() == "${{ inputs.cache-key }}-"
    assert restore["with"]["path"] == save["with"]["path"] == ".ltv-cache"
    run = next(s for s in steps if s.get("name") == "Execute the chapter")["run"]
    assert ('python -m ltvlib.book build --chapters "$CHAPTER" --model "$MODEL" --profile "$PROFILE" --device "$DEVICE"'
            in run)


def test_assembly_renders_with_the_chapter_jobs_parameters():
    """A chapter's stamp holds its parameters (device included): the CPU job that assembles the book passes the
    same ones, so that every chapter's stamp matches and nothing re-executes there."""
    book = _load("book.yml")
    chapter_env = _load("book-chapter.yml")["jobs"]["chapter"]["env"]
    assemble = book["jobs"]["assemble"]
    for name, value in (("MODEL", "${{ inputs.model }}"), ("PROFILE", "${{ inputs.profile }}"),
                        ("DEVICE", "${{ inputs.device }}")):
        assert assemble["env"][name] == chapter_env[name] == value
    render = next(s for s in assemble["steps"] if s.get("name", "").startswith("Render"))["run"]
    assert 'python -m ltvlib.book build --model "$MODEL" --profile "$PROFILE" --device "$DEVICE"' in render
    assert set(book["on"]["workflow_dispatch"]["inputs"]["device"]["options"]) == {"auto", "map"}
