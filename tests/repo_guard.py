"""The test suite must leave the repository as it found it.

:func:`repo_snapshot` fingerprints what a test could overwrite by mistake: every ``results/claims/*.json``
(the committed verdicts a smoke run once replaced) and, where git is available, every path ``git status``
reports (modified, deleted or untracked, ignored files excluded) with its content hash, so a change to a file
that was already modified before the session counts too. :func:`repository_guard` is the session fixture's
body: it snapshots at the start and fails the session at the end, naming each changed path.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

CLAIMS_GLOB = "results/claims/*.json"


def _digest(path: Path) -> str:
    if path.is_symlink():
        return "symlink:" + str(path.readlink())
    if path.is_dir():  # git reports an untracked nested repository as a directory
        return "dir"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def _git_status(root: Path) -> list[tuple[str, str]] | None:
    """``(status, path)`` for every path git reports under ``root``; None without git or outside a work tree."""
    git = shutil.which("git")
    if git is None:
        return None
    res = subprocess.run(
        [git, "-C", str(root), "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", "."],
        capture_output=True, check=False,
    )
    if res.returncode != 0:
        return None
    out: list[tuple[str, str]] = []
    fields = res.stdout.decode("utf-8", "surrogateescape").split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if not entry:
            continue
        status, path = entry[:2], entry[3:]
        out.append((status, path))
        if status[0] in "RC":  # a rename or copy is followed by its source path
            out.append((status, fields[i]))
            i += 1
    return out


def repo_snapshot(root: Path) -> dict[str, str]:
    """Fingerprint of ``root``: ``"claims:<name>"`` and ``"git:<path>"`` keys -> status and content hash."""
    snap = {f"claims:{p.name}": _digest(p) for p in sorted(root.glob(CLAIMS_GLOB))}
    status = _git_status(root)
    if status is not None:
        # git's paths are relative to the top of the work tree, which may be above root
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        for code, path in status:
            snap[f"git:{path}"] = f"{code} {_digest(Path(top) / path)}"
    return snap


def changed_paths(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Keys whose fingerprint differs, appeared or vanished, sorted."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def repository_guard(root: Path) -> Iterator[None]:
    """Body of a session fixture: snapshot ``root``, run the session, fail it if anything changed."""
    before = repo_snapshot(root)
    yield
    changed = changed_paths(before, repo_snapshot(root))
    if changed:
        pytest.fail(
            f"the test session changed the repository at {root} (tests must write to tmp_path or a staging "
            f"dir, never to the committed tree): {', '.join(changed)}",
            pytrace=False,
        )
