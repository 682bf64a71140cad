"""Cached extracted vectors and curves: a second call reads the cache and returns the same numbers."""

from __future__ import annotations

import pytest
import torch

from ltvlib.experiments_extracted import (
    extracted_curve,
    extracted_sizes,
    profile_function_vector,
    profile_vanilla_tv,
)
from ltvlib.profiles import get_profile


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_vectors_and_curves_are_cached(llama, cache):
    prof = get_profile("smoke")
    tv = profile_vanilla_tv(llama, "antonym", prof)
    assert tv.layer is not None and tv.config.n_contexts == extracted_sizes(prof).vanilla_tv.n_contexts
    again = profile_vanilla_tv(llama, "antonym", prof)
    torch.testing.assert_close(again.icl_states, tv.icl_states)
    assert again.layer == tv.layer
    fv = profile_function_vector(llama, "antonym", prof)
    torch.testing.assert_close(profile_function_vector(llama, "antonym", prof).vector, fv.vector)
    assert len(list((cache / "vectors").rglob("*.safetensors"))) == 2
    curve = extracted_curve(llama, "antonym", prof, "function_vector", [0, 2])
    assert set(curve["layers"]) == {"0", "2"} and curve["heads"] == [list(h) for h in fv.heads]
    assert extracted_curve(llama, "antonym", prof, "function_vector", [0, 2]) == curve
    chosen = extracted_curve(llama, "antonym", prof, "vanilla_tv", None)
    assert chosen["chosen_layer"] == tv.layer and set(chosen["layers"]) == {str(tv.layer)}
    diff = extracted_curve(llama, "antonym", prof, "vanilla_tv_difference", [1])
    assert 0 <= diff["layers"]["1"]["accuracy"] <= 1


def test_bad_arguments(llama, cache):
    prof = get_profile("smoke")
    with pytest.raises(ValueError, match="unknown method"):
        extracted_curve(llama, "antonym", prof, "ltv", [0])
    with pytest.raises(ValueError, match="task's own template"):
        extracted_curve(llama, "antonym", prof, "function_vector", [0], template="hendel")
    with pytest.raises(ValueError, match="Vanilla TVs only"):
        extracted_curve(llama, "antonym", prof, "function_vector", None)


def test_ltv_layers_per_profile(llama):
    from ltvlib.experiments_extracted import ltv_layers

    class Big:  # only the sizes matter
        n_layers, middle_layer = 30, 15

    assert ltv_layers(Big, "antonym", get_profile("cpu")) == [0, 3, 6, 10, 13, 15, 16, 19, 23, 26, 29]
    assert ltv_layers(Big, "sst2", get_profile("cpu")) == [15]
    assert ltv_layers(Big, "sst2", get_profile("paper")) == list(range(30))
    assert ltv_layers(Big, "antonym", get_profile("smoke")) == [0, 15, 29]
    assert ltv_layers(llama, "antonym", get_profile("smoke")) == [0, 1, 2]
