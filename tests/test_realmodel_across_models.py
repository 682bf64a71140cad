"""Chapter 08 on the real Gemma-3-270M (marker ``realmodel``): the book's fast paths give the model's own
forward pass on this architecture (sliding-window attention, scaled embeddings, ``1 + weight`` norms)."""

from __future__ import annotations

import pytest

from ltvlib.models import load_model
from ltvlib.study.across_models import architecture_row, attention_write_check, check_code_paths, stream_rms

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


def test_gemma3_heads_write_what_its_attention_blocks_add(real_gemma):
    # what the heads write goes through Gemma's attention-output norm; without it (the bare W_O terms)
    # a head's write is another size altogether
    got = attention_write_check(real_gemma, [0, 9, 17], n=4)
    for layer, r in got.items():
        assert r["relative_error"] < 1e-4, (layer, r)
    # at the middle and last layers (where function vectors' heads sit) the bare terms are a few percent of the
    # write or less (measured: 0.03 and 0.008; at layer 0 the norm's gain happens to keep the size, 1.2)
    for layer in (9, 17):
        assert got[layer]["bare_ratio"] < 0.1, (layer, got[layer])


def test_gemma3_stream_is_far_larger_than_smollm2s(real_gemma):
    # why one absolute step size could not serve both models (chapter 08's figure of the stream's size)
    smol = load_model("smollm2-135m", device="cpu")
    s, g = stream_rms(smol, [smol.middle_layer]), stream_rms(real_gemma, [real_gemma.middle_layer])
    assert g[real_gemma.middle_layer] > 5 * s[smol.middle_layer]
