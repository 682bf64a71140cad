"""Intervals of ltvlib.stats against known values and invariants."""

from __future__ import annotations

import pytest

from ltvlib.stats import Proportion, wilson_interval


def test_wilson_known_value():
    # 50 of 100 at 95 %: the textbook Wilson interval is [0.4038, 0.5962]
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.40383, abs=1e-4) and hi == pytest.approx(0.59617, abs=1e-4)


@pytest.mark.parametrize("n", [1, 7, 200])
def test_wilson_contains_estimate_and_stays_in_unit_interval(n):
    for k in range(n + 1):
        lo, hi = wilson_interval(k, n)
        assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert wilson_interval(0, n)[0] == 0.0 and wilson_interval(n, n)[1] == 1.0


def test_wilson_narrows_with_n():
    assert wilson_interval(100, 200)[1] - wilson_interval(100, 200)[0] < wilson_interval(10, 20)[1] - wilson_interval(10, 20)[0]


@pytest.mark.parametrize("k,n", [(-1, 5), (6, 5), (0, 0)])
def test_wilson_rejects_bad_counts(k, n):
    with pytest.raises(ValueError, match="must"):
        wilson_interval(k, n)


def test_proportion_text():
    assert str(Proportion(87, 200)) == "43.5 % [36.8, 50.4] (n=200)"
