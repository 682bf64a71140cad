"""Formatting shared by the chapters' tables: interval cells, direction names, LTV-gated cells, cost tables.

Pure functions of measurement dicts and :class:`~ltvlib.stats.Estimate` values (no model, no cache); the
chapter-specific table builders (``study/<module>_tables.py``) use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from ..stats import Estimate, format_estimate


def percent_interval(d: Mapping[str, float]) -> str:
    """An Estimate dict (``value``, ``low``, ``high`` as fractions) as ``"value [low, high]"`` in %, one decimal:
    ``{"value": 0.5, "low": 0.4, "high": 0.6}`` -> ``"50.0 [40.0, 60.0]"``."""
    return f"{100 * d['value']:.1f} [{100 * d['low']:.1f}, {100 * d['high']:.1f}]"


def points(est: Estimate) -> str:
    """:func:`ltvlib.stats.format_estimate` with the interval's bounds (``"+12.0 ± 8.1 pts [3.9, 20.1] (n=...)"``)."""
    return format_estimate(est, bounds=True)


def direction_name(direction: str | None, none: str = "(none)") -> str:
    """A direction for display: ``"non_myopic"`` -> ``"non-myopic"``; ``None`` -> ``none``."""
    return (direction or none).replace("_", "-")


def ledger_cell(ledger: Any, ltvs: Iterable[Any], text: str, *, where: str) -> str:
    """``text`` gated by every LTV of ``ltvs`` in turn (:meth:`ltvlib.study.ltv_report.LTVLedger.cell`): the text if
    all trained, else ``"did not train"``; each vector is noted in the ledger under ``where``, in the given order."""
    for v in ltvs:
        text = ledger.cell(v, text, where=where)
    return text


def interval_table(intervals: Mapping[str, Estimate]) -> pd.DataFrame:
    """One row per named estimate (index: the names), one column ``estimate``: :func:`points` of each."""
    return pd.DataFrame({name: {"estimate": format_estimate(e, bounds=True)} for name, e in intervals.items()}).T
