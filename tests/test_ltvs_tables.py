"""Chapter 00's tables and accuracies (ltvlib.study.ltvs_tables) on synthetic records."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from ltvlib.ltv_record import TrainingRecord
from ltvlib.study import ltvs_tables as tables
from ltvlib.study.ltv_report import LTVLedger

N = 10


def rec(k: int, label: float | None = None) -> dict:
    return {"n": N, "accuracy": k / N, "correct": [1] * k + [0] * (N - k), "label_accuracy": label}


def ltv(task: str, seed: int, trained: bool) -> SimpleNamespace:
    return SimpleNamespace(task=task, layers=(15,), positions=(-1,), seed=seed, recipe="fast",
                           training=TrainingRecord(trained=trained, start_val_score=0.1, best_val_score=0.55,
                                                   steps_to_best=4, steps=8, seconds=12.34,
                                                   val_metric="balanced_accuracy", best_val_accuracy=0.525,
                                                   val_accuracy_low=0.4, no_vector_val_accuracy=0.3,
                                                   majority_val_rate=0.5))


def setup() -> tuple:
    tasks = ["antonym", "sst2", "rte"]
    icl = {(t, k): rec(k * 2 + 2, 0.5 if t != "antonym" else None) for t in tasks for k in (0, 2)}
    ltvs = {"antonym": [ltv("antonym", 0, True), ltv("antonym", 1, False)],
            "sst2": [ltv("sst2", 0, False), ltv("sst2", 1, False)]}
    records = {"antonym": [rec(8), rec(3)], "sst2": [rec(7, 0.7), rec(6, 0.6)]}
    return tasks, icl, ltvs, records


def test_accuracy_table() -> None:
    tasks, icl, ltvs, records = setup()
    ref_cols = tables.reference_columns([0, 2])
    assert ref_cols == {0: "zero-shot", 2: "2-shot ICL"}
    ledger = LTVLedger()
    acc = tables.accuracy_table(tasks, icl, ltvs, records, ref_cols, "LTV", 2, ledger)
    assert acc.with_ltv == ["antonym"]
    assert acc.table.loc["antonym", "LTV"].endswith(" (1 of 2 seeds)")
    assert acc.table.loc["sst2", "LTV"] == tables.NOT_LEARNED
    assert acc.table.loc["rte", "LTV"] == "not trained in this profile"
    assert "n (ICL)" not in acc.table.columns  # the same test queries for every column
    assert acc.table.loc["average (1 tasks)", "n"] == N
    assert acc.est["LTV", "average"].value == pytest.approx(0.8)
    assert acc.est["2-shot ICL", "sst2"].value == pytest.approx(0.6)
    assert acc.paired("LTV", "zero-shot").value == pytest.approx(0.6)
    assert [r.where for r in ledger.rows][:2] == ["ch00-table-accuracy"] * 2
    fig, ax = tables.plot_accuracy(acc, tasks)
    assert len(ax.patches) == 3 * 4  # three columns, three tasks and the average
    plt.close(fig)


def test_label_and_training_tables() -> None:
    tasks, icl, ltvs, records = setup()
    labels = tables.label_table(tasks, icl, ltvs, records, tables.reference_columns([0, 2]), "LTV", LTVLedger())
    assert list(labels.index) == ["sst2", "rte"]
    assert labels.loc["sst2", "LTV"] == tables.NOT_LEARNED
    assert labels.loc["rte", "zero-shot"] == "50.0 % [23.7, 76.3]"
    training = tables.training_table(ltvs)
    assert training.loc[("antonym", 1), "learned"] == tables.NOT_LEARNED
    assert training.loc[("antonym", 0), "learned"] == "yes"
    assert training.loc[("sst2", 0), "validation accuracy (%)"] == "52.5"
    assert training.loc[("sst2", 0), "its lower bound (%)"] == "40.0"
    assert training.loc[("sst2", 0), "to beat (%)"] == "50.0"  # the majority rate beats the prompt alone
    assert list(training.columns)[-1] == "steps"  # no per-vector seconds: vectors trained together share a call
    assert "smollm2-135m" in tables.models_table().index


def test_accuracy_table_without_a_learned_ltv() -> None:
    """No LTV learned (every vector at its start): the table lists them as such and has no average to compare."""
    tasks, icl, ltvs, records = setup()
    ltvs["antonym"] = [ltv("antonym", 0, False), ltv("antonym", 1, False)]
    acc = tables.accuracy_table(tasks, icl, ltvs, records, tables.reference_columns([0, 2]), "LTV", 2, LTVLedger())
    assert acc.with_ltv == []
    assert list(acc.table.index) == tasks  # no average row
    assert acc.table.loc["antonym", "LTV"] == tables.NOT_LEARNED
    assert ("LTV", "average") not in acc.est
    fig, _ = tables.plot_accuracy(acc, tasks)
    plt.close(fig)


def test_icl_learned_needs_its_lower_bound_above_zero_shot_and_the_majority(monkeypatch: pytest.MonkeyPatch) -> None:
    """ICL learned a task when some k-shot setting's Wilson lower bound beats zero-shot and the majority answer."""
    monkeypatch.setattr(tables, "task_splits", lambda task, run, icl=False: SimpleNamespace(
        test=[SimpleNamespace(output="a")] * 6 + [SimpleNamespace(output="b")] * 4))  # majority rate 0.6
    icl = {("t", 0): {"accuracy": 0.2, "n": 100}, ("t", 5): {"accuracy": 0.7, "n": 100}}
    assert tables.icl_learned("t", icl, [5], None)  # 0.7 on 100: lower bound 0.60 > 0.6? Wilson: 0.604
    icl["t", 5] = {"accuracy": 0.65, "n": 100}
    assert not tables.icl_learned("t", icl, [5], None)  # at the majority rate: not learned
