"""bench/step_blend.py: a run's site-relative factor, interpolation in log factor, and the choice of (w, x)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench

step_blend = load_bench("step_blend")

HEADER = ("model tiny (4 layers); test queries 200; seed {seed}; prompt store shared across vectors; single runs "
          "(no retries); default: relative lr 0.1463, lr_final_stream_weight 1\n\n"
          "| task | layer | stream RMS | recipe | lr | init | val (start -> best) | test acc [95 % CI] | trained | "
          "best at step | steps | wall (s) | stopped by | val score |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")


def _row(layer: int, rms: float, factor: float, score: float, recipe: str = "site*x") -> str:
    lr = factor * step_blend.UNIT * rms
    return (f"| trec | {layer} | {rms:.3g} | {recipe} | {lr:.3g} | 0.01 | 0.0 -> {score} | 50.0 % [43.1, 56.9] "
            f"(n=200) | yes | 16 | 64 | 9 | patience | {score:.2f} |\n")


def _tables(tmp_path: Path) -> list[Path]:
    """Layer 0 (RMS 1) and the last layer 3 (RMS 16): scores peak at the factor that takes layer 3's step at
    layer 0, i.e. w = 1 with x = 9 (x9 at layer 3, x144 at layer 0)."""
    paths = []
    for seed, bump in ((0, 0.0), (1, 2.0)):
        body = "".join(_row(0, 1.0, f, 10.0 * (1 + math.log(f, 3)) + bump) for f in (9, 27, 81, 243, 729))
        body += "".join(_row(3, 16.0, f, 60.0 - 20.0 * abs(math.log(f / 9, 3)) + bump) for f in (3, 9, 27))
        body += "| trec | 3 | | lr*9 | | | | diverged: loss=nan | no | | | 3 | diverged | |\n"
        path = tmp_path / f"p{seed}.md"
        path.write_text(HEADER.format(seed=seed) + body)
        paths.append(path)
    return paths


def test_a_runs_factor_comes_from_its_lr_and_rms_snapped_to_powers_of_3():
    assert step_blend.site_factor(27 * step_blend.UNIT * 0.116 * 1.004, 0.116) == 27.0
    assert step_blend.site_factor(42.4 * step_blend.UNIT * 6.13, 6.13) == pytest.approx(42.4)


def test_tables_are_read_per_point_factor_and_seed(tmp_path):
    runs = step_blend.read_runs(_tables(tmp_path))
    assert runs.n_layers == 4 and runs.last_rms("trec") == 16.0 and runs.diverged == 2
    assert sorted(runs.scores[("trec", 0)]) == [9.0, 27.0, 81.0, 243.0, 729.0]
    assert runs.scores[("trec", 3)][9.0] == {0: 60.0, 1: 62.0}
    assert runs.curve(("trec", 3))[1] == (pytest.approx(2.0), 61.0, 2)
    (tmp_path / "old.md").write_text("model tiny (4 layers); test queries 200; seed 0\n")
    with pytest.raises(SystemExit, match="single-run"):
        step_blend.read_runs([tmp_path / "old.md"])


def test_interpolation_is_linear_in_log_factor_and_bounded_by_reach():
    curve = [(2.0, 10.0, 1), (3.0, 30.0, 1)]
    assert step_blend.interpolate(curve, 2.0, 0.25) == 10.0
    assert step_blend.interpolate(curve, 2.5, 0.25) == pytest.approx(20.0)
    assert step_blend.interpolate(curve, 3.2, 0.25) == 30.0  # within reach: the end value
    assert step_blend.interpolate(curve, 3.3, 0.25) is None
    assert step_blend.interpolate([], 1.0, 0.25) is None


def test_the_candidate_that_takes_the_best_step_everywhere_wins(tmp_path, capsys, monkeypatch):
    runs = step_blend.read_runs(_tables(tmp_path))
    best = step_blend.candidate_scores(runs, 1.0, 9.0, 0.25)
    site = step_blend.candidate_scores(runs, 0.0, 9.0, 0.25)
    assert best[("trec", 3)] == pytest.approx(61.0) and site[("trec", 3)] == pytest.approx(61.0)
    assert best[("trec", 0)] > site[("trec", 0)]  # x144 at layer 0 against x9
    assert best[("trec", 0)] == pytest.approx(10.0 * (1 + math.log(144, 3)) + 1.0)
    monkeypatch.setattr("sys.argv", ["step_blend.py", "--weights", "0,0.5,1", "--factors", "3,9,27",
                                     *map(str, _tables(tmp_path))])
    step_blend.main()
    out = capsys.readouterr().out
    assert "Highest mean: w = 1, x = 9 " in out


def test_a_task_without_its_last_layer_stops_with_a_message(tmp_path):
    path = tmp_path / "p0.md"
    path.write_text(HEADER.format(seed=0) + _row(0, 1.0, 9, 10.0))
    runs = step_blend.read_runs([path])
    with pytest.raises(SystemExit, match="last layer"):
        step_blend.candidate_scores(runs, 1.0, 9.0, 0.25)
