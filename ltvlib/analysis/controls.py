"""Random-vector controls: is a task vector's measurement special, or what any vector of its size gives?

A mechanism measurement on a trained vector (its OV reconstruction's accuracy, ``cos(theta, Q theta)``, its
task alignment) means little without the same measurement on vectors that carry no task. The control here
draws vectors with the LTV's norm and a uniformly random direction and runs the same measurement on each:

- :func:`random_like`: ``(n_draws, *vector.shape)``, Gaussian directions rescaled so that every site row (the
  last axis: one ``(d_model,)`` vector per (layer, position) site) has the norm of the LTV's row at that site.
- :func:`control_distribution`: the measurement on every draw and on the LTV, summarised by the draws' mean,
  the central 95 % of the draws (an interval for *one* random vector, not for the mean), and the LTV's
  empirical one-sided p-value ``(1 + #{draws at least as extreme}) / (1 + n_draws)`` (the permutation-test
  convention: never 0, ``1 / (1 + n_draws)`` at best, so 19 draws cannot give a p below 0.05).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

Alternative = Literal["greater", "less"]


def random_like(vector: Tensor, n_draws: int, seed: int) -> Tensor:
    """Random vectors with ``vector``'s norm per site row and uniformly random directions.

    Args:
        vector: ``(d_model,)`` or ``(..., d_model)``; each row along the last axis is one site's vector.
        n_draws: number of draws, at least 1.
        seed: the same seed gives the same draws (drawn on the CPU in float64, then cast).

    Returns:
        ``(n_draws, *vector.shape)`` on ``vector``'s device and dtype; row ``[i, ..., :]`` has the norm of
        ``vector[..., :]``.

    Raises:
        ValueError: ``n_draws`` < 1, an empty vector, or a site row of norm 0 or not finite.
    """
    if int(n_draws) != n_draws or n_draws < 1:
        raise ValueError(f"n_draws must be a positive integer, got {n_draws!r}")
    if vector.dim() < 1 or vector.numel() == 0:
        raise ValueError(f"vector of shape {tuple(vector.shape)}: expected (..., d_model) with d_model >= 1")
    norms = vector.detach().double().cpu().norm(dim=-1, keepdim=True)
    if not torch.isfinite(norms).all() or (norms == 0).any():
        raise ValueError(f"vector rows must have a finite non-zero norm, got norms {norms.flatten().tolist()[:5]}")
    gen = torch.Generator().manual_seed(int(seed))
    eps = torch.randn((int(n_draws), *vector.shape), generator=gen, dtype=torch.float64)
    draws = eps / eps.norm(dim=-1, keepdim=True) * norms
    return draws.to(device=vector.device, dtype=vector.dtype)


@dataclass(frozen=True)
class ControlSummary:
    """A measurement on the LTV against the same measurement on random vectors of its norm.

    Attributes:
        value: the LTV's value.
        draws: the value of every random draw, in draw order.
        mean: mean over the draws.
        low, high: the 2.5 % and 97.5 % quantiles of the draws (where one random vector falls; with fewer
            than 40 draws these are close to the extremes).
        percentile: share of draws strictly below ``value`` (1.0: above every draw).
        p_value: ``(1 + #{draws >= value}) / (1 + n)`` (``alternative="greater"``) or with ``<=``
            (``"less"``): the one-sided empirical p-value of the LTV against the draws.
        alternative: which side counts as extreme.
        n_draws: number of draws.
    """

    value: float
    draws: tuple[float, ...]
    mean: float
    low: float
    high: float
    percentile: float
    p_value: float
    alternative: str
    n_draws: int

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["draws"] = list(self.draws)
        return d


def summarise_control(value: float, draws: Any, *, alternative: Alternative = "greater") -> ControlSummary:
    """:class:`ControlSummary` of an LTV's ``value`` against the values of random ``draws`` (a sequence of floats).

    Raises:
        ValueError: no draws, a value or draw that is not finite, or an unknown ``alternative``.
    """
    if alternative not in ("greater", "less"):
        raise ValueError(f"unknown alternative {alternative!r}; allowed: 'greater', 'less'")
    arr = np.asarray([float(x) for x in draws], dtype=np.float64)
    if arr.size == 0:
        raise ValueError("a control needs at least one draw")
    if not math.isfinite(value) or not np.isfinite(arr).all():
        raise ValueError(f"control values must be finite, got value {value!r} and draws {arr.tolist()[:5]}")
    extreme = int((arr >= value).sum()) if alternative == "greater" else int((arr <= value).sum())
    lo, hi = np.quantile(arr, [0.025, 0.975])
    return ControlSummary(
        value=float(value), draws=tuple(arr.tolist()), mean=float(arr.mean()), low=float(lo), high=float(hi),
        percentile=float((arr < value).mean()), p_value=(1 + extreme) / (1 + arr.size), alternative=alternative,
        n_draws=int(arr.size),
    )


def control_distribution(
    measure: Callable[[Tensor], float], vector: Tensor, n_draws: int, seed: int, *,
    alternative: Alternative = "greater", value: float | None = None,
) -> ControlSummary:
    """Apply ``measure`` to ``vector`` and to ``n_draws`` random vectors of its norm (:func:`random_like`).

    Args:
        measure: maps a vector of ``vector``'s shape to a float (e.g. an accuracy with that vector injected).
        vector: the LTV, ``(d_model,)`` or ``(..., d_model)``.
        n_draws: random draws; the cost is ``n_draws + 1`` calls of ``measure``.
        seed: seeds the draws.
        alternative: ``"greater"`` if the hypothesis is that the LTV scores higher than random vectors.
        value: the LTV's value if already measured (then ``measure`` runs only on the draws).

    Returns:
        A :class:`ControlSummary`.
    """
    draws = random_like(vector, n_draws, seed)
    own = float(measure(vector)) if value is None else float(value)
    return summarise_control(own, [float(measure(d)) for d in draws], alternative=alternative)


# --------------------------------------------------------------------------------------------------------
# An LTV's measurement over several points (layers, tasks) against the same measurement on random vectors
# --------------------------------------------------------------------------------------------------------


def _slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of each row of ``y`` (``(..., k)``) on ``x`` (``(..., k)``), NaN without spread."""
    xc = x - x.mean(-1, keepdims=True)
    yc = y - y.mean(-1, keepdims=True)
    den = (xc * xc).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (xc * yc).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


def control_excess(
    values: Any, draws: Any, *, x: Any = None, statistic: Literal["mean", "slope"] = "mean",
    n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
) -> dict[str, Any]:
    """An LTV's measurement at ``k`` points (e.g. layers) against random vectors' at the same points.

    Args:
        values: ``(k,)`` the LTV's value at each point.
        draws: ``(n_draws, k)`` each random draw's value at the same points (draw ``i`` of one point has no
            tie to draw ``i`` of another: they are resampled independently per point).
        x: ``(k,)`` the points' positions (e.g. layer indices), needed for ``statistic="slope"``.
        statistic: ``"mean"``: the mean over points; ``"slope"``: the least-squares slope on ``x`` times the
            span ``max(x) - min(x)`` (the fitted change from the first point to the last).
        n_resamples: bootstrap draws: the points with replacement, and at each point the random draws with
            replacement (so the interval counts the spread of the points and the finite control).
        seed: the bootstrap's seed.

    Returns:
        ``{"ltv", "control", "excess"}``, each an :class:`ltvlib.stats.Estimate` of the statistic (the LTV's,
        the random draws' mean curve's, and the LTV's minus the control's; ``excess`` has ``difference=True``),
        with ``n`` = the number of points and the percentile interval; ``n_draws`` and ``k``.

    Raises:
        ValueError: shapes that do not match, fewer than 2 points (3 for a slope), no draw, a value that is not
            finite, an unknown statistic, or a slope without ``x`` or with all ``x`` equal.
    """
    from ..stats import Estimate

    v = np.asarray(values, dtype=np.float64).reshape(-1)
    d = np.asarray(draws, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] != v.size or d.shape[0] < 1:
        raise ValueError(f"draws of shape {d.shape}: expected (n_draws >= 1, {v.size})")
    if statistic not in ("mean", "slope"):
        raise ValueError(f"unknown statistic {statistic!r}; allowed: 'mean', 'slope'")
    if not np.isfinite(v).all() or not np.isfinite(d).all():
        raise ValueError("control values must be finite (leave untrained vectors' points out before calling)")
    k = v.size
    if k < (3 if statistic == "slope" else 2):
        raise ValueError(f"{statistic} over {k} points: need at least {3 if statistic == 'slope' else 2}")
    if statistic == "slope":
        if x is None:
            raise ValueError("a slope needs the points' positions x")
        xs = np.asarray(x, dtype=np.float64).reshape(-1)
        if xs.size != k or not np.isfinite(xs).all() or np.ptp(xs) == 0:
            raise ValueError(f"x must hold {k} finite positions, not all equal, got {xs.tolist()}")
        span = float(np.ptp(xs))
    _check = int(n_resamples)
    if _check != n_resamples or n_resamples < 100:
        raise ValueError(f"n_resamples must be an integer >= 100, got {n_resamples!r}")
    rng = np.random.default_rng(seed)
    n_draws = d.shape[0]

    def stat(xx: np.ndarray | None, y: np.ndarray) -> np.ndarray:
        if statistic == "mean":
            return y.mean(-1)
        return _slope(xx, y) * span  # type: ignore[arg-type]

    ctrl = d.mean(0)
    own_v = float(stat(None if statistic == "mean" else xs, v))
    ctrl_v = float(stat(None if statistic == "mean" else xs, ctrl))
    pts = rng.integers(0, k, size=(n_resamples, k))
    picks = rng.integers(0, n_draws, size=(n_resamples, k, n_draws))
    ctrl_b = d[picks, pts[:, :, None]].mean(-1)  # (R, k): resampled draws' mean at each resampled point
    own_b = v[pts]
    xb = xs[pts] if statistic == "slope" else None
    s_own, s_ctrl = stat(xb, own_b), stat(xb, ctrl_b)
    ok = np.isfinite(s_own) & np.isfinite(s_ctrl)  # a resample of one repeated layer has no slope
    alpha = (1 - confidence) / 2

    def est(value: float, boot: np.ndarray, diff: bool, draws: int) -> Estimate:
        lo, hi = np.quantile(boot[ok], [alpha, 1 - alpha])
        return Estimate(value, min(float(lo), value), max(float(hi), value), n=k, seeds=1, confidence=confidence,
                        method=f"bootstrap over points and draws ({statistic})", resamples=int(ok.sum()),
                        difference=diff, draws=draws)

    slope = statistic == "slope"
    return {"ltv": est(own_v, s_own, slope, 0), "control": est(ctrl_v, s_ctrl, slope, int(n_draws)),
            "excess": est(own_v - ctrl_v, s_own - s_ctrl, True, int(n_draws)), "n_draws": int(n_draws), "k": int(k)}
