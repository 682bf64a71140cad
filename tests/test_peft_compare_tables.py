"""Chapter 03's race tables and differences (ltvlib.study.peft_compare_tables) on synthetic runs."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger
from ltvlib.study.peft_compare_tables import RaceView, diff_text, estimate_text, lr_table, time_ratio

N = 10
METHODS = [SimpleNamespace(name="ltv", kind="ltv", budget="equal"),
           SimpleNamespace(name="prefix-1", kind="prefix_tuning", budget="equal"),
           SimpleNamespace(name="lora-8", kind="lora", budget="default")]


def run(kind: str, seed: int, k: int, trained: bool = True) -> dict:
    return {"kind": kind, "method": kind, "seed": seed, "trained": trained, "start_val_score": 0.5,
            "best_val_score": 0.8, "steps_to_best": 3, "test_accuracy": k / N, "test_correct": [1] * k + [0] * (N - k),
            "trainable_params": 576, "params_in_d": "1d", "lr": 0.03, "lr_scale": 1.0, "stopped_by_rule": seed == 0, "samples_to_best": 32 * (seed + 1),
            "seconds_to_best": 2.0, "step_seconds": [0.1, 0.2, 0.3], "latency_ms": 5.0, "n_test": N,
            "curve": [{"samples": 16, "wall_seconds": 1.0 + seed, "train_seconds": 0.5, "val_accuracy": 0.5},
                      {"samples": 32, "wall_seconds": 2.0 + seed, "train_seconds": 1.0, "val_accuracy": 0.75}]}


def view() -> RaceView:
    results = {"sst2": {"ltv": [run("ltv", 0, 8), run("ltv", 1, 2, trained=False)],
                        "prefix-1": [run("prefix_tuning", 0, 6), run("prefix_tuning", 1, 6)],
                        "lora-8": [run("lora", 0, 9), run("lora", 1, 9)]},
               "trec": {"ltv": [run("ltv", 0, 5, trained=False), run("ltv", 1, 5, trained=False)],
                        "prefix-1": [run("prefix_tuning", 0, 6), run("prefix_tuning", 1, 6)],
                        "lora-8": [run("lora", 0, 9), run("lora", 1, 9)]}}
    return RaceView(results, METHODS, {"ltv": "1d", "prefix-1": "20d", "lora-8": "8.5d"}, ["sst2", "trec"])


def test_gate_and_tables() -> None:
    v = view()
    ledger = LTVLedger()
    v.gate(ledger, 15, "race-fast")
    assert [r["seed"] for r in v.ltv_runs["sst2"]] == [0] and v.ltv_runs["trec"] == []
    assert v.accuracy("sst2", "ltv").value == pytest.approx(0.8)
    assert v.accuracy("trec", "ltv") is None
    t = v.race_table("sst2", ledger, 15, "race-fast", 0.7)
    assert t.loc["ltv", "per seed %"] == f"80.0 / {DID_NOT_TRAIN}"
    assert t.loc["ltv", "learned"] == "1/2" and t.loc["ltv", "converged"] == "1/2"
    assert t.loc["prefix-1", "samples to 70 %"] == "32 (2/2)" and t.loc["prefix-1", "seconds to 70 %"] == "2.5"
    assert t.loc["ltv", "params"] == "576 (1d)" and t.loc["ltv", "peak training memory (MB)"] == "not measured"
    assert v.race_table("sst2", ledger, 15, "race-fast", 0.9).loc["ltv", "samples to 90 %"] == "not reached"
    assert v.race_table("trec", ledger, 15, "race-fast", 0.7).loc["ltv", "test accuracy %"] == DID_NOT_TRAIN
    diffs = v.differences()
    assert set(diffs) == {("sst2", "prefix-1"), ("sst2", "lora-8")}
    assert diffs["sst2", "prefix-1"].value == pytest.approx(0.2)
    dt = v.differences_table(diffs)
    assert dt.loc[("sst2", "lora-8"), "params"] == "8.5d"
    assert dt.loc[("sst2", "lora-8"), "LTV − method"].startswith("-10.0 ± ")
    assert diff_text(diffs, ["sst2", "trec"], ["prefix-1"]).startswith("sst2 LTV − prefix-1 +20.0 ± ")
    assert diff_text({}, ["sst2"], ["prefix-1"]) == "no LTV seed trained"
    fig, axes = v.plot_test({"ltv": 92.89})
    assert [tx.get_text() for tx in axes[1].texts] == [DID_NOT_TRAIN]
    plt.close(fig)
    fig, axes = v.plot_time_to_accuracy(16, {"LTV": (92.89, "C3")})
    assert axes.shape == (2, 2)
    line = axes[0, 0].lines[0]
    assert np.allclose(line.get_ydata(), [50.0, 75.0])
    plt.close(fig)


def test_learning_rates_time_ratio_and_estimate_text() -> None:
    grid = lr_table({"ltv": {1 / 3: 0.5, 1.0: 0.75, 3.0: 0.7}}, {"ltv": 1.0})
    assert grid.loc["ltv", "x1"] == "75.0 *" and grid.loc["ltv", "x0.33"] == "50.0"
    a = [run("ltv", 0, 8), run("ltv", 1, 8)]
    b = [run("lora", 0, 9), run("lora", 1, 9)]
    r = time_ratio(a, b, 0.7)  # the same seconds to 75 % on both sides: a ratio of exactly 1
    assert r is not None and r.value == pytest.approx(1.0) and r.n == 2
    assert time_ratio(a, b, 0.9) is None  # nobody reached 90 %
    from ltvlib.stats import Estimate

    assert estimate_text(Estimate(0.725, 0.66, 0.783, n=10)) == "72.5 [66.0, 78.3]"
    assert estimate_text(Estimate(-0.1, -0.2, 0.05, n=10, difference=True)) == "-10.0 [-20.0, +5.0]"
