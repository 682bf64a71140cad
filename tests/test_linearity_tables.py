"""Chapter 05's tables and statistics (ltvlib.study.linearity_tables) on synthetic measurement dicts."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ltvlib.ltv_record import TrainingRecord
from ltvlib.study import linearity_tables as tables
from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger

N = 10


def rec(k: int) -> dict:
    return {"value": k / N, "low": k / N - 0.05, "high": k / N + 0.05, "n": N, "correct": [1] * k + [0] * (N - k)}


def ltv(layer: int, trained: bool = True) -> SimpleNamespace:
    return SimpleNamespace(task="sst2", layers=(layer,), positions=(-1,), seed=0, recipe="fast",
                           training=TrainingRecord(trained=trained, start_val_score=0.1, best_val_score=0.6,
                                                   steps_to_best=1))


def ctl_record(layer: int) -> dict:
    ks = {"zero_shot": 2, "constant": 6, "mean_shift": 7, "own_shift": 9}
    sa = {k: {"accuracy": rec(v), "label_accuracy": rec(v) if k != "mean_shift" else None} for k, v in ks.items()}
    own = {"cos_theta_Qtheta": 0.1 * layer, "alignment": 0.1, "alignment_Qtheta": 0.1 + 0.05 * layer,
           "r2_heldout": 0.9}
    draws = [{"cos_theta_Qtheta": 0.05, "alignment": 0.1, "alignment_Qtheta": 0.1 + d, "r2_heldout": 0.8}
             for d in (0.0, 0.01, 0.02)]
    summary = {k: {"mean": float(np.mean([d[k] for d in draws])), "draws": [d[k] for d in draws]} for k in own}
    return {"shift_accuracy": sa, "control": {"ltv": own, "draws": draws, "summary": summary},
            "alignment_random": 0.01}


def res_record() -> dict:
    return {"accuracy": {"ltv": 0.9}, "r2_heldout": 0.87, "homogeneity": [{"scale": 1.0, "coef": 1.0},
                                                                            {"scale": 2.0, "coef": 1.9}],
            "additivity_random": {"rel_err": 0.1234}, "w_theta_vs_shift": {"cos": 0.95}, "norm_ratio": 1.5,
            "lens": {"v": [" a", " b"], "Sv": [" c", " d"]}}


PLAN = {"sst2": [1, 2, 3, 5]}
POINTS = [("sst2", l) for l in PLAN["sst2"]]


def setup() -> tuple:
    ltvs = {p: ltv(p[1], p[1] != 5) for p in POINTS}
    trained = {p: ltvs[p].training.trained for p in POINTS}
    ctl = {p: ctl_record(p[1]) for p in POINTS if trained[p]}
    res = {p: res_record() for p in POINTS if trained[p]}
    return ltvs, trained, ctl, res


def test_accuracy_table_and_reconstruction() -> None:
    ltvs, trained, ctl, res = setup()
    ledger = LTVLedger()
    t = tables.accuracy_table(POINTS, res, ctl, ltvs, ["sst2"], ledger)
    assert t.loc[("sst2", 1), "Wθ (paper)"] == "60.0 % [55.0, 65.0]"
    assert t.loc[("sst2", 1), "LTV at block l"] == "90.0 %"
    assert t.loc[("sst2", 5), "trained"] == DID_NOT_TRAIN
    assert t.loc[("sst2", 2), "R² held-out"] == "0.87"
    pts = tables.reconstruction_points(POINTS, ctl, trained, ["sst2"], 0.10)
    assert pts == POINTS[:3]
    assert tables.reconstruction_points(POINTS, ctl, trained, ["sst2"], 0.8) == []
    gap = tables.reconstruction_gap(ctl, pts)
    assert gap["LTV (own shift) − Wθ"].value == pytest.approx(0.3)
    assert gap["Wθ accuracy"].n == 3 * N and gap["LTV (own shift) accuracy"].value == pytest.approx(0.9)
    fig, axes = tables.plot_reconstruction(PLAN, "sst2", trained, ctl)
    assert axes[0].lines[0].get_xdata().tolist() == [1, 2, 3]
    plt.close(fig)


def test_rotation_and_alignment() -> None:
    ltvs, trained, ctl, res = setup()
    ledger = LTVLedger()
    ls = tables.sweep_layers(PLAN, "sst2", trained, ltvs, res, ledger)
    assert ls == [1, 2, 3] and {r.where for r in ledger.rows} == {"Figure 5.2"}
    rot = tables.rotation_table(POINTS, ctl, ltvs, ledger)
    assert rot.loc[("sst2", 2), "cos(v, Qv): LTV"] == "0.200"
    assert rot.loc[("sst2", 2), "align Qv: random mean [range]"] == "0.110 [0.100, 0.120]"
    own, draws = tables.control_values(ctl, "sst2", "cos_theta_Qtheta", ls)
    assert own.tolist() == pytest.approx([0.1, 0.2, 0.3]) and draws.shape == (3, 3)
    # two seeds at every layer: seed 1's LTV the same as seed 0's plus 0.1 on cos and on the alignment gain
    seed_ctl = {(l, 0): ctl["sst2", l] for l in ls}
    for l in ls:
        c = ctl["sst2", l]["control"]
        ltv1 = dict(c["ltv"], cos_theta_Qtheta=c["ltv"]["cos_theta_Qtheta"] + 0.1,
                    alignment_Qtheta=c["ltv"]["alignment_Qtheta"] + 0.1)
        seed_ctl[l, 1] = {"control": dict(c, ltv=ltv1)}
    cos_ex = tables.rotation_excess(seed_ctl, [0, 1], ls, 0)
    assert cos_ex["ltv"].value == pytest.approx(0.2) and cos_ex["excess"].value > 0
    assert cos_ex["ltv"].n == cos_ex["ltv"].seeds == 2
    assert tables.rotation_excess(seed_ctl, [0, 1], ls[:2], 0) is None
    assert tables.rotation_excess(seed_ctl, [0], ls, 0) is None
    al = tables.alignment_excess(seed_ctl, [0, 1], [1, 2], 0)
    assert al["ltv"].value == pytest.approx(0.125)  # 0.075 for seed 0, 0.175 for seed 1
    assert tables.alignment_excess(seed_ctl, [0, 1], [1], 0) is None
    shown = tables.excess_table({"x": cos_ex["ltv"]})
    assert shown.loc["x", "value"].startswith("+") and shown.loc["x", "n"] == 2

    fig, axes = tables.plot_rotation(ctl, "sst2", ls, 2)
    assert axes[0].lines[0].get_ydata().tolist() == pytest.approx([0.1, 0.2, 0.3])
    plt.close(fig)
    fig, axes = tables.plot_rotation(ctl, None, [], 2)
    assert not axes[0].lines
    plt.close(fig)


def test_seed_excess_resamples_seeds_not_layers() -> None:
    rng = np.random.default_rng(0)
    layers = np.array([2, 5, 9, 14])
    # every seed rises by 0.3 from the first layer to the last; the draws are flat noise
    own = np.stack([0.1 + 0.3 * (layers - 2) / 12 + 0.01 * rng.standard_normal(4) for _ in range(3)])
    draws = 0.05 * rng.standard_normal((3, 4, 4))
    out = tables.seed_excess(own, draws, x=layers, statistic="slope", n_resamples=500, seed=1)
    assert out["ltv"].value == pytest.approx(0.3, abs=0.03) and out["ltv"].n == 3
    assert out["excess"].low > 0 and out["excess"].difference
    # the same seeds at identical values: no spread over seeds, so only the draws widen the LTV's interval
    same = tables.seed_excess(np.tile(own[:1], (3, 1)), draws, x=layers, statistic="slope", n_resamples=500)
    assert same["ltv"].low == pytest.approx(same["ltv"].high)
    mean = tables.seed_excess(own, draws, statistic="mean", n_resamples=500)
    assert mean["ltv"].value == pytest.approx(own.mean())
    for bad in ({"own": own[:1], "draws": draws[:1]}, {"own": own, "draws": draws[:, :, :3]},
                {"own": own, "draws": draws, "statistic": "median"}, {"own": own[:, :2], "draws": draws[:, :, :2], "x": [1, 2],
                                                                        "statistic": "slope"}):
        with pytest.raises(ValueError):
            tables.seed_excess(**bad)


def test_checks_and_lens() -> None:
    ltvs, _, _, res = setup()
    checks = tables.checks_table(POINTS, res, ltvs, LTVLedger())
    assert checks.loc[("sst2", 1), "coef at a=2"] == "1.90"
    assert "coef at a=1" not in checks.columns
    assert checks.loc[("sst2", 3), "additivity error"] == "0.123"
    lens = tables.lens_tables(res, "sst2", [1, 2, 3])
    assert [c.split("layer ")[1][0] for c, _ in lens] == ["1", "2", "3"]
    assert lens[0][1].loc["#2", "Sv"] == "' d'"
    assert lens[0][0].endswith("(top tokens of unembed(norm(v)); label words: negative, positive)")
    assert tables.lens_tables(res, None, []) == []
