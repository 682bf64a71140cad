"""Chapter 01's tables and accuracies (ltvlib.study.extracted_tables) on synthetic measurements."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ltvlib.ltv_record import TrainingRecord
from ltvlib.study import extracted_tables as tables
from ltvlib.study.ltv_report import LTVLedger

N = 10
TASKS = ["antonym", "sst2"]


def flags(k: int) -> list[int]:
    return [1] * k + [0] * (N - k)


def icl() -> dict:
    return {(t, k): {"n": N, "accuracy": acc / N, "correct": flags(acc)}
            for t in TASKS for k, acc in ((0, 2), (2, 6), (5, 4))}


def extracted() -> dict:
    curves = {(t, m): {"layers": {str(l): {"correct": flags(3 if m == "function_vector" else 4)} for l in (2, 4)},
                       "chosen_layer": 2} for t in TASKS for m in tables.EXTRACTED_LABELS}
    return tables.collect_extracted(curves)


def ltv(trained: bool, seed: int = 0) -> SimpleNamespace:
    return SimpleNamespace(task="t", layers=(4,), positions=(-1,), seed=seed, recipe="fast",
                           training=TrainingRecord(trained=trained, start_val_score=0.1, best_val_score=0.5,
                                                   steps_to_best=1, steps=7, seconds=3.4, best_val_accuracy=0.5))


def test_references_and_extracted() -> None:
    best, ref, table = tables.references(icl(), TASKS, (2, 5))
    assert best == 2 and ref["sst2", 5].value == pytest.approx(0.4)
    assert table.loc["antonym", "2-shot ICL (n=10)"] == tables.estimate_cell(ref["antonym", 2])
    ex, chosen = extracted()
    assert chosen == {"antonym": 2, "sst2": 2}
    assert ex["function_vector", "sst2", 4].tolist() == flags(3) and ex["vanilla_tv", "antonym", 2].dtype == float


def test_trained_correct_accuracies_and_tables() -> None:
    vectors = {("antonym", 4): [ltv(True, 0), ltv(False, 1)], ("sst2", 4): [ltv(False)], ("antonym", 2): [ltv(True)],
               ("sst2", 2): [ltv(True)]}
    records = {k: [{"accuracy": 0.8, "correct": flags(8)} for _ in v] for k, v in vectors.items()}
    ledger = LTVLedger()
    ltv_c = tables.trained_correct(vectors, records, ledger)
    assert set(ltv_c) == {("antonym", 4), ("antonym", 2), ("sst2", 2)} and ltv_c["antonym", 4].shape == (1, N)
    assert {r.where for r in ledger.rows} == {"ch01-fig-layers"}
    training = tables.training_table(vectors)
    assert training.loc[("antonym", 4), "learned"] == 1 and training.loc[("antonym", 4), "steps (per seed)"] == "7, 7"
    assert training.loc[("antonym", 4), "validation accuracy (%, per seed)"] == "50.0, 50.0"
    ex, _ = extracted()
    acc = tables.accuracies(ex, ltv_c, [2, 4], [2, 4], TASKS)
    assert acc["ltv", "antonym", 4].value == pytest.approx(0.8)
    assert ("ltv", "average", 2) in acc and ("ltv", "average", 4) not in acc  # sst2 did not train at 4
    assert acc["function_vector", "average", 4].value == pytest.approx(0.3)
    by_layer, table = tables.layer_comparisons(ltv_c, ex, TASKS, [2, 4], 0)
    assert set(by_layer) == {2, 4}
    assert table.loc[4, "left out"] == "sst2" and table.loc[2, "left out"] == "–"
    assert table.loc[2, "Vanilla TV"].endswith("(replace)") or table.loc[2, "Vanilla TV"].endswith("(difference)")
    assert tables.layer_comparisons(ltv_c, ex, TASKS, [], 0) == ({}, None)
    _, nobody = tables.layer_comparisons({}, ex, TASKS, [4], 0)
    assert nobody.loc[4, "tasks"] == "none: " + tables.NOT_LEARNED
    best, ref, _ = tables.references(icl(), TASKS, (2, 5))
    fig, axes = tables.plot_layers(acc, icl(), TASKS, TASKS, best, 4)
    assert axes.shape == (2, 2) and not axes[1, 1].get_visible()
    assert {"LTV", "Vanilla TV (replace)", "FV", "zero-shot", "2-shot ICL"} <= {ln.get_label() for ln in axes[1, 0].lines}
    plt.close(fig)
    hendel = {t: {"chosen_layer": 3, "layers": {"3": {"correct": flags(5)}}, "zero_shot": {"accuracy": 0.1, "n": N}}
              for t in TASKS}
    mid = tables.middle_table(TASKS, 4, icl(), ref, best, acc, ltv_c, ex, hendel, {t: np.array(flags(1)) for t in TASKS},
                              1, 2, by_layer[4], ["antonym"])
    assert mid.loc["sst2", "LTV (L4, 2 seeds)"] == tables.NOT_LEARNED
    assert mid.loc["antonym", "Vanilla TV, Hendel original"].endswith("(L3)")
    assert mid.loc["paper, Llama-3.1-8B (7-task average)", "FV (L4)"] == "37.30"
    assert mid.loc["average (1 tasks)", "(its zero-shot)"] == "–"


def test_heads() -> None:
    fvs = {"antonym": SimpleNamespace(heads=[(3, 1), (5, 0)])}
    assert tables.heads_table(fvs).loc["antonym"].tolist() == ["L3H1", "L5H0"]


def test_late_changes_split_the_gap_change() -> None:
    """The LTV's change from the middle to the late layers minus the strongest extracted vector's is the change
    in the LTV's lead (gap_change), on the same queries."""
    from ltvlib.study.extracted import gap_change

    ex = {(m, t, l): np.asarray(flags(k), float) for t in TASKS for l, ks in ((4, (1, 2, 1)), (8, (5, 6, 4)))
          for m, k in zip(tables.EXTRACTED_LABELS, ks)}
    ltv_c = {(t, l): np.asarray([flags(k)], float) for t in TASKS for l, k in ((4, 9), (8, 8))}
    changes = tables.late_changes(ltv_c, ex, TASKS, [8], 4)
    assert changes["LTV"].value == pytest.approx(-0.1)
    assert changes["strongest extracted"].value == pytest.approx(0.6 - 0.2)  # difference form at 8, replace at 4
    assert changes["LTV"].difference and changes["strongest extracted"].n == 2 * N
    gap = gap_change(ltv_c, ex, TASKS, [8], 4)
    assert gap.value == pytest.approx(changes["LTV"].value - changes["strongest extracted"].value)
    with pytest.raises(ValueError, match="at least one late layer"):
        tables.late_changes(ltv_c, ex, TASKS, [], 4)
