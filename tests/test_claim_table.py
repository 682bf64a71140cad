"""The chapters' claim table (ltvlib.book.claim_table): paper beside ours, right-aligned numbers, the verdict."""

from __future__ import annotations

import pytest

from ltvlib.book.claim_table import DASH, ClaimRow, claim_table, number_cells
from ltvlib.book.scorecard import Claim, direction_rule, not_testable
from ltvlib.stats import Estimate


def _claim(key: str, est: Estimate | None) -> Claim:
    if est is None:
        return Claim(paper_claim=1, key=key, statement="s", paper="p", ours="o", evidence="ch00-x",
                     evidence_title="t", rule=not_testable("nothing learned"))
    return Claim(paper_claim=1, key=key, statement="s", paper="p", ours="o", evidence="ch00-x", evidence_title="t",
                 rule=direction_rule(est.value, est.interval), intervals={"LTV": Estimate(0.6, 0.5, 0.7, n=50),
                                                                           "LTV − FV": est})


def test_rows_show_the_difference_right_aligned_with_n_seeds_and_badge() -> None:
    gap = Estimate(0.16, 0.128, 0.192, n=1250, seeds=3, difference=True)
    text = claim_table([ClaimRow(_claim("a", gap), "LTV beats FV | mid", "83.49 % (Table 1)"),
                        ClaimRow(_claim("b", gap), "accuracy", "–", headline="LTV", verdict=False),
                        ClaimRow(_claim("c", None), "untested", "no number")])
    lines = text.splitlines()
    assert lines[0] == "| claim | paper | ours | 95 % interval | n | seeds | verdict |"
    assert lines[1] == "|:---|:---|---:|---:|---:|---:|:---|"
    assert lines[2] == ("| LTV beats FV \\| mid | 83.49 % (Table 1) | +16.0 pts | [+12.8, +19.2] | 1,250 | 3 | "
                        "{verdict}`reproduced` |")
    assert "| 60.0 % | [50.0, 70.0] |" in lines[3] and lines[3].endswith(f"| {DASH} |")
    assert lines[4] == f"| untested | no number | {DASH} | {DASH} | {DASH} | {DASH} | {{verdict}}`not testable at this scale` |"
    assert "..." not in text


def test_tasks_column_only_when_a_row_names_its_tasks() -> None:
    gap = Estimate(-0.02, -0.05, 0.01, n=100, difference=True)
    text = claim_table([ClaimRow(_claim("a", gap), "x", "y", tasks="6 of 7 (no RTE)")])
    assert "| tasks |" in text.splitlines()[0] and "6 of 7 (no RTE)" in text and "inconclusive" in text


def test_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match="at least one row"):
        claim_table([])
    gap = Estimate(0.1, 0.0, 0.2, n=10, difference=True)
    with pytest.raises(ValueError, match="no interval 'FV'"):
        claim_table([ClaimRow(_claim("a", gap), "x", "y", headline="FV")])
    assert number_cells(None) == (DASH, DASH)


def test_wide_table_scrolls_and_never_truncates() -> None:
    import pandas as pd

    from ltvlib.book.claim_table import wide_table

    long = "x" * 300
    html = wide_table(pd.DataFrame({"a": [long, None]}, index=["r1", "r2"])).data
    assert html.startswith('<div class="ltv-scroll">') and long in html and "..." not in html
    assert f"<td>{DASH}</td>" in html
