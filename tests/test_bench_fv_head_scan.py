"""bench/fv_head_scan.py: the cached head scan and the one-forward-per-head scan agree on a tiny model."""

from __future__ import annotations

from tests.bench_scripts import load_bench

fv_head_scan = load_bench("fv_head_scan")


def test_both_paths_give_the_same_table(llama):
    m = fv_head_scan.measure(llama, "antonym", n_ie=2, n_mean=3, shots=2, k=3)
    assert m["heads"] == llama.geometry.n_layers * llama.geometry.n_heads
    assert m["max_abs_diff"] <= 1e-4 * max(m["largest_ie"], 1e-6) + 1e-7
    assert m["same_set"] and len(m["top"]) == 3 and m["ratio"] > 0
    assert "cached prefix, heads batched" in fv_head_scan.report(m)
