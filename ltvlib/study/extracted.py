"""Cached extracted task vectors (Vanilla TV, Function Vectors) and their layer curves.

Like :mod:`ltvlib.study.ltvs`, every function is keyed by (model, task, sizes, config, seed, code version) in
the on-disk cache (:mod:`ltvlib.cache`): vectors in ``vectors/vanilla_tv`` and ``vectors/function_vector``,
accuracies in ``results/extracted-curve``. Later chapters get the same vectors by calling the same function.

How much an extraction spends is the run's (``RunSizes.vanilla_tv`` and ``.function_vector``, set per chapter
parameter by :mod:`ltvlib.study.plans`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..baselines.function_vector import FunctionVector, FunctionVectorConfig, extract_function_vector
from ..baselines.vanilla_tv import (
    Template,
    VanillaTaskVector,
    VanillaTVConfig,
    extract_vanilla_tv,
    layer_accuracies,
    select_layer,
    vanilla_task,
)
from ..cache import cache_path, cached_file, cached_json, dependency_hash, task_key
from ..evaluate import EVALSET_BUDGET, MEMO_EVALSET_BYTES, EvalSet, evaluate
from ..memo import memo
from ..sites import check_layer
from ..stats import Estimate
from ..tasks import get_task
from .ltvs import RunSizes, sweep_with_middle, task_contrast, task_mean, task_mean_difference, task_splits

if TYPE_CHECKING:
    from ..models import LoadedModel

Method = Literal["vanilla_tv", "vanilla_tv_difference", "function_vector"]
METHODS: tuple[str, ...] = ("vanilla_tv", "vanilla_tv_difference", "function_vector")


def cached_vanilla_tv(
    lm: LoadedModel, task: str, run_sizes: RunSizes, *, config: VanillaTVConfig | None = None, seed: int = 0,
    select_layers: Sequence[int] | None = None,
) -> VanillaTaskVector:
    """The Vanilla TV of ``task`` from the training split at ``run_sizes``, its layer chosen on the validation split
    over ``select_layers`` (default: every layer). Cached in ``vectors/vanilla_tv``."""
    config = replace(config or run_sizes.vanilla_tv, seed=seed)
    splits = task_splits(task, run_sizes)
    layers = sorted({check_layer(l, lm.n_layers) for l in (select_layers or range(lm.n_layers))})
    key = {"model": lm.name, "task": task_key(task), "config": asdict(config), "n_train": len(splits.train),
           "n_val": len(splits.validation), "select_layers": layers, "source": dependency_hash(__name__)}

    def compute() -> VanillaTaskVector:
        tv = extract_vanilla_tv(lm, task, splits.train, config)
        select_layer(lm, tv, splits.validation, layers=layers)
        return tv

    # a damaged file (e.g. truncated in a copied cache) is reported in one line and extracted again
    return cached_file(cache_path("vanilla_tv", key, ".safetensors"), compute, load=VanillaTaskVector.load,
                       save=lambda tv, path: tv.save(path))


def cached_function_vector(
    lm: LoadedModel, task: str, run_sizes: RunSizes, *, config: FunctionVectorConfig | None = None, seed: int = 0
) -> FunctionVector:
    """The Function Vector of ``task`` from the training split at ``run_sizes``. Cached in
    ``vectors/function_vector``."""
    config = replace(config or run_sizes.function_vector, seed=seed)
    splits = task_splits(task, run_sizes)
    key = {"model": lm.name, "task": task_key(task), "config": asdict(config), "n_train": len(splits.train),
           "source": dependency_hash(__name__)}
    return cached_file(cache_path("function_vector", key, ".safetensors"),
                       lambda: extract_function_vector(lm, task, splits.train, config), load=FunctionVector.load,
                       save=lambda fv, path: fv.save(path))


def extracted_test_set(lm: LoadedModel, task: str, run_sizes: RunSizes, template: Template) -> EvalSet:
    """The test queries of ``task`` (the run's split) as zero-shot prompts in ``template``'s format, on which the
    extracted vectors are scored (the last prompt token's tail cached).

    Evaluation prompts (with their cached prefixes) are shared by every method and layer of a task; the model's
    memo (:mod:`ltvlib.memo`) keeps the last two, within :data:`~ltvlib.evaluate.MEMO_EVALSET_BYTES` shared with
    the LTVs' test sets (:data:`~ltvlib.evaluate.EVALSET_BUDGET`)."""
    splits = task_splits(task, run_sizes)
    return memo(lm, "extracted.evalsets", (task, template, tuple(splits.test)),
                lambda: EvalSet(lm, vanilla_task(task, template), splits.test, tail=1), keep=2,
                max_bytes=MEMO_EVALSET_BYTES, nbytes=lambda es: es.nbytes, budget=EVALSET_BUDGET)


def _summary(r: Any) -> dict[str, Any]:
    return {"accuracy": r.accuracy, "label_accuracy": r.label_accuracy, "n": r.n, "correct": list(r.correct)}


def extracted_curve(
    lm: LoadedModel, task: str, run_sizes: RunSizes, method: Method, layers: Sequence[int] | None, *, seed: int = 0,
    template: Template = "task",
) -> dict[str, Any]:
    """Test accuracy of an extracted vector injected at each of ``layers`` (cached).

    Args:
        layers: injection layers (block outputs); None = the layer the Vanilla TV chose on validation data.
        method: ``"vanilla_tv"`` (replace the last-token state leaving block ``l``), ``"vanilla_tv_difference"``
            (add ICL minus zero-shot state there) or ``"function_vector"`` (add the FV there).
        template: the prompt format of the Vanilla TV's ICL prompts and of the zero-shot test prompts:
            ``"task"`` (the paper's ``Q: {x}\\nA:``, shared with the LTVs) or ``"hendel"`` (``example:{x}->``).
            Function vectors always use the task's template (Todd et al.'s ``Q:/A:`` format).

    Returns:
        ``{"layers": {str(layer): {"accuracy", "label_accuracy", "n", "correct"}}, "zero_shot": {...},
        "chosen_layer", "seconds"}``; ``correct`` is per test query, in split order (for paired comparisons);
        ``chosen_layer`` is the Vanilla TV's validation choice among the run's sweep layers and the middle
        layer (None for FVs).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    if method == "function_vector" and template != "task":
        raise ValueError("function vectors use the task's own template; pass template='task'")
    if layers is None and method == "function_vector":
        raise ValueError("layers=None (the validation-chosen layer) exists for Vanilla TVs only")
    layers = None if layers is None else [check_layer(l, lm.n_layers) for l in layers]
    get_task(task)
    n_test = len(task_splits(task, run_sizes).test)
    if method == "function_vector":
        config: Any = replace(run_sizes.function_vector, seed=seed)
    else:
        config = replace(run_sizes.vanilla_tv, seed=seed, template=template,
                         form="replace" if method == "vanilla_tv" else "difference")
    key = {"model": lm.name, "task": task_key(task), "method": method, "layers": layers, "config": asdict(config),
           "n_train": run_sizes.n_train, "n_val": run_sizes.n_val, "n_test": n_test,
           "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        es = extracted_test_set(lm, task, run_sizes, template)
        if method == "function_vector":
            assert layers is not None  # layers=None with function vectors raised above
            fv = cached_function_vector(lm, task, run_sizes, config=config, seed=seed)
            res = {l: evaluate(es, fv.edits(l)) for l in layers}
            chosen, seconds, extra = None, fv.seconds, {"heads": [list(h) for h in fv.heads], "fv_layer": fv.layer}
        else:
            # one extraction serves both forms: the key of the stored vector ignores the form
            # the layer is chosen among the run's sweep layers and the middle layer
            candidates = sweep_with_middle(lm.n_layers, run_sizes)
            tv = cached_vanilla_tv(lm, task, run_sizes, config=replace(config, form="replace"), seed=seed,
                                    select_layers=candidates)
            if layers is None:
                assert tv.layer is not None  # select_layers chose it
                at = [tv.layer]
            else:
                at = layers
            res = layer_accuracies(es, tv, at, config.form)
            chosen, seconds, extra = tv.layer, tv.seconds, {}
        return {"layers": {str(l): _summary(r) for l, r in res.items()}, "zero_shot": _summary(evaluate(es)),
                "chosen_layer": chosen, "seconds": seconds, **extra}

    return cached_json("extracted-curve", key, compute)


# --------------------------------------------------------------------------- learned against extracted, paired

EXTRACTED_LABELS: dict[str, str] = {
    "vanilla_tv": "Vanilla TV (replace)",
    "vanilla_tv_difference": "Vanilla TV (difference)",
    "function_vector": "FV",
}
VANILLA_FORMS: tuple[str, ...] = ("vanilla_tv", "vanilla_tv_difference")


def better_vanilla_form(extracted: Mapping[tuple[str, str, int], Any], tasks: Sequence[str], layer: int) -> str:
    """The Vanilla TV form (replace or difference) with the higher task-average test accuracy at ``layer``.

    ``extracted`` maps (method, task, layer) to per-query correctness. Choosing the better form on the test
    queries favours the baseline, so a comparison against it can only understate the LTV's lead."""
    def average(method: str) -> float:
        return float(np.mean([np.mean(extracted[method, t, layer]) for t in tasks]))

    return max(VANILLA_FORMS, key=lambda m: (average(m), m == "vanilla_tv"))


def strongest_extracted(extracted: Mapping[tuple[str, str, int], Any], tasks: Sequence[str], layer: int) -> str:
    """FV or the better Vanilla TV form at ``layer``, whichever has the higher task-average test accuracy."""
    vanilla = better_vanilla_form(extracted, tasks, layer)
    fv = float(np.mean([np.mean(extracted["function_vector", t, layer]) for t in tasks]))
    vtv = float(np.mean([np.mean(extracted[vanilla, t, layer]) for t in tasks]))
    return "function_vector" if fv > vtv else vanilla


def compare_at_layer(
    ltv: Mapping[tuple[str, int], Any], extracted: Mapping[tuple[str, str, int], Any], tasks: Sequence[str],
    layer: int, *, seed: int = 0,
) -> dict[str, Any]:
    """The LTV against both extracted vectors at one layer, averaged over ``tasks`` and paired query by query.

    Args:
        ltv: (task, layer) -> LTV correctness, (seeds, queries) or (queries,); only vectors that trained.
        extracted: (method, task, layer) -> correctness (queries,), on the same test queries as the LTV.
        tasks: the tasks to average over (those whose LTV trained at ``layer``).
        seed: the bootstrap's seed.

    Returns:
        ``{"vanilla_form": the Vanilla TV form compared (:func:`better_vanilla_form`), "LTV", "FV",
        "Vanilla TV": task-average accuracies, "LTV − FV", "LTV − Vanilla TV": paired differences}``, each an
        :class:`~ltvlib.stats.Estimate` (stratified bootstrap: :func:`ltvlib.study.ltvs.task_contrast`).
    """
    if not tasks:
        raise ValueError(f"compare_at_layer: no task to compare at layer {layer}")
    form = better_vanilla_form(extracted, tasks, layer)
    learned = {t: ltv[t, layer] for t in tasks}
    fv = {t: extracted["function_vector", t, layer] for t in tasks}
    vtv = {t: extracted[form, t, layer] for t in tasks}
    return {
        "vanilla_form": form,
        "LTV": task_mean(learned, seed=seed),
        "FV": task_mean(fv, seed=seed),
        "Vanilla TV": task_mean(vtv, seed=seed),
        "LTV − FV": task_mean_difference(learned, fv, seed=seed),
        "LTV − Vanilla TV": task_mean_difference(learned, vtv, seed=seed),
    }


def gap_change(
    ltv: Mapping[tuple[str, int], Any], extracted: Mapping[tuple[str, str, int], Any], tasks: Sequence[str],
    late: Sequence[int], middle: int, *, seed: int = 0,
) -> Estimate:
    """How much larger the LTV's lead over the strongest extracted vector is at late layers than at the middle
    one: mean over ``late`` of (LTV − strongest extracted) minus the same at ``middle``, averaged over
    ``tasks``, with a stratified paired bootstrap interval (every term of a task on the same queries).

    The strongest extracted vector is chosen per layer (:func:`strongest_extracted`). ``tasks`` must have a
    trained LTV at every layer of ``late`` and at ``middle``.
    """
    if not late or not tasks:
        raise ValueError("gap_change: give at least one late layer and one task")
    best = {l: strongest_extracted(extracted, tasks, l) for l in (*late, middle)}
    w = 1.0 / len(late)
    # the LTV terms are trained vectors ("seeds" even with one row): a 1-seed late LTV against the middle
    # layer's 3 seeds gives a 1-seed difference; the extracted vectors are deterministic
    terms: dict[str, list[tuple[float, Any] | tuple[float, Any, str]]] = {
        t: [*((w, ltv[t, l], "seeds") for l in late), *((-w, extracted[best[l], t, l]) for l in late),
            (-1.0, ltv[t, middle], "seeds"), (1.0, extracted[best[middle], t, middle])]
        for t in tasks
    }
    return task_contrast(terms, difference=True, seed=seed)
