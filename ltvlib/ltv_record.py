"""Records of a learned task vector: how its training went (:class:`TrainingRecord`) and what a table needs to
know about it (:class:`LTVRecord`).

:class:`TrainingRecord` is the training telemetry a :class:`ltvlib.ltv.LearnedTaskVector` carries beside the
vector and its provenance (``ltv.training``): the loss and validation curve, steps, wall time, the attempts, the
step sizes used and whether the vector learned. It is written into the vector's file with it and read back
(:meth:`TrainingRecord.from_metadata`), also from files whose fields sat beside the vector's
(:meth:`TrainingRecord.from_flat_metadata`).

:class:`LTVRecord` names a vector (task, layers, positions, seed, recipe) and carries its training outcome
(``trained``: the kept vector's validation score strictly above its random start's; the two scores; the step
of the best score). It is what :class:`ltvlib.study.ltv_report.LTVLedger` reads from every vector a chapter
shows, and what chapter 03's race records of the LTVs it trains (:func:`ltvlib.analysis.peft_compare.race_ltv`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

_TUPLE_FIELDS = ("stream_rms", "effective_lr", "effective_init", "attempt_scores", "attempt_steps")


@dataclasses.dataclass(frozen=True)
class TrainingRecord:
    """How an LTV's training went (immutable: :func:`dataclasses.replace` makes a changed copy). The defaults
    describe a vector nobody trained (e.g. one built by hand): no steps, scores NaN, outcome unknown.

    Attributes:
        curve: one record per step (``step``, ``loss``, ``lr``: the first vector's effective learning rate)
            and per epoch (``epoch``, ``val_accuracy``, ``val_balanced_accuracy``, ``val_score``).
        best_val_accuracy: validation accuracy of the kept vector; start_val_accuracy: of the starting one.
        val_metric: the score early stopping compared (``"accuracy"`` or ``"balanced_accuracy"``);
            best_val_score, start_val_score: that score for the kept and the starting vector.
        steps_to_best: optimiser steps taken when the kept vector was reached (0: the starting vector).
        learned: whether the vector learned (:func:`ltvlib.ltv.learned_rule`): its validation score rose above its
            random start's, and the lower end of the 95 % Wilson interval of its validation accuracy
            (``val_accuracy_low``, over ``val_n`` queries) lies above the better of ``no_vector_val_accuracy`` (the
            validation prompts without a vector: zero-shot for a zero-shot LTV, within the labels for a
            classification task, :func:`ltvlib.ltv.no_vector_accuracy`) and ``majority_val_rate`` (the
            share of the validation queries whose answer is the most common one). False: it must not be reported
            as a learned vector. None: unknown (a file that predates the rule).
        trained: the same as ``learned`` for vectors trained under the rule (the name tables and ledgers read);
            in older files, whether the kept score was strictly above the start's (None: unknown).
        stream_rms: per row of the vectors, the stream RMS its steps were scaled by (None: absolute recipe).
        effective_lr, effective_init: per row, the peak learning rate and initial range actually used (by the
            kept attempt).
        attempts: training runs made (1, plus one per retry of ``TrainConfig.retries_without_progress``: a run
            that did not learn is retried); attempt_scores: the best validation score of each (the kept attempt is
            the last when the run learned, else the first with the best score); attempt_steps: the optimiser steps
            each took (empty in files that predate it).
        steps: optimiser steps taken; seconds: wall time of :func:`ltvlib.ltv.train_ltv`, including building the
            prompt caches, measuring the stream and every validation pass.
    """

    curve: list[dict[str, float | None]] = dataclasses.field(default_factory=list)
    best_val_accuracy: float = float("nan")
    steps: int = 0
    seconds: float = 0.0
    start_val_accuracy: float = float("nan")
    val_metric: str = "accuracy"
    best_val_score: float = float("nan")
    start_val_score: float = float("nan")
    steps_to_best: int | None = None
    trained: bool | None = None
    stream_rms: tuple[float, ...] | None = None
    effective_lr: tuple[float, ...] = ()
    effective_init: tuple[float, ...] = ()
    attempts: int = 1
    attempt_scores: tuple[float, ...] = ()
    attempt_steps: tuple[int, ...] = ()
    learned: bool | None = None
    no_vector_val_accuracy: float = float("nan")
    majority_val_rate: float = float("nan")
    val_accuracy_low: float = float("nan")
    val_n: int = 0

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> TrainingRecord:
        """The record from its JSON form (``dataclasses.asdict``; lists where tuples were)."""
        meta = dict(meta)
        for name in _TUPLE_FIELDS:
            if meta.get(name) is not None:
                meta[name] = tuple(meta[name])
        return cls(**meta)

    @classmethod
    def from_flat_metadata(cls, meta: dict[str, Any]) -> TrainingRecord:
        """The record from a vector file whose training fields sat beside the vector's own (``model``,
        ``layers``, ...): removes them from ``meta`` and returns them as a record.

        The oldest such files lack ``start_val_accuracy``, ``steps_to_best`` and ``trained``: they are derived
        from the stored curve, exactly, since those runs stopped on plain accuracy and kept the first epoch that
        beat every earlier one (``trained=None`` when the curve is empty)."""
        names = [f.name for f in dataclasses.fields(cls)]
        own = {n: meta.pop(n) for n in names if n in meta}
        if "trained" not in own:
            own.update(outcome_from_curve(own.get("curve", [])))
        return cls.from_metadata(own)


def outcome_from_curve(curve: list[dict[str, Any]]) -> dict[str, Any]:
    """``start_val_accuracy``, ``steps_to_best`` and ``trained`` (and the scores) of a run that stopped on plain
    accuracy, from its curve: the kept epoch is the first that beat every earlier one."""
    epochs = [c for c in curve if "val_accuracy" in c]
    if not epochs:
        return {"trained": None}
    start, best, at = epochs[0]["val_accuracy"], epochs[0]["val_accuracy"], 0
    for c in epochs[1:]:
        if c["val_accuracy"] > best:
            best, at = c["val_accuracy"], int(c["step"])
    return {"start_val_accuracy": start, "start_val_score": start, "best_val_score": best, "steps_to_best": at,
            "trained": best > start, "val_metric": "accuracy"}


@dataclasses.dataclass(frozen=True)
class LTVRecord:
    """One LTV's identity and training outcome. ``trained`` is None when unknown (then it does not count as
    trained); scores are fractions (NaN when unknown); ``steps_to_best`` 0 means the random start was kept."""

    task: str
    layers: tuple[int, ...]
    positions: tuple[int, ...]
    seed: int
    recipe: str
    trained: bool | None
    start_val_score: float
    best_val_score: float
    steps_to_best: int | None

    @classmethod
    def of(cls, ltv: Any) -> LTVRecord:
        """The record of a :class:`ltvlib.ltv.LearnedTaskVector` (or anything with its attributes: ``task``,
        ``layers``, ``positions``, ``seed``, ``recipe``, and its outcome in ``training``; without ``training``
        the outcome reads as unknown), or a record already (returned as an :class:`LTVRecord`)."""
        if isinstance(ltv, LTVRecord):
            return cls(**{f.name: getattr(ltv, f.name) for f in dataclasses.fields(LTVRecord)})
        training = getattr(ltv, "training", None) or TrainingRecord()
        return cls(
            task=str(ltv.task), layers=tuple(int(x) for x in ltv.layers),
            positions=tuple(int(x) for x in ltv.positions), seed=int(ltv.seed), recipe=str(ltv.recipe),
            trained=training.trained, start_val_score=float(training.start_val_score),
            best_val_score=float(training.best_val_score), steps_to_best=training.steps_to_best,
        )
