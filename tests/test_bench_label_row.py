"""bench/label_row.py: the learned rule (lower Wilson bound above zero-shot and majority) and a row on a tiny model."""

from __future__ import annotations

import pytest

from ltvlib.stats import wilson_interval
from tests.bench_scripts import load_bench

label_row = load_bench("label_row")


def test_majority_share():
    assert label_row.majority_share(["a", "b", "a", "a"]) == 0.75


def test_learned_needs_the_lower_bound_above_both_baselines():
    low = wilson_interval(160, 200)[0]  # about 0.74
    assert label_row.learned(160, 200, zero_shot=0.70, majority=0.5) == (True, low)
    assert label_row.learned(160, 200, zero_shot=0.78, majority=0.5) == (False, low)  # above the point, not the bound
    assert label_row.learned(160, 200, zero_shot=0.5, majority=0.75)[0] is False
    assert label_row.learned(100, 200, zero_shot=0.727, majority=0.5)[0] is False  # Gemma's SST-2 case: chance


def test_a_row_on_a_tiny_model(llama):
    r = label_row.measure(llama, "sst2", profile="smoke", layer=1, n_test=8)
    assert r["layer"] == 1 and r["val"]["n"] == 16 and r["test"]["n"] == 8
    for split in ("val", "test"):
        s = r[split]
        assert s["correct"] == round(s["accuracy"] * s["n"]) and 0.5 <= s["majority"] <= 1.0
        assert s["zero_shot_labels"] is not None and s["balanced"] is not None
    assert r["learned"] == (r["val_wilson_low"] > max(r["val"]["zero_shot_labels"], r["val"]["majority"]))
    assert label_row.line(r).count("|") == label_row.HEADER.count("|")


def test_a_task_without_labels_is_refused(llama):
    with pytest.raises(ValueError, match="not a classification task"):
        label_row.measure(llama, "antonym", profile="smoke")
