"""How much of a prefill's transient memory the first pass's full-sequence residual record costs (issue 15).

Chapter 02's peak (``bench/chapter02_memory.py``) is in ``PromptRunner._first_pass`` while RTE's prompts are
prefilled from block 0. This prefills the LTV training prompts of ``--task`` from ``--first-layer`` (``cpu`` sizes,
answers teacher-forced as in training) in a fresh process per variant and prints the exact peak resident memory
(``VmHWM``) and the prefill's wall time, above what the process held before plus what the runner keeps:

- ``current``: the library as it is (``record_residual`` keeps every position entering every kept block);
- ``tail-record``: the same forward, but the record keeps only the last ``--keep`` positions of each block input
  (the tail and answer columns are at the end of each left-padded row), a prototype of the library change;
- ``tokens=N``: the library as it is with ``max_tokens=N`` per forward;
- ``tail-record+tokens=N``: both.

    python bench/first_pass_memory.py --task rte --first-layer 0
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


class _TailView:
    """``x[:, -keep:]`` standing in for ``x``: indexing ``[b, a:z]`` in ``x``'s columns reads the kept columns."""

    def __init__(self, kept: Any, offset: int) -> None:
        self.kept, self.offset = kept, offset

    def __getitem__(self, index: tuple[int, slice]) -> Any:
        b, cols = index
        assert cols.start >= self.offset, (cols, self.offset)  # the record must hold every column asked for
        return self.kept[b, cols.start - self.offset : cols.stop - self.offset]


def tail_record(keep: int) -> Any:
    """A stand-in for ``ltvlib.inject.record_residual`` (block inputs only) that keeps the last ``keep`` positions
    of each recorded block input, indexed as if it held them all (``_TailView``)."""
    from ltvlib.hooks import Hook, first_input, hooked
    from ltvlib.sites import block

    @contextlib.contextmanager
    def record(lm: Any, layers: Any) -> Iterator[dict[int, Any]]:
        captured: dict[int, Any] = {}

        def pre(module: Any, args: tuple, kwargs: dict, layer: int) -> None:
            x = first_input(args, kwargs).detach()
            captured[layer] = _TailView(x[:, -keep:].clone(), max(x.shape[1] - keep, 0))

        hooks = [Hook(block(lm, layer), "pre", lambda m, a, k, layer=layer: pre(m, a, k, layer), f"layer {layer}")
                 for layer in layers]
        with hooked(hooks, what="tail recording hooks"):  # removed on exit; each must have fired
            yield captured

    return record


def one(task: str, first_layer: int, variant: str, keep: int) -> None:
    import torch

    from ltvlib import forward
    from ltvlib.models import load_model
    from ltvlib.prompts import answer_ids, encode_prompts
    from ltvlib.study.ltvs import task_splits
    from ltvlib.study.plans import get_profile, run_sizes
    from ltvlib.tasks import get_task

    lm = load_model("smollm2-135m", device="cpu")
    sizes = run_sizes(get_profile("cpu"))
    train = task_splits(task, sizes).train
    t = get_task(task)
    runner = forward.PromptRunner(lm, encode_prompts(lm.tokenizer, t, train), tail=1, first_layer=first_layer)
    answers = answer_ids(lm.tokenizer, t, [e.output for e in train])
    max_tokens = forward.DEFAULT_BATCH_TOKENS
    for part in variant.split("+"):
        if part.startswith("tokens="):
            max_tokens = int(part.split("=")[1])
    if "tail-record" in variant.split("+"):
        forward.record_residual = tail_record(keep)  # type: ignore[assignment]
    torch.set_grad_enabled(False)
    forward.release_free_heap()
    before = _kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t0 = time.perf_counter()
    rows = runner.prefill(answers, max_tokens=max_tokens)
    seconds = time.perf_counter() - t0
    peak = _kib("VmHWM")
    kept = runner.cache_bytes / 2**30
    print(f"| {variant} | {rows} | {seconds:.1f} | {kept:.2f} | {(peak - before) / 2**20:.2f} | "
          f"{(peak - before) / 2**20 - kept:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="rte")
    ap.add_argument("--first-layer", type=int, default=0)
    ap.add_argument("--keep", type=int, default=16, help="positions the tail record keeps (tail + answer tokens)")
    ap.add_argument("--variants", default="current,tail-record,tokens=4096,tokens=2048,tail-record+tokens=4096,tail-record+tokens=2048")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(args.task, args.first_layer, args.one, args.keep)
        return
    print(f"task {args.task}, training prompts prefilled from block {args.first_layer}\n")
    print("| variant | rows computed | seconds | kept by the runner (GiB) | peak above start (GiB) | transient beyond the kept cache (GiB) |")
    print("|---|---|---|---|---|---|")
    for v in args.variants.split(","):
        subprocess.run([sys.executable, __file__, "--task", args.task, "--first-layer", str(args.first_layer),
                        "--keep", str(args.keep), "--one", v], check=True)


if __name__ == "__main__":
    main()
