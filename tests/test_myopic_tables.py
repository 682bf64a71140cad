"""Chapter 07's tables and comparisons (ltvlib.study.myopic_tables) on synthetic measurement dicts."""

from __future__ import annotations

import math
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
import torch

from ltvlib.ltv_record import TrainingRecord
from ltvlib.stats import Estimate
from ltvlib.study import myopic_tables as mt
from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger


def est(v: float, lo: float, hi: float) -> dict[str, float]:
    return {"value": v, "low": lo, "high": hi}


def ltv(direction: str, trained: bool = True) -> SimpleNamespace:
    curve = [{"epoch": 0, "val_accuracy": 0.25}, *({"loss": float(i)} for i in range(10)),
             {"epoch": 1, "val_accuracy": 0.75}]
    return SimpleNamespace(task=f"myopic_{direction}", layers=(15,), positions=(-1,), seed=0, recipe="fast",
                           vectors=torch.tensor([3.0, 4.0]),
                           training=TrainingRecord(trained=trained, start_val_score=0.25, best_val_score=0.75,
                                                   steps_to_best=10, steps=10, curve=curve))


FULL = {"text_p_myopic": est(0.6, 0.5, 0.7), "text_myopic_choice": est(0.6, 0.5, 0.7),
        "letter_debiased_p_myopic": est(0.55, 0.45, 0.65), "letter_says_a": est(0.3, 0.2, 0.4),
        "letter_p_myopic": est(0.4, 0.3, 0.5), "text_first_listed": est(0.5, 0.4, 0.6),
        "generation_myopic": est(0.2, 0.1, 0.3), "generation_non_myopic": est(0.7, 0.6, 0.8),
        "generation_neither": est(0.1, 0.0, 0.2)}
NO_GEN = {k: v for k, v in FULL.items() if not k.startswith("generation") and k != "text_first_listed"}


def table() -> dict:
    rows = [{"method": "zero_shot", "label": "Zero-shot", "direction": None, "metrics": FULL}]
    for d in ("myopic", "non_myopic"):
        rows.append({"method": "ltv", "label": "LTV", "direction": d, "metrics": FULL})
        rows.append({"method": "vanilla_tv", "label": "Vanilla TV", "direction": d, "metrics": NO_GEN})
        rows.append({"method": "icl5", "label": "ICL 5-shot", "direction": d, "metrics": NO_GEN})

    def rec(gen: bool, secs: float) -> list[dict]:
        summary = {"text_p_myopic": 1, "letter_debiased_p_myopic": 1, **({"generation_myopic": 1} if gen else {})}
        return [{"summary": summary, "seconds": secs, "info": {"layer": 15}}]

    records = {("zero_shot", None): rec(True, 1.0)}
    records[("zero_shot", None)][0]["summary"] = FULL
    for m in ("ltv", "vanilla_tv", "icl5"):
        for d in ("myopic", "non_myopic"):
            records[(m, d)] = rec(m == "ltv", 2.25)
    return {"n_test": 8, "rows": rows, "records": records}


def test_results_table_formats_and_gates_the_ltv() -> None:
    ledger = LTVLedger()
    out = mt.results_table(table(), ledger, {"myopic": ltv("myopic"), "non_myopic": ltv("non_myopic", False)})
    assert list(out.index)[:2] == [("Zero-shot", "(none)"), ("LTV", "myopic")]
    assert out.loc[("Zero-shot", "(none)"), "P(myopic), option text"] == "60.0 [50.0, 70.0]"
    assert out.loc[("Vanilla TV", "non-myopic"), "greedy answer = myopic option"] == "not judged"
    assert out.loc[("LTV", "non-myopic"), "says A (letter bias)"] == DID_NOT_TRAIN
    assert out.loc[("LTV", "myopic"), "says A (letter bias)"] == "30.0 [20.0, 40.0]"
    assert {r.where for r in ledger.rows} == {"ch07-table-results"}


def test_letter_bias_table() -> None:
    ledger = LTVLedger()
    out = mt.letter_bias_table(table(), ledger, {"myopic": ltv("myopic", False), "non_myopic": ltv("non_myopic")})
    assert out.loc[("Zero-shot", "(none)"), "P(first-listed option), text"] == "50.0 [40.0, 60.0]"
    assert out.loc[("Vanilla TV", "myopic"), "P(first-listed option), text"] == "–"
    assert out.loc[("LTV", "myopic"), "P(myopic), letters as given"] == DID_NOT_TRAIN
    assert out.loc[("LTV", "non-myopic"), "P(myopic), letters as given"] == "40.0 [30.0, 50.0]"


