"""bench/attention.py: both attentions and both head-scan layouts give the same numbers on the tiny models."""

from __future__ import annotations

from ltvlib.attention import ATTENTION
from tests.bench_scripts import load_bench

attention = load_bench("attention")


def test_tails_agree_and_the_model_keeps_its_attention(tiny):
    m = attention.measure_tails(tiny, rows=3, prefix_len=12, tail=2, rounds=1)
    assert tiny.model.config._attn_implementation == ATTENTION
    for kind in ("forward", "backward"):
        assert m[kind]["max_abs_diff"] <= 1e-5 and m[kind]["ratio"] > 0


def test_head_scan_layouts_agree(llama):
    m = attention.measure_scan(llama, "antonym", n_ie=2, n_mean=3, shots=2, k=3)
    assert m["max_abs_diff"] <= 1e-4 * max(m["largest_ie"], 1e-6) + 1e-7
    assert m["same_top"] and m["ratio"] > 0
    text = attention.report("tiny", [attention.measure_tails(llama, rows=2, prefix_len=8, tail=2, rounds=1)], m)
    assert "positions of one sequence" in text and "| 2 x 8 + 2 (" in text
