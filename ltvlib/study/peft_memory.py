"""Peak memory of each method in chapter 03's race on a CPU, measured apart from the race.

On CUDA the race records ``torch.cuda.max_memory_allocated`` while it trains. On a CPU torch keeps no allocator
statistics, so each method is measured once in a fresh Python process
(:func:`ltvlib.analysis.peft_compare.measure_memory`: load the model, one inference batch of test prompts, two
training steps, the peak resident set read between the phases), where no method inherits another's freed heap.
The measurement is kept apart from the race's own cache, so adding it retrains nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from ..analysis.peft_compare import CompareSizes, Method, measure_memory
from ..cache import cached_json, dependency_hash, task_key
from ..models import LoadedModel

#: How the figures were measured, for the table's note.
MEMORY_METHOD = "peak resident set (VmHWM) of a fresh process: the model, one inference batch, two training steps"


def method_memory(lm: LoadedModel, task: str, method: Method, sizes: CompareSizes, *, seed: int = 0) -> dict[str, Any]:
    """Peak resident memory (MiB) of ``method`` on ``task``, in a fresh process: ``base_mb`` (the model paged in),
    ``peak_infer_mb`` (one inference batch of ``sizes.eval_batch`` test prompts), ``peak_train_mb`` (two training
    steps of ``sizes.schedule``'s batches). Cached by model, task, method, sizes, seed and this module's code."""
    sizes = replace(sizes, memory=True)
    key = {"what": "race-memory", "model": lm.name, "device": lm.device.type, "task": task_key(task),
           "method": asdict(method), "sizes": asdict(sizes), "seed": seed, "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        mem = measure_memory(lm.name, str(lm.device), {"task": task, "sizes": asdict(sizes)}, method, sizes.schedule,
                             seed, sizes.eval_batch)
        return dict(mem) | {"memory_method": MEMORY_METHOD}

    return cached_json("peft-compare-memory", key, compute)


def add_cpu_memory(results: dict[str, dict[str, list[dict[str, Any]]]], lm: LoadedModel, methods: Sequence[Method],
                   sizes: CompareSizes, *, seed: int = 0) -> None:
    """Give every run of ``results`` (task -> method name -> runs, as :func:`ltvlib.study.peft_compare.tuned_race`
    returns them) that has no peak memory its method's :func:`method_memory`, in place. Runs on a GPU keep the
    race's own measurement; nothing is measured where every run has one."""
    for task, by_method in results.items():
        for method in methods:
            runs = by_method.get(method.name, [])
            if not runs or all(r.get("peak_train_mb") is not None for r in runs):
                continue
            mem = method_memory(lm, task, method, sizes, seed=seed)
            for r in runs:
                if r.get("peak_train_mb") is None:
                    r.update(peak_train_mb=mem["peak_train_mb"], peak_infer_mb=mem["peak_infer_mb"],
                             base_mb=mem["base_mb"], memory_method=mem["memory_method"])


__all__ = ["MEMORY_METHOD", "add_cpu_memory", "method_memory"]
