"""A prototype, not in the library: the blocks' forward on a contiguous ``(in, out)`` copy of each weight.

``bench/gemm_layout.py`` measured that ``nn.Linear``'s forward (a product with the stored ``(out, in)`` weight's
transposed view) takes 1.4-2x a product with a contiguous ``(in, out)`` copy at the 16-64 token rows of an LTV step,
while its backward (the input's gradient, a product with the stored weight) is already on the fast layout. Inside
:func:`dual_layout`, every ``nn.Linear`` of the decoder blocks computes its forward with such a copy and its
backward with the stored weight (the weights are frozen: no weight gradient). The unembedding is left alone (no
gain measured at 16 rows).

This trains the same warm LTVs (prompt store filled by a first run) with the stock and the dual layout, alternating,
and reports each run's seconds, steps, validation accuracy and the largest difference between the two layouts'
vectors (the layouts sum in another order, so equal within float tolerance, not bitwise)::

    OMP_NUM_THREADS=1 python bench/dual_layout.py --tasks antonym,trec,sst2 --layer 15 --rounds 2

``--profile-steps`` instead times ten 16-prompt training steps of the first task under ``torch.profiler`` per
layout (``--rounds`` rounds) and prints each layout's milliseconds per step and the matrix products' share of them.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other bench scripts, also when loaded by path


class _DualLinear(torch.autograd.Function):
    """``x @ weight_t + bias`` forward; the input's gradient ``grad @ weight`` (no gradient for the frozen weights)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, weight_t: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(weight)
        out = x @ weight_t
        return out + bias if bias is not None else out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        (weight,) = ctx.saved_tensors
        return grad @ weight, None, None, None


def _dual_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if self.weight.requires_grad:
        raise RuntimeError("dual_layout is for frozen weights: this Linear's weight requires a gradient")
    return _DualLinear.apply(x, self.weight, self._weight_t, self.bias)


@contextlib.contextmanager
def dual_layout(blocks: nn.Module) -> Iterator[int]:
    """Within the ``with`` body, every ``nn.Linear`` under ``blocks`` runs its forward on an ``(in, out)`` copy of
    its weight (made on entry, freed on exit). Yields the bytes the copies take."""
    linears = [m for m in blocks.modules() if isinstance(m, nn.Linear)]
    for m in linears:
        m._weight_t = m.weight.detach().t().contiguous()
        m.forward = types.MethodType(_dual_forward, m)
    try:
        yield sum(m._weight_t.numel() * m._weight_t.element_size() for m in linears)
    finally:
        for m in linears:
            del m.forward  # the instance attribute: the class's forward is back
            del m._weight_t


def profile_steps(lm: Any, task_name: str, layer: int, rounds: int) -> None:
    """Per layout and round: ten 16-prompt steps (warm prefix caches, a vector per prompt) under the profiler."""
    from step_rows import warm_step
    from torch.profiler import profile

    from ltvlib.sites import decoder_layers

    step, _ = warm_step(lm, task_name, layer)
    print("| round | layout | ms per step | matrix products, ms per step |")
    print("|---:|---|---:|---:|")
    for r in range(rounds):
        for layout in ("stock", "dual"):
            with dual_layout(decoder_layers(lm.model)) if layout == "dual" else contextlib.nullcontext():
                gen = torch.Generator().manual_seed(0)
                for _ in range(2):  # warm-up
                    step(16, gen)
                gen = torch.Generator().manual_seed(1)  # the same ten batches for both layouts
                with profile() as p:
                    t = time.perf_counter()
                    for _ in range(10):
                        step(16, gen)
                    ms = (time.perf_counter() - t) * 100
            mm = sum(e.self_cpu_time_total for e in p.key_averages() if e.key in ("aten::mm", "aten::addmm")) / 1e4
            print(f"| {r} | {layout} | {ms:.1f} | {mm:.1f} |", flush=True)


def main() -> None:
    from ltvlib.ltv import train_ltv
    from ltvlib.models import load_model
    from ltvlib.sites import decoder_layers
    from ltvlib.study.plans import get_profile
    from ltvlib.tasks import load_splits

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="antonym,trec,sst2")
    ap.add_argument("--layer", type=int, default=15)
    ap.add_argument("--seed", type=int, default=1, help="the seed of the timed runs (seed 0 fills the store first)")
    ap.add_argument("--rounds", type=int, default=2, help="stock, dual pairs per task")
    ap.add_argument("--profile-steps", action="store_true", help="profile single steps instead of training LTVs")
    args = ap.parse_args()
    prof = get_profile("cpu")
    lm = load_model("smollm2-135m", device="cpu")
    blocks = decoder_layers(lm.model)
    if args.profile_steps:
        profile_steps(lm, args.tasks.split(",")[0], args.layer, args.rounds)
        return
    print(f"threads {torch.get_num_threads()}, layer {args.layer}, seed {args.seed}")
    print("| task | layout | seconds | steps | best validation accuracy | max abs diff to stock (rel. to largest entry) |")
    print("|---|---|---:|---:|---:|---|")
    totals = {"stock": 0.0, "dual": 0.0}
    for task in args.tasks.split(","):
        splits = load_splits(task, seed=0, n_train=prof.n_train, n_val=prof.n_val)

        def train(seed: int, task: str = task, splits: Any = splits) -> tuple[Any, float]:
            t = time.perf_counter()
            ltv = train_ltv(lm, task, layers=[args.layer], recipe=prof.recipe, seed=seed, splits=splits, progress=False)
            return ltv, time.perf_counter() - t

        train(0)  # fills the prompt store: every timed run below is warm
        stock_vec = None
        for _ in range(args.rounds):
            for layout in ("stock", "dual"):
                with dual_layout(blocks) if layout == "dual" else contextlib.nullcontext():
                    ltv, seconds = train(args.seed)
                totals[layout] += seconds
                if layout == "stock":
                    stock_vec = ltv.vectors
                    diff = ""
                else:
                    assert stock_vec is not None
                    d = float((ltv.vectors - stock_vec).abs().max())
                    diff = f"{d:.2e} ({d / float(stock_vec.abs().max()):.1e})"
                print(f"| {task} | {layout} | {seconds:.1f} | {ltv.steps} | {ltv.best_val_accuracy:.3f} | {diff} |",
                      flush=True)
    print(f"total: stock {totals['stock']:.1f} s, dual {totals['dual']:.1f} s, ratio {totals['dual'] / totals['stock']:.3f}")


if __name__ == "__main__":
    main()
