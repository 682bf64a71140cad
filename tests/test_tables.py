"""Shared table formatting (ltvlib.study.tables)."""

from __future__ import annotations

from ltvlib.ltv_record import TrainingRecord
from ltvlib.stats import Estimate
from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger
from ltvlib.study.tables import direction_name, ledger_cell, percent_interval, points


class FakeLTV:
    def __init__(self, task: str, trained: bool) -> None:
        self.task, self.layers, self.positions, self.seed, self.recipe = task, (15,), (-1,), 0, "fast"
        self.training = TrainingRecord(trained=trained, start_val_score=0.1, best_val_score=0.5, steps_to_best=3)


def test_percent_interval_and_points() -> None:
    assert percent_interval({"value": 0.5, "low": 0.41234, "high": 0.6}) == "50.0 [41.2, 60.0]"
    est = Estimate(value=0.12, low=0.04, high=0.2, n=10, difference=True, method="bootstrap")
    assert points(est) == "+12.0 ± 8.0 pts [+4.0, +20.0] (n=10, seeds=1)"


def test_direction_name() -> None:
    assert direction_name("non_myopic") == "non-myopic"
    assert direction_name(None) == "(none)"
    assert direction_name(None, none="–") == "–"


def test_ledger_cell_gates_on_every_vector_in_order() -> None:
    ledger = LTVLedger()
    good, bad = FakeLTV("a", True), FakeLTV("b", False)
    assert ledger_cell(ledger, [good], "1.0", where="w") == "1.0"
    assert ledger_cell(ledger, [bad, good], "1.0", where="v") == DID_NOT_TRAIN
    assert [(r.task, r.where, r.shown) for r in ledger.rows] == [
        ("a", "w", "number"), ("b", "v", DID_NOT_TRAIN), ("a", "v", "number")]
