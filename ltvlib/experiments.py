"""Cached building blocks the chapters share: splits per profile, ICL references, trained LTVs.

Every function here is keyed by (model, task with its data, profile sizes, seed, code version) in the on-disk cache
(:mod:`ltvlib.cache`), so a chapter re-run, or a later chapter needing the same number, reads it back.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .cache import cached_json, task_key
from .evaluate import EvalSet, evaluate
from .ltv import LearnedTaskVector, cached_ltv
from .profiles import Profile
from .tasks import TaskSplits, get_task, load_splits


def profile_splits(task: str, profile: Profile, *, icl: bool = False) -> TaskSplits:
    """The task's splits at the profile's sizes (the split itself is seeded with 0 and never moves)."""
    splits = load_splits(task, seed=0, n_train=profile.n_train, n_val=profile.n_val)
    n_test = profile.n_test_icl if icl else profile.n_test
    if n_test is not None:
        splits = TaskSplits(splits.task, splits.train, splits.validation, splits.test[:n_test], splits.seed)
    return splits


def icl_accuracy(lm: Any, task: str, shots: int, profile: Profile, *, seed: int = 0) -> dict[str, Any]:
    """First-token (and label) accuracy of ``shots``-shot prompts on the test split; 0 shots = zero-shot.

    Demonstrations come from the training split; with ``profile.icl_demo_sets`` they are drawn as that many
    fixed blocks shared by the queries in turn, otherwise fresh for every query.
    """
    splits = profile_splits(task, profile, icl=shots > 0)
    key = {"what": "icl", "model": lm.name, "task": task_key(task), "shots": shots, "n_test": len(splits.test),
           "n_train": len(splits.train), "demo_sets": profile.icl_demo_sets, "seed": seed}

    def compute() -> dict[str, Any]:
        es = EvalSet(lm, task, splits.test, shots=shots, demo_pool=splits.train, seed=seed,
                     demo_sets=profile.icl_demo_sets if shots else None, cache_rows=False)
        r = evaluate(es)
        return {"accuracy": r.accuracy, "label_accuracy": r.label_accuracy, "n": r.n}

    return cached_json("icl", key, compute)


def profile_ltv(
    lm: Any, task: str, profile: Profile, *, layers: list[int] | None = None, positions: tuple[int, ...] = (-1,),
    shots: int = 0, seed: int = 0, progress: bool = False,
) -> LearnedTaskVector:
    """The LTV of ``task`` trained with the profile's recipe and sizes (cached)."""
    return cached_ltv(lm, task, layers=layers, positions=positions, shots=shots, recipe=profile.recipe,
                      seed=seed, n_train=profile.n_train, n_val=profile.n_val, progress=progress)


# A sweep evaluates many vectors on the same test prompts: keep the last few test sets (with their cached
# prompt prefixes) in memory.
_TEST_SETS: dict[tuple, EvalSet] = {}


def _test_set(
    lm: Any, task: str, splits: TaskSplits, shots: int, seed: int, demo_sets: int | None, tail: int | None
) -> EvalSet:
    key = (id(lm.model), task, splits.test, shots, seed, demo_sets, tail)
    if key not in _TEST_SETS:
        while len(_TEST_SETS) >= 3:
            _TEST_SETS.pop(next(iter(_TEST_SETS)))
        _TEST_SETS[key] = EvalSet(lm, get_task(task), splits.test, shots=shots, demo_pool=splits.train, seed=seed,
                                  demo_sets=demo_sets, tail=tail, cache_rows=demo_sets is None)
    return _TEST_SETS[key]


def ltv_accuracy(lm: Any, ltv: LearnedTaskVector, profile: Profile, *, shots: int = 0, seed: int = 0) -> dict[str, Any]:
    """Test accuracy of a trained LTV injected as trained (cached by the vector's content)."""
    splits = profile_splits(ltv.task, profile, icl=shots > 0)
    key = {"what": "ltv-test", "model": lm.name, "task": task_key(ltv.task), "n_test": len(splits.test), "shots": shots,
           "seed": seed, "ltv": ltv.metadata() | {"curve": None}, "vector_sum": float(ltv.vectors.double().sum())}

    def compute() -> dict[str, Any]:
        from .runner import tail_needed

        es = _test_set(lm, ltv.task, splits, shots, seed, profile.icl_demo_sets if shots else None,
                       tail_needed(ltv.positions))
        r = evaluate(es, ltv.edits())
        return {"accuracy": r.accuracy, "label_accuracy": r.label_accuracy, "n": r.n,
                "train_seconds": ltv.seconds, "steps": ltv.steps, "val_accuracy": ltv.best_val_accuracy,
                "config": asdict(ltv.config)}

    return cached_json("ltv-test", key, compute)
