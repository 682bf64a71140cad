"""bench/floor.py: the CPU attention kernel's FLOPs are counted; the floor and the seeds comparison run on a tiny model."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tests.bench_scripts import load_bench

floor = load_bench("floor")


def _attention(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_cpu_attention_is_counted_forward_and_backward():
    b, h, s_q, s_k, d = 2, 9, 3, 11, 64
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, s_q, d, generator=g, requires_grad=True)
    k, v = torch.randn(b, h, s_k, d, generator=g), torch.randn(b, h, s_k, d, generator=g)
    mask = torch.ones(b, 1, s_q, s_k, dtype=torch.bool)
    mask[0, ..., :4] = False  # left padding, as the models' batches have
    with FlopCounterMode(display=False) as plain:
        _attention(q, k, v, mask)
    assert plain.get_total_flops() == 0  # torch's table lacks the CPU kernel: without the formulas it counts nothing
    forward = 2 * (2 * b * h * s_q * s_k * d)  # scores and the weighted sum of values
    total, by_op, out = floor.counted_flops(lambda: _attention(q, k, v, mask))
    assert total == forward and sum(by_op.values()) == forward
    total, _, _ = floor.counted_flops(lambda: _attention(q, k, v, mask).sum().backward())
    # the backward recomputes the scores and forms the gradients of scores, values, queries and keys: 5 products
    assert total == forward + 5 * (2 * b * h * s_q * s_k * d)
    assert out.shape == (b, h, s_q, d)


def test_matrix_products_are_counted_exactly():
    a, b = torch.randn(8, 5), torch.randn(5, 3)
    total, by_op, _ = floor.counted_flops(lambda: a @ b)
    assert total == 2 * 8 * 5 * 3 and by_op == {"mm": 2 * 8 * 5 * 3}
    assert floor.gemm_rate(0.01, shape=(16, 16, 16)) > 0


def test_floor_rows_count_the_run_they_time(llama):
    f = floor.floor_rows(llama, "antonym", profile="smoke", layer=1, rate_seconds=0.01)
    assert f["rate_gflops"] == max(f["gemm_gflops"]) > 0
    cold, warm = f["rows"]
    for r in (cold, warm):
        assert r["counted_steps"] == r["steps"] > 0  # the counted run is the timed run's computation
        assert r["flops"] > 0 and r["floor_s"] == r["flops"] / (f["rate_gflops"] * 1e9)
        assert r["over_floor"] == r["wall_s"] / r["floor_s"]
    assert "wall / floor" in floor.report(f, None)


def test_seeds_together_against_one_after_another(llama):
    s = floor.seeds_rows(llama, "antonym", profile="smoke", layer=1, n_seeds=2)
    if floor.seeds_together() is None:
        assert s == {"available": False}
        return
    assert s["available"] and s["seeds"] == 2 and s["ratio"] > 0
    assert len(s["steps"]["together"]) == len(s["steps"]["one after another"]) == 2
    assert s["max_rel_diff"] < 1e-3  # the same runs, summed in another order


def test_tasks_together_against_one_after_another(llama):
    t = floor.tasks_rows(llama, ["antonym", "capital"], profile="smoke", layer=1)
    assert t["available"] and t["tasks"] == ["antonym", "capital"] and t["ratio"] > 0
    assert t["steps"]["together"] == t["steps"]["one after another"]  # each run stopped where it stops alone
    assert t["max_rel_diff"] < 1e-3
    text = floor.report(None, None, t)
    assert text.startswith("2 tasks at layer 1 (antonym, capital)") and "together" in text
