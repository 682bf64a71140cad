"""The race of chapter 03, cached: :func:`compare_method` (one method, task and seed), :func:`race`, and the LTV
as the rest of the book trains it (:func:`library_ltv`). Its sizes per run are :func:`ltvlib.study.plans.compare_sizes`.

The comparison machinery (methods, trainees, the shared schedule and stopping rule, measurements) is
:mod:`ltvlib.analysis.peft_compare`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
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
from ..ltv import LearnedTaskVector, TrainConfig, train_ltv
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



# -------------------------------------------------------------------------------- the race to convergence

#: Every method's learning-rate grid: multiples of its own default (:data:`ltvlib.analysis.peft_compare.LTV_LR`,
#: ``PROMPT_LR``, ``PREFIX_LR``, ``LORA_LR``; the LTV's recipe's), the same three for every method.
LR_GRID: tuple[float, ...] = (1 / 3, 1.0, 3.0)


def ltv_race_run(lm: LoadedModel, task: str, sizes: CompareSizes, recipe: TrainConfig, *, seed: int = 0,
                 lr_scale: float = 1.0) -> dict[str, Any]:
    """One LTV of the race, trained by the library's own trainer (:func:`ltvlib.ltv.train_ltv`: its early stopping,
    its fast path) with ``recipe``'s learning rate times ``lr_scale``, on the race's splits
    (:func:`ltvlib.analysis.peft_compare.compare_splits`), then tested on the race's test queries.

    The vector: one ``(d,)`` added to the residual stream entering the middle block at the last prompt position.
    Returns a run in the race's format (:func:`ltvlib.analysis.peft_compare.train_and_measure`'s keys that the
    chapter reads): ``method`` ``"ltv"``, ``lr``, ``lr_scale``, ``trainable_params``, ``params_in_d``,
    ``test_accuracy``, ``test_correct``, ``n_test``, ``best_val_accuracy``, ``best_val_score``,
    ``start_val_score``, ``trained`` (the library's learned rule), ``stopped_by_rule`` (it stopped before the
    sample cap), ``steps`` (the kept attempt's), ``attempts``, ``attempt_scores`` (each attempt's best validation
    score: a run that did not learn is retried at a smaller step), ``attempt_steps`` (each attempt's steps),
    ``steps_to_best``, ``samples_to_best``, ``samples_seen``, ``train_seconds`` (the
    trainer's wall time, validation included), ``curve`` (per validation: ``samples``, ``wall_seconds``
    estimated from the run's mean seconds per step, ``val_accuracy``), ``peak_train_mb`` (CUDA only) and
    ``seed``. Cached by model, task, sizes, recipe, scale, seed and this module's code."""
    from ..ltv import train_ltv

    key = {"what": "race-ltv"} | _key(lm, task, Method("ltv", "ltv", recipe.lr * lr_scale), sizes, seed) | {
        "recipe": asdict(recipe), "lr_scale": lr_scale}

    def compute() -> dict[str, Any]:
        import torch

        splits = compare_splits(task, sizes)
        config = replace(recipe, lr=recipe.lr * lr_scale)
        cuda = lm.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(lm.device)
        ltv = train_ltv(lm, task, layers=[lm.middle_layer], recipe=config, seed=seed, splits=splits, cache=False,
                        progress=False)
        peak = torch.cuda.max_memory_allocated(lm.device) / 2**20 if cuda else None
        r = evaluate(EvalSet(lm, task, splits.test), ltv.edits())
        t = ltv.training
        per_step = t.seconds / max(t.steps, 1)
        vals = [c for c in t.curve if "val_accuracy" in c]
        samples_per_step = config.samples_per_epoch / math.ceil(config.samples_per_epoch / config.batch_size)
        curve = []
        for c in vals:
            step = int(c["step"] or 0)  # validation entries always carry the step count
            curve.append({"epoch": c["epoch"], "step": step, "samples": round(step * samples_per_step),
                          "wall_seconds": step * per_step, "train_seconds": step * per_step,
                          "val_accuracy": c["val_accuracy"], "val_score": c["val_score"]})
        steps_to_best = int(t.steps_to_best or 0)
        return {
            "method": "ltv", "kind": "ltv", "budget": "equal", "lr": config.lr, "lr_scale": lr_scale,
            "trainable_params": int(ltv.vectors.numel()), "params_in_d": "1d", "test_accuracy": r.accuracy,
            "test_label_accuracy": r.label_accuracy, "n_test": r.n, "test_correct": [int(c) for c in r.correct],
            "best_val_accuracy": t.best_val_accuracy, "best_val_score": t.best_val_score,
            "start_val_score": t.start_val_score, "trained": bool(t.learned), "stopped_by_rule": len(vals) - 1 < config.epochs,
            "steps": t.steps, "attempts": t.attempts, "attempt_scores": list(t.attempt_scores),
            "attempt_steps": list(t.attempt_steps),
            "steps_to_best": steps_to_best, "samples_to_best": round(steps_to_best * samples_per_step),
            "samples_seen": round(t.steps * samples_per_step), "seconds_to_best": steps_to_best * per_step,
            "train_seconds": t.seconds, "wall_seconds": t.seconds, "curve": curve, "peak_train_mb": peak,
            "seed": seed,
        }

    return cached_json("peft-compare-ltv-race", key, compute)


def tuned_race(
    lm: LoadedModel, tasks: Sequence[str], methods: Sequence[Method], sizes: CompareSizes, seeds: Sequence[int], *,
    ltv_recipe: TrainConfig, grid: Sequence[float] = LR_GRID, memory: bool | None = None,
) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], dict[str, dict[str, dict[float, float]]]]:
    """The race to convergence: every method trains until validation stops improving (the LTV by
    :func:`ltv_race_run`, the adapters by :func:`compare_method` under ``sizes``' rule), under one sample cap.

    Each method's learning rate is chosen on validation: its default times each ``grid`` value, trained with the
    first seed; the one with the best validation score is kept (a tie keeps the default), and the other seeds
    train at it. The first seed's run at the chosen rate is reused.

    Returns:
        ``(results, grids)``: ``results[task][method]`` the runs at the chosen rate, one per seed in order (every
        run of a task tested on the same queries, so their ``test_correct`` pair up); ``grids[task][method]``
        maps each grid value to the first seed's best validation score.
    """
    if not seeds:
        raise ValueError("tuned_race: give at least one seed")
    if 1.0 not in grid:
        raise ValueError(f"the learning-rate grid must hold 1.0 (each method's default), got {tuple(grid)}")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    grids: dict[str, dict[str, dict[float, float]]] = {}
    for task in tasks:
        name = get_task(task).name
        prepared: list[Prepared] = []  # the prompts, built once per task when an adapter first needs them

        def run(method: Method, scale: float, seed: int, name: str = name, prepared: list[Prepared] = prepared
                ) -> dict[str, Any]:
            if method.kind == "ltv":
                return ltv_race_run(lm, name, sizes, ltv_recipe, seed=seed, lr_scale=scale)
            if not prepared:
                prepared.append(prepare(lm, compare_splits(name, sizes)))
            r = compare_method(lm, name, replace(method, lr=method.lr * scale), sizes, seed=seed,
                               prepared=prepared[0], memory=memory)
            return r | {"method": method.name, "lr_scale": scale}

        results[task], grids[task] = {}, {}
        for method in methods:
            tried = {scale: run(method, scale, seeds[0]) for scale in grid}
            grids[task][method.name] = {s: r["best_val_score"] for s, r in tried.items()}
            chosen = max(grid, key=lambda s: (tried[s]["best_val_score"], s == 1.0))
            results[task][method.name] = [tried[chosen]] + [run(method, chosen, s) for s in seeds[1:]]
    return results, grids


__all__ = [
    "LR_GRID",
    "compare_method",
    "compare_task",
    "library_ltv",
    "library_ltv_result",
    "ltv_race_run",
    "race",
    "tuned_race",
]
