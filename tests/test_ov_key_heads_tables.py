"""Chapter 04's tables and pooled statistics (ltvlib.study.ov_key_heads_tables) on synthetic measurement dicts."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from ltvlib.ltv_record import TrainingRecord
from ltvlib.study import ov_key_heads_tables as tables
from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger

N = 10


def flags(k: int) -> list[int]:
    return [1] * k + [0] * (N - k)


def rec(k: int) -> dict:
    return {"value": k / N, "low": max(0.0, k / N - 0.1), "high": min(1.0, k / N + 0.1), "n": N, "correct": flags(k)}


def ltv(trained: bool = True) -> SimpleNamespace:
    return SimpleNamespace(task="t", layers=(4,), positions=(-1,), seed=0, recipe="fast",
                           vectors=torch.tensor([[3.0, 4.0]]),
                           training=TrainingRecord(trained=trained, start_val_score=0.1, best_val_score=0.6,
                                                   best_val_accuracy=0.6, steps_to_best=1, steps=3))


def ov_record() -> dict:
    ks = {"zero_shot": 1, "ltv": 9, "ov_raw": 0, "mlp": 0}
    return {"proportions": {k: {"accuracy": rec(v), "label_accuracy": rec(v)} for k, v in ks.items()}}


def control(own: int, draws: tuple[int, ...], norm: float) -> dict:
    return {"ltv": {"accuracy": rec(own), "label_accuracy": rec(own)}, "norm": norm,
            "draws": [{"accuracy": rec(k), "label_accuracy": rec(k)} for k in draws]}


# at |θ|: θ_OV keeps 5 of 10 against random 1 and 3; the MLP control 2; the paper's form saturates (all 0)
OVC = {"ov/at |θ|": control(5, (1, 3), 1.0), "mlp/at |θ|": control(2, (2, 2), 1.0),
       "ov/paper": control(0, (0, 0), 50.0), "mlp/paper": control(0, (1, 0), 2.3)}


def test_gain_share() -> None:
    zs, ltv_c, ov_c = (np.array(flags(k), dtype=float) for k in (2, 8, 5))
    share = tables.gain_share(ov_c, ltv_c, zs)
    assert share.value == pytest.approx(0.5)
    assert share.low <= 0.5 <= share.high and share.n == N
    assert tables.gain_share(ov_c, zs, ltv_c) is None  # the "LTV" gains nothing


def test_ov_table_pool_and_figure_at_equal_norm_and_in_the_paper_form() -> None:
    ov = {"a": ov_record()}
    t = tables.ov_table(ov, {"a": OVC}, ["a"])
    assert t.loc["θ_OV at |θ|: θ", "a"] == "50.0 % [23.7, 76.3]"
    assert t.loc["θ_OV at |θ|: random, mean [range]", "a"] == "20.0 [10.0, 30.0]"
    assert t.loc["θ_OV, paper's form: norm ÷ |θ|", "a"] == "50.00"
    p = tables.pool_ov(ov, {"a": OVC}, ["a"])
    assert p.vs_random["ov/at |θ|"].value == pytest.approx(0.3) and p.vs_random["ov/at |θ|"].draws == 2
    assert p.vs_random["ov/paper"].value == 0 and p.floor == {"ov/at |θ|": False, "mlp/at |θ|": False,
                                                               "ov/paper": True, "mlp/paper": False}
    assert p.ov_minus_mlp.value == pytest.approx(0.3)
    assert p.share is not None and p.share.value == pytest.approx(0.5)  # (0.5 - 0.1) / (0.9 - 0.1)
    assert p.accuracy["θ_OV at |θ|"].value == pytest.approx(0.5) and p.accuracy["LTV"].value == pytest.approx(0.9)
    assert set(p.intervals) == {"θ_OV at |θ|: θ − random", "MLP at |θ|: θ − random", "θ_OV, paper's form: θ − random",
                                "MLP, paper's form: θ − random", "θ_OV at |θ| − MLP at |θ|",
                                "share of the LTV's gain kept by θ_OV at |θ|"}
    with pytest.raises(ValueError, match="at least one"):
        tables.pool_ov(ov, {"a": OVC}, [])
    fig, axes = tables.plot_ov(ov, {"a": OVC}, ["a"])
    assert axes[0].patches[0].get_height() == pytest.approx(10.0)  # zero-shot on a
    assert axes[0].patches[2].get_height() == pytest.approx(50.0)  # θ_OV at |θ|
    assert axes[1].patches[2].get_height() == pytest.approx(0.0)  # θ_OV in the paper's form
    plt.close(fig)


def kh_record() -> dict:
    first = np.full((4, 2), 0.5)
    final = np.full((4, 2), 0.1)
    first[2, 0], final[2, 0] = 0.1, 0.6  # the key head
    u = {"n": 2, "counts": [1, 0, 1], "expected": [0.7, 0.7, 0.6], "fraction": 1.0, "fraction_low": 0.3,
         "fraction_high": 1.0, "expected_fraction": 0.6, "p_value": 0.4, "chi2": 1.0, "chi2_p": 0.6,
         "thirds_layers": [1, 1, 1], "n_layers": 4, "layer": 1}
    both = {"full": flags(8), "label": flags(8)}
    return {"attention": {"first": first.tolist(), "final": final.tolist()}, "key_heads": [(2, 0)],
            "key_after_heads": [(1, 0), (3, 1)], "key_after_u_shape": u,
            "correct": both, "zero_shot_correct": {"full": flags(1), "label": flags(1)},
            "key_correct": {"zero": {"full": flags(3), "label": flags(3)}, "mean": {"full": flags(6), "label": flags(6)}},
            "key_after_correct": {"zero": {"full": flags(4), "label": flags(4)},
                                  "mean": {"full": flags(6), "label": flags(6)}},
            "random_correct": {"zero": [{"full": flags(7), "label": flags(7)}, {"full": flags(5), "label": flags(5)}],
                               "mean": [{"full": flags(8), "label": flags(8)}]},
            "random_after_correct": None}


def test_vectors_table_shows_a_vector_that_did_not_learn_as_such() -> None:
    t = tables.vectors_table({"a": ltv(), "b": ltv(False)}, ["a"], LTVLedger())
    assert t.loc["a", "validation accuracy"] == "60.0 %" and t.loc["b", "validation accuracy"] == DID_NOT_TRAIN
    assert bool(t.loc["a", "label space"]) and not bool(t.loc["b", "label space"])


def test_key_head_tables_and_statistics() -> None:
    kh = {"a": kh_record()}
    table = tables.ablation_table(kh, {"a": ltv()}, ["a"], LTVLedger(), "full", 1)
    assert table.loc["LTV θ", "a"] == "80.0 % [49.0, 94.3]"
    assert table.loc["all layers: random heads, zero", "a"] == "60.0 % [50.0, 70.0]"
    assert table.loc["layers ≥ 1: random heads, mean", "a"] == "—"
    d = tables.pool_key_heads(kh, ["a"])
    assert d["random-head minus key-head ablation (zero)"].value == pytest.approx(0.3)
    assert d["LTV minus key-head ablation"].value == pytest.approx(0.5)
    shares, n_u = tables.u_shape_shares(kh, ["a"])
    assert n_u == 2 and shares["first third"].value == pytest.approx(0.5 - 2 / 3 / 2)
    assert tables.u_shape_shares(kh, []) == ({}, 0)
    assert tables.u_shape_table(kh, ["a"], ["a"]).loc["a", "outer share"] == "100 % [30, 100]"
    _first, _final, is_key, same = tables.head_groups(kh["a"], 4, 2)
    assert is_key.sum() == 1 and same.tolist()[2] == [False, True] and same.sum() == 1
    assert tables.attention_table(kh, [], 4, 2) is None  # no learned LTV: nothing to tabulate, no crash
    att = tables.attention_table(kh, ["a"], 4, 2)
    assert att is not None and att.loc[("a", "key heads"), "to first token"] == pytest.approx(0.1)
    assert att.loc[("a", "all other heads"), "n"] == 7
    diffs = tables.attention_differences(tables.attention_pools(kh, ["a"], 4, 2))
    assert diffs["attention to the first token, key minus other heads"].value == pytest.approx(-0.4)
    assert diffs["attention to the final position, key minus other heads"].value == pytest.approx(0.5)
    fig, ax = tables.plot_placement(kh, ["a"], 4, 1)
    assert [p.get_height() for p in ax.patches] == [0.0, 1.0, 0.0, 1.0]
    plt.close(fig)
    for fig, _ in (tables.plot_ablation(kh, ["a"], {"a": True}), tables.plot_attention(None),
                   tables.plot_attention(tables.attention_pools(kh, ["a"], 4, 2))):
        plt.close(fig)


def test_mean_difference_and_accuracy_text() -> None:
    e = tables.mean_difference(np.array([1.0, 1.0, 1.0]), np.array([0.0, 0.0]))
    assert (e.value, e.low, e.high, e.n) == (1.0, 1.0, 1.0, 2)
    assert tables.accuracy_text([1, 0, 0, 0]) == "25.0 % [4.6, 69.9]"
    assert tables.draws_text([0.1, 0.3]) == "20.0 [10.0, 30.0]"
