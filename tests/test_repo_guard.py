"""The guard that fails a test session which changed the repository (tests/repo_guard.py), on throwaway repos."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.repo_guard import changed_paths, repo_snapshot

REPO = Path(__file__).resolve().parents[1]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git_repo(root: Path) -> Path:
    """A committed repo with one claims file and an ignored _build/."""
    (root / "results" / "claims").mkdir(parents=True)
    (root / "results" / "claims" / "00_a.json").write_text('{"verdict": "reproduced"}\n')
    (root / "notes.md").write_text("notes\n")
    (root / ".gitignore").write_text("_build/\n__pycache__/\n")
    for cmd in (["init", "-q"], ["add", "-A"],
                ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True, capture_output=True)
    return root


@needs_git
def test_snapshot_sees_claims_tracked_and_untracked_files_but_not_ignored_ones(tmp_path: Path) -> None:
    root = git_repo(tmp_path / "repo")
    before = repo_snapshot(root)
    (root / "_build" / "runs").mkdir(parents=True)
    (root / "_build" / "runs" / "x.json").write_text("{}")  # ignored: a staging dir may be written
    assert changed_paths(before, repo_snapshot(root)) == []

    claim = root / "results" / "claims" / "00_a.json"
    claim.write_text('{"verdict": "partly"}\n')
    assert changed_paths(before, repo_snapshot(root)) == ["claims:00_a.json", "git:results/claims/00_a.json"]
    claim.write_text('{"verdict": "reproduced"}\n')  # restored byte for byte: nothing changed
    assert changed_paths(before, repo_snapshot(root)) == []

    (root / "chapters").mkdir()
    (root / "chapters" / "00_a.ipynb").write_text("{}")  # an executed notebook left in the tree
    assert changed_paths(before, repo_snapshot(root)) == ["git:chapters/00_a.ipynb"]


@needs_git
def test_a_file_modified_before_the_session_still_counts(tmp_path: Path) -> None:
    root = git_repo(tmp_path / "repo")
    (root / "notes.md").write_text("edited by hand before the tests\n")
    before = repo_snapshot(root)
    assert changed_paths(before, repo_snapshot(root)) == []
    (root / "notes.md").write_text("edited again by a test\n")
    assert changed_paths(before, repo_snapshot(root)) == ["git:notes.md"]
    (root / "notes.md").unlink()
    assert changed_paths(before, repo_snapshot(root)) == ["git:notes.md"]


def test_without_git_the_claims_are_still_compared(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    (root / "results" / "claims").mkdir(parents=True)
    before = repo_snapshot(root)
    (root / "results" / "claims" / "01_b.json").write_text("{}")
    assert changed_paths(before, repo_snapshot(root)) == ["claims:01_b.json"]


def run_session(root: Path, test_body: str) -> subprocess.CompletedProcess[str]:
    """A pytest session in ``root`` with the guard as its session fixture, like tests/conftest.py."""
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(textwrap.dedent("""\
        from pathlib import Path
        import pytest
        from tests.repo_guard import repository_guard

        @pytest.fixture(scope="session", autouse=True)
        def _repository_unchanged():
            yield from repository_guard(Path(__file__).resolve().parent)
        """))
    (root / "test_it.py").write_text(textwrap.dedent(test_body))
    for cmd in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "tests"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root)],
                          cwd=root, env=env, capture_output=True, text=True, check=False)


@needs_git
def test_the_session_fails_when_a_test_overwrites_a_claim(tmp_path: Path) -> None:
    root = git_repo(tmp_path / "repo")
    clean = run_session(root, "def test_clean(tmp_path):\n    (tmp_path / 'x.json').write_text('{}')\n")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    leaky = run_session(root, """\
        from pathlib import Path

        def test_leaks():
            (Path(__file__).parent / "results" / "claims" / "00_a.json").write_text('{"verdict": "smoke"}')
        """)
    assert leaky.returncode != 0
    assert "1 passed, 1 error" in leaky.stdout
    assert "changed the repository" in leaky.stdout and "claims:00_a.json" in leaky.stdout
