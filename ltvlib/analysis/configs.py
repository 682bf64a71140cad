"""The configs of the analyses that a chapter's plan sets: how the linear map is fitted (:class:`LinearityConfig`)
and the sizes and early-stopping rule of the comparison with ``peft`` adapters (:class:`CompareSizes`,
:class:`StoppingRule`).

A leaf module: it holds plain frozen dataclasses and imports no analysis, so :mod:`ltvlib.study.plans` can build
them without importing the analyses themselves, and a chapter's code closure (its cache key and stamp) holds only
the analyses the chapter runs. Each class is re-exported by the module that uses it
(:mod:`ltvlib.analysis.linearity`, :mod:`ltvlib.analysis.peft_compare`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..ltv import TrainConfig
    from ..tasks import Task

__all__ = ["CompareSizes", "LinearityConfig", "StoppingRule"]


@dataclass(frozen=True)
class LinearityConfig:
    """How the linear map is fitted and checked. The paper does not state its noise law or lambdas; these
    are ours.

    Attributes:
        n_queries: training-split queries the shifts are measured on.
        fit_factor: fitting pairs per dimension: ``ceil(fit_factor * d)`` (at least ``d``).
        n_heldout: held-out pairs (fresh perturbations, same law) for the ``R^2``.
        lambdas: perturbation sizes relative to ``|theta|`` (``x = theta + lambda * eps``, ``E|eps| ~ |theta|``),
            cycled over the pairs. Small enough that the response stays close to its first order (on
            SmolLM2 the second-order part of ``shift(theta +- lambda eps)`` is about 11 % at 0.2, 55 % at 1).
        ridge: relative ridge, ``ridge * trace(X^T X) / d`` added to ``X^T X`` (chosen on held-out ``R^2`` of
            one SmolLM2 layer among 1e-6, 1e-2, 1e-1).
        scales: ``a`` for the homogeneity check (shift of ``a * theta`` against ``a``).
        seed: seeds the perturbations and the additivity partner.
    """

    n_queries: int = 32
    fit_factor: float = 2.0
    n_heldout: int = 256
    lambdas: tuple[float, ...] = (0.1, 0.2, 0.3)
    ridge: float = 1e-2
    scales: tuple[float, ...] = (-1.0, 0.5, 1.0, 2.0, 4.0)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.fit_factor < 1:
            raise ValueError(f"fit_factor {self.fit_factor} < 1: W needs at least d perturbations")
        if not self.lambdas or any(x < 0 for x in self.lambdas):
            raise ValueError(f"lambdas must be non-empty and non-negative, got {self.lambdas}")
        if self.n_queries < 1 or self.n_heldout < 2:
            raise ValueError(f"need n_queries >= 1 and n_heldout >= 2, got {self.n_queries}, {self.n_heldout}")


@dataclass(frozen=True)
class StoppingRule:
    """One early-stopping rule shared by every method of a comparison.

    Attributes:
        val_every: samples between validations (a validation also closes the budget).
        patience: stop after this many validations without a better score.
        metric: ``"auto"`` (balanced accuracy for classification tasks, accuracy otherwise), ``"accuracy"``
            or ``"balanced_accuracy"`` (:func:`ltvlib.evaluate.balanced_accuracy`).
        after_gain: count patience only once the score has beaten the starting parameters' score.
    """

    val_every: int
    patience: int
    metric: str = "auto"
    after_gain: bool = False

    def __post_init__(self) -> None:
        from ..ltv import EARLY_STOPPING

        if self.val_every < 1 or self.patience < 1:
            raise ValueError(f"val_every and patience must be >= 1, got {self.val_every} and {self.patience}")
        if self.metric not in EARLY_STOPPING:
            raise ValueError(f"unknown metric {self.metric!r}; allowed: {', '.join(EARLY_STOPPING)}")

    @classmethod
    def from_config(cls, config: TrainConfig) -> StoppingRule:
        """The rule ``train_ltv`` applies with ``config``: a validation per epoch, its patience and score."""
        return cls(config.samples_per_epoch, config.patience, config.early_stopping, config.patience_after_gain)

    def metric_for(self, task: Task) -> str:
        if self.metric != "auto":
            return self.metric
        return "balanced_accuracy" if task.kind == "classification" else "accuracy"

    def checkpoints(self, batches: Sequence[Sequence[int]]) -> list[int]:
        """Indices of the batches after which validation runs: the first batch that brings the samples seen
        to a multiple of ``val_every`` or past it, and the last batch."""
        out, seen, due = [], 0, self.val_every
        for b, batch in enumerate(batches):
            seen += len(batch)
            if seen >= due or b == len(batches) - 1:
                out.append(b)
                while due <= seen:
                    due += self.val_every
        return out


@dataclass(frozen=True)
class CompareSizes:
    """Data sizes and training schedule of a comparison.

    Attributes:
        n_train: training queries (``load_splits``); n_val: validation queries used (the first of the split's
            400); n_test: test queries (None = all).
        schedule: batch size, epochs, samples per epoch, patience, weight decay and LTV initialisation;
            its ``lr`` is the LTV's (every method has its own, see :class:`Method`).
        eval_batch: prompts per inference batch.
        memory: measure peak memory.
        rule: the early-stopping rule every method shares (None: the schedule's own,
            :meth:`StoppingRule.from_config`, which is also the rule
            :func:`ltvlib.study.peft_compare.library_ltv`'s ``train_ltv`` applies).
    """

    n_train: int
    n_val: int
    n_test: int | None
    schedule: TrainConfig
    eval_batch: int = 64
    memory: bool = True
    rule: StoppingRule | None = None

    def stopping_rule(self) -> StoppingRule:
        return self.rule or StoppingRule.from_config(self.schedule)
