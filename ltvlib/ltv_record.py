"""What a table needs to know about one learned task vector: which vector it is and whether it trained.

:class:`LTVRecord` names a vector (task, layers, positions, seed, recipe) and carries its training outcome
(``trained``: the kept vector's validation score strictly above its random start's; the two scores; the step
of the best score). It is what :class:`ltvlib.study.ltv_report.LTVLedger` reads from every vector a chapter
shows, and what chapter 03's race records of the LTVs it trains (:func:`ltvlib.analysis.peft_compare.race_ltv`).
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class LTVRecord:
    """One LTV's identity and training outcome. ``trained`` is None when unknown (then it does not count as
    trained); scores are fractions (NaN when unknown); ``steps_to_best`` 0 means the random start was kept."""

    task: str
    layers: tuple[int, ...]
    positions: tuple[int, ...]
    seed: int
    recipe: str
    trained: bool | None
    start_val_score: float
    best_val_score: float
    steps_to_best: int | None

    @classmethod
    def of(cls, ltv: Any) -> LTVRecord:
        """The record of a :class:`ltvlib.ltv.LearnedTaskVector` (or anything with its attributes; missing
        outcome attributes read as unknown)."""
        return cls(
            task=str(ltv.task), layers=tuple(int(x) for x in ltv.layers),
            positions=tuple(int(x) for x in ltv.positions), seed=int(ltv.seed), recipe=str(ltv.recipe),
            trained=getattr(ltv, "trained", None),
            start_val_score=float(getattr(ltv, "start_val_score", float("nan"))),
            best_val_score=float(getattr(ltv, "best_val_score", float("nan"))),
            steps_to_best=getattr(ltv, "steps_to_best", None),
        )
