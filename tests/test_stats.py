"""Intervals of ltvlib.stats against known values and invariants."""

from __future__ import annotations

import numpy as np
import pytest

from ltvlib import stats
from ltvlib.stats import (
    Estimate,
    Proportion,
    format_estimate,
    paired_bootstrap_difference,
    proportion_estimate,
    rows_summary,
    seed_interval,
    wilson_interval,
)


def test_wilson_known_value():
    # 50 of 100 at 95 %: the textbook Wilson interval is [0.4038, 0.5962]
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.40383, abs=1e-4) and hi == pytest.approx(0.59617, abs=1e-4)


@pytest.mark.parametrize("n", [1, 7, 20, 24, 100, 200])
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


# ----------------------------------------------------------------------------- Estimate and bootstraps


def test_proportion_estimate_is_the_wilson_interval():
    est = Proportion(87, 200).estimate()
    assert (est.value, est.interval) == (87 / 200, wilson_interval(87, 200))
    assert (est.n, est.seeds, est.method, est.difference) == (200, 1, "wilson", False)
    assert proportion_estimate(87, 200) == est


def test_format_estimate():
    assert format_estimate(Estimate(0.435, 0.368, 0.504, n=200, seeds=3)) == "43.5 ± 6.9 % (n=200, seeds=3)"
    diff = Estimate(0.12, 0.041, 0.2, n=64, difference=True)
    # the ± is the larger side of an asymmetric interval: 0.2 - 0.12 = 8.0 points
    assert format_estimate(diff) == "+12.0 ± 8.0 pts (n=64, seeds=1)"
    assert format_estimate(diff, bounds=True) == "+12.0 ± 8.0 pts [+4.1, +20.0] (n=64, seeds=1)"
    assert str(diff) == format_estimate(diff)


def test_estimate_round_trips_and_rejects_inconsistent_numbers():
    est = Estimate(0.1, -0.02, 0.2, n=200, seeds=3, method="paired bootstrap", resamples=2000, difference=True)
    assert Estimate.from_dict(est.to_dict()) == est
    with pytest.raises(ValueError, match="outside its interval"):
        Estimate(0.5, 0.6, 0.7, n=10)
    with pytest.raises(ValueError, match="finite"):
        Estimate(float("nan"), 0.0, 1.0, n=10)
    with pytest.raises(ValueError, match="n >= 1"):
        Estimate(0.5, 0.4, 0.6, n=0)


def _bern(rng: np.random.Generator, p: float, shape: tuple[int, ...]) -> np.ndarray:
    return rng.random(shape) < p


def test_identical_methods_give_zero_and_an_interval_around_it():
    rng = np.random.default_rng(0)
    a = _bern(rng, 0.5, (200,))
    same = paired_bootstrap_difference(a, a.copy())
    assert same.value == 0.0 and same.interval == (0.0, 0.0)  # every resample differs by exactly 0
    # two independent draws of the same method: the interval admits no difference
    d = paired_bootstrap_difference(a, _bern(rng, 0.5, (200,)))
    assert d.low < 0.0 < d.high


def test_a_large_true_difference_excludes_zero():
    rng = np.random.default_rng(1)
    d = paired_bootstrap_difference(_bern(rng, 0.9, (200,)), _bern(rng, 0.2, (200,)))
    assert 0.0 < d.low < d.value < d.high
    assert d.value == pytest.approx(0.7, abs=0.1)
    flipped = paired_bootstrap_difference(_bern(rng, 0.2, (200,)), _bern(rng, 0.9, (200,)))
    assert flipped.high < 0.0


def test_bootstrap_is_deterministic_for_a_seed():
    rng = np.random.default_rng(2)
    a, b = _bern(rng, 0.6, (3, 120)), _bern(rng, 0.5, (3, 120))
    assert paired_bootstrap_difference(a, b, seed=7) == paired_bootstrap_difference(a, b, seed=7)
    assert seed_interval(a, seed=7) == seed_interval(a, seed=7)
    assert paired_bootstrap_difference(a, b, seed=7).interval != paired_bootstrap_difference(a, b, seed=8).interval


def test_pairing_narrows_the_interval_of_correlated_methods():
    # b is a with 10 of 200 answers flipped: the paired interval is far narrower than two independent
    # Wilson intervals would suggest (each about ±7 points)
    rng = np.random.default_rng(3)
    a = _bern(rng, 0.5, (200,))
    b = a.copy()
    b[:10] = ~b[:10]
    d = paired_bootstrap_difference(a, b)
    wilson_half = (wilson_interval(int(a.sum()), 200)[1] - wilson_interval(int(a.sum()), 200)[0]) / 2
    assert d.high - d.low < wilson_half


def test_seed_interval_with_one_seed_is_the_query_bootstrap_and_seeds_widen_it():
    rng = np.random.default_rng(4)
    one = _bern(rng, 0.5, (200,))
    single = seed_interval(one)
    assert single.value == pytest.approx(one.mean()) and (single.n, single.seeds) == (200, 1)
    assert seed_interval(one[None, :]) == single
    # three identical seeds: no seed variation, the same draws of queries
    same = seed_interval(np.stack([one, one, one]))
    assert same.seeds == 3 and same.interval == pytest.approx(single.interval, abs=1e-12)
    # three seeds at 30 %, 50 %, 70 %: the interval must cover the seed spread, not just the query sampling
    spread = np.stack([_bern(rng, p, (200,)) for p in (0.3, 0.5, 0.7)])
    pooled = seed_interval(spread.reshape(1, -1))  # the same 600 answers as if they were one seed's queries
    assert seed_interval(spread).high - seed_interval(spread).low > 1.5 * (pooled.high - pooled.low)


