"""Chapter 02's tables and verdict numbers (ltvlib.study.flexibility_tables) on synthetic setting results."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ltvlib.ltv_record import TrainingRecord
from ltvlib.study.flexibility import PAPER_COLUMNS, Setting, SettingResult
from ltvlib.study.flexibility_tables import NOT_LEARNED, FlexView, short
from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger

N = 10
BASE = Setting("baseline", "P={-1}, L={15}", (15,), (-1,), paper_column=PAPER_COLUMNS[0])
POS = Setting("position4", "P={4}, L={15}", (15,), (4,), paper_column=PAPER_COLUMNS[1])
ICL = Setting("icl2", "P={-1}, L={15}, 2-shot", (15,), (-1,), shots=2, paper_column=PAPER_COLUMNS[5])
LATE = Setting("late28", "P={-1}, L={28}", (28,), (-1,))


def ltv(task: str, seed: int, trained: bool = True) -> SimpleNamespace:
    return SimpleNamespace(task=task, layers=(15,), positions=(-1,), seed=seed, recipe="fast",
                           config=SimpleNamespace(prefix_cache=True),
                           training=TrainingRecord(trained=trained, start_val_score=0.1, best_val_score=0.5,
                                                   steps_to_best=2, steps=4, seconds=2.0))


def row(k: int) -> np.ndarray:
    """One row of N answers, the first k correct."""
    return (np.arange(N) < k)[None, :]


def result(task: str, s: Setting, ltv_k: list[int], trained: list[bool]) -> SettingResult:
    correct = {"ltv": np.concatenate([row(k) for k in ltv_k]), "none": row(1), "vanilla_tv": row(3),
               "vanilla_tv_difference": row(2), "function_vector": row(4)}
    zs = ()
    if s.shots:
        correct["ltv_zero_shot_trained"] = row(5)
        zs = (ltv(task, 0),)
    return SettingResult(setting=s, task=task, ltvs=tuple(ltv(task, i, t) for i, t in enumerate(trained)),
                         correct=correct, zero_shot_ltvs=zs, seconds={"eval": 1.5})


def view() -> FlexView:
    tasks = ("a", "b")  # as the plan gives them (FlexSizes.tasks_of returns tuples too)
    v = FlexView([BASE, POS, ICL], [LATE], tasks, {"baseline": tasks, "position4": ("a",), "icl2": tasks,
                                                   "late28": tasks}, base_seeds=(0, 1), other_seeds=(0,),
                 ledger=LTVLedger())
    for t in tasks:
        v.results[t, "baseline"] = result(t, BASE, [8, 6], [True, True])
        v.results[t, "icl2"] = result(t, ICL, [9], [True])
        v.results[t, "late28"] = result(t, LATE, [7], [t == "a"])
    v.results["a", "position4"] = result("a", POS, [5], [True])
    return v


def test_matrix_keeps_trained_seeds_and_notes_them() -> None:
    v = view()
    assert v.matrix("a", "baseline", "ltv", "w").shape == (2, N)
    assert v.matrix("b", "late28", "ltv", "w") is None
    assert v.matrix("b", "position4", "ltv", "w") is None  # not run on b
    assert v.matrix("a", "baseline", "function_vector", "w").sum() == 4
    assert [r.shown for r in v.ledger.rows] == ["number", "number", DID_NOT_TRAIN]
    assert v.coverage("baseline") == "all 2" and v.coverage("position4") == "1: a"


def test_table1_and_numbers() -> None:
    v = view()
    table = v.table1(2)
    assert v.partial() == ["position4"]
    assert table.loc["LTV: ours", "baseline: P={-1}, L={15}"].startswith("70.0 [")
    assert table.loc["FV: ours", "position4: P={4}, L={15}"].startswith("40.0 [")
    assert table.loc["Vanilla TV (replace): paper", "position4: P={4}, L={15}"] == "2.16"
    assert table.loc["LTV tasks learned", "late28: P={-1}, L={28}"] == "1 of 2"
    assert table.loc["test queries (the column's tasks)", "position4: P={4}, L={15}"] == str(N)
    assert v.est_mean["icl2", "ltv_zero_shot_trained"][0].value == pytest.approx(0.5)
    assert v.base_same["position4"][0].value == pytest.approx(0.7)  # baseline mean over task a: (8 + 6) / 20
    x = v.column_numbers(POS)
    assert (x["best"], x["share"], x["tasks_diff"]) == ("function_vector", 0.9, ("a",))
    assert x["diff"].value == pytest.approx(0.1) and x["keep"].value == pytest.approx(0.5 - 0.9 * 0.7)
    late = v.late_numbers()
    assert late["tasks_diff"] == ("a",) and late["ltv"].value == pytest.approx(0.7)
    fig, ax = v.plot_table1()
    assert len(ax.patches) == 5 * 4  # five methods, four columns
    plt.close(fig)


def test_per_task_and_cost_tables() -> None:
    v = view()
    per = v.per_task_table("smoke")
    assert per.loc[("b", "LTV"), "position4"] == "not run in `smoke`"
    assert per.loc[("b", "LTV"), "late28"] == NOT_LEARNED
    assert per.loc[("a", "no vector"), "late28"] == "10.0 [1.8, 40.4]"
    cost = v.cost_table()
    assert cost.loc["LTVs (tasks x seeds)", "baseline"] == 4
    assert cost.loc["evaluation seconds (the column's tasks)", "icl2"] == 3.0
    assert cost.loc["per-row tail (prefix cache)", "late28"] == "yes"
    # the column's four LTVs record one training call's 2 s (they were trained together): counted once
    assert cost.loc["training seconds (the column's LTVs)", "baseline"] == 2.0


def test_short() -> None:
    assert short(None) == NOT_LEARNED
