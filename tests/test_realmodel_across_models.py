"""Chapter 08 on the real Gemma-3-270M (marker ``realmodel``): the book's fast paths give the model's own
forward pass on this architecture (sliding-window attention, scaled embeddings, ``1 + weight`` norms)."""

from __future__ import annotations

import pytest

from ltvlib.across_models import (
    REFERENCE_STREAM_RMS,
    SCALE_TOLERANCE,
    architecture_row,
    check_code_paths,
    recipe_scale,
    stream_rms,
)
from ltvlib.models import load_model

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def real_gemma():
    return load_model("gemma3-270m", device="cpu")


def test_gemma3_fast_paths_equal_its_full_forward(real_gemma):
    result = check_code_paths(real_gemma)
    print(result)
    for name, value in result["checks"].items():
        assert value < 1e-4, f"{name}: relative difference {value:.1e}"
    assert all(result["argmax_equal"].values())
    assert result["sliding_window"] == 512 and result["prompt_tokens"][1] < 512


def test_gemma3_architecture_row(real_gemma):
    row = architecture_row(real_gemma)
    assert (row["layers"], row["d_model"], row["query heads"], row["KV heads"], row["head_dim"]) == (18, 640, 4, 1, 256)
    assert row["vocabulary"] == 262144 and row["sliding-window layers"] == 15
    assert row["norm gain"] == "1 + weight" and row["embedding scale"] == "sqrt(d) = 25.3"


def test_reference_stream_rms_is_smollm2s_and_gemma_gets_a_larger_step(real_gemma):
    # REFERENCE_STREAM_RMS is a measurement of the default model: it must still be one, so that the default
    # model's LTVs in chapter 08 are the other chapters' (scale exactly 1)
    smol = load_model("smollm2-135m", device="cpu")
    rms = stream_rms(smol, [smol.middle_layer])[smol.middle_layer]
    assert rms == pytest.approx(REFERENCE_STREAM_RMS, rel=0.01)
    assert recipe_scale(smol) == 1.0
    assert recipe_scale(real_gemma) > SCALE_TOLERANCE
