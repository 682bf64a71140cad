"""Chapter 06's generalisation tables and statistics (ltvlib.study.generalization_tables) on synthetic inputs."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from ltvlib.ltv_record import TrainingRecord
from ltvlib.study import generalization_tables as gt
from ltvlib.study.generalization import initial_vectors
from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger

D = 16


def ltv(task: str, seed: int, direction: torch.Tensor, trained: bool = True) -> SimpleNamespace:
    v = SimpleNamespace(task=task, layers=(4,), positions=(-1,), seed=seed, recipe="fast",
                        config=SimpleNamespace(init_range=0.01),
                        training=TrainingRecord(trained=trained, start_val_score=0.1, best_val_score=0.5,
                                                best_val_accuracy=0.5, steps_to_best=1, steps=2, seconds=1.04,
                                                effective_init=(0.01,)))
    v.vectors = torch.zeros(1, D)
    v.vectors = initial_vectors(v) + direction[None]
    return v


def vectors() -> dict:
    a, b = torch.zeros(D), torch.zeros(D)
    a[0], b[1] = 1.0, 1.0
    return {("a", 0): ltv("a", 0, a), ("a", 1): ltv("a", 1, a), ("b", 0): ltv("b", 0, b), ("b", 1): ltv("b", 1, b)}


def test_vectors_and_similarity() -> None:
    ltvs = vectors()
    ledger = LTVLedger()
    table = gt.vectors_table(ltvs, ledger)
    assert table.loc[("a", 0), "validation accuracy (%)"] == "50.0"
    assert "train seconds" not in table.columns  # vectors trained together share one call's time
    assert table.loc[("a", 0), "norm"] == pytest.approx(1.0, abs=0.05)
    sim = gt.similarity(ltvs, 0)
    assert sim.groups == ["a", "a", "b", "b"] and sim.labels[1] == "a s1"
    assert sim.summ["vector minus start"]["within"] == pytest.approx(1.0)
    assert sim.summ["vector minus start"]["across"] == pytest.approx(0.0)
    assert sim.chance == pytest.approx(1 / 3) and sorted(sim.multi) == ["a", "b"]
    assert sim.cluster_stats["vector minus start"]["gap"].value == pytest.approx(1.0)
    sims = gt.similarity_table(sim)
    assert sims.loc["nearest other vector of the same task", "vector minus start"] == "100 % (chance 33 %)"
    assert sims.loc["mean cosine, same task", "vector minus start"] == "1.000"
    assert gt.within_table(sim).loc["b", "vector minus start"] == pytest.approx(1.0)
    fig, ax = gt.plot_cosine(sim.cos_d, sim)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a s0", "a s1", "b s0", "b s1"]
    plt.close(fig)
    panels = gt.projection_panels(sim, 0)
    assert panels[0][0] == "PCA" and panels[0][1].shape == (4, 2) and panels[0][2].startswith("PC1 (")
    fig, axes = gt.plot_projection(sim, panels)
    assert len(axes) == len(panels) and len(axes[0].collections) == 4
    plt.close(fig)


def row(source: str, seed: int, target: str, k: int, n: int = 4) -> dict:
    correct = [1] * k + [0] * (n - k)
    return {"source": source, "seed": seed, "target": target, "accuracy": k / n, "correct": correct, "n": n,
            "label_accuracy": k / n if target != "antonym" else None,
            "label_correct": correct if target != "antonym" else None,
            "top_predictions": [(" True", 0.75), (" x", 0.25)]}


def test_transfer_and_snli_rte() -> None:
    tasks = ["antonym", "snli", "rte"]
    good = torch.zeros(D)
    ltvs = {(t, 0): ltv(t, 0, good, trained=t != "antonym") for t in tasks}
    rows = [row(s, 0, t, 3 if (s, t) == ("snli", "rte") else 4 if s == t else 0) for s in tasks for t in tasks]
    ledger = LTVLedger()
    tr = gt.transfer_tables(rows, ltvs, ledger, tasks, (0,))
    assert tr.cls_targets == ["snli", "rte"]
    assert tr.acc.loc["snli", "rte"] == 75.0 and np.isnan(tr.acc.loc["antonym", "rte"])
    assert tr.own.loc["rte", 0] == 100.0 and tr.n_test == {"antonym": 4, "snli": 4, "rte": 4}
    assert len(tr.off) == 6
    top = gt.top_tokens_table(tr, tasks)
    assert top.loc["snli", "rte"] == "' True' 75 %, ' x' 25 %" and top.loc["rte", "rte"] == ""
    zero = {t: {"accuracy": 0.25, "label_accuracy": 0.5, "n": 4} for t in tasks}
    fig, axes = gt.plot_transfer(tr, zero)
    assert len(axes) == 2 and [t.get_text() for t in axes[0].get_yticklabels()][-1] == "(zero-shot)"
    plt.close(fig)
    rte_test = [SimpleNamespace(output=o) for o in ("True", "True", "True", "False")]
    rand = [{"correct": [0, 1, 0, 0], "label_correct": [0, 1, 0, 0]}, {"correct": [1, 1, 0, 0],
                                                                        "label_correct": [1, 1, 0, 0]}]
    s = gt.snli_rte(tr, rand, zero, rte_test, True, True, tasks, 2)
    assert s.best_other is None and s.n_rte == 4  # antonym's vector did not train: no other foreign LTV
    assert s.rte_cells["SNLI LTV on RTE (ours)"].value == 0.75
    assert s.rte_cells["always the majority label"].value == 0.75
    assert s.rte_cells["random vectors of the SNLI LTV's norm (2 draws)"].value == pytest.approx(0.375)
    table = gt.snli_rte_table(s)
    assert table.loc["best other foreign LTV on RTE (None)", "accuracy"] == DID_NOT_TRAIN
    assert table.loc["RTE zero-shot", "label-restricted"] == "–"
    fig, ax = gt.plot_snli_rte(s.rte_cells)
    assert len(ax.patches) == 5  # the cells with a number (no other foreign LTV trained)
    plt.close(fig)
    pooled = gt.foreign_pooled(tr.off)
    assert pooled.n == 12 and pooled.value == 0.0  # snli -> antonym, rte -> snli and antonym; not snli -> rte
    assert gt.foreign_pooled(tr.off[tr.off.source == "antonym"]) is None
