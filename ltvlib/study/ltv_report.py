"""Which learned task vectors a chapter shows, and whether each one trained.

A vector whose validation score never rose above its random start (``LearnedTaskVector.training.trained`` False) is the
starting vector, not a learned one. Chapters route every LTV number they show through one
:class:`LTVLedger`: :meth:`LTVLedger.value` gives the accuracy of a trained vector and NaN for an untrained one
(so it drops out of means, fits and verdicts), :meth:`LTVLedger.cell` gives its table text ("did not train"),
and :meth:`LTVLedger.summary` says how many did not train. ``record_claims(..., ltvs=ledger)`` saves the
ledger beside the claims, where a book test checks that no untrained vector was shown as a number::

    ledger = LTVLedger()
    acc = ledger.value(ltv, accuracy, where="Table 1.1")        # NaN if ltv did not train
    text = ledger.cell(ltv, f"{accuracy:.1%}", where="Table 1.1")  # "did not train" if it did not
    display(ledger.summary())
    record_claims(..., ltvs=ledger)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from ..ltv_record import LTVRecord

DID_NOT_TRAIN = "did not train"


@dataclasses.dataclass(frozen=True)
class LTVShown(LTVRecord):
    """One LTV as a chapter showed it: which vector and whether it trained (:class:`ltvlib.ltv_record.LTVRecord`),
    and how it was shown (``"number"`` or :data:`DID_NOT_TRAIN`), where (a table or figure name)."""

    shown: str
    where: str

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["layers"], d["positions"] = list(self.layers), list(self.positions)
        for k in ("start_val_score", "best_val_score"):
            d[k] = None if not math.isfinite(d[k]) else d[k]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LTVShown:
        return cls(
            task=str(d["task"]), layers=tuple(int(x) for x in d["layers"]),
            positions=tuple(int(x) for x in d["positions"]), seed=int(d["seed"]), recipe=str(d["recipe"]),
            trained=None if d.get("trained") is None else bool(d["trained"]),
            start_val_score=float("nan") if d.get("start_val_score") is None else float(d["start_val_score"]),
            best_val_score=float("nan") if d.get("best_val_score") is None else float(d["best_val_score"]),
            steps_to_best=None if d.get("steps_to_best") is None else int(d["steps_to_best"]),
            shown=str(d["shown"]), where=str(d["where"]),
        )


def _trained(ltv: Any) -> bool:
    """An LTV counts as learned only when its record says it trained (None, unknown, is not enough)."""
    return LTVRecord.of(ltv).trained is True


class LTVLedger:
    """Every LTV a chapter shows, with whether it trained; the gate between a vector and a reported number."""

    def __init__(self) -> None:
        self._rows: dict[tuple, LTVShown] = {}

    def _note(self, ltv: Any, where: str) -> bool:
        ok = _trained(ltv)
        row = LTVShown(**dataclasses.asdict(LTVRecord.of(ltv)), shown="number" if ok else DID_NOT_TRAIN,
                       where=str(where))
        self._rows[(row.task, row.layers, row.positions, row.seed, row.recipe, row.where)] = row
        return ok

    def value(self, ltv: Any, accuracy: float, *, where: str = "") -> float:
        """``accuracy`` if ``ltv`` trained, else NaN (an untrained vector enters no mean, fit or verdict)."""
        return float(accuracy) if self._note(ltv, where) else float("nan")

    def cell(self, ltv: Any, text: str, *, where: str = "") -> str:
        """``text`` (the formatted number) if ``ltv`` trained, else ``"did not train"``."""
        return text if self._note(ltv, where) else DID_NOT_TRAIN

    def keep(self, ltvs: Iterable[Any], *, where: str = "") -> list[Any]:
        """The vectors of ``ltvs`` that trained (each noted as shown, or as not shown because it did not train)."""
        return [v for v in ltvs if self._note(v, where)]

    @property
    def rows(self) -> tuple[LTVShown, ...]:
        return tuple(self._rows.values())

    def untrained(self) -> list[LTVShown]:
        return [r for r in self.rows if r.shown == DID_NOT_TRAIN]

    def summary(self) -> Any:
        """A Markdown line for the reader: how many distinct vectors this chapter shows and which did not train."""
        from IPython.display import Markdown

        vectors: dict[tuple, LTVShown] = {}
        for r in self.rows:
            vectors[(r.task, r.layers, r.positions, r.seed, r.recipe)] = r
        bad = [r for r in vectors.values() if r.shown == DID_NOT_TRAIN]
        if not vectors:
            return Markdown("This chapter shows no learned task vector.")
        if not bad:
            return Markdown(f"All {len(vectors)} learned task vectors this chapter shows trained (validation score "
                            "above the random starting vector's).")
        names = "; ".join(f"{r.task} at layer {','.join(map(str, r.layers))} (seed {r.seed})" for r in bad)
        return Markdown(f"**{len(bad)} of {len(vectors)} learned task vectors did not train** (validation never rose "
                        f"above the random start); they are shown as \"{DID_NOT_TRAIN}\" and left out of every "
                        f"mean and verdict: {names}.")

    def to_list(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.rows]