@pytest.mark.parametrize("kind", ["proportion", "difference"])
def test_coverage_on_synthetic_data(kind):
    """Over 150 synthetic experiments with a known truth, the 95 % intervals cover it about 95 % of the time
    (a percentile bootstrap runs slightly under; below 85 % would be a broken interval: 5 standard errors)."""
    rng = np.random.default_rng(5)
    covered = 0
    for rep in range(150):
        if kind == "proportion":
            # 3 seeds on shared queries: half the queries are hard (20 %), half easy (80 %), and each seed
            # shifts every query by N(0, 0.05), so the truth, averaged over queries and seeds, is 50 %
            difficulty = np.where(rng.random(150) < 0.5, 0.2, 0.8)
            p = np.clip(difficulty + rng.normal(0.0, 0.05, (3, 1)), 0.0, 1.0)
            est, truth = seed_interval(rng.random((3, 150)) < p, n_resamples=1000, seed=rep), 0.5
        else:
            a, b = _bern(rng, 0.6, (150,)), _bern(rng, 0.45, (150,))
            est, truth = paired_bootstrap_difference(a, b, n_resamples=1000, seed=rep), 0.15
        covered += est.low <= truth <= est.high
    assert 0.85 <= covered / 150 <= 1.0


def test_chunked_resampling_matches_in_distribution(monkeypatch):
    rng = np.random.default_rng(6)
    a = _bern(rng, 0.5, (2, 400))
    whole = seed_interval(a)
    monkeypatch.setattr(stats, "_CHUNK_FLOATS", 400 * 64)  # 64 resamples per chunk: 32 chunks
    chunked = seed_interval(a)
    assert chunked.value == whole.value
    assert chunked.high - chunked.low == pytest.approx(whole.high - whole.low, rel=0.15)


def test_torch_input_is_accepted():
    torch = pytest.importorskip("torch")
    a = torch.tensor([1, 0, 1, 1, 0, 1, 1, 1] * 10, dtype=torch.bool)
    assert seed_interval(a) == seed_interval(a.numpy())


@pytest.mark.parametrize(
    ("a", "b", "kw", "match"),
    [
        ([1, 0, 1], [1, 0], {}, "same queries"),
        ([1, 0, 2], [1, 0, 1], {}, r"\[0, 1\]"),
        ([[[1]]], [[[1]]], {}, "shape"),
        ([1, 0, 1], [1, 0, 1], {"n_resamples": 10}, "n_resamples"),
        ([1, 0, 1], [1, 0, 1], {"confidence": 1.5}, "confidence"),
    ],
)
def test_bootstrap_rejects_bad_input(a, b, kw, match):
    with pytest.raises(ValueError, match=match):
        paired_bootstrap_difference(np.array(a), np.array(b), **kw)


def test_paired_difference_counts_the_seeds_of_the_seeded_side():
    # an LTV with 3 seeds against a deterministic baseline: the difference rests on 3 seeds, either order
    rng = np.random.default_rng(5)
    ltv = np.stack([_bern(rng, 0.6, (150,)) for _ in range(3)])
    fv = _bern(rng, 0.3, (150,))
    assert paired_bootstrap_difference(ltv, fv).seeds == 3
    assert paired_bootstrap_difference(fv, ltv).seeds == 3
    assert paired_bootstrap_difference(fv, fv).seeds == 1
    assert paired_bootstrap_difference(ltv, fv).draws == 0


def test_random_draws_are_not_seeds():
    # a random control's rows are draws: counted as draws, never as training seeds
    rng = np.random.default_rng(6)
    ltv = _bern(rng, 0.6, (150,))
    random_vectors = np.stack([_bern(rng, 0.1, (150,)) for _ in range(20)])
    ctrl = seed_interval(random_vectors, rows="draws")
    assert (ctrl.seeds, ctrl.draws) == (1, 20)
    assert ctrl.interval == pytest.approx(seed_interval(random_vectors).interval)  # the interval is unchanged
    assert seed_interval(random_vectors).seeds == 20  # unmarked rows are seeds
    d = paired_bootstrap_difference(ltv, random_vectors, rows=("auto", "draws"))
    assert (d.seeds, d.draws) == (1, 20)
    d3 = paired_bootstrap_difference(np.stack([ltv, ltv, ltv]), random_vectors, rows=("seeds", "draws"))
    assert (d3.seeds, d3.draws) == (3, 20)
    assert "draws=20" in format_estimate(d) and "draws" not in format_estimate(seed_interval(random_vectors))
    assert Estimate.from_dict(d.to_dict()) == d
    assert Estimate.from_dict({k: v for k, v in d.to_dict().items() if k != "draws"}).draws == 0  # old records


def test_a_difference_has_the_seeds_of_its_least_seeded_trained_side():
    rng = np.random.default_rng(7)
    one = _bern(rng, 0.5, (150,))
    three = np.stack([_bern(rng, 0.6, (150,)) for _ in range(3)])
    # marked as a trained vector, a single row is one seed: a 1-seed LTV minus a 3-seed one rests on 1 seed
    assert paired_bootstrap_difference(one, three, rows=("seeds", "seeds")).seeds == 1
    # unmarked, a single row may be a deterministic method, which does not lower the count
    assert paired_bootstrap_difference(one, three).seeds == 3
    assert rows_summary([(3, "seeds"), (2, "auto"), (1, "auto"), (10, "draws"), (4, "draws")]) == (2, 10)
    assert rows_summary([(1, "auto"), (1, "auto")]) == (1, 0)
    with pytest.raises(ValueError, match="row kind"):
        rows_summary([(2, "replicates")])
    with pytest.raises(ValueError, match="row kind"):
        seed_interval(three, rows="runs")
    with pytest.raises(ValueError, match="draws"):
        Estimate(0.5, 0.4, 0.6, n=10, draws=-1)
