"""A chapter's summary table (ltvlib.study.claim_summary): fixed decimals, intervals and n, never truncated."""

from __future__ import annotations

import pytest

from ltvlib.stats import Estimate
from ltvlib.study.claim_summary import SummaryRow, estimate_cell, summary_markdown


def test_estimate_cell_gives_value_interval_and_n() -> None:
    assert estimate_cell(Estimate(0.555, 0.486, 0.623, n=200)) == "55.5 % [48.6, 62.3], n=200"
    diff = Estimate(0.12, 0.041, 0.199, n=600, seeds=3, draws=5, difference=True)
    assert estimate_cell(diff) == "+12.0 pts [+4.1, +19.9], n=600, seeds=3, draws=5"
    assert estimate_cell(None, why="no LTV learned") == "no LTV learned"
    assert estimate_cell(None) == "\u2013"


def test_summary_markdown_right_aligns_the_numbers_and_escapes_pipes() -> None:
    rows = [SummaryRow("OV keeps the gain", "83 % → 52 % (table)", "θ_OV at |θ| − random",
                       Estimate(0.3, 0.1, 0.5, n=16, difference=True), "reproduced"),
            SummaryRow("U shape", "figure", "", None, "not testable at this scale", why="too few layers")]
    text = summary_markdown(rows)
    lines = text.splitlines()
    assert lines[1] == "|:---|:---|---:|:---|" and len(lines) == 4
    assert "θ_OV at \\|θ\\| − random: +30.0 pts [+10.0, +50.0], n=16" in lines[2]
    assert lines[3] == "| U shape | figure | too few layers | {verdict}`not testable at this scale` |"
    assert "..." not in text
    with pytest.raises(ValueError, match="at least one row"):
        summary_markdown([])
