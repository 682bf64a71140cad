"""Chapter glue: per-query records, layer spreads, and intervals over tasks (stratified bootstrap)."""

from __future__ import annotations

import numpy as np
import pytest

from ltvlib.stats import paired_bootstrap_difference, seed_interval
from ltvlib.study.ltvs import (
    correct_matrix,
    estimate_cell,
    icl_accuracy,
    ltv_accuracy,
    spread_layers,
    sweep_with_middle,
    task_contrast,
    task_mean,
    task_mean_difference,
    trained_ltv,
    trained_ltv_sets,
    trained_ltvs,
    trained_ltvs_by_layer,
)
from ltvlib.study.plans import get_profile, run_sizes


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_spread_layers_and_the_middle_one():
    assert spread_layers(30, None) == spread_layers(30, 30) == list(range(30))
    assert spread_layers(30, 3) == [0, 14, 29]  # round(14.5) is 14 (round half to even)
    assert spread_layers(30, 10) == [0, 3, 6, 10, 13, 16, 19, 23, 26, 29]
    assert spread_layers(3, 3) == [0, 1, 2]
    run = run_sizes(get_profile("cpu"))
    assert sweep_with_middle(30, run) == [0, 3, 6, 10, 13, 15, 16, 19, 23, 26, 29]
    assert sweep_with_middle(18, run) == [0, 2, 4, 6, 8, 9, 11, 13, 15, 17]


def test_records_carry_per_query_correctness(llama, cache):
    run = run_sizes(get_profile("smoke"))
    ltvs = trained_ltvs(llama, "antonym", run, (0, 1), layers=[1])
    assert [v.seed for v in ltvs] == [0, 1] and all(v.layers == (1,) for v in ltvs)
    records = [ltv_accuracy(llama, v, run) for v in ltvs]
    m = correct_matrix(records)
    assert m.shape == (2, records[0]["n"])
    np.testing.assert_allclose(m.mean(axis=1), [r["accuracy"] for r in records])
    assert ltv_accuracy(llama, ltvs[0], run) == records[0], "read back from the cache"
    zero = icl_accuracy(llama, "antonym", 0, run)
    assert len(zero["correct"]) == zero["n"] and np.mean(zero["correct"]) == pytest.approx(zero["accuracy"])


def test_a_sweep_trains_a_layers_tasks_together_and_gives_each_vector_as_trained_ltv_does(llama, cache, monkeypatch):
    from ltvlib.study import ltvs as ltvs_module

    calls: list[tuple[int, list[str], list[int]]] = []
    real = ltvs_module.train_ltv

    def spy(lm, tasks, *, layers, seeds=None, **kwargs):
        if seeds is not None:
            calls.append((layers[0], list(tasks), list(seeds)))
        return real(lm, tasks, layers=layers, seeds=seeds, **kwargs)

    monkeypatch.setattr(ltvs_module, "train_ltv", spy)
    run = run_sizes(get_profile("smoke"))
    got = trained_ltvs_by_layer(llama, {"sst2": [2, 0], "antonym": [0]}, run, lambda l: (0, 1) if l == 0 else (0,))
    assert list(got) == [("sst2", 2), ("sst2", 0), ("antonym", 0)]
    # the lowest layer first, a layer's tasks and seeds in one call
    assert calls == [(0, ["sst2", "antonym"], [0, 1]), (2, ["sst2"], [0])]
    assert [v.seed for v in got["antonym", 0]] == [0, 1] and got["sst2", 2][0].layers == (2,)
    assert len(list((cache / "vectors" / "ltv").glob("*.safetensors"))) == 5
    alone = trained_ltv(llama, "antonym", run, layers=[0], seed=1)  # read back: the same cache entry
    assert (alone.vectors == got["antonym", 0][1].vectors).all()
    assert trained_ltv_sets(llama, [], run, (0,)) == {}


def test_correct_matrix_refuses_what_it_cannot_pair():
    with pytest.raises(ValueError, match="at least one"):
        correct_matrix([])
    with pytest.raises(ValueError, match="no per-query"):
        correct_matrix([{"accuracy": 0.5}])
    with pytest.raises(ValueError, match="different queries"):
        correct_matrix([{"correct": [True]}, {"correct": [True, False]}])


def test_one_task_matches_the_unstratified_intervals():
    rng = np.random.default_rng(1)
    a, b = rng.random((3, 150)) < 0.6, rng.random(150) < 0.4
    one = task_mean({"t": a})
    ref = seed_interval(a)
    assert one.value == pytest.approx(ref.value) and (one.n, one.seeds) == (150, 3) and not one.difference
    assert one.interval == pytest.approx(ref.interval)  # same draws: same generator, one stratum
    d = task_mean_difference({"t": a}, {"t": b})
    ref_d = paired_bootstrap_difference(a, b)
    assert d.value == pytest.approx(ref_d.value) and d.difference and d.seeds == 3  # the seeded side's
    assert d.interval == pytest.approx(ref_d.interval)


def test_tasks_weigh_equally_whatever_their_n():
    small = np.ones(50)  # a task with 50 queries, all right
    big = np.zeros(200)  # a task with 200, all wrong
    est = task_mean({"small": small, "big": big})
    assert est.value == pytest.approx(0.5) and est.n == 250  # pooled would say 0.2
    assert est.low == pytest.approx(0.5) and est.high == pytest.approx(0.5)  # nothing varies within a task


def test_paired_contrast_sees_a_real_difference_and_not_a_null_one():
    rng = np.random.default_rng(2)
    base = rng.random((4, 200)) < 0.5
    tasks = {f"t{i}": base[i] for i in range(4)}
    same = task_mean_difference(tasks, tasks)
    assert same.value == 0 and same.low == 0 and same.high == 0  # paired: identical methods differ by exactly 0
    better = {t: c | (rng.random(200) < 0.3) for t, c in tasks.items()}
    diff = task_mean_difference(better, tasks)
    assert diff.low > 0 and diff.value > 0.1
    noise = {t: rng.random(200) < 0.5 for t in tasks}
    assert task_mean_difference(noise, tasks).low < 0 < task_mean_difference(noise, tasks).high


def test_contrast_weights_and_errors():
    a, b = np.ones(100), np.zeros(100)
    # (a - b) - 0.5 * (a - b) over one task: 0.5 exactly
    est = task_contrast({"t": [(1, a), (-1, b), (-0.5, a), (0.5, b)]})
    assert est.value == pytest.approx(0.5) and est.difference
    with pytest.raises(ValueError, match="different queries"):
        task_contrast({"t": [(1, np.ones(10)), (-1, np.ones(11))]})
    with pytest.raises(ValueError, match="at least one task"):
        task_contrast({})
    with pytest.raises(ValueError, match="different tasks"):
        task_mean_difference({"a": a}, {"b": b})


def test_estimate_cell():
    est = task_mean({"t": np.r_[np.ones(30), np.zeros(70)]})
    assert estimate_cell(est).startswith("30.0 ± ")
    assert estimate_cell(task_mean_difference({"t": np.ones(10)}, {"t": np.zeros(10)})) == "+100.0 ± 0.0"
    assert estimate_cell(None) == "–"
