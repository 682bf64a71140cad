"""Tests of ltvlib.study.peft_memory: the race's CPU memory, measured apart from the race."""

from __future__ import annotations

from typing import Any

import pytest

from ltvlib.analysis import peft_compare as pc
from ltvlib.ltv import FAST_RECIPE, with_config
from ltvlib.study import peft_memory

SIZES = pc.CompareSizes(16, 4, 6, with_config(FAST_RECIPE, batch_size=4, samples_per_epoch=8, epochs=1), eval_batch=4,
                        memory=False)


def test_every_run_without_a_peak_gets_its_methods_measurement_once(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    calls: list[tuple[str, bool]] = []

    def fake(model: str, device: str, spec: dict[str, Any], method: pc.Method, *args: Any) -> dict[str, float]:
        calls.append((method.name, spec["sizes"]["memory"]))
        return {"base_mb": 100.0, "peak_infer_mb": 110.0, "peak_train_mb": 120.0 + len(method.name)}

    monkeypatch.setattr(peft_memory, "measure_memory", fake)
    methods = [pc.Method("ltv", "ltv", 0.1), pc.Method("prompt-1", "prompt_tuning", 0.1)]
    results = {"sst2": {"ltv": [{"seed": 0}, {"seed": 1}],
                        "prompt-1": [{"seed": 0, "peak_train_mb": 7.0}, {"seed": 1, "peak_train_mb": 8.0}]}}
    peft_memory.add_cpu_memory(results, tiny, methods, SIZES)
    # the prompt tuning runs had their own measurement (a GPU's): kept, and nothing measured for them
    assert calls == [("ltv", True)]
    assert [r["peak_train_mb"] for r in results["sst2"]["ltv"]] == [123.0, 123.0]
    assert [r["peak_train_mb"] for r in results["sst2"]["prompt-1"]] == [7.0, 8.0]
    assert results["sst2"]["ltv"][0]["memory_method"] == peft_memory.MEMORY_METHOD
    # cached: a second call measures nothing
    peft_memory.add_cpu_memory({"sst2": {"ltv": [{"seed": 0}]}}, tiny, methods, SIZES)
    assert calls == [("ltv", True)]


@pytest.mark.realmodel
def test_a_methods_memory_is_measured_in_a_fresh_process(tmp_path, monkeypatch):
    from ltvlib.models import load_model
    from ltvlib.study.plans import compare_sizes, get_profile

    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = load_model("smollm2-135m")
    mem = peft_memory.method_memory(lm, "antonym", pc.Method("ltv", "ltv", 0.1), compare_sizes(get_profile("smoke")))
    # the model's float32 weights alone are over 500 MB once paged in
    assert 500 < mem["base_mb"] <= mem["peak_train_mb"]
