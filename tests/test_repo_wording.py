"""The project's files speak to users: no pointers to the experiment log that left the repository and no
work-log numbering.

``bench/README.md`` holds the current figures and the command of each benchmark; the old running log
(``RESULTS.md``) and its run folders (``bench/runs*``) are gone, so a reference to them points nowhere, and a
numbered work session or ticket means nothing to a reader. History lives in git. The
check covers every file git tracks, or, outside a git checkout, every file under the repository, in the project's
text formats (code, docs, notebooks, configs; the CHANGELOG too), except the task data, whose texts are other
people's (SST-2 reviews, news) and may say anything.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".yml", ".yaml", ".toml", ".sh", ".cfg", ".txt", ".css", ".cff", ".bib"}
DATA_DIRS = ("data/", "tests/data/")
FORBIDDEN = {
    "the removed experiment log": re.compile(r"RESULTS\.md"),
    "the removed run folders": re.compile(r"bench/runs"),
    "a numbered work session": re.compile(r"\bsession\s+#?\d+", re.IGNORECASE),
    "a numbered issue": re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE),
    "a work round": re.compile(r"\bwork[- ]rounds?\b", re.IGNORECASE),
}


def project_files(root: Path = ROOT) -> list[str]:
    """Paths (relative, with ``/``) of the files to check: tracked by git, or all files without git."""
    if shutil.which("git") and (root / ".git").exists():
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
    else:
        names = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts]
    return sorted(n for n in names if Path(n).suffix in TEXT_SUFFIXES and not n.startswith(DATA_DIRS)
                  and n != Path(__file__).relative_to(root).as_posix())


def wording_problems(text: str, name: str) -> list[str]:
    """``name:line: <what> ('<match>')`` for each forbidden reference in ``text``."""
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in FORBIDDEN.items():
            for m in pattern.finditer(line):
                problems.append(f"{name}:{number}: {what} ({m.group(0)!r})")
    return problems


def test_project_files_carry_no_work_log_references() -> None:
    problems = []
    for name in project_files():
        path = ROOT / name
        if path.exists():  # a tracked file deleted in the working tree is not there to read
            problems += wording_problems(path.read_text(encoding="utf-8", errors="replace"), name)
    assert not problems, ("say the current fact, or point to bench/README.md and the script that measures it:\n"
                          + "\n".join(problems))


@pytest.mark.parametrize("text", [
    # the numbered examples are joined at run time, so this file itself cites no session or issue
    "see bench/RESULTS.md", "figures in bench/runs2/x.json", "measured in session " + "22", "(Session " + "3)",
    "issue" + " 16, point 6", "Issue" + " 13's acceptance", "as in issue #" + "4", "issues" + " 12 and 13",
    "the fifth work round",
])
def test_each_kind_of_reference_is_caught(text: str) -> None:
    assert wording_problems(text, "f.md"), text


@pytest.mark.parametrize("text", [
    "bench/README.md has the figures", "a test session changes nothing", "the pytest session's fixture",
    "a known issue of Gemma 3", "rounds of 3 seeds", "bench/floor.py --rounds 2",
])
def test_ordinary_words_pass(text: str) -> None:
    assert wording_problems(text, "f.md") == [], text


def test_task_data_and_this_file_are_left_out() -> None:
    files = project_files()
    assert "README.md" in files and "ltvlib/ltv.py" in files
    assert not any(f.startswith(DATA_DIRS) for f in files)
    assert "tests/test_repo_wording.py" not in files
