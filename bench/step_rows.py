"""What a training step costs per row and per step: the fixed part is the weights streamed from memory.

Times one LTV training step (forward from ``--layer`` at the last token over warm prefix caches, the
full-vocabulary answer loss, backward to a vector per row) on ``--rows`` rows of ``--task``'s zero-shot training
prompts, fits ``t = a + b * rows`` by least squares, and sets the intercept ``a`` beside the time to stream the
weights the step must read twice (the forward's matrix products and the backward's input gradients: blocks
``layer..L-1``, the final norm and the unembedding) at the read bandwidth measured in the same process (a sum
over a 512 MiB fp32 tensor, best of repeats). One LTV trains on 16 rows per step, so if ``a`` is near that
streaming time, most of a warm step is memory traffic no arithmetic saves; only more rows per weight read
(several LTVs in one step) amortise it::

    OMP_NUM_THREADS=1 python bench/step_rows.py --task antonym --layer 15

``--profile`` then runs ten 16-row steps under ``torch.profiler`` and prints the operators by their own time and
the matrix products by shape: where a one-LTV step's time goes.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch


def read_bandwidth(seconds: float = 3.0, mib: int = 512) -> float:
    """Bytes per second a sum over a ``mib`` MiB fp32 tensor reads, best of repeats."""
    x = torch.rand(mib * 2**20 // 4)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        x.sum()
        best = max(best, x.numel() * 4 / (time.perf_counter() - t))
    return best


def streamed_bytes(lm, layer: int) -> int:
    """Bytes of the weights a forward from ``layer`` reads once: blocks ``layer..L-1``, final norm, unembedding."""
    from ltvlib.sites import block, final_norm, unembedding

    modules = [*(block(lm, i) for i in range(layer, lm.n_layers)), final_norm(lm), unembedding(lm)]
    params = {id(p): p for m in modules for p in m.parameters()}  # a tied unembedding is counted once
    return sum(p.numel() * p.element_size() for p in params.values())


def warm_step(lm, task_name: str, layer: int) -> tuple[Callable[[int, torch.Generator], None], int]:
    """A training step on ``n`` of ``task_name``'s zero-shot training prompts (``cpu`` sizes) at ``layer``, over
    prefix caches filled here, each prompt with its own vector: ``step(n, generator)`` draws the prompts and the
    vectors from ``generator``, runs forward and backward. Returns it and the number of training prompts."""
    from ltvlib.forward import tail_needed
    from ltvlib.inject import VectorEdit
    from ltvlib.ltv import _training_prompts, answer_loss
    from ltvlib.prompts import answer_ids
    from ltvlib.tasks import get_task, load_splits

    task = get_task(task_name)
    train = list(load_splits(task, seed=0, n_train=600, n_val=200).train)
    data = _training_prompts(lm, task, train, 0, 1, tail_needed((-1,)), 0, layer)
    runner, answers = data.runners[0], answer_ids(lm.tokenizer, task, [e.output for e in train])
    runner.prefill(answers)

    def step(n: int, gen: torch.Generator) -> None:
        idx = torch.randperm(len(train), generator=gen)[:n].tolist()
        a = [answers[i] for i in idx]
        theta = (torch.randn(n, lm.d_model, generator=gen) * 0.1).requires_grad_(True)  # a vector per row
        logits, valid = runner.run(idx, [VectorEdit(layer, -1, theta)], answers=a)
        answer_loss(logits, a, valid).backward()

    return step, len(train)


def fit(rows: list[int], seconds: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope of ``seconds`` against ``rows``."""
    n = len(rows)
    mx, my = sum(rows) / n, sum(seconds) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(rows, seconds)) / sum((x - mx) ** 2 for x in rows)
    return my - slope * mx, slope


def main() -> None:
    from ltvlib.models import load_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--layer", type=int, default=15)
    ap.add_argument("--rows", default="1,4,16,48,128")
    ap.add_argument("--repeats", type=int, default=3, help="rounds over all row counts; the minimum is kept")
    ap.add_argument("--steps", type=int, default=5, help="steps timed per round")
    ap.add_argument("--profile", action="store_true", help="profile ten 16-row steps after the timing")
    args = ap.parse_args()
    counts = [int(r) for r in args.rows.split(",")]

    lm = load_model("smollm2-135m", device="cpu")
    step_on, n_train = warm_step(lm, args.task, args.layer)
    if max(counts) > n_train:
        raise SystemExit(f"--rows up to {max(counts)} but {args.task} has {n_train} training prompts")
    gen = torch.Generator().manual_seed(0)

    def step(n: int) -> None:
        step_on(n, gen)

    for n in counts:  # warm-up: allocator and the first use of each shape
        step(n)
    best = {n: float("inf") for n in counts}
    for _ in range(args.repeats):
        for n in counts:
            t = time.perf_counter()
            for _ in range(args.steps):
                step(n)
            best[n] = min(best[n], (time.perf_counter() - t) / args.steps)
    bandwidth = read_bandwidth()
    weights = streamed_bytes(lm, args.layer)
    a, b = fit(counts, [best[n] for n in counts])
    print(f"{args.task}, layer {args.layer}, threads {torch.get_num_threads()}")
    print("| rows | step (ms) | ms per row |")
    print("|---:|---:|---:|")
    for n in counts:
        print(f"| {n} | {best[n] * 1e3:.1f} | {best[n] * 1e3 / n:.2f} |")
    print(f"fit: {a * 1e3:.1f} ms per step + {b * 1e3:.2f} ms per row")
    print(f"weights read per pass: {weights / 2**20:.0f} MiB; read bandwidth {bandwidth / 1e9:.1f} GB/s; "
          f"two passes take {2 * weights / bandwidth * 1e3:.1f} ms (the intercept is {a / (2 * weights / bandwidth):.2f}x that)")
    print(f"16 rows (one LTV): {best.get(16, a + 16 * b) * 1e3:.1f} ms, of which the fixed part {a * 1e3:.1f} ms "
          f"({a / (a + 16 * b):.0%} by the fit)")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            t = time.perf_counter()
            for _ in range(10):
                step(16)
            seconds = (time.perf_counter() - t) / 10
        print(f"profiled: {seconds * 1e3:.1f} ms per 16-row step")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=50))
        print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=12,
                                                                max_name_column_width=12, max_shapes_column_width=60))


if __name__ == "__main__":
    main()
