"""bench/step_rules.py: the offline step-size rules keep the run the trainer would keep."""

from __future__ import annotations

import math

import pytest

from tests.bench_scripts import load_bench

step_rules = load_bench("step_rules")


def _run(test, score, stopped="patience", trained=True):
    return {"trained": trained, "test": test, "score": score, "stopped": stopped}


RUNS = {
    ("trec", 0, 27, 0): _run(40.0, 50.0, "budget"), ("trec", 0, 81, 0): _run(55.0, 60.0, "patience"),
    ("trec", 0, 27, 1): _run(45.0, 50.0, "patience"), ("trec", 0, 81, 1): _run(60.0, 70.0),
    ("trec", 0, 27, 2): _run(45.0, 50.0, "budget"), ("trec", 0, 81, 2): _run(60.0, 50.0),  # a tie keeps the first
    ("trec", 0, 27, 3): _run(45.0, 50.0, "budget"), ("trec", 0, 81, 3): _run(90.0, 90.0, trained=False),
}


@pytest.mark.parametrize(("rule", "seed", "expected"), [
    ("fixed", 0, (40.0, 1)), ("budget", 0, (55.0, 2)), ("pair", 0, (55.0, 2)),
    ("budget", 1, (45.0, 1)), ("pair", 1, (60.0, 2)),  # patience ended it: no budget retry; the pair still runs
    ("budget", 2, (45.0, 2)), ("pair", 2, (45.0, 2)),
    ("budget", 3, (45.0, 2)),  # a larger-step run that did not train is dropped
])
def test_rules_keep_the_run_the_trainer_keeps(rule, seed, expected):
    assert step_rules.kept(RUNS, "trec", 0, 27, seed, rule) == expected


def test_a_missing_run_is_reported_not_guessed():
    assert step_rules.kept(RUNS, "trec", 0, 9, 0, "fixed") is None
    assert step_rules.kept({("trec", 0, 27, 0): _run(1.0, 1.0, "budget")}, "trec", 0, 27, 0, "budget") is None


def test_tables_are_read_with_their_seed_and_columns(tmp_path):
    table = tmp_path / "t.md"
    table.write_text(
        "model smollm2-135m (30 layers); test queries 200; seed 4; prompt store shared across vectors; single runs "
        "(no retries)\n\n"
        "| task | layer | stream RMS | recipe | lr | init | val (start -> best) | test acc [95 % CI] | trained | "
        "best at step | steps | wall (s) | stopped by | val score |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        "| trec | 3 | 2.85 | lr*3 | 3.76 | 0.0464 | 0.0 -> 73.8 | 77.5 % [71.2, 82.7] (n=200) | yes | 48 | 64 | 27 | "
        "patience | 73.81 |\n"
        "| trec | 29 | | lr*9 | | | | diverged: loss=nan | no | | | 3 | diverged | |\n")
    runs = step_rules.read_runs([table])
    assert runs[("trec", 3, 81, 4)] == {"trained": True, "test": 77.5, "score": 73.81, "stopped": "patience"}
    assert runs[("trec", 29, 243, 4)]["stopped"] == "diverged" and math.isnan(runs[("trec", 29, 243, 4)]["test"])
    (tmp_path / "old.md").write_text("model smollm2-135m (30 layers); test queries 200; seed 0\n")
    with pytest.raises(SystemExit, match="single-run"):
        step_rules.read_runs([tmp_path / "old.md"])
    (tmp_path / "new.md").write_text("model smollm2-135m (30 layers); test queries 200; seed 0; prompt store shared "
                                     "across vectors; single runs (no retries); default: relative lr 0.1463, "
                                     "lr_final_stream_weight 1\n")
    with pytest.raises(SystemExit, match="step_blend"):
        step_rules.read_runs([tmp_path / "new.md"])


@pytest.mark.parametrize(("n", "exact"), [(2, 12.706), (10, 2.262), (21, 2.086), (31, 2.042), (121, 1.980)])
def test_the_t_quantile_matches_students(n, exact):
    assert step_rules.t95(n) == pytest.approx(exact, abs=0.002)
