"""bench/unembedding.py: the strided slice and the one-block product give the same logits and gradients."""

from __future__ import annotations

from tests.bench_scripts import load_bench

unembedding = load_bench("unembedding")


def test_both_ways_agree(tiny):
    m = unembedding.measure(tiny, rows=3, tokens=6, kept=2, rounds=1)
    for kind in ("forward", "backward"):
        assert m[kind]["max_rel_diff"] <= 1e-5 and m[kind]["ratio"] > 0
    text = unembedding.report([("tiny", m)])
    assert "| tiny | 3 x 6, 2 | forward |" in text and "| tiny | 3 x 6, 2 | backward |" in text
