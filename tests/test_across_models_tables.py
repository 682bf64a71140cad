"""Chapter 08's tables and statistics (ltvlib.study.across_models_tables) on synthetic per-model results."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from ltvlib.ltv_record import TrainingRecord
from ltvlib.study import across_models_tables as tables
from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger

N = 10


def flags(k: int) -> list[int]:
    return [1] * k + [0] * (N - k)


def ltv(layer: int, trained: bool) -> SimpleNamespace:
    return SimpleNamespace(task="antonym", layers=(layer,), positions=(-1,), seed=0, recipe="fast",
                           vectors=torch.tensor([3.0, 4.0]),
                           training=TrainingRecord(trained=trained, start_val_score=0.1, best_val_score=0.6,
                                                   steps_to_best=3))


def model_results(trained: bool) -> dict:
    correct = {"zero-shot": flags(1), "ltv": flags(8), "vanilla_tv": flags(5), "vanilla_tv_difference": flags(6),
               "function_vector": flags(7)}
    return {"L": 8, "mid": 4, "d": 4, "stream_rms": {2: 1.0, 4: 2.0, 6: 4.0},
            "ltv": {("antonym", 4): ltv(4, trained), ("antonym", 2): ltv(2, True), ("antonym", 6): ltv(6, False)},
            "table": {"antonym": {"zero-shot": 10.0, "2-shot ICL": 50.0, "ltv": 80.0, "vanilla_tv": 50.0,
                                  "vanilla_tv_difference": 60.0, "function_vector": None, "icl_n": {"2": 5}}},
            "n_test": {"antonym": N},
            "correct": {("antonym", l): correct for l in (2, 4, 6)},
            "sweep": {"antonym": {"ltv": {2: 70.0, 6: 20.0}, "vanilla_tv": {2: 30.0, 4: 50.0},
                                  "vanilla_tv_difference": {2: 30.0, 4: 60.0}, "function_vector": {2: 40.0, 4: 70.0}}},
            "ltv_layers": {"antonym": [2, 6]},
            "key_heads": {"antonym": {"ltv": 80.0, "key_zero": 30.0, "random_zero": 70.0, "key_mean": 60.0,
                                      "random_mean": 75.0, "random_mean_sd": 2.5, "n_key": 3, "n_heads": 27}},
            "key_correct": {"antonym": {"ltv": flags(8), "key_zero": flags(3), "random_zero": [flags(7), flags(6)]}},
            "linearity": {"antonym": {2: {"ltv": 70.0, "w_theta": 65.0, "w_theta_last_block": 60.0, "zero_shot": 10.0,
                                          "r2_heldout": 0.9, "explained": 0.8, "cos_theta_Qtheta": 0.5, "stretch": 1.2},
                                      6: {"ltv": 20.0, "w_theta": 15.0, "w_theta_last_block": 15.0, "zero_shot": 10.0,
                                          "r2_heldout": 0.9, "explained": 0.8, "cos_theta_Qtheta": 0.9,
                                          "stretch": 1.0}}},
            "attention_write": {4: {"relative_error": 1e-5, "unnormalised_ratio": 1.0, "mean_norm": 3.0}},
            "fv_write": {"antonym": {"norm_ratio": 1.1, "cos": 0.95}}}


def results() -> dict:
    return {"a": model_results(True), "b": model_results(False)}


def test_tables() -> None:
    r = results()
    ledger = LTVLedger()
    mid = tables.middle_table(r, ["a", "b"], ["antonym"], (2,), ledger)
    assert mid.loc[("a", "antonym"), "LTV"] == "80.0 [49.0, 94.3]"
    assert mid.loc[("b", "antonym"), "LTV"] == DID_NOT_TRAIN
    assert mid.loc[("a", "antonym"), "FV"] == "not computable"
    assert mid.loc[("a", "antonym"), "2-shot ICL"] == tables.cell_text(tables.est_of(50.0, 5))
    lt = tables.ltv_table(r)
    assert lt.loc[("a", "antonym", 4), "|θ| / |h|"] == pytest.approx(5 / (2.0 * 2))
    assert lt.loc[("b", "antonym", 4), "trained"] == "no"
    aw, fvw, ok = tables.fv_checks(r, ["a", "b"])
    assert fvw.index.names == ["model", "task"]
    assert ok == {"a": True, "b": True} and aw.index.names == ["model", "layer"]
    r["b"]["fv_write"]["antonym"]["cos"] = 0.5
    assert tables.fv_checks(r, ["a", "b"])[2] == {"a": True, "b": False}
    kh = tables.key_heads_table(r, ["antonym"], LTVLedger())
    assert kh.loc[("a", "antonym"), "random, mean (sd)"] == "2.5" and kh.loc[("b", "antonym"), "key, zero"] == DID_NOT_TRAIN
    lin = tables.linearity_table(r, ["antonym"], {"antonym": N}, LTVLedger())
    assert lin.loc[("a", "antonym", 6), "LTV"] == DID_NOT_TRAIN and lin.loc[("a", "antonym", 2), "depth l/L"] == 0.25


def test_gaps_and_points() -> None:
    r = results()
    ok = {"a": True, "b": False}
    gaps = tables.middle_gaps(r, ["antonym"], ok, 0)
    assert gaps["b"] is None and gaps["a"].value == pytest.approx(0.1)  # LTV 8 against the FV's 7
    assert tables.best_extracted(r["b"], "antonym", 4, False)[1] == "Vanilla TV diff."
    sweep = tables.sweep_gaps(r, ["antonym"], ok, 0)
    assert list(sweep) == ["a, antonym, layer 2", "a, antonym, layer 6", "b, antonym, layer 2", "b, antonym, layer 6"]
    assert sweep["a, antonym, layer 6"] == ("antonym", 6, None)
    assert sweep["b, antonym, layer 2"][2].value == pytest.approx(0.2)  # against Vanilla TV diff.: the FV failed
    key = tables.key_gaps(r, ["antonym"], 0)
    assert key["b"] is None and key["a"].value == pytest.approx(0.65 - 0.3)
    # chapter 05's reconstruction test on label-space points only: SST-2 at layers 2 (works) and 6 (did not learn)
    def ctl(own: int, w: int, zero: int) -> dict:
        acc = {k: {"accuracy": {"value": v / N, "correct": flags(v)}} for k, v in
               (("own_shift", own), ("constant", w), ("zero_shot", zero))}
        return {"shift_accuracy": acc}

    r["a"]["ltv"][("sst2", 2)], r["a"]["ltv"][("sst2", 6)] = ltv(2, True), ltv(6, False)
    r["a"]["linear_ctl"] = {("sst2", 2): ctl(9, 7, 5), ("sst2", 6): ctl(9, 1, 5), ("antonym", 2): ctl(9, 1, 0)}
    r["b"]["linear_ctl"] = {("sst2", 2): ctl(5, 5, 5)}  # the LTV does not beat zero-shot by the margin
    r["b"]["ltv"][("sst2", 2)] = ltv(2, True)
    recon = tables.reconstruction_gaps(r, ["antonym", "sst2"])
    assert recon["a"][0] == [("sst2", 2)] and recon["a"][1]["LTV (own shift) − Wθ"].value == pytest.approx(0.2)
    assert recon["b"] == ([], {})
    assert tables.sweep_panels(["a", "b"], ["antonym", "sst2"]) == [("a", "antonym"), ("b", "antonym"),
                                                                    ("a", "sst2"), ("b", "sst2")]


def test_figures() -> None:
    r = results()
    ledger = LTVLedger()
    fig, ax = tables.plot_middle(r, ["a", "b"], ["antonym"], ledger)
    assert [round(p.get_height(), 6) for p in ax.patches[:5]] == [10.0, 80.0, 50.0, 60.0, 70.0]
    assert np.isnan(ax.patches[6].get_height())  # b's LTV did not train
    plt.close(fig)
    for fig, _ in (tables.plot_stream(r, ["a", "b"]),
                   tables.plot_sweep(r, tables.sweep_panels(["a", "b"], ["antonym"]), {"antonym": N}, ledger),
                   tables.plot_key_heads(r, ["a", "b"], ["antonym"], ledger),
                   tables.plot_linearity(r, ["a", "b"], ["antonym"], {"antonym": N}, ledger)):
        plt.close(fig)
    assert {row.where for row in ledger.rows} == {"Figure 8.2", "Figure 8.3", "Figure 8.4", "Figure 8.5"}
