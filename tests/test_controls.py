"""Random-vector controls: draws have the vector's norm per site row and are seeded; the summary's p-value and
percentile follow their definitions on synthetic measurements."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ltvlib.analysis.controls import control_distribution, control_excess, random_like, summarise_control


def test_random_like_norms_shapes_and_determinism():
    torch.manual_seed(0)
    vector = torch.randn(3, 64) * torch.tensor([[0.5], [2.0], [7.0]])  # three sites of different norms
    draws = random_like(vector, 5, seed=11)
    assert draws.shape == (5, 3, 64) and draws.dtype == vector.dtype
    torch.testing.assert_close(draws.norm(dim=-1), vector.norm(dim=-1).expand(5, 3), rtol=1e-6, atol=0)
    assert torch.equal(draws, random_like(vector, 5, seed=11))
    assert not torch.equal(draws, random_like(vector, 5, seed=12))
    # a longer run starts with the same draws, and the directions are not the vector's own
    assert torch.equal(random_like(vector, 7, seed=11)[:5], draws)
    cos = torch.nn.functional.cosine_similarity(draws, vector.expand_as(draws), dim=-1)
    assert cos.abs().max() < 0.6  # random directions in 64 dimensions: |cos| ~ 1/8
    one = random_like(vector[0], 2, seed=0)
    assert one.shape == (2, 64)
    torch.testing.assert_close(one.norm(dim=-1), vector[0].norm().expand(2), rtol=1e-6, atol=0)


def test_random_like_rejects_bad_input():
    with pytest.raises(ValueError, match="n_draws"):
        random_like(torch.ones(4), 0, seed=0)
    with pytest.raises(ValueError, match="non-zero norm"):
        random_like(torch.zeros(2, 4), 3, seed=0)
    with pytest.raises(ValueError, match="non-zero norm"):
        random_like(torch.tensor([1.0, float("nan")]), 3, seed=0)


def test_summary_follows_its_definitions():
    s = summarise_control(0.5, [0.1, 0.5, 0.9])
    assert s.p_value == pytest.approx((1 + 2) / 4)  # draws >= 0.5: two
    assert s.percentile == pytest.approx(1 / 3)  # strictly below: one
    assert s.mean == pytest.approx(0.5) and s.n_draws == 3
    assert 0.1 <= s.low < s.high <= 0.9
    less = summarise_control(0.5, [0.1, 0.5, 0.9], alternative="less")
    assert less.p_value == pytest.approx((1 + 2) / 4)
    top = summarise_control(2.0, [0.1, 0.5, 0.9])
    assert top.p_value == pytest.approx(1 / 4) and top.percentile == 1.0
    assert summarise_control(-1.0, [0.1, 0.5, 0.9]).p_value == 1.0
    assert s.to_dict()["draws"] == [0.1, 0.5, 0.9]
    with pytest.raises(ValueError, match="alternative"):
        summarise_control(0.5, [0.1], alternative="two-sided")
    with pytest.raises(ValueError, match="at least one draw"):
        summarise_control(0.5, [])
    with pytest.raises(ValueError, match="finite"):
        summarise_control(float("nan"), [0.1])


def test_control_distribution_on_a_synthetic_measure():
    """The measure is the cosine with a fixed direction u. The vector along u scores 1, above every random
    draw (p = 1 / (1 + n), percentile 1); a vector orthogonal to u sits inside the draws' distribution."""
    d, n = 32, 199
    u = torch.zeros(d)
    u[0] = 1.0

    def measure(v):
        return float(torch.nn.functional.cosine_similarity(v, u, dim=0))

    along = control_distribution(measure, 3 * u, n, seed=4)
    assert along.value == pytest.approx(1.0)
    assert along.p_value == pytest.approx(1 / (1 + n)) and along.percentile == 1.0
    # cosines of random directions in d dims: mean 0, sd 1/sqrt(d); the 95 % range is about +-2/sqrt(d)
    assert abs(along.mean) < 4 / (d**0.5 * n**0.5)
    assert -3.5 / d**0.5 < along.low < -1 / d**0.5 and 1 / d**0.5 < along.high < 3.5 / d**0.5
    ortho = torch.zeros(d)
    ortho[1] = 3.0
    inside = control_distribution(measure, ortho, n, seed=4)
    assert inside.draws == along.draws  # the same seed, the same draws
    assert 0.25 < inside.p_value < 0.75
    given = control_distribution(measure, ortho, n, seed=4, value=0.0)
    assert given.p_value == inside.p_value


def test_control_excess_mean_and_slope_follow_their_definitions():
    layers = np.array([2.0, 6.0, 10.0, 14.0])
    ltv = 0.1 + 0.05 * layers  # rises by 0.6 over the span of 12 layers
    draws = np.stack([0.2 + 0.0 * layers + 0.01 * i for i in range(4)])  # flat control around 0.215
    slope = control_excess(ltv, draws, x=layers, statistic="slope", n_resamples=400, seed=1)
    assert slope["ltv"].value == pytest.approx(0.6)
    assert slope["control"].value == pytest.approx(0.0, abs=1e-12)
    assert slope["excess"].value == pytest.approx(0.6) and slope["excess"].difference
    assert slope["excess"].low > 0 and slope["k"] == 4 and slope["n_draws"] == 4 and slope["excess"].n == 4
    # the control's draws are counted as draws, the LTV's own value has none
    assert (slope["ltv"].draws, slope["control"].draws, slope["excess"].draws) == (0, 4, 4)
    assert slope["excess"].seeds == 1
    mean = control_excess(ltv, draws, statistic="mean", n_resamples=400, seed=1)
    assert mean["ltv"].value == pytest.approx(ltv.mean())
    assert mean["control"].value == pytest.approx(draws.mean())
    assert mean["excess"].value == pytest.approx(ltv.mean() - draws.mean())
    # an LTV that is one of the random draws shows no excess: the interval covers 0
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(9, 5))
    same = control_excess(noise[0], noise[1:], x=np.arange(5), statistic="slope", n_resamples=1000, seed=0)
    assert same["excess"].low < 0 < same["excess"].high
    # the same seed gives the same interval
    assert control_excess(ltv, draws, statistic="mean", n_resamples=400, seed=1)["excess"] == mean["excess"]


def test_control_excess_rejects_bad_input():
    with pytest.raises(ValueError, match="draws of shape"):
        control_excess([1.0, 2.0], [[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="need at least 3"):
        control_excess([1.0, 2.0], [[1.0, 2.0]], x=[0, 1], statistic="slope")
    with pytest.raises(ValueError, match="positions x"):
        control_excess([1.0, 2.0, 3.0], [[1.0, 2.0, 3.0]], statistic="slope")
    with pytest.raises(ValueError, match="not all equal"):
        control_excess([1.0, 2.0, 3.0], [[1.0, 2.0, 3.0]], x=[4, 4, 4], statistic="slope")
    with pytest.raises(ValueError, match="finite"):
        control_excess([1.0, float("nan")], [[1.0, 2.0]])
    with pytest.raises(ValueError, match="statistic"):
        control_excess([1.0, 2.0], [[1.0, 2.0]], statistic="median")
