"""Uncertainty of reported numbers: intervals for accuracies and differences between methods.

Every accuracy the book shows carries its ``n`` and a 95 % interval. One proportion gets the Wilson score
interval (it stays inside [0, 1] and behaves at 0 % and 100 %, where the normal approximation collapses). A
difference between two methods on the same queries gets a paired bootstrap
(:func:`paired_bootstrap_difference`); an accuracy over several training seeds a two-level, seed and query,
bootstrap (:func:`seed_interval`). Both return an :class:`Estimate`, which :func:`format_estimate` prints on
one line.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_RESAMPLES",
    "ROW_KINDS",
    "Estimate",
    "Proportion",
    "format_estimate",
    "paired_bootstrap_difference",
    "proportion_estimate",
    "rows_summary",
    "seed_interval",
    "wilson_interval",
]


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n`` (fractions in [0, 1]).

    Raises:
        ValueError: ``n`` < 1, or ``successes`` outside ``0..n``.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n!r}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in 0..{n}, got {successes!r}")
    z = _z(confidence)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # p = 0 and p = 1 give exactly 0 and 1 in exact arithmetic; in floats centre - half can come out as 1e-17
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return lo, hi


@dataclass(frozen=True)
class Proportion:
    """``successes`` of ``n`` with its Wilson interval; ``str`` gives ``"43.5 % [36.8, 50.4] (n=200)"``."""

    successes: int
    n: int
    confidence: float = 0.95

    @property
    def value(self) -> float:
        return self.successes / self.n

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.n, self.confidence)

    def estimate(self) -> Estimate:
        """The same proportion as an :class:`Estimate` (one seed, Wilson interval)."""
        return proportion_estimate(self.successes, self.n, self.confidence)

    def __str__(self) -> str:
        lo, hi = self.interval
        return f"{100 * self.value:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}] (n={self.n})"


# ----------------------------------------------------------------------------- bootstrap intervals
#
# The book's accuracies are means of 0/1 correctness over a fixed set of test queries, sometimes for several
# training seeds. Two methods evaluated on the *same* queries are paired: a query that is hard for one is
# usually hard for the other, so the difference is resampled query by query (the same resampled queries for
# both methods), which gives a narrower, honest interval than two independent Wilson intervals would.
#
# Across seeds the choice is a two-level bootstrap: each resample draws the seeds with replacement *and* the
# queries with replacement, the same queries for every seed (they were all evaluated on the same queries), and
# takes the mean over the drawn seeds of each seed's mean over the drawn queries. The spread of that mean
# covers both the seed-to-seed variation of training and the sampling of the test queries. With one seed it is
# the ordinary query bootstrap. Measured coverage of the 95 % interval on synthetic data (3 seeds, 150 shared
# queries, 150 experiments; tests/test_stats.py): 100 % with no seed effect (the query noise is counted at
# both levels, so it is conservative), 96 % with a seed effect of sd 5 points, 85 % with sd 10 points (three
# seeds are too few to see a large seed spread; more seeds, not a cleverer formula, fix that).

DEFAULT_RESAMPLES = 2000
# resamples per chunk are sized so one chunk holds at most this many floats (bounded memory for large n)
_CHUNK_FLOATS = 4_000_000


@dataclass(frozen=True)
class Estimate:
    """A number with its 95 % (or ``confidence``) interval, ``n`` test queries and ``seeds`` training seeds.

    ``seeds`` counts training seeds only: 1 for one trained vector or a deterministic method, and for a
    difference the seeds of its least-seeded trained side (:func:`rows_summary`). Random draws a control's
    interval also resamples (random vectors of a norm, random head sets) are ``draws`` (0: none), never seeds.

    ``value``, ``low`` and ``high`` are fractions (an accuracy in [0, 1], or a difference of two accuracies in
    [-1, 1]); :func:`format_estimate` prints them in percent or percentage points. ``method`` names how the
    interval was computed (``"wilson"``, ``"paired bootstrap"``, ``"seed-query bootstrap"``) and
    ``resamples`` how many bootstrap draws it took (0 for Wilson).
    """

    value: float
    low: float
    high: float
    n: int
    seeds: int = 1
    confidence: float = 0.95
    method: str = "wilson"
    resamples: int = 0
    difference: bool = False
    draws: int = 0

    def __post_init__(self) -> None:
        for name in ("value", "low", "high"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"estimate {name} must be finite, got {getattr(self, name)!r}")
        # bootstrap percentiles and the mean can disagree in the last float bits; a tolerance of 1e-9 keeps
        # that noise from tripping the check while still catching swapped or misplaced bounds
        if not self.low - 1e-9 <= self.value <= self.high + 1e-9:
            raise ValueError(f"estimate {self.value!r} lies outside its interval [{self.low!r}, {self.high!r}]")
        if self.n < 1 or self.seeds < 1 or self.draws < 0:
            raise ValueError(f"estimate needs n >= 1, seeds >= 1 and draws >= 0, got n={self.n!r}, "
                             f"seeds={self.seeds!r}, draws={self.draws!r}")

    @property
    def interval(self) -> tuple[float, float]:
        return self.low, self.high

    @property
    def half_width(self) -> float:
        """The larger distance from the value to a bound (a bootstrap interval need not be symmetric)."""
        return max(self.value - self.low, self.high - self.value)

    def to_dict(self) -> dict[str, float | int | str | bool]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Estimate:
        return cls(
            value=float(d["value"]), low=float(d["low"]), high=float(d["high"]), n=int(d["n"]),
            seeds=int(d.get("seeds", 1)), confidence=float(d.get("confidence", 0.95)),
            method=str(d.get("method", "wilson")), resamples=int(d.get("resamples", 0)),
            difference=bool(d.get("difference", False)), draws=int(d.get("draws", 0)),
        )

    def __str__(self) -> str:
        return format_estimate(self)


def proportion_estimate(successes: int, n: int, confidence: float = 0.95) -> Estimate:
    """One accuracy from one seed: ``successes`` of ``n`` with its Wilson interval."""
    lo, hi = wilson_interval(successes, n, confidence)
    return Estimate(successes / n, lo, hi, n=n, seeds=1, confidence=confidence, method="wilson")


def correctness_matrix(x: Any, name: str) -> np.ndarray:
    """Per-query correctness as a float matrix (seeds, queries); a 1-D input is one seed."""
    arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(
            f"{name} must be per-query correctness, shape (queries,) or (seeds, queries) with at least one of "
            f"each, got shape {tuple(arr.shape)}"
        )
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all() or ((arr < 0) | (arr > 1)).any():
        raise ValueError(f"{name} must hold correctness values in [0, 1] (bools or 0/1), got {arr.min()}..{arr.max()}")
    return arr


def resampled_means(
    mats: Sequence[np.ndarray], n_resamples: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Two-level bootstrap means, one array of ``n_resamples`` per matrix in ``mats``.

    Every matrix has the same queries (columns) and may have its own number of seeds (rows). Each resample
    draws query counts once, shared by all matrices (the pairing), and seed counts per matrix; both are
    multinomial counts, equivalent to drawing indices with replacement but a matrix product to apply.
    """
    q = mats[0].shape[1]
    out: list[list[np.ndarray]] = [[] for _ in mats]
    chunk = max(1, min(n_resamples, _CHUNK_FLOATS // q))
    done = 0
    while done < n_resamples:
        b = min(chunk, n_resamples - done)
        q_counts = rng.multinomial(q, np.full(q, 1.0 / q), size=b).astype(np.float64)  # (b, q)
        for k, m in enumerate(mats):
            per_seed = q_counts @ m.T / q  # (b, seeds): each seed's mean over the drawn queries
            s = m.shape[0]
            if s == 1:
                out[k].append(per_seed[:, 0])
            else:
                s_counts = rng.multinomial(s, np.full(s, 1.0 / s), size=b).astype(np.float64)
                out[k].append((s_counts * per_seed).sum(axis=1) / s)
        done += b
    return [np.concatenate(parts) for parts in out]


def percentile_interval(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    """The central ``confidence`` interval of bootstrap ``draws`` (their percentiles); ``ValueError`` for a level
    outside (0, 1)."""
    _z(confidence)  # validates the level
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(draws, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _check_resamples(n_resamples: int) -> None:
    if int(n_resamples) != n_resamples or n_resamples < 100:
        raise ValueError(f"n_resamples must be an integer >= 100 for a 95 % percentile interval, got {n_resamples!r}")


ROW_KINDS: tuple[str, ...] = ("auto", "seeds", "draws")
"""What the rows of a correctness matrix are: ``"seeds"`` training seeds (one row = one trained vector);
``"draws"`` random draws of a control (random vectors of a norm, random head sets); ``"auto"`` (the default)
seeds when there are several rows, and one row a single result that may be a deterministic method, which then
does not lower a difference's seed count."""


def rows_summary(sides: Sequence[tuple[int, str]]) -> tuple[int, int]:
    """``(seeds, draws)`` of an estimate resting on several correctness matrices.

    Args:
        sides: ``(rows, kind)`` per matrix, ``kind`` from :data:`ROW_KINDS`.

    Returns:
        ``seeds``: the fewest rows among the sides that are training seeds (``"seeds"``, or ``"auto"`` with
        more than one row): a difference is only as seeded as its least-seeded trained side; 1 when no side
        is. ``draws``: the most rows among ``"draws"`` sides, 0 when there is none.

    Raises:
        ValueError: an unknown kind.
    """
    seeded, drawn = [], []
    for rows, kind in sides:
        if kind not in ROW_KINDS:
            raise ValueError(f"unknown row kind {kind!r}; allowed: {', '.join(ROW_KINDS)}")
        if kind == "draws":
            drawn.append(int(rows))
        elif kind == "seeds" or rows > 1:
            seeded.append(int(rows))
    return (min(seeded) if seeded else 1), (max(drawn) if drawn else 0)


def seed_interval(
    correct: Any,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    rows: str = "auto",
) -> Estimate:
    """Mean accuracy over seeds and queries, with a two-level (seed and query) bootstrap interval.

    Args:
        correct: per-query correctness, shape (seeds, queries), every seed evaluated on the same queries
            (bools, 0/1, numpy or torch). A 1-D array is one seed: the ordinary query bootstrap.
        rows: what the rows are (:data:`ROW_KINDS`); ``"draws"`` for a random control's draws, which the
            Estimate then counts as ``draws`` with one seed.
        n_resamples: bootstrap draws (vectorised; memory is bounded by drawing them in chunks).
        confidence: the interval's level.
        seed: the bootstrap's own random seed; the same seed gives the same interval.

    Returns:
        An :class:`Estimate` whose value is the grand mean, method ``"seed-query bootstrap"``.
    """
    _check_resamples(n_resamples)
    m = correctness_matrix(correct, "correct")
    (draws,) = resampled_means([m], int(n_resamples), np.random.default_rng(seed))
    lo, hi = percentile_interval(draws, confidence)
    value = float(m.mean())
    n_seeds, n_draws = rows_summary([(m.shape[0], rows)])
    return Estimate(value, min(lo, value), max(hi, value), n=m.shape[1], seeds=n_seeds, confidence=confidence,
                    method="seed-query bootstrap", resamples=int(n_resamples), draws=n_draws)


def paired_bootstrap_difference(
    a: Any,
    b: Any,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    rows: tuple[str, str] = ("auto", "auto"),
) -> Estimate:
    """Accuracy of method ``a`` minus method ``b`` on the same queries, with a paired bootstrap interval.

    Args:
        a, b: per-query correctness of the two methods, shape (queries,) or (seeds, queries); the query axis
            must match (the same queries in the same order). The queries are resampled jointly for both
            methods; with several seeds, each method's seeds are also drawn with replacement (independently:
            seed ``i`` of one method has no special tie to seed ``i`` of the other).
        n_resamples: bootstrap draws (vectorised, no Python loop per draw).
        confidence: the interval's level.
        seed: the bootstrap's own random seed; the same seed gives the same interval.

        rows: what the rows of ``a`` and ``b`` are (:data:`ROW_KINDS`). With the default ``"auto"`` a
            one-row side counts as a deterministic method: an LTV with 3 seeds minus an extracted vector has 3
            seeds. Mark a one-seed trained side ``"seeds"`` when the other has several (a 1-seed LTV minus a
            3-seed one has 1), and a random control's rows ``"draws"``.

    Returns:
        An :class:`Estimate` of the difference (``difference=True``), method ``"paired bootstrap"``, with
        ``seeds`` and ``draws`` from :func:`rows_summary`.
    """
    _check_resamples(n_resamples)
    ma, mb = correctness_matrix(a, "a"), correctness_matrix(b, "b")
    if ma.shape[1] != mb.shape[1]:
        raise ValueError(f"a and b must be evaluated on the same queries: {ma.shape[1]} vs {mb.shape[1]} queries")
    da, db = resampled_means([ma, mb], int(n_resamples), np.random.default_rng(seed))
    lo, hi = percentile_interval(da - db, confidence)
    value = float(ma.mean() - mb.mean())
    n_seeds, n_draws = rows_summary([(ma.shape[0], rows[0]), (mb.shape[0], rows[1])])
    return Estimate(value, min(lo, value), max(hi, value), n=ma.shape[1], seeds=n_seeds, confidence=confidence,
                    method="paired bootstrap", resamples=int(n_resamples), difference=True, draws=n_draws)


def format_estimate(est: Estimate, *, digits: int = 1, bounds: bool = False) -> str:
    """One line: ``"43.5 ± 6.9 % (n=200, seeds=3)"``; a difference in points: ``"+12.0 ± 8.1 pts (...)"``;
    an estimate over random draws adds them: ``"(n=200, seeds=1, draws=20)"``.

    The ``±`` is the larger distance from the value to either bound (a bootstrap interval may be asymmetric;
    this never understates it). ``bounds=True`` adds the interval itself: ``"... [36.8, 50.4] (n=200, ...)"``.
    """
    sign = "+" if est.difference else ""
    unit = " pts" if est.difference else " %"
    text = f"{100 * est.value:{sign}.{digits}f} ± {100 * est.half_width:.{digits}f}{unit}"
    if bounds:
        text += f" [{100 * est.low:{sign}.{digits}f}, {100 * est.high:{sign}.{digits}f}]"
    return text + f" (n={est.n}, seeds={est.seeds}" + (f", draws={est.draws})" if est.draws else ")")
