"""Chapter 03's race tables and differences (ltvlib.study.peft_compare_tables) on synthetic runs."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger
from ltvlib.study.peft_compare_tables import RaceView, diff_text

N = 10
METHODS = [SimpleNamespace(name="ltv", kind="ltv", budget="equal"),
           SimpleNamespace(name="prefix-1", kind="prefix_tuning", budget="equal"),
           SimpleNamespace(name="lora-8", kind="lora", budget="default")]


def run(kind: str, seed: int, k: int, trained: bool = True) -> dict:
    return {"kind": kind, "method": kind, "seed": seed, "trained": trained, "start_val_score": 0.5,
            "best_val_score": 0.8, "steps_to_best": 3, "test_accuracy": k / N, "test_correct": [1] * k + [0] * (N - k),
            "trainable_params": 576, "params_in_d": 1.0, "stopped_by_rule": seed == 0, "samples_to_best": 32 * (seed + 1),
            "seconds_to_best": 2.0, "step_seconds": [0.1, 0.2, 0.3], "latency_ms": 5.0, "n_test": N,
            "curve": [{"samples": 16, "wall_seconds": 1.0, "train_seconds": 0.5, "val_accuracy": 0.5},
                      {"samples": 32, "wall_seconds": 2.0, "train_seconds": 1.0, "val_accuracy": 0.75}]}


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
    t = v.race_table("sst2", ledger, 15, "race-fast")
    assert t.loc["ltv", "per seed %"] == f"80.0 / {DID_NOT_TRAIN}"
    assert t.loc["ltv", "trained"] == "1/2" and t.loc["lora-8", "setting"] == "default"
    assert t.loc["ltv", "samples to best"] == 32.0  # the trained seed only
    assert t.loc["prefix-1", "s / step"] == 0.2
    assert v.race_table("trec", ledger, 15, "race-fast").loc["ltv", "test acc. % (95 % CI)"] == DID_NOT_TRAIN
    diffs = v.differences()
    assert set(diffs) == {("sst2", "prefix-1"), ("sst2", "lora-8")}
    assert diffs["sst2", "prefix-1"].value == pytest.approx(0.2)
    dt = v.differences_table(diffs)
    assert dt.loc[("sst2", "lora-8"), "params"] == "8.5d"
    assert dt.loc[("sst2", "lora-8"), "LTV − method"].startswith("-10.0 ± ")
    assert diff_text(diffs, ["sst2", "trec"], ["prefix-1"]).startswith("sst2 LTV − prefix-1 +20.0 ± ")
    assert diff_text({}, ["sst2"], ["prefix-1"]) == "no LTV seed trained"
    side = v.paper_side_table({"ltv": ("d", 92.89, 0.049)})
    assert side.loc["ltv", "ours: params"] == "1d" and side.loc["ltv", "ours: s / step"] == 0.2
    fig, axes = v.plot_test({"ltv": 92.89})
    assert [tx.get_text() for tx in axes[1].texts] == [DID_NOT_TRAIN]
    plt.close(fig)
    fig, axes = v.plot_time_to_accuracy(16, {"LTV": (92.89, "C3")})
    assert axes.shape == (2, 2)
    line = axes[0, 0].lines[0]
    assert np.allclose(line.get_ydata(), [50.0, 75.0])
    plt.close(fig)
