"""Chapter 08 on the real Gemma-3-270M (marker ``realmodel``): the book's fast paths give the model's own
forward pass on this architecture (sliding-window attention, scaled embeddings, ``1 + weight`` norms)."""

from __future__ import annotations

import pytest

from ltvlib.across_models import architecture_row, check_code_paths
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
