"""What a build ran, counted from what it recorded: ``python -m ltvlib.book plan --as-run``.

The plan (:mod:`ltvlib.study.cost`) counts every LTV and every adapter run of chapter 03 to its schedule's cap, one
attempt each, since before a run nobody knows where early stopping ends it or whether it is retried. After a build,
its cache holds what each run took: a trained vector's record (:class:`~ltvlib.ltv_record.TrainingRecord`: the kept
attempt's steps, how many attempts were made and each one's best validation score) and each race run's result
(its steps and validations). This module swaps the cap for those steps, run by run, so that the count is the
arithmetic the build did rather than what its schedules allowed.

A record lists every attempt's steps (``attempt_steps``), so the count is exact. Only a record from before that
field was kept does not say the steps of an attempt that was not kept. An attempt whose best validation
score never rose above its start (every attempt of a seed starts from the same vector) ran until its patience ran
out, which the recipe fixes (under ``patience_after_gain``, to the cap); one that rose and was still not kept ran
between ``1 + patience`` epochs and the cap. For such records the count takes the lower end (never more than what
ran) and, with ``high``, the upper one, so a build's count is a range wherever such attempts were made.

Only a cold build's cache describes one build: vectors trained by anything else in the same cache (other
profiles, other tasks) are counted too. The report says how many vectors and runs it read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..flops import Shape
from .cost import Lengths, adapter_run_cost, ltv_training_cost

# ------------------------------------------------------------------------------------------------ attempts


def attempt_steps(config: Any, record: Any, *, high: bool = False) -> tuple[tuple[int, ...], int]:
    """Per attempt of an LTV run trained with ``config`` (a :class:`~ltvlib.ltv.TrainConfig`) whose training went
    as ``record`` says (a :class:`~ltvlib.ltv_record.TrainingRecord`), the optimiser steps it took, and how many
    of those are lower bounds.

    A record that lists each attempt's steps (``attempt_steps``) is read as it is, exactly. In an older one, the
    kept attempt took ``record.steps``; it is the last when the run learned (a run stops retrying once it
    learns), else the first with the best score. Another attempt that never beat its start stopped when its
    patience ran out (at the cap under ``patience_after_gain``); one that did beat it ran at least ``1 + patience``
    epochs (a lower bound) and at most the cap (counted with ``high``)."""
    recorded = tuple(int(s) for s in getattr(record, "attempt_steps", ()))
    if recorded:  # the trainer recorded every attempt's steps
        return recorded, 0
    per_epoch = math.ceil(config.samples_per_epoch / config.batch_size)
    cap = config.epochs * per_epoch
    scores = list(record.attempt_scores) or [record.best_val_score]
    kept = len(scores) - 1 if record.learned else scores.index(max(scores))
    steps, bounds = [], 0
    for i, score in enumerate(scores):
        if i == kept:
            steps.append(int(record.steps))
        elif not score > record.start_val_score:
            steps.append(cap if config.patience_after_gain else min(cap, config.patience * per_epoch))
        else:
            steps.append(cap if high else min(cap, (1 + config.patience) * per_epoch))
            bounds += 1
    return tuple(steps), bounds


# ------------------------------------------------------------------------------------------------ the records


@dataclass
class AsRun:
    """What a cache's records change in a plan's count: ``planned`` (those runs at their caps, one attempt each)
    and ``ran`` (as recorded), in FLOPs; the vectors and race runs read, their attempts, and how many attempts were
    counted at a lower bound (``ran_high``: with those at the cap instead)."""

    planned: float = 0.0
    ran: float = 0.0
    ran_high: float = 0.0
    vectors: int = 0
    race_runs: int = 0
    attempts: int = 0
    lower_bounds: int = 0
    skipped: int = 0
    """Records of tasks this count has no prompt lengths for (a task of the user's own, not in the registry)."""

    def floor(self, plan_flops: float, *, high: bool = False) -> float:
        """The count of a build whose plan counted ``plan_flops``, with these runs as they ran (``high``: the
        attempts known only by a lower bound at their cap)."""
        return plan_flops - self.planned + (self.ran_high if high else self.ran)


def _config(fields: dict[str, Any]) -> Any:
    """A :class:`~ltvlib.ltv.TrainConfig` from a result's stored fields (fields it no longer has are dropped)."""
    from ..ltv import TrainConfig

    return TrainConfig(**{k: v for k, v in fields.items() if k in TrainConfig.__dataclass_fields__})


def _ltv_records(root: Path, model: str) -> Iterator[Any]:
    from ..ltv import LearnedTaskVector

    for path in sorted((root / "vectors" / "ltv").glob("*.safetensors")):
        ltv = LearnedTaskVector.load(path)
        if ltv.model == model:
            yield ltv


def _results(root: Path, kind: str, model: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for path in sorted((root / "results" / kind).glob("*.json")):
        entry = json.loads(path.read_text())
        config = entry.get("config", {})
        if config.get("model") == model:
            yield config, entry["value"]


def _ltv_run(c: AsRun, shape: Shape, lengths: Lengths, config: Any, layer: int, record: Any, *, n_val: int,
             shots: int = 0, positions: Sequence[int] = (-1,), unknown_retries: bool = False) -> None:
    """One LTV run's steps and validations as planned (the cap, one attempt) and as its ``record`` says
    (:func:`attempt_steps`)."""
    kw: dict[str, Any] = {"n_train": 0, "n_val": n_val, "shots": shots, "prefill": False, "rms": False,
                          "positions": tuple(positions)}
    steps, bounds = attempt_steps(config, record)
    high, _ = attempt_steps(config, record, high=True)
    # the prompts' first passes and the baseline are the same either way: both sides count them, they cancel
    c.planned += ltv_training_cost(shape, lengths, layer, config, **kw).flops
    c.ran += ltv_training_cost(shape, lengths, layer, config, attempt_steps=steps, **kw).flops
    c.ran_high += ltv_training_cost(shape, lengths, layer, config, attempt_steps=high, **kw).flops
    c.attempts += len(steps)
    c.lower_bounds += bounds + unknown_retries


def report(c: AsRun, plan_flops: float, gflops: float | None = None) -> str:
    """Two lines: what was read, and the plan's count with those runs as they ran."""
    bounds = f", {c.lower_bounds} of them counted at a lower bound" if c.lower_bounds else ""
    skipped = f"; {c.skipped} vectors of tasks outside the registry skipped" if c.skipped else ""
    seconds = (lambda f: f" ({f / gflops / 1e9:,.0f} s at {gflops:g} GFLOP/s)") if gflops else (lambda f: "")
    upper = (f" (at most {c.floor(plan_flops, high=True):.3g}{seconds(c.floor(plan_flops, high=True))})"
             if c.lower_bounds else "")
    return (f"as run: {c.vectors} trained vectors and {c.race_runs} race runs, {c.attempts} LTV attempts{bounds}"
            f"{skipped}\n  counted to their caps {c.planned:.3g} FLOPs, as they ran {c.ran:.3g}: "
            f"{plan_flops:.3g}{seconds(plan_flops)} -> {c.floor(plan_flops):.3g} FLOPs{seconds(c.floor(plan_flops))}"
            f"{upper}")


def as_run(shape: Shape, model: str, lengths: Callable[[str], Lengths], root: Path | None = None) -> AsRun:
    """The records in the cache at ``root`` (default :func:`ltvlib.paths.cache_root`) of ``model``, of shape
    ``shape``, its tasks' prompts of ``lengths``: every trained LTV (``vectors/ltv``), every adapter run of chapter
    03's race (``results/peft-compare``) and every LTV of the race (``results/peft-compare-ltv-race``). A vector
    of a task outside the registry is skipped (counted in ``skipped``)."""
    from ..ltv_record import TrainingRecord
    from ..paths import cache_root
    from ..tasks import TASKS

    root = cache_root() if root is None else root
    c = AsRun()
    for ltv in _ltv_records(root, model):
        if ltv.task not in TASKS:
            c.skipped += 1
            continue
        _ltv_run(c, shape, lengths(ltv.task), ltv.config, min(ltv.layers), ltv.training, n_val=ltv.training.val_n,
                 shots=ltv.shots, positions=ltv.positions)
        c.vectors += 1
    for config, value in _results(root, "peft-compare-ltv-race", model):
        recipe = _config(config["recipe"])
        record = TrainingRecord(steps=value["steps"], best_val_score=value["best_val_score"],
                                start_val_score=value["start_val_score"], learned=value["trained"],
                                attempt_scores=tuple(value.get("attempt_scores", ())),
                                attempt_steps=tuple(value.get("attempt_steps", ())))
        # an older result has no attempt scores: its retries are unknown, the kept attempt alone is counted
        _ltv_run(c, shape, lengths(config["task"]["name"]), recipe, shape.n_layers // 2, record,
                 n_val=config["sizes"]["n_val"], unknown_retries="attempt_scores" not in value)
        c.race_runs += 1
    for config, value in _results(root, "peft-compare", model):
        method, sizes = config["method"], config["sizes"]
        schedule = _config(sizes["schedule"])
        first = min(method["layers"]) if method["kind"] == "lora" and method["layers"] else 0
        virtual = method["virtual_tokens"] if method["kind"] == "prompt_tuning" else 0
        n_test = value["n_test"]
        kw = {"n_val": sizes["n_val"], "n_test": n_test, "eval_batch": sizes["eval_batch"]}
        ln = lengths(config["task"]["name"])
        c.planned += adapter_run_cost(shape, ln, first, virtual, schedule, **kw).flops
        ran = adapter_run_cost(shape, ln, first, virtual, schedule, steps=value["steps"],
                               validations=value["n_validations"], **kw).flops
        c.ran += ran
        c.ran_high += ran
        c.race_runs += 1
    return c


__all__ = ["AsRun", "as_run", "attempt_steps", "report"]
