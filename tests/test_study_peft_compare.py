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
