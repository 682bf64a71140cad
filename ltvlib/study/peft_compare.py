"""The race of chapter 03, cached: :func:`compare_method` (one method, task and seed), :func:`race`, and the LTV
as the rest of the book trains it (:func:`library_ltv`). Its sizes per run are :func:`ltvlib.study.plans.compare_sizes`.

The comparison machinery (methods, trainees, the shared schedule and stopping rule, measurements) is
:mod:`ltvlib.analysis.peft_compare`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..analysis.peft_compare import (
    CompareSizes,
    Method,
    Prepared,
    compare_splits,
    measure_memory,
    prepare,
    train_and_measure,
)
from ..cache import cached_json, dependency_hash, task_key
from ..evaluate import EvalSet, evaluate
from ..ltv import LearnedTaskVector, train_ltv
from ..tasks import get_task
from .ltvs import RunSizes

if TYPE_CHECKING:
    from ..models import LoadedModel


def _key(lm: LoadedModel, task: str, method: Method, sizes: CompareSizes, seed: int) -> dict[str, Any]:
    import peft
    import transformers

    return {"model": lm.name, "device": lm.device.type, "task": task_key(task), "method": asdict(method),
            "sizes": asdict(sizes), "seed": seed, "source": dependency_hash(__name__),
            "peft": peft.__version__, "transformers": transformers.__version__}


def compare_method(lm: LoadedModel, task: str, method: Method, sizes: CompareSizes, *, seed: int = 0,
                   prepared: Prepared | None = None, progress: Callable[[str], None] | None = None,
                   memory: bool | None = None) -> dict[str, Any]:
    """:func:`train_and_measure` plus peak memory (when ``memory``, default ``sizes.memory``; never without
    ``sizes.memory``), cached on disk by model, task, method, sizes, seed and the source of this module."""
    measure = sizes.memory if memory is None else memory and sizes.memory
    key = _key(lm, task, method, sizes, seed) | {"memory": measure}

    def compute() -> dict[str, Any]:
        prep = prepared or prepare(lm, compare_splits(task, sizes))
        result = train_and_measure(lm, prep, method, sizes.schedule, seed=seed, eval_batch=sizes.eval_batch,
                                   progress=progress, rule=sizes.stopping_rule())
        result["memory_method"] = "cuda max_memory_allocated" if lm.device.type == "cuda" else None
        if measure and lm.device.type != "cuda":
            mem = measure_memory(lm.name, str(lm.device), {"task": task, "sizes": asdict(sizes)}, method,
                                 sizes.schedule, seed, sizes.eval_batch)
            result.update(mem)
            result["memory_method"] = "peak RSS (VmHWM) of a fresh process"
        return result

    return cached_json("peft-compare", key, compute)


def library_ltv(
    lm: LoadedModel, task: str, sizes: CompareSizes, *, seed: int = 0, run_sizes: RunSizes | None = None
) -> tuple[LearnedTaskVector, str]:
    """The LTV as the rest of the book trains it (``train_ltv``, fast path), on the comparison's batches.

    Uses ``ltvlib.study.ltvs.trained_ltv`` when the comparison's sizes and schedule are ``run_sizes``' (then
    it is the very vector other chapters use); otherwise ``train_ltv`` directly with the comparison's splits
    and schedule (cached by ``train_ltv(cache=True)``, keyed by those splits). Returns the vector and which of
    the two it came from.
    ``train_ltv`` stops by the schedule's own rule (:meth:`StoppingRule.from_config`); under another
    ``sizes.rule`` the race's LTV is the ``"ltv"`` method of :func:`train_and_measure`, not this vector.
    """
    if run_sizes is not None and sizes.n_val == run_sizes.n_val and sizes.n_train == run_sizes.n_train \
            and sizes.schedule == run_sizes.recipe:
        from .ltvs import trained_ltv

        return trained_ltv(lm, task, run_sizes, layers=[lm.middle_layer], seed=seed), "trained_ltv"
    ltv = train_ltv(lm, task, layers=[lm.middle_layer], recipe=sizes.schedule, seed=seed,
                    splits=compare_splits(task, sizes), cache=True, progress=False)
    return ltv, "train_ltv"


def library_ltv_result(
    lm: LoadedModel, task: str, sizes: CompareSizes, *, seed: int = 0, run_sizes: RunSizes | None = None
) -> dict[str, Any]:
    """Test accuracy (``ltvlib.evaluate``) of :func:`library_ltv`, with its steps and training seconds."""
    ltv, source = library_ltv(lm, task, sizes, seed=seed, run_sizes=run_sizes)
    splits = compare_splits(task, sizes)
    key = {"what": "library-ltv-test", "model": lm.name, "task": task_key(task), "sizes": asdict(sizes), "seed": seed,
           "source": dependency_hash(__name__), "ltv": ltv.metadata(without=("curve",)),
           "vector_sum": float(ltv.vectors.double().sum())}

    def compute() -> dict[str, Any]:
        r = evaluate(EvalSet(lm, task, splits.test), ltv.edits())
        return {"test_accuracy": r.accuracy, "test_label_accuracy": r.label_accuracy, "n_test": r.n,
                "best_val_accuracy": ltv.training.best_val_accuracy, "steps": ltv.training.steps,
                "train_seconds": ltv.training.seconds,
                "val_curve": [c for c in ltv.training.curve if "val_accuracy" in c]}

    result = cached_json("peft-compare-ltv", key, compute)
    result["source"] = source
    return result


def compare_task(lm: LoadedModel, task: str, methods: Sequence[Method], sizes: CompareSizes, *, seed: int = 0,
                 progress: Callable[[str], None] | None = None, memory: bool | None = None) -> list[dict[str, Any]]:
    """Every method on one task (one cached result each); the prompts are built once."""
    task = get_task(task).name
    prepared: Prepared | None = None
    results = []
    for method in methods:
        if prepared is None:
            prepared = prepare(lm, compare_splits(task, sizes))
        results.append(compare_method(lm, task, method, sizes, seed=seed, prepared=prepared, progress=progress,
                                      memory=memory))
    return results


def race(lm: LoadedModel, tasks: Sequence[str], methods: Sequence[Method], sizes: CompareSizes, seeds: Sequence[int], *,
         progress: Callable[[str], None] | None = None, memory: bool | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The fair race: every method on every task with every seed (each run cached by :func:`compare_method`).

    Returns:
        ``{task: {method name: [result of seed s for s in seeds]}}``; every run of a task is tested on the same
        test queries in the same order, so their ``test_correct`` lists pair up query by query.
    """
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for task in tasks:
        name = get_task(task).name
        per_method: dict[str, list[dict[str, Any]]] = {m.name: [] for m in methods}
        for seed in seeds:
            for r in compare_task(lm, name, methods, sizes, seed=seed, progress=progress, memory=memory):
                per_method[r["method"]].append(r)
        out[task] = per_method
    return out


__all__ = [
    "compare_method",
    "compare_task",
    "library_ltv",
    "library_ltv_result",
    "race",
]
