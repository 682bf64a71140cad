"""Uncertainty of reported numbers: intervals for accuracies and differences between methods.

Every accuracy the book shows carries its ``n`` and a 95 % interval. One proportion gets the Wilson score
interval (it stays inside [0, 1] and behaves at 0 % and 100 %, where the normal approximation collapses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["Proportion", "wilson_interval"]


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
    # clamp float noise at the ends (p = 0 or 1 give exactly 0 / 1 in exact arithmetic)
    return max(0.0, centre - half), min(1.0, centre + half)


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

    def __str__(self) -> str:
        lo, hi = self.interval
        return f"{100 * self.value:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}] (n={self.n})"
