"""Tests of ltvlib.study.peft_compare: the cached runs, the memory subprocess."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from ltvlib.analysis import peft_compare as pc
from ltvlib.ltv import FAST_RECIPE, with_config
from ltvlib.study import peft_compare as study_pc

SCHEDULE = with_config(FAST_RECIPE, batch_size=4, samples_per_epoch=8, epochs=2, patience=5)


@pytest.mark.realmodel
def test_memory_in_a_fresh_process():
    # the CPU path of compare_method: one subprocess per method, peaks reset between inference and training
    from ltvlib.study.plans import compare_sizes, get_profile

    sizes = compare_sizes(get_profile("smoke"))
    method = pc.Method("ltv", "ltv", 0.1)
    mem = pc.measure_memory("smollm2-135m", "cpu", {"task": "antonym", "sizes": asdict(sizes)}, method,
                            sizes.schedule, 0, 4)
    # the model's float32 weights alone are over 500 MB once paged in
    assert 500 < mem["base_mb"] <= mem["peak_infer_mb"] and mem["peak_train_mb"] >= mem["base_mb"]


def test_race_runs_every_method_and_seed_on_the_same_queries(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    sizes = pc.CompareSizes(16, 4, 6, with_config(SCHEDULE, samples_per_epoch=4, epochs=1), eval_batch=8, memory=False)
    methods = [m for m in pc.race_methods(tiny, ltv_lr=0.5) if m.name in ("ltv", "prompt-1")]
    assert methods[0].lr == 0.5
    out = study_pc.race(tiny, ["sst2"], methods, sizes, [0, 1])
    assert list(out) == ["sst2"] and list(out["sst2"]) == ["ltv", "prompt-1"]
    for runs in out["sst2"].values():
        assert [r["seed"] for r in runs] == [0, 1] and all(r["n_test"] == 6 for r in runs)
    d = pc.correct_matrix(out["sst2"]["ltv"]) - pc.correct_matrix(out["sst2"]["prompt-1"])
    assert d.shape == (2, 6)


def test_tuned_race_picks_each_learning_rate_on_validation_and_trains_the_ltv_with_the_library_trainer(
        tiny, tmp_path, monkeypatch):
    """The race to convergence: every method tries the same grid of multiples of its own learning rate on the first
    seed, keeps the best validation score (the first seed's run at it is reused), and trains its other seeds there;
    the LTV is trained by train_ltv (its learned rule, its stopping), and every run is tested on the same queries."""
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    sizes = pc.CompareSizes(16, 4, 6, with_config(SCHEDULE, samples_per_epoch=4, epochs=2, patience=1), eval_batch=8,
                            memory=False)
    recipe = with_config(FAST_RECIPE, batch_size=4, samples_per_epoch=4, epochs=2, val_queries=4)
    methods = [m for m in pc.equal_budget_methods(tiny) if m.name in ("ltv", "prompt-1")]
    calls: list[tuple[str, float]] = []
    import ltvlib.ltv as ltv_module

    real = ltv_module.train_ltv

    def spy(*args, **kwargs):
        calls.append((kwargs["recipe"].recipe, kwargs["recipe"].lr))
        return real(*args, **kwargs)

    monkeypatch.setattr(ltv_module, "train_ltv", spy)
    results, grids = study_pc.tuned_race(tiny, ["sst2"], methods, sizes, [0, 1], ltv_recipe=recipe, grid=(0.5, 1.0))
    # the LTV: two grid runs and one more seed, all through train_ltv at the recipe's rate times the grid value
    assert sorted(lr for _, lr in calls) == sorted([recipe.lr * 0.5, recipe.lr, recipe.lr * results["sst2"]["ltv"][1]
                                                    ["lr_scale"]])
    for name in ("ltv", "prompt-1"):
        runs = results["sst2"][name]
        chosen = max((0.5, 1.0), key=lambda s: (grids["sst2"][name][s], s == 1.0))
        assert [r["seed"] for r in runs] == [0, 1] and all(r["lr_scale"] == chosen for r in runs)
        assert runs[0]["best_val_score"] == grids["sst2"][name][chosen]
        assert all(r["n_test"] == 6 and len(r["test_correct"]) == 6 for r in runs)
    ltv_run = results["sst2"]["ltv"][0]
    assert ltv_run["trainable_params"] == tiny.d_model and isinstance(ltv_run["trained"], bool)
    assert ltv_run["curve"][0]["samples"] == 0 and ltv_run["samples_to_best"] <= ltv_run["samples_seen"]
    with pytest.raises(ValueError, match="must hold 1.0"):
        study_pc.tuned_race(tiny, ["sst2"], methods, sizes, [0], ltv_recipe=recipe, grid=(0.5, 2.0))
