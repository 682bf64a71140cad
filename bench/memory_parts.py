"""Where a chapter process's memory goes: the prompt store against the memoised test sets (issue 15's 6 GiB target).

Trains one LTV of ``--task`` at ``--layer`` (``cpu`` profile sizes and recipe; a fresh, temporary vector cache so
that it really trains) and evaluates it on the test split zero-shot and, with ``--shots``, with that many
demonstrations, through the chapters' own helpers (``ltvlib.study.ltvs.trained_ltv`` and ``ltv_accuracy``; chapters
00 and 02 evaluate 10- and 8-shot prompts through the same ``ltvlib.evaluate.evaluate``). After each stage it prints the process's resident
memory (now and the peak so far), the bytes of cached tensors the prompt store holds and the bytes the model's memo
holds in test sets (``ltvs.test_sets``, kept three at a time), so that the two caches a chapter accumulates can be
compared with the resident memory they explain.

    OMP_NUM_THREADS=1 python bench/memory_parts.py --task rte --layer 15 --shots 10
    OMP_NUM_THREADS=1 python bench/memory_parts.py --task rte --layer 15 --shots 10 --eval-batch 16
"""

from __future__ import annotations

import argparse
import inspect
import os
import resource
import tempfile
import time
from pathlib import Path


def _rss_gib() -> tuple[float, float]:
    """(current, peak) resident memory of this process in GiB."""
    with open("/proc/self/status") as f:
        now = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return now / 2**20, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="rte")
    ap.add_argument("--layer", type=int, default=15)
    ap.add_argument("--shots", type=int, default=10, help="also evaluate with this many demonstrations (0: skip)")
    ap.add_argument("--eval-batch", type=int, default=None,
                    help="prompts per forward in ltvlib.evaluate.evaluate (default: its own, 64): does a smaller "
                         "batch lower the evaluation's transient peak?")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ltv-memory-") as tmp:
        # an empty cache but for the models and data of the usual one (as a cold rebuild), so the LTV really trains
        real = Path(os.environ.get("LTV_CACHE_DIR") or Path.home() / ".cache" / "ltv-book")
        for part in ("datasets", "gguf", "models"):
            if (real / part).exists():
                (Path(tmp) / part).symlink_to(real / part)
        os.environ["LTV_CACHE_DIR"] = tmp
        from ltvlib import evaluate, memo, prompt_store
        from ltvlib.models import load_model
        from ltvlib.study.ltvs import ltv_accuracy, trained_ltv
        from ltvlib.study.plans import get_profile, run_sizes

        sizes = run_sizes(get_profile("cpu"))
        if args.eval_batch is not None:
            # the chapters' helpers call evaluate() with its default batch size; change that default only (on the
            # function inside its no-grad wrapper, whose own call passes the keyword through)
            defaults = inspect.unwrap(evaluate.evaluate).__kwdefaults__
            assert defaults is not None
            defaults["batch_size"] = args.eval_batch
        lm = load_model(args.model, device="cpu")
        print(f"model {lm.name}, task {args.task}, layer {args.layer}, cpu profile (train {sizes.n_train}, "
              f"validation {sizes.n_val}), store bound {prompt_store.STORE.max_bytes / 2**30:.2f} GiB, evaluation "
              f"batch {(inspect.unwrap(evaluate.evaluate).__kwdefaults__ or {}).get('batch_size')}\n")
        print("| stage | seconds | RSS now (GiB) | RSS peak (GiB) | store (GiB) | memo'd test sets (GiB) |")
        print("|---|---|---|---|---|---|")

        def row(stage: str, t0: float) -> None:
            now, peak = _rss_gib()
            sets = sum(prompt_store.value_bytes(v) for v in memo.entries(lm, "ltvs.test_sets").values())
            print(f"| {stage} | {time.time() - t0:.0f} | {now:.2f} | {peak:.2f} | "
                  f"{prompt_store.STORE.nbytes / 2**30:.2f} | {sets / 2**30:.2f} |", flush=True)

        row("model loaded", time.time())
        t0 = time.time()
        ltv = trained_ltv(lm, args.task, sizes, layers=[args.layer])
        row(f"LTV trained ({ltv.steps} steps, trained: {ltv.trained})", t0)
        t0 = time.time()
        ltv_accuracy(lm, ltv, sizes)
        row("evaluated zero-shot", t0)
        if args.shots:
            t0 = time.time()
            ltv_accuracy(lm, ltv, sizes, shots=args.shots)
            row(f"evaluated {args.shots}-shot", t0)


if __name__ == "__main__":
    main()
