"""Shared pytest configuration for the ltv-book test suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.repo_guard import repository_guard

# tiny-model fixtures live in tests/models_fixtures.py
try:
    from tests.models_fixtures import *
except ImportError as exc:
    # only "the file isn't there yet" is tolerated; an import error *inside* it
    # must surface instead of turning into confusing "fixture not found" errors
    if getattr(exc, "name", None) not in ("tests", "tests.models_fixtures"):
        raise


def pytest_configure(config: pytest.Config) -> None:
    # realmodel tests run by default (CI runs them); deselect locally with -m "not realmodel"
    config.addinivalue_line(
        "markers",
        'realmodel: slow test on the real embedded model (smollm2-135m); run by default, skip with -m "not realmodel"',
    )
    # CI runs these too (.ci/run installs chromium and chromium-driver); deselect locally with -m "not browser"
    config.addinivalue_line(
        "markers",
        'browser: renders the built HTML in headless Chromium; run by default, skip with -m "not browser"',
    )


@pytest.fixture(scope="session", autouse=True)
def _repository_unchanged() -> Iterator[None]:
    """Fails the session (an error at the last test's teardown) when a test changed the repository: its
    committed claims under results/claims/, or any file git sees (tests/repo_guard.py)."""
    yield from repository_guard(Path(__file__).resolve().parents[1])


# The chapters' smoke executions take 20-160 s each (a timestamped rerun of .ci/run's run 1, 2026-12-03: 07 157 s, 06 150,
# 08 100, 02 85, 03 72, 01 56, 05 55, 00 37, 04 22) against well under a second for most tests. Under
# pytest-xdist's default `load` scheduling they all sat queued on one worker at the end of the run while the
# other idled (run 1: 1013 s, load average ~1). scripts/test.sh schedules with `--dist worksteal` (an idle worker
# takes half of the busiest worker's queue) and this hook starts the slow ones first, longest first, so the tail
# of the run is short tests that balance out. Order only: every test still runs, on either worker.
_SLOW_FIRST = ("07_", "06_", "08_", "02_", "03_", "01_", "05_", "00_", "04_")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        if getattr(item, "originalname", None) != "test_chapter_executes_under_papermill_smoke":
            return len(_SLOW_FIRST) + 1
        chapter = item.name.split("[", 1)[-1]
        return next((i for i, prefix in enumerate(_SLOW_FIRST) if chapter.startswith(prefix)), len(_SLOW_FIRST))

    items.sort(key=rank)  # stable: every other test keeps its collected order
