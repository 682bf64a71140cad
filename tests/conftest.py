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
