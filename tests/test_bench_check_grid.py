"""bench/check_grid.py: issue 13's rule read from single runs, by point estimate and by interval."""

from __future__ import annotations

import math

import pytest

from tests.bench_scripts import load_bench

check_grid = load_bench("check_grid")

HEAD = ("model {model} (30 layers); test queries 200; seed {seed}; prompt store shared across vectors; single runs "
        "(no retries); default: relative lr 0.1463, lr_final_stream_weight 1\n\n"
        "| task | layer | stream RMS | recipe | lr | init | val (start -> best) | test acc [95 % CI] | trained | "
        "best at step | steps | wall (s) | stopped by | val score |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")


def _row(recipe, test, score, trained="yes", layer=3):
    return (f"| trec | {layer} | 2.85 | {recipe} | 4.23 | 0.0464 | 0.0 -> {score} | {test} % [37.3, 50.9] (n=200) | "
            f"{trained} | 32 | 48 | 22 | patience | {score} |\n")


def _table(tmp_path, name, seed, rows, model="smollm2-135m"):
    path = tmp_path / name
    path.write_text(HEAD.format(model=model, seed=seed) + "".join(rows))
    return path


def test_runs_are_read_per_model_task_layer_recipe_and_seed(tmp_path):
    a = _table(tmp_path, "a.md", 4, [_row("default", 44.0, 58.33), _row("lr*3", 53.5, 59.52, trained="no")])
    b = _table(tmp_path, "b.md", 4, [_row("default", 40.0, 50.0)], model="gemma3-270m")
    runs = check_grid.read_runs([a, b])
    assert runs[("smollm2-135m", "trec", 3, "default", 4)] == check_grid.Run(44.0, 58.33, True, 22.0)
    assert not runs[("smollm2-135m", "trec", 3, "lr*3", 4)].trained
    assert runs[("gemma3-270m", "trec", 3, "default", 4)].test == 40.0


def test_a_rerun_that_disagrees_stops_with_both_runs(tmp_path):
    a = _table(tmp_path, "a.md", 0, [_row("default", 44.0, 58.33)])
    same = _table(tmp_path, "same.md", 0, [_row("default", 44.0, 58.33)])
    other = _table(tmp_path, "other.md", 0, [_row("default", 45.0, 58.33)])
    assert len(check_grid.read_runs([a, same])) == 1
    with pytest.raises(SystemExit, match="differs"):
        check_grid.read_runs([a, other])


def test_a_table_without_single_runs_is_refused(tmp_path):
    path = tmp_path / "x.md"
    path.write_text("model smollm2-135m (30 layers); test queries 200; seed 0; prompt store shared\n")
    with pytest.raises(SystemExit, match="single-run"):
        check_grid.read_runs([path])


@pytest.mark.parametrize(("mean", "lo", "hi", "expected"), [
    (-1.0, -3.0, +1.0, ("yes", "holds")),
    (-5.7, -10.0, -1.3, ("**no**", "inconclusive")),
    (-4.0, -8.0, 0.0, ("yes", "inconclusive")),
    (-8.0, -11.0, -6.0, ("**no**", "**fails**")),
    (-6.0, math.nan, math.nan, ("**no**", "no interval (1 seed)")),
])
def test_the_rule_is_read_by_point_and_by_interval(mean, lo, hi, expected):
    assert check_grid.rule_reading(mean, lo, hi) == expected


def test_the_report_pairs_seeds_and_names_the_better_neighbour(tmp_path, capsys, monkeypatch):
    tables = [_table(tmp_path, f"s{s}.md", s, [_row("lr/3", 50.0 + s, 40.0), _row("default", 60.0 + s, 50.0),
                                                  _row("lr*3", 70.0 + 2 * s, 45.0)]) for s in range(3)]
    monkeypatch.setattr("sys.argv", ["check_grid.py", *map(str, tables)])
    check_grid.main()
    out = capsys.readouterr().out
    # default 61 against lr*3 72: differences -10, -11, -12 -> mean -11.0, t interval -11 +- 4.303 * 1 / sqrt(3)
    assert "| smollm2-135m | trec | 3 | 3 | 51.0 | 61.0 | 72.0 | 3/3, 3/3, 3/3 | 22, 22, 22 | -11.0 vs lr*3 " \
           "[-13.5, -8.5] | **no** / **fails** | yes |" in out
    assert "validation score: lr/3 40.0, default 50.0, lr*3 45.0" in out
