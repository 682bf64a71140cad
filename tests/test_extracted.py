"""Cached extracted vectors and curves: a second call reads the cache and returns the same numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ltvlib.study.extracted import (
    better_vanilla_form,
    cached_function_vector,
    cached_vanilla_tv,
    compare_at_layer,
    extracted_curve,
    gap_change,
    strongest_extracted,
)
from ltvlib.study.plans import EXTRACTED_SIZES, get_profile, run_sizes


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_vectors_and_curves_are_cached(llama, cache):
    run = run_sizes(get_profile("smoke"))
    tv = cached_vanilla_tv(llama, "antonym", run)
    assert tv.layer is not None and tv.config.n_contexts == EXTRACTED_SIZES["smoke"].vanilla_tv.n_contexts
    again = cached_vanilla_tv(llama, "antonym", run)
    torch.testing.assert_close(again.icl_states, tv.icl_states)
    assert again.layer == tv.layer
    fv = cached_function_vector(llama, "antonym", run)
    torch.testing.assert_close(cached_function_vector(llama, "antonym", run).vector, fv.vector)
    assert len(list((cache / "vectors").rglob("*.safetensors"))) == 2
    curve = extracted_curve(llama, "antonym", run, "function_vector", [0, 2])
    assert set(curve["layers"]) == {"0", "2"} and curve["heads"] == [list(h) for h in fv.heads]
    assert extracted_curve(llama, "antonym", run, "function_vector", [0, 2]) == curve
    per_query = curve["layers"]["0"]
    assert len(per_query["correct"]) == per_query["n"] and np.mean(per_query["correct"]) == per_query["accuracy"]
    chosen = extracted_curve(llama, "antonym", run, "vanilla_tv", None)
    assert chosen["chosen_layer"] == tv.layer and set(chosen["layers"]) == {str(tv.layer)}
    diff = extracted_curve(llama, "antonym", run, "vanilla_tv_difference", [1])
    assert 0 <= diff["layers"]["1"]["accuracy"] <= 1


def test_bad_arguments(llama, cache):
    run = run_sizes(get_profile("smoke"))
    with pytest.raises(ValueError, match="unknown method"):
        extracted_curve(llama, "antonym", run, "ltv", [0])
    with pytest.raises(ValueError, match="task's own template"):
        extracted_curve(llama, "antonym", run, "function_vector", [0], template="hendel")
    with pytest.raises(ValueError, match="Vanilla TVs only"):
        extracted_curve(llama, "antonym", run, "function_vector", None)


def _synthetic(rng, tasks=("a", "b", "c"), layers=(0, 5, 9), n=150):
    """LTV well above both extracted vectors at every layer, the extracted vectors fading with depth."""
    ltv = {(t, l): (rng.random((3, n)) < 0.7) for t in tasks for l in layers}
    extracted = {}
    for t in tasks:
        for l in layers:
            fade = 0.4 * (1 - l / 10)
            extracted["function_vector", t, l] = rng.random(n) < fade
            extracted["vanilla_tv", t, l] = rng.random(n) < fade - 0.1
            extracted["vanilla_tv_difference", t, l] = rng.random(n) < fade + 0.05
    return ltv, extracted


def test_compare_at_layer_pairs_the_ltv_with_both_baselines():
    rng = np.random.default_rng(0)
    ltv, extracted = _synthetic(rng)
    tasks = ["a", "b", "c"]
    assert better_vanilla_form(extracted, tasks, 0) == "vanilla_tv_difference"
    assert strongest_extracted(extracted, tasks, 0) == "vanilla_tv_difference"
    out = compare_at_layer(ltv, extracted, tasks, 0)
    assert out["vanilla_form"] == "vanilla_tv_difference"
    assert out["LTV"].seeds == 3 and out["FV"].seeds == 1 and out["LTV"].n == 450
    for name in ("LTV − FV", "LTV − Vanilla TV"):
        assert out[name].difference and out[name].low > 0, name
    assert out["LTV − FV"].value == pytest.approx(out["LTV"].value - out["FV"].value)
    # the same vector on both sides: a paired difference of exactly zero
    same = {(t, 0): extracted["function_vector", t, 0] for t in tasks}
    zero = compare_at_layer(same, extracted, tasks, 0)["LTV − FV"]
    assert (zero.value, zero.low, zero.high) == (0, 0, 0)
    with pytest.raises(ValueError, match="no task"):
        compare_at_layer(ltv, extracted, [], 0)


def test_gap_change_grows_when_extracted_vectors_fade():
    rng = np.random.default_rng(1)
    ltv, extracted = _synthetic(rng)
    d = gap_change(ltv, extracted, ["a", "b", "c"], late=[9], middle=5)
    assert d.difference and d.low > 0  # extracted 0.4 -> 0.04: the lead grows by about 20 points
    # no fade: the interval admits both signs
    flat = {k: rng.random(150) < 0.3 for k in extracted}
    d0 = gap_change(ltv, flat, ["a", "b", "c"], late=[9], middle=5)
    assert d0.low < 0 < d0.high
    with pytest.raises(ValueError, match="at least one late layer"):
        gap_change(ltv, extracted, ["a"], late=[], middle=5)
