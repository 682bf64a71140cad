"""The matrix products of a one-LTV step in isolation: SmolLM2's weight shapes at 16 and 32 rows, both layouts.

``nn.Linear`` keeps a weight as ``(out, in)`` and its forward multiplies by the transposed view; its backward (the
input's gradient) multiplies by the weight as stored. This times, on one thread with the caches emptied before
each product (as between the blocks of a real forward), the forward with the stored weight's transposed view
against a contiguous ``(in, out)`` copy, and the backward with the stored weight against that copy's transposed
view: what keeping both layouts would save per product. Nothing in the library uses a second layout::

    OMP_NUM_THREADS=1 python bench/gemm_layout.py
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch


def best_ms(fn: Callable[[], object], calls: int, rounds: int = 5) -> float:
    """Milliseconds per call of ``fn``, best of ``rounds`` rounds of ``calls`` calls, after a warm-up."""
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="16,32")
    ap.add_argument("--evict-mib", type=int, default=64, help="a tensor this large is summed before each product")
    args = ap.parse_args()
    torch.manual_seed(0)
    junk = torch.rand(args.evict_mib * 2**20 // 4)
    evict = best_ms(lambda: junk.sum(), 20)
    print(f"threads {torch.get_num_threads()}; each time below is minus the eviction's {evict:.2f} ms")
    print("| weight (out, in) | rows | forward, stored (ms) | forward, (in, out) copy (ms) | backward, stored (ms) | "
          "backward, copy's view (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for out_f, in_f, name in ((1536, 576, "gate/up"), (576, 1536, "down"), (576, 576, "q/o"), (49152, 576, "unembedding")):
        w = torch.randn(out_f, in_f)
        wt = w.t().contiguous()
        calls = 10 if out_f > 40_000 else 50
        for m in (int(r) for r in args.rows.split(",")):
            x, g = torch.randn(m, in_f), torch.randn(m, out_f)
            products = ((x, w.t()), (x, wt), (g, w), (g, wt.t()))
            times = [best_ms(lambda a=a, b=b: (junk.sum(), a @ b), calls) - evict for a, b in products]
            print(f"| {name} ({out_f}, {in_f}) | {m} | " + " | ".join(f"{t:.3f}" for t in times) + " |")


if __name__ == "__main__":
    main()
