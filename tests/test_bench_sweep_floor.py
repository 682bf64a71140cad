"""bench/sweep_floor.py: the CPU attention kernel's FLOPs are counted, and the floor is set beside a timed sweep."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tests.bench_scripts import load_bench

sweep_floor = load_bench("sweep_floor")


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
    with FlopCounterMode(display=False, custom_mapping=sweep_floor.cpu_attention_formulas()) as counter:
        out = _attention(q, k, v, mask)
    assert counter.get_total_flops() == forward
    with FlopCounterMode(display=False, custom_mapping=sweep_floor.cpu_attention_formulas()) as counter:
        _attention(q, k, v, mask).sum().backward()
    # the backward recomputes the scores and forms the gradients of scores, values, queries and keys: 5 products
    assert counter.get_total_flops() == forward + 5 * (2 * b * h * s_q * s_k * d)
    assert out.shape == (b, h, s_q, d)


def _timing(seconds_new, seconds_old, steps):
    jobs = [{"task": "t", "layer": 0, "seed": s, "steps": n, "seconds": w} for s, (w, n) in enumerate(zip(seconds_new, steps))]
    old = [dict(j, seconds=w) for j, w in zip(jobs, seconds_old)]
    return {"summaries": {"new": {"jobs": jobs, "wall_seconds": sum(seconds_new)},
                          "old": {"jobs": old, "wall_seconds": sum(seconds_old)}}}


def test_compare_sets_each_floor_at_the_best_rate_and_flags_other_step_counts():
    counted = {"gemm_gflops_before": 50.0, "gemm_gflops_after": 100.0,
               "jobs": [{"task": "t", "layer": 0, "seed": 0, "flops": 200e9, "steps": 8},
                        {"task": "t", "layer": 0, "seed": 1, "flops": 400e9, "steps": 5}]}
    c = sweep_floor.compare(counted, _timing([5.0, 10.0], [9.0, 12.0], [8, 6]))
    assert c["rate_gflops"] == 100.0
    assert [r["floor_s"] for r in c["rows"]] == [2.0, 4.0]
    assert c["floor_s"] == 6.0 and c["target_s"] == 7.0  # the old path's 21 s over 3
    assert c["old_over_floor"] == 3.5 and c["new_over_floor"] == 2.5
    assert c["steps_differ"] == ["t/0/1"]
