"""Chapter 06's composition tables (ltvlib.study.composition_tables) on synthetic per-seed results."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ltvlib.ltv_record import TrainingRecord
from ltvlib.study.composition import COMPONENTS, COMPOSED, TASKS
from ltvlib.study.composition_tables import CompositionView, data_table, rows_of
from ltvlib.study.ltv_report import LTVLedger

METHODS = ["zero-shot", "2-shot ICL", "EN->FR", "M->F", "EN->FR + M->F", "random (norm of the sum)", "composed LTV"]


def result(seed: int, k: int) -> dict:
    def method(k: int) -> dict:
        return {"correct": [1] * k + [0] * (4 - k), "french_fem": [1] * k + [0] * (4 - k),
                "form_choice": {"french_fem": k / 4, "french_masc": 0.25, "english_fem": 0.0, "english_masc": 0.0}}

    return {"seed": seed, "methods": {m: method(k if m == "EN->FR + M->F" else 1) for m in METHODS},
            "grid": [{"a": a, "b": b, "accuracy": 0.5, "form_choice": {"french_fem": 0.25}} for a in (0.5, 1.0)
                     for b in (0.5, 1.0)],
            "cosine": {"vectors": {"sum": 0.5}, "vector minus start": {"sum": 0.25}}}


def ltv(task: str, seed: int, trained: bool) -> SimpleNamespace:
    return SimpleNamespace(task=task, layers=(4,), positions=(-1,), seed=seed, recipe="fast",
                           training=TrainingRecord(trained=trained, start_val_score=0.1, best_val_score=0.5,
                                                   steps_to_best=1))


def test_rows_of() -> None:
    assert [rows_of(m) for m in ("2-shot ICL", "random (norm of the sum)", "zero-shot", "EN->FR")] == [
        "draws", "draws", "auto", "seeds"]


def test_view_counts_only_trained_seeds() -> None:
    results = [result(0, 4), result(1, 2)]
    comp_ltvs = {(t, s): ltv(t, s, not (t == COMPONENTS[1] and s == 1)) for t in TASKS for s in (0, 1)}
    comp_ltvs[(COMPOSED, 0)].training = replace(comp_ltvs[(COMPOSED, 0)].training, trained=False)
    ledger = LTVLedger()
    view = CompositionView.from_ledger(results, comp_ltvs, ledger)
    assert [r["seed"] for r in view.sum_seeds] == [0] and [r["seed"] for r in view.own_seeds] == [1]
    assert [(r.task, r.seed) for r in ledger.rows] == [(COMPONENTS[0], 0), (COMPONENTS[1], 0), (COMPONENTS[0], 1),
                                                       (COMPONENTS[1], 1), (COMPOSED, 0), (COMPOSED, 1)]
    assert view.matrix("EN->FR + M->F").shape == (1, 4)
    assert view.matrix("2-shot ICL").shape == (2, 4)  # ICL counts every seed
    assert view.ests["EN->FR + M->F"]["correct"].value == 1.0
    table = view.table()
    assert table.loc["zero-shot", "seeds"] == 1 and table.loc["2-shot ICL", "seeds"] == 2
    assert table.loc["composed LTV", "chooses french masc (%)"] == 25.0
    assert table.loc["EN->FR + M->F", "first-token accuracy"].startswith("100.0 ± 0.0 %")
    empty = CompositionView.from_ledger(results, {k: ltv(*k, False) for k in comp_ltvs}, LTVLedger())
    assert empty.ests["EN->FR"]["correct"] is None
    assert empty.table().loc["EN->FR", "first-token accuracy"] == "did not train"
    assert view.grid()["fem"].tolist() == [25.0] * 4
    assert view.cosine_table().loc[("vector minus start", "seed 0"), "sum"] == 0.25
    fig, ax = view.plot()
    assert [t.get_text() for t in ax.get_xticklabels()][:2] == ["zero-shot", "2-shot ICL"]
    plt.close(fig)
    fig, axes = view.plot_grid()
    assert len(axes) == 2 and axes[0].images[0].get_array().tolist() == [[50.0, 50.0], [50.0, 50.0]]
    plt.close(fig)
    fig, axes = empty.plot_grid()
    assert not axes[0].images  # no seed counted: nothing drawn
    plt.close(fig)


def test_data_table() -> None:
    split = SimpleNamespace(train=[1, 2, 3], validation=[1], test=[1, 2])
    data = SimpleNamespace(splits={t: split for t in TASKS}, dropped={t: [0] for t in TASKS},
                           test=[SimpleNamespace(input="king"), SimpleNamespace(input="son")], banned={"roi", "fils"})
    assert data_table(data).loc[COMPOSED].tolist() == [3, 1, 1, 2]