def fake_range(a: list, b: list, metric: str) -> Estimate:  # a stand-in for the bootstrap
    return Estimate(value={"ltv": 0.3, "vanilla_tv": 0.1, "icl5": 0.2}[a[0]["m"]], low=0.0, high=0.5, n=8)


def test_steering_ranges_and_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    t = table()
    for (m, _), recs in t["records"].items():
        recs[0]["m"] = m
    monkeypatch.setattr(mt, "steering_range", fake_range)
    monkeypatch.setattr(mt, "steering_difference", lambda a, b, metric: Estimate(
        value=fake_range(a[0], b[0], metric).value - fake_range(b[0], a[0], metric).value, low=-1, high=1, n=8, difference=True))
    methods, ranges = mt.steering_ranges(t)
    assert methods == ["ltv", "vanilla_tv", "icl5"]
    assert ("ltv", "generation_myopic") in ranges and ("vanilla_tv", "generation_myopic") not in ranges
    assert ranges[("icl5", "text_p_myopic")].value == 0.2
    cmp = mt.compare_steering(t, methods, ranges)
    assert (cmp.best_ex, cmp.best_icl) == ("vanilla_tv", "icl5")
    assert cmp.diff["random_text"] is None
    assert cmp.diff["ex_text"].value == pytest.approx(0.2) and cmp.diff["icl_text"].value == pytest.approx(0.1)
    ledger = LTVLedger()
    steer = mt.steering_table(methods, ranges, ledger, {"myopic": ltv("myopic"), "non_myopic": ltv("non_myopic")})
    assert steer.loc["Vanilla TV (replace)", "steering range, judged greedy answers"] == "not judged"
    assert steer.loc["LTV", "steering range, option text"].startswith("30.0 ± 30.0 % [0.0, 50.0]")
    assert [r.task for r in ledger.rows] == ["myopic_non_myopic", "myopic_myopic"]
    fig, axes = mt.plot_steering(methods, ranges, False)
    heights = [p.get_height() for p in axes[0].patches]
    assert math.isnan(heights[0]) and heights[1:] == pytest.approx([10.0, 20.0])
    plt.close(fig)


def test_training_tables() -> None:
    ltvs = {"myopic": ltv("myopic"), "non_myopic": ltv("non_myopic")}
    curves = mt.training_curves(ltvs)
    assert list(curves.index) == ["toward myopic", "toward non-myopic"]
    assert curves.loc["toward myopic"].tolist() == [25.0, 75.0]
    summary = mt.training_summary(ltvs)
    assert summary.loc["mean training loss, first 8 steps", "toward myopic"] == pytest.approx(3.5)
    assert summary.loc["mean training loss, last 8 steps", "toward myopic"] == pytest.approx(5.5)
    assert summary.loc["norm", "toward non-myopic"] == pytest.approx(5.0)


def test_generations_text_and_cost_table() -> None:
    gens = [{"kind": "A/B", "question": "Now or later?", "myopic_letter": "A", "none": " B) later",
             "myopic": "A) now ", "non_myopic": "B"},
            {"kind": "open", "question": "Q2", "myopic_letter": "B", "none": "x", "myopic": "y", "non_myopic": "z"}]
    text = mt.generations_text(gens, LTVLedger(), {"myopic": ltv("myopic"), "non_myopic": ltv("non_myopic", False)})
    assert text.startswith("=== A/B prompt: the continuation after 'A: (' ===\n\nNow or later? \n(myopic answer: A)\n"
                           "               no vector: 'B) later'\n       LTV toward myopic: 'A) now'\n"
                           f"   LTV toward non-myopic: {DID_NOT_TRAIN}\n\n")
    assert text.endswith("   LTV toward non-myopic: did not train\n\n")
    cost = mt.cost_table(table()["records"])
    assert cost.loc["zero-shot (no vector)", "seconds (first run, incl. training/extraction)"] == 1.0
    assert cost.loc["ICL 5-shot, toward non-myopic", "layer"] == 15


def test_judged_items() -> None:
    assert mt.judged_items(SimpleNamespace(judge_items=None), [1, 2, 3]) == 3
    assert mt.judged_items(SimpleNamespace(judge_items=2), [1, 2, 3]) == 2
