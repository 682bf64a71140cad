"""bench/recipes.py: one recipe's row on a tiny model, and the side-by-side ratio read from two rows."""

from __future__ import annotations

import pytest

from tests.bench_scripts import load_bench

recipes = load_bench("recipes")


def test_a_row_trains_and_evaluates_at_the_profile_sizes(llama):
    row = recipes.measure(llama, "antonym", "fast", profile="smoke", layer=1)
    assert row["recipe"] == "fast" and row["layer"] == 1 and row["n_test"] == 16  # the smoke profile's test size
    assert row["steps"] > 0 and row["samples"] == row["steps"] * 16
    assert 0.0 <= row["test_accuracy"] <= 1.0 and row["wall_s"] > 0 and row["peak_rss_gib"] > 0


def test_compare_is_paper_over_fast_with_the_accuracy_difference_beside_it():
    common = {"model": "m", "task": "t", "layer": 1, "steps": 1, "samples": 1, "trained": True,
              "val_accuracy": 0.5, "n_test": 10, "peak_rss_gib": 1.0}
    rows = [dict(common, recipe="paper", wall_s=30.0, cpu_s=60.0, test_accuracy=0.5),
            dict(common, recipe="fast", wall_s=10.0, cpu_s=15.0, test_accuracy=0.6)]
    c = recipes.compare(rows)
    assert c["wall_ratio"] == 3.0 and c["cpu_ratio"] == 4.0 and c["test_points"] == pytest.approx(10.0)
    assert "wall 3.00x, CPU 4.00x; test accuracy fast - paper +10.0 points" in recipes.table(rows)
