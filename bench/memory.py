"""Memory of a chapter-sized unit: peak resident memory against the tensors its caches hold.

The unit is what a chapter does per task: train one LTV of ``--task`` at ``--layer`` (default the middle one;
the ``--profile``'s sizes and recipe, through the chapters' own helper ``ltvlib.study.ltvs.trained_ltv``, on a
fresh temporary vector cache so that it really trains) and evaluate it on the test split zero-shot and, with
``--shots``, with that many demonstrations (``ltvlib.study.ltvs.ltv_accuracy``). After each stage it prints the
process's resident memory (now and the peak so far) and the bytes of the tensors it is explained by: the model's
parameters, the prompt store (``ltvlib.prompt_store.STORE``) and the test sets the model's memo holds
(``ltvs.test_sets``). The ratio printed at the end is the peak resident memory over the largest sum of those
tensors seen after a stage (1.0: nothing resident beyond the model and the caches; the rest is the interpreter,
libraries and transient activations)::

    OMP_NUM_THREADS=1 python bench/memory.py --model smollm2-135m --profile cpu --task rte --shots 10
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def rss_bytes() -> tuple[int, int]:
    """(current, peak) resident memory of this process in bytes."""
    with open("/proc/self/status") as f:
        now = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return now * 1024, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cached_bytes(lm) -> dict[str, int]:
    """Bytes of the tensors that should explain the resident memory: model, prompt store, memoised test sets."""
    from ltvlib import memo, prompt_store

    model = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    model += sum(b.numel() * b.element_size() for b in lm.model.buffers())
    sets = sum(prompt_store.value_bytes(v) for v in memo.entries(lm, "ltvs.test_sets").values())
    return {"model": model, "store": prompt_store.STORE.nbytes, "test_sets": sets}


def stages(lm, task: str, sizes, *, layer: int | None = None, shots: int = 0) -> Iterator[dict]:
    """Train and evaluate one LTV as a chapter does, yielding a row after each stage."""
    from ltvlib.study.ltvs import ltv_accuracy, trained_ltv

    layer = lm.middle_layer if layer is None else layer

    def row(stage: str, t0: float) -> dict:
        now, peak = rss_bytes()
        return {"stage": stage, "seconds": time.time() - t0, "rss": now, "peak": peak, **cached_bytes(lm)}

    yield row("model loaded", time.time())
    t0 = time.time()
    ltv = trained_ltv(lm, task, sizes, layers=[layer])
    yield row(f"LTV trained at layer {layer} ({ltv.training.steps} steps, trained: {ltv.training.trained})", t0)
    t0 = time.time()
    ltv_accuracy(lm, ltv, sizes)
    yield row("evaluated zero-shot", t0)
    if shots:
        t0 = time.time()
        ltv_accuracy(lm, ltv, sizes, shots=shots)
        yield row(f"evaluated {shots}-shot", t0)


def ratio(rows: list[dict]) -> float:
    """Peak resident memory over the largest sum of model, store and test-set bytes after any stage."""
    return max(r["peak"] for r in rows) / max(r["model"] + r["store"] + r["test_sets"] for r in rows)


def table(rows: list[dict]) -> str:
    g = 2**30
    lines = ["| stage | seconds | RSS now (GiB) | RSS peak (GiB) | model (GiB) | store (GiB) | memo'd test sets (GiB) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['stage']} | {r['seconds']:.0f} | {r['rss'] / g:.2f} | {r['peak'] / g:.2f} | "
                     f"{r['model'] / g:.2f} | {r['store'] / g:.2f} | {r['test_sets'] / g:.2f} |")
    lines.append(f"\npeak RSS / cached tensors: {ratio(rows):.2f}x")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--task", default="rte")
    ap.add_argument("--layer", type=int, default=None, help="default: the model's middle layer")
    ap.add_argument("--shots", type=int, default=10, help="also evaluate with this many demonstrations (0: skip)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ltv-memory-") as tmp:
        # an empty cache but for the models and data of the usual one (as a cold rebuild), so the LTV really trains
        real = Path(os.environ.get("LTV_CACHE_DIR") or Path.home() / ".cache" / "ltv-book")
        for part in ("datasets", "gguf", "models"):
            if (real / part).exists():
                (Path(tmp) / part).symlink_to(real / part)
        os.environ["LTV_CACHE_DIR"] = tmp
        from ltvlib.models import load_model
        from ltvlib.study.plans import get_profile, run_sizes

        sizes = run_sizes(get_profile(args.profile))
        lm = load_model(args.model, device="cpu")
        print(f"model {lm.name}, task {args.task}, profile {args.profile} (train {sizes.n_train}, validation "
              f"{sizes.n_val}, test {sizes.n_test})\n")
        rows = []
        for r in stages(lm, args.task, sizes, layer=args.layer, shots=args.shots):
            rows.append(r)
            print(r["stage"], f"{r['peak'] / 2**30:.2f} GiB peak", flush=True)
        print()
        print(table(rows))


if __name__ == "__main__":
    main()
