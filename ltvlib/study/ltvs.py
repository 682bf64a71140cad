"""Cached building blocks the chapters share: the run's sizes (:class:`RunSizes`), splits at those sizes, ICL
references, trained LTVs.

Every function here is keyed by (model, task with its data, sizes, seed, code version) in the on-disk cache
(:mod:`ltvlib.cache`), so a chapter re-run, or a later chapter needing the same number, reads it back.

Accuracies come back with their per-query correctness (``"correct"``, the test queries in split order), so a
chapter can put a Wilson interval on one of them, pool seeds (:func:`ltvlib.stats.seed_interval`) or compare two
methods on the same queries (:func:`ltvlib.stats.paired_bootstrap_difference`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..baselines.function_vector import FunctionVectorConfig
from ..baselines.vanilla_tv import VanillaTVConfig
from ..cache import cached_json, task_key
from ..evaluate import EVALSET_BUDGET, MEMO_EVALSET_BYTES, EvalSet, evaluate
from ..ltv import LearnedTaskVector, TrainConfig, train_ltv
from ..memo import memo
from ..stats import DEFAULT_RESAMPLES, Estimate, correctness_matrix, percentile_interval, resampled_means, rows_summary
from ..tasks import TaskSplits, get_task, load_splits

if TYPE_CHECKING:
    from ..forward import Tail
    from ..models import LoadedModel

# Bumped when the stored records gain a field (2: per-query "correct"), so an older record is not read back.
RECORD_FORMAT = 2


@dataclass(frozen=True)
class RunSizes:
    """The sizes every chapter's measurements share, as :mod:`ltvlib.study.plans` sets them for a run.

    Attributes:
        n_train, n_val: LTV training and validation queries per task (the split's first ones).
        n_test: test queries per task (None = the whole test split).
        n_test_icl: test queries of k-shot evaluations, whose prompts are long (None = the whole test split).
        icl_demo_sets: fixed demonstration blocks for k-shot evaluation (None = fresh demonstrations per query).
        recipe: the LTV training config.
        n_sweep_layers: layers of a layer sweep, evenly spread (:func:`spread_layers`; None = every layer).
        vanilla_tv, function_vector: the extraction configs of the extracted vectors (their ``template`` and
            ``seed`` are set per call where a chapter says so).
    """

    n_train: int
    n_val: int
    n_test: int | None
    n_test_icl: int | None
    icl_demo_sets: int | None
    recipe: TrainConfig
    n_sweep_layers: int | None
    vanilla_tv: VanillaTVConfig
    function_vector: FunctionVectorConfig


def spread_layers(n_layers: int, k: int | None) -> list[int]:
    """``k`` evenly spread layers from 0 to ``n_layers - 1`` (every layer for ``k`` None or ``k >= n_layers``)."""
    if k is None or k >= n_layers:
        return list(range(n_layers))
    return sorted({round(i * (n_layers - 1) / (k - 1)) for i in range(k)})


def sweep_with_middle(n_layers: int, run_sizes: RunSizes) -> list[int]:
    """The run's sweep layers (:func:`spread_layers`) and the middle layer ``n_layers // 2``: the layers among
    which a Vanilla TV's layer is chosen, and chapter 01's layers of the extracted vectors."""
    return sorted(set(spread_layers(n_layers, run_sizes.n_sweep_layers)) | {n_layers // 2})


def task_splits(task: str, run_sizes: RunSizes, *, icl: bool = False) -> TaskSplits:
    """The task's splits at ``run_sizes`` (the split itself is seeded with 0 and never moves)."""
    splits = load_splits(task, seed=0, n_train=run_sizes.n_train, n_val=run_sizes.n_val)
    n_test = run_sizes.n_test_icl if icl else run_sizes.n_test
    if n_test is not None:
        splits = TaskSplits(splits.task, splits.train, splits.validation, splits.test[:n_test], splits.seed)
    return splits


def icl_accuracy(lm: LoadedModel, task: str, shots: int, run_sizes: RunSizes, *, seed: int = 0) -> dict[str, Any]:
    """First-token (and label) accuracy of ``shots``-shot prompts on the test split; 0 shots = zero-shot.

    Demonstrations come from the training split; with ``run_sizes.icl_demo_sets`` they are drawn as that many
    fixed blocks shared by the queries in turn, otherwise fresh for every query.
    """
    splits = task_splits(task, run_sizes, icl=shots > 0)
    key = {"what": "icl", "model": lm.name, "task": task_key(task), "shots": shots, "n_test": len(splits.test),
           "n_train": len(splits.train), "demo_sets": run_sizes.icl_demo_sets, "seed": seed, "format": RECORD_FORMAT}

    def compute() -> dict[str, Any]:
        es = EvalSet(lm, task, splits.test, shots=shots, demo_pool=splits.train, seed=seed,
                     demo_sets=run_sizes.icl_demo_sets if shots else None, cache_rows=False)
        r = evaluate(es)
        return {"accuracy": r.accuracy, "label_accuracy": r.label_accuracy, "n": r.n, "correct": list(r.correct)}

    return cached_json("icl", key, compute)


def trained_ltv(
    lm: LoadedModel, task: str, run_sizes: RunSizes, *, layers: list[int] | None = None, positions: tuple[int, ...] = (-1,),
    shots: int = 0, seed: int = 0, progress: bool = False,
) -> LearnedTaskVector:
    """The LTV of ``task`` trained with ``run_sizes.recipe`` on the first ``n_train``/``n_val`` queries:
    :func:`ltvlib.ltv.train_ltv` with ``cache=True``."""
    return train_ltv(lm, task, layers=layers, positions=positions, shots=shots, recipe=run_sizes.recipe,
                     seed=seed, n_train=run_sizes.n_train, n_val=run_sizes.n_val, cache=True, progress=progress)


def trained_ltvs(
    lm: LoadedModel, task: str, run_sizes: RunSizes, seeds: Sequence[int], *, layers: list[int] | None = None,
    positions: tuple[int, ...] = (-1,), shots: int = 0, progress: bool = False,
) -> list[LearnedTaskVector]:
    """One :func:`trained_ltv` per seed, the seeds trained together (:func:`trained_ltv_sets` of one task)."""
    return trained_ltv_sets(lm, [task], run_sizes, seeds, layers=layers, positions=positions, shots=shots,
                            progress=progress)[task]


def trained_ltv_sets(
    lm: LoadedModel, tasks: Sequence[str], run_sizes: RunSizes, seeds: Sequence[int], *,
    layers: list[int] | None = None, positions: tuple[int, ...] = (-1,), shots: int = 0, progress: bool = False,
) -> dict[str, list[LearnedTaskVector]]:
    """Every task's LTVs at the same layers and positions, one per seed, as :func:`trained_ltv` gives them: those
    not cached are trained together (:func:`ltvlib.ltv.train_ltv` with a list of tasks and ``seeds``: with
    zero-shot prompts every (task, seed) run's queries are rows of one step). Task -> the LTVs in seed order."""
    if not tasks:
        return {}
    got = train_ltv(lm, list(tasks), seeds=list(seeds), layers=layers, positions=positions, shots=shots,
                    recipe=run_sizes.recipe, n_train=run_sizes.n_train, n_val=run_sizes.n_val, cache=True,
                    progress=progress)
    return dict(zip(tasks, got))


def trained_ltvs_by_layer(
    lm: LoadedModel, layers_of: Mapping[str, Sequence[int]], run_sizes: RunSizes,
    seeds_at: Callable[[int], Sequence[int]] | Sequence[int],
) -> dict[tuple[str, int], list[LearnedTaskVector]]:
    """The LTVs of a layer sweep, one vector per layer: ``(task, layer) -> LTVs`` (one per seed) for every layer of
    ``layers_of[task]``, with the seeds ``seeds_at(layer)`` (or the same seeds everywhere). The tasks that share
    a layer are trained together (:func:`trained_ltv_sets`), from the lowest layer up, so that the prompt store's
    caches built for the first layer serve every later one."""
    at: dict[int, list[str]] = {}
    for task, layers in layers_of.items():
        for layer in layers:
            at.setdefault(int(layer), []).append(task)
    out: dict[tuple[str, int], list[LearnedTaskVector]] = {}
    for layer in sorted(at):
        seeds = seeds_at(layer) if callable(seeds_at) else seeds_at
        got = trained_ltv_sets(lm, at[layer], run_sizes, seeds, layers=[layer])
        out |= {(task, layer): vs for task, vs in got.items()}
    return {(t, int(l)): out[t, int(l)] for t, ls in layers_of.items() for l in ls}


# A sweep evaluates many vectors on the same test prompts: the model's memo (:mod:`ltvlib.memo`) keeps its last
# three test sets (with their cached prompt prefixes), dropping the oldest while they hold more than
# :data:`~ltvlib.evaluate.MEMO_EVALSET_BYTES` together with the extracted vectors' test sets (one budget,
# :data:`~ltvlib.evaluate.EVALSET_BUDGET`).
def ltv_test_set(
    lm: LoadedModel, task: str, splits: TaskSplits, shots: int, seed: int, demo_sets: int | None, tail: Tail
) -> EvalSet:
    """The memoised test set an LTV of ``task`` is scored on (zero-shot or ``shots``-shot prompts)."""
    return memo(lm, "ltvs.test_sets", (task, splits.test, shots, seed, demo_sets, tail),
                lambda: EvalSet(lm, get_task(task), splits.test, shots=shots, demo_pool=splits.train, seed=seed,
                                demo_sets=demo_sets, tail=tail, cache_rows=demo_sets is None), keep=3,
                max_bytes=MEMO_EVALSET_BYTES, nbytes=lambda es: es.nbytes, budget=EVALSET_BUDGET)


def ltv_accuracy(
    lm: LoadedModel, ltv: LearnedTaskVector, run_sizes: RunSizes, *, shots: int = 0, seed: int = 0
) -> dict[str, Any]:
    """Test accuracy of a trained LTV injected as trained (cached by the vector's content)."""
    splits = task_splits(ltv.task, run_sizes, icl=shots > 0)
    key = {"what": "ltv-test", "model": lm.name, "task": task_key(ltv.task), "n_test": len(splits.test), "shots": shots,
           "seed": seed, "ltv": ltv.metadata(without=("curve",)), "vector_sum": float(ltv.vectors.double().sum()),
           "format": RECORD_FORMAT}

    def compute() -> dict[str, Any]:
        from ..forward import tail_needed

        es = ltv_test_set(lm, ltv.task, splits, shots, seed, run_sizes.icl_demo_sets if shots else None,
                       tail_needed(ltv.positions))
        r = evaluate(es, ltv.edits())
        return {"accuracy": r.accuracy, "label_accuracy": r.label_accuracy, "n": r.n, "correct": list(r.correct),
                "train_seconds": ltv.training.seconds, "steps": ltv.training.steps,
                "val_accuracy": ltv.training.best_val_accuracy,
                "config": asdict(ltv.config)}

    return cached_json("ltv-test", key, compute)


# ------------------------------------------------------------------------------------ intervals over tasks
#
# The paper's headline numbers are unweighted averages over tasks whose test sets differ in size (Capital has 50
# test queries, the others 200 in `cpu`). Pooling every query would weight the tasks by their n; instead each
# resample draws every task's queries (and seeds) with replacement within that task, the same queries for every
# method of the task (the pairing), and averages the per-task results: a stratified version of
# :func:`ltvlib.stats.seed_interval` and :func:`ltvlib.stats.paired_bootstrap_difference`.


def correct_matrix(records: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Per-query correctness of one method, one row per record (per seed), as a (seeds, queries) 0/1 array.

    Raises:
        ValueError: no records, a record without ``correct`` (a result cached before it was stored), or
            records of different lengths (they must be evaluated on the same queries).
    """
    if not records:
        raise ValueError("correct_matrix: give at least one record")
    rows = []
    for r in records:
        if "correct" not in r:
            raise ValueError("correct_matrix: a record has no per-query 'correct' (recompute it with this library)")
        rows.append([bool(c) for c in r["correct"]])
    if len({len(r) for r in rows}) != 1:
        raise ValueError(f"correct_matrix: records on different queries (lengths {sorted({len(r) for r in rows})})")
    return np.asarray(rows, dtype=np.float64)


def task_contrast(
    terms: Mapping[str, Sequence[tuple[float, Any] | tuple[float, Any, str]]],
    *,
    difference: bool = True,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> Estimate:
    """The average over tasks of a weighted sum of methods' accuracies, with a stratified bootstrap interval.

    Args:
        terms: task -> ``[(weight, correct), ...]`` or ``[(weight, correct, rows), ...]``; ``correct`` is
            per-query correctness of one method on that task, shape (queries,) or (seeds, queries), every method
            of a task on the same queries; ``rows`` says what its rows are (:data:`ltvlib.stats.ROW_KINDS`,
            default ``"auto"``). E.g. ``{t: [(1, ltv[t]), (-1, fv[t])]}`` is the task-average LTV minus FV.
        difference: the result is a difference (printed in points, with a sign).
        n_resamples, confidence, seed: as in :func:`ltvlib.stats.paired_bootstrap_difference`.

    Returns:
        An :class:`~ltvlib.stats.Estimate`: value the exact weighted average, ``n`` the test queries of all tasks,
        ``seeds`` and ``draws`` from :func:`ltvlib.stats.rows_summary` over every term of every task (a
        deterministic method does not lower the seeds), method ``"stratified bootstrap"``.
    """
    if not terms:
        raise ValueError("task_contrast: give at least one task")
    if int(n_resamples) != n_resamples or n_resamples < 100:
        raise ValueError(f"n_resamples must be an integer >= 100, got {n_resamples!r}")
    rng = np.random.default_rng(seed)
    draws = np.zeros(int(n_resamples))
    value, n, sides = 0.0, 0, []
    for task, raw_parts in terms.items():
        if not raw_parts:
            raise ValueError(f"task_contrast: task {task!r} has no terms")
        parts = [(p[0], p[1]) for p in raw_parts]
        kinds = [p[2] if len(p) > 2 else "auto" for p in raw_parts]
        mats = [correctness_matrix(c, f"{task} term {i}") for i, (_, c) in enumerate(parts)]
        queries = {m.shape[1] for m in mats}
        if len(queries) != 1:
            raise ValueError(f"task_contrast: the terms of {task!r} are on different queries ({sorted(queries)})")
        resampled = resampled_means(mats, int(n_resamples), rng)
        draws += sum(float(w) * d for (w, _), d in zip(parts, resampled)) / len(terms)
        value += sum(float(w) * float(m.mean()) for (w, _), m in zip(parts, mats)) / len(terms)
        n += queries.pop()
        sides += [(m.shape[0], k) for m, k in zip(mats, kinds)]
    lo, hi = percentile_interval(draws, confidence)
    n_seeds, n_draws = rows_summary(sides)
    return Estimate(value, min(lo, value), max(hi, value), n=n, seeds=n_seeds, confidence=confidence,
                    method="stratified bootstrap", resamples=int(n_resamples), difference=difference,
                    draws=n_draws)


def task_mean(correct: Mapping[str, Any], **kwargs: Any) -> Estimate:
    """The unweighted average accuracy over tasks (task -> (seeds, queries) correctness), stratified bootstrap."""
    return task_contrast({t: [(1.0, c)] for t, c in correct.items()}, difference=False, **kwargs)


def task_mean_difference(a: Mapping[str, Any], b: Mapping[str, Any], **kwargs: Any) -> Estimate:
    """Average over tasks of method ``a`` minus method ``b`` on the same queries (paired within each task)."""
    if set(a) != set(b):
        raise ValueError(f"task_mean_difference: different tasks {sorted(a)} and {sorted(b)}")
    return task_contrast({t: [(1.0, a[t]), (-1.0, b[t])] for t in a}, difference=True, **kwargs)


def estimate_cell(est: Estimate | None, digits: int = 1) -> str:
    """A table cell: ``"43.5 ± 6.9"`` (percent, or ``"+12.0 ± 8.1"`` points for a difference; the ± is the larger
    distance to a bound of the 95 % interval); an en dash for None. n and seeds go in their own columns."""
    if est is None:
        return "–"
    sign = "+" if est.difference else ""
    return f"{100 * est.value:{sign}.{digits}f} ± {100 * est.half_width:.{digits}f}"
