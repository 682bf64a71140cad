"""The race of chapter 03, sized per profile and cached: :func:`compare_sizes`, :func:`compare_method` (one
method, task and seed), :func:`race`, and the LTV as the rest of the book trains it (:func:`library_ltv`).

The comparison machinery (methods, trainees, the shared schedule and stopping rule, measurements) is
:mod:`ltvlib.analysis.peft_compare`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from ..analysis.peft_compare import (
    CompareSizes,
    Method,
    Prepared,
    StoppingRule,
    compare_splits,
    measure_memory,
    prepare,
    train_and_measure,
)
from ..cache import cache_path, cached_json, dependency_hash, task_key
from ..evaluate import EvalSet, evaluate
from ..ltv import LearnedTaskVector, absolute_recipe, train_ltv, with_config
from ..tasks import get_task


def compare_sizes(profile: Any) -> CompareSizes:
    """Sizes of the race per profile (a :class:`ltvlib.study.profiles.Profile` or its name) and its recipe.

    The schedule is the profile's LTV recipe (``profile.recipe``) made absolute (:func:`absolute_recipe`), at
    the race's sizes; under the ``fast`` recipe:

    ``paper``: the fast recipe itself (batches of 16, at most 8 epochs of 128 samples, patience 2 counted after a
    first gain), 600 training and 200 validation queries, the whole test split. ``cpu``: every method pays a full
    forward and backward pass of the model per step, and the race is 6 methods x 3 seeds, so the chapter is held
    to about 15 minutes on two CPU cores: batches of 8, at most 4 epochs of 48 samples (a sample budget of 192,
    24 steps), validation once per epoch on 32 queries, patience 1 counted after a first gain, 200 test queries,
    no fresh-process memory measurement. Measured on SST-2 (2 threads, otherwise idle machine): a training step
    of batch 8 costs about 0.7 s for the LTV and rank-1 LoRA, and 64 test prompts about 3.3 s, so one LTV run
    costs about 35 s (73.6 CPU seconds single-threaded, measured on a loaded machine); the other methods 1.0-1.5
    times that, prompt tuning with 20 virtual tokens 1.8 times (the chapter races it in ``paper`` only): the 18
    runs of the ``cpu`` race about 13-17 minutes on two cores, less where early stopping ends runs sooner. ``smoke``: two epochs of one batch of 2, 4 validation and
    4 test queries.

    Under the released ``paper`` recipe (batch 1, at most 10 epochs of 100 samples, lr 5e-3 for the LTV) the
    schedule is that recipe in ``cpu`` and ``paper`` (hours on a CPU) and two epochs of 2 samples in ``smoke``.
    """
    if isinstance(profile, str):
        from .profiles import get_profile

        profile = get_profile(profile)
    name = profile.name
    base = absolute_recipe(profile.recipe)
    paper_recipe = base.recipe == "paper"
    if name == "paper":
        return CompareSizes(600, 200, None, base)
    if name == "cpu":
        schedule = base if paper_recipe else with_config(base, batch_size=8, samples_per_epoch=48, epochs=4)
        # patience 1 (after a first gain): the budget is too small for patience 2 to run out (measured: the LTV
        # peaked at 144 of 192 samples on SST-2, prefix tuning at 192), so a run converges at its first
        # validation without a gain
        rule = None if paper_recipe else StoppingRule(val_every=48, patience=1, after_gain=True)
        return CompareSizes(600, 32, 200, schedule, eval_batch=32, memory=False, rule=rule)
    if name == "smoke":
        schedule = with_config(base, batch_size=1 if paper_recipe else 2, samples_per_epoch=2, epochs=2)
        return CompareSizes(16, 4, 4, schedule, eval_batch=4, memory=False)
    raise ValueError(f"unknown profile {name!r}; allowed: smoke, cpu, paper")


def _key(lm: Any, task: str, method: Method, sizes: CompareSizes, seed: int) -> dict[str, Any]:
    import peft
    import transformers

    return {"model": lm.name, "device": lm.device.type, "task": task_key(task), "method": asdict(method),
            "sizes": asdict(sizes), "seed": seed, "source": dependency_hash(__name__),
            "peft": peft.__version__, "transformers": transformers.__version__}


def compare_method(lm: Any, task: str, method: Method, sizes: CompareSizes, *, seed: int = 0,
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


def library_ltv(lm: Any, task: str, sizes: CompareSizes, *, seed: int = 0, profile: Any = None) -> tuple[LearnedTaskVector, str]:
    """The LTV as the rest of the book trains it (``train_ltv``, fast path), on the comparison's batches.

    Uses ``ltvlib.study.ltvs.profile_ltv`` when the comparison's sizes and schedule are the profile's (then
    it is the very vector other chapters use); otherwise ``train_ltv`` directly with the comparison's splits
    and schedule (cached here). Returns the vector and which of the two it came from.
    ``train_ltv`` stops by the schedule's own rule (:meth:`StoppingRule.from_config`); under another
    ``sizes.rule`` the race's LTV is the ``"ltv"`` method of :func:`train_and_measure`, not this vector.
    """
    if profile is not None and sizes.n_val == profile.n_val and sizes.n_train == profile.n_train \
            and sizes.schedule == profile.recipe:
        from .ltvs import profile_ltv

        return profile_ltv(lm, task, profile, layers=[lm.middle_layer], seed=seed), "profile_ltv"
    key = {"model": lm.name, "task": task_key(task), "sizes": asdict(sizes), "seed": seed, "layer": lm.middle_layer,
           "source": dependency_hash(__name__)}
    path = cache_path("peft-compare/ltv", key, ".safetensors")
    if path.exists():
        return LearnedTaskVector.load(path), "train_ltv"
    ltv = train_ltv(lm, task, layers=[lm.middle_layer], recipe=sizes.schedule, seed=seed,
                    splits=compare_splits(task, sizes), progress=False)
    ltv.save(path)  # atomic
    return ltv, "train_ltv"


def library_ltv_result(lm: Any, task: str, sizes: CompareSizes, *, seed: int = 0, profile: Any = None) -> dict[str, Any]:
    """Test accuracy (``ltvlib.evaluate``) of :func:`library_ltv`, with its steps and training seconds."""
    ltv, source = library_ltv(lm, task, sizes, seed=seed, profile=profile)
    splits = compare_splits(task, sizes)
    key = {"what": "library-ltv-test", "model": lm.name, "task": task_key(task), "sizes": asdict(sizes), "seed": seed,
           "source": dependency_hash(__name__), "ltv": ltv.metadata() | {"curve": None},
           "vector_sum": float(ltv.vectors.double().sum())}

    def compute() -> dict[str, Any]:
        r = evaluate(EvalSet(lm, task, splits.test), ltv.edits())
        return {"test_accuracy": r.accuracy, "test_label_accuracy": r.label_accuracy, "n_test": r.n,
                "best_val_accuracy": ltv.best_val_accuracy, "steps": ltv.steps, "train_seconds": ltv.seconds,
                "val_curve": [c for c in ltv.curve if "val_accuracy" in c]}

    result = cached_json("peft-compare-ltv", key, compute)
    result["source"] = source
    return result


def compare_task(lm: Any, task: str, methods: Sequence[Method], sizes: CompareSizes, *, seed: int = 0,
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


def race(lm: Any, tasks: Sequence[str], methods: Sequence[Method], sizes: CompareSizes, seeds: Sequence[int], *,
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
    "compare_sizes",
    "compare_task",
    "library_ltv",
    "library_ltv_result",
    "race",
]
