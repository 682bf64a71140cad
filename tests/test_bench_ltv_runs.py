"""bench/ltv_runs.py: a run specification is parsed or refused, and a run on a tiny model is timed, counted and
set beside the plan's count of it."""

from __future__ import annotations

import pytest

from tests.bench_scripts import load_bench

ltv_runs = load_bench("ltv_runs")


def test_run_specifications():
    run = ltv_runs.Run.parse("antonym:0,4:-5,-1:0,1,2:8")
    assert (run.task, run.layers, run.positions, run.seeds, run.shots) == ("antonym", (0, 4), (-5, -1), (0, 1, 2), 8)
    with pytest.raises(ValueError, match="task:layers:positions:seeds:shots"):
        ltv_runs.Run.parse("antonym:15")


def test_a_run_is_timed_counted_and_planned(llama):
    row = ltv_runs.measure(llama, ltv_runs.Run.parse("antonym:1:-1:0,1:0"), profile="smoke", gflops=10.0)
    assert len(row["attempts"]) == len(row["kept_steps"]) == 2 and min(row["attempts"]) >= 1
    assert row["counted_flops"] > 0 and row["planned_flops"] > 0 and row["wall_s"] > 0
    assert row["wall_over_counted"] == pytest.approx(row["wall_s"] / (row["counted_flops"] / 10e9))
    # one attempt per seed at the schedule's maximum: what ran is within that unless a retry was made
    if max(row["attempts"]) == 1:
        assert row["counted_flops"] <= 1.10 * row["planned_flops"]
    table = ltv_runs.report([row])
    assert "antonym, blocks 1, positions -1, seeds 0,1, 0 shots" in table and table.count("\n") == 2
